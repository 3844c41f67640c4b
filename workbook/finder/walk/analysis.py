"""The graph half of :func:`workbook.find_gradient_breaks`: trace, walk backwards, report.

Introduced in 03_finding_gradient_killers.ipynb. :func:`analyse` traces the target
(:mod:`workbook.finder.trace.tracing`), finds which sources reach which tensors
(:mod:`workbook.finder.walk.reach`), walks back from the output asking TensorFlow's own
gradient functions (:mod:`workbook.finder.walk.backward`), and sorts the breaks it found
into the report's findings and notes. The bodies of ``tf.function`` calls, ``while``
loops (``tf.while_loop``, ``map_fn``, Keras RNN layers) and ``tf.cond``/``tf.switch_case``
branches are walked too, so a culprit inside one is named with its own line.
"""

from dataclasses import dataclass, field

from workbook.finder.advice.words import ONLY_AN_INDEX, RAISES_DETAIL, UNUSED_SOURCE
from workbook.finder.report import Finding, GradientReport, Rank, SourceStatus, Static
from workbook.finder.trace.frames import user_frame
from workbook.finder.trace.graph_program import Program
from workbook.finder.trace.tracing import trace, untraceable_report
from workbook.finder.walk.backward import BackwardWalk, Break, Flow
from workbook.finder.walk.gradient_probe import is_float
from workbook.finder.walk.layer_causes import made_inside
from workbook.finder.walk.reach import Reach, source_tensors

ASSIGN_OPS = {"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"}


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
    """Trace ``target`` (a :class:`~workbook.finder.trace.targets.Target`) unless ``traced`` is given; walk, report.

    ``layers`` are the Keras layers of the target: an op one of them made, with no line of
    yours, is named at the line of yours that made that layer.
    """
    import tensorflow as tf

    sources = _sources(target)
    try:
        traced = traced or trace(target.call, target.arguments)
    except Exception as error:
        return Analysis(untraceable_report(error, sources))
    program = Program(traced.function.graph, layers)
    carriers = source_tensors(traced.function.graph, target)
    reach = Reach(program, carriers)
    sinks = [t for t in tf.nest.flatten(traced.outputs) if isinstance(t, tf.Tensor)]
    walk = BackwardWalk(program, reach).run(sinks)
    hopeful = _judge_sources(sources, dict(target.inputs), carriers, walk.state, reach.of_all(sinks))
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
        detail=use and UNUSED_SOURCE.format(source=status.label),
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
        finding.detail += ONLY_AN_INDEX
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
        layer, frame = made_inside(brk.op, program.layers)
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
