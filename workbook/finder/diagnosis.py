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

import contextlib
import io
import linecache
from dataclasses import dataclass, field

import numpy as np

from workbook.core.arguments import check_callable, refuse, shown
from workbook.core.code_origin import source_span
from workbook.core.internals import (
    grappler_passes_off,
    kept_layer_attributes,
    kept_layer_names,
    kept_random_state,
    restore_layer_attributes,
)
from workbook.finder.advice.checked import check_culprit, has_a_fix_to_check
from workbook.finder.advice.rebuilt import Rebuilt
from workbook.finder.advice.words import (
    ALL_ZERO,
    DISAGREEMENT,
    TAPE_FAILED_BEHIND,
    UNEXPLAINED_CUT,
    YOUR_TAPE_NONE,
)
from workbook.finder.measure.cut import Probe, any_nonzero, measured_cuts, sum_of_float_outputs
from workbook.finder.measure.findings import settle_measured
from workbook.finder.report import REASONS, Finding, GradientReport, Measured, Rank, Static
from workbook.finder.trace.targets import all_layers, changed_attributes, prepare, stateful_variables
from workbook.finder.trace.tracing import Traced
from workbook.finder.walk.analysis import analyse, cut_all
from workbook.finder.walk.gradient_probe import RUN_TIME_GRADIENT_OPS
from workbook.finder.walk.layer_causes import explain_disconnected, layer_of_op
from workbook.finder.walk.reach import tf_variable

__all__ = ["find_gradient_breaks", "GradientReport", "Finding"]


def find_gradient_breaks(target, example, loss=None):
    """Name the ops, and the lines of your code, that cut the gradient.

    Introduced in 03_finding_gradient_killers.ipynb. It runs the target once; where an input
    or weight gets no gradient, once more to measure where it dies, and once per fix it
    checks on your code (quietly). It leaves the weights, the layers, your functions and
    every random generator (Python, NumPy, Keras, TensorFlow) as it found them.

    Parameters
    ----------
    target : callable, keras.layers.Layer or keras.Model
        A Python function on tensors (a ``tf.function`` too), a layer, or a model.
        For a model given ``example=(x, y)`` the output followed is the loss that
        ``fit`` differentiates: the one inside an overridden ``train_step``, else
        ``compute_loss`` (the compiled loss, or an override of it).
    example : array, tensor, or tuple of them
        An input to trace and to measure gradients on (a tuple means several
        positional arguments, or ``(x, y)`` / ``(x, y, sample_weight)`` for a model).
        A model with several inputs takes its ``x`` as it takes it in ``fit``: a dict,
        list or nested structure of arrays, e.g. ``({"image": x_image, "label": x_label}, y)``.
    loss : callable, optional
        ``loss(y, y_pred)`` to follow for a model that is not compiled with one.

    Returns
    -------
    GradientReport
        ``.findings`` (culprit first), ``.notes``, ``.sources`` (per input and
        trainable variable: the static verdict and the measured one), ``.ok``.
        It prints as a table and renders as HTML in JupyterLab.
    """
    _check_arguments(target, example, loss)
    # The model runs once more here, drawing as training does (an unseeded keras.random call, a
    # new layer's initializer): the draws of the student's own run must come out as without it.
    with kept_random_state():
        return _find_gradient_breaks(target, example, loss)


def find_known_breaks(target, example, loss=None):
    """:func:`find_gradient_breaks` for a target already seen to starve an input or weight of its gradient.

    Introduced in 04_autoencoder_lab.ipynb (the monitor's "cut by"). The same report; as the
    gradient is known to die somewhere, where it dies is measured for every input and weight
    in the run that measures them all, not in a trace of its own afterwards.
    """
    _check_arguments(target, example, loss)
    with kept_random_state():
        return _find_gradient_breaks(target, example, loss, known=True)


def _find_gradient_breaks(target, example, loss, known=False):
    """The work of :func:`find_gradient_breaks`, on arguments already checked (``known``: :func:`find_known_breaks`)."""
    import keras

    followed = prepare(target, example, loss)
    layers = all_layers(target)
    snapshot = _snapshot(stateful_variables(target))
    # A layer that stored a traced tensor on self would break later: its attributes are put back.
    with kept_layer_attributes(layers) as attributes:
        try:
            measurement = _trace_and_measure(followed, probe=known)
            measured = _where_it_dies(followed, measurement)
            changed = changed_attributes(attributes)
            restore_layer_attributes(attributes)
            analysis = analyse(followed, traced=measurement.traced, layers=layers)
        finally:
            for variable, value in snapshot:  # a training-mode call may move statistics; put them back
                variable.assign(value)
    report = analysis.report
    report.description = followed.description
    sources, failure = report.sources, measurement.failure
    for status in sources:
        status.measured = measurement.verdicts.get(status.key, Measured.NOT_MEASURED)
    # Each pass takes the findings and notes so far and returns them settled a step further.
    findings, notes = _failed_behind_a_py_function(report.findings, report.notes, sources, failure)
    findings, notes = _settle_unchecked(findings, notes, analysis.unchecked, sources, failure)
    findings = _not_recorded(explain_disconnected(findings, sources, layers, changed), sources, followed.call)
    findings, notes = _no_silent_cut(findings, notes, sources)
    findings, notes = settle_measured(findings, notes, measured, sources, layers)
    _name_layers(findings + notes, layers)
    report.findings, report.notes = _one_row_per_line(findings), _one_row_per_line(notes)
    report.disagreements = [_disagreement(s) for s in report.sources if _disagree(s.static, s.measured)]
    if isinstance(target, keras.Model):
        report.layers_without_gradient = _dead_layers(report.sources)
    _check_the_fix(report, followed, (target, example, loss), layers, measured)
    return report


def _check_the_fix(report, followed, arguments, layers, measured):
    """The culprit's fix chosen by applying it to your code; weights, statistics and attributes put back.

    ``arguments`` are the finder's (target, example, loss): a line that runs once is checked on the target made
    again. ``measured`` are the cuts measured on the code as it is.
    """
    if not has_a_fix_to_check(report):  # nothing runs: nothing to snapshot and put back
        return
    target = arguments[0]
    snapshot = _snapshot(stateful_variables(target))
    with kept_layer_attributes(layers) as attributes:
        try:
            # The runs of each fix print nothing of the student's code a second time, and a model made again to
            # check a fix leaves the names of the student's next layers as they would have been.
            with _quiet(), kept_layer_names():
                rebuilt = Rebuilt(*arguments, report.culprit)  # has_a_fix_to_check: there is a culprit
                check_culprit(report, followed, rebuilt, measured)
        except Exception:  # the check is help: when it fails, the hints stay as the walk wrote them
            pass
        finally:
            restore_layer_attributes(attributes)
            for variable, value in snapshot:
                variable.assign(value)


def _where_it_dies(followed, measurement):
    """The :class:`~workbook.finder.measure.cut.MeasuredCut` s of the sources the tape measured None or zero for."""
    keys = _source_keys(followed.inputs, followed.variables)
    starving = [i for i, key in enumerate(keys) if measurement.verdicts.get(key) in (Measured.NONE, Measured.ZERO)]
    if not starving or measurement.traced is None:
        return []
    probe, flags = measurement.probe
    if probe is not None:  # measured in the same run
        return probe.cuts(flags, starving)
    with _quiet():  # what the code prints on this extra run is the finder's, not the student's output
        return measured_cuts(followed, starving, _run_once)


def _quiet():
    """Standard output and error kept from the notebook, for the finder's own extra runs of the target."""
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    return stack


def _snapshot(variables):
    """(variable, value) of each variable to put back; one a failed fit left unbuilt (no value yet) is skipped.

    A value read is a tensor, and tensors are immutable: a later update of the variable leaves it
    as it was (TensorFlow copies the variable's buffer before writing into one a read still
    holds). So nothing is copied unless a variable moves: a ResNet's 25 million weights are not
    copied out to NumPy and back on every run of the finder.
    """
    snapshot = []
    for variable in variables:
        value = tf_variable(variable).read_value()
        if tuple(value.shape) == tuple(variable.shape):
            snapshot.append((variable, value))
    return snapshot


def _check_example(example):
    """Refuse an empty example, or one holding NaN or infinity (every measured gradient would be NaN)."""
    parts = _leaves(example)
    if any(isinstance(part, (dict, tuple, list)) for part in parts):  # an empty one, where an input goes
        refuse("example", example, "an input to trace: an array or tensor, or a tuple of them")
    for part in parts:
        try:
            values = np.asarray(part)
        except Exception:  # a tensor that is not eager, or an object: converting it later says why
            continue
        if values.dtype.kind in "fc" and not np.isfinite(values).all():
            refuse("example", example, "finite: it holds NaN or infinity, so every gradient measured on it is NaN")


def _leaves(example):
    """The arrays of an example, inside its tuples, lists and dicts (a model's several inputs); an empty one stays."""
    if isinstance(example, dict) and example:
        return [leaf for item in example.values() for leaf in _leaves(item)]
    if isinstance(example, (tuple, list)) and example:
        return [leaf for item in example for leaf in _leaves(item)]
    return [example]


@dataclass
class Measurement:
    """The gradients a GradientTape measured on the example, and the trace that measured them.

    ``verdicts`` maps a source key to a :class:`~workbook.finder.report.Measured`; ``traced`` is
    the graph the walk then reads (None if the target could only be run eagerly);
    ``failure`` the first line of the error that building the gradient raised, if any.
    """

    verdicts: dict = field(default_factory=dict)
    traced: Traced = None
    failure: str = None
    #: (the :class:`~workbook.finder.measure.cut.Probe` built into the trace, or None; the flags its run returned)
    probe: tuple = (None, None)


def _trace_and_measure(followed, probe=False):
    """Trace the target with its gradients in one graph, run it once, and measure what arrives.

    The graph is the one the walk then reads, so the target is traced only once. Code that
    cannot be traced with its gradients (numpy, Python ``if`` on a value, a gradient
    function that raises) is measured eagerly instead, and ``traced`` is None. With ``probe``
    (a gradient is known to starve), where every source's gradient dies is measured in the same
    run (a :class:`~workbook.finder.measure.cut.Probe`), or, where that cannot be built,
    afterwards as without it.
    """
    import tensorflow as tf

    specs = [tf.TensorSpec.from_tensor(tensor) for tensor in followed.arguments]
    measurement = None
    if probe:  # an op with no gradient, a gradient function that raises: measured as without a probe
        every_source = range(len(followed.inputs) + len(followed.variables))
        with contextlib.suppress(Exception):
            measurement = _measured(followed, specs, Probe(followed, every_source))
    if measurement is None:
        try:
            # After a probe that failed, the code has run (and printed) once already.
            with _quiet() if probe else contextlib.nullcontext():
                measurement = _measured(followed, specs)
        except Exception:
            return _measure_eagerly(followed)
    _check_returns_a_tensor(measurement.traced.outputs)
    return measurement


def _measured(followed, specs, probe=None):
    """The :class:`Measurement` of one trace of the target with its gradients (and ``probe``'s), run once.

    Without a probe a GradientTape takes the gradients of the sources; with one, the probe's
    ``tf.gradients`` takes them with those of every tensor on the way, in one backward pass.
    """
    import tensorflow as tf

    position = {id(tensor): index for index, tensor in enumerate(followed.arguments)}
    float_inputs = [
        (key, position[id(tensor)])
        for key, (_, tensor) in zip(_source_keys(followed.inputs, []), followed.inputs, strict=True)
        if tensor.dtype.is_floating
    ]
    variables = followed.variables
    keys = [key for key, _ in float_inputs] + [("variable", id(v)) for v in variables]

    def outputs_and_flags(*args):
        # Several sources and no variable watched by accident: the one-input helper in
        # workbook.core.gradients does not fit here.
        sources = [args[index] for _, index in float_inputs] + [tf_variable(v) for v in variables]
        tape = tf.GradientTape(watch_accessed_variables=False)
        with tape if probe is None else contextlib.nullcontext():
            if probe is None:
                tape.watch(sources)
            outputs = followed.call(*args)
            scalar = sum_of_float_outputs(outputs)
        if scalar is None:
            return {"outputs": outputs, "flags": None, "probe": None}
        if probe is not None:
            gradients, probed = probe.build(scalar, sources)
            return {"outputs": outputs, "flags": _nonzero_flags(gradients), "probe": probed}
        gradients = tape.gradient(scalar, sources, unconnected_gradients=tf.UnconnectedGradients.NONE)
        return {"outputs": outputs, "flags": _nonzero_flags(gradients), "probe": None}

    concrete = tf.function(outputs_and_flags, autograph=False).get_concrete_function(*specs)
    ran = _run_once(concrete, followed.arguments)
    flags, probed = ran["flags"], ran["probe"]
    traced = Traced(concrete, concrete.structured_outputs["outputs"])
    if flags is None:
        return Measurement(traced=traced)
    verdicts = {key: _verdict(flag) for key, flag in zip(keys, flags, strict=True)}
    return Measurement(verdicts, traced, probe=(probe, probed) if probed is not None else (None, None))


def _check_returns_a_tensor(outputs):
    """Refuse a target that returned no tensor: there is nothing whose gradient to follow."""
    import tensorflow as tf

    if not any(tf.is_tensor(tensor) for tensor in tf.nest.flatten(outputs)):
        returned = "None (is a `return` missing?)" if outputs is None else shown(outputs)
        raise ValueError(
            f"target returned {returned}, not a tensor: there is no output whose gradient could be "
            f"followed. It must return what it computes from its input."
        )


def _nonzero_flags(gradients):
    """Per gradient: None where there is none, else a boolean tensor, True if any entry is not 0."""
    import tensorflow as tf

    flags = iter(any_nonzero([tf.convert_to_tensor(g) for g in gradients if g is not None]))
    return [None if g is None else next(flags) for g in gradients]


def _verdict(flowing):
    """NONE for no gradient, else FLOWING or ZERO as ``flowing`` (a boolean tensor) says."""
    if flowing is None:
        return Measured.NONE
    return Measured.FLOWING if bool(flowing) else Measured.ZERO


#: Grappler passes switched off for the one run of the measurement: optimizing a graph that runs
#: once costs more than it saves. Constant folding stays on (it folds away the integer shape
#: arithmetic, which would otherwise run on oneDNN kernels that log a notice on some CPUs).
SKIPPED_GRAPPLER_PASSES = (
    "layout_optimizer",
    "remapping",
    "arithmetic_optimization",
    "dependency_optimization",
    "loop_optimization",
    "function_optimization",
    "debug_stripper",
    "implementation_selector",
)  # each one on by default


def _run_once(concrete, arguments):
    """Run a concrete function once with the costly Grappler passes off, then put the options back."""
    with grappler_passes_off(SKIPPED_GRAPPLER_PASSES):
        return concrete(*arguments)


def _measure_eagerly(followed):
    """The :class:`Measurement` of a GradientTape run eagerly (no trace to walk)."""
    import tensorflow as tf

    inputs, variables = followed.inputs, followed.variables
    tape, scalar, failure = _call_under_a_tape(followed)
    if failure is not None:
        return _failed_under_the_tape(followed, failure)
    if scalar is None:
        return Measurement()
    sources = [tensor for _, tensor in inputs] + [tf_variable(v) for v in variables]
    try:
        gradients = tape.gradient(scalar, sources, unconnected_gradients=tf.UnconnectedGradients.NONE)
    except Exception as error:  # LookupError for an op with no gradient; any error from a gradient function
        return _all_failed(inputs, variables, _first_line(error))
    keys = _source_keys(inputs, variables)
    return Measurement({key: _verdict(flag) for key, flag in zip(keys, _nonzero_flags(gradients), strict=True)})


def _call_under_a_tape(followed):
    """(tape, sum of the float outputs, None), or (tape, None, the error's first line) if the call raised."""
    import tensorflow as tf

    scalar = failure = None
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch([tensor for _, tensor in followed.inputs if tensor.dtype.is_floating])
        tape.watch([tf_variable(variable) for variable in followed.variables])
        try:
            scalar = sum_of_float_outputs(followed.call(*followed.arguments))
        except Exception as error:
            failure = _first_line(error)
    return tape, scalar, failure


def _failed_under_the_tape(followed, failure):
    """The Measurement when the call raised ``failure`` under the GradientTape."""
    try:
        followed.call(*followed.arguments)
    except Exception:
        return Measurement()  # it fails without a tape too: tracing reports why
    # It runs, but not under a GradientTape: building the gradient of a tf.function failed.
    return _all_failed(followed.inputs, followed.variables, failure)


def _all_failed(inputs, variables, failure):
    return Measurement({key: Measured.ERROR for key in _source_keys(inputs, variables)}, failure=failure)


def _first_line(error):
    return f"{type(error).__name__}: {error}".splitlines()[0][:300]


def _settle_unchecked(findings, notes, unchecked, sources, failure):
    """(findings, notes) with the breaks whose gradient function failed decided by the GradientTape.

    A break that the tape passed (every source it blocks measured flowing) was only a
    limit of the probe: a note. Otherwise it is a finding, "could not check", never "ok".
    A source the graph calls flowing but the tape measured None or failed on gets a finding too.
    """
    findings, notes, covered = list(findings), list(notes), set()
    for suspect in unchecked:
        bad = [s for s in suspect.blocked if s.measured != Measured.FLOWING]
        if bad:
            suspect.finding.cuts = list(dict.fromkeys(s.owner for s in bad))
            findings.append(suspect.finding)
            covered.update(id(s) for s in bad)
        else:
            notes.append(suspect.finding)
    findings += [_tape_finding(status, failure) for status in _missed_by_the_tape(sources, covered)]
    return sorted(findings, key=Finding.sort_key), notes


def _failed_behind_a_py_function(findings, notes, sources, failure):
    """(findings, notes) with the GradientTape's failure put on a tf.py_function that passes no gradient.

    TensorFlow gives such an op's input a scalar 0 in place of its gradient, and the gradient ops
    behind it then fail on that 0 (fit raises): every source the tape failed on is cut by it.
    Unchanged when there is no such op, or the tape failed on nothing.
    """
    culprit = next((f for f in findings + notes if f.op_type in RUN_TIME_GRADIENT_OPS), None)
    failed = [status for status in sources if status.measured == Measured.ERROR]
    if culprit is None or not failed:
        return findings, notes
    findings, notes = _made_a_finding(culprit, findings, notes)  # a note beside another path, yet the tape fails
    culprit.rank = Rank.RAISES
    culprit.cuts = list(dict.fromkeys(culprit.cuts + [status.owner for status in failed]))
    culprit.detail += TAPE_FAILED_BEHIND.format(failure=failure)
    cut_all(failed)
    return sorted(findings, key=Finding.sort_key), notes


def _made_a_finding(finding, findings, notes):
    """(findings, notes) with ``finding`` among the findings, and no longer among the notes."""
    if any(f is finding for f in findings):
        return findings, notes
    return [*findings, finding], [note for note in notes if note is not finding]


def _missed_by_the_tape(sources, covered):
    """The sources the graph passes but the tape measured None for (or failed on), not yet in a finding."""
    return [
        s
        for s in sources
        if s.static == Static.FLOWING and s.measured in (Measured.NONE, Measured.ERROR) and id(s) not in covered
    ]


def _check_arguments(target, example, loss):
    """Refuse a target, example or loss the finder cannot follow, naming the argument."""
    allowed = "something to trace: a Python function on tensors, a Keras layer, or a Keras model"
    check_callable("target", target, allowed)
    if loss is not None:
        check_callable("loss", loss, "a function loss(y, y_pred), or None (leave it out)")
    _check_example(example)


def _not_recorded(findings, sources, call):
    """``findings`` after one for weights your train_step's own tape returned None for, though the graph
    connects them (first: it is the first thing to fix); those weights are then cut, measured None."""
    missing = set(getattr(call, "missing", ()))
    statuses = [s for s in sources if s.name in missing and s.static == Static.FLOWING]
    if not statuses:
        return findings
    frame = _source_line(call.step, "stop_recording(")
    reason = "not_recorded" if frame else "not_recorded_outside"
    file, line, code = frame or (None, None, None)
    names = ", ".join(s.name for s in statuses)
    for status in statuses:
        status.static, status.measured = Static.CUT, Measured.NONE  # what your own tape measured
    return [
        Finding(
            op_type="(your tape)",
            op_name=names,
            reason=reason,
            file=file,
            line=line,
            code=code,
            hint=REASONS[reason].hint,
            detail=YOUR_TAPE_NONE.format(step=call.step.__qualname__, names=names),
            cuts=list(dict.fromkeys(s.owner for s in statuses)),
            rank=Rank.YOUR_TAPE,
        ),
        *findings,
    ]


def _source_line(function, text):
    """(file, line, code) of the first line of ``function`` that contains ``text``, or None."""
    span = source_span(function)
    for line in range(span[1], span[2] + 1) if span else ():
        code = linecache.getline(span[0], line)
        if text in code:
            return span[0], line, code.strip()
    return None


def _no_silent_cut(findings, notes, sources):
    """(findings, notes), never no finding while the graph calls a source cut: the first note, or a plain finding."""
    cut = [s for s in sources if s.static == Static.CUT]
    if findings or not cut:
        return findings, notes
    owners = list(dict.fromkeys(s.owner for s in cut))
    if notes:
        finding, notes = notes[0], notes[1:]
        finding.cuts = owners
    else:
        finding = Finding(
            op_type="(graph)",
            op_name=", ".join(s.name for s in cut),
            reason="unexplained_cut",
            hint=REASONS["unexplained_cut"].hint,
            detail=UNEXPLAINED_CUT.format(sources=", ".join(s.label for s in cut)),
            cuts=owners,
        )
    return [finding], notes


def _name_layers(findings, layers):
    """The layer that made each finding's op (or holds its variable) where no line of yours is named.

    Read from the op's name scopes (:func:`~workbook.finder.walk.layer_causes.made_by_layer`, which
    also names the line that made the layer when the finding is an op's).
    """
    by_name = {layer.name: layer for layer in layers}
    for finding in findings:
        if not finding.file:
            layer = layer_of_op(finding.op_name, by_name)
            finding.layer = layer.name if layer is not None else None


def _one_row_per_line(findings):
    """Findings with one row for the ops a line made alike, counted in ``times``: a line run in a loop,
    or by a layer that calls another once per time step (``TimeDistributed``), makes one op a run."""
    kept, seen = [], {}
    for finding in findings:
        made_by = (finding.file, finding.line, finding.layer)
        key = (finding.op_type, finding.reason, made_by, tuple(finding.cuts)) if any(made_by) else None
        if key in seen:
            seen[key].times += 1
            continue
        if key is not None:
            seen[key] = finding
        kept.append(finding)
    return kept


def _tape_finding(status, failure):
    """A source the graph passes but the tape does not: it measured None, or raised ``failure``."""
    reason = "gradient_error" if status.measured == Measured.ERROR else "measured_none"
    detail = (
        f"tf.GradientTape raised {failure}" if status.measured == Measured.ERROR else "tf.GradientTape returned None"
    )
    return Finding(
        op_type="(tape)",
        op_name=status.name,
        reason=reason,
        hint=REASONS[reason].hint,
        detail=f"{status.label}: {detail}",
        cuts=[status.owner],
        rank=Rank.TAPE,
    )


def _source_keys(inputs, variables):
    return [("input", name) for name, _ in inputs] + [("variable", id(v)) for v in variables]


def _disagree(static, measured):
    if static == Static.UNTRACEABLE:
        return False
    return (static == Static.FLOWING) != (measured == Measured.FLOWING)


def _disagreement(status):
    if status.static == Static.FLOWING and status.measured == Measured.ZERO:
        return ALL_ZERO.format(source=status.label)
    return DISAGREEMENT.format(source=status.label, static=status.static, measured=status.measured)


def _dead_layers(sources):
    layers = {}
    for status in sources:
        if status.kind == "variable" and status.layer:
            layers.setdefault(status.layer, []).append(status)
    return [name for name, statuses in layers.items() if all(s.static != Static.FLOWING for s in statuses)]
