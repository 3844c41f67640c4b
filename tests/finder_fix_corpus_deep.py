"""The second round of public cases for the finder's advice: code nobody here wrote, fixed by the first suggestion.

Like tests/finder_fix_corpus.py (whose :class:`Case`, shared data and helpers these cases
use), each case is a function decorated with ``@case(source)``: the source is a public
page about that situation, cited by none of the files the hints were written against.
The broken line is marked ``# culprit: OpType reason``. No fix is written here but the
stand-ins of ops no gradient can pass (``fixed``, for an honest hint): what a case says
is what its fix must keep (``tolerance``, ``rebuild``, ``perfect``, ``words``).
tests/test_finder_advice.py applies the first suggestion of the finder's own hint, as
printed, and checks that the gradient then reaches every weight and that the code still
computes what it meant.

The cases register themselves into ``finder_fix_corpus.CASES`` only when this module is
imported under its own name: the advice test runs an edited copy of this file, and that
copy must not register its cases a second time.
"""

import finder_fix_corpus
import keras
import numpy as np
import tensorflow as tf
from finder_fix_corpus import IMAGES, LABELS, PRICES, SPELLED, TOKENS, Case, X, model_with_loss, sequence_model
from keras import ops

import workbook

CLASSES = 4
CLASS_LABELS = np.eye(CLASSES, dtype="float32")[[0, 1, 2, 3, 1, 2]]  # one-hot, every class present
BOXES = np.tile(np.array([[0.0, 0.0, 1.0, 1.0]], dtype="float32"), (6, 1))


def case(source):
    """finder_fix_corpus.case, when this module is imported as itself (not as the advice test's edited copy)."""
    if __name__ == "finder_fix_corpus_deep":
        return finder_fix_corpus.case(source)

    def keep(builder):
        builder.source = source
        return builder

    return keep


def dense_model(*layers, loss="mse", units=1):
    """Input (4,) -> Dense(3) -> ``layers`` -> Dense(units), compiled with ``loss``."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), *layers, keras.layers.Dense(units)])
    model.compile(optimizer="sgd", loss=loss)
    return model


def classifier(loss, classes=CLASSES):
    """Input (4,) -> Dense(classes, softmax), compiled with ``loss``."""
    return model_with_loss(loss, units=classes, activation="softmax")


# ---------------------------------------------------------- round, floor, ceil, sign --


# K.round(y_pred) inside a custom loss: "ValueError: None values not supported".
@case("https://github.com/keras-team/keras/issues/4175")
def round_in_a_custom_loss():
    def rounded_mse(y_true, y_pred):
        return ops.mean(ops.square(y_true - ops.round(y_pred)))  # culprit: Round no_gradient

    return Case(model_with_loss(rounded_mse), (X, LABELS))


# tf.floor in a Lambda layer ("FloorSampling"), with the noise taken out so that runs compare.
@case("https://github.com/keras-team/keras/issues/5521")
def floor_in_a_lambda_layer():
    floor_sampling = keras.layers.Lambda(lambda x: tf.floor(x + 0.5))  # culprit: Floor no_gradient
    return Case(dense_model(floor_sampling), (X, LABELS))


# K.round(K.clip(x)) in a Lambda layer between two Dense layers.
@case("https://github.com/keras-team/keras/issues/5107")
def round_of_clip_in_a_lambda_layer():
    clip_and_round = keras.layers.Lambda(lambda t: ops.round(ops.clip(t, 0.0, 1.0)))  # culprit: Round no_gradient
    return Case(dense_model(clip_and_round), (X, LABELS))


# Feed forward the rounded activations, backpropagate the unrounded ones: a rounding layer.
@case("https://github.com/keras-team/keras/issues/9396")
def rounded_hidden_activations():
    class RoundedSigmoid(keras.layers.Layer):
        def call(self, inputs):
            return tf.round(tf.sigmoid(inputs))  # culprit: Round no_gradient

    return Case(dense_model(RoundedSigmoid()), (X, LABELS))


# "No gradient defined for operation 'Round'": rounding a value to thirds.
@case("https://github.com/tensorflow/tensorflow/issues/5888")
def round_to_thirds():
    def thirds(x):
        return tf.round(x * 3.0) / 3.0  # culprit: Round no_gradient

    return Case(thirds, X)


# A step activation written as round(sigmoid(x)) for a binary output neuron.
@case("https://discuss.tensorflow.org/t/step-function-as-activation-during-testing/24849")
def step_activation_by_rounding_a_sigmoid():
    def step_sigm(x):
        return tf.round(tf.nn.sigmoid(x))  # culprit: Round no_gradient

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1, activation=step_sigm)])
    model.compile(optimizer="sgd", loss="mse")
    return Case(model, (X, LABELS))


# A quantising activation by ceil, the TF answer to "the gradient of tf.math.ceil is not expected to pass".
@case("https://github.com/keras-team/keras/issues/15716")
def ceil_quantiser_layer():
    class Quarters(keras.layers.Layer):
        def call(self, inputs):
            return tf.math.ceil(inputs * 4.0) / 4.0  # culprit: Ceil no_gradient

    return Case(dense_model(Quarters()), (X, LABELS))


# "Custom quantization layer": ceil(2^5 x) / 2^5 forward, identity backward wanted.
@case("https://github.com/keras-team/keras/issues/8526")
def quantization_by_ceil_of_a_power_of_two():
    def quantization(x):
        power = tf.pow(2.0, 5.0)
        return tf.divide(tf.math.ceil(tf.scalar_mul(power, x)), power)  # culprit: Ceil no_gradient

    return Case(dense_model(keras.layers.Lambda(quantization)), (X, LABELS))


# Binarized filters by tf.sign: "shift_parameters and beta_values are not trainable".
@case("https://github.com/layog/Accurate-Binary-Convolution-Network/issues/6")
def binarized_filters_by_sign():
    class BinaryDense(keras.layers.Layer):
        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], 2), initializer="glorot_uniform", name="kernel")

        def call(self, inputs):
            binarized_filters = tf.sign(self.kernel)  # culprit: Sign zero_gradient
            return tf.square(tf.matmul(inputs, binarized_filters))

    return Case(BinaryDense(), X)


# XNOR-Net activations quantised with tf.sign, "and use the tf.stop_gradient trick".
@case("https://github.com/tensorpack/tensorpack/issues/210")
def binary_activations_by_sign():
    binary = keras.layers.Lambda(lambda x: tf.sign(x))  # culprit: Sign zero_gradient
    return Case(dense_model(binary), (X, LABELS))


# A Heaviside step built from sign: max(0, sign(x)).
@case("https://www.it1352.com/2434533.html")
def heaviside_from_sign():
    def heaviside(x):
        return tf.maximum(0.0, tf.sign(x))  # culprit: Sign zero_gradient

    return Case(dense_model(keras.layers.Lambda(heaviside)), (X, LABELS))


# ------------------------------------------------------------------- casts to integers --


# "No gradients provided ... Problem with tf.cast op": a cast to int so that a number below 1 becomes 0.
@case("https://github.com/tensorflow/tensorflow/issues/47083")
def cast_to_int_to_drop_the_fraction():
    def whole_scores(x):
        return tf.cast(tf.cast(x * 2.0, tf.int32), tf.float32)  # culprit: Cast integer_output

    return Case(dense_model(keras.layers.Lambda(whole_scores)), (X, LABELS))


# A cast to uint8 inside a Keras model, to keep an 8-bit image between two parts of it.
@case("https://github.com/tensorflow/tensorflow/issues/42357")
def eight_bit_image_inside_a_model():
    def eight_bits(x):
        levels = tf.cast(x * 255.0, "uint8")  # culprit: Cast integer_output
        return tf.cast(levels, "float32") / 255.0

    inputs = keras.Input((4,))
    image = keras.layers.Dense(4, activation="sigmoid")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Lambda(eight_bits)(image)))
    model.compile(optimizer="sgd", loss="mse")
    return Case(model, (X, LABELS))


# --------------------------------------------------------------------- comparisons --


# A spiking neuron in Keras: spike = (membrane potential > threshold), as a float.
@case("https://github.com/keras-team/keras-contrib/issues/552")
def spiking_neuron_threshold():
    class Spike(keras.layers.Layer):
        def call(self, membrane):
            thresh = 0.5
            return tf.cast(membrane > thresh, tf.float32)  # culprit: Greater integer_output

    return Case(dense_model(Spike()), (X, LABELS))


# A binary step activation: 1 if x >= 0 else 0, with tf.where.
@case("https://www.codecademy.com/resources/docs/ai/neural-networks/binary-step-activation-function")
def binary_step_by_where():
    def binary_step(x):
        return tf.where(x >= 0.0, 1.0, 0.0)  # culprit: GreaterEqual integer_output

    return Case(dense_model(keras.layers.Lambda(binary_step)), (X, LABELS))


# ------------------------------------------------------------------ argmax, argmin --


# Hard attention: attend to the one best patch, one_hot(argmax(scores)).
@case("https://github.com/tensorflow/tensorflow/issues/50474")
def hard_attention_one_hot():
    class HardAttention(keras.layers.Layer):
        def build(self, input_shape):
            self.query = self.add_weight(shape=(input_shape[-1], 4), initializer="glorot_uniform", name="query")
            self.patches = self.add_weight(shape=(4, 2), initializer="glorot_uniform", name="patches")

        def call(self, inputs):
            scores = tf.matmul(inputs, self.query)
            weights = tf.one_hot(tf.argmax(scores, axis=-1), 4)  # culprit: ArgMax integer_output
            return tf.matmul(weights, self.patches)

    return Case(HardAttention(), X)


# An argmax in the forward pass with the softmax's gradient backward: the "STE argmax-softmax".
@case("https://github.com/ReaLLMASIC/ReaLLM-Forge/pull/778")
def argmax_softmax_attention():
    class ArgmaxAttention(keras.layers.Layer):
        def build(self, input_shape):
            self.values = self.add_weight(shape=(4, 2), initializer="glorot_uniform", name="values")

        def call(self, scores):
            attention = ops.one_hot(ops.argmax(scores, axis=-1), 4)  # culprit: ArgMax integer_output
            return ops.matmul(attention, self.values)

    return Case(ArgmaxAttention(), X)


# "Getting around tf.argmax which is not differentiable": the index of the largest output in a loss.
@case("https://py4u.org/questions/46926809/")
def argmax_index_in_a_loss():
    def index_loss(y_true, y_pred):
        index = tf.cast(tf.argmax(y_pred, axis=-1), tf.float32)  # culprit: ArgMax integer_output
        return tf.reduce_mean(tf.square(y_true[:, 0] - index))

    targets = np.array([[0.0], [1.0], [2.0], [3.0], [1.0], [2.0]], dtype="float32")
    return Case(classifier(index_loss), (X, targets))


# "Why gradients don't seem to pass through Embedding?": generated tokens looked up in an embedding.
@case("https://github.com/keras-team/keras/issues/12270")
def generated_tokens_into_an_embedding():
    class TokenEmbedding(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.embedding = keras.layers.Embedding(CLASSES, 2)

        def build(self, input_shape):
            self.embedding.build((None,))

        def call(self, logits):
            return self.embedding(tf.argmax(logits, axis=-1))  # culprit: ArgMax integer_output

    inputs = keras.Input((4,))
    embedded = TokenEmbedding()(keras.layers.Dense(CLASSES)(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1)(embedded))
    model.compile(optimizer="sgd", loss="mse")
    return Case(model, (X, LABELS))


# A VQ-VAE's quantizer: the nearest codebook entry by argmin, then looked up.
@case("https://github.com/MishaLaskin/vqvae/issues/2")
def vector_quantizer_by_argmin():
    class Quantizer(keras.layers.Layer):
        def build(self, input_shape):
            self.codebook = self.add_weight(shape=(CLASSES, input_shape[-1]), initializer="glorot_uniform")

        def call(self, z):
            distances = ops.sum(ops.square(z[:, None, :] - self.codebook[None]), axis=-1)
            return tf.gather(self.codebook, tf.argmin(distances, axis=-1))  # culprit: ArgMin integer_output

    return Case(dense_model(Quantizer()), (X, LABELS))


# ----------------------------------------------------------- metrics used as losses --


# The Jaccard loss of a segmentation repository, on rounded predictions: "An operation has None for gradient".
@case("https://github.com/Golbstein/Keras-segmentation-deeplab-v3.1/issues/6")
def jaccard_loss_on_rounded_predictions():
    def jaccard_loss(y_true, y_pred):
        predicted = ops.round(y_pred)  # culprit: Round no_gradient
        intersection = ops.sum(y_true * predicted)
        return 1.0 - intersection / (ops.sum(y_true) + ops.sum(predicted) - intersection + 1e-6)

    return Case(model_with_loss(jaccard_loss), (X, LABELS), rebuild=model_with_loss, perfect=LABELS)


# keras-contrib's binary_jaccard_distance: the Jaccard distance of K.round(y_pred).
@case("https://github.com/keras-team/keras-contrib/pull/197")
def binary_jaccard_distance():
    def jaccard_distance(y_true, y_pred, smooth=100.0):
        intersection = ops.sum(ops.abs(y_true * y_pred))
        total = ops.sum(ops.abs(y_true) + ops.abs(y_pred))
        return (1.0 - (intersection + smooth) / (total - intersection + smooth)) * smooth

    def binary_jaccard_loss(y_true, y_pred):
        return jaccard_distance(y_true, tf.round(y_pred))  # culprit: Round no_gradient

    return Case(model_with_loss(binary_jaccard_loss), (X, LABELS), rebuild=model_with_loss, perfect=LABELS)


# An F1 score written with tf.round, then used as the loss.
@case("https://errorhandle.ai/f1-auc-epoch-based-metrics-in-keras")
def f1_score_as_loss():
    def f1_loss(y_true, y_pred):
        y_pred = tf.round(y_pred)  # culprit: Round no_gradient
        tp = tf.reduce_sum(y_true * y_pred)
        fp = tf.reduce_sum((1 - y_true) * y_pred)
        fn = tf.reduce_sum(y_true * (1 - y_pred))
        return 1.0 - 2.0 * tp / (2.0 * tp + fp + fn + 1e-7)

    return Case(model_with_loss(f1_loss), (X, LABELS), rebuild=model_with_loss, perfect=LABELS)


# A weighted F1 loss for several classes, from the predicted classes.
@case("https://openillumi.com/?p=81368")
def weighted_f1_loss_from_predicted_classes():
    def weighted_f1_loss(y_true, y_pred):
        predicted = tf.one_hot(tf.argmax(y_pred, axis=-1), CLASSES)  # culprit: ArgMax integer_output
        tp = tf.reduce_sum(y_true * predicted, axis=0)
        f1 = 2.0 * tp / (tf.reduce_sum(y_true, axis=0) + tf.reduce_sum(predicted, axis=0) + 1e-7)
        weights = tf.reduce_sum(y_true, axis=0) / tf.reduce_sum(y_true)
        return 1.0 - tf.reduce_sum(weights * f1)

    return Case(classifier(weighted_f1_loss), (X, CLASS_LABELS), rebuild=classifier, perfect=CLASS_LABELS)


# A macro F1 score in Keras, "do's and don'ts": K.round(y_pred) makes it a metric, not a loss.
@case("https://neptune.ai/blog/implementing-the-macro-f1-score-in-keras")
def macro_f1_as_loss():
    def macro_f1_loss(y_true, y_pred):
        y_pred = ops.round(y_pred)  # culprit: Round no_gradient
        tp = ops.sum(y_true * y_pred, axis=0)
        f1 = 2.0 * tp / (ops.sum(y_true, axis=0) + ops.sum(y_pred, axis=0) + 1e-7)
        return 1.0 - ops.mean(f1)

    return Case(model_with_loss(macro_f1_loss), (X, LABELS), rebuild=model_with_loss, perfect=LABELS)


# AUC by the ranks of the scores (Mann-Whitney), written in TensorFlow with argsort.
@case("https://stats.stackexchange.com/questions/144172/optimizing-for-auc")
def auc_by_ranks_in_tensorflow():
    def auc_loss(y_true, y_pred):
        ranks = tf.cast(tf.argsort(tf.argsort(y_pred[:, 0])), tf.float32) + 1.0  # culprit: TopKV2 integer_output
        positive = y_true[:, 0]
        n_pos = tf.reduce_sum(positive)
        n_neg = tf.reduce_sum(1.0 - positive)
        return 1.0 - (tf.reduce_sum(ranks * positive) - n_pos * (n_pos + 1.0) / 2.0) / (n_pos * n_neg)

    return Case(model_with_loss(auc_loss), (X, LABELS), rebuild=model_with_loss, perfect=LABELS)


def exact_auc(y_true, y_score):
    """The exact ROC AUC in numpy: the fraction of (positive, negative) pairs ranked right."""
    positive = y_true.ravel() > 0.5
    scores = y_score.ravel()
    pairs = scores[positive][:, None] - scores[~positive][None, :]
    return np.float32(((pairs > 0) + 0.5 * (pairs == 0)).mean())


# The exact AUC as a custom metric (numpy), then tried as the loss.
@case("https://tdhock.github.io/blog/2020/custom-keras-metric/")
def exact_auc_in_numpy_as_loss():
    def auc_loss(y_true, y_pred):
        auc = tf.numpy_function(exact_auc, [y_true, y_pred], tf.float32)  # culprit: PyFunc no_gradient
        return 1.0 - tf.ensure_shape(auc, ())

    return Case(model_with_loss(auc_loss), (X, LABELS), rebuild=model_with_loss, perfect=LABELS)


# The accuracy on some entries, from a confusion matrix, as the loss ("None values not supported").
@case("https://github.com/keras-team/keras/issues/9712")
def accuracy_from_a_confusion_matrix():
    def accuracy_loss(y_true, y_pred):
        predicted = tf.cast(y_pred[:, 0] > 0.5, tf.int32)  # culprit: Greater integer_output
        cm = tf.math.confusion_matrix(tf.cast(y_true[:, 0], tf.int32), predicted, num_classes=2)
        correct = tf.cast(cm[0, 0] + cm[1, 1], tf.float32)
        return 1.0 - correct / tf.cast(tf.reduce_sum(cm), tf.float32)

    return Case(model_with_loss(accuracy_loss), (X, LABELS), rebuild=model_with_loss, perfect=LABELS)


# "Common ops without gradient: K.argmax": a categorical accuracy written as the loss.
@case("https://github.com/keras-team/keras/issues/10321")
def categorical_accuracy_as_loss():
    def accuracy_loss(y_true, y_pred):
        same = ops.equal(ops.argmax(y_true, axis=-1), ops.argmax(y_pred, axis=-1))  # culprit: ArgMax integer_output
        return 1.0 - ops.mean(ops.cast(same, "float32"))

    return Case(classifier(accuracy_loss), (X, CLASS_LABELS), rebuild=classifier, perfect=CLASS_LABELS)


# Precision is a metric: "it's okay if they have 0 gradients everywhere", a loss is not.
@case("https://ravimashru.github.io/100-days-of-deep-learning/days/025.html")
def precision_as_loss():
    def precision_loss(y_true, y_pred):
        predicted = tf.round(y_pred)  # culprit: Round no_gradient
        true_positives = tf.reduce_sum(y_true * predicted)
        return 1.0 - true_positives / (tf.reduce_sum(predicted) + 1e-7)

    return Case(model_with_loss(precision_loss), (X, LABELS), rebuild=model_with_loss, perfect=LABELS)


# The mean directional accuracy of a GRU as the loss (R keras): K$equal(K$sign(...), K$sign(...)).
@case("https://github.com/rstudio/keras3/issues/193")
def mean_directional_accuracy_as_loss():
    def mda(y_true, y_pred):
        true_moves = ops.sign(y_true[1:] - y_true[:-1])
        same = ops.equal(true_moves, ops.sign(y_pred[1:] - y_pred[:-1]))  # culprit: Sign zero_gradient
        return 1.0 - ops.mean(ops.cast(same, "float32"))

    return Case(
        model_with_loss(mda, activation="tanh"),
        (X, PRICES),
        rebuild=lambda loss: model_with_loss(loss, activation="tanh"),
        perfect=PRICES,
    )


# tf.edit_distance scores a speech model's decoding (character error rate); as the loss it has no gradient.
@case("https://github.com/tensorflow/tensorflow/issues/14252")
def character_error_rate_as_loss():
    def cer_loss(y_true, y_pred):
        decoded = tf.sparse.from_dense(tf.argmax(y_pred, axis=-1))  # culprit: ArgMax integer_output
        labels = tf.sparse.from_dense(tf.cast(y_true, tf.int64))
        return tf.reduce_mean(tf.edit_distance(decoded, labels, normalize=True))

    return Case(sequence_model(cer_loss), (X, TOKENS), rebuild=sequence_model, perfect=SPELLED)


def corners(outputs):
    """Four sigmoid outputs -> a box (x1, y1, x2, y2) with x1 < x2 and y1 < y2, inside the unit square."""
    return ops.concatenate([outputs[:, :2] * 0.5, 0.5 + outputs[:, 2:] * 0.5], axis=-1)


def box_model(loss):
    inputs = keras.Input((4,))
    boxes = keras.layers.Lambda(corners)(keras.layers.Dense(4, activation="sigmoid")(inputs))
    model = keras.Model(inputs, boxes)
    model.compile(optimizer="sgd", loss=loss)
    return model


# A box IoU loss that draws each box on a pixel grid (comparisons) and counts the pixels.
@case("https://keras.io/api/keras_cv/losses/iou_loss")
def box_iou_by_rasterising():
    grid = tf.linspace(0.0, 1.0, 11)

    def box_iou_loss(y_true, y_pred):
        def mask(box):
            inside_x = (grid[None] >= box[:, 0:1]) & (grid[None] <= box[:, 2:3])  # culprit: GreaterEqual integer_output
            inside_y = (grid[None] >= box[:, 1:2]) & (grid[None] <= box[:, 3:4])
            return tf.cast(inside_x[:, :, None] & inside_y[:, None, :], tf.float32)

        predicted, true = mask(y_pred), mask(y_true)
        intersection = tf.reduce_sum(predicted * true, axis=[1, 2])
        union = tf.reduce_sum(predicted + true, axis=[1, 2]) - intersection
        return 1.0 - tf.reduce_mean(intersection / union)

    return Case(box_model(box_iou_loss), (X, BOXES), rebuild=box_model, perfect=BOXES)


# ------------------------------------------------------------------- ops with a twin --


# bincount with weights sums the weights per id; the TVM importer maps it to UnsortedSegmentSum.
@case("https://github.com/apache/tvm/pull/12751")
def weighted_bincount():
    ids = tf.constant([0, 2, 1, 2])

    def per_bucket(x):
        w = x[:, 0]
        return tf.math.bincount(ids, w, minlength=3, maxlength=3)  # culprit: DenseBincount no_gradient_registered

    return Case(per_bucket, X[:4])


# Saturation through HSV, the conversion TensorFlow's RGB -> HSV gradient pull request was about.
@case("https://github.com/tensorflow/tensorflow/pull/30104")
def saturation_through_hsv():
    def desaturate(x):
        image = tf.reshape(tf.sigmoid(x), (2, 4, 3))
        hsv = tf.image.rgb_to_hsv(image)
        return tf.image.hsv_to_rgb(hsv * [1.0, 0.5, 1.0])  # culprit: HSVToRGB no_gradient

    return Case(desaturate, X)


# "tf.random.shuffle() has no gradient defined for value": a shuffle that gathers instead.
@case("https://github.com/HorizonRobotics/alf/pull/334")
def shuffled_batch():
    def shuffled(values):
        return tf.random.shuffle(values, seed=5) * tf.range(1.0, 7.0)[:, None]  # culprit: RandomShuffle no_gradient

    return Case(shuffled, X, tolerance=None)  # shuffling the positions is another permutation than the rows'


# A resize by area in a Lambda layer (feature pyramid pooling).
@case("https://github.com/apple/coremltools/issues/1333")
def area_resize_in_a_lambda_layer():
    def pool(images):
        return tf.image.resize(images, (2, 2), method="area")  # culprit: ResizeArea no_gradient_registered

    inputs = keras.Input((8, 8, 1))
    features = keras.layers.Conv2D(2, 3, padding="same")(inputs)
    pooled = keras.layers.Lambda(pool)(features)
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(pooled)))
    model.compile(optimizer="sgd", loss="mse")
    return Case(model, (IMAGES, np.ones((2, 1), "float32")))


# Time warping a spectrogram row: read it at shifted, rounded positions.
@case("https://github.com/zcaceres/spec_augment/issues/17")
def time_warp_at_rounded_positions():
    row = tf.constant(np.cos(np.arange(10) / 2.0).astype("float32"))

    def warp(shift):
        positions = tf.clip_by_value(2.0 + shift[:, :1] + tf.range(4, dtype=tf.float32), 0.0, 8.0)
        return tf.gather(row, tf.cast(tf.round(positions), tf.int32))  # culprit: Round no_gradient

    return Case(dense_model(keras.layers.Lambda(warp)), (X, LABELS), tolerance=None)  # interpolating moves values


# ------------------------------------------------------------- no gradient can exist --


def qwk_model(loss):
    return classifier(loss)


# Quadratic weighted kappa as the loss, from the predicted classes' confusion matrix.
@case("https://errorhandle.ai/how-can-i-specify-a-loss-function-to-be-quadratic-weighted-kappa-in-keras")
def quadratic_weighted_kappa_as_loss():
    def qwk_loss(y_true, y_pred):
        predicted = tf.argmax(y_pred, axis=-1)  # culprit: ArgMax integer_output
        observed = tf.cast(tf.math.confusion_matrix(tf.argmax(y_true, axis=-1), predicted, CLASSES), tf.float32)
        grades = tf.range(CLASSES, dtype=tf.float32)
        weights = tf.square(grades[:, None] - grades[None, :])
        expected = tf.tensordot(tf.reduce_sum(observed, 1), tf.reduce_sum(observed, 0), 0) / tf.reduce_sum(observed)
        return tf.reduce_sum(weights * observed) / tf.reduce_sum(weights * expected)

    return Case(qwk_model(qwk_loss), (X, CLASS_LABELS), rebuild=qwk_model, perfect=CLASS_LABELS)


def numpy_kappa(y_true, y_pred):
    """Cohen's quadratic weighted kappa of the argmax classes, in numpy (as sklearn's cohen_kappa_score)."""
    true, predicted = y_true.argmax(-1), y_pred.argmax(-1)
    observed = np.zeros((CLASSES, CLASSES))
    np.add.at(observed, (true, predicted), 1.0)
    grades = np.arange(CLASSES)
    weights = (grades[:, None] - grades[None, :]) ** 2
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    return np.float32(1.0 - (weights * observed).sum() / (weights * expected).sum())


# Cohen's kappa from sklearn as the loss: "there is no need for you to implement it yourself".
@case(
    "https://exchangetuts.com/how-can-i-specify-a-loss-function-to-be-quadratic-weighted-kappa-in-keras-1641563945036533"
)
def cohen_kappa_in_numpy_as_loss():
    def cohen_kappa_loss(y_true, y_pred):
        kappa = tf.numpy_function(numpy_kappa, [y_true, y_pred], tf.float32)  # culprit: PyFunc no_gradient
        return 1.0 - tf.ensure_shape(kappa, ())

    return Case(qwk_model(cohen_kappa_loss), (X, CLASS_LABELS), rebuild=qwk_model, perfect=CLASS_LABELS)


# A Hashing layer inside the model, on ids the model computed: "which is how we recommend to use this layer"
# is as part of the input pipeline.
@case("https://keras.posit.co/reference/layer_hashing.html")
def hashing_layer_on_computed_ids():
    def hashed(h):
        return keras.layers.Hashing(8)(ops.cast(h * 3.0, "int64"))  # culprit: Cast integer_output

    def embedded(ids):
        return ops.sum(ops.take(ops.eye(8), ids[..., 0], axis=0), axis=-1, keepdims=True)

    broken = dense_model(keras.layers.Lambda(hashed), keras.layers.Lambda(embedded))
    return Case(broken, (X, LABELS), words="data pipeline", fixed=dense_model())


# CategoryEncoding(output_mode="count") of ids the model made: a bag of words inside the model.
@case("https://keras.rstudio.com/reference/layer_category_encoding.html")
def category_counts_of_computed_ids():
    def counted(h):
        ids = ops.cast(ops.abs(h) * 2.0, "int32")  # culprit: Cast integer_output
        return keras.layers.CategoryEncoding(8, output_mode="count")(ops.clip(ids, 0, 7))

    def sampled_counts(logits):
        z, _ = workbook.sample_latent(ops.reshape(logits, (-1, 3, 8)), "categorical", "straight_through", seed=3)
        return ops.sum(z, axis=1)

    inputs = keras.Input((4,))
    fixed = keras.Model(
        inputs, keras.layers.Dense(1)(keras.layers.Lambda(sampled_counts)(keras.layers.Dense(24)(inputs)))
    )
    fixed.compile(optimizer="sgd", loss="mse")
    return Case(
        dense_model(keras.layers.Lambda(counted)),
        (X, LABELS),
        words="workbook.sample_latent(logits, 'categorical'",
        fixed=fixed,
    )


# Word ids for an Embedding computed from floats: "embeddings are discrete, thus non-differentiable".
@case("https://discuss.mxnet.io/t/gradients-for-embedding-layers-in-gluon/1886")
def embedding_of_ids_made_from_floats():
    class WordIds(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.embedding = keras.layers.Embedding(5, 2)

        def build(self, input_shape):
            self.embedding.build((None,))

        def call(self, h):
            return self.embedding(ops.cast(ops.clip(ops.abs(h), 0.0, 4.0), "int32"))  # culprit: Cast integer_output

    class SampledWords(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.embedding = keras.layers.Embedding(5, 2)

        def build(self, input_shape):
            self.embedding.build((None,))

        def call(self, logits):
            z, _ = workbook.sample_latent(ops.reshape(logits, (-1, 3, 5)), "categorical", "gumbel_softmax_st", seed=4)
            return ops.matmul(z, self.embedding.embeddings)

    def model(words, units):
        inputs = keras.Input((4,))
        embedded = keras.layers.Flatten()(words(keras.layers.Dense(units)(inputs)))
        built = keras.Model(inputs, keras.layers.Dense(1)(embedded))
        built.compile(optimizer="sgd", loss="mse")
        return built

    return Case(
        model(WordIds(), 3),
        (X, LABELS),
        words="workbook.sample_latent(logits, 'categorical', 'gumbel_softmax_st')",
        fixed=model(SampledWords(), 15),
        marked=WordIds,
    )


# The score of a CTC beam search as the loss: "tf ctc beam search will lose the gradients".
@case("https://github.com/TeaPoly/CTC-OptimizedLoss/issues/2")
def beam_search_score_as_loss():
    def beam_loss(y_true, y_pred):
        steps = tf.fill([tf.shape(y_pred)[0]], 3)
        logits = tf.transpose(y_pred, (1, 0, 2))  # time major
        _, log_p = tf.nn.ctc_beam_search_decoder(logits, steps, 2)  # culprit: CTCBeamSearchDecoder no_gradient
        return -tf.reduce_mean(log_p)

    return Case(sequence_model(beam_loss), (X, TOKENS), rebuild=sequence_model, perfect=SPELLED)


# A JPEG round trip inside the model (encode_jpeg, decode_jpeg), which a differentiable JPEG replaces.
@case("https://github.com/kornia/kornia/pull/2760")
def jpeg_round_trip_in_a_model():
    def jpeg(image):
        pixels = tf.cast(tf.clip_by_value(image, 0.0, 1.0) * 255.0, tf.uint8)  # culprit: Cast integer_output
        decoded = tf.image.decode_jpeg(tf.image.encode_jpeg(pixels[0], quality=50))
        return tf.reshape(tf.cast(decoded, tf.float32), (1, 8, 8, 1)) / 255.0

    def around_jpeg(image):
        return image + tf.stop_gradient(jpeg(image) - image)

    def model(step):
        inputs = keras.Input((8, 8, 1))
        image = keras.layers.Conv2D(1, 3, padding="same", activation="sigmoid")(inputs)
        built = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(keras.layers.Lambda(step)(image))))
        built.compile(optimizer="sgd", loss="mse")
        return built

    return Case(
        model(jpeg),
        (IMAGES[:1], np.ones((1, 1), "float32")),
        words="x + stop_gradient(jpeg(x) - x)",
        fixed=model(around_jpeg),
    )


# Sampling indices from a Multinomial (AdaMAE's token sampler) and reading the chosen values.
@case("https://github.com/wgcban/adamae/issues/4")
def sampled_indices_read_by_gather():
    values = tf.constant([1.0, -2.0, 3.0, 0.5])

    def sampled_value(logits):
        index = tf.random.categorical(logits, 1, seed=6)[:, 0]  # culprit: Multinomial integer_output
        return tf.gather(values, index)

    def relaxed_value(logits):
        z, _ = workbook.sample_latent(logits, "categorical", "gumbel_softmax_st", tau=0.5, seed=6)
        return ops.sum(z * values, axis=-1)

    return Case(
        sampled_value, X, words="workbook.sample_latent(logits, 'categorical', 'gumbel_softmax_st'", fixed=relaxed_value
    )


# ---------------------------------------------------------------- a second look --


# "Unknown loss function: accuracy": an accuracy made a loss, here through keras.metrics in a custom loss.
@case("https://github.com/imenebak/UAV-Crowd-Counting/issues/3")
def keras_binary_accuracy_as_loss():
    def accuracy_loss(y_true, y_pred):
        return 1.0 - keras.metrics.binary_accuracy(y_true, y_pred)  # culprit: Greater integer_output

    return Case(model_with_loss(accuracy_loss), (X, LABELS), rebuild=model_with_loss, perfect=LABELS)


# Decoding in training: "is the BeamCTCDecoder tractable? can you backpropagate through it?" (greedy here).
@case("https://github.com/SeanNaren/deepspeech.pytorch/issues/314")
def greedy_decoder_score_as_loss():
    def decoder_loss(y_true, y_pred):
        steps = tf.fill([tf.shape(y_pred)[0]], 3)
        logits = tf.transpose(y_pred, (1, 0, 2))  # time major
        _, score = tf.nn.ctc_greedy_decoder(logits, steps)  # culprit: CTCGreedyDecoder no_gradient
        return tf.reduce_mean(score)

    return Case(sequence_model(decoder_loss), (X, TOKENS), rebuild=sequence_model, perfect=SPELLED)


# A saturation change as a step of the model, the colour correction the tile server wanted.
@case("https://github.com/raster-foundry/raster-foundry/issues/1526")
def saturation_adjustment_in_a_model():
    def saturate(x):
        image = tf.reshape(tf.sigmoid(x), (2, 4, 3))
        return tf.image.adjust_saturation(image, 2.0)  # culprit: AdjustSaturation no_gradient_registered

    return Case(saturate, X)


# PCGrad's shuffle of the task losses, assigned this time: the shuffle itself has no gradient.
@case("https://github.com/tianheyu927/PCGrad/issues/5")
def shuffled_task_losses():
    class TaskLosses(keras.layers.Layer):
        def build(self, input_shape):
            self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="scale")

        def call(self, losses):
            loss = tf.random.shuffle(losses * self.scale, seed=8)  # culprit: RandomShuffle no_gradient
            return loss * tf.range(1.0, 7.0)[:, None]

    return Case(TaskLosses(), X, tolerance=None)  # another permutation than the rows', from the same seed


# Keras's Resizing layer with interpolation="area" (allowed for the TF backend): the op is made inside Keras.
@case("https://github.com/keras-team/keras/pull/20264")
def area_resizing_layer():
    inputs = keras.Input((8, 8, 1))
    features = keras.layers.Conv2D(2, 3, padding="same")(inputs)
    pooled = keras.layers.Resizing(4, 4, interpolation="area")(features)  # culprit: ResizeArea no_gradient_registered
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(pooled)))
    model.compile(optimizer="sgd", loss="mse")
    return Case(model, (IMAGES, np.ones((2, 1), "float32")))


# An action sampled with multinomial, then used to read a value: "will the sampling break the gradient?"
@case("https://github.com/openai/spinningup/issues/171")
def sampled_action_reads_a_value():
    rewards = tf.constant([0.5, -1.0, 2.0, 1.0])

    def reward_of_sample(logits):
        action = tf.random.categorical(logits, 1, seed=9)  # culprit: Multinomial integer_output
        return tf.gather(rewards, action[:, 0])

    def relaxed_reward(logits):
        z, _ = workbook.sample_latent(logits, "categorical", "gumbel_softmax_st", tau=0.5, seed=9)
        return ops.sum(z * rewards, axis=-1)

    words = "workbook.sample_latent(logits, 'categorical', 'gumbel_softmax_st'"
    return Case(reward_of_sample, X, words=words, fixed=relaxed_reward)


# A sample from a categorical distribution compared with a target: "the gradient is zero when I sample".
@case("https://github.com/jax-ml/jax/issues/17556")
def categorical_sample_against_a_target():
    def sample_loss(logits):
        samples = keras.random.categorical(logits, 1, seed=10)  # culprit: StatelessMultinomial integer_output
        return ops.mean(ops.square(ops.cast(samples, "float32") - 2.0))

    def relaxed_loss(logits):
        z, _ = workbook.sample_latent(logits, "categorical", "gumbel_softmax_st", tau=0.5, seed=10)
        return ops.mean(ops.square(ops.sum(z * ops.arange(4, dtype="float32"), axis=-1) - 2.0))

    words = "workbook.sample_latent(logits, 'categorical', 'gumbel_softmax_st'"
    return Case(sample_loss, X, words=words, fixed=relaxed_loss)


# JPEG with a quality setting in the loop of a classifier (end-to-end JPEG): the codec makes bytes.
@case("https://ar5iv.labs.arxiv.org/html/2308.05840")
def jpeg_quality_in_the_loop():
    def compressed(x):
        image = tf.reshape(tf.sigmoid(x), (2, 4, 3))
        pixels = tf.image.convert_image_dtype(image, tf.uint8, saturate=True)  # culprit: Cast integer_output
        jpeg = tf.image.adjust_jpeg_quality(pixels, 30)
        return tf.image.convert_image_dtype(jpeg, tf.float32)

    def around_jpeg(x):
        image = tf.reshape(tf.sigmoid(x), (2, 4, 3))
        jpeg = tf.image.convert_image_dtype(
            tf.image.adjust_jpeg_quality(tf.image.convert_image_dtype(image, tf.uint8, saturate=True), 30), tf.float32
        )
        return image + tf.stop_gradient(jpeg - image)

    return Case(compressed, X, words="x + stop_gradient(jpeg(x) - x)", fixed=around_jpeg)


# ---------------------------------------------------- a step through an integer and back --


# Rounding, then a cast to int8 (the PR's fix to a bare cast), then back to floats for the next layer;
# straight-through on the round alone leaves the int8 cast cutting, on the same line.
@case("https://github.com/astramind-ai/BitMat/pull/13")
def rounded_to_int8_and_back():
    def int8_activations(x):
        return ops.cast(ops.cast(ops.round(x * 8.0), "int8"), "float32") / 8.0  # culprit: Round no_gradient

    return Case(int8_activations, X)


# The same step inside a model: the encoder's activations stored as int8 codes.
@case("https://github.com/Justin-Tan/generative-compression/issues/27")
def int8_codes_in_a_compression_model():
    def codes(h):
        return ops.cast(ops.cast(ops.round(h * 16.0), "int8"), "float32") / 16.0  # culprit: Round no_gradient

    return Case(dense_model(keras.layers.Lambda(codes)), (X, X[:, :1]))


# ---------------------------------------------------------------- a sampled value --


# A binomial count drawn from learned probabilities: stateless random ops are declared not differentiable.
@case("https://github.com/tensorflow/tensorflow/pull/23227")
def binomial_count_from_learned_probabilities():
    def sampled_count(logits):
        probs = tf.sigmoid(logits)
        shape = tf.shape(probs)
        counts = tf.random.stateless_binomial(  # culprit: StatelessRandomBinomial no_gradient
            shape, seed=[1, 2], counts=tf.fill(shape, 5.0), probs=probs, output_dtype=tf.float32
        )
        return counts * 2.0

    def relaxed_count(logits):  # five relaxed bits, summed: a count whose gradient is the estimator's
        bits, _ = workbook.sample_latent(logits, "bernoulli", "gumbel_softmax", seed=1, samples=5)
        return ops.sum(bits, axis=0) * 2.0

    return Case(
        sampled_count, X, words="workbook.sample_latent(logits, 'bernoulli', 'score_function')", fixed=relaxed_count
    )
