"""How long a class of assignment 05 takes to autograde, with 1, 2 and 4 graders at once.

The assignment as students get it (8,000 training images, the 300 s budget), graded with
course/nbgrader_config.py through nbgrader's own command line, each submission in its own
sandboxed kernel, its verdicts taken outside it: a small class of reference solutions
(which train) and untouched releases (which stop at the first answer), graded by
``workbook.course.grade_class`` with 1, 2 and 4 workers. Per-submission times and the speed-up
come from the same run; a class of 300 is extrapolated from the measured throughput. Memory
is measured three ways: per submission, the most its box held at once (the kernel's processes
and its files, from its control group, as the grader logs it where it may make one); the most
the verdict process held (its peak resident set, as the grader logs it after each verdict);
and for the whole grading, the peak resident set of every process it started (nbgrader, the
sandboxed kernels, the verdicts), sampled every 0.2 s.
"""

import os
import pathlib
import re
import shutil
import sys
import tempfile
import time

import nbformat

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from notebook_budgets import PeakMemory  # noqa: E402  (a benchmark beside this one)
from notebook_runner import clean_environment  # noqa: E402  (scripts/ is put on the path just above)
from notebook_runner import run_nbgrader as nbgrader  # noqa: E402

ASSIGNMENT = "05_assignment_quantized_autoencoder"
CLASS = {"reference": 2, "untouched": 2}  # submissions of each kind
WORKERS = (1, 2, 4)
CLASS_SIZE = 300


def make_course(base):
    """A course folder with the assignment generated and the class's submissions in place."""
    course, home = base / "course", base / "home"
    course.mkdir()
    home.mkdir()
    shutil.copy(ROOT / "course" / "nbgrader_config.py", course)
    shutil.copy(ROOT / "course" / "answer_key_05.py", course)  # the grader's reference, course-side only
    env = clean_environment(home)
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / f"{ASSIGNMENT}.ipynb", course / "source" / ASSIGNMENT)
    nbgrader(course, env, "generate_assignment", ASSIGNMENT, "--force")
    versions = {
        "reference": course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb",
        "untouched": course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb",
    }
    for kind, count in CLASS.items():
        for number in range(count):
            folder = course / "submitted" / f"{kind}_{number}" / ASSIGNMENT
            folder.mkdir(parents=True)
            nbformat.write(nbformat.read(versions[kind], as_version=4), folder / f"{ASSIGNMENT}.ipynb")
    return course, env


def box_peak(log):
    """The most memory (MiB) a submission's box held, from the grader's log; None if it could not measure it."""
    found = re.search(r"The box held at most (\d+) MiB of memory", log)
    return float(found.group(1)) if found else None


def verdict_peak(log):
    """The most memory (MiB) the verdict process held by the end of a submission's verdicts, from the grader's log."""
    found = re.findall(r"The verdict process held at most (\d+) MiB of memory", log)
    return max(map(float, found), default=None)


def main():
    from workbook.course.grade_class import grade_class

    rows = []
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as folder:
        course, env = make_course(pathlib.Path(folder))
        with PeakMemory(os.getpid()) as idle:
            time.sleep(1)
        baseline = idle.peak  # this process itself, before any grading
        for workers in WORKERS:
            started = time.perf_counter()
            with PeakMemory(os.getpid()) as memory:
                results = grade_class(
                    course, ASSIGNMENT, workers=workers, extra=["--force"], env=env, log=lambda _: None
                )
            wall = time.perf_counter() - started
            failed = sorted(student for student, (code, _, _) in results.items() if code != 0)
            if failed:
                raise RuntimeError(f"grading failed for {failed}:\n{results[failed[0]][2][-3000:]}")
            per_kind = {
                kind: sorted(seconds for student, (_, seconds, _) in results.items() if student.startswith(kind))
                for kind in CLASS
            }
            boxes = [box_peak(output) for _, _, output in results.values()]
            verdicts = [peak for _, _, output in results.values() if (peak := verdict_peak(output)) is not None]
            rows.append((workers, wall, per_kind, memory.peak - baseline, boxes, max(verdicts, default=None)))
    n = sum(CLASS.values())
    one = rows[0][1]
    lines = [
        "## Grading time",
        "",
        f"`python -m workbook.course.grade_class` on a class of {n} submissions of assignment 05 at full size "
        f"({CLASS['reference']} reference solutions, which train; {CLASS['untouched']} untouched releases), "
        f"each through `nbgrader autograde` in its own sandboxed kernel, with its verdicts taken outside it, "
        f"on {os.cpu_count()} cores.",
        "",
        "| workers | whole class | speed-up | one reference / one untouched (median) | per submission "
        "| peak memory of one submission's box | peak memory of the verdict process | peak memory of the grading |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for workers, wall, per_kind, peak, boxes, verdict in rows:
        medians = " / ".join(f"{times[len(times) // 2]:.0f} s" for times in per_kind.values())
        box = "not measured here (no control groups)" if None in boxes else f"{max(boxes):.0f} MiB"
        lines.append(
            f"| {workers} | {wall:.0f} s | {one / wall:.2f}x | {medians} | {wall / n:.0f} s | {box} "
            f"| {'not measured' if verdict is None else f'{verdict:.0f} MiB'} | {peak / 2**20:.0f} MiB |"
        )
    best_workers, best_wall, *_ = min(rows, key=lambda row: row[1])
    lines += [
        "",
        f"A class of {CLASS_SIZE} like this one (half training, half not): about "
        f"{CLASS_SIZE * one / n / 3600:.1f} h with one worker, {CLASS_SIZE * best_wall / n / 3600:.1f} h with "
        f"{best_workers} on this machine.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(main())
