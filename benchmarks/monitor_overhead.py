"""Cost of GradientNormMonitor on the lab's autoencoder (target at most 1.05x, 1.10x acceptable).

Compared, one epoch of ``fit`` each, interleaved in one run: no monitor; the
monitor recording every batch and every 10th, one kept across fits and a new
one per ``fit`` (as the notebooks make them); and the callback students usually
write first, which takes a second GradientTape pass over a batch after every
step. Also a model whose ``train_step`` updates the weights past the optimizer,
where the monitor records nothing (that model without a monitor is measured
too, for its own cost). Then, as notebook 04 and ``compare_bottlenecks`` run
it, a new model per ``fit`` (built, traced and trained one epoch) with a new
monitor against the same without one.
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
    """The lab's autoencoder with a train_step the monitor cannot read: it calls the optimizer
    class's apply directly, past the model's optimizer.apply, so the monitor records nothing."""

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

    def variant(callback_factory, model_factory=lambda: workbook.autoencoder(seed=0), new_per_fit=False):
        model = model_factory()
        callback = None if new_per_fit else callback_factory()  # kept: steps continue across fits

        def epoch():
            used = callback_factory() if new_per_fit else callback
            model.fit(x_train, x_train, epochs=1, batch_size=batch_size, verbose=0, callbacks=[used] if used else None)

        return epoch

    def new_model_per_fit(callback_factory):
        def build_and_fit():
            callback = callback_factory()
            model = workbook.autoencoder(seed=0)
            model.fit(
                x_train, x_train, epochs=1, batch_size=batch_size, verbose=0, callbacks=[callback] if callback else None
            )

        return build_and_fit

    def monitor(every):
        return lambda: workbook.GradientNormMonitor(every=every, live=False)

    keras.utils.set_random_seed(0)
    baseline = variant(lambda: None)
    variants = {
        # The same plain fit on a second model: how far apart two identical runs land here.
        "no callback (A/A: the noise floor)": variant(lambda: None),
        "GradientNormMonitor(every=1), one kept across fits": variant(monitor(1)),
        "GradientNormMonitor(every=10), one kept across fits": variant(monitor(10)),
        "GradientNormMonitor(every=1), a new one per fit (as notebooks make them)": variant(
            monitor(1), new_per_fit=True
        ),
        "GradientNormMonitor(every=10), a new one per fit": variant(monitor(10), new_per_fit=True),
        "extra GradientTape per batch": variant(lambda: TapeNormCallback(x_batch)),
        "train_step past the optimizer, no callback": variant(lambda: None, bypassing_autoencoder),
        "the same, a new GradientNormMonitor(every=1) per fit: records nothing": variant(
            monitor(1), bypassing_autoencoder, new_per_fit=True
        ),
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="GradientNormMonitor records nothing")
        results = interleaved(baseline, variants, pairs=pairs)
    fresh = {"a new GradientNormMonitor(every=1)": new_model_per_fit(monitor(1))}
    fresh_results = interleaved(new_model_per_fit(lambda: None), fresh, pairs=pairs)
    fresh_note = (
        "\n\nA new model per fit, built, traced and trained for one epoch, against the same without a callback "
        f"({fresh_results['baseline']['cpu_seconds']:.1f} CPU s each):\n\n"
    )
    steps = int(np.ceil(n_train / batch_size))
    return (
        f"## Gradient-norm monitor overhead\n\nOne epoch of `fit` ({n_train} bundled images, batch {batch_size}, "
        f"{steps} steps) with each callback against the same `fit` on the same model without one, {pairs} "
        f"interleaved rounds after a warm-up; without a callback: {results['baseline']['cpu_seconds']:.1f} CPU s "
        "per epoch. Target at most 1.05x (1.10x acceptable) where the monitor records (a train_step that goes "
        "through the optimizer, as the built-in one and Keras's guides do), a new monitor per fit included.\n\n"
        + table(results, variants)
        + fresh_note
        + table(fresh_results, fresh)
        + cut_finding(n_train, batch_size, pairs)
    )


def int_cast(z):
    return keras.ops.cast(keras.ops.cast(z, "int32"), "float32")


def cut_finding(n_train=4000, batch_size=64, pairs=5):
    """The monitor with and without naming the op that cut a gradient (``find_cuts``), side by side.

    Where every gradient flows the finder never runs, so the two should not differ; where a
    cast cuts the encoder, a new monitor per fit runs the finder once per fit.
    """
    (x_train, _), _ = workbook.load_mnist(n_train=n_train, n_test=100, source="bundled")

    def fits(bottleneck, find_cuts):
        model = workbook.autoencoder(bottleneck, seed=0)
        if find_cuts is None:
            return lambda: model.fit(x_train, x_train, epochs=1, batch_size=batch_size, verbose=0)

        def epoch():
            monitor = workbook.GradientNormMonitor(every=1, live=False, find_cuts=find_cuts)
            model.fit(x_train, x_train, epochs=1, batch_size=batch_size, verbose=0, callbacks=[monitor])

        return epoch

    keras.utils.set_random_seed(0)
    sections = []
    for title, bottleneck in [("every gradient flows", None), ("an integer cast cuts the encoder", int_cast)]:
        variants = {
            "a new GradientNormMonitor(every=1, find_cuts=False) per fit": fits(bottleneck, False),
            "a new GradientNormMonitor(every=1, find_cuts=True) per fit (the default)": fits(bottleneck, True),
        }
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Gradients do not exist")
            results = interleaved(fits(bottleneck, None), variants, pairs=pairs)
        sections.append(
            f"{title} (without a callback: {results['baseline']['cpu_seconds']:.1f} CPU s per epoch):\n\n"
            + table(results, variants)
        )
    return (
        "\n\nNaming the op that cut a gradient (`find_cuts`), one epoch with a new monitor per fit against "
        f"the same fit without one, {pairs} interleaved rounds. Where every gradient flows the finder is "
        "never called, so the two rows should match within the noise; where a cast cuts the encoder it runs "
        "once per new monitor.\n\n" + "\n\n".join(sections) + "\n"
    )


def table(results, names):
    rows = [
        "| callback | CPU time ratio, median (min–max) | wall time ratio, median (min–max) | CPU s / epoch |",
        "|---|---|---|---|",
    ]
    for name in names:
        r = results[name]
        rows.append(f"| {name} | {ratio_cell(r['cpu'])} | {ratio_cell(r['wall'])} | {r['cpu_seconds']:.1f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(main())
