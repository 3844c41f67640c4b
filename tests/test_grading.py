"""Grading assignment 05 the way a JupyterHub grades it, against honest and dishonest work.

Everything goes through nbgrader's own command line, in subprocesses whose environment a
hub would give them (a fresh home per person, no PYTEST_* or TF_* variables; under pytest,
ipykernel hides the kernel's stderr, which nbgrader counts against a cell). The instructor
releases the (turned-down) assignment into an exchange folder; each student fetches it in
a home of their own, answers, and submits; the instructor collects, autogrades the class
two submissions at a time (``python -m workbook.course.grade_class``), generates feedback and
exports the grades. One class is graded per test run and shared by the tests below.

Expected scores are the points of the honest work in each submission, written out here
from the assignment's rules, never read from the grader. Every dishonest submission is
one of the attacks a strong student tried (and variations): each earns nothing beyond its
honest work, and the honest students graded beside it keep their grades.
"""

import csv
import os
import re
import shutil
import subprocess
import sys
import sysconfig
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

# Rebind the checks and the recorders through module aliases, forge what the hidden tests
# record (from the grader's own inputs, answered with the identity), point one record at a
# file outside the box, and rewrite the probe to inputs where the forgery would be right.
FORGER = """import os
import numpy as np
import workbook.lab.assignment_checks as c, workbook.course.grading as g

c.check_quantizer = c.check_gradient_fix = c.check_reconstruction = lambda *a, **k: True
g.record_function = g.record_answers = g.record_model = g.judge_here = lambda *a, **k: None
quantize_2bit = lambda x: x
probe = np.load(g.PROBE_FILE)
os.makedirs(g.ARTIFACTS_FOLDER, exist_ok=True)
for grade_id in ("a_forward", "a_gradient", "b_fix"):
    np.savez(
        f"{g.ARTIFACTS_FOLDER}/{grade_id}.npz",
        x_value=probe["x"], x_gradient=np.ones_like(probe["x"]),
        code_value=probe["code"], code_gradient=np.ones_like(probe["code"]),
    )
os.symlink("/etc/passwd", f"{g.ARTIFACTS_FOLDER}/c_reconstruction.npz")
# the probe rewritten where the identity meets the requirement: 0 is its own level, gradient 1
zeros = {name: np.zeros_like(probe[name]) for name in ("x", "code", "images")}
np.savez(g.PROBE_FILE, **zeros, model_seed=probe["model_seed"])
for grade_id in ("a_forward", "a_gradient", "b_fix"):
    np.savez(
        f"{g.ARTIFACTS_FOLDER}/{grade_id}.npz",
        x_value=0 * probe["x"], x_gradient=np.ones_like(probe["x"]),
        code_value=0 * probe["code"], code_gradient=np.ones_like(probe["code"]),
    )
"""

# Reach what grading depends on: the gradebook, site-packages (a .pth file runs in every
# Python started later), the instructor's source, a classmate's submission, the workbook's
# own files; shadow the workbook and Python's start-up; start a process that outlives grading.
ESCAPER = """import os, sqlite3, subprocess

attempts = {{}}

def attempt(name, action):
    try:
        action()
        attempts[name] = "done"
    except Exception as error:
        attempts[name] = type(error).__name__

def gradebook():
    db = sqlite3.connect({gradebook!r})
    db.execute("UPDATE grade SET manual_score = 10")
    db.commit()

attempt("gradebook", gradebook)
attempt("site-packages", lambda: open({pth!r}, "w").write("import os; os.system('touch {marker}')"))
attempt("source", lambda: open({source!r}, "a").write(" "))
attempt("classmate", lambda: open({classmate!r}, "w").write("{{{{}}}}"))
attempt("workbook", lambda: open({workbook_file!r}, "a").write("# changed"))
os.makedirs("workbook/course", exist_ok=True)
open("workbook/course/verdicts.py", "w").write("def judge(*a, **k): return dict.fromkeys({points!r}, (True, ''))")
open("sitecustomize.py", "w").write("open({marker!r}, 'w')")
os.environ.update(PYTHONPATH=os.getcwd(), PYTHONSTARTUP="sitecustomize.py")
subprocess.Popen(["setsid", "sh", "-c", "sleep 30; touch {marker}"])
print("attempts:", attempts)
model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
"""

# Part (c) without training: the visible test set zeroed and a model that outputs about 0,
# NumPy's mean patched, the target and the budget reassigned, the clock stopped.
CHEATS_PART_C = """import numpy as np

x_test[:] = 0.0
np.mean = lambda *args, **kwargs: 0.0
target_mse, time_budget_seconds = 1.0, 10**9
time.perf_counter = lambda: training_started
model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
model.get_layer("output").bias.assign([-30.0])  # outputs about 0: "reconstructs" the zeroed images
model.predict = lambda x, **kwargs: x
"""

# A workbook/ folder handed in next to the notebook, which would shadow the real one.
SHADOW_PACKAGE = {
    "workbook/__init__.py": "from .verdicts import judge\n",
    "workbook/course/verdicts.py": "def judge(*args, **kwargs):\n    return {}\n",
}
HUGE_OUTPUT = 'print("x" * 50_000_000)  # one 50 MB line\n'


def nbgrader_meta(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


def answer_text(cell):
    """A solution cell's source without the solution markers: what a student would write."""
    return "\n".join(
        line for line in cell.source.splitlines() if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
    )


def all_solutions(**overrides):
    answers = dict.fromkeys(("a_quantize_2bit", "b_culprit_answer", "b_fix_answer", "c_train_answer"), "solution")
    answers.update(overrides)
    return answers


HONEST_A_AND_B = {"a_forward": 1, "a_gradient": 2, "b_culprit": 1, "b_fix": 2, "c_reconstruction": 0}

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
    # checks and recorders rebound through aliases, records forged: nothing is honest here
    "forger": (
        dict(
            answers={
                "a_quantize_2bit": FORGER,
                "b_culprit_answer": 'culprit_op = "Round"\nculprit_variable = "levels"',
                "b_fix_answer": "fixed_bottleneck = colleague_bottleneck",
                "c_train_answer": "model = workbook.autoencoder(bottleneck=quantize_2bit)",
            },
            files=SHADOW_PACKAGE,
        ),
        dict.fromkeys(POINTS, 0),
    ),
    # (a) and (b) right; (c) tries to get out of the sandbox and trains nothing
    "escaper": (dict(answers=all_solutions(c_train_answer="ESCAPER")), HONEST_A_AND_B),
    # (a) and (b) right; (c) forged every way the kernel can
    "cheats_part_c": (dict(answers=all_solutions(c_train_answer=CHEATS_PART_C)), HONEST_A_AND_B),
    # (a) right; two check cells deleted: the grader has nothing to run for them
    "deleted_checks": (
        dict(answers={"a_quantize_2bit": "solution"}, deleted=("a_gradient", "c_reconstruction")),
        {"a_forward": 1, "a_gradient": 0, "b_culprit": 0, "b_fix": 0, "c_reconstruction": 0},
    ),
    # (a) and (b)'s fix right; an answer that never ends, and one that ends the kernel: each
    # costs its own cell, and the cells after them are graded
    "loop_and_kill": (
        dict(answers=all_solutions(b_culprit_answer="while True:\n    pass", c_train_answer="import os\nos._exit(1)")),
        {"a_forward": 1, "a_gradient": 2, "b_culprit": 0, "b_fix": 2, "c_reconstruction": 0},
    ),
    # the release with one 50 MB line printed
    "huge_output": (dict(answers={"a_quantize_2bit": HUGE_OUTPUT}), dict.fromkeys(POINTS, 0)),
}
NOT_A_NOTEBOOK = "broken_file"  # hands in a file that is not valid JSON


def submission(release, solutions, answers=(), locked_edits=(), deleted=(), files=None):
    """The released notebook with answer cells filled in (``files`` are handed in beside it).

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


def escaper_source(base, course):
    """The escaper's cell, aimed at this run's own files; and the marker it tries to leave."""
    marker = base / "escaped"
    source = ESCAPER.format(
        gradebook=str(course / "gradebook.db"),
        pth=os.path.join(sysconfig.get_paths()["purelib"], "zz_workbook_attack.pth"),
        source=str(course / "source" / ASSIGNMENT / NOTEBOOK),
        classmate=str(course / "submitted" / "reference" / ASSIGNMENT / NOTEBOOK),
        workbook_file=str(ROOT / "workbook" / "course" / "verdicts.py"),
        marker=str(marker),
        points=list(POINTS),
    )
    return source, marker


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


# Session-wide: a module-wide fixture is graded again whenever its worker runs another module's
# test in between. Its tests are marked xdist_group("hub"), so the class is graded on one worker,
# once (tests/test_parallel_groups.py checks that the grouping holds).
@pytest.fixture(scope="session")
def hub(tmp_path_factory):
    """The whole round trip; returns what the instructor sees at the end."""
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from nbgrader.api import Gradebook

    from workbook.course.grade_class import grade_class
    from workbook.course.sandbox import sandbox_problem

    if sandbox_problem():
        pytest.fail(sandbox_problem())
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
    source_bytes = (course / "source" / ASSIGNMENT / NOTEBOOK).read_bytes()
    workbook_bytes = (ROOT / "workbook" / "course" / "verdicts.py").read_bytes()
    run_nbgrader(course, instructor, "generate_assignment", ASSIGNMENT, "--force")
    run_nbgrader(course, instructor, "release_assignment", ASSIGNMENT)
    solutions = {nbgrader_meta(c)["grade_id"]: c for c in source.cells if nbgrader_meta(c).get("solution")}
    escaper, marker = escaper_source(base, course)

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
            handed_in = dict(STUDENTS[student][0])
            if handed_in.get("answers", {}).get("c_train_answer") == "ESCAPER":
                handed_in["answers"] = {**handed_in["answers"], "c_train_answer": escaper}
            for name, text in (handed_in.pop("files", None) or {}).items():
                (path.parent / name).parent.mkdir(parents=True, exist_ok=True)
                (path.parent / name).write_text(text)
            nbformat.write(submission(release, solutions, **handed_in), path)
        # On a hub each student is a user of their own; here all are one, so each says who.
        run_nbgrader(home, env, "submit", ASSIGNMENT, *flags, f"--student={student}")

    run_nbgrader(course, instructor, "collect", ASSIGNMENT)
    started = time.perf_counter()
    graded = grade_class(course, ASSIGNMENT, workers=2, extra=["--force"], env=instructor, log=lambda line: None)
    seconds = time.perf_counter() - started
    time.sleep(1)
    after = dict(processes=leftover_processes(marker), escaped=marker.exists())
    feedback = run_nbgrader(course, instructor, "generate_feedback", ASSIGNMENT, "--force", check=False)
    run_nbgrader(course, instructor, "export")
    with open(course / "grades.csv", newline="") as file:
        rows = {row["student_id"]: row for row in csv.DictReader(file)}
    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in STUDENTS:
            scores[student] = {
                grade_id: gradebook.find_grade(grade_id, NOTEBOOK[:-6], ASSIGNMENT, student).score
                for grade_id in POINTS
            }
    after.update(
        source_unchanged=(course / "source" / ASSIGNMENT / NOTEBOOK).read_bytes() == source_bytes,
        workbook_unchanged=(ROOT / "workbook" / "course" / "verdicts.py").read_bytes() == workbook_bytes,
        pth=os.path.exists(os.path.join(sysconfig.get_paths()["purelib"], "zz_workbook_attack.pth")),
    )
    return dict(course=course, graded=graded, feedback=feedback, rows=rows, scores=scores, seconds=seconds, after=after)


def log_of(hub, student):
    return hub["graded"][student][2][-6000:]


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.hub
@pytest.mark.xdist_group("hub")
@pytest.mark.parametrize("student", STUDENTS)
def test_each_submission_gets_the_points_of_its_honest_work(hub, student):
    expected = STUDENTS[student][1]
    assert hub["scores"][student] == expected, log_of(hub, student)
    assert float(hub["rows"][student]["raw_score"]) == sum(expected.values())  # what `nbgrader export` hands on
    # nbgrader leaves the grades of deleted check cells to the instructor, and the export says so
    assert hub["rows"][student]["status"] == ("needs manual grading" if student == "deleted_checks" else "graded")


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.hub
@pytest.mark.xdist_group("hub")
def test_a_file_that_is_not_a_notebook_is_marked_not_graded_and_the_rest_are_graded(hub):
    assert hub["graded"][NOT_A_NOTEBOOK][0] != 0  # nbgrader reports the failure...
    assert "There was an error processing assignment" in hub["graded"][NOT_A_NOTEBOOK][2]
    assert all(hub["graded"][student][0] == 0 for student in STUDENTS), {s: log_of(hub, s) for s in STUDENTS}
    assert hub["rows"][NOT_A_NOTEBOOK]["status"].startswith("not graded")  # ...and the export says so
    assert all(
        (hub["course"] / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").exists() for student in STUDENTS
    )


def autograded(hub, student):
    return nbformat.read(hub["course"] / "autograded" / student / ASSIGNMENT / NOTEBOOK, as_version=4)


def autograded_errors(hub, student):
    """{grade_id: names of the errors in that cell} of a student's autograded notebook."""
    return {
        nbgrader_meta(c).get("grade_id"): [o.ename for o in c.get("outputs", []) if o.output_type == "error"]
        for c in autograded(hub, student).cells
        if c.cell_type == "code"
    }


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.hub
@pytest.mark.xdist_group("hub")
def test_the_endless_loop_and_the_dead_kernel_each_cost_their_own_cell(hub):
    errors = autograded_errors(hub, "loop_and_kill")
    assert "CellTimeoutError" in errors["b_culprit_answer"]
    assert "DeadKernelError" in errors["c_train_answer"]
    assert errors["b_fix"] == [] and errors["a_gradient"] == []  # graded after the loop, before the kill


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.hub
@pytest.mark.xdist_group("hub")
def test_the_sandbox_held_nothing_outside_it_changed_and_nothing_it_started_survived(hub):
    printed = "".join(
        o.get("text", "")
        for c in autograded(hub, "escaper").cells
        if nbgrader_meta(c).get("grade_id") == "c_train_answer"
        for o in c.outputs
    )
    attempts = eval(re.search(r"attempts: (\{.*\})", printed).group(1))
    assert set(attempts) == {"gradebook", "site-packages", "source", "classmate", "workbook"}
    assert "done" not in attempts.values(), attempts
    assert hub["after"] == dict(
        processes=[], escaped=False, source_unchanged=True, workbook_unchanged=True, pth=False
    ), hub["after"]


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.hub
@pytest.mark.xdist_group("hub")
def test_the_verdict_says_why_without_giving_the_answer_and_feedback_hides_the_hidden_tests(hub):
    errors = {
        nbgrader_meta(c).get("grade_id"): [o.evalue for o in c.get("outputs", []) if o.output_type == "error"]
        for c in autograded(hub, "half_right").cells
    }
    assert any("is not the op that cuts" in message for message in errors["b_culprit"]), errors
    feedback = (hub["course"] / "feedback" / "reference" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "record_function" not in feedback and "HIDDEN TESTS" not in feedback
    assert "checked by the grader" in feedback  # the verdict itself is shown
    half_right = (hub["course"] / "feedback" / "half_right" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "record_answers" not in half_right and "is not the op that cuts" in half_right


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.hub
@pytest.mark.xdist_group("hub")
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


def test_cell_limits_budget_and_target_are_the_ones_the_assignment_promises():
    from workbook.course.grading import TARGET_MSE, TIME_BUDGET_SECONDS, cell_timeout
    from workbook.course.verdicts import TARGET_MSE as JUDGED_MSE
    from workbook.course.verdicts import TIME_BUDGET_SECONDS as JUDGED_BUDGET

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
    # the check cell grades with literal numbers, the same as the grader's
    check = next(c for c in notebook.cells if nbgrader_meta(c).get("grade_id") == "c_reconstruction")
    assert "time_budget_seconds=300," in check.source and "target_mse=0.006," in check.source
    assert (TIME_BUDGET_SECONDS, TARGET_MSE) == (JUDGED_BUDGET, JUDGED_MSE) == (300, 0.006)


# --- the pieces, without nbgrader ------------------------------------------------------


def test_verdicts_pass_the_reference_and_fail_what_differs(tmp_path, monkeypatch):
    # Recorded in this process, judged as the grader judges (python -I, a clean environment):
    # the references come from the formulas written out here, not from the verdict module.
    import keras

    import workbook
    from workbook.course import grading

    monkeypatch.chdir(tmp_path)
    grading.write_probe(grading.PROBE_FILE)

    def forward(x):
        return keras.ops.round(3.0 * keras.ops.clip(x, 0.0, 1.0)) / 3.0

    clipped = workbook.surrogate(forward, lambda x: keras.ops.cast((x >= 0.0) & (x <= 1.0), x.dtype))
    grading.record_function("a_forward", workbook.straight_through(forward))  # right values, wrong gradient
    grading.record_function("a_gradient", workbook.straight_through(forward))
    grading.record_function("b_fix", clipped)
    grading.record_answers("b_culprit", culprit_op=" cast ", culprit_variable="codes")
    grading.record_model("c_reconstruction", workbook.autoencoder(bottleneck=clipped))  # untrained
    verdicts = grading.run_verdicts(tmp_path / grading.PROBE_FILE, tmp_path / grading.ARTIFACTS_FOLDER, 10.0)
    passed = {grade_id: verdict[0] for grade_id, verdict in verdicts.items()}
    assert passed == {
        "a_forward": True,
        "a_gradient": False,
        "b_culprit": True,
        "b_fix": True,
        "c_reconstruction": False,
    }
    assert "test MSE 0.2" in verdicts["c_reconstruction"][1]  # an untrained model: about 0.23


def test_verdicts_read_recordings_as_data_only(tmp_path):
    import numpy as np

    from workbook.course import grading, verdicts

    grading.write_probe(tmp_path / grading.PROBE_FILE)
    folder = tmp_path / "records"
    folder.mkdir()
    np.save(folder / "pickled.npy", np.array([object()], dtype=object), allow_pickle=True)
    (folder / "pickled.npy").rename(folder / "a_forward.npz")
    (folder / "a_gradient.npz").symlink_to("/etc/passwd")
    (folder / "b_fix.npz").write_bytes(b"\0" * (verdicts.MAX_ARTIFACT_BYTES + 1))
    (folder / "b_culprit.json").write_text('{"culprit_op": ["Cast"]}')
    found = verdicts.judge(
        tmp_path / grading.PROBE_FILE, folder, grade_ids=("a_forward", "a_gradient", "b_fix", "b_culprit")
    )
    assert {grade_id: passed for grade_id, (passed, _) in found.items()} == dict.fromkeys(found, False)
    assert "not an array file" in found["a_forward"][1] and "cannot be opened" in found["a_gradient"][1]
    assert "at most" in found["b_fix"][1] and "does not hold strings" in found["b_culprit"][1]


def run_sandboxed(tmp_path, script, hidden=()):
    from workbook.course.sandbox import Box, sandbox_command, sandbox_problem

    if sandbox_problem():
        pytest.skip(sandbox_problem())
    box = Box()
    try:
        command = sandbox_command(box, [sys.executable, "-c", script], hidden)
        command[command.index("sh") + 2] = 'exec "$@"'  # keep its output, for the test
        return subprocess.run(command, capture_output=True, text=True, timeout=120)
    finally:
        box.remove()


def test_the_sandbox_shows_the_machine_read_only_hides_the_course_and_ends_every_process(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / "gradebook.db").write_text("grades")
    marker = tmp_path / "outlived"
    script = f"""
import os, socket, subprocess, time
print("sees course:", os.listdir({str(course)!r}))
for path in ({str(course / "gradebook.db")!r}, {str(ROOT / "workbook" / "zz.py")!r}, "/etc/zz"):
    try:
        open(path, "a").write("x"); print("wrote", path)
    except OSError as error:
        print("refused", type(error).__name__)
try:
    socket.create_connection(("1.1.1.1", 80), timeout=2); print("network")
except OSError:
    print("no network")
subprocess.Popen(["setsid", "sh", "-c", "sleep 3; touch {marker}"])
"""
    result = run_sandboxed(tmp_path, script, hidden=[course])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "sees course: []", result.stdout
    assert [line.split()[0] for line in lines[1:4]] == ["refused"] * 3, result.stdout
    assert lines[4] == "no network"
    time.sleep(4)
    assert not marker.exists() and not (ROOT / "workbook" / "zz.py").exists()
    assert (course / "gradebook.db").read_text() == "grades"
