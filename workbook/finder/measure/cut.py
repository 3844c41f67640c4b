"""Where the gradient dies, measured: one backward pass on your example, to every tensor on the way.

Introduced in 03_finding_gradient_killers.ipynb (the section "Where the walk cannot see").
The walk of :mod:`workbook.finder.walk.backward` reads the graph: it knows which ops *can*
pass a gradient. On one example an op that can may still pass exactly nothing: a ``where``
whose differentiable branch is never picked, a softmax over an axis of size 1, a value
that reaches the output only as a loop's trip count. :func:`measured_cuts` traces the
target again with ``tf.gradients`` of the followed output to every tensor that a starving
source (an input or weight whose gradient the tape measured None or all zero) reaches,
and names the ops whose output receives a gradient that is not zero while every input on
the source's side receives none or exactly zero: the place the gradient dies.
"""

from dataclasses import dataclass

from workbook.finder.walk.reach import source_tensors

#: Ops that run a body (a loop, a condition): a value that enters only as their integer input steers them.
CONTROL_OPS = {"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase"}
SELECT_OPS = {"Select", "SelectV2"}
SOFTMAX_OPS = {"Softmax", "LogSoftmax"}
#: tf.custom_gradient's forward result: the value it passes on is cut on purpose, its gradient goes another way.
DELIBERATE_OPS = {"IdentityN"}


@dataclass
class MeasuredCut:
    """An op where the measured gradient stops: ``kind`` says why, ``sources`` are the indices it starves."""

    op: object
    kind: str  # "branch_not_taken", "constant_softmax", "control", "zero"
    sources: frozenset


def sum_of_float_outputs(outputs):
    """The sum of every float tensor of ``outputs`` as one float32 scalar, or None if there is none."""
    import tensorflow as tf

    floats = [
        tf.reduce_sum(tf.cast(t, tf.float32))
        for t in tf.nest.flatten(outputs)
        if isinstance(t, (tf.Tensor, tf.Variable)) and t.dtype.is_floating
    ]
    return tf.add_n(floats) if floats else None


def any_nonzero(tensors):
    """Per tensor, a boolean scalar tensor: True if any entry is not 0.

    Traced for every weight of a model (a ResNet has hundreds), so the zero and the axes it
    compares and reduces over are made once per dtype and rank, not once per tensor.
    """
    import tensorflow as tf

    zeros, axes, flags = {}, {}, []
    for tensor in tensors:
        if tensor.dtype not in zeros:
            zeros[tensor.dtype] = tf.zeros((), tensor.dtype)
        rank = tensor.shape.rank
        if rank is not None and rank not in axes:
            axes[rank] = tf.range(rank)
        flags.append(tf.reduce_any(tf.not_equal(tensor, zeros[tensor.dtype]), axis=axes.get(rank)))
    return flags


def measured_cuts(followed, starving, run):
    """The :class:`MeasuredCut` s for the source indices ``starving`` of target ``followed``, in graph order.

    ``run(concrete, arguments)`` runs a concrete function once. An empty list when the
    target cannot be traced or differentiated this way (the walk's findings then stand).
    """
    import tensorflow as tf

    probe = Probe(followed, starving)

    def traced(*args):
        scalar = sum_of_float_outputs(followed.call(*args))
        return [] if scalar is None else probe.build(scalar)

    try:
        specs = [tf.TensorSpec.from_tensor(tensor) for tensor in followed.arguments]
        concrete = tf.function(traced, autograph=False).get_concrete_function(*specs)
        flags = run(concrete, followed.arguments)
    except Exception:  # a gradient function that raises, an op with none: the walk's findings stand
        return []
    return probe.cuts(flags, starving)


class Probe:
    """The gradient of the followed output to every float tensor that the ``suspects`` (source indices) reach.

    :meth:`build` adds it to the graph being traced, as one boolean flag per tensor (True if
    any entry is not 0); :meth:`cuts` reads the flags one run returned. Built into the trace
    that measures the sources (when a monitor already saw which of them starve), it saves
    tracing the target a second time; see :func:`measured_cuts` for a trace of its own.
    """

    def __init__(self, followed, suspects):
        self.followed, self.suspects = followed, frozenset(suspects)
        self.graph = self.reached = None
        self.index = {}  # tensor name -> the position of its flag

    def build(self, scalar, sources=()):
        """The flags, traced in the graph of ``scalar`` (the sum of the followed outputs).

        With ``sources`` (tensors, variables): (their gradients, the flags), from one backward pass.
        """
        import tensorflow as tf

        graph = scalar.graph
        carriers = source_tensors(graph, self.followed)
        reached = _reached(graph, carriers, self.suspects)
        floats = [t for t, _ in reached.values() if t.dtype.is_floating]
        wanted = list(sources) + floats
        gradients = tf.gradients(scalar, wanted, unconnected_gradients=tf.UnconnectedGradients.NONE)
        values, gradients_of_sources, gradients = [], gradients[: len(sources)], gradients[len(sources) :]
        for tensor, gradient in zip(floats, gradients, strict=True):
            if gradient is not None:
                self.index[tensor.name] = len(values)
                values.append(gradient.values if isinstance(gradient, tf.IndexedSlices) else gradient)
        self.graph, self.reached = graph, reached
        flags = any_nonzero(values)
        return (gradients_of_sources, flags) if sources else flags

    def cuts(self, flags, starving):
        """The :class:`MeasuredCut` s of ``starving`` (among the suspects) from the ``flags`` one run returned.

        Each source's bit goes forward on its own, so what ``starving`` reach is what the suspects reach, masked.
        """
        if self.graph is None:
            return []
        flags = [bool(flag) for flag in flags]
        alive = {name for name, index in self.index.items() if flags[index]}
        mask = sum(1 << index for index in set(starving))
        reached = {name: (tensor, bits & mask) for name, (tensor, bits) in self.reached.items() if bits & mask}
        return _frontier(self.graph, reached, alive)


def _reached(graph, carriers, starving):
    """Tensor name -> (tensor, bits of the starving sources whose value reaches it), walking forward."""
    reached, stack = {}, []
    for index in starving:
        for tensor in carriers.get(index, []):
            stack.append((tensor, 1 << index))
    while stack:
        tensor, bits = stack.pop()
        old = reached.get(tensor.name, (tensor, 0))[1]
        if old | bits == old:
            continue
        reached[tensor.name] = (tensor, old | bits)
        for consumer in tensor.consumers():
            stack.extend((output, bits) for output in consumer.outputs)
    return reached


def _frontier(graph, reached, alive):
    """The ops whose output the gradient reaches (not zero) while an input a starving source reaches gets none.

    Every path from a starving source dies somewhere: where a tensor that gets nothing (or an
    integer) goes into an op whose output gets something. Several paths, several such ops.
    """
    cuts = []
    for op in graph.get_operations():
        dead = [t for t in op.inputs if t.name in reached and t.name not in alive]
        if dead and op.type not in DELIBERATE_OPS and any(t.name in alive for t in op.outputs):
            cuts += _cuts_at(op, dead, reached)
    unique = {}
    for cut in cuts:
        unique.setdefault(cut.op.name, cut)
    return list(unique.values())


def _cuts_at(op, dead, reached):
    """The cuts where the ``dead`` inputs of ``op`` lost their gradient: ``op``, or the ops that made integers."""
    bits = 0
    for tensor in dead:
        bits |= reached[tensor.name][1]
    sources = frozenset(index for index in range(bits.bit_length()) if bits >> index & 1)
    floats = [t for t in dead if t.dtype.is_floating]
    if op.type in CONTROL_OPS or floats:
        return [MeasuredCut(op, _kind(op, floats), sources)]
    # Only integers arrive: the gradient died where a float became one (a cast, an argmax).
    return [MeasuredCut(made, "integer", sources) for made in _made_integer(dead, reached)]


def _made_integer(inputs, reached):
    """The ops that made integer ``inputs`` from a float a source reaches, walking back through integers."""
    made, stack, seen = [], list(inputs), set()
    while stack:
        tensor = stack.pop()
        if tensor.name in seen:
            continue
        seen.add(tensor.name)
        op = tensor.op
        before = [t for t in op.inputs if t.name in reached]
        if any(t.dtype.is_floating for t in before):
            made.append(op)
        else:
            stack.extend(before)
    return made


def _kind(op, floats):
    """Why the measured gradient stops at ``op``: read from the op and its ``floats`` inputs that get nothing."""
    if op.type in CONTROL_OPS:
        return "control"
    if op.type in SELECT_OPS and floats:
        return "branch_not_taken"
    if op.type in SOFTMAX_OPS and op.inputs[0].shape.rank and op.inputs[0].shape[-1] == 1:
        return "constant_softmax"
    return "zero"
