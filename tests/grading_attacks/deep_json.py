"""After every cell from here on, part (b)'s written answers replaced by JSON nested 100,000 deep.

Appended to part (b)'s right answer.
"""

import os


def nest(result):
    os.makedirs("grading_artifacts", exist_ok=True)
    with open("grading_artifacts/b_culprit.json", "w") as file:
        file.write("[" * 100_000 + "]" * 100_000)


get_ipython().events.register("post_run_cell", nest)
