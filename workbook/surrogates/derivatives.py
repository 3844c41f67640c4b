"""What a derivative plot shows, measured: forward, backprop, true and finite-difference derivatives.

Introduced in 01_forward_and_backward.ipynb (the pictures are drawn by
:func:`workbook.plot_derivatives`, which calls :func:`measure`). Every value is measured
through TensorFlow, never copied from a formula, so a plot shows what backprop does.
"""

import numpy as np
import tensorflow as tf

from workbook.core.arguments import check_count, check_float_dtype, check_range, refuse
from workbook.core.gradients import value_and_gradient
from workbook.surrogates.catalogue import SURROGATES, SurrogateGradient, surrogate

__all__ = ["check_grid", "measure", "resolve"]


def resolve(fn_or_name):
    """(callable, SurrogateGradient or None) from a catalog key, an object, a pair or a callable."""
    if isinstance(fn_or_name, str):
        if fn_or_name not in SURROGATES:
            refuse("fn_or_name", fn_or_name, f"a name in the catalog, one of: {', '.join(sorted(SURROGATES))}")
        fn_or_name = SURROGATES[fn_or_name]
    if isinstance(fn_or_name, tuple) and len(fn_or_name) == 2 and all(map(callable, fn_or_name)):
        fn_or_name = surrogate(*fn_or_name)
    if isinstance(fn_or_name, SurrogateGradient):
        return fn_or_name, fn_or_name
    if callable(fn_or_name):
        return fn_or_name, None
    allowed = (
        "a catalog key (e.g. 'sign_ste'), an object from workbook.SURROGATES, "
        "a (forward, derivative) pair of functions, or a callable"
    )
    refuse("fn_or_name", fn_or_name, allowed)


def check_grid(x_range, n_points):
    """Refuse an ``x_range`` or ``n_points`` a plot (or the explorer) cannot draw, naming it."""
    check_range("x_range", x_range)
    check_count("n_points", n_points, low=3, high=100_000)


def measure(fn_or_name, x_range=(-2, 2), n_points=401, dtype="float32"):
    """Everything the plot draws, as NumPy arrays, measured (not copied from formulas).

    Returns a dict with ``x``, ``forward`` (through ``fn``), ``backprop`` (GradientTape
    gradient through ``fn``), ``backprop_is_none``, ``true`` and ``true_is_none`` (autodiff
    of the forward alone; None if unknown), ``finite_difference`` and ``h``.
    """
    check_grid(x_range, n_points)
    dtype = check_float_dtype("dtype", dtype)
    fn, known = resolve(fn_or_name)
    x = tf.constant(np.linspace(x_range[0], x_range[1], n_points), dtype=dtype)
    y, backprop = value_and_gradient(fn, x)
    forward = known.forward if known is not None else fn
    result = {
        "x": x.numpy().astype(float),
        "forward": np.asarray(y, dtype=float),
        "backprop_is_none": backprop is None,
        "true": None,
        "true_is_none": None,
    }
    result["backprop"] = np.zeros(n_points) if backprop is None else np.asarray(backprop, dtype=float)
    if known is not None:
        _, true = value_and_gradient(known.forward, x)
        result["true_is_none"] = true is None
        result["true"] = np.zeros(n_points) if true is None else np.asarray(true, dtype=float)
    # Half a grid step: every jump then shows up as a spike of height jump / step.
    h = (x_range[1] - x_range[0]) / (n_points - 1) / 2
    above = np.asarray(forward(tf.constant(result["x"] + h, dtype=dtype)), dtype=float)
    below = np.asarray(forward(tf.constant(result["x"] - h, dtype=dtype)), dtype=float)
    result["finite_difference"], result["h"] = (above - below) / (2 * h), h
    return result
