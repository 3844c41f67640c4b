"""The monitor names the op and the line that cut a layer's gradient, found once, after the step."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import workbook
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
    real = diagnosis.find_gradient_breaks

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(diagnosis, "find_gradient_breaks", counted)
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
