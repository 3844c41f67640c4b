"""How much a discrete code tells about the image: an upper bound on I(x; z), beside its nominal bits.

Introduced in 06_beyond_straight_through.ipynb. A code of 196 positions with 10 classes
has ``196 log2 10 = 651`` *nominal* bits, but a sampled code whose probabilities
hardly depend on the image carries far fewer. Given the image, the positions of a
:class:`workbook.DiscreteBottleneck`'s code are drawn independently, so

``I(x; z) = H(z) - sum_i H(z_i | x) <= sum_i [H(z_i) - H(z_i | x)] = sum_i I(x; z_i)``,

and each ``I(x; z_i)`` needs only the code's probabilities at position ``i``, averaged
over the images: ``H(mean_x q_i(x)) - mean_x H(q_i(x))``. A deterministic code (a
:class:`workbook.VectorQuantizer`) has ``H(z_i | x) = 0``, and the bound is the sum of
its positions' entropies.
"""

from dataclasses import dataclass

import numpy as np

from workbook.core.arguments import is_whole_number, refuse

__all__ = ["CodeRate", "code_rate"]


@dataclass
class CodeRate:
    """What :func:`code_rate` measured on a set of images, in bits per image.

    Introduced in 06_beyond_straight_through.ipynb.

    Attributes
    ----------
    nominal_bits : float
        ``positions * log2(classes)``: what the code could carry.
    information_bits : float
        ``sum_i I(x; z_i)``, an upper bound on ``I(x; z)`` over these images.
    noise_bits : float
        ``sum_i H(z_i | x)``, the code's randomness given the image (0 for a deterministic code).
    deterministic : bool
    halves_bits : float
        How far apart ``information_bits`` is on the first and the second half of the images:
        a yardstick of its estimation noise.
    """

    nominal_bits: float
    information_bits: float
    noise_bits: float
    deterministic: bool
    halves_bits: float = 0.0


def _entropy_bits(probabilities):
    """Entropy in bits along the last axis, 0 log 0 taken as 0."""
    safe = np.where(probabilities > 0, probabilities, 1.0)
    return -np.sum(probabilities * np.log2(safe), axis=-1)


def code_probabilities(model, x, batch_size=256):
    """(probabilities of each position's classes given each image, shape (n, positions, classes), deterministic).

    Introduced in 06_beyond_straight_through.ipynb: the layers before the one named
    ``"bottleneck"`` are run on ``x``; a DiscreteBottleneck's logits give softmax (categorical)
    or ``(1 - p, p)`` (Bernoulli), a VectorQuantizer's nearest code a one-hot row.
    """
    from keras import ops

    names = [layer.name for layer in model.layers]
    if "bottleneck" not in names:
        refuse(
            "model",
            model,
            "an autoencoder with a layer named 'bottleneck', e.g. workbook.autoencoder(...)",
            "code_rate",
        )
    bottleneck = model.get_layer("bottleneck")
    before = model.layers[: names.index("bottleneck")]
    chunks = []
    for start in range(0, len(x), batch_size):
        outputs = ops.convert_to_tensor(x[start : start + batch_size])
        for layer in before:
            outputs = layer(outputs, training=False)
        chunks.append(_probabilities(bottleneck, outputs))
    probabilities = np.concatenate(chunks)
    return probabilities.reshape(len(x), -1, probabilities.shape[-1]), not hasattr(bottleneck, "latent")


def _probabilities(bottleneck, outputs):
    from keras import ops

    if hasattr(bottleneck, "nearest_codes"):  # a codebook: deterministic
        return np.asarray(ops.one_hot(bottleneck.nearest_codes(outputs), bottleneck.n_codes), dtype=float)
    if not hasattr(bottleneck, "latent"):
        refuse(
            "model", bottleneck, "a model whose bottleneck is a DiscreteBottleneck or a VectorQuantizer", "code_rate"
        )
    logits = np.asarray(outputs, dtype=float)
    if bottleneck.latent == "bernoulli":
        p = 1 / (1 + np.exp(-logits))
        return np.stack([1 - p, p], axis=-1)
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def code_rate(model, x, batch_size=256):
    """The code's nominal bits and an upper bound on what it carries about ``x``, as a :class:`CodeRate`.

    Introduced in 06_beyond_straight_through.ipynb; the bound is explained in this module's
    docstring. Estimated on the images ``x``: the average over them of each position's
    probabilities is its marginal (a plug-in estimate, a little low for few images).

    Parameters
    ----------
    model : keras.Model
        An autoencoder whose layer ``"bottleneck"`` is a DiscreteBottleneck or a VectorQuantizer.
    x : numpy.ndarray
        Images, at least 2.
    batch_size : int
    """
    if not is_whole_number(batch_size, low=1):
        refuse("batch_size", batch_size, "a whole number of at least 1, e.g. 256", "code_rate")
    if not hasattr(x, "shape") or len(x) < 2:
        refuse("x", x, "an array of at least 2 images", "code_rate")
    probabilities, deterministic = code_probabilities(model, x, batch_size)
    information, noise = _information_bits(probabilities)
    half = len(x) // 2
    halves = abs(_information_bits(probabilities[:half])[0] - _information_bits(probabilities[half:])[0])
    positions, classes = probabilities.shape[1:]
    return CodeRate(float(positions * np.log2(classes)), information, noise, deterministic, halves)


def _information_bits(probabilities):
    """(sum_i I(x; z_i), sum_i H(z_i | x)) of probabilities shaped (images, positions, classes)."""
    noise = _entropy_bits(probabilities).mean(axis=0)
    marginal = _entropy_bits(probabilities.mean(axis=0))
    return float(np.sum(marginal - noise)), float(np.sum(noise))
