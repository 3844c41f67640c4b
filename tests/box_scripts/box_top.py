"""Move the box's folders, link in its top, and write in its own folder: what was done, what refused."""

import os

here = os.getcwd()


def write_in_work():
    with open("mine.txt", "w") as file:
        file.write("x")


for name, action in (
    ("rename work", lambda: os.rename(here, here + "-moved")),
    ("link in the top", lambda: os.symlink("/etc", os.path.join(os.path.dirname(here), "planted"))),
    ("rename home", lambda: os.rename(os.environ["HOME"], here + "/home")),
    ("write in work", write_in_work),
):
    try:
        action()
        print(name, "done")
    except OSError as error:
        print(name, type(error).__name__)
