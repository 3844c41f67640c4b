"""Ask TensorFlow's registered gradient function of one op which of its inputs get a gradient.

Introduced in 03_finding_gradient_killers.ipynb. The walk of :mod:`workbook.finder.walk.backward`
calls this for every op on the way back from the output: it feeds ones to the op's
outputs that carry a gradient and looks at what the gradient function gives each input:
nothing (``None``), a constant zero, or something computed from those ones.
"""

import contextlib
import io
from dataclasses import dataclass
from enum import Enum

from workbook.finder.trace.graph_program import custom_gradient_type

#: Ops whose gradient is a function of their own: what it returns differs from one op to the next.
INSTANCE_GRADIENT_OPS = {"IdentityN", "PyFunc", "EagerPyFunc", "PartitionedCall", "StatefulPartitionedCall"}
#: Ops whose gradient only exists when they run: tf.py_function's tape records the Python function's
#: TensorFlow ops as it runs, and sees nothing of what it computes with NumPy (``.numpy()``).
RUN_TIME_GRADIENT_OPS = {"EagerPyFunc"}


class InputGradient(Enum):
    """What an op's gradient function gives one of its inputs."""

    PASSES = "passes"  # a gradient computed from the gradient that arrives
    NONE = "none"  # no gradient at all
    ZERO = "zero"  # a constant: zero whatever arrives


@dataclass(frozen=True)
class GradientPattern:
    """Per input of an op, what its gradient function gives it; or the error the function raised."""

    inputs: tuple = ()
    error: Exception = None


@dataclass
class LocalGradients:
    """What an op's gradient function returned, and the ones it was fed (to tell a gradient from a constant)."""

    gradients: list
    upstream: tuple = ()


class GradientFunctionFailed(Exception):
    """TensorFlow's gradient function for an op raised ``error``."""

    def __init__(self, error):
        super().__init__(error)
        self.error = error


def is_float(tensor):
    """Whether a tensor holds values a gradient can flow through (float or complex)."""
    return tensor.dtype.is_floating or tensor.dtype.is_complex


def signature(op, carried_indices):
    """What decides which inputs an op's gradient reaches: its type and dtypes, or the op itself.

    Gradient functions are registered per op type, so two ops of one type with the same
    dtypes and the same outputs carrying a gradient get the same answer; the walk asks
    TensorFlow once per signature (a ResNet has thousands of ops but a few dozen signatures).
    """
    if op.type in INSTANCE_GRADIENT_OPS or custom_gradient_type(op):
        return (op, carried_indices)
    dtypes = tuple(t.dtype for t in op.inputs), tuple(t.dtype for t in op.outputs)
    return (op.type, dtypes, carried_indices)


def gradient_pattern(op, gradient_function, carried, original_ops):
    """The :class:`GradientPattern` of ``op`` when the ``carried`` outputs bring a gradient.

    ``original_ops`` are the ops of the traced program: the probe's own ops are the others.
    """
    try:
        local = local_gradients(op, gradient_function, carried)
    except GradientFunctionFailed as failed:
        return GradientPattern(error=failed.error)
    pattern = []
    for index in range(len(op.inputs)):
        if index >= len(local.gradients) or local.gradients[index] is None:
            pattern.append(InputGradient.NONE)
        elif not depends_on(local.gradients[index], local.upstream, original_ops):
            pattern.append(InputGradient.ZERO)
        else:
            pattern.append(InputGradient.PASSES)
    return GradientPattern(inputs=tuple(pattern))


def local_gradients(op, gradient_function, carried):
    """Call the op's registered gradient with ones for the outputs that carry a gradient.

    Raises :class:`GradientFunctionFailed` if TensorFlow's gradient function raises.
    """
    import tensorflow as tf

    if gradient_function is None:
        return LocalGradients([None] * len(op.inputs))
    carried_refs = {t.ref() for t in carried}
    upstream, probes = [], []
    with op.graph.as_default():
        for tensor in op.outputs:
            if tensor.ref() in carried_refs and is_float(tensor):
                # An op of its own (not a constant) so that the gradient's dependence on it can be traced.
                probes.append(tf.identity(tf.ones_like(tensor)))
                upstream.append(probes[-1])
            elif is_float(tensor):
                upstream.append(tf.zeros_like(tensor))
            else:
                upstream.append(None)
        try:
            with tf.name_scope("workbook_gradient_probe"):
                result = gradient_function(op, *upstream)
        except Exception as error:
            raise GradientFunctionFailed(error) from error
    if not isinstance(result, (list, tuple)):
        result = [result]
    return LocalGradients(list(result), tuple(probes))


def depends_on(gradient, upstream, original_ops):
    """Whether ``gradient`` is computed from one of the ``upstream`` tensors (else it is a constant)."""
    import tensorflow as tf

    if isinstance(gradient, tf.IndexedSlices):
        gradient = gradient.values
    targets = {t.ref() for t in upstream}
    seen, stack = set(), [gradient]
    while stack:
        tensor = stack.pop()
        if tensor.ref() in targets:
            return True
        op = tensor.op
        if op in seen or op in original_ops:
            continue
        seen.add(op)
        stack.extend(op.inputs)
    return False


def run_time_pattern(op):
    """The :class:`GradientPattern` of a ``tf.py_function`` op (EagerPyFunc), found by running it once more.

    Introduced in 03_finding_gradient_killers.ipynb. Its gradient is a GradientTape over the
    Python function as it ran, so the graph cannot tell whether it reaches an input: the
    function runs again, eagerly, on stand-in values shaped like its inputs, under a tape.
    Where that tape records no way back (the function computed with ``.numpy()``), TensorFlow
    gives a scalar 0 in place of the gradient: that input gets :attr:`InputGradient.NONE`.
    None if the op cannot be run that way (an input of unknown shape, a function that fails on
    the stand-ins): the walk then asks the registered gradient function, as for any op.
    """
    values = [_stand_in(tensor) for tensor in op.inputs]
    if any(value is None for value in values):
        return None
    try:  # what the function prints on this extra run is the finder's, not the student's output
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            gradients = _replayed_gradients(op, values)
    except Exception:  # the function needs other values than the stand-ins: it cannot be checked this way
        return None
    return GradientPattern(inputs=tuple(_run_time_verdict(v, g) for v, g in zip(values, gradients, strict=True)))


def _replayed_gradients(op, values):
    """The gradient of the sum of ``op``'s float outputs for each of ``values``, running ``op`` again on them."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch([value for value in values if value.dtype.is_floating])
        outputs = tf.raw_ops.EagerPyFunc(
            input=values, token=op.get_attr("token"), Tout=op.get_attr("Tout"), is_async=False
        )
        total = [tf.reduce_sum(tf.cast(t, tf.float32)) for t in outputs if t.dtype.is_floating]
    return tape.gradient(tf.add_n(total), values) if total else [None] * len(values)


def _run_time_verdict(value, gradient):
    """PASSES if ``gradient`` is a gradient for ``value``; NONE for nothing, or the scalar 0 put in its place."""
    if gradient is None or not value.dtype.is_floating or gradient.shape != value.shape:
        return InputGradient.NONE
    return InputGradient.PASSES


def _stand_in(tensor):
    """A value shaped like ``tensor`` to run its op on: normal noise for floats, zeros else; None if unknown."""
    import numpy as np
    import tensorflow as tf

    if not tensor.shape.is_fully_defined() or tensor.dtype in (tf.string, tf.resource, tf.variant):
        return None
    if tensor.dtype.is_floating:
        noise = np.random.default_rng(0).normal(size=tensor.shape.as_list())  # its own generator: no global draw
        return tf.constant(noise, dtype=tensor.dtype)
    return tf.zeros(tensor.shape, dtype=tensor.dtype)
