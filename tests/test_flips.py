"""The flip ratio of 04_autoencoder_lab.ipynb, against a count written out in NumPy."""

import keras
import numpy as np
import pytest

from workbook.monitor.flips import CodeFlipRatio, flip_ratio


def test_flip_ratio_is_the_share_of_entries_that_changed():
    rng = np.random.default_rng(0)
    previous = rng.integers(0, 3, size=(5, 7, 7, 2)).astype("float32")
    current = previous.copy()
    changed = rng.uniform(size=previous.shape) < 0.1
    current[changed] += 1.0
    count = sum(1 for a, b in zip(previous.ravel(), current.ravel(), strict=True) if a != b)
    assert count > 0
    assert flip_ratio(previous, current) == pytest.approx(count / previous.size, abs=1e-7)
    assert flip_ratio(previous, previous) == 0.0


def test_flip_ratio_refuses_codes_of_another_shape():
    with pytest.raises(ValueError, match=r"flip_ratio: current=.*shaped like previous, \(2, 3\)"):
        flip_ratio(np.zeros((2, 3)), np.zeros((3, 2)))


def tiny_model():
    inputs = keras.Input((28, 28, 1))
    straight_through = lambda z: z + keras.ops.stop_gradient(keras.ops.round(z * 4) / 4 - z)  # noqa: E731
    codes = keras.layers.Lambda(straight_through, name="bottleneck")(keras.layers.Conv2D(2, 3, name="encoder")(inputs))
    outputs = keras.layers.Conv2DTranspose(1, 3, activation="sigmoid")(codes)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    return model


def test_the_callback_counts_each_steps_changes():
    keras.utils.set_random_seed(0)
    images = np.random.default_rng(1).uniform(size=(8, 28, 28, 1)).astype("float32")
    model = tiny_model()
    encoder = keras.Model(model.inputs[0], model.get_layer("bottleneck").output)
    codes = [np.asarray(encoder(images))]

    class KeepCodes(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            codes.append(np.asarray(encoder(images)))

    flips = CodeFlipRatio(images)
    model.fit(images, images, epochs=3, batch_size=4, callbacks=[flips, KeepCodes()], verbose=0)
    expected = [np.count_nonzero(a != b) / a.size for a, b in zip(codes[:-1], codes[1:], strict=True)]
    assert len(flips.ratios) == 6 and max(expected) > 0
    np.testing.assert_allclose(flips.ratios, expected, atol=1e-7)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="CodeFlipRatio: images="):
        CodeFlipRatio(np.zeros((4, 28, 28)))
    with pytest.raises(ValueError, match="CodeFlipRatio: layer=3"):
        CodeFlipRatio(np.zeros((4, 28, 28, 1)), layer=3)
    model = tiny_model()
    with pytest.raises(ValueError, match="CodeFlipRatio: layer='codes' must be .*'bottleneck'"):
        images = np.zeros((4, 28, 28, 1))
        model.fit(images, images, callbacks=[CodeFlipRatio(images, "codes")], verbose=0)


def test_training_with_the_callback_is_training_without_it():
    """Same weights after the same fit, and the same draws after it: the callback only reads."""
    images = np.random.default_rng(1).uniform(size=(8, 28, 28, 1)).astype("float32")
    runs = []
    for callbacks in ([], [CodeFlipRatio(images)]):
        keras.utils.set_random_seed(0)
        model = tiny_model()
        history = model.fit(images, images, epochs=2, batch_size=4, shuffle=True, callbacks=callbacks, verbose=0)
        runs.append((history.history["loss"], [w.copy() for w in model.get_weights()], np.random.uniform()))
    (loss_without, weights_without, draw_without), (loss_with, weights_with, draw_with) = runs
    assert loss_with == loss_without and draw_with == draw_without
    for without, with_ in zip(weights_without, weights_with, strict=True):
        np.testing.assert_array_equal(without, with_)


def test_a_bottleneck_that_samples_at_inference_or_a_subclassed_model_is_refused():
    import workbook

    images = np.zeros((4, 28, 28, 1), dtype="float32")
    sampling = workbook.autoencoder(workbook.DiscreteBottleneck("categorical", "straight_through", seed=0))
    sampling.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match=r"CodeFlipRatio: layer='bottleneck' .*test_latent='mode'"):
        sampling.fit(images, images, callbacks=[CodeFlipRatio(images)], verbose=0)

    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__()
            self.bottleneck = keras.layers.Dense(1, name="bottleneck")

        def call(self, x):
            return self.bottleneck(x)

    subclassed = Subclassed()
    subclassed.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="CodeFlipRatio: model='Subclassed' must be a functional or Sequential"):
        subclassed.fit(images, images, callbacks=[CodeFlipRatio(images)], verbose=0)
