"""The graph half of :func:`workbook.find_gradient_breaks`: trace, then walk backwards.

Introduced in 03_finding_gradient_killers.ipynb. The walk starts at the output
and asks TensorFlow's own registered gradient function of every op which of its
inputs receive a gradient; an input that does not is a candidate break.
"""

import sys

from workbook.diagnosis_report import Finding, GradientReport, SourceStatus, untraceable_finding, user_frame

# What reaches a tensor walking back from the output: the gradient itself (ALIVE); a gradient
# if the breaks after it were fixed (SHADOW); or nothing, because it only selects (SELECTOR).
ALIVE, SHADOW, SELECTOR = 3, 2, 1

# Ops whose output depends on the shape of an input, never on its values.
SHAPE_ONLY_OPS = {"Shape", "ShapeN", "Size", "Rank", "ZerosLike", "OnesLike", "BroadcastArgs", "TensorListLength"}
STOP_OPS = {"StopGradient", "PreventGradient"}


def tf_variable(variable):
    """The tf.Variable behind a Keras variable (a tf.Variable is returned as it is)."""
    import tensorflow as tf

    return variable if isinstance(variable, tf.Variable) else variable.value


def _trace(call, arguments):
    import tensorflow as tf

    specs = [tf.TensorSpec.from_tensor(tensor) for tensor in arguments]
    return tf.function(call, autograph=False).get_concrete_function(*specs)


def analyse(call, arguments, inputs, variables, layer_of):
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
        handle_bit[id(tf_variable(variable).handle)] = bit
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
