"""Public cases for the finder's advice: each has the broken code and what its fix must keep.

These cases are kept apart from the ones the hints were first written against
(tests/finder_corpus.py, tests/gradient_killers.py, tests/test_hints.py): every source
here is a public page that none of those files cites (tests/test_finder_advice.py checks
that), and none of these functions is imported there. The second round of cases is in
tests/finder_fix_corpus_deep.py.

Each case is a function decorated with ``@case(source)`` returning a :class:`Case`. The
broken line is marked ``# culprit: OpType reason`` (a marker in a helper the case builds is
found through ``marked``). No fix is written here: tests/test_finder_advice.py applies the
first suggestion of the finder's own hint, as printed, and checks the result. What a case
says is what its fix must keep: ``tolerance``, how far the forward value may move (None:
a fix that must change it, said why beside it); ``rebuild``, how the case is built around
code the hint hands over whole (a stand-in loss, a layer); ``perfect``, the prediction a
stand-in loss must score best; and, for an op no gradient can pass, ``words`` that the
honest hint must name and ``fixed``, the stand-in written by hand, which must train.
"""

from dataclasses import dataclass, field

import keras
import numpy as np
import tensorflow as tf
from keras import ops

CASES = []
RNG = np.random.default_rng(1)
X = RNG.normal(size=(6, 4)).astype("float32")
LABELS = (RNG.uniform(size=(6, 1)) > 0.5).astype("float32")
LABELS[:2] = [[0.0], [1.0]]  # both classes present, for AUC
PRICES = np.cumsum(RNG.normal(size=(6, 1)), axis=0).astype("float32")
IMAGES = RNG.uniform(size=(2, 8, 8, 1)).astype("float32")


@dataclass
class Case:
    """One public case: the broken target, its input, and what a fix must keep (see the module's docstring)."""

    broken: object
    example: object
    words: str = ""
    fixed: object = None
    rebuild: object = None  # the case built around the hint's code: a loss, a layer
    perfect: object = None  # the y_pred a stand-in loss must score best
    tolerance: float | None = 1e-5
    options: dict = field(default_factory=dict)
    marked: object = None  # where the culprit marker is, if not in the case's own function
    culprit: tuple = None  # (op type, reason) when a marker shared by several cases cannot say it


def case(source):
    """Register a case builder with the public page it comes from."""

    def register(builder):
        builder.source = source
        CASES.append(builder)
        return builder

    return register


def model_with_loss(loss, units=1, activation="sigmoid"):
    """Input (4,) -> Dense(units) compiled with ``loss``."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(units, activation=activation)])
    model.compile(optimizer="sgd", loss=loss)
    return model


# ------------------------------------------------------- metrics used as losses --


# An IoU computed from masks made by comparisons (here in TensorFlow).
@case("https://github.com/pytorch/pytorch/issues/2774")
def iou_from_comparisons():
    def iou_loss(y_true, y_pred):
        predicted = ops.cast(y_pred > 0.5, "float32")  # culprit: Greater integer_output
        intersection = ops.sum(predicted * y_true)
        return 1.0 - intersection / (ops.sum(predicted) + ops.sum(y_true) - intersection + 1e-6)

    return Case(model_with_loss(iou_loss), (X, LABELS), rebuild=model_with_loss, perfect=LABELS)


# A Dice coefficient on thresholded predictions.
@case("https://markaicode.com/custom-gradients-non-differentiable-losses")
def dice_of_thresholded_predictions():
    def dice_loss(y_true, y_pred):
        hard = tf.cast(tf.greater(y_pred, 0.5), tf.float32)  # culprit: Greater integer_output
        return 1.0 - 2.0 * tf.reduce_sum(hard * y_true) / (tf.reduce_sum(hard) + tf.reduce_sum(y_true) + 1e-6)

    return Case(model_with_loss(dice_loss), (X, LABELS), rebuild=model_with_loss, perfect=LABELS)


def numpy_auc(y_true, y_score):
    """ROC AUC by ranks (Mann-Whitney), in numpy."""
    ranks = np.argsort(np.argsort(y_score.ravel())) + 1.0
    positive = y_true.ravel() > 0.5
    n_pos, n_neg = positive.sum(), (~positive).sum()
    return np.float32((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


# ROC AUC from numpy used as the loss ("any other metric function based on numpy").
@case("https://github.com/keras-team/keras/issues/3230")
def auc_in_numpy_as_loss():
    def auc_loss(y_true, y_pred):
        auc = tf.numpy_function(numpy_auc, [y_true, y_pred], tf.float32)  # culprit: PyFunc no_gradient
        return 1.0 - tf.ensure_shape(auc, ())

    return Case(model_with_loss(auc_loss), (X, LABELS), rebuild=model_with_loss, perfect=LABELS)


# The tflearn objective that approximates AUC, with the thresholded comparison students write first.
@case("https://github.com/tflearn/tflearn/issues/1028")
def auc_by_counting_ordered_pairs():
    def roc_auc_loss(y_true, y_pred):
        pairs = y_true * tf.transpose(1.0 - y_true)
        ordered = tf.cast(y_pred > tf.transpose(y_pred), tf.float32)  # culprit: Greater integer_output
        return 1.0 - tf.reduce_sum(pairs * ordered) / tf.reduce_sum(pairs)

    return Case(model_with_loss(roc_auc_loss), (X, LABELS), rebuild=model_with_loss, perfect=LABELS)


SEQUENCE_LENGTH, CLASSES = 3, 6  # class 5 is CTC's blank
# CTC needs a blank between two equal labels: no labels repeat in a row, so three steps spell three labels.
TOKENS = np.array([[0, 1, 2], [3, 4, 0], [1, 0, 1], [2, 3, 4], [4, 2, 0], [0, 3, 1]], dtype="float32")
SPELLED = 20.0 * np.eye(CLASSES, dtype="float32")[TOKENS.astype(int)]  # logits whose best path is the labels


def sequence_model(loss):
    dense = keras.layers.Dense(SEQUENCE_LENGTH * CLASSES)
    model = keras.Sequential([keras.Input((4,)), dense, keras.layers.Reshape((SEQUENCE_LENGTH, CLASSES))])
    model.compile(optimizer="sgd", loss=loss)
    return model


# A word error rate through tf.edit_distance on the predicted tokens.
@case("https://github.com/tflearn/tflearn/issues/783")
def word_error_rate_as_loss():
    def wer_loss(y_true, y_pred):
        predictions = tf.argmax(y_pred, axis=-1)  # culprit: ArgMax integer_output
        targets = tf.sparse.from_dense(tf.cast(y_true, tf.int64))
        return tf.reduce_mean(tf.edit_distance(tf.sparse.from_dense(predictions), targets))

    # CTC scores a path of per-step logits, the error rate a decoded sequence: their values are
    # not comparable, so the intent is checked as CTC being lowest at logits that spell the labels.
    return Case(sequence_model(wer_loss), (X, TOKENS), rebuild=sequence_model, perfect=SPELLED)


# Mean directional accuracy (do prediction and truth move the same way?) as the loss.
@case(
    "https://geeksmental.com/question/keras-custom-loss-penalize-more-when-actual-and-prediction-are-on-opposite-sides-of-zero"
)
def directional_accuracy_as_loss():
    def directional_loss(y_true, y_pred):
        moves_up = tf.sign(y_true[1:] - y_true[:-1])
        same = tf.equal(moves_up, tf.sign(y_pred[1:] - y_pred[:-1]))  # culprit: Sign zero_gradient
        return 1.0 - tf.reduce_mean(tf.cast(same, tf.float32))

    return Case(
        model_with_loss(directional_loss, activation="tanh"),
        (X, PRICES),
        rebuild=lambda loss: model_with_loss(loss, activation="tanh"),
        perfect=PRICES,
    )


# --------------------------------------------------------------- discrete choices --


VOCABULARY = 5


class Tokens(keras.layers.Layer):
    """The discriminator's input: ``tokens_of(logits, embedding)``."""

    def __init__(self, tokens_of, **kwargs):
        super().__init__(**kwargs)
        self.tokens_of, self.embedding = tokens_of, keras.layers.Embedding(VOCABULARY, 2)

    def build(self, input_shape):
        self.embedding.build(input_shape[:-1])

    def call(self, logits):
        return self.tokens_of(logits, self.embedding)


def text_gan(tokens_of):
    """A generator's logits -> ``tokens_of(logits, embedding)`` -> a discriminator's score."""
    noise = keras.Input((4,))
    logits = keras.layers.Reshape((3, VOCABULARY))(keras.layers.Dense(3 * VOCABULARY)(noise))
    embedded = Tokens(tokens_of)(logits)
    score = keras.layers.Dense(1)(keras.layers.Flatten()(embedded))
    model = keras.Model(noise, score)
    model.compile(optimizer="adam", loss="mse")
    return model


# A text GAN: the generator's argmax tokens feed the discriminator's embedding.
@case("https://github.com/keras-team/keras/issues/17444")
def text_gan_argmax_tokens():
    def argmax_tokens(logits, embedding):
        return embedding(ops.argmax(logits, axis=-1))  # culprit: ArgMax integer_output

    return Case(text_gan(argmax_tokens), (X, LABELS))


def mask_gan(mask_of):
    """A segmentation generator (2 classes per pixel) -> ``mask_of`` -> a discriminator."""
    inputs = keras.Input((4,))
    probabilities = keras.layers.Reshape((4, 2))(keras.layers.Dense(8, activation="softmax")(inputs))
    mask = keras.layers.Lambda(mask_of)(probabilities)
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(mask)))
    model.compile(optimizer="adam", loss="mse")
    return model


# The argmax mask between a generator and a discriminator, as a float.
@case("https://github.com/eriklindernoren/Keras-GAN/issues/61")
def argmax_mask_between_generator_and_discriminator():
    def hard_mask(x):
        return ops.cast(ops.expand_dims(ops.argmax(x, axis=-1), -1), "float32")  # culprit: ArgMax integer_output

    return Case(mask_gan(hard_mask), (X, LABELS))


# Sampling a category from the logits (tf.random.categorical): "how do you calculate gradients w.r.t. indices?"
@case("https://github.com/tensorflow/tensorflow/issues/9260")
def sampled_category():
    values = tf.constant([[1.0, -2.0, 3.0, 0.5]])

    def sampled_value(logits):
        choice = tf.random.categorical(logits, 1, seed=1)[:, 0]  # culprit: Multinomial integer_output
        return tf.reduce_sum(tf.one_hot(choice, 4) * values, axis=-1)

    # A Gumbel sample is not the same draw as tf.random.categorical's, so values differ; both are samples.
    return Case(sampled_value, X, tolerance=None)


# --------------------------------------------------- ops whose fix is another op --


# Shuffling the stacked task losses with tf.random.shuffle.
@case("https://github.com/tianheyu927/PCGrad/issues/3")
def shuffled_losses():
    def shuffled(losses):
        return tf.random.shuffle(losses, seed=2)[:3] * 2.0  # culprit: RandomShuffle no_gradient

    # Shuffling the positions is another random permutation than shuffling the rows, from the same seed.
    return Case(shuffled, X, tolerance=None)


# A channel shuffle layer built on tf.random.shuffle.
@case("https://github.com/keras-team/keras-cv/issues/259")
def channel_shuffle_layer():
    class ChannelShuffle(keras.layers.Layer):
        def build(self, input_shape):
            self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="scale")

        def call(self, images):
            channels = tf.transpose(images * self.scale, (3, 0, 1, 2))
            channels = tf.random.shuffle(channels, seed=3)  # culprit: RandomShuffle no_gradient
            return tf.transpose(channels, (1, 2, 3, 0))

    images = np.repeat(IMAGES, 3, axis=-1)
    return Case(ChannelShuffle(), images, tolerance=None)  # another permutation, as above


# Downsampling a point-spread function with the "area" method (open-cv's INTER_AREA).
@case("https://github.com/CosmoStat/wf-psf/issues/16")
def area_downsampling():
    def downsample(images):
        return tf.image.resize(images, (4, 4), method="area")  # culprit: ResizeArea no_gradient_registered

    return Case(downsample, IMAGES)


def line_sampler(sample):
    """Model: x -> a shift predicted from x -> ``sample(signal, positions)`` of a fixed signal."""
    signal = tf.constant(np.sin(np.arange(12) / 2.0).astype("float32"))
    inputs = keras.Input((4,))
    shift = keras.layers.Dense(1)(inputs)
    positions = keras.layers.Lambda(lambda s: 4.0 + s + tf.range(4, dtype=tf.float32))(shift)
    sampled = keras.layers.Lambda(lambda p: sample(signal, tf.clip_by_value(p, 0.0, 10.0)))(positions)
    model = keras.Model(inputs, keras.layers.Dense(1)(sampled))
    model.compile(optimizer="sgd", loss="mse")
    return model


# A spatial transformer that samples at integer grid positions (no interpolation weights).
@case("https://github.com/tensorflow/models/issues/295")
def spatial_transformer_integer_grid():
    def nearest(signal, x):
        return tf.gather(signal, tf.cast(tf.round(x), tf.int32))  # culprit: Round no_gradient

    # Interpolating between the two neighbours is the fix, and it changes the value between them.
    return Case(line_sampler(nearest), (X, LABELS), tolerance=None)


# A SparseTensor kernel built in build(): "Gradients do not exist for variables".
@case("https://github.com/tensorflow/tensorflow/issues/28966")
def sparse_kernel_built_in_build():
    class SparseDense(keras.layers.Layer):
        """A dense layer whose kernel has a fixed sparsity pattern, held as a SparseTensor."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.indices = [[0, 0], [1, 1], [2, 0], [3, 1]]

        def build(self, input_shape):
            self.values = self.add_weight(shape=(4,), initializer="ones", name="values")
            self.kernel = tf.SparseTensor(self.indices, self.values, (4, 2))  # culprit: (none) disconnected

        def call(self, inputs):
            return tf.transpose(tf.sparse.sparse_dense_matmul(self.kernel, inputs, adjoint_a=True, adjoint_b=True))

    return Case(SparseDense(), X)


# ------------------------------------------------------------ second derivatives --


def critic_with(first_layer):
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            first_layer,
            keras.layers.Conv2D(2, 3, activation="tanh"),
            keras.layers.Flatten(),
            keras.layers.Dense(1),
        ]
    )


def penalty_of(critic):
    """A function of images: the WGAN-GP penalty (|d critic / d images| - 1)^2, averaged."""

    def penalty(images):
        with tf.GradientTape() as inner:
            inner.watch(images)
            scores = critic(images)
        slopes = inner.gradient(scores, images)  # culprit: (the gradient of the resize) as the case says
        return tf.reduce_mean((tf.norm(tf.reshape(slopes, (2, -1)), axis=-1) - 1.0) ** 2)

    return penalty


# A gradient penalty through a nearest-neighbour resize (UpSampling2D in tf.keras):
# "gradient registry has no entry for: ResizeNearestNeighborGrad".
@case("https://github.com/tensorflow/tensorflow/issues/43648")
def gradient_penalty_through_upsampling():
    return Case(
        penalty_of(critic_with(keras.layers.Resizing(16, 16, interpolation="nearest"))),
        IMAGES,
        rebuild=lambda upsampling: penalty_of(critic_with(upsampling)),
        marked=penalty_of,
        culprit=("ResizeNearestNeighborGrad", "no_gradient_registered"),
    )


# A critic that resizes its input (bilinear) under a gradient penalty: LookupError for ResizeBilinearGrad.
@case("https://github.com/tensorflow/tensorflow/issues/33751")
def gradient_penalty_through_bilinear_resize():
    return Case(
        penalty_of(critic_with(keras.layers.Resizing(4, 4))),
        IMAGES,
        rebuild=lambda downsampling: penalty_of(critic_with(downsampling)),
        marked=penalty_of,
        culprit=("ResizeBilinearGrad", "no_gradient"),
    )


class WGANGP(keras.Model):
    """The keras.io WGAN-GP example's train_step, shrunk: the critic's loss with its gradient penalty."""

    def __init__(self, critic, **kwargs):
        super().__init__(**kwargs)
        self.critic = critic

    def call(self, images):
        return self.critic(images)

    def train_step(self, data):
        real, fake = data
        alpha = tf.random.uniform([tf.shape(real)[0], 1, 1, 1], seed=4)
        interpolated = real + alpha * (fake - real)
        with tf.GradientTape() as tape:
            with tf.GradientTape() as penalty_tape:
                penalty_tape.watch(interpolated)
                scores = self.critic(interpolated, training=True)
            slopes = penalty_tape.gradient(scores, interpolated)
            norms = tf.sqrt(tf.reduce_sum(tf.square(slopes), axis=[1, 2, 3]) + 1e-12)
            loss = ops.mean(self.critic(fake)) - ops.mean(self.critic(real)) + 10.0 * ops.mean((norms - 1.0) ** 2)
        weights = self.critic.trainable_variables
        gradients = tape.gradient(loss, weights)  # culprit: ResizeNearestNeighborGrad no_gradient_registered
        self.optimizer.apply_gradients(zip(gradients, weights, strict=True))
        return {"loss": loss}


def wgan(first_layer):
    model = WGANGP(critic_with(first_layer))
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    model(IMAGES)
    return model


# The WGAN-GP train_step of keras.io, with a nearest-neighbour resize in the critic.
@case("https://keras.io/examples/generative/wgan_gp/")
def wgan_gp_train_step():
    return Case(
        wgan(keras.layers.Resizing(16, 16, interpolation="nearest")),
        (IMAGES, IMAGES[::-1]),
        rebuild=wgan,
        marked=WGANGP,
    )


# ---------------------------------------------------- a cast, then bitwise ops --


# Keeping the high bits of a value by a bitwise and after a cast to int.
@case("https://www.slingacademy.com/article/tensorflow-bitwise-operations-a-complete-guide/")
def high_bits_by_bitwise_and():
    def high_bits(x):
        levels = tf.cast(tf.clip_by_value(x, 0.0, 1.0) * 255.0, tf.int32)  # culprit: Cast integer_output
        return tf.cast(tf.bitwise.bitwise_and(levels, 0xF0), tf.float32) / 255.0

    return Case(high_bits, np.abs(X) / 3.0)


# Shifting right after a cast to int: a 4-bit quantiser written with bit shifts.
@case("https://www.slingacademy.com/article/tensorflow-bitwise-shift-operations-explained/")
def quantise_by_right_shift():
    def four_bits(x):
        levels = tf.cast(x * 255.0, tf.int32)  # culprit: Cast integer_output
        return tf.cast(tf.bitwise.left_shift(tf.bitwise.right_shift(levels, 4), 4), tf.float32) / 255.0

    return Case(four_bits, np.abs(X) / 3.0)
