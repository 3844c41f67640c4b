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

from workbook.diagnosis_report import HINTS, Finding, GradientReport
from workbook.finder_targets import all_layers, changed_attributes, prepare, restore_attributes, stateful_variables
from workbook.graph_walk import analyse, tf_variable
from workbook.layer_causes import explain_disconnected

__all__ = ["find_gradient_breaks", "GradientReport", "Finding"]


def find_gradient_breaks(target, example, loss=None):
    """Name the ops, and the lines of your code, that cut the gradient.

    Introduced in 03_finding_gradient_killers.ipynb.

    Parameters
    ----------
    target : callable, keras.layers.Layer or keras.Model
        A Python function on tensors (a ``tf.function`` too), a layer, or a model.
        For a model given ``example=(x, y)`` the output followed is the loss that
        ``fit`` differentiates: the one inside an overridden ``train_step``, else
        ``compute_loss`` (the compiled loss, or an override of it).
    example : array, tensor, or tuple of them
        An input to trace and to measure gradients on (a tuple means several
        positional arguments, or ``(x, y)`` / ``(x, y, sample_weight)`` for a model).
    loss : callable, optional
        ``loss(y, y_pred)`` to follow for a model that is not compiled with one.

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
    if loss is not None and not callable(loss):
        raise ValueError(f"loss={loss!r} is not callable; pass a function loss(y, y_pred), or leave it out.")
    call, inputs, variables, layer_of, description, arguments = prepare(target, example, loss)
    layers = all_layers(target)
    snapshot = [(v, np.array(v.numpy())) for v in stateful_variables(target)]
    attributes = [(layer, dict(vars(layer))) for layer in layers]
    try:
        traced, measured, failure = _trace_and_measure(call, arguments, inputs, variables)
        changed = changed_attributes(attributes)
        restore_attributes(attributes)
        report = analyse(call, arguments, inputs, variables, layer_of, traced=traced)
    finally:
        for variable, value in snapshot:  # a training-mode call may move statistics; put them back
            variable.assign(value)
        restore_attributes(attributes)  # a layer that stored a traced tensor on self would break later
    report.description = description
    for status in report.sources:
        status.measured = measured.get(status.key, "not measured")
    _settle_unchecked(report, failure)
    explain_disconnected(report, layers, changed)
    report.disagreements = [_disagreement(s) for s in report.sources if _disagree(s.static, s.measured)]
    if isinstance(target, keras.Model):
        report.layers_without_gradient = _dead_layers(report.sources)
    return report


def _trace_and_measure(call, arguments, inputs, variables):
    """Trace the target with its gradients in one graph, run it once, and measure what arrives.

    Returns ``((concrete function, output tensors), verdicts, None)``; the graph is the
    one the walk then reads, so the target is traced only once. Code that cannot be
    traced with its gradients (numpy, Python ``if`` on a value, a gradient function that
    raises) returns ``(None, verdicts, error)`` measured eagerly instead.
    """
    import tensorflow as tf

    position = {id(tensor): index for index, tensor in enumerate(arguments)}
    float_inputs = [
        (key, position[id(tensor)])
        for key, (_, tensor) in zip(_source_keys(inputs, []), inputs)
        if tensor.dtype.is_floating
    ]
    keys = [key for key, _ in float_inputs] + [("variable", id(v)) for v in variables]

    def outputs_and_flags(*args):
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch([args[index] for _, index in float_inputs])
            tape.watch([tf_variable(v) for v in variables])
            outputs = call(*args)
            scalar = _sum_of_float_outputs(outputs)
        if scalar is None:
            return {"outputs": outputs, "flags": None}
        sources = [args[index] for _, index in float_inputs] + [tf_variable(v) for v in variables]
        gradients = tape.gradient(scalar, sources, unconnected_gradients=tf.UnconnectedGradients.NONE)
        flags = [None if g is None else tf.reduce_any(tf.convert_to_tensor(g) != 0) for g in gradients]
        return {"outputs": outputs, "flags": flags}

    try:
        specs = [tf.TensorSpec.from_tensor(tensor) for tensor in arguments]
        concrete = tf.function(outputs_and_flags, autograph=False).get_concrete_function(*specs)
        flags = _run_once(concrete, arguments)["flags"]
    except Exception:
        return (None, *_measure_eagerly(call, arguments, inputs, variables))
    traced = (concrete, concrete.structured_outputs["outputs"])
    if flags is None:
        return traced, {}, None
    verdicts = {
        key: "none" if flag is None else ("flowing" if bool(flag) else "zero") for key, flag in zip(keys, flags)
    }
    return traced, verdicts, None


#: Grappler passes switched off for the one run of the measurement: optimizing a graph that runs
#: once costs more than it saves. Constant folding stays on (it folds away the integer shape
#: arithmetic, which would otherwise run on oneDNN kernels that log a notice on some CPUs).
SKIPPED_GRAPPLER_PASSES = (
    "layout_optimizer",
    "remapping",
    "arithmetic_optimization",
    "dependency_optimization",
    "loop_optimization",
    "function_optimization",
    "debug_stripper",
    "implementation_selector",
)  # each one on by default


def _run_once(concrete, arguments):
    """Run a concrete function once with the costly Grappler passes off, then put the options back."""
    import tensorflow as tf

    options = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options({name: False for name in SKIPPED_GRAPPLER_PASSES})
    try:
        return concrete(*arguments)
    finally:
        tf.config.optimizer.set_experimental_options(
            {name: options.get(name, True) for name in SKIPPED_GRAPPLER_PASSES}
        )


def _measure_eagerly(call, arguments, inputs, variables):
    """Per source key 'none', 'zero', 'flowing' or 'error', from a GradientTape run eagerly; and the error."""
    import tensorflow as tf

    failure = None
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        for _, tensor in inputs:
            if tensor.dtype.is_floating:
                tape.watch(tensor)
        for variable in variables:
            tape.watch(tf_variable(variable))
        try:
            scalar = _sum_of_float_outputs(call(*arguments))
        except Exception as error:
            failure = _first_line(error)
    if failure is not None:
        try:
            call(*arguments)
        except Exception:
            return {}, None  # it fails without a tape too: tracing reports why
        # It runs, but not under a GradientTape: building the gradient of a tf.function failed.
        return {key: "error" for key in _source_keys(inputs, variables)}, failure
    if scalar is None:
        return {}, None
    sources = [tensor for _, tensor in inputs] + [tf_variable(v) for v in variables]
    try:
        gradients = tape.gradient(scalar, sources, unconnected_gradients=tf.UnconnectedGradients.NONE)
    except Exception as error:  # LookupError for an op with no gradient; any error from a gradient function
        failure = _first_line(error)
        return {key: "error" for key in _source_keys(inputs, variables)}, failure
    verdicts = {}
    for key, gradient in zip(_source_keys(inputs, variables), gradients):
        if gradient is None:
            verdicts[key] = "none"
        else:
            gradient = tf.convert_to_tensor(gradient)
            verdicts[key] = "flowing" if bool(tf.reduce_any(gradient != 0)) else "zero"
    return verdicts, None


def _first_line(error):
    return f"{type(error).__name__}: {error}".splitlines()[0][:300]


def _settle_unchecked(report, failure):
    """Decide the breaks whose gradient function failed, with the GradientTape's measurement.

    A break that the tape passed (every source it blocks measured flowing) was only a
    limit of the probe: a note. Otherwise it is a finding, "could not check", never "ok".
    A source the graph calls flowing but the tape measured None or failed on gets a finding too.
    """
    covered = set()
    for finding in getattr(report, "unchecked", []):
        blocked = [s for bit, s in enumerate(report.sources) if finding.bits & (1 << bit)]
        bad = [s for s in blocked if s.measured != "flowing"]
        if bad:
            finding.cuts = list(dict.fromkeys(s.owner for s in bad))
            report.findings.append(finding)
            covered.update(id(s) for s in bad)
        else:
            report.notes.append(finding)
    for status in report.sources:
        if status.static == "flowing" and status.measured in ("none", "error") and id(status) not in covered:
            reason = "gradient_error" if status.measured == "error" else "measured_none"
            detail = (
                f"tf.GradientTape raised {failure}" if status.measured == "error" else "tf.GradientTape returned None"
            )
            report.findings.append(
                Finding(
                    "(tape)",
                    status.name,
                    reason,
                    None,
                    None,
                    None,
                    HINTS[reason],
                    f"{status.label}: {detail}",
                    [status.owner],
                    order=10**9,
                )
            )
    report.findings.sort(key=lambda finding: finding.order)


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
