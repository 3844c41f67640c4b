"""Small functions with a known culprit, for testing find_gradient_breaks.

Each function that kills a gradient marks the line that makes the culprit op
with a comment ``# culprit: OpType reason``; the test reads those markers from
this file's text, so the expected answer is written by hand, not computed.
Functions listed in CLEAN let the gradient through and must report ok.
"""

import numpy as np
import tensorflow as tf
from keras import ops

# --- the eight ops of the question's Lambda, each next to the op that really cuts ---


def batch_dot_then_argmax(x):
    scores = tf.einsum("bi,bj->bij", x, x)  # a batch dot: differentiable
    choice = tf.argmax(scores, axis=-1)  # culprit: ArgMax integer_output
    return tf.cast(choice, tf.float32)


def cast_to_int(x):
    codes = tf.cast(x * 4.0, tf.int32)  # culprit: Cast integer_output
    return tf.cast(codes, tf.float32) / 4.0


def clip_then_cast(x):
    clipped = tf.clip_by_value(x, 0.0, 1.0)
    levels = tf.cast(clipped * 3.0, tf.int32)  # culprit: Cast integer_output
    return tf.cast(levels, tf.float32)


def concatenate_rounded(x):
    return tf.concat([tf.floor(x), tf.floor(2.0 * x)], axis=-1)  # culprit: Floor no_gradient


def one_hot_of_codes(x):
    codes = tf.cast(tf.abs(x[:, 0]) * 2.0, tf.int32)  # culprit: Cast integer_output
    return tf.one_hot(codes, depth=4)


def reshape_int(x):
    flat = tf.reshape(tf.cast(x, tf.int64), [-1])  # culprit: Cast integer_output
    return tf.cast(flat, tf.float32)


def sum_of_positive_count(x):
    positive = tf.greater(x, 0.0)  # culprit: Greater integer_output
    return tf.reduce_sum(tf.cast(positive, tf.float32), axis=-1)


def tile_of_sign(x):
    signs = tf.sign(x)  # culprit: Sign zero_gradient
    return tf.tile(signs, [1, 2])


# --- the usual suspects ---


def argmax_keras(x):
    return ops.cast(ops.argmax(x, axis=-1), "float32")  # culprit: ArgMax integer_output


def one_hot_argmax_keras(x):
    winner = ops.argmax(x, axis=-1)  # culprit: ArgMax integer_output
    return ops.one_hot(winner, 3)


def round_keras(x):
    return ops.round(x * 3.0) / 3.0  # culprit: Round no_gradient


def floor_tf(x):
    return tf.math.floor(x) * 2.0  # culprit: Floor no_gradient


def sign_keras(x):
    return ops.sign(x) * 2.0  # culprit: Sign zero_gradient


def compare_then_cast(x):
    mask = x < 0.5  # culprit: Less integer_output
    return ops.cast(mask, "float32") * 3.0


def step_with_where(x):
    return tf.where(x > 0.0, 1.0, 0.0)  # culprit: Greater integer_output


def stopped(x):
    frozen = tf.stop_gradient(x)  # culprit: StopGradient stop_gradient
    return frozen * 2.0


def numpy_escape(x):
    doubled = tf.numpy_function(lambda a: (a * 2.0).astype(np.float32), [x], tf.float32)  # culprit: PyFunc no_gradient
    return doubled + 1.0


def no_registered_gradient(x):
    images = tf.reshape(x, (1, 4, 3, 1))
    return tf.image.adjust_contrast(images, 2.0)  # culprit: AdjustContrastv2 no_gradient_registered


def floor_division(x):
    return (x // 0.25) * 0.25  # culprit: FloorDiv no_gradient


def bucketing(x):
    buckets = tf.raw_ops.Bucketize(input=x, boundaries=[-0.5, 0.0, 0.5])  # culprit: Bucketize integer_output
    return tf.cast(buckets, tf.float32)


def top_k_indices(x):
    best = tf.math.top_k(x, k=2).indices  # culprit: TopKV2 integer_output
    return tf.cast(best, tf.float32)


def string_round_trip(x):
    text = tf.strings.as_string(x)  # culprit: AsString integer_output
    return tf.strings.to_number(text)


def disconnected_output(x):
    return tf.ones_like(x) * 2.0  # culprit: (none) disconnected


def ceil_tf(x):
    return tf.math.ceil(x)  # culprit: Ceil no_gradient


def rint_tf(x):
    return tf.math.rint(x * 2.0)  # culprit: Rint no_gradient


def equal_then_cast(x):
    same = tf.equal(x, tf.reduce_max(x, axis=-1, keepdims=True))  # culprit: Equal integer_output
    return tf.cast(same, tf.float32)


def two_culprits_floor_first(x):
    floored = tf.floor(x)  # culprit: Floor no_gradient
    return tf.round(floored * 2.0)


def numpy_on_tensor(x):
    return tf.constant(x.numpy() * 2.0)  # culprit: AttributeError untraceable


def python_if_on_tensor(x):
    if tf.reduce_sum(x) > 0:  # culprit: OperatorNotAllowedInGraphError untraceable
        return x
    return -x


def broken_custom_gradient(x):
    """A custom gradient whose backward function raises: the finder cannot check it."""

    @tf.custom_gradient
    def doubled(value):
        def backward(upstream):
            raise ValueError("this gradient function is broken")

        return value * 2.0, backward

    return doubled(x)  # culprit: IdentityN gradient_error


CULPRITS = [
    batch_dot_then_argmax,
    cast_to_int,
    clip_then_cast,
    concatenate_rounded,
    one_hot_of_codes,
    reshape_int,
    sum_of_positive_count,
    tile_of_sign,
    argmax_keras,
    one_hot_argmax_keras,
    round_keras,
    floor_tf,
    sign_keras,
    compare_then_cast,
    step_with_where,
    stopped,
    numpy_escape,
    no_registered_gradient,
    floor_division,
    bucketing,
    top_k_indices,
    string_round_trip,
    disconnected_output,
    ceil_tf,
    rint_tf,
    equal_then_cast,
    two_culprits_floor_first,
    numpy_on_tensor,
    python_if_on_tensor,
]


# --- functions whose gradient flows: each must report ok ---


def matmul(x):
    return x @ tf.transpose(x)


def softmax(x):
    return ops.softmax(x * 3.0, axis=-1)


def clip_inside_range(x):
    return tf.clip_by_value(x, -10.0, 10.0)


def where_with_float_branches(x):
    return tf.where(x > 0.0, x * 2.0, x * 0.5)


def boolean_mask(x):
    return tf.reduce_sum(tf.boolean_mask(x, x > 0.0))


def py_function(x):
    return tf.py_function(lambda a: a * 2.0, [x], tf.float32)


def straight_through_trick(x):
    return x + tf.stop_gradient(tf.round(x) - x)


def custom_gradient_round(x):
    @tf.custom_gradient
    def rounded(value):
        return tf.round(value), lambda upstream: upstream

    return rounded(x)


def gather_by_argmax(x):
    best = tf.argmax(x, axis=-1)
    return tf.gather(x, best, axis=1, batch_dims=1)


CLEAN = [
    matmul,
    softmax,
    clip_inside_range,
    where_with_float_branches,
    boolean_mask,
    py_function,
    straight_through_trick,
    custom_gradient_round,
    gather_by_argmax,
]


# --- half-fixed functions: the fix that is already in place is not the culprit ---


def floor_fixed_argmax_not(x):
    import workbook

    coarse = workbook.SURROGATES["floor_ste"](x * 2.0)  # a correct straight-through fix
    return ops.one_hot(ops.argmax(coarse, axis=-1), 3)  # culprit: ArgMax integer_output


def argmax_fixed_floor_not(x):
    coarse = ops.floor(x * 2.0)  # culprit: Floor no_gradient
    hard, soft = ops.one_hot(ops.argmax(coarse, axis=-1), 3), ops.softmax(coarse)
    return soft + ops.stop_gradient(hard - soft)  # a correct straight-through one-hot


CULPRITS += [floor_fixed_argmax_not, argmax_fixed_floor_not]
