"""What a recording scores: the verdicts the grader takes, outside the student's kernel, from what it recorded.

The hidden tests only record (workbook/course/grading.py); the verdicts (workbook/course/verdicts.py,
run by the course's answer key in a process of the grader's) read those recordings as data and
compare them with references written out from the assignment's rules. Here, recordings made in
this process, honest, wrong and malformed, and what each part scores; the same verdicts reached
through nbgrader's command line are tests/test_grading_round_trip.py. And the answer key stays
with the grader: no module of the installed package holds an answer (tests/answer_scan.py).
"""

import json
import pathlib
import re
import shutil
import subprocess
import sys

import nbformat
import pytest
from grading_helpers import (
    ANSWER_KEY_PATH,
    NOTEBOOK,
    ROOT,
    answer_key,
    clipped_quantizer,
    nbgrader_meta,
    reconstruction_mse,
    record_formula_answers,
    two_bit_levels,
    unseen_digits,
)
from notebook_runner import NOTEBOOKS, clean_environment

from workbook.course.grading import ANSWER_KEY

ANSWER_SCAN = pathlib.Path(__file__).parent / "answer_scan.py"


@pytest.fixture(autouse=True)
def verdict_processes_end_with_the_test():
    """A verdict process a test starts in this process (run_verdicts) ends with the test, as it ends with a grader.

    Left to the worker's exit, it would outlive the tests that worker runs after it: the browser
    test's session, for one, counts every process started while it is open.
    """
    yield
    from workbook.course import grading

    grading._end_verdict_processes()


def passed_parts(verdicts):
    """{grade id: True, False, or None (left for manual grading)} of what run_verdicts or judge returned."""
    return {grade_id: verdict[0] for grade_id, verdict in verdicts.items()}


def promised_limits(notebook):
    """(seconds a cell, part (c)'s budget in seconds), as the title cell promises them to students."""
    title = " ".join(notebook.cells[0].source.split())
    promise = re.search(r"at most (\d+) minutes \(part \(c\)'s training cell and its check: the (\d+) s budget", title)
    assert promise, title
    return int(promise.group(1)) * 60, int(promise.group(2))


def code_cells(notebook):
    return [c for c in notebook.cells if c.cell_type == "code"]


def cell(notebook, grade_id):
    return next(c for c in notebook.cells if nbgrader_meta(c).get("grade_id") == grade_id)


# The notebook's own words and numbers are the independent answer to what the grader reads from the
# spec: its title cell's promise, its parameters cell, the literal numbers its check cell grades
# with, its graded cells' points.


def test_each_cells_limit_is_the_one_the_title_cell_promises():
    from workbook.course.grading import cell_timeout

    notebook = nbformat.read(NOTEBOOKS / NOTEBOOK, as_version=4)
    per_cell, budget = promised_limits(notebook)
    part_c = dict.fromkeys(("c_train_answer", "c_reconstruction"), budget + 60)  # the budget and a minute more
    limits = {nbgrader_meta(c).get("grade_id"): cell_timeout(c) for c in code_cells(notebook)}
    assert {grade_id: limits.pop(grade_id) for grade_id in part_c} == part_c
    assert set(limits.values()) == {per_cell}  # every other cell


def test_the_graders_budget_target_and_points_are_the_ones_the_notebook_states_and_grades_with():
    from workbook.lab import assignment_spec as spec

    notebook = nbformat.read(NOTEBOOKS / NOTEBOOK, as_version=4)
    _, budget = promised_limits(notebook)
    parameters = "".join(c.source for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    assert re.search(rf"^time_budget_seconds = {budget} ", parameters, re.M)
    check = cell(notebook, "c_reconstruction").source
    graded_with = [re.search(rf"\b{name}=([0-9.]+),", check) for name in ("time_budget_seconds", "target_mse")]
    assert [float(found.group(1)) for found in graded_with] == [spec.TIME_BUDGET_SECONDS, spec.TARGET_MSE]
    assert budget == spec.TIME_BUDGET_SECONDS
    graded = [nbgrader_meta(c) for c in notebook.cells]
    assert dict(spec.POINTS) == {meta["grade_id"]: meta["points"] for meta in graded if meta.get("grade")}


def test_verdicts_pass_the_reference_and_fail_what_differs(tmp_path, monkeypatch):
    # Recorded in this process, judged as the grader judges (python -I, a clean environment):
    # the references come from the formulas written out here, not from the verdict module.
    import workbook
    from workbook.course import grading

    monkeypatch.chdir(tmp_path)
    grading.write_probe(grading.PROBE_FILE)
    clipped = clipped_quantizer()
    grading.record_function("a_forward", workbook.straight_through(two_bit_levels))  # right values, wrong gradient
    grading.record_function("a_gradient", workbook.straight_through(two_bit_levels))
    grading.record_function("b_fix", clipped)
    grading.record_answers("b_culprit", culprit_op=" cast ", culprit_variable="codes")
    grading.record_model("c_reconstruction", workbook.autoencoder(bottleneck=clipped))  # untrained
    key = ANSWER_KEY_PATH
    verdicts = grading.run_verdicts(key, tmp_path / grading.PROBE_FILE, tmp_path / grading.ARTIFACTS_FOLDER, 10.0)
    assert passed_parts(verdicts) == {
        "a_forward": True,
        "a_gradient": False,
        "b_culprit": True,
        "b_fix": True,
        "c_reconstruction": False,
    }
    assert "MSE 0.2" in verdicts["c_reconstruction"][1]  # an untrained model: about 0.23


def test_part_c_is_measured_on_the_digits_the_notebook_never_hands_out(tmp_path, monkeypatch):
    import numpy as np

    from workbook.course import verdicts
    from workbook.lab.assignment_data import load_assignment_digits

    probe, artifacts = record_formula_answers(tmp_path, monkeypatch)  # (c): an untrained model
    unseen = unseen_digits()
    assert len(unseen) == 1000
    with np.load(artifacts / "c_reconstruction.npz") as stored:
        weights = np.concatenate([stored[f"weight_{i}"].ravel() for i in range(len(stored.files))])
    (_, _), (x_test, _) = load_assignment_digits(8000, 1000)
    mse = reconstruction_mse(weights, unseen)
    assert f"{mse:.5f}" != f"{reconstruction_mse(weights, x_test):.5f}"  # the two sets tell apart
    found = verdicts.judge(probe, artifacts, answer_key(), 10.0, ["c_reconstruction"])
    assert f"MSE {mse:.5f} on 1,000 held-out test digits" in found["c_reconstruction"][1], found


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
        tmp_path / grading.PROBE_FILE, folder, answer_key(), grade_ids=("a_forward", "a_gradient", "b_fix", "b_culprit")
    )
    assert passed_parts(found) == dict.fromkeys(found, False)
    assert "not an array file" in found["a_forward"][1] and "cannot be opened" in found["a_gradient"][1]
    assert "at most" in found["b_fix"][1] and "does not hold strings" in found["b_culprit"][1]


def zip_bomb(path, name="x_value", values=64 * 2**20):
    """An .npz whose one float32 array declares ``values`` zeros: a few hundred kB, 4 bytes a value inflated."""
    import zipfile

    import numpy as np

    header = {"descr": "<f4", "fortran_order": False, "shape": (values,)}
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open(f"{name}.npy", "w", force_zip64=True) as member,
    ):
        np.lib.format.write_array_header_1_0(member, header)
        chunk = bytes(2**22)
        for _ in range(values * 4 // len(chunk)):
            member.write(chunk)


def test_a_recording_that_would_inflate_is_refused_before_its_values_are_read(tmp_path):
    import tracemalloc

    from workbook.course import verdicts

    zip_bomb(tmp_path / "a_forward.npz")  # 256 MB once inflated
    assert (tmp_path / "a_forward.npz").stat().st_size < verdicts.MAX_ARTIFACT_BYTES
    tracemalloc.start()
    try:
        with pytest.raises(verdicts.Unreadable, match="an array of 268,435,5[0-9,]+ bytes"):
            verdicts._recorded(tmp_path, "a_forward")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak  # the file's bytes and a header, never the 256 MB


def test_a_recording_whose_shape_is_not_positive_is_refused_before_it_is_read(tmp_path):
    import io
    import zipfile

    import numpy as np

    from workbook.course import verdicts

    for shape in ((-1,), (0, 3), (-2, -2)):
        packed = io.BytesIO()
        with zipfile.ZipFile(packed, "w") as archive, archive.open("x_value.npy", "w") as member:
            np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": shape})
            member.write(bytes(4000))
        (tmp_path / "a_forward.npz").write_bytes(packed.getvalue())
        with pytest.raises(verdicts.Unreadable, match="every length must be positive"):
            verdicts._recorded(tmp_path, "a_forward")


@pytest.mark.timeout(600)
def test_each_verdict_stands_alone_a_malformed_record_fails_only_its_own_part(tmp_path, monkeypatch):
    from workbook.course import grading

    probe, artifacts = record_formula_answers(tmp_path, monkeypatch)
    zip_bomb(artifacts / "a_gradient.npz")
    (artifacts / "b_culprit.json").write_text("[" * 100_000 + "]" * 100_000)  # nested 100,000 levels deep
    verdicts = grading.run_verdicts(ANSWER_KEY_PATH, probe, artifacts, 10.0)
    assert passed_parts(verdicts) == {
        "a_forward": True,
        "a_gradient": False,
        "b_culprit": False,
        "b_fix": True,
        "c_reconstruction": False,  # untrained
    }, verdicts
    assert re.search("an array of 268,435,5[0-9,]+ bytes", verdicts["a_gradient"][1]), verdicts
    assert "nested too deep" in verdicts["b_culprit"][1]
    # the verdict process has a memory limit of its own, whatever a recording holds
    (process,) = grading._VERDICT_PROCESSES.values()
    with open(f"/proc/{process.process.pid}/limits") as limits:
        data = next(line for line in limits if line.startswith("Max data size")).split()
    assert data[3:5] == [str(grading.MAX_VERDICT_DATA_BYTES)] * 2, data


@pytest.mark.slow
def test_one_verdict_process_judges_each_submission_as_a_process_of_its_own_would(tmp_path, monkeypatch):
    # The grader's process judges submission after another; the answer key run once per
    # submission (python -I KEY PROBE ARTIFACTS, nothing judged before it) is the reference.
    from workbook.course import grading

    submissions = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        submissions.append(record_formula_answers(tmp_path / name, monkeypatch))
    (submissions[1][1] / "a_gradient.npz").write_text("not an array file")  # the second fails (a)'s gradient
    key = str(ANSWER_KEY_PATH)
    alone = []
    for probe, artifacts in submissions:
        command = [sys.executable, "-I", key, str(probe), str(artifacts), "--training-seconds", "10"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        alone.append({grade_id: tuple(verdict) for grade_id, verdict in json.loads(result.stdout).items()})
    assert alone[0] != alone[1]
    in_turn = [grading.run_verdicts(key, *submissions[index % 2], 10.0) for index in range(3)]
    assert in_turn == [alone[0], alone[1], alone[0]]
    process = grading._VERDICT_PROCESSES[key].process
    process.stdin.close()  # as when the grader ends, however it ends: the process ends by itself
    assert process.wait(timeout=120) == 0
    grading._end_verdict_processes()


def test_a_part_the_grader_cannot_judge_is_left_for_manual_grading_not_failed(tmp_path, monkeypatch):
    from workbook.course import verdicts

    probe, artifacts = record_formula_answers(tmp_path, monkeypatch)
    (artifacts / "a_gradient.npz").write_text("not an array file")  # the student's: that part fails

    def quantizer(x):
        raise RuntimeError("the grader's references cannot be computed")

    found = verdicts.judge(probe, artifacts, verdicts.AnswerKey(quantizer, ("cast", "codes")), training_seconds=10.0)
    assert passed_parts(found) == {
        "a_forward": None,
        "a_gradient": False,
        "b_culprit": True,
        "b_fix": None,
        "c_reconstruction": None,
    }
    assert all("needs manual grading" in found[grade_id][1] for grade_id in ("a_forward", "b_fix", "c_reconstruction"))
    assert "not an array file" in found["a_gradient"][1]


def test_the_instructors_own_run_finds_the_answer_key_from_the_notebooks_folder(tmp_path, monkeypatch):
    import keras

    import workbook
    from workbook.course import grading

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setattr(grading, "_here", {})  # a probe of this test's own, in a temporary folder
    monkeypatch.chdir(NOTEBOOKS)  # where the kernel of the instructor's notebook runs
    quantizer = workbook.surrogate(
        lambda x: keras.ops.round(3.0 * keras.ops.clip(x, 0.0, 1.0)) / 3.0,
        lambda x: keras.ops.cast((x >= 0.0) & (x <= 1.0), x.dtype),
    )
    grading.record_function("a_gradient", quantizer)
    grading.judge_here("a_gradient")  # passes
    grading.record_answers("b_culprit", culprit_op="Round", culprit_variable="levels")
    with pytest.raises(AssertionError, match="is not the op that cuts"):
        grading.judge_here("b_culprit")
    assert not list(NOTEBOOKS.glob("grading_*"))  # nothing written beside the notebooks
    # From course/source/<assignment>/, where `make assignments` links the notebook, too.
    source = tmp_path / "course" / "source" / "05"
    source.mkdir(parents=True)
    shutil.copy(ANSWER_KEY_PATH, tmp_path / "course")
    assert grading.find_answer_key(source) == str(tmp_path / "course" / ANSWER_KEY)
    # Without a course folder above, it says where the key is looked for.
    monkeypatch.chdir(source.parent)
    (tmp_path / "course" / ANSWER_KEY).unlink()
    with pytest.raises(FileNotFoundError, match=f"course/{ANSWER_KEY} is not in the course folder"):
        grading.judge_here("a_gradient")


@pytest.mark.slow  # every callable of the package tried in a fresh interpreter, 20-odd s (make test runs it)
@pytest.mark.timeout(900)
def test_no_module_of_the_installed_workbook_holds_an_answer(tmp_path):
    # A fresh interpreter in isolated mode (no working folder, no PYTHONPATH): it sees the
    # installed package and nothing of the course folder.
    env = clean_environment(tmp_path / "home")
    result = subprocess.run(
        [sys.executable, "-I", str(ANSWER_SCAN), str(tmp_path / "scan.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    scan = json.loads((tmp_path / "scan.json").read_text())
    assert scan["modules"] > 40  # every module was imported and searched
    assert scan["found"] == []


def test_the_answer_scan_finds_a_planted_answer(tmp_path):
    # The scan above, run on a package with the answers planted where a module could hold
    # them: it must find each of them. The package is the workbook's own front module and the
    # planted one (the test above already scans every other module; scanning them twice would
    # only cost minutes).
    package = tmp_path / "site" / "workbook"
    package.mkdir(parents=True)
    shutil.copy(ROOT / "workbook" / "__init__.py", package)
    (package / "planted.py").write_text(
        "import keras\n\n"
        "ANSWERS = {'op': 'Cast', 'variable': 'codes'}\n\n"
        "def _quantizer(x):\n"
        "    clipped = keras.ops.clip(x, 0.0, 1.0)\n"
        "    return clipped + keras.ops.stop_gradient(keras.ops.round(3.0 * clipped) / 3.0 - clipped)\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", str(ANSWER_SCAN), str(tmp_path / "scan.json"), str(tmp_path / "site")],
        cwd=tmp_path,
        env=clean_environment(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    scan = json.loads((tmp_path / "scan.json").read_text())
    assert scan["modules"] == 2  # the planted package, not the installed one
    found = scan["found"]
    assert {
        "workbook.planted.ANSWERS holds part (b)'s answer",
        "workbook.planted._quantizer passes part (a)",
        "planted.py spells out part (b)'s answer",
    } <= set(found), found
