"""Cost of GradientNormMonitor on the lab's autoencoder (target at most 1.05x, 1.10x acceptable).

Compared, one epoch of ``fit`` each, interleaved in one run: no monitor; the
monitor recording every batch and every 10th; and the callback students
usually write first, which takes a second GradientTape pass over a batch after
every step. Also the monitor's fallback, on a model whose ``train_step`` updates
the weights past the optimizer hook: it takes an extra tape on the batches it
records (that model without a monitor is measured too, for its own cost).
"""

import warnings

import keras
import numpy as np
import tensorflow as tf
from ab import interleaved, ratio_cell

import workbook


class TapeNormCallback(keras.callbacks.Callback):
    """The hand-written way: after each step, a second forward and backward pass on a batch."""

    def __init__(self, x_batch):
        super().__init__()
        self.x_batch = x_batch
        self.norms = []

    def on_train_batch_end(self, batch, logs=None):
        with tf.GradientTape() as tape:
            reconstruction = self.model(self.x_batch, training=True)
            loss = tf.reduce_mean(tf.square(reconstruction - self.x_batch))
        variables = self.model.trainable_variables
        gradients = tape.gradient(loss, variables)
        self.norms.append([float(tf.norm(g)) for g in gradients if g is not None])


class OptimizerBypassingAutoencoder(keras.Sequential):
    """The lab's autoencoder with a train_step the monitor cannot hook: it calls the optimizer
    class's apply directly, so the monitor falls back to its extra tape."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        gradients = tape.gradient(loss, self.trainable_variables)
        type(self.optimizer).apply(self.optimizer, gradients, self.trainable_variables)
        return {"loss": loss}


def bypassing_autoencoder():
    model = workbook.autoencoder(seed=0)
    bypassing = OptimizerBypassingAutoencoder([keras.Input(model.input_shape[1:]), *model.layers])
    bypassing.compile(optimizer="adam", loss="mse")
    return bypassing


def main(n_train=4000, batch_size=64, pairs=5):
    (x_train, _), _ = workbook.load_mnist(n_train=n_train, n_test=100, source="bundled")
    x_batch = tf.constant(x_train[:batch_size])

    def variant(callback_factory, model_factory=lambda: workbook.autoencoder(seed=0)):
        model = model_factory()
        callback = callback_factory()  # one per model, reused: steps continue, the traced step is kept

        def epoch():
            model.fit(
                x_train, x_train, epochs=1, batch_size=batch_size, verbose=0, callbacks=[callback] if callback else None
            )

        return epoch

    keras.utils.set_random_seed(0)
    baseline = variant(lambda: None)
    variants = {
        # The same plain fit on a second model: how far apart two identical runs land here.
        "no callback (A/A: the noise floor)": variant(lambda: None),
        "GradientNormMonitor(every=1)": variant(lambda: workbook.GradientNormMonitor(every=1, live=False)),
        "GradientNormMonitor(every=10)": variant(lambda: workbook.GradientNormMonitor(every=10, live=False)),
        "extra GradientTape per batch": variant(lambda: TapeNormCallback(x_batch)),
        "train_step past the optimizer, no callback": variant(lambda: None, bypassing_autoencoder),
        "the same, GradientNormMonitor(every=1): fallback": variant(
            lambda: workbook.GradientNormMonitor(every=1, live=False), bypassing_autoencoder
        ),
        "the same, GradientNormMonitor(every=10): fallback": variant(
            lambda: workbook.GradientNormMonitor(every=10, live=False), bypassing_autoencoder
        ),
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="GradientNormMonitor: this model's train_step")
        results = interleaved(baseline, variants, pairs=pairs)
    rows = [
        "| callback | CPU time ratio, median (min–max) | wall time ratio, median (min–max) | CPU s / epoch |",
        "|---|---|---|---|",
    ]
    for name in variants:
        r = results[name]
        rows.append(f"| {name} | {ratio_cell(r['cpu'])} | {ratio_cell(r['wall'])} | {r['cpu_seconds']:.1f} |")
    steps = int(np.ceil(n_train / batch_size))
    return (
        f"## Gradient-norm monitor overhead\n\nOne epoch of `fit` ({n_train} bundled images, batch {batch_size}, "
        f"{steps} steps) with each callback against the same `fit` without one, {pairs} interleaved rounds "
        f"after a warm-up; without a callback: {results['baseline']['cpu_seconds']:.1f} CPU s per epoch. "
        "Target at most 1.05x (1.10x acceptable) on the supported path (a train_step that goes through "
        "the optimizer, as the built-in one and Keras's guides do); the fallback rows state its cost.\n\n"
        + "\n".join(rows)
        + "\n"
    )


if __name__ == "__main__":
    print(main())
