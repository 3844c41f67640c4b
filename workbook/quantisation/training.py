"""The chapter's small classifiers and their training, with the sign flips of binarised kernels.

Introduced in 07_quantisation_aware_training.ipynb: every comparison there trains
:func:`quantised_mlp` models with :func:`train_classifier`, at equal epochs, data and seed. No
drawing here.
"""

from dataclasses import dataclass, field

import keras
import numpy as np

from workbook.core.arguments import check_count, check_seed, refuse
from workbook.monitor.flips import flip_ratio
from workbook.quantisation.layers import QuantDense, WeightClip
from workbook.quantisation.quantizers import quantizer

__all__ = ["KernelSignFlips", "TrainedClassifier", "quantised_mlp", "train_classifier"]


def quantised_mlp(
    hidden=(256, 256),
    kernel_quantizer=None,
    input_quantizer=None,
    float_first=True,
    float_last=True,
    clip=1.0,
    batch_norm=True,
    seed=0,
):
    """An MLP for 28x28 digits: QuantDense layers, each followed by batch normalisation.

    Introduced in 07_quantisation_aware_training.ipynb. The hidden layers take
    ``kernel_quantizer`` (with its latent weights clipped to ``[-clip, clip]``) and
    ``input_quantizer``; the first layer (on the pixels) and the last (the logits) stay float
    unless ``float_first`` / ``float_last`` is False, as Larq's guides keep them. A quantiser
    given as a layer is copied for each layer that takes it. Without quantisers it is the
    float twin. Compiled with Adam (learning rate 1e-3) and cross-entropy on the logits.
    """
    check_seed(seed, "quantised_mlp")
    if not hidden or not all(isinstance(units, int) and units > 0 for units in hidden):
        refuse("hidden", hidden, "a non-empty tuple of positive whole numbers, e.g. (256, 256)", "quantised_mlp")
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((28, 28, 1)), keras.layers.Flatten()]
    units = [*hidden, 10]
    for index, size in enumerate(units):
        first, last = index == 0, index == len(units) - 1
        quantised = not ((first and float_first) or (last and float_last))
        layers += _block(index, size, quantised, first, last, kernel_quantizer, input_quantizer, clip, batch_norm)
    model = keras.Sequential(layers, name="quantised_mlp")
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _block(index, units, quantised, first, last, kernel_quantizer, input_quantizer, clip, batch_norm):
    """One QuantDense, then batch normalisation and, without quantised activations, a ReLU."""
    # a layer's inputs are the activations before it, quantised even for a float last layer
    inputs = input_quantizer if quantised or not first else None
    block = [_dense(units, kernel_quantizer if quantised else None, inputs, clip, f"dense_{index}")]
    if batch_norm:
        block.append(keras.layers.BatchNormalization(name=f"batch_norm_{index}"))
    if input_quantizer is None and not last:  # without quantised activations, a ReLU is the nonlinearity
        block.append(keras.layers.Activation("relu", name=f"relu_{index}"))
    return block


def _dense(units, kernel_quantizer, input_quantizer, clip, name):
    """One QuantDense with fresh copies of its quantisers, its kernel clipped if it is quantised."""
    return QuantDense(
        units,
        kernel_quantizer=_fresh(kernel_quantizer),
        input_quantizer=_fresh(input_quantizer),
        kernel_constraint=None if kernel_quantizer is None else WeightClip(clip),
        name=name,
    )


def _fresh(part):
    """A new copy of a quantiser layer (each QuantDense needs its own), or the value as given."""
    if isinstance(part, keras.layers.Layer):
        return type(part).from_config({**part.get_config(), "name": None})
    return quantizer(part, "kernel_quantizer", "quantised_mlp")


class KernelSignFlips(keras.callbacks.Callback):
    """Per epoch, the share of each quantised kernel's signs that changed, and the largest step of one latent weight.

    Introduced in 07_quantisation_aware_training.ipynb (Larq's flip ratio, for weights).
    """

    def __init__(self):
        super().__init__()
        self.flips, self.largest_step = [], []

    def _kernels(self):
        return [layer.kernel.numpy() for layer in self.model.layers if getattr(layer, "kernel_quantizer", None)]

    def on_epoch_begin(self, epoch, logs=None):
        self._start = self._previous = self._kernels()
        self._largest = 0.0

    def on_train_batch_end(self, batch, logs=None):
        current = self._kernels()
        self._largest = max(
            [self._largest] + [float(np.abs(a - b).max()) for a, b in zip(current, self._previous, strict=True)]
        )
        self._previous = current

    def on_epoch_end(self, epoch, logs=None):
        current = self._kernels()
        self.flips.append([flip_ratio(np.sign(a), np.sign(b)) for a, b in zip(self._start, current, strict=True)])
        self.largest_step.append(self._largest)


@dataclass
class TrainedClassifier:
    """A trained model, its history, and its accuracy on each test digit (1 right, 0 wrong)."""

    model: object
    history: dict
    correct: np.ndarray = field(repr=False)

    @property
    def accuracy(self):
        return float(self.correct.mean())

    @property
    def standard_error(self):
        return float(self.correct.std(ddof=1) / np.sqrt(len(self.correct)))


def train_classifier(model, x_train, y_train, x_test, y_test, epochs=3, batch_size=64, seed=0, callbacks=()):
    """Fit ``model`` for ``epochs`` on the digits in a seeded order; a :class:`TrainedClassifier`.

    Introduced in 07_quantisation_aware_training.ipynb.
    """
    check_count("epochs", epochs, high=1000, owner="train_classifier")
    check_count("batch_size", batch_size, high=100_000, owner="train_classifier")
    check_seed(seed, "train_classifier")
    keras.utils.set_random_seed(seed)
    history = model.fit(
        x_train, y_train, epochs=epochs, batch_size=batch_size, verbose=0, shuffle=True, callbacks=list(callbacks)
    )
    logits = model.predict(x_test, batch_size=512, verbose=0)
    return TrainedClassifier(model, history.history, (np.argmax(logits, axis=-1) == y_test).astype(float))


def step_gradient_ratios(model, x, y):
    """For each kernel's learned step, ``(|dL/ds| / s) / (|dL/dw| / |w|)``: its relative update over its weights'.

    Introduced in 07_quantisation_aware_training.ipynb: Esser et al. (2020) scale the step's
    gradient so that this ratio is near 1, as it is for the weights themselves. One batch,
    the model's compiled loss, the layer's name as the key.
    """
    import tensorflow as tf

    layers = [layer for layer in model.layers if hasattr(getattr(layer, "kernel_quantizer", None), "step")]
    if not layers:
        refuse(
            "model",
            model,
            "a model with a LearnedStepQuantizer as some layer's kernel_quantizer",
            "step_gradient_ratios",
        )
    variables = [v for layer in layers for v in (layer.kernel, layer.kernel_quantizer.step)]
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=True))
    gradients = tape.gradient(loss, variables)
    ratios = {}
    for layer, kernel_gradient, step_gradient in zip(layers, gradients[::2], gradients[1::2], strict=True):
        step = float(layer.kernel_quantizer.step.numpy())
        weights = float(tf.norm(kernel_gradient)) / float(tf.norm(layer.kernel))
        ratios[layer.name] = abs(float(step_gradient)) / step / weights
    return ratios
