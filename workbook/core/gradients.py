"""The one way the workbook asks TensorFlow for a gradient: watch ``x``, call ``fn``, ask the tape.

Introduced in 01_forward_and_backward.ipynb, which writes the same three lines by hand.
Every module that measures one input's derivative (the self-checks, the derivative
plots' measurements, the surrogate catalogue, the estimators) calls
:func:`value_and_gradient`, so they all mean the same thing by "the gradient":
``d sum(fn(x)) / dx``, and ``None`` where TensorFlow has none. Tapes that ask something
else keep their own: a training step (gradients for the weights), the finder (many
sources at once, without watching what the code touches) and the Gumbel-softmax check
(a weighted projection of the sample, not its sum)."""

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
