"""Part (c)'s held-out digits live only with the grader, in the course folder, never in what students install.

The grader measures part (c) of assignment 05 on 1,000 MNIST digits kept in
course/held_out_digits_05.npz, beside the answer key. Here: the package a student installs (a
wheel built from this tree, as pip builds it for a student, Colab or a hub) and every digit
``load_mnist(source="bundled")`` gives hold none of them, compared image by image with the
course file; the training digits are the 8,000 they were; a grader without the file leaves part
(c) to the instructor instead of failing the student; and, graded through nbgrader's command line
beside the reference solution, a student who trains on the digits the workbook gives (the issue's
attack: ``load_mnist(source="bundled", seed=2505)[1][0][:1000]`` used to be the grader's digits)
is measured on digits it never had, while the reference keeps its 10 points.
"""

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import nbformat
import numpy as np
import pytest
from grading_helpers import (
    ASSIGNMENT,
    HELD_OUT_PATH,
    NOTEBOOK,
    ROOT,
    answer_key,
    answer_text,
    nbgrader_meta,
    reconstruction_mse,
    record_formula_answers,
)
from grading_helpers import ASSIGNMENT_POINTS as POINTS
from notebook_runner import FRESH_PYTHON_SECONDS, clean_environment, reduced_notebook

import workbook
from workbook.course.grading import ANSWER_KEY

#: sha256 of the 8,000 training digits and their labels, in order, as load_mnist split them from the
#: 10,000-digit file the workbook shipped before (mnist-10k.npz, sha256 94e2480b...): computed from that
#: file, so that a change of the bundled data that moves a training digit fails here.
TRAINING_DIGITS_SHA256 = "990975eb27cf95ab3772c714c4995950757253c7d5f122df4a35aa834d4810d8"


def succeeded(command, **options):
    """``command`` run to its end with its output captured; it must succeed."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=FRESH_PYTHON_SECONDS, **options)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def held_out_images():
    """The grader's digits as bytes, one per image, read from the course file itself."""
    with np.load(HELD_OUT_PATH, allow_pickle=False) as stored:
        images = stored["x"]
    assert images.shape == (1000, 28, 28) and images.dtype == np.uint8
    return {image.tobytes() for image in images}


def as_bytes(images):
    """Each image of ``images`` (uint8 0-255, or floats in [0, 1]; a channel axis or not) as 784 bytes."""
    images = np.asarray(images).reshape(-1, 28, 28)
    if images.dtype != np.uint8:
        images = np.round(images * 255).astype(np.uint8)
    return [image.tobytes() for image in images]


def images_in_archive(raw):
    """Every 28 x 28 image stored in the .npz whose bytes are ``raw``."""
    found = []
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        for name in archive.namelist():
            with archive.open(name) as member:
                array = np.lib.format.read_array(member, allow_pickle=False)
            if array.shape[-2:] == (28, 28) or array.shape[-3:] == (28, 28, 1):
                found += as_bytes(array)
    return found


def test_the_wheel_students_install_holds_none_of_the_graders_digits(tmp_path):
    # Built from a copy of what pyproject.toml packages, as pip builds it for a student, Colab or a hub.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source)
    shutil.copytree(ROOT / "workbook", source / "workbook", ignore=shutil.ignore_patterns("__pycache__"))
    succeeded([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(source)])
    (wheel,) = tmp_path.glob("*.whl")
    held_out, course_file = held_out_images(), HELD_OUT_PATH.read_bytes()
    shipped = []
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            raw = archive.read(name)
            assert raw != course_file, name
            if name.endswith(".npz"):
                shipped += images_in_archive(raw)
    assert len(shipped) == 9000, "the wheel should ship the 9,000 bundled digits"  # what was compared
    assert not held_out & set(shipped)
    assert not any(path.suffix == ".npz" for path in (ROOT / "course" / "release").rglob("*"))


def test_no_seed_of_load_mnist_gives_one_of_the_graders_digits():
    held_out = held_out_images()
    every = set()
    for seed in (0, 1, 2013, 2505):
        (x_train, _), (x_test, _) = workbook.load_mnist(source="bundled", seed=seed)
        every |= set(as_bytes(x_train)) | set(as_bytes(x_test))
    assert len(every) == 9000 and not held_out & every
    # the attack of the issue: these were the grader's 1,000 digits
    named = as_bytes(workbook.load_mnist(source="bundled", seed=2505)[1][0][:1000])
    assert not held_out & set(named)


def test_the_training_digits_are_the_ones_they_were_and_the_assignment_hands_out_the_test_digits():
    from workbook.core.data import bundled_mnist
    from workbook.lab.assignment_data import load_assignment_digits

    with np.load(workbook.core.data.bundled_mnist_path(), allow_pickle=False) as stored:
        digest = hashlib.sha256(stored["x_train"].tobytes() + stored["y_train"].tobytes()).hexdigest()
    assert digest == TRAINING_DIGITS_SHA256
    (_, _), (x_test, _) = load_assignment_digits()
    np.testing.assert_array_equal(x_test, bundled_mnist()[1][0])  # every bundled test digit, in the file's order


def test_the_provenance_note_is_kept_with_the_graders_file():
    note = (ROOT / "course" / "README.md").read_text()
    assert HELD_OUT_PATH.name in note and "CC BY-SA" in note and "LeCun" in note
    assert hashlib.sha256(HELD_OUT_PATH.read_bytes()).hexdigest() in note


def test_without_its_digits_the_grader_leaves_part_c_to_the_instructor(tmp_path, monkeypatch):
    from workbook.course import verdicts

    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "course" / ANSWER_KEY, course)  # and not the digits
    probe, artifacts = record_formula_answers(tmp_path, monkeypatch)
    # the verdict process as the grader starts it: this Python, isolated, the key by its path
    key = str(course / ANSWER_KEY)
    judging = [key, str(probe), str(artifacts), "--grade-id", "c_reconstruction", "--training-seconds", "10"]
    run = succeeded([sys.executable, "-I", *judging], cwd=tmp_path, env=clean_environment(tmp_path / "home"))
    passed, message = json.loads(run.stdout.splitlines()[-1])["c_reconstruction"]
    assert passed is None and "needs manual grading" in message, message
    assert "held-out digits are missing" in message and str(course / HELD_OUT_PATH.name) in message
    # other digits than the target was set for: not judged either
    other = tmp_path / "other.npz"
    np.savez(other, x=np.zeros((1000, 28, 28), np.uint8))
    key = answer_key()._replace(held_out=str(other))
    passed, message = verdicts.judge(probe, artifacts, key, 10.0, ["c_reconstruction"])["c_reconstruction"]
    assert passed is None and "other digits than part (c)'s target is set for" in message, message


# Against the rules, the attack: train part (c) on the 1,000 digits that
# ``load_mnist(source="bundled", seed=2505)`` puts first in x_test (they were the grader's) until
# it reconstructs them well, then print its weights, for the test to measure on the grader's
# digits itself; and try to read the grader's file by its path: the graded course's, and the
# checkout's, beside the workbook package that the box shows the kernel.
MEMORISER = """import time

import numpy as np

(_, _), (x_named, _) = workbook.load_mnist(source="bundled", seed=2505)
x_named = x_named[:1000]
model = workbook.autoencoder(bottleneck=quantize_2bit, learning_rate=3e-3)
started = time.perf_counter()
while time.perf_counter() - started < 60:
    model.fit(x_named, x_named, batch_size=batch_size, verbose=0)
    if model.evaluate(x_named, x_named, verbose=0) < 0.8 * target_mse:
        break
print("weights:", np.concatenate([w.ravel() for w in model.get_weights()]).astype("<f4").tobytes().hex())
for path in {held_out!r}:
    try:
        with open(path, "rb") as file:
            print("opened the grader's digits:", len(file.read()), "bytes")
    except OSError as error:
        print("could not read the grader's digits:", type(error).__name__)
"""


def graded_class(tmp_path, students):
    """Grade ``students`` ({name: {grade_id: source}}) through nbgrader's command line; (course, scores)."""
    from nbgrader.api import Gradebook

    from workbook.course.grade_class import grade_class

    course = tmp_path / "course"
    course.mkdir()
    for name in ("nbgrader_config.py", ANSWER_KEY, HELD_OUT_PATH.name):
        shutil.copy(ROOT / "course" / name, course)
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    source = reduced_notebook(ROOT / "notebooks" / NOTEBOOK)  # turned down, as the notebook tests run it
    nbformat.write(source, course / "source" / ASSIGNMENT / NOTEBOOK)
    instructor = clean_environment(tmp_path / "instructor")
    instructor["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), instructor.get("PATH", "")])  # alembic
    generate = [sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT, "--force"]
    succeeded(generate, cwd=course, env=instructor)
    release = nbformat.read(course / "release" / ASSIGNMENT / NOTEBOOK, as_version=4)
    solutions = {nbgrader_meta(c)["grade_id"]: answer_text(c) for c in source.cells if nbgrader_meta(c).get("solution")}
    for student, answers in students.items():
        notebook = nbformat.from_dict(json.loads(json.dumps(release)))
        for cell in notebook.cells:
            grade_id = nbgrader_meta(cell).get("grade_id")
            if grade_id in answers:
                cell.source = solutions[grade_id] if answers[grade_id] == "solution" else answers[grade_id]
        (course / "submitted" / student / ASSIGNMENT).mkdir(parents=True)
        nbformat.write(notebook, course / "submitted" / student / ASSIGNMENT / NOTEBOOK)
    graded = grade_class(course, ASSIGNMENT, list(students), workers=2, env=instructor, log=lambda _: None)
    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in students:
            assert graded[student][0] == 0, graded[student][2][-4000:]
            scores[student] = {
                grade_id: gradebook.find_grade(grade_id, NOTEBOOK[:-6], ASSIGNMENT, student).score
                for grade_id in POINTS
            }
    return course, scores


@pytest.mark.slow
@pytest.mark.hub
@pytest.mark.timeout(2400)
def test_training_on_the_digits_the_workbook_gives_gains_nothing_and_the_honest_path_keeps_its_points(tmp_path):
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from workbook.lab import assignment_spec as spec

    solved = dict.fromkeys(("a_quantize_2bit", "b_culprit_answer", "b_fix_answer", "c_train_answer"), "solution")
    memoriser = MEMORISER.format(held_out=[str(tmp_path / "course" / HELD_OUT_PATH.name), str(HELD_OUT_PATH)])
    course, scores = graded_class(tmp_path, {"reference": solved, "memoriser": {**solved, "c_train_answer": memoriser}})
    assert scores["reference"] == POINTS

    cells = nbformat.read(course / "autograded" / "memoriser" / ASSIGNMENT / NOTEBOOK, as_version=4).cells
    text = {
        nbgrader_meta(cell).get("grade_id"): "".join(o.get("text", "") + o.get("evalue", "") for o in cell.outputs)
        for cell in cells
        if cell.cell_type == "code"
    }
    tried = text["c_train_answer"]
    assert tried.count("could not read the grader's digits") == 2 and "opened the grader's digits" not in tried, tried
    weights = np.frombuffer(bytes.fromhex(re.search(r"weights: ([0-9a-f]+)", text["c_train_answer"]).group(1)), "<f4")
    verdict = re.search(r"(?:✓|✗) measured by the grader: .*", text["c_reconstruction"]).group(0)
    with np.load(HELD_OUT_PATH, allow_pickle=False) as stored:
        graders = stored["x"][..., np.newaxis].astype("float32") / 255
    unseen_mse = reconstruction_mse(weights, graders)
    (_, _), (x_named, _) = workbook.load_mnist(source="bundled", seed=2505)
    # measured on the grader's digits, which it never had, not on those it trained on (until now the same)
    assert f"MSE {unseen_mse:.5f} on 1,000 held-out test digits" in verdict, verdict
    assert f"{unseen_mse:.5f}" != f"{reconstruction_mse(weights, x_named[:1000]):.5f}"
    seconds = int(re.search(r"in (\d+) s \(budget", verdict).group(1))
    within = unseen_mse <= spec.TARGET_MSE and seconds <= spec.TIME_BUDGET_SECONDS
    assert scores["memoriser"] == {**POINTS, "c_reconstruction": POINTS["c_reconstruction"] * within}
