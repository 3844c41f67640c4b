"""Every fix a finder hint names really restores the gradient.

Each row applies the fix a hint names, as a student would type it, to an example of
the op, and checks with tf.GradientTape (not with the finder) that the gradient then
flows, while it did not before. The forward pass is checked too where the fix
promises to keep it.
"""

import importlib.util
import re

import gradient_killers
import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import workbook
from workbook.core.gradients import value_and_gradient
from workbook.finder.advice.culprit import advise_cause, advise_untraceable
from workbook.finder.advice.words import CAUSES, NO_GRADIENT_CAN_EXIST, OP_HINTS, REASONS

X = tf.constant(np.random.default_rng(0).normal(size=(4, 3)).astype("float32") * 2.0)
VALUES = tf.constant(np.arange(12, dtype="float32").reshape(4, 3))
S = workbook.SURROGATES


def constant(value):
    """A derivative for workbook.surrogate: ``value`` everywhere."""
    return lambda t: value * tf.ones_like(t)


def cast_round_trip(x):
    return tf.cast(tf.cast(x, "int32"), x.dtype)


def hard_one_hot(logits):
    return tf.one_hot(tf.argmax(logits, axis=-1), 3)


def soft_one_hot(logits):
    soft = tf.nn.softmax(logits)
    return soft + tf.stop_gradient(hard_one_hot(logits) - soft)


def adjust_contrast(x):
    return tf.image.adjust_contrast(tf.reshape(x, (1, 2, 2, 3)), 2.0)


def one_hot_sample(x):
    return tf.one_hot(tf.random.categorical(x, 1, seed=0)[:, 0], 3) * VALUES


def relaxed_sample(x):
    return workbook.sample_latent(x, "categorical", "gumbel_softmax_st", tau=0.5, seed=0)[0] * VALUES


def as_image(x, shape):
    return tf.reshape(x, shape)


def slope_penalty(resize, shape):
    """The squared slope of sum(sin(resize(image))) with respect to the image: a second derivative."""

    def penalty(x):
        image = as_image(x, shape)
        with tf.GradientTape() as inner:
            inner.watch(image)
            value = tf.reduce_sum(tf.sin(resize(image)))
        return tf.reduce_sum(inner.gradient(value, image) ** 2)

    return penalty


def python_if(x):
    if tf.reduce_sum(x) > 0:
        return x * 2.0
    return -x


def halted(x, learned=True):
    """A state stepped while a halting unit says go on: as the trip count of a loop (no gradient), or, learned,
    a fixed number of steps, each weighed by the probability of halting there (Adaptive Computation Time)."""
    go_on = tf.sigmoid(x)
    if not learned:
        steps = tf.cast(tf.math.ceil(tf.reduce_mean(go_on) * 4.0), tf.int32)
        return tf.while_loop(lambda i, h: i < steps, lambda i, h: (i + 1, h * 0.9 + 1.0), (0, tf.ones_like(x)))[1]
    state, output, still = tf.ones_like(x), tf.zeros_like(x), tf.ones_like(x)
    for _ in range(4):
        state = state * 0.9 + 1.0
        output, still = output + still * (1.0 - go_on) * state, still * go_on
    return output + still * state


# (where the hint lives, its key, the words of the fix in the hint, the broken code, the fixed code,
#  whether the fix keeps the forward values)
FIXES = [
    ("op", "Cast", "SURROGATES['cast_int_ste']", cast_round_trip, lambda x: S["cast_int_ste"](x), True),
    (
        "op",
        "Cast",
        "x + stop_gradient(cast(cast(x, 'int32'), x.dtype) - x)",
        cast_round_trip,
        lambda x: x + tf.stop_gradient(cast_round_trip(x) - x),
        True,
    ),
    ("op", "ArgMax", "soft + stop_gradient(hard - soft)", hard_one_hot, soft_one_hot, True),
    ("op", "ArgMax", "softmax(logits / temperature)", hard_one_hot, lambda x: tf.nn.softmax(x / 0.1), False),
    (
        "op",
        "ArgMin",
        "soft = softmax(-logits)",
        lambda x: tf.one_hot(tf.argmin(x, axis=-1), 3),
        lambda x: soft_one_hot(-x),
        True,
    ),
    (
        "op",
        "TopKV2",
        "top_k(x).values",
        lambda x: tf.cast(tf.math.top_k(x, 2).indices, tf.float32),
        lambda x: tf.math.top_k(x, 2).values,
        False,
    ),
    (
        "op",
        "TopKV2",
        "weigh the candidates with a softmax",
        lambda x: tf.gather(VALUES, tf.math.top_k(x, 1).indices, batch_dims=1),
        lambda x: tf.reduce_sum(tf.nn.softmax(x * 10.0) * VALUES, axis=-1, keepdims=True),
        False,
    ),
    ("op", "Round", "SURROGATES['round_ste']", tf.round, lambda x: S["round_ste"](x), True),
    ("op", "Round", "x + stop_gradient(round(x) - x)", tf.round, lambda x: x + tf.stop_gradient(tf.round(x) - x), True),
    ("op", "Floor", "SURROGATES['floor_ste']", tf.floor, lambda x: S["floor_ste"](x), True),
    ("op", "Floor", "SURROGATES['floor_smooth']", tf.floor, lambda x: S["floor_smooth"](x), True),
    ("op", "Floor", "x + stop_gradient(floor(x) - x)", tf.floor, lambda x: x + tf.stop_gradient(tf.floor(x) - x), True),
    ("op", "Sign", "SURROGATES['sign_ste']", tf.sign, lambda x: S["sign_ste"](x), True),
    ("op", "Sign", "['sign_clipped_ste']", tf.sign, lambda x: S["sign_clipped_ste"](x), True),
    ("op", "Sign", "['sign_swish']", tf.sign, lambda x: S["sign_swish"](x), True),
    (
        "op",
        "Greater",
        "SURROGATES['step_sigmoid']",
        lambda x: tf.cast(x > 0.0, tf.float32),
        lambda x: S["step_sigmoid"](x),
        True,
    ),
    (
        "op",
        "Greater",
        "['step_fast_sigmoid']",
        lambda x: tf.cast(x > 0.0, tf.float32),
        lambda x: S["step_fast_sigmoid"](x),
        True,
    ),
    (
        "op",
        "Less",
        "on (threshold - x)",
        lambda x: tf.cast(x < 0.5, tf.float32),
        lambda x: S["step_sigmoid"](0.5 - x),
        True,
    ),
    (
        "op",
        "PyFunc",
        "tf.py_function",
        lambda x: tf.numpy_function(lambda a: a * 2.0, [x], tf.float32),
        lambda x: tf.py_function(lambda a: a * 2.0, [x], tf.float32),
        True,
    ),
    (
        "op",
        "PyFunc",
        "workbook.surrogate",
        lambda x: tf.numpy_function(lambda a: a * 2.0, [x], tf.float32),
        lambda x: workbook.surrogate(lambda t: tf.numpy_function(lambda a: a * 2.0, [t], tf.float32), constant(2.0))(x),
        True,
    ),
    (
        "op",
        "Multinomial",
        "workbook.sample_latent(logits, 'categorical', 'gumbel_softmax_st'",
        one_hot_sample,
        relaxed_sample,
        False,
    ),
    (
        "op",
        "StatelessMultinomial",
        "workbook.sample_latent(logits, 'categorical', 'gumbel_softmax_st'",
        lambda x: tf.one_hot(tf.random.stateless_categorical(x, 1, seed=(1, 2))[:, 0], 3) * VALUES,
        relaxed_sample,
        False,
    ),
    (
        "op",
        "RandomShuffle",
        "tf.gather(x, tf.random.shuffle(tf.range(tf.shape(x)[0])))",
        lambda x: tf.random.shuffle(x, seed=0) * VALUES,
        lambda x: tf.gather(x, tf.random.shuffle(tf.range(tf.shape(x)[0]), seed=0)) * VALUES,
        False,
    ),
    (
        "op",
        "ResizeArea",
        "tf.nn.avg_pool2d(x, factor, factor, 'VALID')",
        lambda x: tf.image.resize(as_image(x, (1, 2, 6, 1)), (1, 3), method="area"),
        lambda x: tf.nn.avg_pool2d(as_image(x, (1, 2, 6, 1)), 2, 2, "VALID"),
        True,
    ),
    (
        "op",
        "ResizeNearestNeighborGrad",
        "`keras.layers.UpSampling2D(2)`",
        slope_penalty(lambda t: tf.image.resize(t, (8, 6), method="nearest"), (1, 4, 3, 1)),
        slope_penalty(keras.layers.UpSampling2D(2), (1, 4, 3, 1)),
        True,
    ),
    (
        "op",
        "ResizeBilinearGrad",
        "`keras.layers.AveragePooling2D(2)`",
        slope_penalty(lambda t: tf.image.resize(t, (1, 3)), (1, 2, 6, 1)),
        slope_penalty(keras.layers.AveragePooling2D(2), (1, 2, 6, 1)),
        True,
    ),
    ("reason", "integer_output", "SURROGATES['cast_int_ste']", cast_round_trip, lambda x: S["cast_int_ste"](x), True),
    (
        "reason",
        "integer_output",
        "x + stop_gradient(hard(x) - x)",
        cast_round_trip,
        lambda x: x + tf.stop_gradient(cast_round_trip(x) - x),
        True,
    ),
    ("reason", "integer_output", "soft + stop_gradient(hard - soft)", hard_one_hot, soft_one_hot, True),
    (
        "reason",
        "no_gradient",
        "x + stop_gradient(f(x) - x)",
        tf.math.ceil,
        lambda x: x + tf.stop_gradient(tf.math.ceil(x) - x),
        True,
    ),
    ("reason", "no_gradient", "SURROGATES['round_ste']", tf.round, lambda x: S["round_ste"](x), True),
    (
        "reason",
        "no_gradient",
        "workbook.surrogate(f, derivative)",
        tf.math.ceil,
        lambda x: workbook.surrogate(tf.math.ceil, constant(1.0))(x),
        True,
    ),
    ("reason", "zero_gradient", "SURROGATES['sign_ste']", tf.sign, lambda x: S["sign_ste"](x), True),
    (
        "reason",
        "zero_gradient",
        "x + stop_gradient(f(x) - x)",
        tf.sign,
        lambda x: x + tf.stop_gradient(tf.sign(x) - x),
        True,
    ),
    ("reason", "stop_gradient", "Remove it", lambda x: tf.stop_gradient(x * 2.0), lambda x: x * 2.0, True),
    (
        "reason",
        "stop_gradient",
        "x + stop_gradient(f(x) - x)",
        lambda x: tf.stop_gradient(tf.round(x)),
        lambda x: x + tf.stop_gradient(tf.round(x) - x),
        True,
    ),
    (
        "reason",
        "no_gradient_registered",
        "workbook.surrogate(forward, derivative)",
        adjust_contrast,
        lambda x: workbook.surrogate(lambda t: tf.reshape(adjust_contrast(t), tf.shape(t)), constant(2.0))(x),
        False,
    ),
    (
        "reason",
        "no_gradient_registered",
        "Rewrite it with differentiable ops",
        adjust_contrast,
        lambda x: (
            lambda image: (
                (image - tf.reduce_mean(image, axis=(1, 2), keepdims=True)) * 2.0
                + tf.reduce_mean(image, axis=(1, 2), keepdims=True)
            )
        )(tf.reshape(x, (1, 2, 2, 3))),
        True,
    ),
    (
        "reason",
        "gradient_error",
        "workbook.surrogate(forward, derivative)",
        gradient_killers.broken_custom_gradient,
        lambda x: workbook.surrogate(lambda t: t * 2.0, constant(2.0))(x),
        True,
    ),
    (
        "reason",
        "untraceable",
        "use keras.ops / tf ops instead of numpy",
        lambda x: tf.constant(np.square(x.numpy())),
        lambda x: ops.square(x),
        True,
    ),
    (
        "reason",
        "untraceable",
        "keras.ops.where instead of Python if",
        tf.function(python_if, autograph=False),
        lambda x: ops.where(ops.sum(x) > 0, x * 2.0, -x),
        True,
    ),
    (
        "reason",
        "branch_condition",
        "w * then_value + (1 - w) * else_value",
        tf.function(lambda x: tf.ones((2,)) if tf.reduce_sum(x) > 0.0 else tf.zeros((2,))),
        lambda x: (lambda w: w * tf.ones((2,)) + (1 - w) * tf.zeros((2,)))(ops.sigmoid(10.0 * (ops.sum(x) - 0.0))),
        False,
    ),
    (
        "op",
        "EagerPyFunc",
        "Compute it with tf / keras.ops",
        lambda x: tf.py_function(lambda t: tf.constant(np.square(t.numpy())), [x], tf.float32),
        lambda x: tf.py_function(lambda t: tf.square(t), [x], tf.float32),
        True,
    ),
    (
        "op",
        "ReduceDataset",
        "keras.ops.sum",
        lambda x: tf.data.Dataset.from_tensor_slices(x).reduce(tf.constant(0.0), lambda total, v: total + v),
        lambda x: ops.sum(x, axis=0),  # the rows added up, as the dataset's elements are
        True,
    ),
    (
        "op",
        "SparseReduceMax",
        "tf.reduce_max(tf.where(mask, x, -inf), axis)",
        lambda x: tf.sparse.reduce_max(tf.sparse.from_dense(x)),
        lambda x: tf.reduce_max(tf.where(tf.not_equal(x, 0.0), x, -np.inf)),
        True,
    ),
    (
        "reason",
        "measured_branch_not_taken",
        "c * a + (1 - c) * b",
        lambda x: tf.where(x > 5.0, x, tf.zeros_like(x)),  # X never exceeds 5: the branch holding x is never taken
        lambda x: S["step_sigmoid"](x - 5.0) * x + (1.0 - S["step_sigmoid"](x - 5.0)) * tf.zeros_like(x),
        True,
    ),
    (
        "reason",
        "measured_constant_softmax",
        "sigmoid",
        lambda x: tf.nn.softmax(x[:, :1]),
        lambda x: tf.sigmoid(x[:, :1]),
        False,
    ),
    ("reason", "measured_control", "fixed number of steps", lambda x: halted(x, learned=False), halted, False),
    (
        "reason",
        "measured_zero",
        "smooth stand-in",
        lambda x: tf.nn.relu(-tf.abs(x) - 1.0),
        lambda x: tf.nn.softplus(-tf.abs(x) - 1.0),
        False,
    ),
    ("cause", "assign", "total = total + x", None, None, True),
    ("cause", "rebound", "keep the new value in a local variable", None, None, True),
    ("cause", "built_tensor", "Compute that tensor inside call()", None, None, True),
    ("cause", "unused", "use it in call()", None, None, True),
]


#: Tested below (not_recorded, not_recorded_outside) or not a code change.
NO_CODE_FIX = {
    "measured_none",
    "disconnected",
    "integer_input",
    "not_recorded",
    "not_recorded_outside",
    "unexplained_cut",
}


def hint_text(kind, key):
    if kind == "op":
        return OP_HINTS[key]
    return (REASONS if kind == "reason" else CAUSES)[key].hint


def gradient(function, x=X):
    """The tape's gradient of sum(function(x)) for x, or None (also when tracing or the tape raises)."""
    try:
        return value_and_gradient(lambda t: tf.cast(function(t), tf.float32), x)[1]
    except (LookupError, ValueError, TypeError, tf.errors.OperatorNotAllowedInGraphError):
        return None


def flows(function):
    g = gradient(function)
    return g is not None and bool(tf.reduce_any(g != 0))


def test_every_hint_has_a_tested_fix():
    tested = {(kind, key) for kind, key, *_ in FIXES}
    assert {("op", key) for key in OP_HINTS} <= tested
    assert {("reason", key) for key in REASONS if key not in NO_CODE_FIX} <= tested
    assert {("cause", key) for key in CAUSES} <= tested


@pytest.mark.parametrize(
    "key, words", [(f[1], f[2]) for f in FIXES if f[0] == "cause"], ids=[f[1] for f in FIXES if f[0] == "cause"]
)
def test_each_disconnection_hint_names_the_fix_tested_below(key, words):
    """The words of each cause's fix are in its hint; test_the_disconnection_fixes_restore_the_gradient runs them."""
    assert words in hint_text("cause", key)


@pytest.mark.parametrize(
    "kind, key, words, broken, fixed, same_forward",
    [f for f in FIXES if f[0] != "cause"],
    ids=[f"{f[1]}: {f[2]}" for f in FIXES if f[0] != "cause"],
)
def test_the_fix_a_hint_names_restores_the_gradient(kind, key, words, broken, fixed, same_forward):
    assert words in hint_text(kind, key)
    assert not flows(broken), "the example should be broken before the fix"
    assert flows(fixed), f"{key}: {words} does not restore the gradient"
    if same_forward:
        eager = getattr(broken, "python_function", broken)  # a tf.function's forward, run eagerly
        np.testing.assert_allclose(np.asarray(fixed(X)), np.asarray(eager(X)), atol=1e-6)


def test_the_cast_hint_names_no_fix_whose_own_gradient_is_none():
    hint = OP_HINTS["Cast"]
    assert "keras.ops.round" not in hint and "sign" not in hint
    assert gradient(tf.round) is None and gradient(tf.floor) is None  # why they are not offered


def test_an_integer_input_gets_a_gradient_once_it_is_a_float():
    assert "x.astype('float32')" in REASONS["integer_input"].hint
    integers = np.array([[3, 4]])
    assert value_and_gradient(lambda x: tf.cast(x, tf.float32) ** 2, tf.constant(integers))[1] is None
    assert flows(lambda x: x**2) and gradient(lambda x: x**2, tf.constant(integers.astype("float32"))) is not None


def test_the_disconnection_fixes_restore_the_gradient():
    weight = tf.Variable(tf.ones((3, 2)))
    holder = tf.Variable(tf.zeros((4, 2)))
    with tf.GradientTape(persistent=True) as tape:
        holder.assign(X @ weight)  # "assign": state keeps no record
        through_state = tf.reduce_sum(holder * 1.0)
        total = tf.zeros((4, 2))
        total = total + X @ weight  # the fix: total = total + x
        through_tensor = tf.reduce_sum(total)
        frozen = tf.constant((weight * 2.0).numpy())  # "built_tensor": computed once, a constant
        through_constant = tf.reduce_sum(X @ frozen)
        through_call = tf.reduce_sum(X @ (weight * 2.0))  # the fix: compute it inside call()
        rebound = weight + 1.0  # the fix for "rebound": a local variable, the weight untouched
        through_local = tf.reduce_sum(X @ rebound)
    assert tape.gradient(through_state, weight) is None and tape.gradient(through_constant, weight) is None
    for value in (through_tensor, through_call, through_local):
        assert tape.gradient(value, weight) is not None
    del tape
    assert "self.w.assign(...)" in CAUSES["rebound"].hint


def test_the_tape_recording_fixes_restore_the_gradient():
    """Outside stop_recording, and inside the tape's with block, the loss gets its gradient."""
    weight = tf.Variable(2.0)
    assert "Compute the loss outside that block" in REASONS["not_recorded"].hint
    assert "inside the `with tf.GradientTape() as tape:` block" in REASONS["not_recorded_outside"].hint
    with tf.GradientTape(persistent=True) as tape:
        with tape.stop_recording():
            paused = weight * 3.0
        recorded = weight * 3.0
    assert tape.gradient(paused, weight) is None and tape.gradient(recorded, weight) is not None
    del tape
    outside = weight * 3.0
    with tf.GradientTape(persistent=True) as tape:
        inside = weight * 3.0
    assert tape.gradient(outside, weight) is None and tape.gradient(inside, weight) is not None


# ------------------------------------------------ fixes written in the student's own code --

REPLACE = re.compile(r"[Rr]eplace `([^`]+)` with `([^`]+)`")
#: Constants the functions below may read, as a student's module would define them.
PRELUDE = (
    "import keras\nimport numpy as np\nimport tensorflow as tf\nfrom keras import ops\nimport workbook\n"
    "TABLE = tf.constant(np.arange(6, dtype='float32').reshape(3, 2))\n"
    "SIGNAL = tf.constant(np.sin(np.arange(10) / 2.0).astype('float32'))\n"
    "VALUES = tf.constant([[1.0, -2.0, 3.0]])\n"
)
# (what the student wrote: the body of f(x), x shaped like X; whether the fix keeps the forward values)
STUDENT_LINES = [
    ("return ops.round(x * 2.0)", True),
    ("return tf.math.floor(x) * 2.0", True),
    ("return tf.math.ceil(x * 3.0) / 3.0", True),
    ("return tf.math.rint(x)", True),
    ("return tf.sign(x) * 2.0", True),
    ("return tf.cast(tf.cast(x * 4.0, tf.int32), tf.float32)", True),
    ("return tf.cast(x > 0.5, tf.float32)", True),
    ("return ops.cast(ops.less(x, 0.0), 'float32')", True),
    ("return tf.where(x >= 0.0, 1.0, -1.0)", True),
    ("return tf.one_hot(tf.argmax(x, axis=-1), 3)", True),
    ("return tf.cast(tf.argmax(x, axis=-1), tf.float32)", True),
    ("return tf.gather(TABLE, tf.argmin(x, axis=-1))", True),
    ("return tf.image.resize(tf.reshape(x, (1, 2, 6, 1)), (1, 3), method='area')", True),
    ("return tf.math.bincount(tf.constant([0, 1, 1, 2]), x[:, 0], minlength=3, maxlength=3)", True),
    ("return tf.image.adjust_contrast(tf.reshape(x, (1, 2, 2, 3)), 2.0)", True),
    ("return tf.random.shuffle(x, seed=1) * VALUES", False),  # another permutation
    ("return tf.gather(SIGNAL, tf.cast(tf.round(tf.clip_by_value(x + 4.0, 0.0, 8.0)), tf.int32))", False),
    ("choice = tf.random.categorical(x, 1, seed=2)[:, 0]\n    return tf.one_hot(choice, 3) * VALUES", False),
    (
        "levels = tf.cast(tf.clip_by_value(x, 0.0, 1.0) * 255.0, tf.int32)\n"
        "    return tf.cast(tf.bitwise.bitwise_and(levels, 0xF0), tf.float32) / 255.0",
        True,
    ),
]


def student_function(tmp_path, body, name):
    """f(x) with ``body``, imported from a file of its own, as a student's module is."""
    path = tmp_path / f"{name}.py"
    path.write_text(f"{PRELUDE}\n\ndef f(x):\n    {body}\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


@pytest.mark.parametrize("body, same_forward", STUDENT_LINES, ids=[body.split("\n")[0] for body, _ in STUDENT_LINES])
def test_a_replacement_written_in_the_students_code_restores_the_gradient(tmp_path, body, same_forward):
    broken = student_function(tmp_path, body, "broken")
    assert not flows(broken), "the example should be broken before the fix"
    hint = workbook.find_gradient_breaks(broken, X).culprit.hint
    pairs = REPLACE.findall(hint)
    assert hint.startswith("Replace `") and pairs, hint
    fixed_body = body
    for old, new in pairs:
        assert fixed_body.count(old) == 1, (old, hint)
        fixed_body = fixed_body.replace(old, new)
    fixed = student_function(tmp_path, fixed_body, "fixed")
    assert flows(fixed), f"{fixed_body} does not restore the gradient"
    if same_forward:
        np.testing.assert_allclose(np.asarray(fixed(X)), np.asarray(broken(X)), atol=1e-5)


def test_a_call_split_over_lines_gets_the_general_hint(tmp_path):
    broken = student_function(tmp_path, "return tf.round(\n        x * 2.0)", "split")
    hint = workbook.find_gradient_breaks(broken, X).culprit.hint
    assert hint == OP_HINTS["Round"]


@pytest.mark.parametrize(
    "name, loss",
    [
        ("iou_loss", "workbook.losses.soft_iou"),
        ("jaccard_distance", "workbook.losses.soft_iou"),
        ("bbox_iou_loss", "workbook.losses.box_iou"),
        ("dice_loss", "workbook.losses.soft_dice"),
        ("f1_loss", "workbook.losses.soft_dice"),
        ("roc_auc_loss", "workbook.losses.pairwise_ranking"),
        ("mda", "workbook.losses.smooth_directional"),
        ("wer_loss", "workbook.losses.ctc"),
        ("accuracy_loss", "keras.losses.BinaryCrossentropy()"),
        ("qwk_loss", "workbook.losses.soft_qwk"),
    ],
)
def test_a_metric_used_as_a_loss_is_told_which_loss_to_train_on(tmp_path, name, loss):
    path = tmp_path / f"{name}_module.py"
    path.write_text(f"{PRELUDE}\n\ndef {name}(x):\n    return tf.round(x)\n")
    spec = importlib.util.spec_from_file_location(f"{name}_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    hint = workbook.find_gradient_breaks(getattr(module, name), X).culprit.hint
    assert re.search(r"`([^`]+)`", hint).group(1) == loss, hint
    assert f"Train on `{loss}`" in hint
    assert callable(keras.losses.get(eval(loss, {"workbook": workbook, "keras": keras})))
    # Kappa is piecewise constant: its true gradient is 0 almost everywhere, and a stand-in that trains exists.
    assert not hint.startswith("No gradient can exist")
    assert hint.startswith("Zero almost everywhere") == (name == "qwk_loss")


def test_every_honest_hint_says_why_and_names_what_works():
    # Only where nothing of the parameters reaches the output as a function can no gradient exist;
    # a piecewise-constant step has a true gradient, 0 almost everywhere, and a surrogate is a choice.
    no_function = {"hash", "ids", "sample", "sampled_value"}
    for key, hint in NO_GRADIENT_CAN_EXIST.items():
        assert hint.startswith("No gradient can exist" if key in no_function else "Zero almost everywhere"), key
        assert any(words in hint for words in ("Train on `", "workbook.sample_latent", "data pipeline")), key


# ------------------------------------------------------------- the stand-in losses --

PROBABILITIES = tf.constant([[0.9], [0.2], [0.6], [0.4], [0.7], [0.1]])
BINARY = tf.constant([[1.0], [0.0], [1.0], [0.0], [1.0], [0.0]])
ONE_HOT = tf.one_hot([0, 1, 2, 3, 1, 2], 4)
# (loss, y_true, a prediction, the perfect prediction)
STAND_INS = [
    (workbook.losses.soft_iou, BINARY, PROBABILITIES, BINARY),
    (workbook.losses.soft_dice, BINARY, PROBABILITIES, BINARY),
    (workbook.losses.pairwise_ranking, BINARY, PROBABILITIES, 10.0 * BINARY),
    (workbook.losses.smooth_directional, tf.constant([[0.0], [1.0], [0.5], [2.0]]), tf.zeros((4, 1)) + 0.3, None),
    (workbook.losses.soft_qwk, ONE_HOT, tf.nn.softmax(tf.reshape(tf.range(24.0) % 5.0, (6, 4))), ONE_HOT),
    (
        workbook.losses.box_iou,
        tf.constant([[0.0, 0.0, 2.0, 2.0]]),
        tf.constant([[1.0, 1.0, 3.0, 3.0]]),
        tf.constant([[0.0, 0.0, 2.0, 2.0]]),
    ),
    (workbook.losses.ctc, tf.constant([[0.0, 1.0, 2.0]]), tf.zeros((1, 3, 4)), 20.0 * tf.one_hot([[0, 1, 2]], 4)),
]


@pytest.mark.parametrize("loss, y_true, y_pred, perfect", STAND_INS, ids=[row[0].__name__ for row in STAND_INS])
def test_each_stand_in_loss_has_a_gradient_and_is_lowest_at_the_perfect_prediction(loss, y_true, y_pred, perfect):
    with tf.GradientTape() as tape:
        tape.watch(y_pred)
        value = loss(y_true, y_pred)
    assert bool(tf.reduce_any(tape.gradient(value, y_pred) != 0))
    perfect = y_true if perfect is None else perfect
    assert float(loss(y_true, perfect)) <= float(value)


def test_the_box_stand_in_is_one_minus_the_iou_of_the_corners():
    boxes = tf.constant([[0.0, 0.0, 2.0, 2.0]])
    assert float(workbook.losses.box_iou(boxes, boxes)) == pytest.approx(0.0, abs=1e-6)
    # overlap 1x1, union 4 + 4 - 1
    assert float(workbook.losses.box_iou(boxes, tf.constant([[1.0, 1.0, 3.0, 3.0]]))) == pytest.approx(6 / 7)
    assert float(workbook.losses.soft_iou(BINARY, BINARY)) == pytest.approx(0.0, abs=1e-6)
    assert float(workbook.losses.soft_qwk(ONE_HOT, ONE_HOT)) == pytest.approx(0.0, abs=1e-6)


def test_a_model_trained_on_a_stand_in_saves_and_loads_in_safe_mode(tmp_path):
    for loss in (workbook.losses.soft_iou, workbook.losses.pairwise_ranking, workbook.losses.soft_qwk):
        assert keras.saving.get_registered_name(loss) == f"workbook.losses>{loss.__name__}"
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="sgd", loss=workbook.losses.soft_dice)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras", safe_mode=True)
    x, y = X[:, :3].numpy(), BINARY[:4].numpy()
    assert loaded.evaluate(x, y, verbose=0) == pytest.approx(model.evaluate(x, y, verbose=0), rel=1e-5)


SPARSE_LAYER = """
class SparseDense(keras.layers.Layer):
    def build(self, input_shape):
        self.values = self.add_weight(shape=(4,), initializer="ones", name="values")
        self.kernel = tf.SparseTensor([[0, 0], [1, 1], [2, 0], [3, 1]], self.values, (4, 2))  # built once

    def call(self, inputs):
        return tf.sparse.sparse_dense_matmul(inputs, tf.sparse.reorder(self.kernel))
"""


def test_a_tensor_built_once_from_a_weight_is_moved_into_call_by_the_hint(tmp_path):
    line = [text for text in SPARSE_LAYER.splitlines() if "self.kernel =" in text][0].strip()
    hint = advise_cause("built_tensor", CAUSES["built_tensor"].hint, line)
    assert hint.endswith(CAUSES["built_tensor"].hint)
    source = SPARSE_LAYER
    for old, new in REPLACE.findall(hint):
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    layers = {}
    for name, text in (("broken", SPARSE_LAYER), ("fixed", source)):
        path = tmp_path / f"{name}_layer.py"
        path.write_text(PRELUDE + text)
        spec = importlib.util.spec_from_file_location(f"{name}_layer", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        layers[name] = module.SparseDense()
    x = tf.constant(np.ones((2, 4), "float32"))
    for name, layer in layers.items():
        layer(x)
        with tf.GradientTape() as tape:
            value = tf.reduce_sum(layer(x))
        assert (tape.gradient(value, layer.values.value) is not None) == (name == "fixed")
    np.testing.assert_allclose(layers["fixed"](x), layers["broken"](x))
    assert advise_cause("unused", CAUSES["unused"].hint, line) == CAUSES["unused"].hint


def test_a_metric_computed_in_numpy_is_told_its_stand_in():
    hint = REASONS["untraceable"].hint
    assert "Train on `workbook.losses.pairwise_ranking`" in advise_untraceable(
        hint, "auc = roc_auc_score(y_true.numpy(), y_pred.numpy())"
    )
    assert advise_untraceable(hint, "kappa = cohen_kappa_score(t.numpy(), p.numpy())").startswith(
        "Zero almost everywhere"
    )
    assert advise_untraceable(hint, "value = np.square(x.numpy())") == hint
    assert advise_untraceable(hint, None) == hint
