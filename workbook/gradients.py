"""The one way the workbook asks TensorFlow for a gradient: watch ``x``, call ``fn``, ask the tape.

Introduced in 01_forward_and_backward.ipynb, which writes the same three lines by hand.
Every module that measures a derivative (the self-checks, the plots, the surrogate
catalogue, the estimators) calls :func:`value_and_gradient`, so they all mean the same
thing by "the gradient": ``d sum(fn(x)) / dx``, and ``None`` where TensorFlow has none.
"""

import tensorflow as tf

__all__ = ["value_and_gradient"]


def value_and_gradient(fn, x):
    """``fn(x)`` and the gradient of its sum with respect to ``x``.

    Introduced in 01_forward_and_backward.ipynb. ``x`` is watched, so a constant works.
    For an elementwise ``fn`` the gradient holds the derivative at every point of ``x``.

    Returns
    -------
    (value, gradient)
        ``gradient`` is ``None`` when no differentiable path leads from ``x`` to the value:
        TensorFlow's own answer for ``round``, ``floor``, ``sign`` or a cast, and the answer
        for a value that is not a tensor at all (a NumPy result has no gradient).
    """
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = fn(x)
    gradient = tape.gradient(value, x) if tf.is_tensor(value) else None
    return value, gradient
