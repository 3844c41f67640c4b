"""Find the operation that kills a gradient, and the line of code that made it.

Introduced in 03_finding_gradient_killers.ipynb.

:func:`find_gradient_breaks` traces the computation into a TensorFlow graph and
walks it backwards from the output, asking TensorFlow's own gradient function
of every op which of its inputs receive a gradient. Where one does not, the op
is a candidate break; it is reported as a finding when some input or variable
loses its gradient because of it, and as a note otherwise (a comparison that
only feeds the condition of ``where``, a mask for ``boolean_mask``). The same
gradients are also measured numerically with a ``GradientTape`` on the example,
so the two views can be compared.
"""

import numpy as np

from workbook.diagnosis_report import Finding, GradientReport
from workbook.graph_walk import analyse, tf_variable

__all__ = ["find_gradient_breaks", "GradientReport", "Finding"]

def find_gradient_breaks(target, example):
    """Name the ops, and the lines of your code, that cut the gradient.

    Introduced in 03_finding_gradient_killers.ipynb.

    Parameters
    ----------
    target : callable, keras.layers.Layer or keras.Model
        A Python function on tensors, a layer, or a model. For a compiled model
        given ``example=(x, y)``, the output followed is the loss.
    example : array, tensor, or tuple of them
        An input to trace and to measure gradients on (a tuple means several
        positional arguments, or ``(x, y)`` for a compiled model).

    Returns
    -------
    GradientReport
        ``.findings`` (culprit first), ``.notes``, ``.sources`` (per input and
        trainable variable: the static verdict and the measured one), ``.ok``.
        It prints as a table and renders as HTML in JupyterLab.
    """
    import keras

    if not callable(target):
        raise ValueError(
            f"target={target!r} is not something to trace; pass a Python function on tensors, "
            "a Keras layer, or a Keras model."
        )
    call, inputs, variables, layer_of, description, arguments = _prepare(target, example)
    snapshot = [(v, np.array(v.numpy())) for v in _stateful_variables(target)]
    try:
        measured = _measure(call, arguments, inputs, variables)
        report = analyse(call, arguments, inputs, variables, layer_of)
    finally:
        for variable, value in snapshot:  # a training-mode call may move statistics; put them back
            variable.assign(value)
    report.description = description
    for status in report.sources:
        status.measured = measured.get(status.key, "none")
    report.disagreements = [_disagreement(s) for s in report.sources if _disagree(s.static, s.measured)]
    if isinstance(target, keras.Model):
        report.layers_without_gradient = _dead_layers(report.sources)
    return report


def _prepare(target, example):
    """Return (call, inputs, trainable variables, layer name by variable id, description)."""
    import keras

    if isinstance(example, (tuple, list)):
        parts = [_as_tensor(part, f"example[{i}]") for i, part in enumerate(example)]
    else:
        parts = [_as_tensor(example, "example")]

    if isinstance(target, keras.Model) and target.compiled and len(parts) == 2 and target.loss is not None:
        x, y = parts

        def call(x, y):
            y_pred = target(x, training=True)
            return target.compute_loss(x=x, y=y, y_pred=y_pred, training=True)

        inputs, description = [x, y], f"the loss of model {target.name!r} on (x, y)"
        input_names = ["x", "y"]
    elif isinstance(target, keras.layers.Layer):
        if len(parts) != 1:
            raise ValueError(
                f"example holds {len(parts)} arrays; a layer or an uncompiled model takes one input "
                "(a compiled model takes (x, y), and its loss is followed)."
            )

        def call(x):
            return target(x, training=True)

        inputs, description = parts, f"the output of {type(target).__name__} {target.name!r}"
        input_names = ["inputs"]
    else:
        call = target
        inputs, description = parts, f"the output of {getattr(target, '__name__', repr(target))}"
        input_names = _argument_names(target, len(parts))

    if isinstance(target, keras.layers.Layer) and not target.built:
        call(*inputs)  # build the weights eagerly, outside the traced function
    variables, layer_of = [], {}
    if isinstance(target, keras.Model) and target.trainable_variables:
        # For a whole model what matters is its weights: an input that is cut
        # (a preprocessing step, the targets y) stops nothing from training.
        input_names = []
    if isinstance(target, keras.layers.Layer):
        for layer in getattr(target, "layers", None) or [target]:
            for variable in layer.trainable_variables:
                if id(variable) not in layer_of:
                    variables.append(variable)
                    layer_of[id(variable)] = layer.name
    return call, list(zip(input_names, inputs)), variables, layer_of, description, inputs


def _argument_names(function, count):
    """The names of a function's first ``count`` parameters (``argument 0``... if unknown)."""
    import inspect

    try:
        names = [p.name for p in inspect.signature(function).parameters.values()][:count]
    except (TypeError, ValueError):
        names = []
    return names + [f"argument {i}" for i in range(len(names), count)]


def _as_tensor(value, name):
    import tensorflow as tf

    try:
        return tf.convert_to_tensor(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be an array or tensor; got {type(value).__name__} ({error}).") from None


def _stateful_variables(target):
    import keras

    if not isinstance(target, keras.layers.Layer):
        return []
    return list(target.non_trainable_variables) + [v for metric in getattr(target, "metrics", []) for v in metric.variables]


def _measure(call, arguments, inputs, variables):
    """Per source key: 'none', 'zero' or 'flowing', measured with a GradientTape on the example."""
    import tensorflow as tf

    with tf.GradientTape(watch_accessed_variables=False) as tape:
        for _, tensor in inputs:
            if tensor.dtype.is_floating:
                tape.watch(tensor)
        for variable in variables:
            tape.watch(tf_variable(variable))
        try:
            scalar = _sum_of_float_outputs(call(*arguments))
        except Exception:
            return {}
    if scalar is None:
        return {}
    sources = [tensor for _, tensor in inputs] + [tf_variable(v) for v in variables]
    try:
        gradients = tape.gradient(scalar, sources, unconnected_gradients=tf.UnconnectedGradients.NONE)
    except LookupError:  # an op with no registered gradient: tape.gradient itself fails
        return {key: "error" for key in _source_keys(inputs, variables)}
    verdicts = {}
    for key, gradient in zip(_source_keys(inputs, variables), gradients):
        if gradient is None:
            verdicts[key] = "none"
        else:
            gradient = tf.convert_to_tensor(gradient)
            verdicts[key] = "flowing" if bool(tf.reduce_any(gradient != 0)) else "zero"
    return verdicts


def _source_keys(inputs, variables):
    return [("input", name) for name, _ in inputs] + [("variable", id(v)) for v in variables]


def _sum_of_float_outputs(outputs):
    import tensorflow as tf

    floats = [
        tf.reduce_sum(tf.cast(t, tf.float32))
        for t in tf.nest.flatten(outputs)
        if isinstance(t, (tf.Tensor, tf.Variable)) and t.dtype.is_floating
    ]
    return tf.add_n(floats) if floats else None


def _disagree(static, measured):
    if static == "untraceable":
        return False
    return (static == "flowing") != (measured == "flowing")


def _disagreement(status):
    if status.static == "flowing" and status.measured == "zero":
        return (
            f"{status.label}: the graph passes a gradient, but on this example it is all zero "
            "(every value on the way is 0, or every ReLU is off, e.g. after a cast that sends everything to 0)"
        )
    return f"{status.label}: the graph says {status.static}, the GradientTape measured {status.measured}"


def _dead_layers(sources):
    layers = {}
    for status in sources:
        if status.kind == "variable" and status.layer:
            layers.setdefault(status.layer, []).append(status)
    return [name for name, statuses in layers.items() if all(s.static != "flowing" for s in statuses)]
