"""The verdicts on assignment 05, taken by the grader from what the hidden tests recorded.

Introduced in course/README.md. Run as ``python -I -m workbook.course.verdicts PROBE ARTIFACTS``
by the grader's own Python in isolated mode (:func:`workbook.course.grading.run_verdicts`), in
an empty folder with an environment of its own, after the student's kernel has ended:
nothing of the kernel reaches this process but the files it recorded, read as data (no
pickles, no code, sizes and shapes checked). Every reference is this process's own: the
quantizer and the colleague's bottleneck written out here, the model built here, and the
bundled test digits, checked against their digest, loaded here.

Prints one line of JSON, ``{grade_id: [passed, message]}``; a message never gives an answer.
"""

import argparse
import hashlib
import json
import os
import stat
import sys

import numpy as np

__all__ = ["judge", "JUDGED"]

#: The graded cells of assignment 05 whose points follow these verdicts.
JUDGED = ("a_forward", "a_gradient", "b_culprit", "b_fix", "c_reconstruction")

TIME_BUDGET_SECONDS = 300
TARGET_MSE = 0.006
N_TEST = 2000
#: sha256 of workbook/bundled/mnist-10k.npz, the digits part (c) is measured on.
BUNDLED_DIGEST = "94e2480bb2d38e772966d2564f7818de27e5e7d95984370b0cfb33e5bb4a39df"
# The largest file a hidden test records (the model's weights take about 6 kB).
MAX_ARTIFACT_BYTES = 4_000_000
# Values agree within float32 rounding; model gradients within float32 summation noise.
VALUE_TOLERANCE = 1e-5
GRADIENT_TOLERANCE = 1e-3
# What part (b) asks for, compared as the title cell of the assignment says.
_CULPRIT = ("cast", "codes")


class Unreadable(Exception):
    """What the hidden test left cannot be read as the data it should be."""


def _read(folder, name):
    """The bytes of ``folder/name``: a regular file of bounded size, never followed through a link."""
    path = os.path.join(folder, name)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise Unreadable(f"{name} cannot be opened ({error.strerror})") from None
    with os.fdopen(descriptor, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ARTIFACT_BYTES:
            raise Unreadable(f"{name} is not a file of at most {MAX_ARTIFACT_BYTES:,} bytes")
        return file.read()


def _recorded(folder, grade_id):
    """(arrays, answers) the hidden test of ``grade_id`` recorded; either may be None."""

    raw_arrays, raw_answers = _read(folder, f"{grade_id}.npz"), _read(folder, f"{grade_id}.json")
    arrays = None if raw_arrays is None else _recorded_arrays(grade_id, raw_arrays)
    answers = None if raw_answers is None else _recorded_answers(grade_id, raw_answers)
    return arrays, answers


def _recorded_arrays(grade_id, raw):
    """The float32 arrays in the bytes of ``grade_id``.npz, or Unreadable."""
    import io

    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
    except Exception as error:
        raise Unreadable(f"{grade_id}.npz is not an array file ({type(error).__name__})") from None
    if any(array.dtype != np.float32 for array in arrays.values()):
        raise Unreadable(f"{grade_id}.npz holds arrays that are not float32")
    return arrays


def _recorded_answers(grade_id, raw):
    """The {name: string} in the bytes of ``grade_id``.json, or Unreadable."""
    try:
        answers = json.loads(raw)
    except ValueError:
        raise Unreadable(f"{grade_id}.json is not JSON") from None
    if not isinstance(answers, dict) or not all(isinstance(v, str) for v in answers.values()):
        raise Unreadable(f"{grade_id}.json does not hold strings")
    return answers


def _probe(path):
    with open(path, "rb") as file:
        import io

        with np.load(io.BytesIO(file.read()), allow_pickle=False) as stored:
            return {name: stored[name] for name in stored.files}


# --- the references ------------------------------------------------------------------


def reference_quantizer(x):
    """``round(3 clip(x, 0, 1)) / 3`` forward; the clip's derivative, ``[0 <= x <= 1]``, backward."""
    import keras

    clipped = keras.ops.clip(x, 0.0, 1.0)
    return clipped + keras.ops.stop_gradient(keras.ops.round(3.0 * clipped) / 3.0 - clipped)


def colleague_bottleneck(x):
    """The colleague's bottleneck of part (b), as the notebook's read-only cell defines it."""
    import keras

    from workbook.surrogates.catalogue import SURROGATES

    x = keras.ops.clip(x, 0.0, 1.0)
    codes = keras.ops.cast(SURROGATES["round_ste"](3.0 * x), "uint8")
    return keras.ops.cast(codes, x.dtype) / 3.0


def _values_and_gradients(fn, probe):
    import tensorflow as tf

    from workbook.core.gradients import value_and_gradient

    found = {}
    for name in ("x", "code"):
        value, gradient = value_and_gradient(fn, tf.constant(probe[name]))
        found[f"{name}_value"], found[f"{name}_gradient"] = np.asarray(value), np.asarray(gradient)
    return found


def _model_gradients(probe):
    import keras
    import tensorflow as tf

    from workbook.lab.models import autoencoder

    model = autoencoder(bottleneck=reference_quantizer, seed=int(probe["model_seed"]))
    images = tf.constant(probe["images"])
    with tf.GradientTape() as tape:
        loss = keras.ops.mean((model(images, training=True) - images) ** 2)
    gradients = tape.gradient(loss, model.trainable_variables)
    return {f"model_gradient_{i}": np.asarray(g) for i, g in enumerate(gradients)}


# --- the verdicts ----------------------------------------------------------------------


def _compare(arrays, expected, keys, tolerance, what):
    """None if every key agrees, else a message naming the first that does not (never its values)."""
    for key in keys:
        got = arrays.get(key)
        if got is None or got.shape != expected[key].shape:
            return f"✗ {what}: nothing of the right shape was recorded ({key})."
        scale = max(1.0, float(np.max(np.abs(expected[key]), initial=0.0)))
        if not np.all(np.isfinite(got)) or np.max(np.abs(got - expected[key]), initial=0.0) > tolerance * scale:
            return f"✗ {what}: it differs from the requirement on the grader's inputs."
    return None


def _function_verdict(arrays, answers, expected, model_expected, forward, backward, what):
    if arrays is None:
        why = answers.get("error") if answers else "the hidden test did not record it (the cell failed before)"
        return False, f"✗ {what}: {why}."
    keys = ["x_value", "code_value"] if forward else []
    problem = _compare(arrays, expected, keys, VALUE_TOLERANCE, f"{what}'s values")
    if problem is None and backward:
        problem = _compare(arrays, expected, ["x_gradient", "code_gradient"], VALUE_TOLERANCE, f"{what}'s gradient")
        if problem is None:
            problem = _compare(
                arrays,
                model_expected,
                sorted(model_expected),
                GRADIENT_TOLERANCE,
                f"the gradient through {what} inside the autoencoder",
            )
    if problem:
        return False, problem
    return True, f"✓ {what}: checked by the grader on inputs drawn for this submission."


def _culprit_verdict(answers):
    if not answers or "error" in answers:
        return False, "✗ culprit_op / culprit_variable: the hidden test did not record them."
    op, variable = answers.get("culprit_op", ""), answers.get("culprit_variable", "")
    if op.strip().lower() != _CULPRIT[0]:
        return False, f"✗ {op[:40]!r} is not the op that cuts the encoder's gradient."
    if variable.strip() != _CULPRIT[1]:
        return False, f"✗ {variable[:40]!r} is not the variable the culprit computes."
    return True, "✓ the culprit and its variable, checked by the grader."


def _bundled_test_images():
    from importlib import resources

    path = resources.files("workbook").joinpath("bundled", "mnist-10k.npz")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != BUNDLED_DIGEST:
        raise RuntimeError(f"the bundled digits are not the ones part (c) is graded on (sha256 {digest})")
    from workbook.core.data import load_mnist

    (_, _), (x_test, _) = load_mnist(n_test=N_TEST, source="bundled")
    return x_test


def _recorded_weights(arrays, model):
    """(weights, None) if ``arrays`` fit ``model``'s layers and are finite, else (None, the verdict's message)."""
    shapes = [tuple(weight.shape) for weight in model.get_weights()]
    weights = [arrays.get(f"weight_{i}") for i in range(len(shapes))]
    if len(arrays) != len(shapes) or any(w is None or w.shape != s for w, s in zip(weights, shapes, strict=True)):
        return None, "✗ part (c) is measured on workbook.autoencoder(bottleneck=...)'s layers; model has others."
    if not all(np.all(np.isfinite(weight)) for weight in weights):
        return None, "✗ part (c): model's weights are not all finite."
    return weights, None


def _reconstruction_verdict(arrays, answers, training_seconds):
    from workbook.lab.models import autoencoder

    if arrays is None:
        why = answers.get("error") if answers else "the hidden test did not record the model"
        return False, f"✗ part (c): {why}."
    if training_seconds is None:
        return False, "✗ part (c): the grader has no time for the training."
    model = autoencoder(bottleneck=reference_quantizer)
    weights, refused = _recorded_weights(arrays, model)
    if refused:
        return False, refused
    model.set_weights(weights)
    x_test = _bundled_test_images()
    reconstructions = np.asarray(model.predict(x_test, batch_size=250, verbose=0), dtype="float64")
    mse = float(np.mean((reconstructions - x_test) ** 2))
    measured = f"test MSE {mse:.5f} on all {len(x_test):,} bundled test images (target {TARGET_MSE:g})"
    if mse > TARGET_MSE:
        return False, f"✗ measured by the grader: {measured}."
    if training_seconds > TIME_BUDGET_SECONDS:
        return False, (
            f"✗ measured by the grader: training took {training_seconds:.0f} s, over the budget of "
            f"{TIME_BUDGET_SECONDS} s ({measured})."
        )
    return True, f"✓ measured by the grader: {measured}, trained in {training_seconds:.0f} s."


def judge(probe_path, folder, training_seconds=None, grade_ids=JUDGED):
    """{grade_id: (passed, message)} for the graded cells of assignment 05."""
    probe = _probe(probe_path)
    verdicts, expected, model_expected = {}, None, None
    for grade_id in grade_ids:
        try:
            arrays, answers = _recorded(folder, grade_id)
        except Unreadable as error:
            verdicts[grade_id] = (False, f"✗ {error}.")
            continue
        if grade_id in ("a_forward", "a_gradient", "b_fix") and expected is None:
            expected = _values_and_gradients(reference_quantizer, probe)
            model_expected = _model_gradients(probe)
        if grade_id == "a_forward":
            verdicts[grade_id] = _function_verdict(
                arrays, answers, expected, model_expected, True, False, "quantize_2bit"
            )
        elif grade_id == "a_gradient":
            verdicts[grade_id] = _function_verdict(
                arrays, answers, expected, model_expected, False, True, "quantize_2bit"
            )
        elif grade_id == "b_fix":
            colleague = _values_and_gradients(colleague_bottleneck, probe)
            fix_expected = {**expected, "x_value": colleague["x_value"], "code_value": colleague["code_value"]}
            verdicts[grade_id] = _function_verdict(
                arrays, answers, fix_expected, model_expected, True, True, "fixed_bottleneck"
            )
        elif grade_id == "b_culprit":
            verdicts[grade_id] = _culprit_verdict(answers)
        elif grade_id == "c_reconstruction":
            verdicts[grade_id] = _reconstruction_verdict(arrays, answers, training_seconds)
    return verdicts


def main(argv=None):
    parser = argparse.ArgumentParser(description="Judge what assignment 05's hidden tests recorded.")
    parser.add_argument("probe")
    parser.add_argument("artifacts")
    parser.add_argument("--training-seconds", type=float, default=None)
    parser.add_argument("--grade-id", action="append", choices=JUDGED)
    args = parser.parse_args(argv)
    verdicts = judge(args.probe, args.artifacts, args.training_seconds, args.grade_id or JUDGED)
    sys.stdout.write(json.dumps(verdicts) + "\n")


if __name__ == "__main__":
    main()
