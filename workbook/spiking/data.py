"""Seeded spike data sets, made on the spot (no download).

Introduced in 08_spiking_networks.ipynb. :func:`random_spike_patterns` is the task of
SpyTorch's first tutorial (Neftci, Mostafa & Zenke 2019; github.com/fzenke/spytorch): random
input spikes, random labels, to be learnt by heart. :func:`randman_spikes` is a small version of
the Randman task of Zenke & Vogels (2021), written from the description and the reference code
of github.com/fzenke/randman: each class is a random smooth manifold, and every input neuron
fires exactly once, at a time given by the manifold's coordinate, so the class is in the
timing only, not in the spike counts.
"""

import math

import numpy as np

from workbook.core.arguments import check_count, check_seed, is_number, refuse

__all__ = ["random_spike_patterns", "randman_spikes"]


def random_spike_patterns(n_samples=256, time_steps=50, n_inputs=100, rate=0.02, n_classes=2, seed=0):
    """Random spike trains and random labels: ``x`` (n_samples, time_steps, n_inputs) of 0/1, ``y`` ints.

    Introduced in 08_spiking_networks.ipynb. Each input fires at each step with probability
    ``rate`` (SpyTorch: 5 Hz at 1 ms steps, 0.005 over 200 steps; here 0.02 over 50 steps, the
    same one spike per input on average).
    """
    owner = "random_spike_patterns"
    _check_sizes(owner, n_samples=n_samples, time_steps=time_steps, n_inputs=n_inputs)
    check_count("n_classes", n_classes, low=2, owner=owner, example=2)
    if not is_number(rate, 0, 1, include_low=False):
        refuse("rate", rate, "a probability per step in (0, 1], e.g. 0.02", owner)
    check_seed(seed, owner)
    rng = np.random.default_rng(seed)
    x = (rng.uniform(size=(n_samples, time_steps, n_inputs)) < rate).astype("float32")
    return x, rng.integers(0, n_classes, size=n_samples)


def randman_spikes(
    n_classes=4, n_per_class=100, n_inputs=20, time_steps=50, manifold_dim=1, alpha=2.0, seed=0, precision=1e-3
):
    """Spike patterns from random smooth manifolds, one per class; every input fires exactly once.

    Introduced in 08_spiking_networks.ipynb. Returns ``x`` (n_classes * n_per_class,
    time_steps, n_inputs) of 0/1, ``y`` ints, shuffled. Input ``i`` of class ``c`` is the
    smooth random function ``f_ci(z) = prod_d sum_k a_k / (k+1)^alpha sin(2 pi (k z_d b_k + c_k))``
    of a point ``z`` drawn uniformly from ``[0, 1]^manifold_dim``, rescaled to [0, 1] over the
    class's samples and turned into the step of its one spike. A larger ``alpha`` is smoother.
    """
    owner = "randman_spikes"
    _check_sizes(owner, n_per_class=n_per_class, n_inputs=n_inputs, time_steps=time_steps)
    check_count("n_classes", n_classes, low=2, owner=owner, example=4)
    check_count("manifold_dim", manifold_dim, low=1, high=10, owner=owner, example=1)
    if not is_number(alpha, 0, 10, include_low=False):
        refuse("alpha", alpha, "a number in (0, 10]: how fast the manifold's spectrum falls off, e.g. 2", owner)
    check_seed(seed, owner)
    rng = np.random.default_rng(seed)
    n_frequencies = min(math.ceil(precision ** (-1 / alpha)), 1000)  # randman's cut-off
    falloff = 1.0 / np.arange(1, n_frequencies + 1) ** alpha
    xs, ys = [], []
    for label in range(n_classes):
        amplitude, frequency, phase = rng.uniform(size=(3, n_inputs, manifold_dim, n_frequencies))
        amplitude[..., 0] = 0.0  # no constant offset (randman's use_bias=False)
        z = rng.uniform(size=(n_per_class, manifold_dim))
        k = np.arange(n_frequencies)
        # (samples, inputs, dims, frequencies) -> sum over frequencies, product over dims
        waves = amplitude * falloff * np.sin(2 * np.pi * (k * z[:, None, :, None] * frequency + phase))
        values = waves.sum(axis=-1).prod(axis=-1)
        low, high = values.min(axis=0), values.max(axis=0)
        timing = (values - low) / (high - low + 1e-7)
        spike_step = np.round(timing * (time_steps - 1)).astype(int)
        x = np.zeros((n_per_class, time_steps, n_inputs), dtype="float32")
        x[np.arange(n_per_class)[:, None], spike_step, np.arange(n_inputs)[None, :]] = 1.0
        xs.append(x)
        ys.append(np.full(n_per_class, label))
    order = rng.permutation(n_classes * n_per_class)
    return np.concatenate(xs)[order], np.concatenate(ys)[order]


def _check_sizes(owner, **sizes):
    for name, value in sizes.items():
        check_count(name, value, low=1, high=100_000, owner=owner, example=50)
