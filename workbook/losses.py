"""Differentiable stand-ins for metrics that students try to train on directly.

Introduced in 03_finding_gradient_killers.ipynb. A metric such as IoU, Dice, AUC or
quadratic weighted kappa counts hard decisions (a threshold, an argmax, a rank), so as a
loss it has no useful gradient. Each function here computes the same quantity on the
predicted probabilities or scores instead: it is lowest at the perfect prediction and its
gradient reaches every weight. The finder's hints name them ("Train on
`workbook.losses.soft_iou`"); keep the metric itself in ``compile(metrics=...)``.

Each loss is registered with Keras (package "workbook"), so a model compiled with it
saves and loads in safe mode: ``keras.saving.load_model(path)`` after ``import workbook.losses``.
"""

import keras
import tensorflow as tf
from keras import ops

__all__ = ["box_iou", "ctc", "pairwise_ranking", "smooth_directional", "soft_dice", "soft_iou", "soft_qwk"]

EPSILON = 1e-7


def _register(function):
    return keras.saving.register_keras_serializable(package="workbook")(function)


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
