"""GradientNormMonitor: the real step's gradients, and a model left as it was found."""

import json
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from IPython.core.formatters import format_display_data
from notebook_runner import clean_environment

import workbook
from workbook.core.figures import in_notebook
from workbook.monitor.recording import GradientNormRecorder
from workbook.monitor.train_function_swap import Swap, TrainFunctionSwap


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
    grads = dict(zip(map(id, variables), tape.gradient(loss, variables), strict=True))
    norms = {}
    for layer in model.layers:
        if layer.trainable_variables:
            squares = [
                0.0 if grads[id(v)] is None else float(tf.reduce_sum(grads[id(v)] ** 2))
                for v in layer.trainable_variables
            ]
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
    assert all(
        np.array_equal(a, b) for a, b in zip(before["encoder"], model.get_layer("encoder").get_weights(), strict=True)
    )
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
    by_layer = dict(zip(monitor.history.layers, monitor.history.norms.T, strict=True))
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
    first = model.fit(
        x_train[:192],
        x_train[:192],
        batch_size=64,
        epochs=2,
        validation_data=(x_train[192:], x_train[192:]),
        callbacks=[monitor],
        verbose=0,
    )
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


class KerasTrainFunction(keras.callbacks.Callback):
    """Listed before the monitor: remembers the train function Keras built for the fit."""

    function = None

    def on_train_begin(self, logs=None):
        self.function = self.model.train_function


def assert_left_as_found(model, keras_train_function):
    """The optimizer's and the model's own methods, and the train function Keras built."""
    assert keras_train_function is not None
    assert "apply" not in vars(model.optimizer) and "train_step" not in vars(model)
    assert model.train_function is keras_train_function


def test_the_model_saves_loads_and_trains_plainly_after_a_monitored_fit(x_train, tmp_path):
    model = workbook.autoencoder(fine_cast())
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    keras_function = KerasTrainFunction()
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[keras_function, monitor], verbose=0)
    assert_left_as_found(model, keras_function.function)
    recorded = len(monitor.history)
    model.fit(x_train[:128], x_train[:128], batch_size=64, verbose=0)
    assert len(monitor.history) == recorded  # the plain fit ran the plain step
    path = tmp_path / "lab.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(
        loaded.predict(x_train[:8], verbose=0), model.predict(x_train[:8], verbose=0), rtol=1e-6, atol=1e-6
    )
    before = loaded.get_layer("encoder").get_weights()[0].copy()
    loaded.fit(x_train[:128], x_train[:128], batch_size=64, verbose=0)
    assert not np.array_equal(before, loaded.get_layer("encoder").get_weights()[0])
    # Monitoring again continues the steps.
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[keras_function, monitor], verbose=0)
    assert np.array_equal(monitor.history.steps, [0, 1, 2, 3])
    assert_left_as_found(model, keras_function.function)


class Interrupt(keras.callbacks.Callback):
    """Raises KeyboardInterrupt in one hook at batch 1, as Ctrl-C there would."""

    def __init__(self, hook):
        super().__init__()
        setattr(self, hook, self.interrupt)

    def interrupt(self, batch, logs=None):
        if batch == 1:
            raise KeyboardInterrupt


@pytest.mark.parametrize("hook", ["on_train_batch_end", "on_train_batch_begin"])
def test_an_interrupted_fit_leaves_the_model_as_found_at_once(x_train, hook):
    # Listed before the monitor, so that the interrupt comes before the monitor arms the batch.
    model = workbook.autoencoder(None)
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    keras_function = KerasTrainFunction()
    with pytest.raises(KeyboardInterrupt):
        model.fit(x_train, x_train, batch_size=64, callbacks=[keras_function, Interrupt(hook), monitor], verbose=0)
    assert_left_as_found(model, keras_function.function)
    assert len(monitor.history) == 1  # batch 0; batch 1 was interrupted before the monitor saw its end
    before = model.get_layer("encoder").get_weights()[0].copy()
    model.fit(x_train, x_train, batch_size=64, verbose=0)
    assert len(monitor.history) == 1
    assert not np.array_equal(before, model.get_layer("encoder").get_weights()[0])
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[keras_function, monitor], verbose=0)
    assert np.array_equal(monitor.history.steps, [0, 1, 2])
    assert_left_as_found(model, keras_function.function)


def test_an_interrupt_between_arming_and_the_call_is_put_back_by_the_next_call(x_train):
    # The one window the module docstring names: a callback after the monitor, in on_train_batch_begin.
    model = workbook.autoencoder(None)
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    keras_function = KerasTrainFunction()
    callbacks = [keras_function, monitor, Interrupt("on_train_batch_begin")]
    with pytest.raises(KeyboardInterrupt):
        model.fit(x_train, x_train, batch_size=64, callbacks=callbacks, verbose=0)
    assert model.train_function is not keras_function.function  # left armed for the batch that never ran
    model.fit(x_train[:128], x_train[:128], batch_size=64, verbose=0)
    assert_left_as_found(model, keras_function.function)
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[keras_function, monitor], verbose=0)
    assert np.array_equal(monitor.history.steps, [0, 1, 2])
    assert_left_as_found(model, keras_function.function)


SIGINT_MID_FIT = """
import json
import numpy as np
import keras
import workbook

x = np.random.default_rng(0).random((2048, 28, 28, 1), dtype=np.float32)
model = workbook.autoencoder(None, seed=0)
monitor = workbook.GradientNormMonitor(every=1, live=False)


class Found(keras.callbacks.Callback):
    function = None

    def on_train_begin(self, logs=None):
        self.function = self.model.train_function

    def on_train_batch_end(self, batch, logs=None):
        if batch == 3:
            print("training", flush=True)


found = Found()
try:
    model.fit(x, x, batch_size=32, epochs=1000, callbacks=[found, monitor], verbose=0)
    print(json.dumps({"interrupted": False}))
except KeyboardInterrupt:
    state = {
        "interrupted": True,
        "records": len(monitor.history),
        "train_function_is_keras_own": model.train_function is found.function,
        "train_step_patched_on_the_model": "train_step" in vars(model),
        "apply_patched_on_the_optimizer": "apply" in vars(model.optimizer),
    }
    print(json.dumps(state), flush=True)
"""


def test_a_real_sigint_mid_fit_leaves_the_model_as_found_at_once(tmp_path):
    errors = tmp_path / "stderr.txt"
    with errors.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", SIGINT_MID_FIT],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=clean_environment(tmp_path),
            # As a terminal starts it: a test runner started in the background ignores SIGINT, and a
            # child inherits that (Python then never raises KeyboardInterrupt).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            assert child.stdout.readline().strip() == "training", errors.read_text()[-3000:]
            time.sleep(1.0)  # well inside the fit: 64 batches an epoch, a thousand epochs
            child.send_signal(signal.SIGINT)
            # Wait for the child to end, not for a number of seconds: a loaded machine is slow, not wrong.
            # An interrupt can be lost (CPython drops one that lands in a finalizer, "Exception ignored
            # in ..."): while the child still trains, press again, as a student would, once a minute.
            presses, deadline, pressed_at = 1, time.monotonic() + 900, time.monotonic()
            while child.poll() is None:
                said = errors.read_text()
                if time.monotonic() - pressed_at > 60:
                    child.send_signal(signal.SIGINT)
                    presses, pressed_at = presses + 1, time.monotonic()
                assert time.monotonic() < deadline, f"still training after {presses} SIGINTs; stderr:\n{said[-3000:]}"
                time.sleep(0.2)
            out = child.stdout.read()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert child.returncode == 0, errors.read_text()[-3000:]
    state = json.loads(out.strip().splitlines()[-1])
    assert state == {
        "interrupted": True,
        "records": state["records"],
        "train_function_is_keras_own": True,
        "train_step_patched_on_the_model": False,
        "apply_patched_on_the_optimizer": False,
    }
    assert state["records"] > 4


def test_headless_monitor_shows_and_prints_nothing(x_train, capsys):
    assert not in_notebook()  # pytest has no notebook frontend
    model = workbook.autoencoder(None)
    monitor = workbook.GradientNormMonitor(every=1, live=True)
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[monitor], verbose=0)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert len(monitor.history) == 2


class ZMQInteractiveShell:
    """Stands in for the shell of a Jupyter kernel with a frontend attached."""


@pytest.fixture
def notebook(monkeypatch):
    """A Jupyter kernel's shell, and a display that keeps what it is given: returns the handles."""
    import IPython
    import IPython.display

    handles = []

    def fake_display(shown, display_id=False):
        assert display_id
        handles.append(FakeHandle(shown))
        return handles[-1]

    monkeypatch.setattr(IPython, "get_ipython", ZMQInteractiveShell)
    monkeypatch.setattr(IPython.display, "display", fake_display)
    assert in_notebook()
    return handles


class FakeHandle:
    """A display handle that keeps each mime bundle IPython's own formatter makes of what is shown."""

    def __init__(self, shown):
        self.bundles = [format_display_data(shown)[0]]

    def update(self, shown):
        self.bundles.append(format_display_data(shown)[0])


@pytest.mark.parametrize("refresh_seconds, redraws", [(0.0, 1 + 4 + 1), (1000.0, 3), (float("inf"), 3)])
def test_live_figure_is_shown_once_then_updated_in_place_and_throttled(x_train, notebook, refresh_seconds, redraws):
    """However long the wait between frames, the first record is drawn as it comes, before the end."""
    model = workbook.autoencoder(int_cast)
    monitor = workbook.GradientNormMonitor(every=1, live=True, refresh_seconds=refresh_seconds)
    with pytest.warns(UserWarning):
        model.fit(x_train, x_train, batch_size=64, callbacks=[monitor], verbose=0)
    image, caption = notebook  # shown once: one image, one caption
    # First frame at on_train_begin, then the first record, one per batch when unthrottled, one when fit ends.
    assert len(image.bundles) == len(caption.bundles) == redraws
    assert "waiting for the first training step" in image.bundles[0]["text/plain"]
    assert "Gradient norms at step 0:" in image.bundles[1]["text/plain"]
    assert image.bundles[-1]["image/png"] != image.bundles[0]["image/png"]
    assert "encoder: no gradient" in image.bundles[-1]["text/plain"]
    assert 'class="workbook-gradient-monitor"' in caption.bundles[-1]["text/html"]
    assert "encoder: no gradient" in caption.bundles[-1]["text/html"]
    # The op and the line that cut it: the inner cast of int_cast, on the line after its def.
    named = f"encoder: no gradient (cut by Cast at test_monitoring.py:{int_cast.__code__.co_firstlineno + 1}"
    assert named in caption.bundles[-1]["text/plain"] and named in image.bundles[-1]["text/plain"]


class Clock:
    """A clock that moves only when told: each batch and each frame take the time given, on any machine."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now


def test_a_short_fit_whose_frames_cost_much_is_still_seen_to_grow_and_trains_as_without_it(
    x_train, notebook, monkeypatch
):
    # As notebook 04 at its defaults (every=2, refresh_seconds=0.5, 63 batches): a frame costs 1 s and
    # a batch 0.05 s, so waiting nine times a frame's cost would show nothing between step 0 and the end.
    from workbook.monitor import monitoring

    clock, real_png = Clock(), monitoring.figure_png

    def costly_png(figure):
        clock.now += 1.0
        return real_png(figure)

    class Batches(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            clock.now += 0.05

    monkeypatch.setattr(monitoring, "time", clock)
    monkeypatch.setattr(monitoring, "figure_png", costly_png)
    images, fits = x_train[:126], {}
    for name, callbacks in [
        ("plain", [Batches()]),
        ("monitored", [Batches(), workbook.GradientNormMonitor(every=2, refresh_seconds=0.5)]),
    ]:
        model = workbook.autoencoder(int_cast, seed=0)
        keras.utils.set_random_seed(0)
        with pytest.warns(UserWarning):
            fits[name] = model.fit(
                images, images, batch_size=2, epochs=1, shuffle=False, callbacks=callbacks, verbose=0
            )
        fits[name] = (fits[name].history["loss"], model.get_weights())
    assert fits["monitored"][0] == fits["plain"][0]
    for weight, plain in zip(fits["monitored"][1], fits["plain"][1], strict=True):
        np.testing.assert_array_equal(weight, plain)
    image, _ = notebook
    steps = [int(bundle["text/plain"].split("at step ")[1].split(":")[0]) for bundle in image.bundles[1:]]
    assert steps[0] == 0 and steps[-1] == 62  # the first record, and the end
    # A frame in every quarter of the fit after the first, and no more than the quarters add.
    for low, high in [(16, 31), (32, 47), (48, 61)]:
        assert any(low <= step <= high for step in steps), steps
    assert len(steps) <= 2 + 4 + 1, steps


def test_live_false_shows_nothing_even_in_a_notebook(x_train, notebook):
    model = workbook.autoencoder(None)
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[monitor], verbose=0)
    assert notebook == [] and len(monitor.history) == 2


WHOLE = "must be a whole number of at least 1, e.g. every=10"
SECONDS = r"must be a number of seconds >= 0, e.g. 0.5"
LIVE = r"must be True \(draw while training\) or False \(record only\)"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"every": 0}, f"every=0 {WHOLE}"),
        ({"every": 1.5}, f"every=1.5 {WHOLE}"),
        ({"every": True}, f"every=True {WHOLE}"),
        ({"refresh_seconds": -1}, f"refresh_seconds=-1 {SECONDS}"),
        ({"refresh_seconds": float("nan")}, f"refresh_seconds=nan {SECONDS}"),
        ({"refresh_seconds": "0.5"}, f"refresh_seconds='0.5' {SECONDS}"),
        ({"live": "yes"}, f"live='yes' {LIVE}"),
    ],
)
def test_bad_arguments_are_refused_with_the_value_and_what_is_allowed(kwargs, match):
    with pytest.raises(ValueError, match=match):
        workbook.GradientNormMonitor(**kwargs)


def test_whole_numbers_of_any_integer_type_are_accepted():
    monitor = workbook.GradientNormMonitor(every=np.int64(3), refresh_seconds=0, live=np.bool_(False))
    assert (monitor.every, monitor.refresh_seconds, monitor.live) == (3, 0.0, False)
    assert type(monitor.every) is int and type(monitor.refresh_seconds) is float and type(monitor.live) is bool


def test_train_function_swap_puts_back_what_it_replaced():
    model = small_model(keras.Sequential)
    before = model.train_function
    swap = TrainFunctionSwap(model, call="monitored")
    assert swap.state is Swap.UNPATCHED
    swap.arm()
    swap.arm()  # armed twice: still puts back Keras's, not itself
    assert model.train_function == "monitored" and swap.state is Swap.ARMED
    swap.disarm()
    assert model.train_function is before and swap.state is Swap.UNPATCHED
    swap.arm()
    model.train_function = "made anew by Keras"
    swap.disarm()  # what replaced the call meanwhile stays
    assert model.train_function == "made anew by Keras" and swap.state is Swap.UNPATCHED


# --- The two Keras internals the monitor stands on, pinned on both ends of the range --------
# `make test` runs this file in .venv (the newest TensorFlow/Keras) and in .venv-oldest
# (TensorFlow 2.18, Keras 3.8), so a Keras that changes either fails here first.


def test_internal_the_built_in_train_step_hands_its_gradients_to_optimizer_apply(x_train):
    model = workbook.autoencoder(None, seed=1)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    expected = gradient_norms(model, x_train[:64])
    seen = []
    real_apply = model.optimizer.apply

    def apply(grads, trainable_variables=None):
        seen.append([float(tf.reduce_sum(g**2)) for g in grads])
        return real_apply(grads, trainable_variables)

    model.optimizer.apply = apply
    model.run_eagerly = True  # each step calls apply once, with concrete gradients
    try:
        model.fit(x_train[:64], x_train[:64], batch_size=64, shuffle=False, verbose=0)
    finally:
        del model.optimizer.apply
    assert len(seen) == 1
    total = np.sqrt(sum(seen[0]))
    np.testing.assert_allclose(total, np.sqrt(sum(v**2 for v in expected.values())), rtol=1e-3)


class SwapTrainFunctionPerBatch(keras.callbacks.Callback):
    """Does what the monitor does: sets model.train_function in on_train_batch_begin to a function
    that puts the previous one back before running it; counts the calls fit makes to it."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def on_train_batch_begin(self, batch, logs=None):
        original = self.model.train_function

        def counted(iterator):
            self.model.train_function = original
            self.calls += 1
            return original(iterator)

        self.model.train_function = counted


def test_internal_fit_looks_up_train_function_for_every_batch_after_on_train_batch_begin(x_train):
    model = workbook.autoencoder(None)
    counter = SwapTrainFunctionPerBatch()
    keras_function = KerasTrainFunction()
    model.fit(x_train[:192], x_train[:192], batch_size=64, epochs=2, callbacks=[keras_function, counter], verbose=0)
    assert counter.calls == 6  # 3 batches per epoch, 2 epochs
    assert model.train_function is keras_function.function


def test_internal_make_train_function_builds_from_the_train_step_on_the_model_at_that_moment(x_train):
    model = workbook.autoencoder(None)
    model.make_train_function()
    keras_function = model.train_function
    steps = []

    def train_step(data):
        steps.append("traced")
        return type(model).train_step(model, data)

    model.train_step = train_step
    try:
        model.make_train_function(force=True)
    finally:
        del model.train_step
    built, model.train_function = model.train_function, keras_function
    assert built is not keras_function and not steps  # built, not traced yet
    dataset = tf.data.Dataset.from_tensor_slices((x_train[:64], x_train[:64])).batch(32)
    built(iter(dataset))
    assert steps  # traced from the instance's train_step, although it is gone from the model by now


# --- Models that override train_step ------------------------------------------------------


class GuideModel(keras.Sequential):
    """The overridden train_step of Keras's guide "Customizing what happens in fit() with
    TensorFlow" (keras.io/guides/custom_train_step_in_tensorflow/): its own tape, then
    self.optimizer.apply(gradients, trainable_vars)."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply(gradients, trainable_vars)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


class ManualSGDModel(keras.Sequential):
    """A train_step that needs no compiled loss and updates the weights itself, never through
    the optimizer (as in hand-written loops such as tensorflow.org's "Writing a training loop
    from scratch")."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(x, training=True) - y))
        gradients = tape.gradient(loss, self.trainable_variables)
        for variable, gradient in zip(self.trainable_variables, gradients, strict=True):
            variable.assign_sub(0.1 * gradient)
        return {"loss": loss}


def small_model(model_class, seed=0, **compiled):
    keras.utils.set_random_seed(seed)
    model = model_class(
        [
            keras.Input((28, 28, 1)),
            keras.layers.Flatten(name="flatten"),
            keras.layers.Dense(16, activation="relu", name="hidden"),
            keras.layers.Dense(784, activation="sigmoid", name="pixels"),
            keras.layers.Reshape((28, 28, 1), name="image"),
        ]
    )
    model.compile(**({"optimizer": keras.optimizers.SGD(0.1), "loss": "mse"} | compiled))
    return model


TRACES = []


class CountsTraces(keras.Sequential):
    """Python runs its train_step once each time TensorFlow traces the step: this counts them."""

    def train_step(self, data):
        TRACES.append(self.name)
        return super().train_step(data)


def test_monitoring_again_after_a_plain_fit_does_not_trace_the_step_again(x_train):
    model = small_model(CountsTraces)
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[monitor], verbose=0)
    assert TRACES.count(model.name) >= 1  # the monitored step was traced
    model.fit(x_train[:128], x_train[:128], batch_size=64, verbose=0)
    traces = TRACES.count(model.name)
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[monitor], verbose=0)
    assert TRACES.count(model.name) == traces
    assert np.array_equal(monitor.history.steps, [0, 1, 2, 3])


def test_a_new_monitor_per_fit_does_not_trace_the_step_again_until_the_model_is_compiled_again(x_train):
    model = small_model(CountsTraces)
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[workbook.GradientNormMonitor(every=1)], verbose=0)
    traces = TRACES.count(model.name)
    monitors = [workbook.GradientNormMonitor(every=1) for _ in range(3)]
    for monitor in monitors:
        model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[monitor], verbose=0)
        assert np.array_equal(monitor.history.steps, [0, 1])
    assert TRACES.count(model.name) == traces
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")  # a new optimizer: a new step, traced
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[monitors[0]], verbose=0)
    assert TRACES.count(model.name) > traces
    assert np.array_equal(monitors[0].history.steps, [0, 1, 2, 3])


def test_two_monitors_in_one_fit_both_record_every_batch_they_are_due(x_train):
    model = workbook.autoencoder(None, seed=1)
    expected = gradient_norms(model, x_train[:32])
    every_batch = workbook.GradientNormMonitor(every=1, live=False)
    every_third = GradientNormRecorder(every=3)
    model.fit(x_train, x_train, batch_size=32, shuffle=False, callbacks=[every_batch, every_third], verbose=0)
    assert np.array_equal(every_batch.history.steps, np.arange(8))  # 256 images in batches of 32
    assert np.array_equal(every_third.history.steps, [0, 3, 6])
    np.testing.assert_allclose(
        every_batch.history.norms[0], [expected[n] for n in every_batch.history.layers], rtol=1e-3
    )
    np.testing.assert_array_equal(every_third.history.norms, every_batch.history.norms[[0, 3, 6]])
    # The same monitor twice is one monitor, not two.
    twice = workbook.GradientNormMonitor(every=1, live=False)
    model.fit(x_train[:64], x_train[:64], batch_size=32, callbacks=[twice, every_batch, twice], verbose=0)
    assert np.array_equal(twice.history.steps, [0, 1])
    assert np.array_equal(every_batch.history.steps, np.arange(10))


def test_an_overridden_train_step_from_keras_guide_is_recorded_from_its_own_gradients(x_train, recwarn):
    keras.utils.set_random_seed(3)
    model = small_model(GuideModel)
    expected = gradient_norms(model, x_train[:64])
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    keras_function = KerasTrainFunction()
    model.fit(
        x_train[:192], x_train[:192], batch_size=64, shuffle=False, callbacks=[keras_function, monitor], verbose=0
    )
    assert not [w for w in recwarn if "GradientNormMonitor" in str(w.message)]
    assert monitor.history.layers == ["hidden", "pixels"]
    assert np.array_equal(monitor.history.steps, [0, 1, 2])
    np.testing.assert_allclose(monitor.history.norms[0], [expected["hidden"], expected["pixels"]], rtol=1e-3)
    assert_left_as_found(model, keras_function.function)


def assert_same_model(model, twin):
    """The same attributes (the same objects where they are the model's own) and the same weights."""
    assert sorted(vars(model)) == sorted(vars(twin))
    assert sorted(vars(model.optimizer)) == sorted(vars(twin.optimizer))
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), twin.get_weights(), strict=True))


def test_a_train_step_past_the_optimizer_without_a_loss_records_nothing_says_why_once_and_trains(x_train):
    model = small_model(ManualSGDModel, optimizer="sgd")  # compiled without a loss
    twin = small_model(ManualSGDModel, optimizer="sgd")  # the same model, trained without the monitor
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    keras_function = KerasTrainFunction()
    with pytest.warns(RuntimeWarning, match="never passes its gradients to model.optimizer.apply") as caught:
        for _ in range(2):
            model.fit(x_train, x_train, batch_size=64, shuffle=False, callbacks=[keras_function, monitor], verbose=0)
    assert len([w for w in caught if "GradientNormMonitor" in str(w.message)]) == 1
    for _ in range(2):
        twin.fit(x_train, x_train, batch_size=64, shuffle=False, verbose=0)
    assert len(monitor.history) == 0 and "optimizer.apply" in monitor.history.not_recorded
    assert "not recorded" in repr(monitor.history)
    assert_left_as_found(model, keras_function.function)
    assert_same_model(model, twin)


def test_in_a_notebook_the_live_caption_says_why_nothing_is_recorded_and_stderr_stays_empty(
    x_train, notebook, recwarn, capfd
):
    model = small_model(ManualSGDModel, optimizer="sgd")
    monitor = workbook.GradientNormMonitor(every=1, live=True, refresh_seconds=0)
    model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=[monitor], verbose=0)
    assert not [w for w in recwarn if "GradientNormMonitor" in str(w.message)]
    assert capfd.readouterr().err == ""
    image, caption = notebook
    assert "never passes its gradients to model.optimizer.apply" in caption.bundles[-1]["text/html"]
    assert "never passes its gradients to model.optimizer.apply" in image.bundles[-1]["text/plain"]
    assert len(monitor.history) == 0


class RestoreTrainFunctionAtBatchBegin(keras.callbacks.Callback):
    """Listed after the monitor, puts back the train function the fit began with: as if fit had
    kept the function it built instead of looking up model.train_function for each batch."""

    def __init__(self, keras_function):
        super().__init__()
        self.keras_function = keras_function

    def on_train_batch_begin(self, batch, logs=None):
        self.model.train_function = self.keras_function.function


def test_a_fit_that_never_runs_the_monitors_function_is_reported_once_and_records_nothing(x_train):
    model = workbook.autoencoder(None)
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    keras_function = KerasTrainFunction()
    callbacks = [keras_function, monitor, RestoreTrainFunctionAtBatchBegin(keras_function)]
    with pytest.warns(RuntimeWarning, match="did not call the train function the monitor set") as caught:
        for _ in range(2):
            model.fit(x_train[:128], x_train[:128], batch_size=64, callbacks=callbacks, verbose=0)
    assert len([w for w in caught if "GradientNormMonitor" in str(w.message)]) == 1
    assert len(monitor.history) == 0
    assert_left_as_found(model, keras_function.function)
