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

import sys

import numpy as np

from workbook.diagnosis_report import Finding, GradientReport, SourceStatus, user_frame, untraceable_finding

__all__ = ["find_gradient_breaks", "GradientReport", "Finding"]

# What reaches a tensor walking back from the output: the gradient itself (ALIVE); a gradient
# if the breaks after it were fixed (SHADOW); or nothing, because it only selects (SELECTOR).
ALIVE, SHADOW, SELECTOR = 3, 2, 1

# Ops whose output depends on the shape of an input, never on its values.
SHAPE_ONLY_OPS = {"Shape", "ShapeN", "Size", "Rank", "ZerosLike", "OnesLike", "BroadcastArgs", "TensorListLength"}
STOP_OPS = {"StopGradient", "PreventGradient"}


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
        report = _analyse(call, arguments, inputs, variables, layer_of)
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
    import tensorflow as tf

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
            tape.watch(_tf_variable(variable))
        try:
            scalar = _sum_of_float_outputs(call(*arguments))
        except Exception:
            return {}
    if scalar is None:
        return {}
    sources = [tensor for _, tensor in inputs] + [_tf_variable(v) for v in variables]
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


def _tf_variable(variable):
    """The tf.Variable behind a Keras variable (a tf.Variable is returned as it is)."""
    import tensorflow as tf

    return variable if isinstance(variable, tf.Variable) else variable.value


def _sum_of_float_outputs(outputs):
    import tensorflow as tf

    floats = [
        tf.reduce_sum(tf.cast(t, tf.float32))
        for t in tf.nest.flatten(outputs)
        if isinstance(t, (tf.Tensor, tf.Variable)) and t.dtype.is_floating
    ]
    return tf.add_n(floats) if floats else None


def _trace(call, arguments):
    import tensorflow as tf

    specs = [tf.TensorSpec.from_tensor(tensor) for tensor in arguments]
    return tf.function(call, autograph=False).get_concrete_function(*specs)


def _analyse(call, arguments, inputs, variables, layer_of):
    """Trace, walk the graph backwards, and build the static part of the report."""
    import tensorflow as tf

    sources = [SourceStatus(key=("input", name), name=name, kind="input") for name, _ in inputs] + [
        SourceStatus(key=("variable", id(v)), name=v.path, kind="variable", layer=layer_of.get(id(v)))
        for v in variables
    ]
    try:
        concrete = _trace(call, arguments)
    except Exception as error:
        if not _is_tracing_limit(error):
            # A wrong example (shape, dtype) or a bug: the student needs TensorFlow's own message.
            raise ValueError(
                f"Calling the target on the example failed, before any gradient could be followed: "
                f"{type(error).__name__}: {error}"
            ) from error
        finding = untraceable_finding(error, sys.exc_info()[2], [status.label for status in sources])
        for status in sources:
            status.static = "untraceable"
        return GradientReport(findings=[finding], notes=[], sources=sources)
    graph = concrete.graph
    source_tensors = _source_tensors(graph, arguments, inputs, variables)
    reach = _forward_reach(graph, source_tensors)
    sinks = [t for t in tf.nest.flatten(concrete.structured_outputs) if isinstance(t, tf.Tensor)]
    state, candidates = _backward_walk(graph, sinks, reach)

    output_reach = 0
    for tensor in sinks:
        output_reach |= reach.get(tensor.ref(), 0)
    dead_mask = hopeful_mask = 0  # no gradient now / a gradient once the non-deliberate breaks are fixed
    for bit, status in enumerate(sources):
        tensors = source_tensors.get(bit, [])
        best = max((state.get(t.ref(), 0) for t in tensors), default=0)
        if best >= SHADOW:
            hopeful_mask |= 1 << bit
        if status.kind == "input" and not _is_float(dict(inputs)[status.name]):
            status.static = "not a float"
        elif not output_reach & (1 << bit):
            status.static = "disconnected"
        elif best == ALIVE:
            status.static = "flowing"
        else:
            status.static = "cut"
        if status.static != "flowing":
            dead_mask |= 1 << bit

    findings, notes = [], []
    order = {op: i for i, op in enumerate(graph.get_operations())}
    for (op, reason), (blocked, level, deliberate) in sorted(candidates.items(), key=lambda item: order.get(item[0][0], 0)):
        # A deliberate block matters only for sources that no other path could ever reach.
        matters = dead_mask & ~hopeful_mask if deliberate else dead_mask
        cut = list(dict.fromkeys(sources[bit].owner for bit in range(len(sources)) if blocked & matters & (1 << bit)))
        finding = Finding.from_op(op, reason, user_frame(op.traceback), cuts=cut)
        (findings if cut and level >= SHADOW else notes).append(finding)
    for bit, status in enumerate(sources):
        if status.static == "disconnected":
            findings.append(Finding.disconnected(status, _output_frame(sinks)))
        elif status.static == "not a float":
            # An index or a mask among float inputs is normal; only integers is a mistake.
            alone = all(s.static == "not a float" for s in sources)
            (findings if alone else notes).append(Finding.not_float(status, dict(inputs)[status.name].dtype.name))
    return GradientReport(findings=findings, notes=notes, sources=sources)


def _is_tracing_limit(error):
    """Whether tracing failed because of what graphs cannot do (numpy, Python control flow on values)."""
    import tensorflow as tf

    if isinstance(error, tf.errors.OperatorNotAllowedInGraphError):
        return True
    text = f"{type(error).__name__}: {error}"
    return any(
        clue in text
        for clue in ("numpy", "NumPy", "__array__", "symbolic tf.Tensor", "symbolic Tensor", "SymbolicTensor", "as a Python `bool`")
    )


def _source_tensors(graph, arguments, inputs, variables):
    """Bit index -> the graph tensors that carry that source's value."""
    by_bit = {}
    position = {id(tensor): index for index, tensor in enumerate(arguments)}
    for bit, (_, tensor) in enumerate(inputs):
        placeholder = graph.inputs[position[id(tensor)]]
        if placeholder.dtype.is_floating:
            by_bit[bit] = [placeholder]
    handle_bit = {}
    for bit, variable in enumerate(variables, start=len(inputs)):
        handle_bit[id(_tf_variable(variable).handle)] = bit
    for external, internal in graph.captures:
        bit = handle_bit.get(id(external))
        if bit is None:
            continue
        for consumer in internal.consumers():
            if consumer.type == "ReadVariableOp":
                by_bit.setdefault(bit, []).extend(consumer.outputs)
    return by_bit


def _forward_reach(graph, source_tensors):
    """Tensor ref -> bitmask of the sources whose values reach it."""
    reach = {}
    for bit, tensors in source_tensors.items():
        for tensor in tensors:
            reach[tensor.ref()] = reach.get(tensor.ref(), 0) | (1 << bit)
    for op in graph.get_operations():
        if op.type in SHAPE_ONLY_OPS:
            continue
        mask = 0
        for tensor in op.inputs:
            mask |= reach.get(tensor.ref(), 0)
        if mask:
            for tensor in op.outputs:
                reach[tensor.ref()] = reach.get(tensor.ref(), 0) | mask
    return reach


def _is_float(tensor):
    return tensor.dtype.is_floating or tensor.dtype.is_complex


def _backward_walk(graph, sinks, reach):
    """Propagate gradient states from the sinks; return (state by tensor ref, candidates).

    ``candidates`` maps (op, reason) to (bitmask of the sources that reach the
    blocked inputs, the best state that arrived at the op). A blocked input is
    walked on as SHADOW so that breaks behind the first one are found too; an
    integer input that only selects among float values (the condition of
    ``where``, the indices of a gather) is walked on as SELECTOR.
    """
    import tensorflow as tf
    from tensorflow.python.framework import ops as tf_ops

    state, candidates = {}, {}
    for tensor in sinks:
        state[tensor.ref()] = ALIVE if _is_float(tensor) else SHADOW
    original_ops = set(graph.get_operations())

    def mark(tensor, value):
        if reach.get(tensor.ref(), 0):
            state[tensor.ref()] = max(state.get(tensor.ref(), 0), value)

    def block(op, reason, tensor, level, deliberate=False):
        sources, best, _ = candidates.get((op, reason), (0, 0, deliberate))
        candidates[(op, reason)] = (sources | reach.get(tensor.ref(), 0), max(best, level), deliberate)
        # Behind a deliberate block (stop_gradient, the forward half of a custom gradient)
        # no gradient is meant to arrive even once other breaks are fixed: walk on as SELECTOR.
        mark(tensor, SELECTOR if deliberate else min(level, SHADOW))

    with graph.as_default():
        for op in reversed(graph.get_operations()):
            carried = [t for t in op.outputs if state.get(t.ref())]
            if not carried or not op.inputs:
                continue
            level = max(state[t.ref()] for t in carried)
            inputs = [t for t in op.inputs if reach.get(t.ref(), 0) and t.dtype != tf.resource]
            if not inputs:
                continue
            if not any(_is_float(t) for t in carried):
                # Only integer, boolean or string values leave this op: no gradient can.
                for tensor in inputs:
                    if _is_float(tensor) and op.type not in SHAPE_ONLY_OPS:
                        block(op, "integer_output", tensor, level)
                    elif not _is_float(tensor):
                        mark(tensor, min(level, SHADOW))
                continue
            if op.type in STOP_OPS:
                for tensor in inputs:
                    block(op, "stop_gradient", tensor, level, deliberate=True)
                continue
            try:
                gradient_function = tf_ops.get_gradient_function(op)
            except LookupError:
                for tensor in inputs:
                    if _is_float(tensor):
                        block(op, "no_gradient_registered", tensor, level)
                continue
            gradients = _local_gradients(op, gradient_function, carried)
            selects = any(_is_float(t) for t in inputs)  # integer inputs then only pick among floats
            positions = {t.ref() for t in inputs}
            for index, tensor in enumerate(op.inputs):
                if tensor.ref() not in positions:
                    continue
                if not _is_float(tensor):
                    mark(tensor, SELECTOR if selects else min(level, SHADOW))
                elif gradients is None:  # the gradient function failed here: assume it passes
                    mark(tensor, level)
                elif index >= len(gradients) or gradients[index] is None:
                    # IdentityN with None is tf.custom_gradient's forward result: cut on purpose.
                    block(op, "no_gradient", tensor, level, deliberate=op.type == "IdentityN")
                elif not _depends_on(gradients[index], gradients.upstream, original_ops):
                    block(op, "zero_gradient", tensor, level)
                else:
                    mark(tensor, level)
    return state, candidates


class _Gradients(list):
    upstream = ()


def _local_gradients(op, gradient_function, carried):
    """Call the op's registered gradient with ones for the outputs that carry a gradient."""
    import tensorflow as tf

    if gradient_function is None:
        return _Gradients([None] * len(op.inputs))
    carried_refs = {t.ref() for t in carried}
    upstream, probes = [], []
    for tensor in op.outputs:
        if tensor.ref() in carried_refs and _is_float(tensor):
            # An op of its own (not a constant) so that the gradient's dependence on it can be traced.
            probes.append(tf.identity(tf.ones_like(tensor)))
            upstream.append(probes[-1])
        elif _is_float(tensor):
            upstream.append(tf.zeros_like(tensor))
        else:
            upstream.append(None)
    try:
        with tf.name_scope("workbook_gradient_probe"):
            result = gradient_function(op, *upstream)
    except Exception:
        return None
    if not isinstance(result, (list, tuple)):
        result = [result]
    gradients = _Gradients(result)
    gradients.upstream = tuple(probes)
    return gradients


def _depends_on(gradient, upstream, original_ops):
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


def _output_frame(sinks):
    """The user's line that made the output (looking through tf.function's Identity wrappers)."""
    for tensor in sinks:
        op = tensor.op
        while op.type == "Identity" and op.inputs:
            frame = user_frame(op.traceback)
            if frame[0]:
                return frame
            op = op.inputs[0].op
        frame = user_frame(op.traceback)
        if frame[0]:
            return frame
    return (None, None, None)


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
