"""Grading assignment 05 the way a JupyterHub grades it, against honest and dishonest work.

The instructor generates and releases the (turned-down) assignment into an exchange folder;
each student fetches it in a home of their own, answers, and submits; the instructor collects,
generates feedback and exports the grades: all through nbgrader's own classes in this process
(as those commands run them, without seconds of start-up each). The class of 31
(tests/grading_class.py) is autograded through the command line, two submissions at a time
(``python -m workbook.course.grade_class``: the attacks on their neighbours in one ``nbgrader
autograde`` and as many honest classmates in another, side by side, the k-th of each starting
together (tests/grading_start_together.py); then the rest of the class in two), in subprocesses
whose environment a hub would give them (a fresh home, no PYTEST_* or TF_* variables; under
pytest, ipykernel hides the kernel's stderr, which nbgrader counts against a cell). One class is
graded per test run and shared by the tests below.

What a recording scores is specified in tests/test_grading_verdicts.py, what a box holds in is
tests/test_grading_sandbox.py; here, what the grader run by nbgrader makes of them: each
submission's points, the instructor's log, feedback and export.
"""

import concurrent.futures
import contextlib
import csv
import itertools
import json
import os
import pathlib
import re
import shutil
import sys
import sysconfig
import tempfile
import time

import nbformat
import pytest
from grading_class import (
    BESIDE_A_CLASSMATE,
    BROKEN_KEY,
    COLLECT_LINKER,
    HOLDING,
    MALFORMED,
    MEASURED_ON_UNSEEN,
    NOT_A_NOTEBOOK,
    OTHER_ASSIGNMENTS,
    STUDENTS,
    UNCOVERED,
    UNTRAINED,
    attack,
    hand_in,
    with_targets,
)
from grading_helpers import (
    ASSIGNMENT,
    HELD_OUT_PATH,
    NOTEBOOK,
    ROOT,
    answer_text,
    box_limits_missing,
    nbgrader_meta,
    reconstruction_mse,
    unseen_digits,
)
from grading_helpers import ASSIGNMENT_POINTS as POINTS
from notebook_runner import NOTEBOOKS, clean_environment, reduced_notebook

from workbook.course.grading import ANSWER_KEY
from workbook.lab import assignment_spec as spec

COURSE_ID = "gradient-workbook"
# An ordinary cell's limit while testing: short enough that the looping submission costs
# little, long enough for every honest cell (the real limit, 120 s, is tested on its own).
TEST_CELL_SECONDS = 45
# How long each attack on its neighbours holds what it took (a search, a full disk, a flood) while
# the classmate queued beside it is graded; the test checks from both notebooks' stamps that it was.
HOLD_SECONDS = 20
# The file the escaper's leftovers would make, and the .pth file it tries to leave in site-packages.
ATTACK_PTH = os.path.join(sysconfig.get_paths()["purelib"], "zz_workbook_attack.pth")


def leftover_processes(marker):
    """Processes on this machine whose command line names ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                if str(marker).encode() in file.read():
                    found.append(entry)
        except OSError:
            continue
    return found


# What the feedback never shows of the hidden tests.
HIDDEN_WORDS = ("record_model", "record_function", "judge_here", "HIDDEN TESTS")


def hub_test(function):
    """A test of the graded class: slow, on the worker that grades it (tests/test_parallel_groups.py)."""
    for mark in (pytest.mark.slow, pytest.mark.timeout(2400), pytest.mark.hub, pytest.mark.xdist_group("hub")):
        function = mark(function)
    return function


def student_exchange(kind, home, exchange, assignment, student):
    """``nbgrader fetch_assignment`` or ``nbgrader submit`` of ``student``, from ``home``, by nbgrader's own classes.

    In this process (each command line costs seconds of start-up), configured as those
    commands are by their flags; the class itself is graded through the command line.
    """
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default import ExchangeFetchAssignment, ExchangeSubmit
    from traitlets.config import Config

    config = Config()
    config.CourseDirectory.update(course_id=COURSE_ID, assignment_id=assignment, student_id=student, root=str(home))
    config.Exchange.update(root=str(exchange), assignment_dir=str(home), cache=str(home / ".nbgrader-cache"))
    app = {"fetch": ExchangeFetchAssignment, "submit": ExchangeSubmit}[kind]
    app(coursedir=CourseDirectory(config=config), authenticator=Authenticator(config=config), config=config).start()


def instructor_collect(course, exchange, assignment):
    """``nbgrader collect ASSIGNMENT`` in ``course``, by the collect of its nbgrader_config.py, in this process.

    Returns what it logged, one message a line.
    """
    import logging

    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange import ExchangeFactory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", str(course)).load_config()
    config.CourseDirectory.update(course_id=COURSE_ID, assignment_id=assignment, root=str(course))
    config.Exchange.root = str(exchange)
    coursedir = CourseDirectory(config=config)
    collect = ExchangeFactory(config=config).Collect(
        coursedir=coursedir, authenticator=Authenticator(config=config), config=config
    )
    messages = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: messages.append(record.getMessage())
    collect.log.addHandler(handler)
    try:
        collect.start()
    finally:
        collect.log.removeHandler(handler)
    return "\n".join(messages)


def instructor_api(course):
    """nbgrader's own API for the instructor's commands, configured from ``course``'s nbgrader_config.py.

    In this process, as ``nbgrader generate_assignment``, ``release_assignment`` or
    ``generate_feedback`` run in ``course`` read it (each command line costs seconds of start-up).
    """
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", str(course)).load_config()
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def succeeded(result):
    """What an :class:`NbGraderAPI` call returned, once it says it succeeded."""
    assert result["success"], f"{result.get('error')}\n{result.get('log')}"
    return result


@contextlib.contextmanager
def nbgraders_path():
    """PATH with this Python's scripts first while nbgrader runs here: it starts ``alembic`` to make the gradebook."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
        yield


def instructor_export(course):
    """``nbgrader export`` in ``course``: its plugin (nbgrader_config.py's) writes grades.csv from the gradebook."""
    from nbgrader.api import Gradebook
    from nbgrader.apps.exportapp import ExportApp
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", str(course)).load_config()
    plugin = config.ExportApp.get("plugin_class", ExportApp.class_traits()["plugin_class"].default())
    coursedir = CourseDirectory(config=config)
    with Gradebook(coursedir.db_url, coursedir.course_id) as gradebook:
        plugin(config=config, to=str(course / "grades.csv")).export(gradebook)


def beside():
    """(honest classmates, the attacks on their neighbours): graded in two runs side by side, in step."""
    classmates = [student for student in STUDENTS if student.startswith("classmate_")]
    return classmates[: len(BESIDE_A_CLASSMATE)], list(BESIDE_A_CLASSMATE)


def grade_side(folder, side, *args, **options):
    """``grade_class(*args, **options)`` for one side of START_TOGETHER; "done-<side>" once it has ended."""
    from workbook.course.grade_class import grade_class

    try:
        return grade_class(*args, **options)
    finally:
        (folder / f"done-{side}").touch()


def paired(folder):
    """[(the honest classmate, the attack)] whose gradings started together, from the arrivals (None: none came)."""
    arrivals = [sorted((folder / side).iterdir()) for side in ("classmates", "attacks")]  # "{k:02d}-{student}"
    return [tuple(path and path.name.split("-", 1)[1] for path in pair) for pair in itertools.zip_longest(*arrivals)]


def kernel_span(notebook):
    """When the kernel ran the notebook (its own stamps): from the first cell's start to the last cell's end."""
    import datetime

    stamps = [
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        for cell in notebook.cells
        if cell.cell_type == "code"
        for key, value in cell.metadata.get("execution", {}).items()
        if key in ("iopub.status.busy", "shell.execute_reply")
    ]
    return min(stamps), max(stamps)


def start_together(course, folder):
    """Put tests/grading_start_together.py first in ``course``'s autograde steps, its arrivals in ``folder``."""
    classmates, attacks = beside()
    sides = dict.fromkeys(classmates, ("classmates", "attacks")) | dict.fromkeys(attacks, ("attacks", "classmates"))
    for side in ("classmates", "attacks"):
        (folder / side).mkdir(parents=True)
    with open(course / "nbgrader_config.py", "a") as config:
        config.write(
            f"\n# The tests' own: gradings that start in pairs.\nimport sys\n"
            f"sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\n"
            f"from grading_start_together import StartTogether\n"
            f"c.StartTogether.update(sides={sides!r}, folder={str(folder)!r}, assignment={ASSIGNMENT!r})\n"
            f"c.Autograde.autograde_preprocessors = [StartTogether, *c.Autograde.autograde_preprocessors]\n"
        )


# The round trip's steps, in order (the hub fixture below takes them).


def make_course(base):
    """The course folder and the exchange, as the course's own nbgrader_config.py sets them, with the tests' own."""
    exchange, course = base / "exchange", base / "course"
    exchange.mkdir()
    exchange.chmod(0o777)
    course.mkdir()
    shutil.copy(ROOT / "course" / "nbgrader_config.py", course)
    shutil.copy(ROOT / "course" / ANSWER_KEY, course)
    shutil.copy(HELD_OUT_PATH, course)  # part (c)'s digits, beside the key
    (course / "broken_key.py").write_text("raise RuntimeError('the answer key cannot load its references')\n")
    with open(course / "nbgrader_config.py", "a") as config:
        config.write(
            f"\n# The tests' own: a shorter limit for ordinary cells, this exchange folder, a broken key.\n"
            f"c.Execute.timeout_func = lambda cell: {TEST_CELL_SECONDS} if cell_timeout(cell) == 120 "
            f"else cell_timeout(cell)\nc.Exchange.root = {str(exchange)!r}\n"
            f"c.GuardedExecute.answer_keys = {{**c.GuardedExecute.answer_keys, {BROKEN_KEY!r}: 'broken_key.py'}}\n"
        )
    return course, exchange


def release(course):
    """The turned-down notebook, generated and released under each assignment's name; returns the source."""
    source = reduced_notebook(NOTEBOOKS / NOTEBOOK)  # turned down, as the notebook tests run it
    for assignment in (ASSIGNMENT, *OTHER_ASSIGNMENTS):
        (course / "source" / assignment).mkdir(parents=True)
        nbformat.write(source, course / "source" / assignment / NOTEBOOK)
        with nbgraders_path():
            succeeded(instructor_api(course).generate_assignment(assignment, force=True))
            succeeded(instructor_api(course).release_assignment(assignment))
    return source


def another_course(source, request):
    """Another course on the same machine, outside every temporary folder, with a full solution handed in."""
    (ROOT / "build").mkdir(exist_ok=True)
    other_course = pathlib.Path(tempfile.mkdtemp(prefix="other-course-", dir=ROOT / "build"))
    request.addfinalizer(lambda: shutil.rmtree(other_course, ignore_errors=True))
    (other_course / "submitted" / "ann" / ASSIGNMENT).mkdir(parents=True)
    nbformat.write(source, other_course / "submitted" / "ann" / ASSIGNMENT / NOTEBOOK)
    return other_course


def after_answer(solution, name):
    """The right answer of ``solution``'s cell, then the attack ``name`` below it in the same cell."""
    return answer_text(solution) + "\n\n" + attack(name)


def attack_sources(base, course, other_course, solutions, limits_missing):
    """{placeholder in grading_class.STUDENTS: the cell}: the attacks aimed at this run's own files."""
    held = {"hold_seconds": HOLD_SECONDS}
    escaper = {
        "gradebook": str(course / "gradebook.db"),
        "pth": ATTACK_PTH,
        "source": str(course / "source" / ASSIGNMENT / NOTEBOOK),
        "classmate": str(course / "submitted" / "reference" / ASSIGNMENT / NOTEBOOK),
        "workbook_file": str(ROOT / "workbook" / "course" / "verdicts.py"),
        "marker": str(base / "escaped"),
    }
    snooper = {
        "other_course": str(other_course),
        "submitted": str(course / "submitted"),
        "boxes": tempfile.gettempdir(),
    }
    sources = {
        "ESCAPER": with_targets(attack("escaper"), **escaper),
        "KEY_THIEF": with_targets(attack("key_thief"), answer_key=str(course / ANSWER_KEY)),
        "SNOOPER": with_targets(attack("snooper"), **snooper, **held),
        "DISK_FILLER": with_targets(attack("disk_filler"), **held),
        "FORKER": with_targets(attack("forker"), **held),
        "FEEDBACK_PROBER": answer_text(solutions["a_quantize_2bit"]) + "\n\n" + attack("feedback_prober"),
        "RIGHT_ONLY_WHERE_CHECKED": answer_text(solutions["a_quantize_2bit"])
        + "\n\n"
        + attack("right_only_where_checked"),
        "DEEP_JSON": answer_text(solutions["b_culprit_answer"]) + "\n\n" + attack("deep_json"),
    }
    if limits_missing:  # without per-box limits these two would fill the grader's disk and the machine's pids
        sources.update(dict.fromkeys(("DISK_FILLER", "FORKER"), UNTRAINED))  # then they hand in their honest work
    return sources


def hand_in_the_class(base, course, exchange, solutions, placeholders):
    """Every student fetches, answers and submits; then the collect linker leaves its link in the exchange."""
    handing_in = [(ASSIGNMENT, student) for student in [*STUDENTS, NOT_A_NOTEBOOK, *MALFORMED, COLLECT_LINKER]]
    for assignment, student in [*handing_in, *OTHER_ASSIGNMENTS.items()]:
        home = base / "students" / student
        home.mkdir(parents=True, exist_ok=True)
        student_exchange("fetch", home, exchange, assignment, student)
        hand_in(home / assignment / NOTEBOOK, student, solutions, placeholders)
        # On a hub each student is a user of their own; here all are one, so each says who.
        student_exchange("submit", home, exchange, assignment, student)
    (inbound,) = (exchange / COURSE_ID / "inbound").glob(f"{COLLECT_LINKER}+{ASSIGNMENT}+*")
    (inbound / NOTEBOOK).unlink()
    (inbound / NOTEBOOK).symlink_to(course / "source" / ASSIGNMENT / NOTEBOOK)


def grade_the_class(base, course, instructor):
    """The attacks and the classmates beside them in two runs side by side, then the rest of the class in two."""
    from workbook.course.grade_class import grade_class

    start_together(course, base / "arrivals")
    classmates, attacks = beside()
    rest = [student for student in [*STUDENTS, NOT_A_NOTEBOOK, *MALFORMED] if student not in [*classmates, *attacks]]
    options = dict(extra=["--force"], env=instructor, log=lambda _: None)
    graded = {}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # one nbgrader run each, side by side
        sides = [
            pool.submit(grade_side, base / "arrivals", side, course, ASSIGNMENT, students, workers=1, **options)
            for side, students in (("classmates", classmates), ("attacks", attacks))
        ]
        for side in sides:
            graded.update(side.result())
    graded.update(grade_class(course, ASSIGNMENT, rest, workers=2, **options))
    return graded


def grade_other_assignments(course, exchange, instructor):
    """The same notebook under the names no spec covers and whose key fails: collected and graded."""
    from workbook.course.grade_class import grade_class

    others = {}
    for assignment in OTHER_ASSIGNMENTS:
        instructor_collect(course, exchange, assignment)
        options = dict(workers=1, extra=["--force"], env=instructor, log=lambda _: None)
        others[assignment] = grade_class(course, assignment, **options)
    return others


def feedback_and_export(course):
    """``nbgrader generate_feedback`` (the broken file has none) and ``nbgrader export``: grades.csv's rows."""
    with nbgraders_path():
        instructor_api(course).generate_feedback(ASSIGNMENT, force=True)
        instructor_export(course)
    with open(course / "grades.csv", newline="") as file:
        return {(row["assignment"], row["student_id"]): row for row in csv.DictReader(file)}


def gradebook_scores(course):
    """({(assignment, student): {grade_id: score}}, the same for the autograded scores), from the gradebook."""
    from nbgrader.api import Gradebook

    scores, auto_scores = {}, {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for assignment, student in [(ASSIGNMENT, student) for student in STUDENTS] + list(OTHER_ASSIGNMENTS.items()):
            grades = {
                grade_id: gradebook.find_grade(grade_id, NOTEBOOK[:-6], assignment, student) for grade_id in POINTS
            }
            scores[assignment, student] = {grade_id: grade.score for grade_id, grade in grades.items()}
            auto_scores[assignment, student] = {grade_id: grade.auto_score for grade_id, grade in grades.items()}
    return scores, auto_scores


def outside_the_boxes(course):
    """What the escaper aimed at outside its box, as it is now: its bytes, or whether it exists."""
    return {
        "source": (course / "source" / ASSIGNMENT / NOTEBOOK).read_bytes(),
        "workbook": (ROOT / "workbook" / "course" / "verdicts.py").read_bytes(),
        "pth": os.path.exists(ATTACK_PTH),
    }


@pytest.fixture(scope="session")
def hub(tmp_path_factory, request):
    """The whole round trip; returns what the instructor sees at the end.

    Session-wide: a module-wide fixture is graded again whenever its worker runs another module's
    test in between. Its tests are marked xdist_group("hub"), so the class is graded on one worker,
    once (tests/test_parallel_groups.py checks that the grouping holds).
    """
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from workbook.course.sandbox import sandbox_problem

    if sandbox_problem():
        pytest.fail(sandbox_problem())
    base = tmp_path_factory.mktemp("hub")
    course, exchange = make_course(base)
    source = release(course)
    solutions = {nbgrader_meta(c)["grade_id"]: c for c in source.cells if nbgrader_meta(c).get("solution")}
    limits_missing = box_limits_missing()
    placeholders = attack_sources(base, course, another_course(source, request), solutions, limits_missing)
    hand_in_the_class(base, course, exchange, solutions, placeholders)
    collected = instructor_collect(course, exchange, ASSIGNMENT)
    before = outside_the_boxes(course)
    instructor = clean_environment(base / "instructor")
    (base / "instructor").mkdir()
    graded = grade_the_class(base, course, instructor)
    time.sleep(1)  # a process the escaper left would have started by now
    after = dict(processes=leftover_processes(base / "escaped"), escaped=(base / "escaped").exists())
    others = grade_other_assignments(course, exchange, instructor)
    every_row = feedback_and_export(course)
    scores, auto_scores = gradebook_scores(course)
    now = outside_the_boxes(course)
    after.update(changed=sorted(name for name in before if now[name] != before[name]), pth=now["pth"])
    return dict(
        course=course,
        collected=collected,
        pairs=paired(base / "arrivals"),
        limits_missing=limits_missing,
        graded=graded,
        others=others,
        rows={student: row for (assignment, student), row in every_row.items() if assignment == ASSIGNMENT},
        every_row=every_row,
        scores=scores,
        auto_scores=auto_scores,
        after=after,
    )


def log_of(hub, student):
    return hub["graded"][student][2][-6000:]


@hub_test
@pytest.mark.parametrize("student", STUDENTS)
def test_each_submission_gets_the_points_of_its_honest_work(hub, student):
    expected = dict(STUDENTS[student][1])
    if expected["c_reconstruction"] == MEASURED_ON_UNSEEN:
        run = hook_run(hub, student)  # its points: within the target, in the grader's time (the hook's training too)
        within = run["unseen_mse"] <= spec.TARGET_MSE and run["seconds"] <= spec.TIME_BUDGET_SECONDS
        expected["c_reconstruction"] = POINTS["c_reconstruction"] * within
    assert hub["scores"][ASSIGNMENT, student] == expected, log_of(hub, student)
    assert float(hub["rows"][student]["raw_score"]) == sum(expected.values())  # what `nbgrader export` hands on
    # nbgrader leaves the grades of deleted check cells to the instructor, and the export says so
    assert hub["rows"][student]["status"] == ("needs manual grading" if student == "deleted_checks" else "graded")


_hook_runs = {}


def hook_run(hub, student):
    """What TRAINS_ON_X_TEST_IN_A_HOOK printed in part (c)'s check, the verdict, and the weights measured here."""
    import datetime

    import numpy as np

    if student not in _hook_runs:
        cells = [c for c in autograded(hub, student).cells if c.cell_type == "code"]
        check = next(c for c in cells if nbgrader_meta(c).get("grade_id") == "c_reconstruction")
        text = "".join(o.get("text", "") + o.get("evalue", "") for o in check.outputs)
        weights = np.frombuffer(bytes.fromhex(re.search(r"weights: ([0-9a-f]+)", text).group(1)), "<f4")
        verdict = re.search(r"(?:✓|✗) measured by the grader: .*", text).group(0)
        times = [
            datetime.datetime.fromisoformat(c.metadata.execution[key].replace("Z", "+00:00"))
            for c, key in ((cells[0], "iopub.status.busy"), (check, "shell.execute_reply"))
        ]
        _hook_runs[student] = dict(
            hook_seconds=float(re.search(r"hook trained for ([0-9.]+) s", text).group(1)),
            verdict=verdict,
            seconds=int(re.search(r"in (\d+) s \(budget", verdict).group(1)),
            span=(times[1] - times[0]).total_seconds(),  # the kernel's own stamps: first cell to the check's end
            unseen_mse=reconstruction_mse(weights, unseen_digits()),
        )
    return _hook_runs[student]


@hub_test
def test_part_c_trained_on_x_test_in_a_hook_is_measured_on_unseen_digits_and_timed_with_the_hook(hub):
    run = hook_run(hub, "half_right")
    # measured on the digits it never had, with the weights it had when the check ended (not those written at exit)
    assert f"MSE {run['unseen_mse']:.5f} on 1,000 held-out test digits" in run["verdict"], run
    # the grader's clock ran through the hook: from the notebook's first cell to the end of the check
    assert run["seconds"] >= run["hook_seconds"] and run["seconds"] >= run["span"] - 1.5, run


@hub_test
def test_a_file_that_is_not_a_notebook_is_marked_not_graded_and_the_rest_are_graded(hub):
    assert hub["graded"][NOT_A_NOTEBOOK][0] != 0  # nbgrader reports the failure...
    assert "There was an error processing assignment" in hub["graded"][NOT_A_NOTEBOOK][2]
    assert all(hub["graded"][student][0] == 0 for student in STUDENTS), {s: log_of(hub, s) for s in STUDENTS}
    assert hub["rows"][NOT_A_NOTEBOOK]["status"].startswith("not graded")  # ...and the export says so
    assert all(
        (hub["course"] / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").exists() for student in STUDENTS
    )


def autograded(hub, student, assignment=ASSIGNMENT):
    return nbformat.read(hub["course"] / "autograded" / student / assignment / NOTEBOOK, as_version=4)


def autograded_errors(hub, student, assignment=ASSIGNMENT, values="ename"):
    """{grade_id: the errors in that cell (their names, or their ``values``)} of a student's autograded notebook."""
    return {
        nbgrader_meta(c).get("grade_id"): [o[values] for o in c.get("outputs", []) if o.output_type == "error"]
        for c in autograded(hub, student, assignment).cells
        if c.cell_type == "code"
    }


@hub_test
def test_the_key_thief_searched_everywhere_and_found_no_answer(hub):
    answer_cell = next(
        c for c in autograded(hub, "key_thief").cells if nbgrader_meta(c).get("grade_id") == "a_quantize_2bit"
    )
    assert [o.ename for o in answer_cell.outputs if o.output_type == "error"] == []  # it ran to its end...
    printed = "".join(o.get("text", "") for o in answer_cell.outputs)
    assert "no answer key: FileNotFoundError" in printed  # ...and the course folder was hidden from it


@hub_test
def test_an_assignment_without_its_verdict_spec_is_refused_not_graded_by_its_own_checks(hub):
    # The forger's notebook, whose rebound checks all pass in the kernel, handed in as "hw5".
    code, _, log = hub["others"][UNCOVERED]["forger"]
    assert code != 0 and "has no verdict spec" in log, log[-3000:]
    assert "c.GuardedExecute.answer_keys" in log  # and what to do about it
    assert hub["every_row"][UNCOVERED, "forger"]["status"].startswith("not graded")
    assert float(hub["every_row"][UNCOVERED, "forger"]["raw_score"]) == 0
    assert not (hub["course"] / "autograded" / "forger" / UNCOVERED).exists()


@hub_test
def test_a_verdict_the_grader_cannot_take_is_left_for_manual_grading_not_a_zero(hub):
    # The reference solution, judged by an answer key that fails to load.
    code, _, log = hub["others"][BROKEN_KEY]["reference"]
    assert code == 0, log[-3000:]
    assert "needs manual grading" in log  # the instructor's log says so
    assert hub["auto_scores"][BROKEN_KEY, "reference"] == dict.fromkeys(POINTS, None)  # no score, not 0
    assert hub["every_row"][BROKEN_KEY, "reference"]["status"] == "needs manual grading"
    errors = autograded_errors(hub, "reference", BROKEN_KEY)
    assert all(errors[grade_id] == ["NeedsManualGrading"] for grade_id in POINTS), errors


@hub_test
def test_the_endless_loop_and_the_dead_kernel_each_cost_their_own_cell(hub):
    errors = autograded_errors(hub, "loop_and_kill")
    assert "CellTimeoutError" in errors["b_culprit_answer"]
    assert "DeadKernelError" in errors["c_train_answer"]
    assert errors["b_fix"] == [] and errors["a_gradient"] == []  # graded after the loop, before the kill


def printed(hub, student, grade_id):
    """What a student's cell printed while it was graded."""
    cells = autograded(hub, student).cells
    return "".join(o.get("text", "") for c in cells if nbgrader_meta(c).get("grade_id") == grade_id for o in c.outputs)


def reported(hub, student, grade_id, label):
    """The JSON an attack printed after ``label:`` in that cell."""
    return json.loads(re.search(rf"{label}: (\{{.*\}})", printed(hub, student, grade_id)).group(1))


def holding_windows(hub):
    """{attack on its neighbours: (start, end)}: while it held what it took, else while its kernel ran."""
    windows = {student: kernel_span(autograded(hub, student)) for student in BESIDE_A_CLASSMATE}
    if not hub["limits_missing"]:  # else the holding attacks were handed in without their attacks
        for student, grade_id, label in HOLDING:
            windows[student] = reported(hub, student, grade_id, label)["window"]
    return windows


@hub_test
def test_every_attack_on_its_neighbours_ran_while_an_honest_classmate_was_graded(hub):
    alone = {student: log[-3000:] for student, (_, _, log) in hub["graded"].items() if "StartTogether:" in log}
    assert not alone, alone
    assert hub["pairs"], "no submission of either side reached the step that starts them together"
    classmates, attacks = (sorted(side, key=str) for side in zip(*hub["pairs"], strict=True))
    assert [classmates, attacks] == [beside()[0], sorted(BESIDE_A_CLASSMATE)], hub["pairs"]  # each with a classmate
    pairs = {attack: classmate for classmate, attack in hub["pairs"]}
    for student, (start, end) in holding_windows(hub).items():
        first, last = kernel_span(autograded(hub, pairs[student]))
        assert first < end and start < last, (student, (start, end), pairs[student], (first, last))
    # and each of those classmates kept every point (test_each_submission_gets_the_points_of_its_honest_work)


@hub_test
def test_no_other_submission_course_or_kernel_was_within_the_snoopers_reach(hub):
    found = reported(hub, "snooper", "a_quantize_2bit", "snooped")["found"]
    assert found == {}, found  # not another course's notebook, not a classmate's box, recording or kernel


@hub_test
def test_a_malformed_notebook_fails_alone_with_its_reason_and_the_rest_of_the_class_is_graded(hub):
    for student in MALFORMED:
        code, _, log = hub["graded"][student]
        assert code != 0 and "needs manual grading: " in log, log[-3000:]
        assert hub["rows"][student]["status"].startswith("not graded"), hub["rows"][student]
    assert "same grade_id 'a_quantize_2bit'" in hub["graded"]["bad_metadata_copied_cell"][2]
    assert "Schema version is too new: 99" in hub["graded"]["bad_metadata_from_the_future"][2]
    # graded in the same runs after them, every other student kept their grade
    assert all(hub["graded"][student][0] == 0 for student in STUDENTS), {s: log_of(hub, s) for s in STUDENTS}


@hub_test
def test_collect_takes_no_link_a_student_left_in_the_exchange(hub):
    linked = f"{COLLECT_LINKER}+{ASSIGNMENT}+"
    assert re.search(rf"Not collected: .*{re.escape(linked)}.*/{NOTEBOOK} \(a link\)", hub["collected"])
    collected = hub["course"] / "submitted" / COLLECT_LINKER / ASSIGNMENT
    assert "timestamp.txt" in os.listdir(collected) and NOTEBOOK not in os.listdir(collected)  # nothing of the source
    # every other student's notebook was collected as handed in, and graded (above)
    assert all((hub["course"] / "submitted" / s / ASSIGNMENT / NOTEBOOK).is_file() for s in STUDENTS)


@hub_test
def test_a_recordings_folder_the_kernel_made_a_link_is_not_followed(hub):
    # That the kernel can move no folder of the box's top is the sandbox's (tests/test_grading_sandbox.py);
    # inside its own folder it may make links, and the grader, as root, takes no recording through one.
    planted = reported(hub, "link_planter", "c_train_answer", "planted")
    assert planted["recordings linked"] == "done", planted
    check = next(
        c for c in autograded(hub, "link_planter").cells if nbgrader_meta(c).get("grade_id") == "c_reconstruction"
    )
    verdict = next(o.evalue for o in check.outputs if o.output_type == "error")
    assert verdict == "✗ part (c): the hidden test did not record the model.", verdict  # none where the grader looks
    # and its other parts got their points (test_each_submission_gets_the_points_of_its_honest_work)


@hub_test
def test_the_sandbox_held_nothing_outside_it_changed_and_nothing_it_started_survived(hub):
    printed_text = printed(hub, "escaper", "c_train_answer")
    attempts = eval(re.search(r"attempts: (\{.*\})", printed_text).group(1))
    assert set(attempts) == {"gradebook", "site-packages", "source", "classmate", "workbook", "shadow"}
    assert "done" not in attempts.values(), attempts
    assert hub["after"] == dict(processes=[], escaped=False, changed=[], pth=False), hub["after"]


def feedback_of(hub, student):
    return (hub["course"] / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()


@hub_test
def test_the_verdict_says_why_without_giving_the_answer_and_feedback_hides_the_hidden_tests(hub):
    errors = " ".join(map(str, autograded_errors(hub, "half_right", values="evalue")["b_culprit"]))
    assert "is not the op that cuts" in errors, errors
    reference = feedback_of(hub, "reference")
    assert [word in reference for word in ("record_function", "HIDDEN TESTS", "checked by the grader")] == [
        False,
        False,
        True,  # the verdict itself is shown
    ]
    half_right = feedback_of(hub, "half_right")
    assert "record_answers" not in half_right and "is not the op that cuts" in half_right
    # a traceback through a hidden line (the untouched release has no model), a hook that printed every cell
    # (the prober wrote the hidden tests' marker into its own answer: shown as written, and its feedback was made)
    hidden = {"untouched": HIDDEN_WORDS, "feedback_prober": HIDDEN_WORDS[:3]}
    for student, words in hidden.items():
        assert "record_model" in json.dumps(nbformat.writes(autograded(hub, student))), student  # the instructor's
        assert [word for word in words if word in feedback_of(hub, student)] == [], student  # not the student's


@hub_test
def test_the_students_own_html_is_shown_as_text_in_their_feedback(hub):
    # nothing of what the student wrote runs in the reader's browser
    prober = feedback_of(hub, "feedback_prober")
    assert "&lt;img src=x onerror=alert(1)&gt;" in prober and "&lt;script&gt;alert(4)" in prober
    assert not re.search(r"<img[^>]*onerror|<script>alert", prober)


@hub_test
def test_every_box_ends_with_its_kernel_none_waits_to_be_killed(hub):
    # nbclient leaves running a kernel whose manager it was given: the grader ends it, so that no
    # box waits 10 s for its processes and then kills them (the forker's and the escaper's included)
    problem = box_limits_missing(disk=False)
    if problem:
        pytest.skip(f"without a box's own control groups nothing waits for its processes: {problem}")
    logs = {student: hub["graded"][student][2] for student in STUDENTS}
    assert all("The box held at most" in log for log in logs.values())  # each box was measured and removed
    waited = {student: log[-2000:] for student, log in logs.items() if "into the box's removal: killed" in log}
    assert not waited, waited


@hub_test
def test_output_is_capped_in_bytes_and_the_checksum_warnings_name_only_edited_checks(hub):
    sizes = [
        (hub["course"] / "feedback" / "huge_output" / ASSIGNMENT / f"{ASSIGNMENT}.html").stat().st_size,
        (hub["course"] / "autograded" / "huge_output" / ASSIGNMENT / NOTEBOOK).stat().st_size,
    ]
    assert max(sizes) < 2_000_000, sizes
    assert "output dropped" in "".join(
        o.get("text", "") for c in autograded(hub, "huge_output").cells for o in c.get("outputs", [])
    )
    changed = {s: re.findall(r"Attribute 'checksum' for cell (\w+) has changed", log_of(hub, s)) for s in STUDENTS}
    assert changed["reference"] == changed["untouched"] == []
    assert sorted(changed["half_right"]) == ["b_fix", "colleague", "parameters"]  # what that student wrote over


def test_grade_class_refuses_no_workers_and_a_student_without_a_submission_by_name(tmp_path):
    from workbook.course.grade_class import grade_class

    (tmp_path / "submitted" / "ann" / ASSIGNMENT).mkdir(parents=True)
    with pytest.raises(ValueError, match=r"workers=0 .*whole number of at least 1"):
        grade_class(tmp_path, ASSIGNMENT, workers=0)
    with pytest.raises(ValueError, match=r"students=\['bob'\] .*students with a submission in"):
        grade_class(tmp_path, ASSIGNMENT, ["ann", "bob"])
