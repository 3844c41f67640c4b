"""The graph half of :func:`workbook.find_gradient_breaks`: trace, then walk backwards.

Introduced in 03_finding_gradient_killers.ipynb. The walk starts at the output
and asks TensorFlow's own registered gradient function of every op which of its
inputs receive a gradient; an input that does not is a candidate break. The
bodies of ``tf.function`` calls, ``while`` loops (``tf.while_loop``, ``map_fn``,
Keras RNN layers) and ``tf.cond``/``tf.switch_case`` branches are walked too, so
a culprit inside one is named with its own line.
"""

import sys

from workbook.diagnosis_report import Finding, GradientReport, SourceStatus, untraceable_finding, user_frame
from workbook.graph_program import Program, custom_gradient_type

# What reaches a tensor walking back from the output: the gradient itself (ALIVE); a gradient
# if the breaks after it were fixed (SHADOW); or nothing, because it only selects (SELECTOR).
ALIVE, SHADOW, SELECTOR = 3, 2, 1

# Ops whose output depends on the shape of an input, never on its values.
SHAPE_ONLY_OPS = {
    "Shape",
    "ShapeN",
    "Size",
    "Rank",
    "ZerosLike",
    "OnesLike",
    "BroadcastArgs",
    "TensorListLength",
    "TensorListElementShape",
    "VariableShape",
}
STOP_OPS = {"StopGradient", "PreventGradient"}
ASSIGN_OPS = {"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"}


def tf_variable(variable):
    """The tf.Variable behind a Keras variable (a tf.Variable is returned as it is)."""
    import tensorflow as tf

    return variable if isinstance(variable, tf.Variable) else variable.value


def _trace(call, arguments):
    import tensorflow as tf

    specs = [tf.TensorSpec.from_tensor(tensor) for tensor in arguments]
    concrete = tf.function(call, autograph=False).get_concrete_function(*specs)
    return concrete, concrete.structured_outputs


def analyse(call, arguments, inputs, variables, layer_of, traced=None):
    """Trace (unless ``traced`` gives the concrete function and its outputs), walk backwards, report."""
    import tensorflow as tf

    sources = [SourceStatus(key=("input", name), name=name, kind="input") for name, _ in inputs] + [
        SourceStatus(key=("variable", id(v)), name=v.path, kind="variable", layer=layer_of.get(id(v)))
        for v in variables
    ]
    try:
        concrete, outputs = traced or _trace(call, arguments)
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
    program = Program(graph)
    source_tensors = _source_tensors(graph, arguments, inputs, variables)
    reach = _forward_reach(program, source_tensors)
    sinks = [t for t in tf.nest.flatten(outputs) if isinstance(t, tf.Tensor)]
    state, candidates = _backward_walk(program, sinks, reach)

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
    findings, notes, unchecked = _findings(program, sources, candidates, dead_mask, hopeful_mask)
    for bit, status in enumerate(sources):
        if status.static == "disconnected":
            assign = _assign_frame(program, reach, bit)
            if assign is not None:
                findings.append(Finding.disconnected(status, assign, cause="assign"))
            else:
                use = _first_use_frame(program, reach, bit)
                findings.append(
                    Finding.disconnected(
                        status,
                        use or _output_frame(sinks),
                        detail=use
                        and f"the output does not depend on {status.label}: it is used on this line, "
                        "but nothing computed from it reaches the output",
                    )
                )
        elif status.static == "not a float":
            # An index or a mask among float inputs is normal; only integers is a mistake.
            alone = all(s.static == "not a float" for s in sources)
            (findings if alone else notes).append(Finding.not_float(status, dict(inputs)[status.name].dtype.name))
    report = GradientReport(findings=findings, notes=notes, sources=sources)
    report.unchecked = unchecked
    return report


def _findings(program, sources, candidates, dead_mask, hopeful_mask):
    """Sort the candidate breaks into findings, notes and breaks whose gradient could not be checked."""
    findings, notes, unchecked, covered = [], [], [], 0
    ranked = sorted(candidates.items(), key=lambda item: program.order.get(item[0][0], 0))

    def owners(mask):
        return list(dict.fromkeys(sources[bit].owner for bit in range(len(sources)) if mask & (1 << bit)))

    for (op, reason), (blocked, level, deliberate, message) in ranked:
        # A deliberate block matters only for sources that no other path could ever reach.
        matters = blocked & (dead_mask & ~hopeful_mask if deliberate else dead_mask)
        finding = Finding.from_op(
            op, reason, user_frame(op.traceback), cuts=owners(matters), message=message, order=program.order.get(op, 0)
        )
        if reason == "gradient_error":
            finding.cuts, finding.bits = owners(blocked), blocked
            unchecked.append(finding)
        elif matters and level >= SHADOW:
            covered |= matters
            findings.append(finding)
        else:
            notes.append(finding)
    # A source whose only way to the output is through an index (a gather's indices, a
    # one_hot's position) is cut as surely as by a cast: name the op that made the index.
    for bit in range(len(sources)):
        if not dead_mask & (1 << bit) or covered & (1 << bit) or sources[bit].static != "cut":
            continue
        blocking = [(key, value) for key, value in ranked if value[0] & (1 << bit) and key[1] != "gradient_error"]
        if not blocking:
            continue
        (op, reason), (blocked, _, _, message) = min(
            blocking, key=lambda item: (item[0][1] != "integer_output", program.order.get(item[0][0], 0))
        )
        matters = blocked & dead_mask & ~covered
        covered |= matters
        finding = Finding.from_op(
            op, reason, user_frame(op.traceback), cuts=owners(matters), message=message, order=program.order.get(op, 0)
        )
        finding.detail += "; only an index made from it reaches the output, and an index carries no gradient"
        notes[:] = [note for note in notes if note.op_name != op.name]
        findings.append(finding)
    findings.sort(key=lambda finding: finding.order)
    return findings, notes, unchecked


def _assign_frame(program, reach, bit):
    """The user's line that writes a source's value into a variable (state has no gradient), if any."""
    for op in program.ops:
        if op.type in ASSIGN_OPS and any(reach.get(t.ref(), 0) & (1 << bit) for t in op.inputs[1:]):
            frame = user_frame(op.traceback)
            if frame[0]:
                return frame
    return None


def _first_use_frame(program, reach, bit):
    """The user's line of the first op that uses a source, if any (for a source the output ignores)."""
    for op in program.ops:
        if any(reach.get(t.ref(), 0) & (1 << bit) for t in op.inputs):
            frame = user_frame(op.traceback)
            if frame[0]:
                return frame
    return None


def _is_tracing_limit(error):
    """Whether tracing failed because of what graphs cannot do (numpy, Python control flow on values)."""
    import tensorflow as tf

    if isinstance(error, tf.errors.OperatorNotAllowedInGraphError):
        return True
    text = f"{type(error).__name__}: {error}"
    return any(
        clue in text
        for clue in (
            "numpy",
            "NumPy",
            "__array__",
            "symbolic tf.Tensor",
            "symbolic Tensor",
            "SymbolicTensor",
            "as a Python `bool`",
        )
    )


def _source_tensors(graph, arguments, inputs, variables):
    """Bit index -> the graph tensors that carry that source (a placeholder, a variable's handle)."""
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
        if bit is not None:
            by_bit.setdefault(bit, []).append(internal)
    return by_bit


def _forward_reach(program, source_tensors):
    """Tensor ref -> bitmask of the sources whose values reach it."""
    reach = {}

    def add(tensor, mask):
        stack = [tensor]
        while stack:
            tensor = stack.pop()
            old = reach.get(tensor.ref(), 0)
            if old | mask != old:
                reach[tensor.ref()] = old | mask
                stack.extend(program.forward.get(tensor.ref(), ()))

    for bit, tensors in source_tensors.items():
        for tensor in tensors:
            add(tensor, 1 << bit)
    changed = True
    while changed:  # a loop body feeds itself: repeat until nothing new arrives
        changed = False
        for op in program.ops:
            if op.type in SHAPE_ONLY_OPS or op in program.entered:
                continue
            mask = 0
            for tensor in op.inputs:
                mask |= reach.get(tensor.ref(), 0)
            if mask:
                for tensor in op.outputs:
                    if mask & ~reach.get(tensor.ref(), 0):
                        add(tensor, mask)
                        changed = True
    return reach


def _is_float(tensor):
    return tensor.dtype.is_floating or tensor.dtype.is_complex


def _is_carrier(tensor):
    """Float values carry a gradient; so do handles to variables and lists of floats (variants)."""
    import tensorflow as tf

    return _is_float(tensor) or tensor.dtype in (tf.resource, tf.variant)


def _is_handle(tensor):
    import tensorflow as tf

    return tensor.dtype in (tf.resource, tf.variant)


def _backward_walk(program, sinks, reach):
    """Propagate gradient states from the sinks; return (state by tensor ref, candidates).

    ``candidates`` maps (op, reason) to [bitmask of the sources that reach the
    blocked inputs, the best state that arrived at the op, whether the block is
    deliberate, TensorFlow's message]. A blocked input is walked on as SHADOW so
    that breaks behind the first one are found too; an integer input that only
    selects among float values (the condition of ``where``, the indices of a
    gather) is walked on as SELECTOR. Loops are walked until nothing changes.
    """
    from tensorflow.python.framework import ops as tf_ops

    state, candidates, patterns = {}, {}, {}
    changes = [0]
    original_ops = set(program.ops)

    def mark(tensor, value, force=False):
        stack = [tensor]
        while stack:
            tensor = stack.pop()
            if (not force and not reach.get(tensor.ref(), 0)) or state.get(tensor.ref(), 0) >= value:
                continue
            state[tensor.ref()] = value
            changes[0] += 1
            stack.extend(program.backward.get(tensor.ref(), ()))
            force = False

    def block(op, reason, tensor, level, deliberate=False, message=""):
        old = candidates.get((op, reason), [0, 0, deliberate, message])
        new = [old[0] | reach.get(tensor.ref(), 0), max(old[1], level), deliberate, old[3] or message]
        if new != old:
            candidates[(op, reason)] = new
            changes[0] += 1
        # Behind a deliberate block (stop_gradient, the forward half of a custom gradient)
        # no gradient is meant to arrive even once other breaks are fixed: walk on as SELECTOR.
        mark(tensor, SELECTOR if deliberate else min(level, SHADOW))

    def visit(op):
        carried = [t for t in op.outputs if state.get(t.ref())]
        if not carried or not op.inputs:
            return
        level = max(state[t.ref()] for t in carried)
        inputs = [t for t in op.inputs if reach.get(t.ref(), 0)]
        if not inputs:
            return
        selects = any(_is_carrier(t) for t in inputs)  # integer inputs then only pick among floats
        if not any(_is_carrier(t) for t in carried):
            # Only integer, boolean or string values leave this op: no gradient can.
            for tensor in inputs:
                if _is_float(tensor) and op.type not in SHAPE_ONLY_OPS:
                    block(op, "integer_output", tensor, level)
                else:
                    mark(tensor, min(level, SHADOW))
            return
        if op.type in STOP_OPS:
            for tensor in inputs:
                block(op, "stop_gradient", tensor, level, deliberate=True)
            return
        if any(_is_handle(t) for t in carried) or any(t.dtype.name == "variant" for t in op.inputs):
            # A list of tensors (map_fn, a loop's TensorArray) or a handle passes its values on.
            for tensor in inputs:
                mark(tensor, level if _is_carrier(tensor) else SELECTOR)
            return
        try:
            gradient_function = tf_ops.get_gradient_function(op)
        except LookupError as error:
            reason = "gradient_error" if custom_gradient_type(op) else "no_gradient_registered"
            for tensor in inputs:
                if _is_carrier(tensor):
                    block(op, reason, tensor, level, message=f"LookupError: {error}")
                    if reason == "gradient_error":
                        mark(tensor, level)
            return
        carried_indices = tuple(index for index, t in enumerate(op.outputs) if state.get(t.ref()))
        key = _signature(op, carried_indices)
        if key not in patterns:
            patterns[key] = _gradient_pattern(op, gradient_function, carried, original_ops)
        pattern = patterns[key]
        positions = {t.ref() for t in inputs}
        for index, tensor in enumerate(op.inputs):
            if tensor.ref() not in positions:
                continue
            if not _is_carrier(tensor):
                mark(tensor, SELECTOR if selects else min(level, SHADOW))
            elif isinstance(pattern, Exception):
                # TensorFlow's own gradient failed here: say so, and walk on as if it passed.
                block(op, "gradient_error", tensor, level, message=f"{type(pattern).__name__}: {pattern}")
                mark(tensor, level)
            elif pattern[index] == "none":
                # IdentityN with None is tf.custom_gradient's forward result: cut on purpose.
                block(op, "no_gradient", tensor, level, deliberate=op.type == "IdentityN")
            elif pattern[index] == "zero":
                block(op, "zero_gradient", tensor, level)
            else:
                mark(tensor, level)

    for tensor in sinks:
        mark(tensor, ALIVE if _is_float(tensor) else SHADOW, force=True)
    for _ in range(100):
        before = changes[0]
        for op in reversed(program.ops):
            if op not in program.entered:
                visit(op)
        if changes[0] == before:
            break
    return state, candidates


#: Ops whose gradient is a function of their own: what it returns differs from one op to the next.
INSTANCE_GRADIENT_OPS = {"IdentityN", "PyFunc", "EagerPyFunc", "PartitionedCall", "StatefulPartitionedCall"}


def _signature(op, carried_indices):
    """What decides which inputs an op's gradient reaches: its type and dtypes, or the op itself.

    Gradient functions are registered per op type, so two ops of one type with the same
    dtypes and the same outputs carrying a gradient get the same answer; the walk asks
    TensorFlow once per signature (a ResNet has thousands of ops but a few dozen signatures).
    """
    if op.type in INSTANCE_GRADIENT_OPS or custom_gradient_type(op):
        return (op, carried_indices)
    dtypes = tuple(t.dtype for t in op.inputs), tuple(t.dtype for t in op.outputs)
    return (op.type, dtypes, carried_indices)


def _gradient_pattern(op, gradient_function, carried, original_ops):
    """Per input of ``op``: 'passes', 'none' or 'zero' (a constant); or the exception TensorFlow raised."""
    gradients = _local_gradients(op, gradient_function, carried)
    if isinstance(gradients, Exception):
        return gradients
    pattern = []
    for index in range(len(op.inputs)):
        if index >= len(gradients) or gradients[index] is None:
            pattern.append("none")
        elif not _depends_on(gradients[index], gradients.upstream, original_ops):
            pattern.append("zero")
        else:
            pattern.append("passes")
    return pattern


class _Gradients(list):
    upstream = ()


def _local_gradients(op, gradient_function, carried):
    """Call the op's registered gradient with ones for the outputs that carry a gradient.

    Returns the gradients, or the exception TensorFlow's gradient function raised.
    """
    import tensorflow as tf

    if gradient_function is None:
        return _Gradients([None] * len(op.inputs))
    carried_refs = {t.ref() for t in carried}
    upstream, probes = [], []
    with op.graph.as_default():
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
        except Exception as error:
            return error
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
