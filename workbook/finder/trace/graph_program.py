"""A traced graph with the bodies of its function calls, loops and branches laid out flat.

Introduced in 03_finding_gradient_killers.ipynb (the section on loops and
``tf.function``). :func:`workbook.find_gradient_breaks` walks a :class:`Program`
instead of a bare graph, so that an op inside a ``tf.function``, a ``while`` loop
(``tf.while_loop``, ``map_fn``, Keras RNN layers) or a ``tf.cond`` branch is seen
with its own line, and values and gradients are followed in and out of the body.
"""

from workbook.core.internals import control_flow_graph, custom_gradient_type, function_body

CALL_OPS = {"PartitionedCall", "StatefulPartitionedCall"}
WHILE_OPS = {"While", "StatelessWhile"}
MAX_NESTING = 32


class Program:
    """Every op of a traced graph and of the function bodies it runs, with the links between them.

    A call of a ``tf.function``, a ``While`` loop or an ``If``/``Case`` is an op
    whose work happens in a body graph of its own. Its inputs are linked to the
    body's inputs, the body's outputs to its outputs, and (for a loop) each body
    output to the same body input of the next iteration, so that values and
    gradients can be followed through it as through any other op.
    """

    def __init__(self, graph, layers=()):
        self.layers = {layer.name: layer for layer in layers}  # to name the line that made a layer's ops
        self.ops = []  # program order: a body's ops come before the op that runs it
        self.forward, self.backward = {}, {}
        self.entered = set()
        self._expand(graph, 0)
        self.order = {op: index for index, op in enumerate(self.ops)}

    def _link(self, source, target):
        self.forward.setdefault(source.ref(), []).append(target)
        self.backward.setdefault(target.ref(), []).append(source)

    def _expand(self, graph, depth):
        for op in graph.get_operations():
            bodies = _bodies(op) if depth < MAX_NESTING else None
            if bodies:
                self.entered.add(op)
                outer_inputs = list(op.inputs) if op.type in CALL_OPS | WHILE_OPS else list(op.inputs)[1:]
                for body in bodies:
                    self._expand(body, depth + 1)
                    # An op passes each of its inputs to the body: the two lists always match.
                    for outer, inner in zip(outer_inputs, body.inputs, strict=True):
                        self._link(outer, inner)
                    # A function's body can have more outputs than the call (once TensorFlow has
                    # rewritten it to also return intermediates for its gradient): the first ones are the call's.
                    for inner, outer in zip(body.outputs, op.outputs, strict=False):
                        self._link(inner, outer)
                    if op.type in WHILE_OPS:  # a loop body returns the next value of each of its inputs
                        for inner_output, inner_input in zip(body.outputs, body.inputs, strict=True):
                            self._link(inner_output, inner_input)
            self.ops.append(op)


def _bodies(op):
    """The body graphs an op runs (None for an ordinary op, or a body that cannot be had)."""
    read = _BODY_READERS.get(op.type)
    if read is None:
        return None
    try:
        graphs = read(op)
    except (ValueError, AttributeError, KeyError):
        return None
    return list(graphs) if graphs and all(graph is not None for graph in graphs) else None


def _loop_body(op):
    return [control_flow_graph(op, "body") or _function_graph(op, op.get_attr("body").name)]


def _if_branches(op):
    return [
        control_flow_graph(op, "then") or _function_graph(op, op.get_attr("then_branch").name),
        control_flow_graph(op, "else") or _function_graph(op, op.get_attr("else_branch").name),
    ]


def _case_branches(op):
    # TensorFlow keeps no Python graphs on a Case op: each branch comes from the library.
    return [_function_graph(op, function.name) for function in op.get_attr("branches")]


def _called_function(op):
    if custom_gradient_type(op):
        return None  # its own gradient is what backprop uses: ask that instead
    return [_function_graph(op, op.get_attr("f").name)]


# How to read the bodies of each kind of op that has them.
_BODY_READERS = {
    **dict.fromkeys(CALL_OPS, _called_function),
    **dict.fromkeys(("Case", "StatelessCase"), _case_branches),
    **dict.fromkeys(("If", "StatelessIf"), _if_branches),
    **dict.fromkeys(WHILE_OPS, _loop_body),
}


def _function_graph(op, name):
    """The graph of the function called ``name``, looked up from ``op``'s graph outwards."""
    graph = op.graph
    while graph is not None:
        body = function_body(graph, name)
        if body is not None:
            return body
        graph = getattr(graph, "outer_graph", None)
    return None
