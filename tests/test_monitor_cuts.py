"""The monitor names the op and the line that cut a layer's gradient, found once, after the step."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import workbook
from workbook.core import internals
from workbook.finder import diagnosis
from workbook.monitor.recording import GradientNormRecorder


def rounding(z):
    return tf.round(z)


ROUND_LINE = rounding.__code__.co_firstlineno + 1


def signing(z):
    return tf.sign(z)


SIGN_LINE = signing.__code__.co_firstlineno + 1


def model_with(cut, seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(4, name="encoder"),
            keras.layers.Lambda(cut, name="bottleneck"),
            keras.layers.Dense(8, name="decoder"),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


@pytest.fixture(scope="module")
def x_train():
    return np.random.default_rng(0).random((96, 8), dtype=np.float32)


def encoder_gradient(model, x_batch):
    """The encoder kernel's gradient of the MSE written out by hand, from a plain GradientTape."""
    kernel = model.get_layer("encoder").kernel
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x_batch, training=True) - x_batch))
    return tape.gradient(loss, kernel)


@pytest.fixture
def finder_calls(monkeypatch):
    """Counts the calls of the finder, and lets each run as it is."""
    calls = []
    real = diagnosis.find_known_breaks  # the finder, told that a gradient starves

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(diagnosis, "find_known_breaks", counted)
    return calls


def monitored_fit(model, x_train, **options):
    monitor = workbook.GradientNormMonitor(every=1, live=False, **options)
    model.fit(x_train, x_train, batch_size=32, epochs=2, shuffle=False, callbacks=[monitor], verbose=0)
    return monitor.history


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
def test_a_round_in_a_lambda_is_named_with_its_line_once(x_train, finder_calls):
    model = model_with(rounding)
    assert encoder_gradient(model, x_train[:32]) is None  # the tape: no gradient reaches the encoder
    history = monitored_fit(model, x_train)
    assert len(history) == 6 and history.no_gradient[:, history.layers.index("encoder")].all()
    assert len(finder_calls) == 1  # six records of a dead layer, one search
    found = history.cut_by["encoder"]
    assert (found.op_type, found.line, found.file) == ("Round", ROUND_LINE, __file__)
    assert "decoder" not in history.cut_by
    assert f"no gradient: encoder (cut by Round at test_monitor_cuts.py:{ROUND_LINE}: `return tf.round(z)`)" in repr(
        history
    )
    rows = [text.get_text() for text in history.plot().axes[0].texts]
    assert rows == [f"encoder: no gradient, cut by Round at test_monitor_cuts.py:{ROUND_LINE}"]


def test_a_sign_gives_exactly_zero_and_is_named(x_train, finder_calls):
    model = model_with(signing)
    gradient = encoder_gradient(model, x_train[:32])
    assert gradient is not None and not np.any(gradient.numpy())  # the tape: a gradient, all zeros
    history = monitored_fit(model, x_train)
    encoder = history.layers.index("encoder")
    assert np.all(history.norms[:, encoder] == 0) and not history.no_gradient.any()
    assert len(finder_calls) == 1
    found = history.cut_by["encoder"]
    assert (found.op_type, found.line) == ("Sign", SIGN_LINE)
    assert "gradient exactly 0: encoder (cut by Sign" in repr(history)
    rows = [text.get_text() for text in history.plot().axes[0].texts]
    assert rows == [f"encoder: gradient exactly 0, cut by Sign at test_monitor_cuts.py:{SIGN_LINE}"]


def test_a_healthy_model_never_calls_the_finder(x_train, finder_calls):
    model = model_with(lambda z: z)
    assert encoder_gradient(model, x_train[:32]) is not None
    history = monitored_fit(model, x_train)
    assert len(history) == 6 and np.all(history.norms > 0)
    assert finder_calls == [] and history.cut_by == {}
    assert repr(history) == "GradientNormHistory(6 records of 2 layers)"


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
def test_find_cuts_false_never_calls_the_finder(x_train, finder_calls):
    history = monitored_fit(model_with(rounding), x_train, find_cuts=False)
    assert history.no_gradient.any() and finder_calls == [] and history.cut_by == {}


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
def test_the_recorder_alone_names_no_op_and_its_repr_names_its_own_class(x_train, finder_calls):
    model = model_with(rounding)
    recorder = GradientNormRecorder(every=1)
    model.fit(x_train, x_train, batch_size=32, epochs=1, callbacks=[recorder], verbose=0)
    assert finder_calls == [] and recorder.history.cut_by == {}
    assert repr(recorder.history) == "GradientNormRecords(3 records of 2 layers; no gradient: encoder)"


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
def test_a_dataset_fit_is_searched_on_its_first_batch(x_train, finder_calls):
    data = tf.data.Dataset.from_tensor_slices((x_train, x_train)).batch(32)
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    model_with(rounding).fit(data, epochs=1, shuffle=False, callbacks=[monitor], verbose=0)
    assert len(finder_calls) == 1 and tuple(finder_calls[0][1][0].shape) == (32, 8)
    assert monitor.history.cut_by["encoder"].op_type == "Round"


def test_bad_find_cuts_is_refused_with_the_value():
    with pytest.raises(ValueError, match=r"find_cuts='yes' must be True \(name the op that cut a gradient\) or False"):
        workbook.GradientNormMonitor(find_cuts="yes")


def int_cast(z):
    return keras.ops.cast(keras.ops.cast(z, "int32"), "float32")


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
def test_a_layer_at_zero_behind_the_cut_is_not_blamed_on_an_op():
    (x_train, _), _ = workbook.load_mnist(n_train=128, n_test=16, source="bundled")
    model = workbook.autoencoder(int_cast)
    decoder = model.get_layer("decoder").kernel
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x_train[:64], training=True) - x_train[:64]))
    gradient = tape.gradient(loss, decoder)
    assert gradient is not None and not np.any(gradient.numpy())  # the tape: exactly 0, not None
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    model.fit(x_train, x_train, batch_size=64, epochs=1, callbacks=[monitor], verbose=0)
    history = monitor.history
    assert history.cut_by["encoder"].op_type == "Cast"
    assert history.cut_by["decoder"] == "no op cuts it: its gradient is 0 for these values"
    assert "gradient exactly 0: decoder (no op cuts it" in repr(history)


# -- find_cuts changes nothing in training: same data drawn, same steps, losses and weights ---------


def noisy_rounding(z):
    # Unseeded: Keras draws it from its global SeedGenerator, which the finder also reaches.
    return tf.round(z) + keras.random.normal(keras.ops.shape(z), stddev=0.1)


def seeded(seed):
    """Every random generator started over from ``seed``, Keras's global SeedGenerator included."""
    keras.random.normal(())  # makes that generator now if there is none, not after the seeding
    keras.utils.set_random_seed(seed)
    generator = internals.keras_global_seed_generator()
    if generator is not None:  # Keras 3.8 leaves it running where it was (3.15 drops it, to make it anew)
        generator.state.assign(np.array([seed, 0], dtype=generator.state.dtype))


def model_with_noise(cut, seed=0):
    """A model whose training draws random numbers in every way Keras offers: BatchNorm, Dropout, GaussianNoise."""
    seeded(seed)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(4, name="encoder"),
            keras.layers.BatchNormalization(name="normalised"),
            keras.layers.Dropout(0.25, name="dropped"),
            keras.layers.GaussianNoise(0.1, name="noised"),
            keras.layers.Lambda(cut, name="bottleneck"),
            keras.layers.Dense(8, name="decoder"),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


class Source:
    """Batches of 32 rows of x_train as (x, x), counting the calls that start a pass and the rows handed out."""

    def __init__(self, x_train):
        self.x_train, self.calls, self.rows = x_train, 0, 0

    def batches(self, passes=1):
        self.calls += 1
        for _ in range(passes):
            for start in range(0, len(self.x_train), 32):
                batch = self.x_train[start : start + 32]
                self.rows += len(batch)
                yield batch, batch


def fit_arrays(model, x_train, source, callbacks):
    return model.fit(x_train, x_train, batch_size=32, epochs=2, shuffle=False, callbacks=callbacks, verbose=0)


def fit_from_generator(model, x_train, source, callbacks):
    spec = tf.TensorSpec((None, 8), tf.float32)
    data = tf.data.Dataset.from_generator(source.batches, output_signature=(spec, spec))
    return model.fit(data, epochs=2, callbacks=callbacks, verbose=0)


def fit_shared_generator(model, x_train, source, callbacks):
    # Exactly the batches two epochs take: one batch read twice and the fit runs out.
    return model.fit(source.batches(passes=2), epochs=2, steps_per_epoch=3, callbacks=callbacks, verbose=0)


FITS = {
    "arrays, BatchNorm, Dropout, GaussianNoise": (rounding, fit_arrays),
    "tf.data.Dataset.from_generator": (rounding, fit_from_generator),
    "one shared generator": (rounding, fit_shared_generator),
    "unseeded keras.random.normal in a Lambda": (noisy_rounding, fit_arrays),
}


def one_run(case, x_train, find_cuts, monitors=1):
    """Train a seeded model as the case says, with `monitors` monitors (find_cuts True or False) or none (None)."""
    cut, fit = FITS[case]
    model, source = model_with_noise(cut), Source(x_train)
    callbacks = [] if find_cuts is None else [workbook.GradientNormMonitor(every=1, live=False, find_cuts=find_cuts)]
    callbacks += [workbook.GradientNormMonitor(every=2, live=False) for _ in range(monitors - 1)]
    logs = fit(model, x_train, source, callbacks)
    monitor = callbacks[0] if callbacks else None
    return {
        "calls": source.calls,
        "rows": source.rows,
        "losses": logs.history["loss"],
        "weights": model.get_weights(),
        "after": keras.random.normal((6,)).numpy(),  # the next unseeded draw after the fit
        "monitor": monitor,
        "monitors": callbacks,
    }


def assert_same_training(run, plain):
    assert (run["calls"], run["rows"]) == (plain["calls"], plain["rows"])
    assert run["losses"] == plain["losses"]  # exactly, every epoch
    assert len(run["weights"]) == len(plain["weights"])
    for weight, plain_weight in zip(run["weights"], plain["weights"], strict=True):
        np.testing.assert_array_equal(weight, plain_weight)
    np.testing.assert_array_equal(run["after"], plain["after"])


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
@pytest.mark.parametrize("case", list(FITS))
def test_find_cuts_trains_exactly_as_without_it_and_names_the_cut(x_train, finder_calls, case):
    plain = one_run(case, x_train, find_cuts=None)
    off = one_run(case, x_train, find_cuts=False)
    assert finder_calls == []
    on = one_run(case, x_train, find_cuts=True)
    assert len(finder_calls) == 1
    assert_same_training(off, plain)
    assert_same_training(on, plain)
    records, records_off = on["monitor"].history, off["monitor"].history
    assert len(records) == len(records_off) == 6 and np.array_equal(records.steps, records_off.steps)
    np.testing.assert_array_equal(records.norms, records_off.norms)
    found = records.cut_by["encoder"]
    assert (found.op_type, found.file) == ("Round", __file__)


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
@pytest.mark.parametrize("case", ["arrays, BatchNorm, Dropout, GaussianNoise", "one shared generator"])
@pytest.mark.parametrize("monitors", [2, 3])
def test_every_monitor_on_a_fit_names_the_cut_and_training_is_as_without_them(x_train, finder_calls, case, monitors):
    # The first monitor's batch end used to let the batch go before the next one read it.
    plain = one_run(case, x_train, find_cuts=None)
    run = one_run(case, x_train, find_cuts=True, monitors=monitors)
    assert_same_training(run, plain)
    for monitor in run["monitors"]:
        found = monitor.history.cut_by["encoder"]
        assert not isinstance(found, str), found
        assert (found.op_type, found.file) == ("Round", __file__)
    # Each monitor searched the very batch the first step trained on: the first 32 rows.
    assert len(finder_calls) == monitors
    for call in finder_calls:
        np.testing.assert_array_equal(call[1][0], x_train[:32])


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
def test_the_finder_runs_on_the_batch_the_step_trained_on(finder_calls):
    rng, yielded = np.random.default_rng(7), []

    def batches():  # new rows at every call: a second read would hand the finder other rows
        for _ in range(3):
            yielded.append(rng.random((40, 8), dtype=np.float32))
            yield yielded[-1], 2 * yielded[-1]

    spec = tf.TensorSpec((None, 8), tf.float32)
    data = tf.data.Dataset.from_generator(batches, output_signature=(spec, spec))
    model_with(rounding).fit(data, epochs=1, callbacks=[workbook.GradientNormMonitor(every=1, live=False)], verbose=0)
    assert len(yielded) == 3
    (example,) = [call[1] for call in finder_calls]
    assert len(example) == 2  # (x, y): the loss fit differentiates
    np.testing.assert_array_equal(example[0], yielded[0])
    np.testing.assert_array_equal(example[1], 2 * yielded[0])


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
def test_the_finder_leaves_keras_and_tensorflow_random_draws_as_found(x_train):
    model = model_with(noisy_rounding)
    example = (x_train[:32], x_train[:32])

    def draws():
        return [keras.random.normal((4,)).numpy(), tf.random.normal((4,)).numpy(), np.random.random(4)]

    seeded(5)
    model(example[0], training=True)  # Keras's global SeedGenerator exists before the finder runs
    without = draws()
    seeded(5)
    model(example[0], training=True)
    assert diagnosis.find_gradient_breaks(model, example).findings[0].op_type == "Round"
    for got, expected in zip(draws(), without, strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
def test_a_fit_that_fails_leaves_no_batch_on_the_model(x_train):
    # on_train_end never comes when fit raises; the step stays on the model's train function,
    # and must not keep the student's last batch alive with it.
    from workbook.monitor.recording import _MonitoredStep

    class Stop(Exception):
        pass

    class StopAtSecondBatch(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                raise Stop()

    model = model_with(rounding)
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    with pytest.raises(Stop):
        model.fit(x_train, x_train, batch_size=32, callbacks=[monitor, StopAtSecondBatch()], verbose=0)
    assert len(monitor.history) == 2  # it recorded both batches, the cut named from the first
    step = _MonitoredStep.of(model)
    assert step.calls >= 2  # the step that trained, still with the model (not one made anew)
    assert step.batch is None


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
def test_a_finder_that_fails_half_way_costs_the_training_nothing_and_says_so(x_train, monkeypatch):
    # The finder has traced and run the model (drawing as training does) when its walk fails.
    plain = one_run("arrays, BatchNorm, Dropout, GaussianNoise", x_train, find_cuts=None)

    def failing_walk(*arguments, **options):
        raise RuntimeError("the walk failed")

    monkeypatch.setattr(diagnosis, "analyse", failing_walk)
    run = one_run("arrays, BatchNorm, Dropout, GaussianNoise", x_train, find_cuts=True)
    assert_same_training(run, plain)
    assert run["monitor"].history.cut_by["encoder"] == "no op named: the finder failed (RuntimeError: the walk failed)"
