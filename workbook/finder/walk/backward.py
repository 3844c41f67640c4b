"""The walk back from a program's output: which inputs of each op a gradient reaches.

Introduced in 03_finding_gradient_killers.ipynb. :class:`BackwardWalk` asks TensorFlow's
own registered gradient function of every op (:mod:`workbook.finder.walk.gradient_probe`) which
of its inputs receive a gradient; an input that does not is a :class:`Break`, a candidate
that :mod:`workbook.finder.walk.analysis` sorts into the report.
"""

from dataclasses import dataclass
from enum import IntEnum

from workbook.core import internals
from workbook.finder.advice.words import PY_FUNCTION_DETAIL
from workbook.finder.trace.graph_program import custom_gradient_type
from workbook.finder.walk.gradient_probe import (
    RUN_TIME_GRADIENT_OPS,
    InputGradient,
    gradient_pattern,
    is_float,
    run_time_pattern,
    signature,
)
from workbook.finder.walk.reach import SHAPE_ONLY_OPS


class Flow(IntEnum):
    """What reaches a tensor walking back from the output; a greater one wins over a smaller one."""

    NOTHING = 0
    SELECTOR = 1  # nothing: it only selects among values (the condition of where, a gather's indices)
    SHADOW = 2  # a gradient, once the breaks after it are fixed
    ALIVE = 3  # the gradient itself


STOP_OPS = {"StopGradient", "PreventGradient"}

#: Ops that run a whole tf.data pipeline and return its result: a dataset is no list of values that
#: a gradient follows (as map_fn's TensorArray is), so their own gradient function is asked.
DATASET_RESULT_OPS = {"ReduceDataset", "DatasetToSingleElement"}


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


def _is_carrier(tensor):
    """Float values carry a gradient; so do handles to variables and lists of floats (variants)."""
    import tensorflow as tf

    return is_float(tensor) or tensor.dtype in (tf.resource, tf.variant)


def _is_handle(tensor):
    import tensorflow as tf

    return tensor.dtype in (tf.resource, tf.variant)


def _passes_values_on(op, carried):
    """A list of tensors (map_fn, a loop's TensorArray) or a handle passes its values on; a dataset does not."""
    if op.type in DATASET_RESULT_OPS:
        return False
    return any(_is_handle(t) for t in carried) or any(t.dtype.name == "variant" for t in op.inputs)
