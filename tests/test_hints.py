"""Every fix a finder hint names really restores the gradient.

Each row applies the fix a hint names, as a student would type it, to an example of
the op, and checks with tf.GradientTape (not with the finder) that the gradient then
flows, while it did not before. The forward pass is checked too where the fix
promises to keep it.
"""

import gradient_killers
import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import workbook
from workbook.core.gradients import value_and_gradient
from workbook.finder.hints import CAUSES, OP_HINTS, REASONS

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
        "ops.repeat(ops.repeat(x, 2, axis=1), 2, axis=2)",
        slope_penalty(lambda t: tf.image.resize(t, (8, 6), method="nearest"), (1, 4, 3, 1)),
        slope_penalty(lambda t: ops.repeat(ops.repeat(t, 2, axis=1), 2, axis=2), (1, 4, 3, 1)),
        True,
    ),
    (
        "op",
        "ResizeBilinearGrad",
        "keras.layers.AveragePooling2D(2)",
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
    ("cause", "assign", "total = total + x", None, None, True),
    ("cause", "rebound", "keep the new value in a local variable", None, None, True),
    ("cause", "built_tensor", "Compute that tensor inside call()", None, None, True),
    ("cause", "unused", "Use it in call()", None, None, True),
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
