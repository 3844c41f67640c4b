"""Which sources' values reach each tensor of a traced program.

Introduced in 03_finding_gradient_killers.ipynb. The sources are a target's float inputs
and trainable variables (:func:`source_tensors` finds their tensors in the graph);
:class:`Reach` carries them forward, op by op, for :mod:`workbook.finder.walk.backward`
and the report of :mod:`workbook.finder.walk.analysis`.
"""

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


def tf_variable(variable):
    """The tf.Variable behind a Keras variable (a tf.Variable is returned as it is)."""
    import tensorflow as tf

    return variable if isinstance(variable, tf.Variable) else variable.value


def source_tensors(graph, target):
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
