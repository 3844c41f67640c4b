"""A small spiking classifier, as in SpyTorch's first tutorial: spikes in, a hidden layer of
leaky integrate-and-fire neurons, a leaky readout whose maximum over time scores each class.

Introduced in 08_spiking_networks.ipynb.
"""

import math

import keras
import numpy as np

from workbook.core.arguments import check_count, check_seed, is_number, refuse
from workbook.spiking.neurons import LIF, LeakyReadout
from workbook.surrogates.catalogue import SurrogateGradient
from workbook.surrogates.catalogue import surrogate as make_surrogate

__all__ = ["spiking_classifier", "train_steps", "accuracy", "peak_one", "accuracy_by_learning_rate"]


def spiking_classifier(
    time_steps,
    n_inputs,
    n_classes,
    n_hidden=16,
    surrogate="step_fast_sigmoid",
    beta=0.67,
    detach_reset=True,
    recurrent=False,
    weight_scale=7.0,
    learning_rate=2e-3,
    seed=0,
):
    """A compiled Keras model: (batch, time_steps, n_inputs) spikes -> class logits.

    Introduced in 08_spiking_networks.ipynb. The weights start as SpyTorch's do: normal, standard
    deviation ``weight_scale * (1 - beta) / sqrt(fan_in)``, enough for a few spikes at the start.
    Adam at ``learning_rate`` on the cross-entropy of the readout's maximum over time.
    """
    owner = "spiking_classifier"
    check_count("time_steps", time_steps, low=1, high=100_000, owner=owner, example=50)
    check_count("n_inputs", n_inputs, low=1, high=100_000, owner=owner, example=100)
    check_count("n_classes", n_classes, low=2, high=100_000, owner=owner, example=2)
    check_count("n_hidden", n_hidden, low=1, high=100_000, owner=owner, example=16)
    if not is_number(weight_scale, 0, include_low=False):
        refuse("weight_scale", weight_scale, "a number greater than 0, e.g. 7.0 (SpyTorch's)", owner)
    check_seed(seed, owner)

    def start(fan_in, offset):
        stddev = weight_scale * (1 - beta) / math.sqrt(fan_in)
        return keras.initializers.RandomNormal(stddev=stddev, seed=seed * 10 + offset)

    inputs = keras.Input((time_steps, n_inputs), name="spikes")
    hidden = LIF(
        n_hidden,
        surrogate=surrogate,
        beta=beta,
        detach_reset=detach_reset,
        recurrent=recurrent,
        kernel_initializer=start(n_inputs, 1),
        recurrent_initializer=start(n_hidden, 2),
        name="hidden",
    )(inputs)
    readout = LeakyReadout(n_classes, beta=beta, kernel_initializer=start(n_hidden, 3), name="readout")(hidden)
    scores = keras.layers.GlobalMaxPooling1D(name="max_over_time")(readout)
    model = keras.Model(inputs, scores, name="spiking_classifier")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def train_steps(model, x, y, steps, chunk=10, callbacks=None):
    """Train on the whole of ``x`` as one batch for ``steps`` Adam steps; return the loss every ``chunk`` steps.

    Introduced in 08_spiking_networks.ipynb: SpyTorch's first tutorial takes its 256 patterns as one
    batch, so every step sees all of them. One ``fit`` call over a repeated data set, so the
    per-epoch work of ``fit`` is paid every ``chunk`` steps rather than at every step.
    """
    import tensorflow as tf

    owner = "train_steps"
    check_count("steps", steps, low=1, high=1_000_000, owner=owner, example=300)
    check_count("chunk", chunk, low=1, high=steps, owner=owner, example=10)
    if steps % chunk:
        refuse("steps", steps, f"a multiple of chunk={chunk}, so that every step asked for is trained", owner)
    data = tf.data.Dataset.from_tensors((x, y)).repeat()
    history = model.fit(
        data, epochs=steps // chunk, steps_per_epoch=chunk, shuffle=False, verbose=0, callbacks=callbacks
    )
    return np.array(history.history["loss"])


def accuracy(model, x, y):
    """The share of ``x`` whose highest-scoring class is ``y``."""
    scores = model(x, training=False)  # eagerly: a predict() would trace the unrolled network once more
    return float(np.mean(np.argmax(np.asarray(scores), axis=-1) == np.asarray(y)))


def accuracy_by_learning_rate(model, x, y, x_test, y_test, learning_rates, steps):
    """Test accuracy of ``model`` trained ``steps`` Adam steps on ``x`` at each learning rate, from the same start.

    Introduced in 08_spiking_networks.ipynb (the sweep over steepness and learning rate, as in
    Zenke & Vogels's Figure 3). Before each run the weights and the optimizer's state go back to
    what they were before the first: each run is the one a fresh copy of the model would make,
    without tracing the unrolled network again.
    """
    if (
        not isinstance(learning_rates, (list, tuple))
        or not learning_rates
        or not all(is_number(r, 0, include_low=False) for r in learning_rates)
    ):
        refuse(
            "learning_rates",
            learning_rates,
            "a list of numbers above 0, e.g. [1e-3, 1e-2, 1e-1]",
            "accuracy_by_learning_rate",
        )
    optimizer = model.optimizer
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    start, optimizer_start = model.get_weights(), [v.numpy() for v in optimizer.variables]
    results = {}
    for learning_rate in learning_rates:
        model.set_weights(start)
        for variable, value in zip(optimizer.variables, optimizer_start, strict=True):
            variable.assign(value)
        optimizer.learning_rate = float(learning_rate)
        train_steps(model, x, y, steps)
        results[learning_rate] = accuracy(model, x_test, y_test)
    return results


def peak_one(surrogate):
    """The same spike with its surrogate derivative divided by its value at 0: a peak of 1 at the threshold.

    Introduced in 08_spiking_networks.ipynb: Zenke & Vogels (2021) compare shapes normalised so.
    The result is a ``workbook.surrogate(...)`` of its own, so a layer using it cannot be saved.
    """
    if not isinstance(surrogate, SurrogateGradient):
        refuse("surrogate", surrogate, "a surrogate, e.g. workbook.SURROGATES['step_sigmoid']", "peak_one")
    peak = float(np.asarray(surrogate.derivative(np.zeros(1, dtype="float32")))[0])
    if not peak > 0:
        refuse("surrogate", surrogate, "a surrogate whose derivative at 0 is above 0", "peak_one")
    return make_surrogate(
        surrogate.forward, lambda x: surrogate.derivative(x) / peak, name=f"{surrogate.name}_peak_one"
    )
