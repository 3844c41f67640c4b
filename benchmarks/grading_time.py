"""How long nbgrader takes to autograde one submission of assignment 05, at full size.

The assignment as students get it (8,000 training images, the 300 s budget), graded with
course/nbgrader_config.py through nbgrader's own command line: the reference solution
(which trains) and the untouched release (which stops at the first answer). nbgrader
grades one submission after another, so a class takes the sum; the figure for 200
students assumes every one of them hands in a complete, training solution.
"""

import os
import pathlib
import resource
import shutil
import sys
import tempfile
import time

import nbformat

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from notebook_runner import clean_environment  # noqa: E402  (tests/ is put on the path just above)
from notebook_runner import run_nbgrader as nbgrader  # noqa: E402

ASSIGNMENT = "05_assignment_quantized_autoencoder"
CLASS_SIZE = 200


def grade_one(course, env, student):
    """(wall seconds, CPU seconds of nbgrader and its kernel) to autograde one submission."""
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    nbgrader(course, env, "autograde", ASSIGNMENT, f"--student={student}", "--force")
    wall = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)


def main():
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as folder:
        base = pathlib.Path(folder)
        course, home = base / "course", base / "home"
        course.mkdir()
        home.mkdir()
        shutil.copy(ROOT / "course" / "nbgrader_config.py", course)
        env = clean_environment(home)
        (course / "source" / ASSIGNMENT).mkdir(parents=True)
        shutil.copy(ROOT / "notebooks" / f"{ASSIGNMENT}.ipynb", course / "source" / ASSIGNMENT)
        nbgrader(course, env, "generate_assignment", ASSIGNMENT, "--force")
        for student, path in [
            ("reference", course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"),
            ("untouched", course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"),
        ]:
            folder = course / "submitted" / student / ASSIGNMENT
            folder.mkdir(parents=True)
            nbformat.write(nbformat.read(path, as_version=4), folder / f"{ASSIGNMENT}.ipynb")
        rows = []
        for student in ("reference", "untouched"):
            wall, cpu = grade_one(course, env, student)
            rows.append((student, wall, cpu))
    reference_wall = rows[0][1]
    lines = [
        "## Grading time",
        "",
        f"`nbgrader autograde` of assignment 05 at full size (8,000 training images, budget 300 s), one "
        f"submission at a time, on {os.cpu_count()} cores. CPU time is nbgrader's and its kernel's.",
        "",
        "| submission | wall time | CPU time |",
        "|---|---|---|",
    ]
    lines += [f"| {student} | {wall:.0f} s | {cpu:.0f} s |" for student, wall, cpu in rows]
    lines += [
        "",
        f"A class of {CLASS_SIZE} complete submissions: about {CLASS_SIZE * reference_wall / 3600:.1f} h "
        f"on one grader ({CLASS_SIZE} x {reference_wall:.0f} s).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(main())
