"""The verdicts on assignment 05, taken by the grader from what the hidden tests recorded.

Introduced in course/README.md. This module holds no answer: the references that are answers
(part (a)'s quantizer, part (b)'s culprit) live in the answer key, a file of the course folder
that the grader runs as ``python -I answer_key_05.py --serve``
(:func:`workbook.course.grading.run_verdicts`) and that calls :func:`main` with them, in an
empty folder with an environment of its own; it is asked for the verdicts on each submission
after that submission's kernel has ended (``python -I answer_key_05.py PROBE ARTIFACTS`` judges
one). Nothing of a kernel reaches this process but the files it recorded, read as data: no
pickles, no code, no links, and every size bounded before it is read (an array's header before
its values).

Each verdict stands alone: a record that cannot be read fails its own part, and says why; a
part the grader itself could not judge is ``None`` (needs manual grading), never a fail.
Prints one line of JSON per submission, ``{grade_id: [passed, message]}``; a message never
gives an answer.
"""

import argparse
import collections
import contextlib
import hashlib
import io
import json
import math
import os
import stat
import sys
import zipfile

import numpy as np

from workbook.lab import assignment_spec as spec

__all__ = ["AnswerKey", "judge", "serve", "main", "MAX_ARTIFACT_BYTES"]

#: The answers the grader compares with: ``quantizer``, part (a)'s (a function of one tensor),
#: ``culprit``, part (b)'s (op, variable), lower case, and ``held_out``, the path of the digits
#: part (c) is measured on (the course folder's, beside the key). Only the answer key builds one.
AnswerKey = collections.namedtuple("AnswerKey", ["quantizer", "culprit", "held_out"], defaults=[None])

#: sha256 of course/held_out_digits_05.npz, the 1,000 digits part (c)'s target is set for.
HELD_OUT_DIGEST = "6d6eede5f8c9d4ed2f12271d525137f7f7605bf04dc71eac9c26368c7702c053"
# The largest file a hidden test records (the model's weights take about 6 kB)...
MAX_ARTIFACT_BYTES = 4_000_000
# ...and what it may hold once decompressed: the largest array recorded is the grader's codes
# (3,920 values), and a recording holds the values and gradients and the model's ~12 weights.
MAX_ARRAYS = 64
MAX_ARRAY_VALUES = max(spec.N_POINTS, math.prod(spec.CODE_SHAPE))
# ... which, with its header (at most 64 kB in .npy's format 2), is at most this many bytes inflated.
MAX_MEMBER_BYTES = 4 * MAX_ARRAY_VALUES + 2**16
# Values agree within float32 rounding; model gradients within float32 summation noise.
VALUE_TOLERANCE = 1e-5
GRADIENT_TOLERANCE = 1e-3


class Unreadable(Exception):
    """What the hidden test left cannot be read as the data it should be."""


# --- reading what the kernel recorded, as data ------------------------------------------


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
    """The float32 arrays in the bytes of ``grade_id``.npz, each one's size checked before it is inflated."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
        members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError):
        raise Unreadable(f"{grade_id}.npz is not an array file") from None
    if len(members) > MAX_ARRAYS:
        raise Unreadable(f"{grade_id}.npz holds {len(members):,} arrays; a recording holds at most {MAX_ARRAYS}")
    arrays = {}
    for member in members:
        if not member.filename.endswith(".npy"):
            raise Unreadable(f"{grade_id}.npz holds {member.filename[:40]!r}, which is not an array")
        # what its directory says it holds, before a byte of it is inflated (the header is checked again below)
        if member.compress_size > MAX_ARTIFACT_BYTES or member.file_size > MAX_MEMBER_BYTES:
            raise Unreadable(
                f"{grade_id}.npz holds an array of {member.file_size:,} bytes; the largest this assignment "
                f"records takes {MAX_MEMBER_BYTES:,}"
            )
        with archive.open(member) as stream:
            arrays[member.filename[:-4]] = _bounded_array(grade_id, stream)
    return arrays


def _array_header(grade_id, stream):
    """(shape, fortran_order) of the .npy array opening ``stream``: float32, every length positive."""
    try:
        version = np.lib.format.read_magic(stream)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"format version {version}")
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran_order, dtype = reader(stream)
    except Exception as error:
        raise Unreadable(f"{grade_id}.npz is not an array file ({type(error).__name__})") from None
    if dtype != np.dtype("<f4"):
        raise Unreadable(f"{grade_id}.npz holds arrays that are not float32")
    if not all(isinstance(length, int) and length >= 1 for length in shape):  # (-1,) would read everything
        raise Unreadable(f"{grade_id}.npz holds an array of shape {str(shape)[:60]}: every length must be positive")
    return shape, fortran_order


def _bounded_array(grade_id, stream):
    """One .npy array from ``stream``: float32, at most MAX_ARRAY_VALUES values, read only once its header says so."""
    shape, fortran_order = _array_header(grade_id, stream)
    size = math.prod(shape)
    if size > MAX_ARRAY_VALUES:
        raise Unreadable(
            f"{grade_id}.npz holds an array of {size:,} values; the largest this assignment records "
            f"has {MAX_ARRAY_VALUES:,}"
        )
    data = stream.read(size * 4)
    if len(data) != size * 4:
        raise Unreadable(f"{grade_id}.npz holds an array cut short")
    return np.frombuffer(data, "<f4").reshape(shape, order="F" if fortran_order else "C").copy()


def _recorded_answers(grade_id, raw):
    """The {name: string} in the bytes of ``grade_id``.json, or Unreadable."""
    try:
        answers = json.loads(raw)
    except RecursionError:
        raise Unreadable(f"{grade_id}.json is nested too deep to hold answers") from None
    except ValueError:
        raise Unreadable(f"{grade_id}.json is not JSON") from None
    if not isinstance(answers, dict) or not all(isinstance(v, str) for v in answers.values()):
        raise Unreadable(f"{grade_id}.json does not hold strings")
    return answers


def _probe(path):
    """The grader's own inputs for this submission (a file the grader wrote)."""
    with open(path, "rb") as file, np.load(io.BytesIO(file.read()), allow_pickle=False) as stored:
        return {name: stored[name] for name in stored.files}


# --- the references that are no answer ---------------------------------------------------


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
    for name in spec.PROBED:
        value, gradient = value_and_gradient(fn, tf.constant(probe[name]))
        found[f"{name}_value"], found[f"{name}_gradient"] = np.asarray(value), np.asarray(gradient)
    return found


def _model_gradients(quantizer, probe):
    import keras
    import tensorflow as tf

    from workbook.lab.models import autoencoder

    model = autoencoder(bottleneck=quantizer, seed=int(probe["model_seed"]))
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


def _function_verdict(arrays, answers, expected, forward, backward, what):
    """Part (a) or (b)'s fix: values (``forward``), gradients alone and in the model (``backward``)."""
    if arrays is None:
        why = answers.get("error") if answers else "the hidden test did not record it (the cell failed before)"
        return False, f"✗ {what}: {why}."
    keys = [f"{name}_value" for name in spec.PROBED] if forward else []
    problem = _compare(arrays, expected, keys, VALUE_TOLERANCE, f"{what}'s values")
    if problem is None and backward:
        problem = _gradient_problem(arrays, expected, what)
    if problem:
        return False, problem
    return True, f"✓ {what}: checked by the grader on inputs drawn for this submission."


def _gradient_problem(arrays, expected, what):
    """None if the gradients agree, alone and inside the autoencoder; else the first that does not."""
    gradients = [f"{name}_gradient" for name in spec.PROBED]
    problem = _compare(arrays, expected, gradients, VALUE_TOLERANCE, f"{what}'s gradient")
    if problem is None:
        model_keys = sorted(key for key in expected if key.startswith("model_gradient_"))
        what_model = f"the gradient through {what} inside the autoencoder"
        problem = _compare(arrays, expected, model_keys, GRADIENT_TOLERANCE, what_model)
    return problem


def _culprit_verdict(answers, culprit):
    if not answers or "error" in answers:
        return False, "✗ culprit_op / culprit_variable: the hidden test did not record them."
    op, variable = answers.get("culprit_op", ""), answers.get("culprit_variable", "")
    if op.strip().lower() != culprit[0]:
        return False, f"✗ {op[:40]!r} is not the op that cuts the encoder's gradient."
    if variable.strip() != culprit[1]:
        return False, f"✗ {variable[:40]!r} is not the variable the culprit computes."
    return True, "✓ the culprit and its variable, checked by the grader."


def _held_out_images(path):
    """The images part (c) is measured on: the course folder's digits, none of which the workbook hands out."""
    if path is None or not os.path.isfile(path):
        raise FileNotFoundError(
            f"part (c)'s held-out digits are missing ({path}): they are the course folder's "
            "held_out_digits_05.npz, beside the answer key; put that file back and grade again"
        )
    with open(path, "rb") as file:
        raw = file.read()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != HELD_OUT_DIGEST:
        raise RuntimeError(f"{path} holds other digits than part (c)'s target is set for (sha256 {digest})")
    with np.load(io.BytesIO(raw), allow_pickle=False) as stored:
        return stored["x"][..., np.newaxis].astype("float32") / 255


def _recorded_weights(arrays, model):
    """(weights, None) if ``arrays`` fit ``model``'s layers and are finite, else (None, the verdict's message)."""
    shapes = [tuple(weight.shape) for weight in model.get_weights()]
    weights = [arrays.get(f"weight_{i}") for i in range(len(shapes))]
    if len(arrays) != len(shapes) or any(w is None or w.shape != s for w, s in zip(weights, shapes, strict=True)):
        return None, "✗ part (c) is measured on workbook.autoencoder(bottleneck=...)'s layers; model has others."
    if not all(np.all(np.isfinite(weight)) for weight in weights):
        return None, "✗ part (c): model's weights are not all finite."
    return weights, None


def _reconstruction_verdict(arrays, answers, key, training_seconds):
    from workbook.lab.models import autoencoder

    if arrays is None:
        why = answers.get("error") if answers else "the hidden test did not record the model"
        return False, f"✗ part (c): {why}."
    if training_seconds is None:
        return False, "✗ part (c): the grader has no time for the training."
    model = autoencoder(bottleneck=key.quantizer)
    weights, refused = _recorded_weights(arrays, model)
    if refused:
        return False, refused
    model.set_weights(weights)
    held_out = _held_out_images(key.held_out)
    reconstructions = np.asarray(model.predict(held_out, batch_size=250, verbose=0), dtype="float64")
    mse = float(np.mean((reconstructions - held_out) ** 2))
    measured = f"MSE {mse:.5f} on {len(held_out):,} held-out test digits, none in x_test (target {spec.TARGET_MSE:g})"
    timed = f"in {training_seconds:.0f} s (budget {spec.TIME_BUDGET_SECONDS} s)"
    if not mse <= spec.TARGET_MSE:  # NaN fails too
        return False, f"✗ measured by the grader: {measured}, {timed}."
    if training_seconds > spec.TIME_BUDGET_SECONDS:
        return False, (
            f"✗ measured by the grader: {timed}, over the budget (the grader's clock runs from the notebook's "
            f"start to the end of part (c)'s check; {measured})."
        )
    return True, f"✓ measured by the grader: {measured}, {timed}."


class _References:
    """The grader's expected values for this probe, computed once, when a verdict first needs them."""

    def __init__(self, key, probe):
        self.key, self.probe, self._found = key, probe, {}

    def expected(self, grade_id):
        if grade_id not in self._found:
            if grade_id == "b_fix":  # the colleague's values forward, the quantizer's gradient backward
                colleague = _values_and_gradients(colleague_bottleneck, self.probe)
                values = {f"{name}_value": colleague[f"{name}_value"] for name in spec.PROBED}
                self._found[grade_id] = {**self.expected("a_forward"), **values}
            else:
                found = _values_and_gradients(self.key.quantizer, self.probe)
                self._found[grade_id] = {**found, **_model_gradients(self.key.quantizer, self.probe)}
        return self._found[grade_id]


def _verdict(grade_id, arrays, answers, references, training_seconds):
    if grade_id == "a_forward":
        return _function_verdict(arrays, answers, references.expected("a_forward"), True, False, "quantize_2bit")
    if grade_id == "a_gradient":
        return _function_verdict(arrays, answers, references.expected("a_forward"), False, True, "quantize_2bit")
    if grade_id == "b_fix":
        return _function_verdict(arrays, answers, references.expected("b_fix"), True, True, "fixed_bottleneck")
    if grade_id == "b_culprit":
        return _culprit_verdict(answers, references.key.culprit)
    return _reconstruction_verdict(arrays, answers, references.key, training_seconds)


def judge(probe_path, folder, key, training_seconds=None, grade_ids=spec.JUDGED):
    """{grade_id: (passed, message)} for the graded cells of assignment 05; ``passed`` None: not judged.

    Introduced in course/README.md. ``key`` is the answer key's :class:`AnswerKey`. A record
    that cannot be read fails its own part only; where the grader itself fails (its references,
    its data), that part is None with the reason, for the instructor to grade by hand.
    """
    references = _References(key, _probe(probe_path))
    verdicts = {}
    for grade_id in grade_ids:
        try:
            arrays, answers = _recorded(folder, grade_id)
        except Exception as error:  # only the student's files are read here: they fail their own part
            why = (
                error
                if isinstance(error, Unreadable)
                else f"{grade_id}'s record cannot be read ({type(error).__name__})"
            )
            verdicts[grade_id] = (False, f"✗ {why}.")
            continue
        try:
            verdicts[grade_id] = _verdict(grade_id, arrays, answers, references, training_seconds)
        except Exception as error:  # the grader's own failure, on a record it could read
            why = f"{type(error).__name__}: {error}"[:300]
            verdicts[grade_id] = (None, f"the grader could not take this verdict ({why}); it needs manual grading.")
    return verdicts


def serve(key, requests=None, replies=None):
    """Judge one request per line of ``requests`` (stdin), each reply a line of ``replies`` (stdout).

    Introduced in course/README.md: the grader's verdict process
    (:func:`workbook.course.grading.run_verdicts`), which judges one submission after another
    until its input ends. A request is ``{"probe", "artifacts", "training_seconds", "grade_ids"}``;
    the reply is ``{"verdicts": ...}`` as :func:`judge` returns them, or ``{"failed": why}``.
    Each judgement starts from a cleared Keras session, so none depends on the one before.
    """
    import keras

    requests, replies = requests or sys.stdin, replies or sys.stdout
    for line in requests:
        try:
            request = json.loads(line)
            grade_ids = [grade_id for grade_id in request["grade_ids"] if grade_id in spec.JUDGED]
            with contextlib.redirect_stdout(sys.stderr):  # only replies go to ``replies``, one line each
                verdicts = judge(request["probe"], request["artifacts"], key, request["training_seconds"], grade_ids)
            reply = {"verdicts": verdicts}
        except Exception as error:
            reply = {"failed": f"{type(error).__name__}: {error}"[:3000]}
        finally:
            keras.backend.clear_session()
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def main(key, argv=None):
    """The answer key's command line: judge what the hidden tests recorded, print the verdicts as JSON.

    ``--serve``: judge one request after another, read from stdin (:func:`serve`).
    """
    parser = argparse.ArgumentParser(description="Judge what assignment 05's hidden tests recorded.")
    parser.add_argument("probe", nargs="?")
    parser.add_argument("artifacts", nargs="?")
    parser.add_argument("--training-seconds", type=float, default=None)
    parser.add_argument("--grade-id", action="append", choices=spec.JUDGED)
    parser.add_argument("--serve", action="store_true", help="judge the requests read from stdin, one per line")
    args = parser.parse_args(argv)
    if args.serve:
        serve(key)
        return
    if args.probe is None or args.artifacts is None:
        parser.error("PROBE and ARTIFACTS are needed (or --serve)")
    verdicts = judge(args.probe, args.artifacts, key, args.training_seconds, args.grade_id or spec.JUDGED)
    sys.stdout.write(json.dumps(verdicts) + "\n")
