"""What the shared argument predicates accept, and what the one gradient helper returns,
each against a table written out by hand."""

import math
from fractions import Fraction

import numpy as np
import pytest
import tensorflow as tf

from workbook.core.arguments import check_range, check_seed, is_number, is_whole_number
from workbook.core.gradients import value_and_gradient


@pytest.mark.parametrize(
    "value, low, high, expected",
    [
        (0, None, None, True),
        (-3, None, None, True),
        (np.int64(7), 0, 10, True),
        (10**400, 0, None, True),
        (True, None, None, False),  # a bool is never taken for 1
        (np.True_, None, None, False),
        (1.0, None, None, False),  # a float, even a whole one, is not a whole number
        (np.float32(2), None, None, False),
        ("3", None, None, False),
        (None, None, None, False),
        (2, 2, 5, True),  # both bounds are allowed
        (5, 2, 5, True),
        (1, 2, 5, False),
        (6, 2, 5, False),
    ],
)
def test_is_whole_number_takes_ints_within_inclusive_bounds_and_nothing_else(value, low, high, expected):
    assert is_whole_number(value, low, high) is expected


@pytest.mark.parametrize(
    "value, kwargs, expected",
    [
        (0.5, {}, True),
        (3, {}, True),
        (np.float32(0.25), {}, True),
        (np.int64(4), {}, True),
        (Fraction(1, 3), {}, True),
        (10**400, {"low": 0}, True),  # a huge int is finite: no OverflowError
        (True, {}, False),
        (np.True_, {}, False),
        (math.nan, {}, False),
        (math.inf, {}, False),
        (-math.inf, {}, False),
        ("0.5", {}, False),
        (0, {"low": 0}, True),
        (0, {"low": 0, "include_low": False}, False),
        (1, {"high": 1}, True),
        (1, {"high": 1, "include_high": False}, False),
        (0.999, {"low": 0, "high": 1, "include_high": False}, True),
        (-0.001, {"low": 0}, False),
        (math.inf, {"low": 0, "finite": False}, True),  # "never", where infinity means that
        (-math.inf, {"low": 0, "finite": False}, False),
        (math.nan, {"finite": False}, False),
    ],
)
def test_is_number_takes_finite_reals_within_the_bounds_asked_for(value, kwargs, expected):
    assert is_number(value, **kwargs) is expected


@pytest.mark.parametrize("value", [(-1, 1), [0.0, 2.5], (np.float32(-2), 3)])
def test_check_range_accepts_two_increasing_finite_numbers(value):
    check_range("x_range", value)


@pytest.mark.parametrize(
    "value", [(1, -1), (0, 0), (0, math.inf), (math.nan, 1), (True, 2), (0, 1, 2), "01", None, {0: 1}]
)
def test_check_range_refuses_anything_else_naming_the_argument_and_the_value(value):
    with pytest.raises(ValueError) as error:
        check_range("x_range", value)
    assert str(error.value) == f"x_range={value!r} must be two finite numbers (low, high) with low < high."


@pytest.mark.parametrize("seed", [0, 7, np.int64(3), np.uint32(4294967295), 4294967295])
def test_check_seed_accepts_whole_numbers_from_zero_to_two_to_the_32_minus_one(seed):
    check_seed(seed)


@pytest.mark.parametrize("seed", [np.int64(3), np.uint32(3), np.int8(3), np.uint64(3), 3])
def test_check_seed_gives_every_accepted_seed_back_as_a_python_int(seed):
    # random.seed and Keras take only Python's own int: a NumPy integer must reach them as one.
    checked = check_seed(seed)
    assert type(checked) is int and checked == 3
    assert check_seed(np.uint32(4294967295)) == 4294967295
    assert check_seed(None, allow_none=True) is None


@pytest.mark.parametrize("seed", [-1, 4294967296, 2**70, 1.0, True, None, "0"])
def test_check_seed_refuses_anything_else_with_an_example(seed):
    with pytest.raises(ValueError) as error:
        check_seed(seed)
    assert str(error.value) == f"seed={seed!r} must be a whole number from 0 to 2**32 - 1 = 4294967295, e.g. seed=0."


def test_check_seed_names_its_owner_and_takes_none_where_asked():
    check_seed(None, allow_none=True)
    with pytest.raises(ValueError) as error:
        check_seed(-1, owner="sample_latent", allow_none=True)
    assert str(error.value) == (
        "sample_latent: seed=-1 must be a whole number from 0 to 2**32 - 1 = 4294967295, e.g. seed=0, or None."
    )


def test_value_and_gradient_of_a_square_is_the_value_and_twice_x():
    x = tf.constant([-1.5, 0.0, 2.0])
    value, gradient = value_and_gradient(lambda t: t * t, x)
    np.testing.assert_allclose(value.numpy(), [2.25, 0.0, 4.0])
    np.testing.assert_allclose(gradient.numpy(), [-3.0, 0.0, 4.0])


def test_value_and_gradient_differentiates_the_sum_of_a_reduced_value():
    x = tf.constant([1.0, 2.0, 3.0])
    value, gradient = value_and_gradient(lambda t: tf.reduce_sum(t**3), x)
    assert float(value) == pytest.approx(36.0)
    np.testing.assert_allclose(gradient.numpy(), [3.0, 12.0, 27.0])


@pytest.mark.parametrize(
    "fn", [tf.round, tf.math.floor, lambda t: tf.cast(t, tf.int32)], ids=["round", "floor", "cast"]
)
def test_value_and_gradient_is_none_where_tensorflow_has_no_gradient(fn):
    _, gradient = value_and_gradient(fn, tf.constant([0.4, 1.6]))
    assert gradient is None


def test_value_and_gradient_of_a_numpy_result_is_none_not_an_error():
    # A student's function that leaves TensorFlow has no gradient; the self-checks say so.
    value, gradient = value_and_gradient(lambda t: np.asarray(t) * 2, tf.constant([1.0, 2.0]))
    np.testing.assert_allclose(value, [2.0, 4.0])
    assert gradient is None


@pytest.mark.parametrize(
    "value, expected",
    [
        (np.zeros((2, 3), "float32"), "<ndarray of shape (2, 3), dtype float32>"),
        (tf.zeros((4,)), "<EagerTensor of shape (4,), dtype float32>"),
        (10**400, "<a 1329-bit integer>"),  # repr would refuse it (more than 4300 digits needs care)
        (2**70, "1180591620717411303424"),
        (np.float32(0.5), "0.5"),
        ("x" * 100, repr("x" * 100)[:60] + "... (str of length 100)"),
    ],
)
def test_a_value_is_shown_short_an_array_by_its_shape_and_dtype(value, expected):
    from workbook.core.arguments import shown

    assert shown(value) == expected


def test_the_shared_checks_say_the_argument_the_value_and_what_is_allowed():
    from workbook.core.arguments import check_count, check_flag, check_float_dtype, check_tolerance

    cases = [
        (
            lambda: check_count("n_points", 10**9, low=2, high=1000),
            "n_points=1000000000 must be a whole number from 2 to 1000.",
        ),
        (lambda: check_count("epochs", 0, owner="fit"), "fit: epochs=0 must be a whole number of at least 1."),
        (lambda: check_tolerance("rtol", math.nan), "rtol=nan must be a finite number of at least 0, e.g. 1e-5."),
        (lambda: check_flag("live", "no"), "live='no' must be True or False."),
        (
            lambda: check_float_dtype("dtype", None),
            "dtype=None must be a float dtype: one of 'float16', 'bfloat16', 'float32', 'float64'.",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as refused:
            call()
        assert str(refused.value) == message
    check_count("n_samples", 0, low=0, high=10)
    check_tolerance("atol", 0)
    check_flag("live", np.True_)
    assert [check_float_dtype("dtype", d) for d in ("float32", np.float64, tf.bfloat16)] == [
        "float32",
        "float64",
        "bfloat16",
    ]


def test_check_images_returns_float32_images_and_refuses_others_saying_why():
    from workbook.core.arguments import check_images

    images = check_images("x_test", np.ones((3, 28, 28, 1), dtype="uint8"))
    assert images.dtype == np.float32 and images.shape == (3, 28, 28, 1)
    nan = np.zeros((3, 28, 28, 1))
    nan[1, 0, 0, 0] = np.inf
    for value, says in [
        (nan, "x_test[1] holds NaN or infinity"),
        (np.zeros((3, 28, 28)), "add the channel axis"),
        (np.zeros((0, 28, 28, 1)), "with at least one image"),
        (np.full((3, 28, 28, 1), 2.0), "it spans [2, 2] (divide by 255?)"),
        ([[1, 2], [3]], "MNIST images, an array shaped (n, 28, 28, 1)"),
    ]:
        with pytest.raises(ValueError, match="x_test=") as refused:
            check_images("x_test", value)
        assert says in str(refused.value)
