"""The graph half of :func:`workbook.find_gradient_breaks`: trace, then walk backwards.

Introduced in 03_finding_gradient_killers.ipynb. The walk starts at the output
and asks TensorFlow's own registered gradient function of every op which of its
inputs receive a gradient; an input that does not is a candidate break. The
bodies of ``tf.function`` calls, ``while`` loops (``tf.while_loop``, ``map_fn``,
Keras RNN layers) and ``tf.cond``/``tf.switch_case`` branches are walked too, so
a culprit inside one is named with its own line.
"""

import re
import traceback
from dataclasses import dataclass, field
from enum import IntEnum

from workbook.core import internals
from workbook.finder.frames import user_frame
from workbook.finder.gradient_probe import (
    RUN_TIME_GRADIENT_OPS,
    InputGradient,
    gradient_pattern,
    is_float,
    run_time_pattern,
    signature,
)
from workbook.finder.graph_program import Program, custom_gradient_type
from workbook.finder.hints import OP_HINTS, REASONS
from workbook.finder.layer_causes import made_by_layer
from workbook.finder.report import Finding, GradientReport, Rank, SourceStatus, Static, untraceable_finding


class Flow(IntEnum):
    """What reaches a tensor walking back from the output; a greater one wins over a smaller one."""

    NOTHING = 0
    SELECTOR = 1  # nothing: it only selects among values (the condition of where, a gather's indices)
    SHADOW = 2  # a gradient, once the breaks after it are fixed
    ALIVE = 3  # the gradient itself


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
#: Ops that run a whole tf.data pipeline and return its result: a dataset is no list of values that
#: a gradient follows (as map_fn's TensorArray is), so their own gradient function is asked.
DATASET_RESULT_OPS = {"ReduceDataset", "DatasetToSingleElement"}
#: Appended to the detail of an op with no gradient registered that the gradient reaches.
RAISES_DETAIL = (
    ": tape.gradient raises LookupError as soon as the gradient reaches it, so fit stops there "
    "and no input or weight gets a gradient, even where another path would pass one"
)
#: The detail of a tf.py_function whose Python function leaves TensorFlow.
PY_FUNCTION_DETAIL = (
    "the Python function inside tf.py_function computes with NumPy (.numpy(), np.*): the tape that "
    "runs it records no way back, so TensorFlow gives this input a scalar 0 in place of its gradient"
)


def tf_variable(variable):
    """The tf.Variable behind a Keras variable (a tf.Variable is returned as it is)."""
    import tensorflow as tf

    return variable if isinstance(variable, tf.Variable) else variable.value


@dataclass
class Traced:
    """A target traced once: its concrete function, and its output tensors in that function's graph."""

    function: object
    outputs: object


def trace(call, arguments):
    """Trace ``call`` on tensors shaped like ``arguments``."""
    import tensorflow as tf

    specs = [tf.TensorSpec.from_tensor(tensor) for tensor in arguments]
    concrete = tf.function(call, autograph=False).get_concrete_function(*specs)
    return Traced(concrete, concrete.structured_outputs)


@dataclass
class UncheckedBreak:
    """A break whose gradient function raised: whether it matters is settled by measuring ``blocked``."""

    finding: Finding
    blocked: list  # the SourceStatus of each source behind it


@dataclass
class Analysis:
    """What the graph says: the report so far, and the breaks it could not check."""

    report: GradientReport
    unchecked: list = field(default_factory=list)


def analyse(target, traced=None, layers=()):
    """Trace ``target`` (a :class:`~workbook.finder.targets.Target`) unless ``traced`` is given; walk back; report.

    ``layers`` are the Keras layers of the target: an op one of them made, with no line of
    yours, is named at the line of yours that made that layer.
    """
    import tensorflow as tf

    sources = _sources(target)
    try:
        traced = traced or trace(target.call, target.arguments)
    except Exception as error:
        return Analysis(_untraceable_report(error, sources))
    program = Program(traced.function.graph, layers)
    source_tensors = _source_tensors(traced.function.graph, target)
    reach = Reach(program, source_tensors)
    sinks = [t for t in tf.nest.flatten(traced.outputs) if isinstance(t, tf.Tensor)]
    walk = BackwardWalk(program, reach).run(sinks)
    hopeful = _judge_sources(sources, dict(target.inputs), source_tensors, walk.state, reach.of_all(sinks))
    findings, notes, unchecked = _findings(program, sources, walk.breaks, hopeful)
    if any(finding.rank == Rank.RAISES for finding in findings):
        cut_all(sources)
    _add_source_findings(target, sources, (program, reach, sinks), findings, notes)
    return Analysis(GradientReport(findings=findings, notes=notes, sources=sources), unchecked)


def cut_all(sources):
    """Call every source the graph passes cut: tape.gradient raises, so none gets a gradient, whatever its path."""
    for status in sources:
        if status.static == Static.FLOWING:
            status.static = Static.CUT


def _add_source_findings(target, sources, walked, findings, notes):
    """A finding for each disconnected source, and for each input that is not a float."""
    for index, status in enumerate(sources):
        if status.static == Static.DISCONNECTED:
            findings.append(_disconnected_finding(*walked, index, status))
        elif status.static == Static.NOT_A_FLOAT:
            # An index or a mask among float inputs is normal; only integers is a mistake.
            alone = all(s.static == Static.NOT_A_FLOAT for s in sources)
            dtype = dict(target.inputs)[status.name].dtype.name
            (findings if alone else notes).append(Finding.not_float(status, dtype))


def _sources(target):
    """A SourceStatus for each input and trainable variable of ``target``, inputs first."""
    inputs = [SourceStatus(key=("input", name), name=name, kind="input") for name, _ in target.inputs]
    return inputs + [
        SourceStatus(key=("variable", id(v)), name=v.path, kind="variable", layer=target.layer_of.get(id(v)))
        for v in target.variables
    ]


def _untraceable_report(error, sources):
    """The report for a target that could not be traced; an error that is not a limit of graphs is raised."""
    unregistered = UNREGISTERED.search(str(error))
    if isinstance(error, LookupError) and unregistered:
        return _unregistered_report(error, unregistered.group(1), sources)
    if not _is_tracing_limit(error):
        # A wrong example (shape, dtype) or a bug: the student needs TensorFlow's own message.
        raise ValueError(
            f"Calling the target on the example failed, before any gradient could be followed: "
            f"{type(error).__name__}: {error}"
        ) from error
    finding = untraceable_finding(error, error.__traceback__, [status.label for status in sources])
    for status in sources:
        status.static = Static.UNTRACEABLE
    return GradientReport(findings=[finding], notes=[], sources=sources)


#: TensorFlow's words when a tape.gradient of your own code meets an op with no gradient function.
UNREGISTERED = re.compile(
    r"(?:gradient registry has no entry for|No gradient defined for operation.*op type):?\s*(\w+)"
)


def _unregistered_report(error, op_type, sources):
    """The report for your own tape.gradient raising LookupError: that error, at its line, is the finding."""
    file, line, code = user_frame(traceback.extract_tb(error.__traceback__))
    message = f"{type(error).__name__}: {error}".splitlines()[0][:300]
    finding = Finding(
        op_type=op_type,
        op_name="(your tape.gradient)",
        reason="no_gradient_registered",
        file=file,
        line=line,
        code=code,
        hint=OP_HINTS.get(op_type, REASONS["no_gradient_registered"].hint),
        detail=f"your code's tape.gradient raised {message}: no gradient function is registered for {op_type}",
        cuts=[status.owner for status in sources],
    )
    for status in sources:
        status.static = Static.CUT
    return GradientReport(findings=[finding], notes=[], sources=sources)


def _judge_sources(sources, inputs, source_tensors, state, output_sources):
    """Set each source's static verdict; return the indices of those a gradient would reach once fixed."""
    hopeful = set()
    for index, status in enumerate(sources):
        best = max((state.get(t.ref(), Flow.NOTHING) for t in source_tensors.get(index, [])), default=Flow.NOTHING)
        if best >= Flow.SHADOW:
            hopeful.add(index)
        if status.kind == "input" and not is_float(inputs[status.name]):
            status.static = Static.NOT_A_FLOAT
        elif index not in output_sources:
            status.static = Static.DISCONNECTED
        elif best == Flow.ALIVE:
            status.static = Static.FLOWING
        else:
            status.static = Static.CUT
    return hopeful


def _disconnected_finding(program, reach, sinks, index, status):
    """The finding for a source the output does not depend on, at the line that uses it last."""
    condition = _branch_condition(program, reach, index)
    if condition is not None:
        return _finding(program, Break(condition, "branch_condition", frozenset([index]), Flow.SHADOW), [status.owner])
    assign = _assign_frame(program, reach, index)
    if assign is not None:
        return Finding.disconnected(status, assign, cause="assign")
    use = _first_use_frame(program, reach, index)
    return Finding.disconnected(
        status,
        use or _output_frame(sinks),
        detail=use
        and f"the output does not depend on {status.label}: it is used on this line, "
        "but nothing computed from it reaches the output",
    )


def _findings(program, sources, breaks, hopeful):
    """Sort the candidate breaks into findings, notes and :class:`UncheckedBreak` s."""
    dead = {index for index, status in enumerate(sources) if status.static != Static.FLOWING}
    ranked = sorted(breaks.values(), key=lambda brk: program.order.get(brk.op, 0))
    owners = _owners_of(sources)
    findings, notes, unchecked, covered = _sort_breaks(program, sources, ranked, dead, hopeful, owners)
    # A source whose only way to the output is through an index (a gather's indices, a
    # one_hot's position) is cut as surely as by a cast: name the op that made the index.
    for index in sorted(dead):
        brk = None if index in covered else _index_cut(program, sources, ranked, index)
        if brk is None:
            continue
        matters = brk.blocked & dead - covered
        covered |= matters
        finding = _finding(program, brk, owners(matters))
        finding.detail += "; only an index made from it reaches the output, and an index carries no gradient"
        notes[:] = [note for note in notes if note.op_name != brk.op.name]
        findings.append(finding)
    findings.sort(key=Finding.sort_key)
    return findings, notes, unchecked


def _owners_of(sources):
    """A function from source indices to their owners' names, each once, in source order."""

    def owners(indices):
        return list(dict.fromkeys(sources[index].owner for index in sorted(indices)))

    return owners


def _sort_breaks(program, sources, ranked, dead, hopeful, owners):
    """Each break, in program order, as a finding (it cuts a dead source), a note, or unchecked."""
    findings, notes, unchecked, covered = [], [], [], set()
    connected = {index for index, status in enumerate(sources) if status.static in (Static.FLOWING, Static.CUT)}
    for brk in ranked:
        # A deliberate block matters only for sources that no other path could ever reach.
        matters = brk.blocked & (dead - hopeful if brk.deliberate else dead)
        finding = _finding(program, brk, owners(matters))
        if brk.reason == "gradient_error":
            finding.cuts = owners(brk.blocked)
            unchecked.append(UncheckedBreak(finding, [sources[index] for index in sorted(brk.blocked)]))
        elif _raises(brk):
            # No other path helps: the whole tape.gradient raises, for every source.
            finding.cuts, finding.rank = owners(connected), Rank.RAISES
            finding.detail += RAISES_DETAIL
            covered |= brk.blocked & dead
            findings.append(finding)
        elif matters and brk.level >= Flow.SHADOW:
            covered |= matters
            findings.append(finding)
        else:
            notes.append(finding)
    return findings, notes, unchecked, covered


def _raises(brk):
    """Whether ``brk`` makes tape.gradient raise: no gradient is registered, and the gradient itself reaches it.

    Behind another break (a round before it) only a shadow arrives: TensorFlow then never asks for its gradient.
    """
    return brk.reason == "no_gradient_registered" and brk.level == Flow.ALIVE


def _index_cut(program, sources, ranked, index):
    """The break that cuts source ``index`` by making an index of it, or None: an integer output first."""
    if sources[index].static != Static.CUT:
        return None
    blocking = [brk for brk in ranked if index in brk.blocked and brk.reason != "gradient_error"]
    if not blocking:
        return None
    # A test that only decides a where (keras.ops.argmax's guard against -0.0) is not the cut.
    blocking = [brk for brk in blocking if not _only_decides_where(brk.op)] or blocking
    return min(blocking, key=lambda brk: (brk.reason != "integer_output", program.order.get(brk.op, 0)))


LOGICAL_OPS = {"LogicalAnd", "LogicalOr", "LogicalNot", "BitwiseAnd", "Less", "Equal"}
SELECT_OPS = {"Select", "SelectV2"}


def _only_decides_where(op):
    """Whether ``op``'s value reaches nothing but the condition of a where (through logical ops)."""
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        for tensor in current.outputs:
            for consumer in tensor.consumers():
                if consumer.type in SELECT_OPS and consumer.inputs[0] is tensor:
                    continue
                if consumer.type not in LOGICAL_OPS:
                    return False
                if consumer not in seen:
                    seen.add(consumer)
                    stack.append(consumer)
    return any(tensor.consumers() for tensor in op.outputs)


def _finding(program, brk, cuts):
    frame, layer = user_frame(brk.op.traceback), None
    if frame[0] is None:  # made inside a layer that a model calls for you: the line that made the layer
        layer, frame = made_by_layer(brk.op.name, program.layers)
    finding = Finding.from_op(
        brk.op,
        brk.reason,
        frame,
        cuts=cuts,
        message=brk.message,
        order=program.order.get(brk.op, 0),
    )
    finding.detail = finding.detail or brk.message  # a reason with no detail of its own (untraceable)
    finding.layer = layer.name if layer is not None and frame[0] else None
    return finding


BRANCH_OPS = {"If", "StatelessIf", "Case", "StatelessCase"}


def _branch_condition(program, reach, index):
    """The op that makes the condition of an if / tf.cond from source ``index``, if that is all it feeds."""
    for op in program.ops:
        if op.type in BRANCH_OPS and op.inputs and reach.reaches(op.inputs[0], index):
            condition = op.inputs[0].op
            while condition.type in ("Identity", "Cast", "Squeeze", "Reshape") and condition.inputs:
                condition = condition.inputs[0].op
            return condition
    return None


def _assign_frame(program, reach, index):
    """The user's line that writes a source's value into a variable (state has no gradient), if any."""
    for op in program.ops:
        if op.type in ASSIGN_OPS and any(reach.reaches(t, index) for t in op.inputs[1:]):
            frame = user_frame(op.traceback)
            if frame[0]:
                return frame
    return None


def _first_use_frame(program, reach, index):
    """The user's line of the first op that uses a source, if any (for a source the output ignores)."""
    for op in program.ops:
        if any(reach.reaches(t, index) for t in op.inputs):
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


def _source_tensors(graph, target):
    """Source index -> the graph tensors that carry that source (a placeholder, a variable's handle)."""
    by_index = {}
    position = {id(tensor): index for index, tensor in enumerate(target.arguments)}
    for index, (_, tensor) in enumerate(target.inputs):
        placeholder = graph.inputs[position[id(tensor)]]
        if placeholder.dtype.is_floating:
            by_index[index] = [placeholder]
    handle_index = {}
    for index, variable in enumerate(target.variables, start=len(target.inputs)):
        handle_index[id(tf_variable(variable).handle)] = index
    for external, internal in graph.captures:
        index = handle_index.get(id(external))
        if index is not None:
            by_index.setdefault(index, []).append(internal)
    return by_index


class Reach:
    """Which sources' values reach each tensor of a program, walking forward from the sources.

    The set of sources that reach a tensor is kept as the bits of an int (bit ``i``:
    source ``i``): the walk unites these sets at every op until nothing changes, thousands
    of times for a ResNet, and an int does each union in one step. Outside this class a
    set of sources is a ``frozenset`` of their indices (:meth:`sources`).
    """

    def __init__(self, program, source_tensors):
        self._program = program
        self.bits = {}  # tensor ref -> the int; 0 or missing: no source reaches it
        for index, tensors in source_tensors.items():
            for tensor in tensors:
                self._add(tensor, 1 << index)
        while self._spread():  # a loop body feeds itself: repeat until nothing new arrives
            pass

    def reaches(self, tensor, index):
        """Whether source ``index`` reaches ``tensor``."""
        return bool(self.bits.get(tensor.ref(), 0) >> index & 1)

    def sources(self, tensor):
        """The indices of the sources that reach ``tensor``."""
        return _indices(self.bits.get(tensor.ref(), 0))

    def of_all(self, tensors):
        """The indices of the sources that reach any of ``tensors``."""
        bits = 0
        for tensor in tensors:
            bits |= self.bits.get(tensor.ref(), 0)
        return _indices(bits)

    def _add(self, tensor, bits):
        stack = [tensor]
        while stack:
            tensor = stack.pop()
            old = self.bits.get(tensor.ref(), 0)
            if old | bits != old:
                self.bits[tensor.ref()] = old | bits
                stack.extend(self._program.forward.get(tensor.ref(), ()))

    def _spread(self):
        """Carry the sources of each op's inputs to its outputs, once through the program; True if any moved."""
        changed = False
        for op in self._program.ops:
            if op.type in SHAPE_ONLY_OPS or op in self._program.entered:
                continue
            bits = 0
            for tensor in op.inputs:
                bits |= self.bits.get(tensor.ref(), 0)
            if bits:
                for tensor in op.outputs:
                    if bits & ~self.bits.get(tensor.ref(), 0):
                        self._add(tensor, bits)
                        changed = True
        return changed


def _indices(bits):
    return frozenset(index for index in range(bits.bit_length()) if bits >> index & 1)


def _is_carrier(tensor):
    """Float values carry a gradient; so do handles to variables and lists of floats (variants)."""
    import tensorflow as tf

    return is_float(tensor) or tensor.dtype in (tf.resource, tf.variant)


def _is_handle(tensor):
    import tensorflow as tf

    return tensor.dtype in (tf.resource, tf.variant)


@dataclass
class Break:
    """A candidate break: an op whose gradient does not reach some of its inputs, and why."""

    op: object
    reason: str
    blocked: frozenset  # the indices of the sources that reach the blocked inputs
    level: Flow  # the best that arrived at the op
    deliberate: bool = False  # stop_gradient, the forward half of a custom gradient
    message: str = ""  # TensorFlow's error, for a gradient function that raised


class BackwardWalk:
    """Propagate :class:`Flow` from the output back through a program, collecting the breaks.

    ``state`` maps a tensor ref to the best Flow that reached it; ``breaks`` maps
    (op, reason) to a :class:`Break`. A blocked input is walked on as SHADOW so that
    breaks behind the first one are found too; an integer input that only selects among
    float values (the condition of ``where``, the indices of a gather) is walked on as
    SELECTOR. Loops are walked until nothing changes.
    """

    MAX_ROUNDS = 100

    def __init__(self, program, reach):
        self.program, self.reach = program, reach
        self.state, self.breaks = {}, {}
        self._reached = reach.bits
        self._patterns = {}  # gradient_probe.signature -> GradientPattern
        self._original_ops = set(program.ops)
        self._changes = 0

    def run(self, sinks):
        for tensor in sinks:
            self.mark(tensor, Flow.ALIVE if is_float(tensor) else Flow.SHADOW, force=True)
        for _ in range(self.MAX_ROUNDS):
            before = self._changes
            for op in reversed(self.program.ops):
                if op not in self.program.entered:
                    self.visit(op)
            if self._changes == before:
                break
        return self

    def mark(self, tensor, flow, force=False):
        """Record that ``flow`` reaches ``tensor`` (a source reaches it, unless ``force``), and walk on back."""
        stack = [tensor]
        while stack:
            tensor = stack.pop()
            ref = tensor.ref()
            if (not force and not self._reached.get(ref, 0)) or self.state.get(ref, Flow.NOTHING) >= flow:
                continue
            self.state[ref] = flow
            self._changes += 1
            stack.extend(self.program.backward.get(ref, ()))
            force = False

    def block(self, op, reason, tensor, level, deliberate=False, message=""):
        """Record that ``op`` keeps the gradient from ``tensor``, and walk on behind it."""
        old = self.breaks.get((op, reason))
        blocked = self.reach.sources(tensor)
        if old is None:
            new = Break(op, reason, blocked, level, deliberate, message)
        else:
            new = Break(op, reason, old.blocked | blocked, max(old.level, level), deliberate, old.message or message)
        if new != old:
            self.breaks[(op, reason)] = new
            self._changes += 1
        # Behind a deliberate block (stop_gradient, the forward half of a custom gradient)
        # no gradient is meant to arrive even once other breaks are fixed: walk on as SELECTOR.
        self.mark(tensor, Flow.SELECTOR if deliberate else min(level, Flow.SHADOW))

    def visit(self, op):
        carried, inputs = self._carried_and_reached(op)
        if not inputs:
            return
        level = max(self.state[t.ref()] for t in carried)
        if not any(_is_carrier(t) for t in carried):
            self._visit_integer_outputs(op, inputs, level)
        elif op.type in STOP_OPS:
            for tensor in inputs:
                self.block(op, "stop_gradient", tensor, level, deliberate=True)
        elif _passes_values_on(op, carried):
            for tensor in inputs:
                self.mark(tensor, level if _is_carrier(tensor) else Flow.SELECTOR)
        else:
            self._visit_with_gradient_function(op, carried, inputs, level)

    def _carried_and_reached(self, op):
        """The outputs of ``op`` a gradient arrives at, and the inputs a source reaches (none if none arrives)."""
        carried = [t for t in op.outputs if self.state.get(t.ref())]
        inputs = [t for t in op.inputs if self._reached.get(t.ref(), 0)] if carried else []
        return carried, inputs

    def _visit_integer_outputs(self, op, inputs, level):
        """Only integer, boolean or string values leave this op: no gradient can."""
        for tensor in inputs:
            if is_float(tensor) and op.type not in SHAPE_ONLY_OPS:
                self.block(op, "integer_output", tensor, level)
            else:
                self.mark(tensor, min(level, Flow.SHADOW))

    def _visit_with_gradient_function(self, op, carried, inputs, level):
        """Ask TensorFlow's registered gradient function of ``op`` which inputs it reaches."""
        try:
            gradient_function = internals.gradient_function(op)
        except LookupError as error:
            self._visit_unregistered(op, inputs, level, f"LookupError: {error}")
            return
        pattern = self._pattern(op, gradient_function, carried)
        selects = any(_is_carrier(t) for t in inputs)  # integer inputs then only pick among floats
        for index, tensor in enumerate(op.inputs):
            if not self._reached.get(tensor.ref(), 0):
                continue
            if not _is_carrier(tensor):
                self.mark(tensor, Flow.SELECTOR if selects else min(level, Flow.SHADOW))
            elif pattern.error is not None:
                # TensorFlow's own gradient failed here: say so, and walk on as if it passed.
                error = pattern.error
                self.block(op, "gradient_error", tensor, level, message=f"{type(error).__name__}: {error}")
                self.mark(tensor, level)
            else:
                self._visit_input(op, tensor, pattern.inputs[index], level)

    def _visit_input(self, op, tensor, gradient, level):
        if gradient is InputGradient.NONE and op.type in RUN_TIME_GRADIENT_OPS:
            self.block(op, "untraceable", tensor, level, message=PY_FUNCTION_DETAIL)
        elif gradient is InputGradient.NONE:
            # IdentityN with None is tf.custom_gradient's forward result: cut on purpose.
            self.block(op, "no_gradient", tensor, level, deliberate=op.type == "IdentityN")
        elif gradient is InputGradient.ZERO:
            self.block(op, "zero_gradient", tensor, level)
        else:
            self.mark(tensor, level)

    def _visit_unregistered(self, op, inputs, level, message):
        """No gradient function to ask: none is registered, or a custom gradient's is gone."""
        reason = "gradient_error" if custom_gradient_type(op) else "no_gradient_registered"
        # Beside a float, an integer only says where to read it (a sparse tensor's indices).
        selects = any(_is_carrier(t) for t in inputs)
        for tensor in inputs:
            if _is_carrier(tensor):
                self.block(op, reason, tensor, level, message=message)
                if reason == "gradient_error":
                    self.mark(tensor, level)
            else:  # an integer input alone (the bins of a bincount): walk on, to the op that made it
                self.mark(tensor, Flow.SELECTOR if selects else min(level, Flow.SHADOW))

    def _pattern(self, op, gradient_function, carried):
        carried_indices = tuple(index for index, t in enumerate(op.outputs) if self.state.get(t.ref()))
        key = signature(op, carried_indices)
        if key not in self._patterns:
            found = run_time_pattern(op) if op.type in RUN_TIME_GRADIENT_OPS else None
            self._patterns[key] = found or gradient_pattern(op, gradient_function, carried, self._original_ops)
        return self._patterns[key]


def _passes_values_on(op, carried):
    """A list of tensors (map_fn, a loop's TensorArray) or a handle passes its values on; a dataset does not."""
    if op.type in DATASET_RESULT_OPS:
        return False
    return any(_is_handle(t) for t in carried) or any(t.dtype.name == "variant" for t in op.inputs)


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
