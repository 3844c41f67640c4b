"""Autograde a whole class, several submissions at once, each in its own sandboxed kernel.

Introduced in course/README.md; needs nbgrader. nbgrader's ``autograde`` grades one
submission after another; this runs one ``nbgrader autograde ASSIGNMENT --student=ID``
per submission, ``--workers`` of them at a time, from the course folder. Each is an
ordinary nbgrader run (the course's ``nbgrader_config.py``, its own sandbox, its own
kernel), and each writes only its own student's rows of the gradebook, in SQLite
transactions that wait for one another (the course's ``db_url`` sets the wait).

    python -m workbook.course.grade_class 05_assignment_quantized_autoencoder --workers 4 [--force]
"""

import argparse
import concurrent.futures
import os
import pathlib
import subprocess
import sys
import time

from workbook.core.arguments import refuse

__all__ = ["grade_class", "submitted_students"]


def submitted_students(course, assignment):
    """The ids of the students with a submission of ``assignment`` in ``course/submitted``."""
    return sorted(
        path.parent.name for path in pathlib.Path(course, "submitted").glob(f"*/{assignment}") if path.is_dir()
    )


def grade_class(course, assignment, students=None, workers=2, extra=(), env=None, log=print):
    """Autograde each student's submission, ``workers`` at a time; {student: (return code, seconds, output)}."""
    if not (isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1):
        refuse("workers", workers, "a whole number of at least 1")
    students = submitted_students(course, assignment) if students is None else list(students)

    def one(student):
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "nbgrader", "autograde", assignment, f"--student={student}", *extra],
            cwd=course,
            env=env,
            capture_output=True,
            text=True,
        )
        return result.returncode, time.perf_counter() - started, result.stdout + result.stderr

    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(one, student): student for student in students}
        for future in concurrent.futures.as_completed(futures):
            student = futures[future]
            results[student] = future.result()
            code, seconds, _ = results[student]
            log(f"{student}: {'graded' if code == 0 else 'FAILED (see its log)'} in {seconds:.0f} s")
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignment")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--student", action="append", help="grade only these (default: every submission)")
    parser.add_argument("--force", action="store_true", help="grade again what was graded before")
    args = parser.parse_args(argv)
    results = grade_class(os.getcwd(), args.assignment, args.student, args.workers, ["--force"] if args.force else [])
    failed = sorted(student for student, (code, _, _) in results.items() if code != 0)
    for student in failed:
        print(f"--- {student} ---\n{results[student][2][-3000:]}")
    print(
        f"{len(results) - len(failed)} of {len(results)} submissions graded"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
