"""What the grading tests share: the assignment's names and points, and answers written out from its rules.

tests/test_grading_verdicts.py (what a recording scores), tests/test_grading_sandbox.py (what a box
holds in) and tests/test_grading_round_trip.py (the class through nbgrader's command line) read it,
and tests/test_assignments.py reads the points.
"""

from notebook_runner import NOTEBOOKS

ROOT = NOTEBOOKS.parent
ASSIGNMENT = "05_assignment_quantized_autoencoder"
NOTEBOOK = f"{ASSIGNMENT}.ipynb"
#: The course folder's answer key (never in the workbook a student installs).
ANSWER_KEY_PATH = ROOT / "course" / "answer_key_05.py"
HELD_OUT_PATH = ANSWER_KEY_PATH.parent / "held_out_digits_05.npz"  # part (c)'s digits, beside the key

#: Points per graded cell of the assignment, as its title cell promises them.
ASSIGNMENT_POINTS = {"a_forward": 1, "a_gradient": 2, "b_culprit": 1, "b_fix": 2, "c_reconstruction": 4}


def nbgrader_meta(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


def answer_text(cell):
    """A solution cell's source without the solution markers: what a student would write."""
    return "\n".join(
        line for line in cell.source.splitlines() if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
    )


def answer_key(path=ANSWER_KEY_PATH):
    """The course folder's answer key, loaded as the instructor's run of the notebook loads it."""
    import importlib.util

    loader = importlib.util.spec_from_file_location("answer_key_under_test", path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module.KEY


def two_bit_levels(x):
    """Part (a)'s forward pass, written out from the assignment's rules: round(3 clip(x, 0, 1)) / 3."""
    import keras

    return keras.ops.round(3.0 * keras.ops.clip(x, 0.0, 1.0)) / 3.0


def clipped_quantizer():
    """Part (a)'s answer from the rules: the 2-bit levels forward, the clip's derivative backward."""
    import keras

    import workbook

    return workbook.surrogate(two_bit_levels, lambda x: keras.ops.cast((x >= 0.0) & (x <= 1.0), x.dtype))


def record_formula_answers(folder, monkeypatch):
    """Record in ``folder``, on a probe of its own, the answers written out here: (a) and (b) right, (c) untrained."""
    import workbook
    from workbook.course import grading

    monkeypatch.chdir(folder)
    grading.write_probe(grading.PROBE_FILE)
    clipped = clipped_quantizer()
    for grade_id in ("a_forward", "a_gradient", "b_fix"):
        grading.record_function(grade_id, clipped)
    grading.record_answers("b_culprit", culprit_op="Cast", culprit_variable="codes")
    grading.record_model("c_reconstruction", workbook.autoencoder(bottleneck=clipped))
    return folder / grading.PROBE_FILE, folder / grading.ARTIFACTS_FOLDER


def unseen_digits():
    """The course folder's held-out digits, none of which the notebook's data cell hands out at its most."""
    import numpy as np
    import pytest

    from workbook.lab.assignment_data import load_assignment_digits

    with np.load(HELD_OUT_PATH, allow_pickle=False) as stored:
        unseen = stored["x"]
    (x_train, _), (x_test, _) = load_assignment_digits(8000, 1000)  # every training digit, the most test digits
    with pytest.raises(ValueError, match="at most 1,000 test digits"):
        load_assignment_digits(8000, 1001)
    handed_out = {np.round(image[..., 0] * 255).astype(np.uint8).tobytes() for image in [*x_train, *x_test]}
    assert not any(image.tobytes() in handed_out for image in unseen)
    return unseen[..., np.newaxis].astype("float32") / 255


def reconstruction_mse(weights, images):
    """The MSE of workbook.autoencoder with ``weights`` (flat float32) and the 2-bit levels written out here."""
    import numpy as np

    import workbook

    model = workbook.autoencoder(bottleneck=two_bit_levels)
    shapes = [w.shape for w in model.get_weights()]
    sizes = np.cumsum([0, *(int(np.prod(shape)) for shape in shapes)])
    assert sizes[-1] == weights.size
    model.set_weights([weights[a:b].reshape(shape) for a, b, shape in zip(sizes[:-1], sizes[1:], shapes, strict=True)])
    reconstructions = np.asarray(model.predict(images, batch_size=250, verbose=0), dtype="float64")
    return float(np.mean((reconstructions - images) ** 2))


def box_limits_missing(disk=True):
    """Why this machine gives the grader's boxes no control groups (with ``disk``, or no file system); else None."""
    from workbook.course.sandbox import Box

    box = Box()
    try:
        return box.limit() or (box.bound_disk() if disk else None)
    finally:
        box.remove()
