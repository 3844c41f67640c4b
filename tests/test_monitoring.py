"""GradientNormMonitor: the real step's gradients, and a model left as it was found."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import workbook
from workbook import monitoring


def int_cast(z):
    return keras.ops.cast(keras.ops.cast(z, "int32"), "float32")


FINE_CAST = ("cast_int_ste", 4)  # a resolution of 1/4 keeps the information


@pytest.fixture(scope="module")
def x_train():
    (x_train, _), _ = workbook.load_mnist(n_train=256, n_test=64, source="bundled")
    return x_train


def fine_cast():
    name, scale = FINE_CAST
    return workbook.SURROGATES[name].with_params(scale=scale)


def gradient_norms(model, x_batch):
    """Per-layer L2 gradient norms of the MSE written out by hand, from one GradientTape."""
    variables = [v for layer in model.layers for v in layer.trainable_variables]
    with tf.GradientTape() as tape:
        reconstruction = model(x_batch, training=True)
        loss = tf.reduce_mean(tf.square(reconstruction - x_batch))
    grads = dict(zip(map(id, variables), tape.gradient(loss, variables)))
    norms = {}
    for layer in model.layers:
        if layer.trainable_variables:
            squares = [0.0 if grads[id(v)] is None else float(tf.reduce_sum(grads[id(v)] ** 2))
                       for v in layer.trainable_variables]
            norms[layer.name] = np.sqrt(sum(squares))
    return norms


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize("bottleneck", [None, "fine cast"])
def test_first_record_equals_an_independent_gradient_tape(x_train, bottleneck, optimizer):
    model = workbook.autoencoder(fine_cast() if bottleneck else None, seed=1)
    if optimizer == "sgd":
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    expected = gradient_norms(model, x_train[:64])  # initial weights, first batch
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    model.fit(x_train, x_train, batch_size=64, epochs=1, shuffle=False, callbacks=[monitor], verbose=0)
    history = monitor.history
    assert history.layers == ["encoder", "decoder", "output"]
    assert history.norms.shape == (4, 3) and np.array_equal(history.steps, [0, 1, 2, 3])
    np.testing.assert_allclose(history.norms[0], [expected[name] for name in history.layers], rtol=1e-3)
    assert np.all(history.norms > 0) and not history.no_gradient.any()


def test_integer_cast_kills_the_encoder_gradient_and_its_weights_stay(x_train):
    model = workbook.autoencoder(int_cast)
    before = {layer.name: [w.copy() for w in layer.get_weights()] for layer in model.layers}
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    with pytest.warns(UserWarning, match="Gradients do not exist"):
        model.fit(x_train, x_train, batch_size=64, epochs=1, callbacks=[monitor], verbose=0)
    history = monitor.history
    encoder, output = history.layers.index("encoder"), history.layers.index("output")
    assert np.all(history.norms[:, encoder] == 0) and history.no_gradient[:, encoder].all()
    assert np.all(history.norms[:, output] > 0) and not history.no_gradient[:, output].any()
    assert history.dead_layers() == ["encoder"]
    assert all(np.array_equal(a, b) for a, b in zip(before["encoder"], model.get_layer("encoder").get_weights()))
    # Only the output bias learns: every input of the layers after the cast is 0.
    assert not np.array_equal(before["output"][1], model.get_layer("output").get_weights()[1])
    figure = monitor.plot()
    assert any("encoder: no gradient" in text.get_text() for text in figure.axes[0].texts)


def test_straight_through_cast_at_scale_1_gives_zero_not_none(x_train):
    # The forward sends ReLU outputs in [0, 1) to 0: the decoder sees zeros, so even the
    # straight-through gradient is exactly 0 upstream of it -- but it exists.
    model = workbook.autoencoder("cast_int_ste")
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[monitor], verbose=0)
    by_layer = dict(zip(monitor.history.layers, monitor.history.norms.T))
    assert np.all(by_layer["encoder"] == 0) and np.all(by_layer["decoder"] == 0)
    assert np.all(by_layer["output"] > 0)
    assert not monitor.history.no_gradient.any()


@pytest.mark.parametrize("bottleneck", [None, "fine cast"])
def test_gradient_flows_everywhere_with_identity_or_a_fine_straight_through_cast(x_train, bottleneck):
    model = workbook.autoencoder(fine_cast() if bottleneck else None)
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    model.fit(x_train[:128], x_train[:128], batch_size=32, callbacks=[monitor], verbose=0)
    assert np.all(monitor.history.norms > 0) and not monitor.history.no_gradient.any()


def test_steps_continue_across_fits_and_validation_works(x_train):
    model = workbook.autoencoder(None)
    monitor = workbook.GradientNormMonitor(every=2, live=False)
    first = model.fit(x_train[:192], x_train[:192], batch_size=64, epochs=2,
                      validation_data=(x_train[192:], x_train[192:]), callbacks=[monitor], verbose=0)
    assert "val_loss" in first.history
    assert np.array_equal(monitor.history.steps, [0, 2, 4])  # 3 batches per epoch, 2 epochs
    model.fit(x_train[:192], x_train[:192], batch_size=64, callbacks=[monitor], verbose=0)
    assert np.array_equal(monitor.history.steps, [0, 2, 4, 6, 8])


def test_steps_per_execution_records_the_last_batch_of_each_call(x_train):
    model = workbook.autoencoder(None)
    model.compile(optimizer="adam", loss="mse", steps_per_execution=2)
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    # 160 images in batches of 64: 3 batches (the last of 32), run two at a time, so
    # each epoch's second call runs one batch although Keras reports the range 2..3.
    model.fit(x_train[:160], x_train[:160], batch_size=64, epochs=2, callbacks=[monitor], verbose=0)
    assert np.array_equal(monitor.history.steps, [1, 2, 4, 5])
    assert np.all(np.isfinite(monitor.history.norms)) and np.all(monitor.history.norms > 0)


def test_frozen_layers_are_not_listed(x_train):
    model = workbook.autoencoder(None)
    model.get_layer("encoder").trainable = False
    model.compile(optimizer="adam", loss="mse")
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[monitor], verbose=0)
    assert monitor.history.layers == ["decoder", "output"]
    assert monitor.history.norms.shape == (2, 2) and np.all(monitor.history.norms > 0)


def assert_unpatched(model):
    assert "apply_gradients" not in model.optimizer.__dict__
    assert not hasattr(model.train_function, monitoring._MARK)


def test_the_model_saves_loads_and_trains_plainly_after_a_monitored_fit(x_train, tmp_path):
    model = workbook.autoencoder(fine_cast())
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[monitor], verbose=0)
    assert_unpatched(model)
    recorded = len(monitor.history)
    model.fit(x_train[:128], x_train[:128], batch_size=64, verbose=0)
    assert len(monitor.history) == recorded  # the plain fit ran the plain step
    path = tmp_path / "lab.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(loaded.predict(x_train[:8], verbose=0), model.predict(x_train[:8], verbose=0),
                               rtol=1e-6, atol=1e-6)
    before = loaded.get_layer("encoder").get_weights()[0].copy()
    loaded.fit(x_train[:128], x_train[:128], batch_size=64, verbose=0)
    assert not np.array_equal(before, loaded.get_layer("encoder").get_weights()[0])
    # Monitoring again continues the steps and reuses the traced step.
    traced = monitor._traced[id(model)].monitored
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[monitor], verbose=0)
    assert monitor._traced[id(model)].monitored is traced
    assert np.array_equal(monitor.history.steps, [0, 1, 2, 3])
    assert_unpatched(model)


class Interrupt(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 1:
            raise KeyboardInterrupt


def test_an_interrupted_fit_leaves_nothing_patched_on_the_next_fit(x_train):
    model = workbook.autoencoder(None)
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    with pytest.raises(KeyboardInterrupt):
        model.fit(x_train, x_train, batch_size=64, callbacks=[monitor, Interrupt()], verbose=0)
    assert len(monitor.history) == 2
    before = model.get_layer("encoder").get_weights()[0].copy()
    model.fit(x_train, x_train, batch_size=64, verbose=0)
    assert_unpatched(model)
    assert len(monitor.history) == 2
    assert not np.array_equal(before, model.get_layer("encoder").get_weights()[0])
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[monitor], verbose=0)
    assert np.array_equal(monitor.history.steps, [0, 1, 2, 3])
    assert_unpatched(model)


def test_headless_monitor_shows_and_prints_nothing(x_train, capsys):
    assert not monitoring.in_notebook()
    model = workbook.autoencoder(None)
    monitor = workbook.GradientNormMonitor(every=1, live=True)
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[monitor], verbose=0)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert len(monitor.history) == 2


class FakeHandle:
    def __init__(self, bundle):
        self.bundles = [bundle]

    def update(self, bundle, raw=False):
        self.bundles.append(bundle)


@pytest.mark.parametrize("refresh_seconds, redraws", [(0.0, 1 + 4 + 1), (1000.0, 2)])
def test_live_figure_is_shown_once_then_updated_in_place_and_throttled(
        x_train, monkeypatch, refresh_seconds, redraws):
    import IPython.display

    handles = []

    def fake_display(bundle, raw=False, display_id=False):
        assert raw and display_id
        handles.append(FakeHandle(bundle))
        return handles[-1]

    monkeypatch.setattr(monitoring, "in_notebook", lambda: True)
    monkeypatch.setattr(IPython.display, "display", fake_display)
    model = workbook.autoencoder(int_cast)
    monitor = workbook.GradientNormMonitor(every=1, live=True, refresh_seconds=refresh_seconds)
    with pytest.warns(UserWarning):
        model.fit(x_train, x_train, batch_size=64, callbacks=[monitor], verbose=0)
    image, caption = handles  # shown once: one image, one caption
    # First frame at on_train_begin, one per batch when unthrottled, one when fit ends.
    assert len(image.bundles) == len(caption.bundles) == redraws
    assert image.bundles[-1]["image/png"] != image.bundles[0]["image/png"]
    assert "encoder: no gradient" in image.bundles[-1]["text/plain"]
    assert 'class="workbook-gradient-monitor"' in caption.bundles[-1]["text/html"]
    assert "encoder: no gradient" in caption.bundles[-1]["text/html"]


@pytest.mark.parametrize("kwargs, match", [({"every": 0}, "every=0"), ({"every": 1.5}, "every=1.5"),
                                           ({"refresh_seconds": -1}, "refresh_seconds=-1")])
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        workbook.GradientNormMonitor(**kwargs)
