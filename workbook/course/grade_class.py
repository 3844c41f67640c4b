"""Autograde a whole class, several submissions at once, each in its own sandboxed kernel.

Introduced in course/README.md; needs nbgrader. nbgrader's ``autograde`` grades one
submission after another; this splits the class into ``--workers`` shares and runs one
``nbgrader autograde ASSIGNMENT`` per share, side by side, from the course folder. Each is an
ordinary nbgrader run (the course's ``nbgrader_config.py``, a sandbox and a kernel of its own
for each submission) that grades its share in turn, so nbgrader and the grader's verdict
process start once per share, not once per submission. Each run writes only its own
students' rows of the gradebook, in SQLite transactions that wait for one another (the
course's ``db_url`` sets the wait). Each student's part of the log, and whether their
submission failed, are read from the lines nbgrader writes for them.

    python -m workbook.course.grade_class 05_assignment_quantized_autoencoder --workers 4 [--force]
"""

import argparse
import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys
import time

from workbook.core.arguments import check_count, refuse

__all__ = ["grade_class", "submitted_students"]


def submitted_students(course, assignment):
    """The ids of the students with a submission of ``assignment`` in ``course/submitted``."""
    return sorted(
        path.parent.name for path in pathlib.Path(course, "submitted").glob(f"*/{assignment}") if path.is_dir()
    )


def grade_class(course, assignment, students=None, workers=2, extra=(), env=None, log=print):
    """Autograde each student's submission, in ``workers`` nbgrader runs side by side.

    Returns {student: (return code, seconds, output)}: the student's own lines of their run's
    log (with the run's opening lines), the seconds from their first line to the next
    student's, and 1 for a submission nbgrader reports it could not process.
    """
    check_count("workers", workers, owner="grade_class")
    submitted = submitted_students(course, assignment)
    students = _chosen(students, submitted, course)
    shares = [share for share in (students[index::workers] for index in range(workers)) if share]

    def one(share):
        command = _autograde_command(assignment, share, submitted, extra)
        with subprocess.Popen(
            command, cwd=course, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as process:
            lines = [(time.perf_counter(), line) for line in process.stdout]
            code = process.wait()
        return _by_student(share, assignment, lines, code, time.perf_counter())

    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(shares) or 1) as pool:
        for future in concurrent.futures.as_completed([pool.submit(one, share) for share in shares]):
            results.update(future.result())
            for student, (code, seconds, _) in future.result().items():
                log(f"{student}: {'graded' if code == 0 else 'FAILED (see its log)'} in {seconds:.0f} s")
    return results


def _chosen(students, submitted, course):
    """``students`` sorted (every submitted one if None); a student without a submission is refused."""
    chosen = submitted if students is None else sorted(set(students))
    missing = [student for student in chosen if student not in submitted]
    if missing:
        refuse("students", missing, f"students with a submission in {os.path.join(course, 'submitted')}", "grade_class")
    return chosen


def _autograde_command(assignment, share, submitted, extra):
    """``nbgrader autograde`` of ``share``: nbgrader takes one student, a glob, or everyone but a list."""
    if len(share) == 1:
        chosen = f"--student={share[0]}"
    else:
        chosen = f"--CourseDirectory.student_id_exclude={','.join(s for s in submitted if s not in share)}"
    return [sys.executable, "-m", "nbgrader", "autograde", assignment, chosen, *extra]


def _by_student(share, assignment, lines, code, ended):
    """{student: (code, seconds, output)} from one run's timed lines, which take its students in turn."""
    opening, parts, starts, failed = _split(share, assignment, lines)
    results = {}
    for student in share:
        later = [start for start in starts.values() if start > starts.get(student, ended)]
        seconds = min(later, default=ended) - starts[student] if student in starts else 0.0
        # A run that failed as a whole (its configuration, the gradebook) failed each of its students.
        own = 1 if student in failed else (code if code and not failed else 0)
        results[student] = (own, seconds, "".join(opening + parts[student]))
    return results


def _split(share, assignment, lines):
    """(opening lines, {student: their lines}, {student: when their first line came}, the failed students).

    Read from the log's text: an ``nbgrader autograde`` run says which submission it is at, and which
    failed, nowhere else (its converter returns nothing per submission).
    """
    names = "|".join(re.escape(student) for student in share)
    # nbgrader names a submission by its folders (submitted/<id>/<assignment>, autograded/...) or
    # its id: first as it removes an earlier grading, copies a file or adds the student; at the
    # end of the run, it lists each submission it could not process.
    mentions = re.compile(rf"[/\\]({names})[/\\]{re.escape(assignment)}\b|student with ID '({names})'")
    failure = re.compile(rf"error processing assignment '{re.escape(assignment)}' for student '({names})'")
    opening, parts, starts, failed, current = [], {student: [] for student in share}, {}, set(), None
    for arrived, line in lines:
        failing = failure.search(line)
        if failing:
            failed.add(failing.group(1))
            parts[failing.group(1)].append(line)
            continue
        found = mentions.search(line)
        student = found and (found.group(1) or found.group(2))
        if student and student not in starts:
            current, starts[student] = student, arrived
        (parts[current] if current else opening).append(line)
    return opening, parts, starts, failed


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
