"""Whether other folders exist in the box's view, and how much /dev/shm takes.

Arguments: the folders to look for (the kernel's own home last), then the bytes to write into /dev/shm.
"""

import os
import sys

*folders, size = sys.argv[1:]
for path in folders:
    print(os.path.exists(os.path.expanduser(path)))
try:
    with open("/dev/shm/filler", "wb") as file:
        file.write(b"x" * int(size))
    print("filled")
except OSError as error:
    print(error.strerror)
