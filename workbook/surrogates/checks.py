"""Self-checks students run on their own answers: a verdict, never a traceback.

Introduced in 01_forward_and_backward.ipynb (:func:`check_surrogate`).
"""

import numbers

import numpy as np
import tensorflow as tf

from workbook.core.arguments import (
    check_callable,
    check_count,
    check_float_dtype,
    check_range,
    check_seed,
    check_tolerance,
    refuse,
)
from workbook.core.gradients import value_and_gradient

__all__ = ["check_surrogate"]

#: The most grid (or random) points a self-check takes: beyond it the check would run for minutes.
MAX_POINTS = 1_000_000


def check_surrogate(
    fn, forward, derivative, x_range=(-3, 3), n_points=601, n_samples=400, dtype="float32", rtol=1e-4, atol=1e-5, seed=0
):
    """Check that ``fn`` forwards ``forward(x)`` and backpropagates ``derivative(x)``.

    Introduced in 01_forward_and_backward.ipynb. ``fn`` is evaluated on a grid and at
    random points in ``x_range``, skipping points next to a jump of ``forward`` (where
    neither value is meaningful); its GradientTape gradient is compared with
    ``derivative(x)``. Prints a verdict with the worst mismatch (input, expected, got).

    Parameters
    ----------
    fn : callable
        Your function, e.g. ``workbook.surrogate(...)`` or your own ``tf.custom_gradient``.
    forward, derivative : callable
        What ``fn(x)`` should return, and the derivative backprop should use.
    x_range : (float, float)
        Where to test.
    n_points, n_samples : int
        Grid points (2 to 1,000,000) and extra random points (0 to 1,000,000).
    dtype : str
        The float dtype of the test inputs.
    rtol, atol : float
        How close counts as equal.
    seed : int
        For the random points.

    Returns
    -------
    bool
        True if both the values and the gradient match everywhere tested.
    """
    dtype = _checked_arguments(fn, forward, derivative, x_range, n_points, n_samples, dtype, rtol, atol, seed)
    x = sample_points(x_range, n_points, n_samples, seed)
    name = getattr(fn, "name", None) or getattr(fn, "__name__", "fn")
    try:
        x = _away_from_jumps(forward, x, dtype, x_range)
        expected_y = _numpy(forward(tf.constant(x, dtype=dtype)), x.shape)
        expected_d = _numpy(derivative(tf.constant(x, dtype=dtype)), x.shape)
    except Exception as error:
        print(f"✗ Could not evaluate the reference forward/derivative: {type(error).__name__}: {error}")
        return False
    if len(x) == 0:
        print(f"✗ forward jumps next to every input tested in {list(x_range)}: there is nothing to compare.")
        return False
    xt = tf.constant(x, dtype=dtype)
    try:
        y, grad = value_and_gradient(fn, xt)
        got_y = _numpy(y, x.shape)
    except Exception as error:
        print(f"✗ {name} raised {type(error).__name__} on {len(x)} inputs in {list(x_range)}:\n  {error}")
        return False
    if not report_mismatch(f"{name}(x)", "forward(x)", x, expected_y, got_y, rtol, atol):
        return False
    if grad is None:
        print(
            f"✗ {name}(x) has no gradient at all (TensorFlow gives None): backprop stops inside "
            f"{name}. Wrap the forward so that its gradient is replaced, e.g. with "
            f"workbook.surrogate(forward, derivative) or tf.custom_gradient."
        )
        return False
    got_d = _numpy(grad, x.shape)
    if not report_mismatch(f"the gradient of {name}", "derivative(x)", x, expected_d, got_d, rtol, atol):
        if np.allclose(got_d, 0):
            print("  The gradient is 0 everywhere: backprop used the forward's own derivative.")
        elif np.allclose(got_d, 1):
            print("  The gradient is 1 everywhere: a straight-through estimator, not your derivative.")
        return False
    worst = max(np.abs(got_y - expected_y).max(), np.abs(got_d - expected_d).max())
    print(
        f"✓ {name} passes: at {len(x):,} inputs in {list(x_range)} it returns forward(x) and "
        f"backprop uses derivative(x) (largest difference {worst:.2g})."
    )
    return True


def _checked_arguments(fn, forward, derivative, x_range, n_points, n_samples, dtype, rtol, atol, seed):
    """Refuse check_surrogate's bad arguments by name; return the float dtype to test in."""
    for argument, value in (("fn", fn), ("forward", forward), ("derivative", derivative)):
        check_callable(argument, value, "a function of one tensor x", owner="check_surrogate")
    check_count("n_points", n_points, low=2, high=MAX_POINTS, owner="check_surrogate")
    check_count("n_samples", n_samples, low=0, high=MAX_POINTS, owner="check_surrogate")
    dtype = check_float_dtype("dtype", dtype, owner="check_surrogate")
    check_test_range(x_range, dtype, owner="check_surrogate")
    check_tolerance("rtol", rtol, owner="check_surrogate")
    check_tolerance("atol", atol, owner="check_surrogate")
    check_seed(seed, owner="check_surrogate")
    return dtype


def check_test_range(x_range, dtype, owner):
    """Refuse an ``x_range`` that is not (low, high), or whose ends ``dtype`` cannot hold (they would be inf)."""
    check_range("x_range", x_range)
    largest = float(tf.as_dtype(dtype).max)
    if max(abs(float(x_range[0])), abs(float(x_range[1]))) > largest:
        refuse("x_range", x_range, f"within what {dtype} holds, -{largest:.3g} to {largest:.3g}", owner)


def sample_points(x_range, n_points, n_samples, seed, off_grid=True):
    """A grid of ``n_points`` over ``x_range`` followed by ``n_samples`` uniform random points.

    With ``off_grid`` the grid is shifted by an irrational fraction of its step, which keeps
    it off the integers and half-integers where steps, rounding and floors jump.
    """
    low, high = float(x_range[0]), float(x_range[1])
    grid = np.linspace(low, high, n_points)
    if off_grid:
        step = (high - low) / max(n_points - 1, 1)
        grid = grid + step * (np.sqrt(2) - 1) / 2
        grid = grid[grid <= high]
    rng = np.random.default_rng(seed)
    return np.concatenate([grid, rng.uniform(low, high, n_samples)])


def _away_from_jumps(forward, x, dtype, x_range):
    """``x`` without the points within a tiny distance of a jump of ``forward``."""
    delta = 1e-4 * max(1.0, float(x_range[1] - x_range[0]))
    # A NumPy reference is allowed (it is the most independent answer); it just has no slope.
    _, slope = value_and_gradient(forward, tf.constant(x, dtype=dtype))
    slope = np.zeros_like(x) if slope is None else np.abs(_numpy(slope, x.shape))
    above = _numpy(forward(tf.constant(x + delta, dtype=dtype)), x.shape)
    below = _numpy(forward(tf.constant(x - delta, dtype=dtype)), x.shape)
    smooth = np.abs(above - below) <= 2 * delta * 10 * (1 + slope)
    return x[smooth]


def _numpy(value, shape):
    if isinstance(value, numbers.Real):
        return np.full(shape, float(value))
    array = np.asarray(value, dtype=float)
    if array.shape != shape:
        raise ValueError(f"expected a result of shape {shape}, got shape {array.shape}")
    return array


def report_mismatch(what, reference, x, expected, got, rtol=1e-5, atol=1e-5):
    """True if ``got`` matches ``expected``; else print how many inputs differ and the worst one.

    Every self-check (here and in assignment_checks.py) speaks through this.
    """
    bad = ~np.isclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return True
    difference = np.nan_to_num(np.where(bad, np.abs(got - expected), -1), nan=np.inf)
    i = int(np.argmax(difference))
    print(
        f"✗ {what} differs from {reference} at {int(bad.sum()):,} of {len(x):,} inputs.\n"
        f"  Worst at x = {x[i]:.6g}: expected {expected[i]:.6g}, got {got[i]:.6g}."
    )
    return False
