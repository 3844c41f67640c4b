"""How many entries of a quantised code change from one training step to the next (Larq's FlipRatio).

Introduced in 04_autoencoder_lab.ipynb: a binary or quantised bottleneck whose codes stop
flipping has stopped learning what it passes on, whatever its loss still does. No drawing here.
"""

import keras
import numpy as np
from keras import ops

from workbook.core.arguments import check_images, refuse

__all__ = ["CodeFlipRatio", "flip_ratio"]


def flip_ratio(previous, current):
    """The fraction of entries of ``current`` that differ from ``previous`` (same shape), as a float.

    Introduced in 04_autoencoder_lab.ipynb.
    """
    previous, current = ops.convert_to_tensor(previous), ops.convert_to_tensor(current)
    if tuple(previous.shape) != tuple(current.shape) or ops.size(current) == 0:
        refuse("current", current, f"a non-empty code shaped like previous, {tuple(previous.shape)}", "flip_ratio")
    return float(ops.mean(ops.cast(ops.not_equal(previous, current), "float32")))


class CodeFlipRatio(keras.callbacks.Callback):
    """Record, after every training step, the share of a layer's outputs that changed since the step before.

    Introduced in 04_autoencoder_lab.ipynb. The codes are the layer's outputs for the same
    ``images`` at every step (in inference mode), so only the weights make them change.

    Parameters
    ----------
    images : numpy.ndarray
        MNIST images shaped (n, 28, 28, 1) in [0, 1]: a few dozen are enough.
    layer : str
        The name of the layer whose outputs are the codes (the lab's ``"bottleneck"``).

    Attributes
    ----------
    ratios : numpy.ndarray
        One flip ratio per training step, in order.
    """

    def __init__(self, images, layer="bottleneck"):
        super().__init__()
        self.images = check_images("images", images, "CodeFlipRatio")
        if not isinstance(layer, str):
            refuse("layer", layer, "the name of a layer of the model, e.g. 'bottleneck'", "CodeFlipRatio")
        self.layer = layer
        self._ratios, self._codes_of, self._previous = [], None, None

    @property
    def ratios(self):
        return np.array(self._ratios, dtype=float)

    def on_train_begin(self, logs=None):
        owner = "CodeFlipRatio"
        try:
            layer = self.model.get_layer(self.layer)
        except ValueError:
            names = ", ".join(repr(layer.name) for layer in self.model.layers)
            refuse("layer", self.layer, f"the name of a layer of the model: one of {names}", owner)
        if getattr(layer, "test_latent", "mode") == "sample":
            # Its codes would be drawn from the generator training draws from: the callback would change the
            # training, and count chance flips.
            refuse(
                "layer", self.layer, "a layer with fixed codes at inference (a sampling one: test_latent='mode')", owner
            )
        try:  # a subclassed model's layers have no symbolic outputs to read
            inputs, output = self.model.inputs[0], layer.output
        except (AttributeError, ValueError, TypeError):
            kind = type(self.model).__name__
            refuse("model", kind, "a functional or Sequential model built on keras.Input (workbook.autoencoder)", owner)
        self._codes_of = keras.Model(inputs, output, name=f"{self.layer}_codes")
        self._previous = self._codes_of.predict_on_batch(self.images)  # compiled once, then fast

    def on_train_batch_end(self, batch, logs=None):
        codes = self._codes_of.predict_on_batch(self.images)
        self._ratios.append(flip_ratio(self._previous, codes))
        self._previous = codes
