"""Tracing a target for the finder, and the report when it cannot be traced.

Introduced in 03_finding_gradient_killers.ipynb. :func:`trace` makes the graph that
:mod:`workbook.finder.walk.analysis` walks; a target that graphs cannot hold (NumPy, Python
control flow on values) or whose own tape.gradient meets an op with no gradient gets its
report here, without a walk.
"""

import re
import traceback
from dataclasses import dataclass

from workbook.finder.advice.words import OP_HINTS, REASONS, TAPE_UNREGISTERED
from workbook.finder.report import Finding, GradientReport, Static, untraceable_finding
from workbook.finder.trace.frames import user_frame


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


def untraceable_report(error, sources):
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
        detail=TAPE_UNREGISTERED.format(message=message, op=op_type),
        cuts=[status.owner for status in sources],
    )
    for status in sources:
        status.static = Static.CUT
    return GradientReport(findings=[finding], notes=[], sources=sources)


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
