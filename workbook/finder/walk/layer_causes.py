"""Why a layer's weight is disconnected, and which line of yours made a layer, read from the code.

Introduced in 03_finding_gradient_killers.ipynb. Used by
:func:`workbook.find_gradient_breaks` once the graph says that the output does
not depend on a weight: it looks at the layer's attributes and at the lines of
its class that set them, and names the line that causes it. For an op made inside a
layer that a model calls for you (Sequential, functional), it names the line that made
the layer.
"""

import inspect
import re

from workbook.core.code_origin import is_library, scope_of, source_span, user_calls, within
from workbook.core.internals import layer_attributes
from workbook.finder.advice.culprit import advise_cause
from workbook.finder.advice.words import CAUSES, REASONS


def made_inside(op, layers):
    """(layer or operation, (file, line, code)) for an op that no frame of yours made: :func:`made_by_layer`, else
    :func:`made_by_operation` (a ``keras.ops`` function you called on a KerasTensor); (None, no line) if neither."""
    layer, frame = made_by_layer(op.name, layers)
    if frame[0] is None:
        operation, found = made_by_operation(op, layers.values())
        if found[0] is not None:
            return operation, found
    return layer, frame


def made_by_operation(op, layers):
    """(operation, (file, line, code)) for an op a functional model made by running a ``keras.ops`` call of yours.

    Introduced in 03_finding_gradient_killers.ipynb. ``ops.stop_gradient(h)`` on a KerasTensor becomes an
    operation of the model that Keras calls for you (``model.operations``, not a layer), and it keeps no
    line of yours. The op's traceback holds the frame of that operation's ``call``; its class leads to the
    ``keras.ops`` function of the same name, and the line is the call of it in your code whose literal
    arguments agree with the operation's config; of several, the one in the function (or cell, or
    script) that makes the most of the model's layers. (None, no line) when that is not one line.
    """
    found = _calls_of_operations(op, layers)
    calls = _in_the_scope_that_built(found) if len(found) > 1 else list(found)
    if len(calls) != 1:
        return None, (None, None, None)
    return found[calls[0]][0], calls[0]


def _calls_of_operations(op, layers):
    """Each call of yours that could have made an operation (not a layer) of a model in ``layers`` that made ``op``.

    Returns a dict: (file, line, code) -> (operation, model).
    """
    import keras

    frames = _places(op)
    operations = [
        (operation, model)
        for model in layers
        for operation in getattr(model, "operations", ())
        if not isinstance(operation, keras.layers.Layer) and _ran_in(type(operation).call, frames)
    ]
    found = {}
    for operation, model in operations:
        function = getattr(keras.ops, re.sub(r"_\d+$", "", operation.name), None)
        config = _config(operation)
        if callable(function) and _same_dtype(config, op):
            for call in user_calls(function, config):
                found.setdefault(call, (operation, model))
    return found


def _in_the_scope_that_built(found):
    """The calls of ``found`` (call -> (operation, model)) in the scope that makes the most of their model's layers."""
    return _in_the_scope_that_made({call: getattr(model, "layers", ()) for call, (_, model) in found.items()})


def _in_the_scope_that_made(calls):
    """The calls of ``calls`` (call -> the model's layers) in the scope (function, cell, script) that makes the most
    of those layers; [] when none makes any."""
    scores = {}
    for call, layers in calls.items():
        scope = scope_of(*call[:2])
        made = [user_calls(type(layer), _config(layer)) for layer in layers]
        scores[call] = sum(any(within(scope, *where[:2]) for where in lines) for lines in made)
    best = max(scores.values(), default=0)
    return [call for call, score in scores.items() if score == best] if best else []


def _places(op):
    """(file, line) of each frame of the traceback that made ``op`` (none for the ops of a loaded SavedModel)."""
    return [(frame.filename, frame.lineno) for frame in op.traceback or ()]


def _same_dtype(config, op):
    """Whether an operation that names its output's dtype (``ops.cast(x, "int32")``) could have made ``op``."""
    dtype = config.get("dtype")
    return not isinstance(dtype, str) or not op.outputs or op.outputs[0].dtype.name == dtype


def _ran_in(method, frames):
    """Whether one of ``frames`` ((file, line), from a traceback) lies inside the source of ``method``."""
    span = source_span(method)
    return span is not None and any(within(span, name, line) for name, line in frames)


def made_by_layer(op_name, layers):
    """(layer, (file, line, code)) for an op that no line of yours made directly: the layer whose name scope made it.

    Introduced in 03_finding_gradient_killers.ipynb. A model that calls its layers for you
    (Sequential, functional) keeps no line of yours, so the line is the call of the layer's
    class in your code whose arguments agree with the layer's config (with its name=, if you
    gave one); of several (two models made alike, in two cells or two functions), the one in
    the scope that makes the most of the target's layers; (None, None, None) when that is not
    one line. ``layers`` maps names to layers; (None, no line) if no layer's scope made the op.
    """
    layer = layer_of_op(op_name, layers)
    calls = user_calls(type(layer), _config(layer)) if layer is not None else []
    if len(calls) > 1:
        calls = _in_the_scope_that_made(dict.fromkeys(calls, list(layers.values())))
    return layer, (calls[0] if len(calls) == 1 else (None, None, None))


def layer_of_op(op_name, layers):
    """The layer whose name scope made ``op_name``: its name, or that name with _1, _2... when it runs twice."""
    for scope in reversed(op_name.split("/")[:-1]):
        renamed = (name for name in layers if re.fullmatch(re.escape(name) + r"_\d+", scope))
        match = scope if scope in layers else next(renamed, None)
        if match:
            return layers[match]
    return None


def _config(layer):
    """What the layer (or operation) reports of its arguments (its name at least)."""
    try:
        config = dict(layer.get_config())
    except Exception:  # a layer of yours whose get_config needs arguments it does not have
        config = {}
    return {**config, "name": layer.name}


def explain_disconnected(findings, sources, layers, changed):
    """``findings`` with each disconnected weight given its cause and line, merged into one row per layer.

    ``changed`` lists (layer, attribute, value before, value after) for attributes a
    call of the target rebound.
    """
    by_name = {layer.name: layer for layer in layers}
    status_of = {status.name: status for status in sources}
    merged, kept = {}, []
    for finding in findings:
        status = status_of.get(finding.op_name)
        if finding.reason != "disconnected" or status is None or status.kind != "variable":
            kept.append(finding)
            continue
        _name_the_cause(finding, by_name.get(status.layer), status, changed)
        key = (status.layer, finding.file, finding.line, finding.hint)
        if key in merged:
            merged[key].op_name += f", {status.name}"
            continue
        finding.op_name = status.name
        finding.detail = finding.detail.removeprefix(f"{status.name}: ").removeprefix(
            f"the output does not depend on {status.name}: "
        )
        merged[key] = finding
        kept.append(finding)
    for finding in merged.values():
        names = finding.op_name
        if names not in finding.detail:
            finding.detail = f"{names}: {finding.detail}"
    return kept


def _name_the_cause(finding, layer, status, changed):
    """Give a disconnected weight's finding the cause read from its layer's code, when one is found."""
    if layer is None or finding.hint != REASONS["disconnected"].hint:
        return
    cause = _cause(layer, status, changed)
    if cause is not None:
        name, (file, line, code) = cause
        finding.detail, finding.hint = CAUSES[name].detail, advise_cause(name, CAUSES[name].hint, code)
        finding.file, finding.line, finding.code = file, line, code


def _cause(layer, status, changed):
    """(cause name, (file, line, code)) for one disconnected weight of ``layer``, or None."""
    weight = next((v for v in layer.trainable_variables if v.path == status.name), None)
    if weight is None:
        return None
    cls = type(layer)
    attribute = next((name for name, value in layer_attributes(layer).items() if value is weight), None)
    rebound_earlier = attribute is None  # by an earlier call: the attribute holds a tensor now
    if rebound_earlier:
        attribute = _tensor_attribute(layer, weight)
    return _first_cause(layer, weight, changed, cls, attribute, rebound_earlier)


def _first_cause(layer, weight, changed, cls, attribute, rebound_earlier):
    """The first cause that the layer's code shows, in the order they are most telling."""
    return (
        _rebound_by_this_call(layer, weight, changed)
        or (_found("rebound", cls, ("call",), attribute) if rebound_earlier else None)
        or _built_tensor(layer)
        or _found("unused", cls, ("build", "__init__"), attribute)
    )


def _tensor_attribute(layer, weight):
    """The weight's own name, if the layer's attribute of that name holds a tensor now; else None."""
    import tensorflow as tf

    return weight.name if isinstance(getattr(layer, weight.name, None), tf.Tensor) else None


def _rebound_by_this_call(layer, weight, changed):
    """("rebound", frame) if the traced call rebound the weight's attribute to a tensor, else None."""
    for changed_layer, attribute, before, after in changed:
        if changed_layer is layer and before is weight and not _is_variable(after):
            found = _found("rebound", type(layer), ("call",), attribute)
            if found:
                return found
    return None


def _built_tensor(layer):
    """("built_tensor", frame) for a tensor stored on the layer by build() or __init__, else None."""
    import tensorflow as tf

    for name, value in layer_attributes(layer).items():
        if isinstance(value, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)) and not _is_variable(value):
            found = _found("built_tensor", type(layer), ("build", "__init__"), name)
            if found:
                return found
    return None


def _found(cause, cls, methods, attribute):
    """(cause, frame) if one of ``methods`` of ``cls`` assigns ``self.<attribute>``, else None."""
    frame = _assignment(cls, methods, attribute) if attribute else None
    return (cause, frame) if frame else None


def _is_variable(value):
    import keras
    import tensorflow as tf

    return isinstance(value, (keras.Variable, tf.Variable))


def _assignment(cls, methods, attribute):
    """(file, line, code) of ``self.<attribute> = ...`` in one of ``methods`` of ``cls`` (user code only)."""
    pattern = re.compile(rf"self\.{re.escape(attribute)}\s*=(?!=)")
    for method in methods:
        function = getattr(cls, method, None)
        try:
            lines, start = inspect.getsourcelines(function)
            file = inspect.getsourcefile(function)
        except (TypeError, OSError):
            continue
        if is_library(file):
            continue
        for offset, text in enumerate(lines):
            if pattern.search(text):
                return file, start + offset, text.strip()
    return None
