"""Advice that fixes the code: a culprit's hint, read from the op, what its value feeds, and whose code it is.

Introduced in 03_finding_gradient_killers.ipynb. A hint per op type (``OP_HINTS`` in
:mod:`workbook.finder.hints`) is right for an op on its own; this module sharpens it.
Its first suggestion takes one of three forms, so that a student can apply it as printed:

- "Replace `OLD` with `NEW`": OLD is the call on your line that made the op, NEW the same
  computation with a gradient, written with your own expressions
  (:mod:`workbook.finder.rewrites`);
- "Train on `LOSS`": a metric used as a loss (IoU, Dice, AUC, an edit distance, an
  accuracy) has no useful gradient as a whole; LOSS is its differentiable stand-in
  (:mod:`workbook.losses`), and the metric stays a metric;
- "No gradient can exist ...": a hash, a count, token ids, a decoder's search, a JPEG
  round trip or a discrete metric such as quadratic weighted kappa; the hint says why in
  one line and names what works (a stand-in loss, notebook 06's estimators, or the data pipeline).

When your line does not show the call, the op's general hint is kept. Every fix is applied
as printed to the public cases of tests/finder_fix_corpus.py and
tests/finder_fix_corpus_deep.py, and a GradientTape checks that the gradient then flows.
"""

import re

from workbook.finder.frames import user_frames
from workbook.finder.rewrites import BITWISE_OPS, rewrite

#: Where Keras's own metric functions live: an op made there, by a metric passed as a loss, is a metric's.
METRICS_DIR = "keras/src/metrics/"

#: Each metric: the words that name it (in a function's name or a keras.metrics call), its name,
#: the stand-in loss to train on (code that evaluates to a Keras loss) and that loss's formula.
METRICS = (
    (("boxiou", "bboxiou", "boxesiou", "giou"), "box IoU", "workbook.losses.box_iou",
     "1 - IoU of the corners, with the overlap min(x2) - max(x1) clipped at 0"),
    (("iou", "jaccard", "meaniou"), "IoU", "workbook.losses.soft_iou",
     "1 - sum(y_true * y_pred) / (sum(y_true) + sum(y_pred) - sum(y_true * y_pred)), on the probabilities"),
    (("dice",), "Dice", "workbook.losses.soft_dice",
     "1 - 2 * sum(y_true * y_pred) / (sum(y_true) + sum(y_pred)), on the probabilities"),
    (("f1", "fbeta", "fscore"), "F1", "workbook.losses.soft_dice",
     "1 - soft F1, 1 - 2 * sum(y_true * y_pred) / (sum(y_true) + sum(y_pred)), on the probabilities"),
    (("auc", "roc"), "AUC", "workbook.losses.pairwise_ranking",
     "the mean of softplus(-(score of a positive - score of a negative)) over the pairs AUC counts"),
    (("wer", "cer", "edit", "levenshtein"), "an edit distance (word or character error rate)", "workbook.losses.ctc",
     "CTC on the per-step logits, the last class the blank"),
    (("directional", "direction", "mda"), "directional accuracy", "workbook.losses.smooth_directional",
     "mse + mean(relu(-sign(true change) * predicted change)), growing with every move predicted the wrong way"),
    (("precision", "recall"), "precision or recall", None,
     "cross-entropy on the probabilities, whose minimum is the same prediction"),
    (("accuracy", "acc"), "an accuracy", None,
     "cross-entropy on the probabilities, whose minimum is the same prediction"),
)  # fmt: skip
#: Discrete metrics no stand-in of the same formula makes smooth: they count agreements of hard labels.
HONEST_METRICS = (
    (("kappa", "qwk", "cohen"), "quadratic weighted kappa", "workbook.losses.soft_qwk",
     "1 - kappa with the confusion matrix made of the probabilities"),
)  # fmt: skip
#: Ops whose value is a metric of discrete predictions, whatever the function is called.
METRIC_OPS = {"EditDistance": 5}  # the index into METRICS
GATHER_OPS = {"GatherV2", "ResourceGather", "GatherNd", "ResourceGatherNd"}
CHOICE_OPS = {"ArgMax", "ArgMin"}
HASH_OPS = {"StringToHashBucketFast", "StringToHashBucketStrong", "StringToHashBucket"}
COUNT_OPS = {"Bincount", "DenseBincount", "RaggedBincount", "SparseBincount"}
IMAGE_CODEC_OPS = {"EncodeJpeg", "EncodeJpegVariableQuality", "EncodePng"}
DECODER_OPS = {"CTCBeamSearchDecoder", "CTCGreedyDecoder"}
#: How far forward the integer step is followed (ops), enough for a cast, a clip and a preprocessing layer.
FOLLOW_LIMIT = 40


def advise(op, hint, code=None):
    """The sharpest hint for culprit ``op``: ``hint`` (its op type's or reason's) unless more is known.

    ``code`` is the line of your code that made the op, when the finder found one: a fix
    that can be written in your own code starts "Replace `OLD` with `NEW`"; a metric used
    as a loss gets "Train on `LOSS`"; an op no gradient can pass starts "No gradient can exist".
    """
    found = _metric(op, code)
    if found is not None:
        return _metric_hint(found, op)
    uses = _integer_uses(op)
    honest = _honest(op, uses)
    if honest is not None:
        return honest
    return rewrite(op, code, uses) or _general(op, hint, uses)


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
    """The "No gradient can exist" hint for an op whose value no surrogate can pass on, or None."""
    if op.type in DECODER_OPS:
        return HONEST["decoder"]
    for ops, kind in ((HASH_OPS, "hash"), (COUNT_OPS, "count"), (IMAGE_CODEC_OPS, "jpeg")):
        if uses & ops:
            return HONEST[kind]
    if op.type == "Cast" and ("embedding" in uses or "ResourceGather" in uses):
        return HONEST["ids"]
    if op.type in ("Multinomial", "StatelessMultinomial") and "OneHot" not in uses:
        return HONEST["sample"]
    return None


HONEST = {
    "decoder": (
        "No gradient can exist through a CTC decoder (a beam or greedy search): it picks whole sequences, and "
        "its score belongs to that choice. Train on `workbook.losses.ctc` (CTC on the per-step logits, the last "
        "class the blank), and decode only to predict and to measure."
    ),
    "hash": (
        "No gradient can exist through a hash: its bucket jumps when the value hashed changes at all. Hash "
        "in the data pipeline (dataset.map, before the model), and let the model learn from the hashed "
        "buckets' embeddings, or from the float value itself."
    ),
    "count": (
        "No gradient can exist through a count (CategoryEncoding, bincount): integer ids are counted, and a "
        "count moves in whole steps. Count in the data pipeline; or pick the ids as one-hot rows with "
        "workbook.sample_latent(logits, 'categorical', 'straight_through') and sum the rows, a count with a gradient."
    ),
    "jpeg": (
        "No gradient can exist through a JPEG round trip: encode_jpeg makes bytes. Apply the JPEG step in the "
        "data pipeline (as an augmentation of the inputs), or pass the gradient around the whole round trip: "
        "x + stop_gradient(jpeg(x) - x), with jpeg(x) the decoded image as floats."
    ),
    "ids": (
        "No gradient can exist through token ids made from a float: an Embedding looks rows up by id, and an "
        "id moves in whole steps. Make the ids in the data pipeline; or have the model output logits over "
        "the vocabulary, sample one-hot rows with workbook.sample_latent(logits, 'categorical', "
        "'gumbel_softmax_st') and look up by a product: ops.matmul(one_hot, embedding.embeddings)."
    ),
    "sample": (
        "No gradient can exist through a sampled index: the draw is a choice. Sample a one-hot with notebook "
        "06's estimators instead: z, log_prob = workbook.sample_latent(logits, 'categorical', "
        "'gumbel_softmax_st', tau=0.5) gives it a relaxed gradient ('straight_through' and 'score_function', "
        "which needs log_prob in the loss, are the others)."
    ),
}


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
    return (
        f"Replace `{found.group(0).split('#')[0].strip()}` with `pass`, and replace `{attribute}` with "
        f"`{expression}`: a tensor computed once from the weight is a constant to every call; computed in "
        f"call(), from the weight, it passes the gradient back. {hint}"
    )


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


TOKENS_HINT = (
    "argmax picks discrete tokens, and their ids go into an embedding lookup: neither carries a "
    "gradient. Use a straight-through one-hot (notebook 06): soft = softmax(logits); one_hot = "
    "soft + stop_gradient(one_hot(argmax(logits)) - soft), and look up by a product instead of ids: "
    "ops.matmul(one_hot, embedding.embeddings). For sampled tokens: "
    "workbook.sample_latent(logits, 'categorical', 'gumbel_softmax_st')."
)
INDEX_AS_NUMBER_HINT = (
    "argmax's index is used as a number (a class map, a mask): use the expected index, with the hard "
    "index forward: soft_index = sum(softmax(x) * arange(classes), axis=-1); "
    "soft_index + stop_gradient(cast(argmax(x), float) - soft_index). For a one-hot instead: "
    "soft + stop_gradient(hard - soft) with soft = softmax(x)."
)
GRID_HINT = (
    "These integers are positions to read from (a sampling grid), and a position made by rounding has "
    "no gradient: interpolate instead. With x0 = floor(x) and i0 = cast(x0, int32), read both "
    "neighbours and weigh them by (x0 + 1 - x) and (x - x0), computed from the float x: "
    "gather(v, i0) * (x0 + 1 - x) + gather(v, i0 + 1) * (x - x0) (in 2-D, the four corners, as a "
    "spatial transformer's bilinear sampler does)."
)


def _metric_hint(found, op):
    (_, name, loss, formula), honest = found
    if honest:
        return (
            f"No gradient can exist through {name}: it counts agreements of hard labels, which move in whole "
            f"steps. Train on `{loss}` ({formula}, lowest at the perfect prediction), and keep {name} as a "
            "metric (compile(metrics=...))."
        )
    loss = loss or _cross_entropy(op)
    return (
        f"{name[0].upper()}{name[1:]} is a metric used as a loss: it counts hard decisions, so as a whole it has "
        "no useful gradient, and a straight-through on this one op would leave the next one cut. Train on "
        f"`{loss}` ({formula}), its differentiable stand-in, and keep {name} as a metric (compile(metrics=...))."
    )


def _cross_entropy(op):
    """The Keras cross-entropy for the predictions an accuracy reads: one probability, or one per class."""
    if op.type in CHOICE_OPS and op.inputs[0].shape.rank and op.inputs[0].shape[-1] not in (None, 1):
        return "keras.losses.CategoricalCrossentropy()"
    return "keras.losses.BinaryCrossentropy()"


def _bitwise_hint(ops):
    names = ", ".join(ops)
    return (
        f"The integer goes on through {names} before it is a float again, so a straight-through on this "
        "op alone leaves the next one cut. Put the whole integer step inside one straight-through: "
        "x + stop_gradient(f(x) - x), where f(x) is everything from the cast to the cast back to float "
        "(shaped like x)."
    )


def _metric(op, code=None):
    """(METRICS or HONEST_METRICS entry, honest) for an op made by a metric's code or feeding a metric op; else None."""
    for consumer in _forward(op):
        if consumer.type in METRIC_OPS:
            return METRICS[METRIC_OPS[consumer.type]], False
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
