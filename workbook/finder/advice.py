"""Advice that fixes the code: a culprit's hint, read from the op, what its value feeds, and whose code it is.

Introduced in 03_finding_gradient_killers.ipynb. A hint per op type (``OP_HINTS`` in
:mod:`workbook.finder.hints`) is right for an op on its own; this module sharpens it where
the op is one step of something larger:

- a metric used as a loss (IoU, Dice, AUC, an edit distance, an accuracy), named by the
  functions of your code that made the op or by the op its value feeds: the metric has
  no useful gradient as a whole, and the hint names its differentiable stand-in;
- an integer that goes on through bitwise ops, a gather's positions, or an embedding's
  token ids before it becomes a float again: the fix spans that whole integer step.

Every fix named here is applied as written to the public cases of
tests/finder_fix_corpus.py, and a GradientTape checks that the gradient then flows.
"""

import re

from workbook.core.code_origin import user_frames

#: Each metric's words in a function name, and what to train on instead.
METRICS = (
    (
        ("iou", "jaccard"),
        "IoU",
        "a soft IoU on the probabilities, 1 - sum(y_true * y_pred) / (sum(y_true) + sum(y_pred) - "
        "sum(y_true * y_pred))",
    ),
    (
        ("dice", "f1"),
        "Dice",
        "a soft Dice on the probabilities, 1 - 2 * sum(y_true * y_pred) / (sum(y_true) + sum(y_pred))",
    ),
    (
        ("auc", "roc"),
        "AUC",
        "a pairwise ranking loss: the mean of softplus(-(score of a positive - score of a negative)) over "
        "the (positive, negative) pairs, the smooth form of the pairs AUC counts",
    ),
    (
        ("wer", "cer", "edit", "levenshtein"),
        "an edit distance (word or character error rate)",
        "CTC on the per-step logits: tf.nn.ctc_loss(labels, logits, label_length, logit_length, "
        "logits_time_major=False, blank_index=-1), or keras.ops.ctc_loss",
    ),
    (
        ("directional", "direction", "mda"),
        "Directional accuracy",
        "a smooth directional loss: mean(relu(-sign(true_change) * predicted_change)), which grows with "
        "every move predicted the wrong way (add it to mse to keep the values close)",
    ),
    (
        ("accuracy", "acc", "precision", "recall"),
        "An accuracy",
        "cross-entropy on the probabilities (keras.losses.BinaryCrossentropy or "
        "SparseCategoricalCrossentropy), the smooth loss whose minimum is the same prediction",
    ),
)
#: Ops whose value is a metric of discrete predictions, whatever the function is called.
METRIC_OPS = {"EditDistance": 3}  # the index into METRICS
BITWISE_OPS = {"BitwiseAnd", "BitwiseOr", "BitwiseXor", "Invert", "LeftShift", "RightShift", "PopulationCount"}
GATHER_OPS = {"GatherV2", "ResourceGather", "GatherNd", "ResourceGatherNd"}
CHOICE_OPS = {"ArgMax", "ArgMin"}
#: How far forward the integer step is followed (ops), enough for a cast, a clip and a lookup.
FOLLOW_LIMIT = 12


def advise(op, hint, code=None):
    """The sharpest hint for culprit ``op``: ``hint`` (its op type's or reason's) unless more is known.

    ``code`` is the line of your code that made the op, when the finder found one.
    """
    metric = _metric(op)
    if metric is not None:
        return _metric_hint(metric)
    uses = _integer_uses(op)
    if uses & BITWISE_OPS:
        return _bitwise_hint(sorted(uses & BITWISE_OPS))
    if op.type in CHOICE_OPS and ("ResourceGather" in uses or "embedding" in uses):
        return TOKENS_HINT
    if op.type in CHOICE_OPS and "to float" in uses:
        return INDEX_AS_NUMBER_HINT
    if op.type not in CHOICE_OPS and uses & GATHER_OPS:
        return GRID_HINT
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


def _metric_hint(metric):
    _, name, stand_in = metric
    return (
        f"{name} is a metric used as a loss: it counts hard decisions, so as a whole it has no useful "
        "gradient, and a straight-through on this one op would leave the next one cut. There is no fix "
        f"in place: train on its differentiable stand-in, {stand_in}; keep {name} as a metric "
        "(compile(metrics=...))."
    )


def _bitwise_hint(ops):
    names = ", ".join(ops)
    return (
        f"The integer goes on through {names} before it is a float again, so a straight-through on this "
        "op alone leaves the next one cut. Put the whole integer step inside one straight-through: "
        "x + stop_gradient(f(x) - x), where f(x) is everything from the cast to the cast back to float "
        "(shaped like x)."
    )


def _metric(op):
    """The METRICS entry for an op made by a metric's code, or that feeds a metric op; else None."""
    for consumer in _forward(op):
        if consumer.type in METRIC_OPS:
            return METRICS[METRIC_OPS[consumer.type]]
    words = set()
    for frame in user_frames(op.traceback):
        words.update(part for part in re.split(r"[^a-z0-9]+", frame.name.lower()) if part)
    for metric in METRICS:
        if words & set(metric[0]):
            return metric
    return None


def _forward(op):
    """The ops that use ``op``'s value while it is not a float, breadth first, up to FOLLOW_LIMIT."""
    seen, queue, found = {op}, [op], []
    while queue and len(found) < FOLLOW_LIMIT:
        current = queue.pop(0)
        for tensor in current.outputs:
            if current is not op and tensor.dtype.is_floating:
                continue
            for consumer in tensor.consumers():
                if consumer not in seen:
                    seen.add(consumer)
                    found.append(consumer)
                    queue.append(consumer)
    return found


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
