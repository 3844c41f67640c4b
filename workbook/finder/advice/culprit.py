"""Advice that fixes the code: a culprit's hint, read from the op, what its value feeds, and whose code it is.

Introduced in 03_finding_gradient_killers.ipynb. A hint per op type (``OP_HINTS`` in
:mod:`workbook.finder.advice.words`) is right for an op on its own; this module sharpens it.
Its first suggestion takes one of three forms, so that a student can apply it as printed:

- "Replace `OLD` with `NEW`": OLD is the call on your line that made the op, NEW the same
  computation with a gradient, written with your own expressions
  (:mod:`workbook.finder.advice.rewrites`);
- "Train on `LOSS`": a metric used as a loss (IoU, Dice, AUC, an edit distance, an
  accuracy) has no useful gradient as a whole; LOSS is its differentiable stand-in
  (:mod:`workbook.losses`), and the metric stays a metric;
- an honest hint, in one of two kinds. "No gradient can exist ..." where nothing of the
  parameters reaches the output as a function that could be differentiated (a hash, token
  ids, a sampled index); "Zero almost everywhere ..." for a piecewise-constant step (a count,
  a decoder's search, a JPEG round trip, a metric of hard labels such as quadratic weighted
  kappa), whose true gradient is 0 wherever it exists, as round's is: a surrogate or a smooth
  stand-in there is a choice. Each says why in one line and names what works (a stand-in
  loss, notebook 06's estimators, or the data pipeline).

:func:`advise_all` lists every rewrite to try, the sharpest first; before the report shows one,
:mod:`workbook.finder.advice.checked` applies each to your code and runs your example, and
the first that works is shown ("Checked on your example"). When your line does not show the
call, the op's general hint is kept. The words of every
hint are in :mod:`workbook.finder.advice.words`; this module chooses among them. Every fix is applied
as printed to the public cases of tests/finder_fix_corpus.py and
tests/finder_fix_corpus_deep.py, and a GradientTape checks that the gradient then flows.
"""

import re

from workbook.finder.advice.rewrites import ALTERNATIVES, BITWISE_OPS, rewrite
from workbook.finder.advice.words import (
    BITWISE_HINT,
    BUILT_TENSOR_FIX,
    GRID_HINT,
    HONEST_METRIC_HINT,
    HONEST_METRICS,
    INDEX_AS_NUMBER_HINT,
    METRIC_AS_LOSS_HINT,
    METRICS,
    NO_GRADIENT_CAN_EXIST,
    TOKENS_HINT,
)
from workbook.finder.trace.frames import user_frames

#: Where Keras's own metric functions live: an op made there, by a metric passed as a loss, is a metric's.
METRICS_DIR = "keras/src/metrics/"

#: Ops whose value is a metric of discrete predictions, whatever the function is called.
METRIC_OPS = {"EditDistance": "levenshtein"}  # a word that names its entry of METRICS
GATHER_OPS = {"GatherV2", "ResourceGather", "GatherNd", "ResourceGatherNd"}
CHOICE_OPS = {"ArgMax", "ArgMin"}
HASH_OPS = {"StringToHashBucketFast", "StringToHashBucketStrong", "StringToHashBucket"}
COUNT_OPS = {"Bincount", "DenseBincount", "RaggedBincount", "SparseBincount"}
IMAGE_CODEC_OPS = {"EncodeJpeg", "EncodeJpegVariableQuality", "EncodePng"}
DECODER_OPS = {"CTCBeamSearchDecoder", "CTCGreedyDecoder"}
#: Random draws of a value with no gradient (gamma and normal draws have reparameterised gradients: not here).
SAMPLED_VALUE_OPS = {"StatelessRandomBinomial", "RandomPoisson", "RandomPoissonV2", "StatelessRandomPoisson"}
#: How far forward the integer step is followed (ops), enough for a cast, a clip and a preprocessing layer.
FOLLOW_LIMIT = 40


def advise(op, hint, code=None):
    """The sharpest hint for culprit ``op``: ``hint`` (its op type's or reason's) unless more is known.

    ``code`` is the line of your code that made the op, when the finder found one: a fix
    that can be written in your own code starts "Replace `OLD` with `NEW`"; a metric used
    as a loss gets "Train on `LOSS`"; an op no gradient can pass starts "No gradient can exist", a
    piecewise-constant step whose true gradient is 0 almost everywhere "Zero almost everywhere".
    """
    found = _metric(op, code)
    if found is not None:
        return _metric_hint(found, op)
    uses = _integer_uses(op)
    honest = _honest(op, uses)
    if honest is not None:
        return honest
    return rewrite(op, code, uses) or _general(op, hint, uses)


def advise_all(op, hint, code=None):
    """Every fix to try for culprit ``op``, the sharpest first (:func:`advise`), then other rewrites of your line.

    :mod:`workbook.finder.advice.checked` applies them in this order to your code and shows the
    first that passes on your example.
    """
    first = advise(op, hint, code)
    uses = _integer_uses(op) if code else set()
    others = [fix(op, code, uses) for fix in ALTERNATIVES.get(op.type, ())] if code else []
    return list(dict.fromkeys([first, *(text for text in others if text)]))


def _general(op, hint, uses):
    """The hint when your line does not show the call to rewrite: what the integer step does, in words."""
    if uses & BITWISE_OPS:
        return _bitwise_hint(sorted(uses & BITWISE_OPS))
    if op.type in CHOICE_OPS and ("ResourceGather" in uses or "embedding" in uses):
        return TOKENS_HINT
    if op.type in CHOICE_OPS and "to float" in uses:
        return INDEX_AS_NUMBER_HINT
    if op.type not in CHOICE_OPS and uses & GATHER_OPS:
        return GRID_HINT
    return hint


def _honest(op, uses):
    """The honest hint (no gradient can exist, or zero almost everywhere) for an op of that kind, or None."""
    if op.type in DECODER_OPS:
        return NO_GRADIENT_CAN_EXIST["decoder"]
    for ops, kind in ((HASH_OPS, "hash"), (COUNT_OPS, "count"), (IMAGE_CODEC_OPS, "jpeg")):
        if uses & ops:
            return NO_GRADIENT_CAN_EXIST[kind]
    if op.type == "Cast" and ("embedding" in uses or "ResourceGather" in uses):
        return NO_GRADIENT_CAN_EXIST["ids"]
    if op.type in ("Multinomial", "StatelessMultinomial") and "OneHot" not in uses:
        return NO_GRADIENT_CAN_EXIST["sample"]
    if op.type in SAMPLED_VALUE_OPS:
        return NO_GRADIENT_CAN_EXIST["sampled_value"]
    return None


def advise_cause(cause, hint, code=None):
    """The hint for a disconnected weight whose ``cause`` the finder read on line ``code`` (a :data:`CAUSES` key).

    A tensor built once from the weight in build() (``self.kernel = f(self.w)``) is computed
    in call() instead: the line goes, and its one use takes the expression. Other causes,
    or a line that is not such an assignment, keep ``hint``.
    """
    found = re.fullmatch(r"(self\.\w+)\s*=\s*(.+?)\s*(#.*)?", code or "")
    if cause != "built_tensor" or found is None:
        return hint
    attribute, expression = found.group(1), found.group(2)
    line = found.group(0).split("#")[0].strip()
    return BUILT_TENSOR_FIX.format(line=line, attribute=attribute, expression=expression, hint=hint)


def advise_untraceable(hint, code=None):
    """The hint for code TensorFlow could not trace (numpy, .numpy()) on line ``code``: a named metric's stand-in.

    A metric computed in numpy (sklearn's roc_auc_score, cohen_kappa_score) cannot be made
    traceable into a useful loss: the stand-in it names is the fix. Otherwise ``hint``.
    """
    words = set(re.split(r"[^a-z0-9]+", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", code or "").lower()))
    for table, honest in ((HONEST_METRICS, True), (METRICS, False)):
        for metric in table:
            if metric[2] and words & set(metric[0]):
                return _metric_hint((metric, honest), None)
    return hint


def _metric_hint(found, op):
    (_, name, loss, formula), honest = found
    if honest:
        return HONEST_METRIC_HINT.format(name=name, loss=loss, formula=formula)
    loss = loss or _cross_entropy(op)
    return METRIC_AS_LOSS_HINT.format(Name=name[0].upper() + name[1:], name=name, loss=loss, formula=formula)


def _cross_entropy(op):
    """The Keras cross-entropy for the predictions an accuracy reads: one probability, or one per class."""
    if op.type in CHOICE_OPS and op.inputs[0].shape.rank and op.inputs[0].shape[-1] not in (None, 1):
        return "keras.losses.CategoricalCrossentropy()"
    return "keras.losses.BinaryCrossentropy()"


def _bitwise_hint(ops):
    return BITWISE_HINT.format(names=", ".join(ops))


def _metric(op, code=None):
    """(METRICS or HONEST_METRICS entry, honest) for an op made by a metric's code or feeding a metric op; else None."""
    for consumer in _forward(op):
        if consumer.type in METRIC_OPS:
            return next(metric for metric in METRICS if METRIC_OPS[consumer.type] in metric[0]), False
    words = _metric_words(op, code)
    for table, honest in ((HONEST_METRICS, True), (METRICS, False)):
        for metric in table:
            if words & set(metric[0]):
                return metric, honest
    return None


def _metric_words(op, code):
    """The words of the functions that made ``op``: yours, Keras's metrics', and a keras.metrics call on your line."""
    names = [frame.name for frame in user_frames(op.traceback)]
    names += [frame.name for frame in op.traceback or () if METRICS_DIR in frame.filename.replace("\\", "/")]
    names += re.findall(r"metrics\.(\w+)", code or "")
    words = set()
    for name in names:
        parts = [part for part in re.split(r"[^a-z0-9]+", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()) if part]
        words.update(parts)
        words.update(first + second for first, second in zip(parts, parts[1:], strict=False))  # box_iou: boxiou
    return words


def _forward(op):
    """The ops that use ``op``'s value while it is not a float, breadth first, up to FOLLOW_LIMIT.

    A cast to float whose value is cast back to an integer (as a preprocessing layer does
    with its input) is followed to that cast back.
    """
    seen, queue, found = {op}, [op], []
    while queue and len(found) < FOLLOW_LIMIT:
        current = queue.pop(0)
        for consumer in _next(op, current):
            if consumer not in seen:
                seen.add(consumer)
                found.append(consumer)
                queue.append(consumer)
    return found


def _next(op, current):
    """The consumers of ``current`` that carry the integer step on."""
    floating = current is not op and all(t.dtype.is_floating for t in current.outputs)
    for tensor in current.outputs:
        for consumer in tensor.consumers():
            if not floating or (current.type == "Cast" and consumer.type == "Cast"):
                yield consumer


def _integer_uses(op):
    """What the integer step after ``op`` does: the op types it meets, 'to float', 'embedding'."""
    uses = set()
    for consumer in _forward(op):
        uses.add(consumer.type)
        if consumer.type == "Cast" and consumer.outputs[0].dtype.is_floating:
            uses.add("to float")
        if consumer.type in GATHER_OPS and "embedding" in consumer.name.lower():
            uses.add("embedding")
    return uses
