"""Fixes written in your own code: "Replace `OLD` with `NEW`", read from the line that made the op.

Introduced in 03_finding_gradient_killers.ipynb. Each function here takes the culprit op,
the line of your code that made it (``code``) and what its integer value goes on to do
(``uses``, from :mod:`workbook.finder.advice.culprit`), finds the call that made the op on that
line, and returns the hint that replaces it: NEW keeps the forward value and lets the
gradient through, written with your own argument expressions and names that run where
``workbook``, ``keras``, ``ops`` (keras.ops) and ``tf`` are imported. When the call is not
on the line (a call split over lines, an op made inside a library), it returns None and
the op's general hint is used. tests/finder_fix_corpus_deep.py applies each one as printed.
The words of each fix (why it keeps the forward value and lets the gradient through) are
in :mod:`workbook.finder.advice.words`.
"""

import re

from workbook.finder.advice.code_line import calls, comparison, named, wrap
from workbook.finder.advice.words import REPLACE, REPLACE_TWO, REWRITE_WHY
from workbook.finder.trace.frames import user_frame

SURROGATE_OF = {"Round": "round_ste", "Floor": "floor_ste", "Sign": "sign_ste"}
STEP_NAMES = {"Round": {"round"}, "Rint": {"rint", "round"}, "Floor": {"floor"}, "Ceil": {"ceil"}, "Sign": {"sign"}}
GATHER_OPS = {"GatherV2", "ResourceGather", "GatherNd", "ResourceGatherNd"}
CASTS = {"cast", "to_float", "to_float32"}
WHERES = {"where", "switch"}
COMPARISON_CALLS = {"greater": "Greater", "greater_equal": "GreaterEqual", "less": "Less", "less_equal": "LessEqual"}
STEP = "workbook.SURROGATES['step_sigmoid']"


def replace(old, new, why):
    """The hint text of a replacement (``REPLACE``), ``why`` one of ``REWRITE_WHY``: its first code is OLD.

    NEW is parenthesized unless it is one call, so that it means the same wherever OLD stood.
    """
    return REPLACE.format(old=old, new=wrap(new), why=why)


def step_op(op, code, uses):
    """round, floor, ceil, rint, sign: the same call through a straight-through surrogate."""
    found = [call for call in named(code, STEP_NAMES[op.type]) if len(call.args) == 1 and not call.keywords]
    if not found:
        return None
    call = found[-1]
    if uses & GATHER_OPS:
        return grid(code, call)
    x = call.args[0]
    surrogate = SURROGATE_OF.get(op.type)
    new = (
        f"workbook.SURROGATES['{surrogate}']({x})"
        if surrogate
        else f"{wrap(x)} + ops.stop_gradient({call.text} - {wrap(x)})"
    )
    return replace(call.text, new, REWRITE_WHY["step"].format(name=call.name))


def grid(code, inner):
    """A position rounded and used to read (gather) from a 1-D signal: read both neighbours and interpolate."""
    for call in named(code, {"gather"}):
        if inner.text in (call.argument(1, "indices") or "") and len(call.args) == 2 and not call.keywords:
            signal, x = call.args[0], wrap(inner.args[0])
            low = f"tf.floor({x})"
            index = f"tf.cast({low}, tf.int32)"
            below = f"tf.gather({signal}, {index}) * ({low} + 1.0 - {x})"
            new = f"{below} + tf.gather({signal}, {index} + 1) * ({x} - {low})"
            return replace(call.text, new, REWRITE_WHY["grid"])
    return None


def cast_op(op, code, uses):
    """A float cast to an integer: the cast_int surrogate, or a straight-through around a bitwise step."""
    call = _int_cast(op, code)
    if call is None:
        return None
    if uses & BITWISE_OPS:
        return bitwise(op, call)
    if uses & GATHER_OPS:
        return None
    new = f"workbook.SURROGATES['cast_int_ste']({call.args[0]})"
    return replace(call.text, new, REWRITE_WHY["cast"])


def _int_cast(op, code):
    """The call on ``code`` that casts a float to an integer, as ``op`` does, or None."""
    if not op.inputs or not op.inputs[0].dtype.is_floating or op.outputs[0].dtype.is_floating:
        return None
    found = [call for call in named(code, {"cast"}) if "int" in (call.argument(1, "dtype") or "") and call.args]
    return found[-1] if found else None


BITWISE_OPS = {"BitwiseAnd", "BitwiseOr", "BitwiseXor", "Invert", "LeftShift", "RightShift", "PopulationCount"}


def bitwise(op, cast):
    """The integer goes through bitwise ops before its cast back to float: a straight-through around that whole step."""
    back = _cast_back(op)
    if back is None:
        return None
    x = wrap(cast.args[0])
    new = f"{x} + ops.stop_gradient({back.text} - {x})"
    return replace(back.text, new, REWRITE_WHY["bitwise"])


def _cast_back(op):
    """The call on your line that casts the integer step's result back to a float, or None."""
    back = _downstream(op, lambda c: c.type == "Cast" and c.outputs[0].dtype.is_floating)
    if back is None:
        return None
    found = [c for c in named(user_frame(back.traceback)[2], {"cast"}) if "float" in (c.argument(1, "dtype") or "")]
    return found[0] if found else None


def _downstream(op, wanted):
    """The first op after ``op`` (breadth first, through its integer values) for which ``wanted`` holds, or None."""
    seen, queue = {op}, [op]
    while queue:
        current = queue.pop(0)
        for consumer in (c for t in current.outputs if not t.dtype.is_floating for c in t.consumers()):
            if consumer in seen:
                continue
            if wanted(consumer):
                return consumer
            seen.add(consumer)
            queue.append(consumer)
    return None


def comparison_op(op, code, uses):
    """A comparison cast to a float (or picking in a where): the step through a sigmoid surrogate."""
    for call in calls(code):
        condition = call.argument(0, "x" if call.name in CASTS else "condition")
        step = _step(condition) if call.args else None
        if step is None:
            continue
        if call.name in CASTS and "float" in (call.argument(1, "dtype") or "float"):
            return replace(call.text, step, REWRITE_WHY["comparison"])
        if call.name in WHERES and len(call.args) == 3:
            then, otherwise = wrap(call.args[1]), wrap(call.args[2])
            return replace(call.text, f"{step} * {then} + (1.0 - {step}) * {otherwise}", REWRITE_WHY["comparison"])
    return None


def _step(condition):
    """The surrogate step for a comparison's text ("a > b", "tf.greater(a, b)"), or None."""
    if condition is None:
        return None
    parts = comparison(condition)
    if parts is None:
        found = calls(condition)
        if not found or found[0].text != condition.strip() or found[0].name not in COMPARISON_CALLS:
            return None
        parts = (found[0].args[0], COMPARISON_CALLS[found[0].name], found[0].args[1])
    left, kind, right = parts
    if kind.startswith("Less"):
        left, right = right, left
    difference = wrap(left) if right.strip() in ("0", "0.0") else f"{wrap(left)} - {wrap(right)}"
    return f"{STEP}({difference})"


def choice_op(op, code, uses):
    """argmax / argmin made a one-hot, a lookup or a number: the same through a softmax, straight-through."""
    found = _choice(op, code)
    if found is None:
        return None
    choice, soft, classes = found
    for fix in (_one_hot, lambda *a: _lookup(*a, classes, uses), lambda *a: _index(*a, classes)):
        fixes = [text for text in (fix(call, choice, soft) for call in calls(code)) if text]
        if fixes:
            return fixes[0]
    return None


def _choice(op, code):
    """(the argmax / argmin call on ``code``, the softmax it picks from, the number of classes), or None."""
    found = [call for call in named(code, {op.type.lower()}) if call.args]
    classes = op.inputs[0].shape[-1] if op.inputs[0].shape.rank else None
    if not found or not classes or not _last_axis(op):
        return None
    choice = found[-1]
    logits = choice.args[0] if op.type == "ArgMax" else f"-{wrap(choice.args[0])}"
    return choice, f"ops.softmax({logits})", classes


def _last_axis(op):
    import tensorflow as tf

    axis = tf.get_static_value(op.inputs[1])
    rank = op.inputs[0].shape.rank
    return axis is not None and rank is not None and int(axis) % rank == rank - 1


def _one_hot(call, choice, soft):
    if call.name != "one_hot" or not call.args or call.args[0] != choice.text:
        return None
    new = f"{soft} + ops.stop_gradient({call.text} - {soft})"
    return replace(call.text, new, REWRITE_WHY["one_hot"])


def _lookup(call, choice, soft, classes, uses):
    if call.name == "gather" and call.argument(1, "indices") == choice.text and len(call.args) == 2:
        table = call.args[0]
    elif call.args == (choice.text,) and not call.keywords and "embedding" in uses:
        table = f"{call.callee}.embeddings"
    else:
        return None
    one_hot = f"{soft} + ops.stop_gradient(ops.one_hot({choice.text}, {classes}) - {soft})"
    return replace(call.text, f"ops.matmul({one_hot}, {table})", REWRITE_WHY["lookup"])


def _index(call, choice, soft, classes):
    if call.name not in CASTS or choice.text not in (call.args[0] if call.args else ""):
        return None
    if "float" not in (call.argument(1, "dtype") or "float"):
        return None
    expected = f"ops.sum({soft} * ops.arange({classes}, dtype='float32'), axis=-1)"
    soft_value = call.text.replace(choice.text, expected)
    new = f"{soft_value} + ops.stop_gradient({call.text} - {soft_value})"
    return replace(call.text, new, REWRITE_WHY["index"])


def shuffle_op(op, code, uses):
    """tf.random.shuffle of values: shuffle the positions and gather, which passes the gradient back."""
    found = [call for call in named(code, {"shuffle"}) if call.args]
    if not found:
        return None
    call = found[-1]
    x = call.args[0]
    rest = "".join(f", {a}" for a in call.args[1:]) + "".join(f", {k}={v}" for k, v in call.keywords.items())
    new = f"tf.gather({x}, tf.random.shuffle(tf.range(tf.shape({x})[0]){rest}))"
    return replace(call.text, new, REWRITE_WHY["shuffle"])


def area_op(op, code, uses):
    """A resize by method='area' to a whole fraction of the size: average pooling, the same values."""
    factor = _area_factor(op)
    if factor is None:
        return None
    why = REWRITE_WHY["area"]
    found = [call for call in named(code, {"resize", "resize_area"}) if call.args]
    if found:
        return replace(found[-1].text, f"tf.nn.avg_pool2d({found[-1].args[0]}, {factor}, {factor}, 'VALID')", why)
    layers = [call for call in named(code, {"Resizing"}) if "area" in call.keywords.get("interpolation", "")]
    return replace(layers[-1].text, f"keras.layers.AveragePooling2D({factor})", why) if layers else None


def _area_factor(op):
    """The pooling size "(rows, columns)" that an area resize by ``op`` equals, or None."""
    before, after = op.inputs[0].shape, op.outputs[0].shape
    if before.rank != 4 or None in (before[1], before[2], after[1], after[2]):
        return None
    if before[1] % after[1] or before[2] % after[2]:
        return None
    return f"({before[1] // after[1]}, {before[2] // after[2]})"


def bincount_op(op, code, uses):
    """bincount with weights sums the weights per id: unsorted_segment_sum does the same, with a gradient."""
    found = [call for call in named(code, {"bincount"}) if call.args and call.argument(1, "weights")]
    size = op.outputs[0].shape[-1] if op.outputs[0].shape.rank else None
    if not found or not size:
        return None
    call = found[-1]
    new = f"tf.math.unsorted_segment_sum({call.argument(1, 'weights')}, {call.args[0]}, {size})"
    return replace(call.text, new, REWRITE_WHY["bincount"])


def same_shape_op(op, code, uses):
    """An image op with no gradient whose output is shaped like its input: a straight-through around it."""
    if not op.inputs or op.inputs[0].shape != op.outputs[0].shape or not op.outputs[0].dtype.is_floating:
        return None
    name = _snake(op.type)
    found = [call for call in named(code, {name, re.sub(r"_?v\d+$", "", name)}) if call.args]
    if not found:
        return None
    call = found[-1]
    x = wrap(call.args[0])
    why = REWRITE_WHY["same_shape"].format(op=op.type)
    return replace(call.text, f"{x} + ops.stop_gradient({call.text} - {x})", why)


def _snake(op_type):
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", op_type).lower()


def sampling_op(op, code, uses):
    """A sampled index turned into a one-hot: notebook 06's relaxed one-hot sample, in two replacements."""
    found = [call for call in named(code, {"categorical", "multinomial"}) if call.args]
    one_hot = _one_hot_of_sample(op)
    if not found or one_hot is None:
        return None
    call = found[-1]
    old = call.text
    rest = code[call.start + len(old) :]
    if rest.startswith("["):
        old += rest[: rest.index("]") + 1]
    seed = call.argument(3, "seed")
    new = f"workbook.sample_latent({call.args[0]}, 'categorical', 'gumbel_softmax_st', tau=0.5"
    new += f", seed={seed})[0]" if seed else ")[0]"
    return REPLACE_TWO.format(
        old=old, new=new, second_old=one_hot.text, second_new=one_hot.args[0], why=REWRITE_WHY["sampling"]
    )


def _one_hot_of_sample(op):
    """The one_hot(...) call on your line that turns the sampled index into a one-hot, or None."""
    one_hot = _downstream(op, lambda c: c.type == "OneHot")
    found = named(user_frame(one_hot.traceback)[2], {"one_hot"}) if one_hot is not None else []
    return found[0] if found and re.fullmatch(r"\w+", found[0].args[0]) else None


def cast_index_op(op, code, uses):
    """A float cast to an integer that a one_hot takes as its index: the same whole numbers as a float, and a
    straight-through one-hot of that float (the one-hot forward, a softmax of the distance to each class backward)."""
    call = _int_cast(op, code)
    one_hot = _downstream(op, lambda c: c.type == "OneHot")
    if call is None or one_hot is None:
        return None
    found = [c for c in named(user_frame(one_hot.traceback)[2], {"one_hot"}) if c.args]
    classes = found[0].argument(1, "num_classes") if found else None
    if not classes or found[0].text in call.text or call.text in found[0].text:
        return None
    index, old = found[0].args[0], found[0].text
    soft = f"ops.softmax(-ops.square(ops.expand_dims({index}, -1) - ops.arange({classes}, dtype='float32')))"
    hard = f"ops.one_hot(ops.cast({index}, 'int32'), {classes})"
    return REPLACE_TWO.format(
        old=call.text,
        new=f"workbook.SURROGATES['cast_int_ste']({call.args[0]})",
        second_old=old,
        second_new=f"{soft} + ops.stop_gradient({hard} - {soft})",
        why=REWRITE_WHY["cast_index"],
    )


def whole_step_op(op, code, uses):
    """A step (round, floor, a cast to an integer) cast to an integer and back to a float on your line: one
    straight-through around the whole step, so that no cast inside it is left cutting."""
    step = _int_cast(op, code) if op.type == "Cast" else _step_call(op, code)
    back = _cast_back_around(code, step) if step is not None else None
    if back is None:
        return None
    x = wrap(step.args[0])
    return replace(back.text, f"{x} + ops.stop_gradient({back.text} - {x})", REWRITE_WHY["whole_step"])


def _step_call(op, code):
    """The last call on ``code`` of the step function that made ``op`` (round, floor, ...), or None."""
    found = [call for call in named(code, STEP_NAMES.get(op.type, ())) if len(call.args) == 1]
    return found[-1] if found else None


def _cast_back_around(code, step):
    """The cast to a float on ``code`` around a cast to an integer around ``step``, or None."""
    casts = named(code, {"cast"})
    inside = [c.text for c in _casts_to(casts, "int") if step.text in c.text]
    back = [c for c in _casts_to(casts, "float") if any(text in c.text and text != c.text for text in inside)]
    return back[0] if back else None


def _casts_to(casts, kind):
    """The calls of ``casts`` whose dtype names ``kind`` ("int", "float")."""
    return [c for c in casts if kind in (c.argument(1, "dtype") or "")]


#: Rewrites to try after the first, per op type, when the first does not pass on your example.
ALTERNATIVES = {
    "Cast": (cast_index_op, whole_step_op),
    **dict.fromkeys(("Round", "Rint", "Floor", "Ceil"), (whole_step_op,)),
}

#: The rewrite for each op type; each returns a hint, or None when your line does not show the call.
REWRITES = {
    "Round": step_op,
    "Rint": step_op,
    "Floor": step_op,
    "Ceil": step_op,
    "Sign": step_op,
    "Cast": cast_op,
    "Greater": comparison_op,
    "GreaterEqual": comparison_op,
    "Less": comparison_op,
    "LessEqual": comparison_op,
    "ArgMax": choice_op,
    "ArgMin": choice_op,
    "RandomShuffle": shuffle_op,
    "ResizeArea": area_op,
    "Bincount": bincount_op,
    "DenseBincount": bincount_op,
    "Multinomial": sampling_op,
    "StatelessMultinomial": sampling_op,
}


def rewrite(op, code, uses):
    """The "Replace `OLD` with `NEW`" hint for ``op`` made on line ``code``, or None."""
    if not code:
        return None
    rewriter = REWRITES.get(op.type, same_shape_op)
    try:
        return rewriter(op, code, uses)
    except (IndexError, ValueError, TypeError):  # a line read wrongly gives the general hint, never an error
        return None
