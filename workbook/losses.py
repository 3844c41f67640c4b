"""Differentiable stand-ins for metrics that students try to train on directly.

Introduced in 03_finding_gradient_killers.ipynb. A metric such as IoU, Dice, AUC or
quadratic weighted kappa counts hard decisions (a threshold, an argmax, a rank), so as a
loss it has no useful gradient. Each function here computes the same quantity on the
predicted probabilities or scores instead: it is lowest at the perfect prediction and its
gradient reaches every weight. The finder's hints name them ("Train on
`workbook.losses.soft_iou`"); keep the metric itself in ``compile(metrics=...)``.

Each loss is registered with Keras (package "workbook.losses"), so a model compiled with it
saves and loads in safe mode: ``keras.saving.load_model(path)`` after ``import workbook.losses``
(without it, Keras says it "could not locate function 'workbook.losses>soft_iou'"). Each
refuses, with a ValueError naming ``y_true`` or ``y_pred``, what it cannot compare: shapes
that do not fit, an empty batch, predictions that are not floats; values are checked where
they are known (outside a traced function).
"""

import functools

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from workbook.core.arguments import refuse

__all__ = ["box_iou", "ctc", "pairwise_ranking", "smooth_directional", "soft_dice", "soft_iou", "soft_qwk"]

EPSILON = 1e-7
#: The package the losses are registered under. A model saved with one names it
#: ("workbook.losses>soft_iou"), so that Keras's "Could not locate function" names the module to import.
PACKAGE = "workbook.losses"


def _register(function):
    registered = keras.saving.register_keras_serializable(package=PACKAGE)(_checked(function))
    # Models saved before the losses took their module's name load too.
    keras.saving.get_custom_objects()[f"workbook>{function.__name__}"] = registered
    return registered


def _checked(loss):
    """``loss`` taking arrays, lists or tensors, refusing what it cannot compare before any arithmetic."""

    @functools.wraps(loss)
    def checked(y_true, y_pred):
        owner = loss.__name__
        y_true, y_pred = _as_tensor("y_true", y_true, owner), _as_tensor("y_pred", y_pred, owner)
        if "float" not in keras.backend.standardize_dtype(y_pred.dtype):
            allowed = "float predictions (probabilities or scores), e.g. ops.cast(y_pred, 'float32')"
            refuse("y_pred", y_pred, allowed, owner)
        for name, tensor in (("y_true", y_true), ("y_pred", y_pred)):
            if len(tensor.shape) == 0 or 0 in tuple(tensor.shape):
                refuse(name, tensor, "a batch of at least one example (an array with no zero-length axis)", owner)
        SHAPES[owner](y_true, y_pred)
        return loss(y_true, y_pred)

    return checked


def _as_tensor(name, value, owner):
    try:
        tensor = ops.convert_to_tensor(value)
        dtype = keras.backend.standardize_dtype(tensor.dtype)
    except (TypeError, ValueError):
        tensor, dtype = None, "string"
    if dtype == "string":
        refuse(name, value, "an array, list or tensor of numbers", owner)
    return tensor


def _known(shape):
    return [None if dimension is None else int(dimension) for dimension in shape]


def _fits(shape, other):
    """Whether two static shapes can be equal (None is any size)."""
    shape, other = _known(shape), _known(other)
    return len(shape) == len(other) and all(a is None or b is None or a == b for a, b in zip(shape, other, strict=True))


def _alike(y_true, y_pred, owner, what="shaped like y_pred"):
    if not _fits(y_true.shape, y_pred.shape):
        refuse("y_true", y_true, f"{what}, {tuple(_known(y_pred.shape))}", owner)


def _same_examples(y_true, y_pred, owner, what):
    first, other = _known(y_true.shape)[0], _known(y_pred.shape)[0]
    if first is not None and other is not None and first != other:
        refuse("y_true", y_true, f"{what}: one row per row of y_pred ({other}), not {first}", owner)


def _boxes(y_true, y_pred):
    for name, tensor in (("y_pred", y_pred), ("y_true", y_true)):
        if _known(tensor.shape)[-1] not in (4, None):
            refuse(name, tensor, "boxes with their corners (x1, y1, x2, y2) on the last axis, of size 4", "box_iou")
    _alike(y_true, y_pred, "box_iou")


def _ranked(y_true, y_pred):
    count = [int(np.prod(_known(t.shape))) if None not in _known(t.shape) else None for t in (y_true, y_pred)]
    if None not in count and count[0] != count[1]:
        refuse("y_true", y_true, f"one 0/1 label per score of y_pred ({count[1]} scores)", "pairwise_ranking")


def _graded(y_true, y_pred):
    shape = _known(y_pred.shape)
    if len(shape) != 2 or shape[1] in (0, 1):
        refuse("y_pred", y_pred, "class probabilities shaped (n, classes), with at least 2 classes", "soft_qwk")
    if len(y_true.shape) == 2 and _known(y_true.shape)[1] not in (1, shape[1], None) or len(y_true.shape) > 2:
        refuse("y_true", y_true, f"one-hot labels (n, {shape[1]}) or class numbers (n,) or (n, 1)", "soft_qwk")
    _same_examples(y_true, y_pred, "soft_qwk", "labels")


def _transcribed(y_true, y_pred):
    shape = _known(y_pred.shape)
    if len(shape) != 3 or shape[2] in (0, 1):
        allowed = "per-step logits shaped (n, steps, classes), the last class the blank, with at least 2 classes"
        refuse("y_pred", y_pred, allowed, "ctc")
    if len(y_true.shape) != 2:
        refuse("y_true", y_true, "class numbers shaped (n, length), one label sequence per example", "ctc")
    _same_examples(y_true, y_pred, "ctc", "label sequences")
    # Values are known only outside a traced function; fit hands the labels over as floats.
    if hasattr(y_true, "numpy") and shape[2] is not None:
        labels = np.asarray(y_true)
        if not (np.all(labels == np.round(labels)) and labels.min() >= 0 and labels.max() <= shape[2] - 2):
            allowed = f"whole class numbers from 0 to {shape[2] - 2} (the last class, {shape[2] - 1}, is the blank)"
            refuse("y_true", y_true, allowed, "ctc")


def _consecutive(y_true, y_pred):
    _alike(y_true, y_pred, "smooth_directional")
    if _known(y_pred.shape)[0] == 1:
        refuse(
            "y_pred",
            y_pred,
            "at least two consecutive samples along the first axis: a move is between two",
            "smooth_directional",
        )


#: For each loss, the check of how y_true and y_pred fit together (after both are checked alone).
SHAPES = {
    "soft_iou": lambda y_true, y_pred: _alike(y_true, y_pred, "soft_iou", "a mask shaped like y_pred"),
    "soft_dice": lambda y_true, y_pred: _alike(y_true, y_pred, "soft_dice", "a mask shaped like y_pred"),
    "box_iou": _boxes,
    "pairwise_ranking": _ranked,
    "smooth_directional": lambda y_true, y_pred: _consecutive(y_true, y_pred),
    "soft_qwk": _graded,
    "ctc": _transcribed,
}


@_register
def soft_iou(y_true, y_pred):
    """1 - IoU of masks, on the probabilities: 1 - sum(t p) / (sum(t) + sum(p) - sum(t p)).

    The Jaccard loss; 0 when ``y_pred`` equals a binary ``y_true``. Introduced in
    03_finding_gradient_killers.ipynb.
    """
    y_true = ops.cast(y_true, y_pred.dtype)
    intersection = ops.sum(y_true * y_pred)
    union = ops.sum(y_true) + ops.sum(y_pred) - intersection
    return 1.0 - intersection / (union + EPSILON)


@_register
def soft_dice(y_true, y_pred):
    """1 - Dice (F1) on the probabilities: 1 - 2 sum(t p) / (sum(t) + sum(p)).

    0 when ``y_pred`` equals a binary ``y_true``. Introduced in 03_finding_gradient_killers.ipynb.
    """
    y_true = ops.cast(y_true, y_pred.dtype)
    return 1.0 - 2.0 * ops.sum(y_true * y_pred) / (ops.sum(y_true) + ops.sum(y_pred) + EPSILON)


@_register
def box_iou(y_true, y_pred):
    """1 - IoU of boxes given by corners (x1, y1, x2, y2) on the last axis, averaged over the boxes.

    The overlap is min(x2) - max(x1) (and the same for y), clipped at 0: 0 for identical
    boxes, and its gradient moves each corner. Introduced in 03_finding_gradient_killers.ipynb.
    """
    y_true = ops.cast(y_true, y_pred.dtype)
    width = ops.relu(ops.minimum(y_true[..., 2], y_pred[..., 2]) - ops.maximum(y_true[..., 0], y_pred[..., 0]))
    height = ops.relu(ops.minimum(y_true[..., 3], y_pred[..., 3]) - ops.maximum(y_true[..., 1], y_pred[..., 1]))
    intersection = width * height
    area_true = ops.relu(y_true[..., 2] - y_true[..., 0]) * ops.relu(y_true[..., 3] - y_true[..., 1])
    area_pred = ops.relu(y_pred[..., 2] - y_pred[..., 0]) * ops.relu(y_pred[..., 3] - y_pred[..., 1])
    return 1.0 - ops.mean(intersection / (area_true + area_pred - intersection + EPSILON))


@_register
def pairwise_ranking(y_true, y_pred):
    """AUC's smooth form: mean of softplus(-(score of a positive - score of a negative)) over the pairs.

    AUC counts the (positive, negative) pairs ranked the right way; this weighs each pair
    by how far it is from being ranked wrong. Introduced in 03_finding_gradient_killers.ipynb.
    """
    scores = ops.reshape(y_pred, (-1, 1))
    positive = ops.cast(ops.reshape(y_true, (-1, 1)), scores.dtype)
    pairs = positive * ops.transpose(1.0 - positive)
    margins = scores - ops.transpose(scores)
    return ops.sum(pairs * ops.softplus(-margins)) / (ops.sum(pairs) + EPSILON)


@_register
def smooth_directional(y_true, y_pred):
    """Directional accuracy's smooth form: mse + mean(relu(-sign(true change) * predicted change)).

    The second term grows with every move predicted the wrong way (changes along the
    first axis, consecutive samples). Introduced in 03_finding_gradient_killers.ipynb.
    """
    y_true = ops.cast(y_true, y_pred.dtype)
    moves = ops.sign(y_true[1:] - y_true[:-1])
    wrong_way = ops.mean(ops.relu(-moves * (y_pred[1:] - y_pred[:-1])))
    return ops.mean(ops.square(y_true - y_pred)) + wrong_way


@_register
def soft_qwk(y_true, y_pred):
    """1 - quadratic weighted kappa on the probabilities: sum(W O) / sum(W E).

    ``y_pred`` holds class probabilities (n, K); ``y_true`` one-hot labels (n, K) or class
    numbers (n,) or (n, 1). O = y_true^T y_pred is the soft confusion matrix, E the outer
    product of its marginals divided by n, and W[i, j] = (i - j)^2 / (K - 1)^2. 0 at the
    perfect prediction. Introduced in 03_finding_gradient_killers.ipynb.
    """
    classes = y_pred.shape[-1]
    if len(y_true.shape) < len(y_pred.shape) or y_true.shape[-1] != classes:
        y_true = ops.one_hot(ops.cast(ops.reshape(y_true, (-1,)), "int32"), classes)
    y_true = ops.cast(y_true, y_pred.dtype)
    grades = ops.arange(classes, dtype=y_pred.dtype)
    weights = ops.square(grades[:, None] - grades[None, :]) / float(max(classes - 1, 1) ** 2)
    observed = ops.matmul(ops.transpose(y_true), y_pred)
    expected = ops.outer(ops.sum(y_true, axis=0), ops.sum(y_pred, axis=0)) / ops.sum(y_true)
    return ops.sum(weights * observed) / (ops.sum(weights * expected) + EPSILON)


@_register
def ctc(y_true, y_pred):
    """CTC on per-step logits (n, steps, classes), the last class the blank; ``y_true`` (n, length) class numbers.

    The differentiable stand-in for an edit distance (word or character error rate), and
    what to train a beam search's model on. Every label sequence is taken as full length.
    Introduced in 03_finding_gradient_killers.ipynb.
    """
    labels = tf.cast(y_true, tf.int32)
    batch = tf.shape(labels)[0]
    label_length = tf.fill([batch], tf.shape(labels)[1])
    logit_length = tf.fill([batch], tf.shape(y_pred)[1])
    losses = tf.nn.ctc_loss(labels, y_pred, label_length, logit_length, logits_time_major=False, blank_index=-1)
    return tf.reduce_mean(losses)
