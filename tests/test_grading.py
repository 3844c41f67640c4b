"""Grading assignment 05 the way a JupyterHub grades it, against honest and dishonest work.

Everything goes through nbgrader's own command line, in subprocesses whose environment a
hub would give them (a fresh home per person, no PYTEST_* or TF_* variables; under pytest,
ipykernel hides the kernel's stderr, which nbgrader counts against a cell). The instructor
releases the (turned-down) assignment into an exchange folder; each student fetches it in
a home of their own, answers, and submits; the instructor collects, autogrades, generates
feedback and exports the grades.

Expected scores are the points of the honest work in each submission, written out here
from the assignment's rules, never read from the grader.
"""

import csv
import re
import shutil
import subprocess
import sys
import time

import nbformat
import pytest
from notebook_runner import NOTEBOOKS, clean_environment, reduced_notebook, run_nbgrader
from test_assignments import ASSIGNMENT_POINTS as POINTS

ROOT = NOTEBOOKS.parent
COURSE_ID = "gradient-workbook"
ASSIGNMENT = "05_assignment_quantized_autoencoder"
NOTEBOOK = f"{ASSIGNMENT}.ipynb"
# An ordinary cell's limit while testing: short enough that the looping submission costs
# little, long enough for every honest cell (the real limit, 120 s, is tested on its own).
TEST_CELL_SECONDS = 45

PATCH_THE_CHECKS = """import workbook, workbook.assignment_checks, workbook.diagnosis

def passes(*args, **kwargs):
    print("✓")
    return True

class Clean:
    ok, layers_without_gradient, findings, culprit = True, [], [], None

for module in (workbook, workbook.assignment_checks):
    module.check_quantizer = module.check_gradient_fix = module.check_reconstruction = passes
workbook.find_gradient_breaks = workbook.diagnosis.find_gradient_breaks = lambda *args, **kwargs: Clean()
quantize_2bit = lambda x: x
"""

PATCH_NUMPY_AND_THRESHOLDS = """import numpy as np

np.mean = lambda *args, **kwargs: 0.0  # every error is now 0
target_mse, time_budget_seconds = 1.0, 10**9
model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
"""

HIDDEN_NUMPY_PATCH = """import numpy as np

vars(np)["mean"] = lambda *args, **kwargs: 0.0
model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
"""

FAKE_PREDICT = """model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
model.predict = lambda x, **kwargs: x  # "reconstructs" every image perfectly
"""


def nbgrader_meta(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


def answer_text(cell):
    """A solution cell's source without the solution markers: what a student would write."""
    return "\n".join(
        line for line in cell.source.splitlines() if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
    )


def submission(release, solutions, answers=(), locked_edits=(), deleted=()):
    """The released notebook with answer cells filled in.

    ``answers`` maps an answer cell's grade_id to its new source ("solution": the
    reference answer); ``locked_edits`` maps a read-only cell's grade_id to what a student
    wrote over it; cells in ``deleted`` are removed.
    """
    notebook = nbformat.from_dict(release)
    answers, locked_edits = dict(answers), dict(locked_edits)
    for cell in notebook.cells:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if answers.get(grade_id) is not None:
            source = answers[grade_id]
            cell.source = answer_text(solutions[grade_id]) if source == "solution" else source
        elif grade_id in locked_edits:
            cell.source = locked_edits[grade_id]
    notebook.cells = [c for c in notebook.cells if nbgrader_meta(c).get("grade_id") not in set(deleted)]
    return notebook


def all_solutions(**overrides):
    answers = dict.fromkeys(("a_quantize_2bit", "b_culprit_answer", "b_fix_answer", "c_train_answer"), "solution")
    answers.update(overrides)
    return answers


# What each student hands in, and the points of the honest work in it.
STUDENTS = {
    # the reference solution, as the instructor wrote it
    "reference": (dict(answers=all_solutions()), POINTS),
    # the release as handed out
    "untouched": (dict(), dict.fromkeys(POINTS, 0)),
    # (a) right, (b) wrong, (c) not done; and read-only cells written over, which the grader restores
    "half_right": (
        dict(
            answers={
                "a_quantize_2bit": "solution",
                "b_culprit_answer": 'culprit_op = "Round"\nculprit_variable = "levels"',
                "b_fix_answer": "fixed_bottleneck = colleague_bottleneck",
            },
            locked_edits={
                "b_fix": "print('✓')",
                "parameters": "n_train = 8\nbatch_size = 8",
                "colleague": "round_ste = workbook.SURROGATES['round_ste']\n"
                "colleague_bottleneck = quantize_2bit\n"
                "colleague_model = None",
            },
        ),
        {"a_forward": 1, "a_gradient": 2, "b_culprit": 0, "b_fix": 0, "c_reconstruction": 0},
    ),
    # the checks and the finder replaced by functions that pass: caught before the kernel starts
    # (workbook.grading.tampering_lines); no check after that line gives points, so the right
    # culprit's name earns nothing either until the instructor has looked
    "patched_checks": (
        dict(
            answers={
                "a_quantize_2bit": PATCH_THE_CHECKS,
                "b_culprit_answer": 'culprit_op = "Cast"\nculprit_variable = "codes"',
                "b_fix_answer": "fixed_bottleneck = colleague_bottleneck",
                "c_train_answer": "model = workbook.autoencoder(bottleneck=quantize_2bit)",
            }
        ),
        dict.fromkeys(POINTS, 0),
    ),
    # (a) and (b) right; in (c) NumPy patched, the target and the budget reassigned, nothing trained
    "patched_numpy": (
        dict(answers=all_solutions(c_train_answer=PATCH_NUMPY_AND_THRESHOLDS)),
        {"a_forward": 1, "a_gradient": 2, "b_culprit": 1, "b_fix": 2, "c_reconstruction": 0},
    ),
    # the same patch written so that no line reads as one: the in-kernel comparison with a fresh
    # process catches it
    "hidden_patch": (
        dict(answers=all_solutions(c_train_answer=HIDDEN_NUMPY_PATCH)),
        {"a_forward": 1, "a_gradient": 2, "b_culprit": 1, "b_fix": 2, "c_reconstruction": 0},
    ),
    # an untrained model whose predict returns its input: the visible check passes, the
    # measurement in a separate process does not
    "fake_predict": (
        dict(answers=all_solutions(c_train_answer=FAKE_PREDICT)),
        {"a_forward": 1, "a_gradient": 2, "b_culprit": 1, "b_fix": 2, "c_reconstruction": 0},
    ),
    # (a) right; two check cells deleted: the grader has nothing to run for them
    "deleted_checks": (
        dict(answers={"a_quantize_2bit": "solution"}, deleted=("a_gradient", "c_reconstruction")),
        {"a_forward": 1, "a_gradient": 0, "b_culprit": 0, "b_fix": 0, "c_reconstruction": 0},
    ),
    # (a) and (b)'s fix right, (c) not done, and an answer that never ends: it costs that cell's
    # limit and its point, and the cells after it are graded
    "endless_loop": (
        dict(answers=all_solutions(b_culprit_answer="while True:\n    pass", c_train_answer=None)),
        {"a_forward": 1, "a_gradient": 2, "b_culprit": 0, "b_fix": 2, "c_reconstruction": 0},
    ),
    # the same with an answer that ends the kernel: only that cell's point is lost
    "kills_kernel": (
        dict(answers=all_solutions(b_culprit_answer="import os\nos._exit(1)", c_train_answer=None)),
        {"a_forward": 1, "a_gradient": 2, "b_culprit": 0, "b_fix": 2, "c_reconstruction": 0},
    ),
}
NOT_A_NOTEBOOK = "broken_file"  # hands in a file that is not valid JSON


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The whole round trip; returns what the instructor sees at the end."""
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from nbgrader.api import Gradebook

    base = tmp_path_factory.mktemp("hub")
    exchange, course = base / "exchange", base / "course"
    exchange.mkdir()
    exchange.chmod(0o777)
    course.mkdir()
    shutil.copy(ROOT / "course" / "nbgrader_config.py", course)
    with open(course / "nbgrader_config.py", "a") as config:
        config.write(
            f"\n# The tests' own: a shorter limit for ordinary cells, and this exchange folder.\n"
            f"c.Execute.timeout_func = lambda cell: {TEST_CELL_SECONDS} if cell_timeout(cell) == 120 "
            f"else cell_timeout(cell)\nc.Exchange.root = {str(exchange)!r}\n"
        )
    instructor = clean_environment(base / "instructor")
    (base / "instructor").mkdir()

    source = reduced_notebook(NOTEBOOKS / NOTEBOOK)  # turned down, as the notebook tests run it
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    nbformat.write(source, course / "source" / ASSIGNMENT / NOTEBOOK)
    run_nbgrader(course, instructor, "generate_assignment", ASSIGNMENT, "--force")
    run_nbgrader(course, instructor, "release_assignment", ASSIGNMENT)
    solutions = {nbgrader_meta(c)["grade_id"]: c for c in source.cells if nbgrader_meta(c).get("solution")}

    for student in [*STUDENTS, NOT_A_NOTEBOOK]:
        home = base / "students" / student
        home.mkdir(parents=True)
        env = clean_environment(home)
        flags = ["--course", COURSE_ID, f"--Exchange.root={exchange}"]
        run_nbgrader(home, env, "fetch_assignment", ASSIGNMENT, *flags)
        path = home / ASSIGNMENT / NOTEBOOK
        if student == NOT_A_NOTEBOOK:
            path.write_text(path.read_text()[:5000])  # cut off mid-way, as an interrupted upload leaves it
        else:
            release = nbformat.read(path, as_version=4)
            nbformat.write(submission(release, solutions, **STUDENTS[student][0]), path)
        # On a hub each student is a user of their own; here all are one, so each says who.
        run_nbgrader(home, env, "submit", ASSIGNMENT, *flags, f"--student={student}")

    run_nbgrader(course, instructor, "collect", ASSIGNMENT)
    started = time.perf_counter()
    autograde = run_nbgrader(course, instructor, "autograde", ASSIGNMENT, "--force", check=False)
    seconds = time.perf_counter() - started
    feedback = run_nbgrader(course, instructor, "generate_feedback", ASSIGNMENT, "--force", check=False)
    run_nbgrader(course, instructor, "export")
    with open(course / "grades.csv", newline="") as file:
        totals = {row["student_id"]: float(row["raw_score"]) for row in csv.DictReader(file)}
    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in STUDENTS:
            scores[student] = {
                grade_id: gradebook.find_grade(grade_id, NOTEBOOK[:-6], ASSIGNMENT, student).score
                for grade_id in POINTS
            }
    return dict(course=course, autograde=autograde, feedback=feedback, totals=totals, scores=scores, seconds=seconds)


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.hub
@pytest.mark.xdist_group("hub")  # the class is graded once, in one worker, for all of these
@pytest.mark.parametrize("student", STUDENTS)
def test_each_submission_gets_the_points_of_its_honest_work(hub, student):
    expected = STUDENTS[student][1]
    assert hub["scores"][student] == expected, hub["autograde"].stdout[-3000:] + hub["autograde"].stderr[-3000:]
    assert hub["totals"][student] == sum(expected.values())  # what `nbgrader export` hands the registrar


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.hub
@pytest.mark.xdist_group("hub")  # the class is graded once, in one worker, for all of these
def test_a_file_that_is_not_a_notebook_is_named_and_the_rest_are_graded(hub):
    log = hub["autograde"].stdout + hub["autograde"].stderr
    assert hub["autograde"].returncode != 0  # nbgrader reports the failure...
    assert f"There was an error processing assignment '{ASSIGNMENT}' for student '{NOT_A_NOTEBOOK}'" in log
    failed = re.findall(rf"There was an error processing assignment '{ASSIGNMENT}' for student '([^']+)'", log)
    assert set(failed) == {NOT_A_NOTEBOOK}  # ...for that student alone
    assert all(
        (hub["course"] / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").exists() for student in STUDENTS
    )


def autograded_errors(hub, student):
    """{grade_id: names of the errors in that cell} of a student's autograded notebook."""
    autograded = nbformat.read(hub["course"] / "autograded" / student / ASSIGNMENT / NOTEBOOK, as_version=4)
    return {
        nbgrader_meta(c).get("grade_id"): [o.ename for o in c.outputs if o.output_type == "error"]
        for c in autograded.cells
        if c.cell_type == "code"
    }


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.hub
@pytest.mark.xdist_group("hub")  # the class is graded once, in one worker, for all of these
def test_the_endless_loop_costs_one_cell_limit_and_the_rest_is_graded(hub):
    errors = autograded_errors(hub, "endless_loop")
    assert "CellTimeoutError" in errors["b_culprit_answer"]
    assert errors["b_fix"] == []  # graded after the loop was stopped


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.hub
@pytest.mark.xdist_group("hub")  # the class is graded once, in one worker, for all of these
def test_tampering_is_named_where_the_student_and_the_instructor_see_it(hub):
    errors = autograded_errors(hub, "patched_checks")
    assert all("NotGradedAutomatically" in errors[grade_id] for grade_id in POINTS), errors
    log = hub["autograde"].stdout + hub["autograde"].stderr
    assert "Tampering?" in log and "workbook.find_gradient_breaks = " in log  # the line, for the instructor
    assert autograded_errors(hub, "hidden_patch")["c_reconstruction"] == ["AssertionError"]
    assert autograded_errors(hub, "fake_predict")["c_reconstruction"] == ["AssertionError"]


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.hub
@pytest.mark.xdist_group("hub")  # the class is graded once, in one worker, for all of these
def test_a_dead_kernel_is_marked_on_its_cell_and_grading_goes_on(hub):
    errors = autograded_errors(hub, "kills_kernel")
    assert errors["b_culprit_answer"] == ["DeadKernelError"]
    assert errors["a_gradient"] == errors["b_fix"] == []  # before it, and after it in a new kernel


def test_cell_limits_budget_and_target_are_the_ones_the_assignment_promises():
    from workbook.grading import TARGET_MSE, TIME_BUDGET_SECONDS, cell_timeout

    notebook = nbformat.read(NOTEBOOKS / NOTEBOOK, as_version=4)
    # What the title cell promises students, in its own words: 300 s for part (c), 2 minutes a cell.
    title = " ".join(notebook.cells[0].source.split())
    assert "at most 2 minutes (part (c)'s training cell and its check: the 300 s budget and a minute more)" in title
    limits = [(nbgrader_meta(c).get("grade_id"), cell_timeout(c)) for c in notebook.cells if c.cell_type == "code"]
    part_c = {"c_train_answer": 360, "c_reconstruction": 360}  # 300 s and a minute more
    assert {grade_id: limit for grade_id, limit in limits if grade_id in part_c} == part_c
    assert {limit for grade_id, limit in limits if grade_id not in part_c} == {120}  # every other cell
    parameters = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    assert re.search(r"^time_budget_seconds = 300 ", parameters.source, re.M)
    # the check cell grades with literal numbers, the same as workbook.grading's
    check = next(c for c in notebook.cells if nbgrader_meta(c).get("grade_id") == "c_reconstruction")
    assert "time_budget_seconds=300," in check.source and "target_mse=0.006," in check.source
    assert (TIME_BUDGET_SECONDS, TARGET_MSE) == (300, 0.006)


def test_replaced_functions_names_what_an_answer_cell_patched(tmp_path):
    # In a process of its own, as a kernel would be: patch, ask, and compare with the list of
    # what was patched. Each line is a way the in-kernel check was once fooled.
    script = (
        "import sys, types, numpy as np, tensorflow as tf, workbook, workbook.checks, workbook.assignment_checks\n"
        "from workbook.grading import replaced_functions\n"
        "print(replaced_functions())\n"
        "np.mean = lambda *a, **k: 0.0\n"
        "np.abs = np.negative\n"
        "tf.round = tf.floor\n"
        "fromnumeric = sys.modules.get('numpy._core.fromnumeric') or sys.modules['numpy.core.fromnumeric']\n"
        "fromnumeric._wrapfunc = lambda obj, method, *a, **k: obj\n"
        "workbook.checks.report_mismatch = lambda *a, **k: True\n"
        "sys.modules['workbook.assignment_checks'] = types.SimpleNamespace(check_quantizer=lambda *a, **k: True)\n"
        "print(replaced_functions())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=clean_environment(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    before, after = (eval(line) for line in result.stdout.strip().splitlines()[-2:])
    assert before == []
    patched = {
        "numpy.abs",
        "numpy.mean",
        "tensorflow.round",
        "workbook.checks.report_mismatch",
        "workbook.assignment_checks",
    }
    assert patched <= set(after) and any(name.endswith("fromnumeric._wrapfunc") for name in after), after
    unexpected = [
        name
        for name in after
        if name not in patched
        and not name.endswith("fromnumeric._wrapfunc")
        and not name.startswith("workbook.assignment_checks.")
    ]
    assert not unexpected, unexpected


def test_tampering_lines_finds_what_changes_a_library_and_nothing_in_the_notebooks():
    from workbook.grading import tampering_lines

    answer = nbformat.v4.new_code_cell(
        "import numpy as np\nimport workbook.grading as g\nfrom workbook.assignment_checks import check_quantizer\n"
        "model = workbook.autoencoder()\nmodel.trainable = False\n"  # an honest line: not an imported name
        "np.mean = lambda *a: 0\n"
        "g.assert_genuine = lambda: None\n"
        "check_quantizer.__code__ = (lambda *a: True).__code__\n"
        "setattr(np, 'abs', np.negative)\n"
        "import sys; sys.modules['workbook.grading'] = None\n"
        "%time x = 1\n"
    )
    found = tampering_lines(nbformat.v4.new_notebook(cells=[answer]))
    assert sorted({line for _, line, _, _ in found}) == [6, 7, 8, 9, 10]
    # every notebook of the workbook, instructor's version, is honest work
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        assert tampering_lines(nbformat.read(path, as_version=4)) == [], path.name
