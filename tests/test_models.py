"""The lab's autoencoder: its shape, what its bottleneck accepts, that it learns; compare_bottlenecks."""

import keras
import numpy as np
import pytest

import workbook
from workbook.lab.compare import comparison_figures


def int_cast(z):
    # The plain cast as students write it: TensorFlow has no gradient for it.
    return keras.ops.cast(keras.ops.cast(z, "int32"), "float32")


@pytest.fixture(scope="module")
def images():
    (x_train, _), (x_test, _) = workbook.load_mnist(n_train=128, n_test=32, source="bundled")
    return x_train, x_test


def test_autoencoder_has_the_questions_layers_shapes_loss_and_optimizer():
    model = workbook.autoencoder()
    assert [layer.name for layer in model.layers] == ["encoder", "pool", "bottleneck", "upsample", "decoder", "output"]
    # The architecture of the question: Conv2D(10, 5x5) -> pool -> f -> upsample -> ConvT(4, 5x5) -> ConvT(1, 3x3).
    assert model.get_layer("encoder").kernel.shape == (5, 5, 1, 10)
    assert model.get_layer("decoder").kernel.shape == (5, 5, 4, 10)
    assert model.get_layer("output").kernel.shape == (3, 3, 1, 4)
    assert model.get_layer("bottleneck").output.shape == (None, 14, 14, 10)
    assert model.output_shape == (None, 28, 28, 1)
    assert model.get_layer("output").activation is keras.activations.sigmoid
    assert isinstance(model.optimizer, keras.optimizers.Adam)
    assert float(model.optimizer.learning_rate) == pytest.approx(1e-3)
    assert model.loss == "mse"
    assert float(workbook.autoencoder(learning_rate=0.01).optimizer.learning_rate) == pytest.approx(0.01)


def test_same_seed_same_weights_other_seed_other_weights():
    keras.utils.set_random_seed(123)
    first = workbook.autoencoder(seed=3).get_weights()
    keras.utils.set_random_seed(456)  # the global state must not matter
    second = workbook.autoencoder(seed=3).get_weights()
    other = workbook.autoencoder(seed=4).get_weights()
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    assert not np.array_equal(first[0], other[0])


def test_the_bottleneck_is_none_a_surrogate_name_or_object_a_function_or_a_layer(images):
    from workbook.layers import Surrogate

    x = images[1][:4]
    assert isinstance(workbook.autoencoder(None).get_layer("bottleneck"), keras.layers.Identity)
    by_name = workbook.autoencoder("cast_int_ste").get_layer("bottleneck")
    assert isinstance(by_name, Surrogate) and by_name.surrogate.name == "cast_int_ste"
    fine = workbook.SURROGATES["cast_int_ste"].with_params(scale=4)
    by_object = workbook.autoencoder(fine).get_layer("bottleneck")
    assert isinstance(by_object, Surrogate) and by_object.params["scale"] == 4
    by_function = workbook.autoencoder(int_cast).get_layer("bottleneck")
    assert isinstance(by_function, keras.layers.Lambda) and by_function.name == "bottleneck"
    mine = keras.layers.Activation("relu", name="my_bottleneck")
    assert workbook.autoencoder(mine).get_layer("my_bottleneck") is mine
    # The integer cast really truncates: the bottleneck's output is whole numbers.
    model = workbook.autoencoder(int_cast)
    probe = keras.Model(model.inputs, model.get_layer("bottleneck").output)
    values = probe.predict(x, verbose=0)
    assert np.array_equal(values, np.trunc(values))


@pytest.mark.parametrize("bad", [42, 3.5, [1, 2], keras.layers.Identity])
def test_anything_else_is_refused_with_what_is_accepted(bad):
    with pytest.raises(ValueError, match=r"bottleneck=.*Accepted: None \(identity\), a name from workbook\.SURROGATES"):
        workbook.autoencoder(bottleneck=bad)


class IntegerCodes(keras.layers.Layer):
    # A layer written as students write the mistake: its call returns the integer codes.
    def call(self, z):
        return keras.ops.cast(z, "int32")


@pytest.mark.parametrize(
    "make_bottleneck, dtype",
    [
        (lambda: lambda z: keras.ops.cast(z, "int32"), "int32"),
        (lambda: lambda z: keras.ops.cast(keras.ops.round(z * 255), "uint8"), "uint8"),
        (lambda: lambda z: z > 0, "bool"),
        (lambda: IntegerCodes(name="codes"), "int32"),
    ],
    ids=["cast to int32", "cast to uint8", "a comparison", "a layer"],
)
def test_a_bottleneck_returning_integers_is_refused_when_the_model_is_built(make_bottleneck, dtype):
    # Built without the check, this model dies inside the decoder's Conv2DTranspose at `fit`.
    expected = (
        rf"bottleneck=.* must be a bottleneck whose output is floating point, but it returned {dtype}.*"
        r"cast back to float32 \(and see notebook 04 for why the gradient then stops\)"
    )
    with pytest.raises(ValueError, match=expected):
        workbook.autoencoder(make_bottleneck())


def test_a_bottleneck_that_casts_back_to_floats_and_mixed_precision_codes_build():
    assert workbook.autoencoder(int_cast).get_layer("bottleneck").output.dtype == "float32"
    workbook.autoencoder(lambda z: keras.ops.cast(z, "float16"))  # half-precision codes are floats: built


def test_unknown_names_and_options_are_refused():
    with pytest.raises(
        ValueError, match=r"bottleneck='no_such_thing' must be a name in workbook.SURROGATES.*cast_int_ste"
    ):
        workbook.autoencoder("no_such_thing")
    with pytest.raises(ValueError, match=r"'lr'.*'learning_rate', 'seed'"):
        workbook.autoencoder(lr=0.1)
    with pytest.raises(ValueError, match=r"learning_rate=-1"):
        workbook.autoencoder(learning_rate=-1)
    with pytest.raises(ValueError, match=r"learning_rate=inf"):
        workbook.autoencoder(learning_rate=float("inf"))
    with pytest.raises(ValueError, match=r"seed=-2"):
        workbook.autoencoder(seed=-2)


# Test-set MSE of the identity model after 2 epochs on the 2,000-image subset below
# (seed 0, batch 64, Adam 1e-3), measured at 0.0212 on TensorFlow 2.21 CPU.
MEASURED_IDENTITY_MSE = 0.0212


@pytest.mark.slow
def test_identity_autoencoder_learns_to_reconstruct():
    (x_train, _), (x_test, _) = workbook.load_mnist(n_train=2000, n_test=500, source="bundled", seed=0)
    keras.utils.set_random_seed(0)
    model = workbook.autoencoder(None, seed=0)
    model.fit(x_train, x_train, epochs=2, batch_size=64, verbose=0)
    mse = float(np.mean((model.predict(x_test, verbose=0) - x_test) ** 2))
    # Independent baselines: predict black everywhere, or the mean training image.
    zeros_mse = float(np.mean(x_test**2))
    mean_image_mse = float(np.mean((x_test - x_train.mean(axis=0)) ** 2))
    assert mse < MEASURED_IDENTITY_MSE * 1.3
    assert mse < 0.5 * mean_image_mse < 0.5 * zeros_mse


@pytest.mark.parametrize(
    "make_bottleneck",
    [
        lambda: None,
        lambda: workbook.DiscreteBottleneck("categorical", "score_function", seed=0),  # its own train_step
        lambda: workbook.VectorQuantizer(n_codes=10, restart_after=1, seed=0),  # weights moved outside Adam too
    ],
    ids=["identity", "score function", "restarted quantiser"],
)
def test_the_autoencoder_trains_as_with_keras_own_optimizer_and_traces_its_first_step_once(images, make_bottleneck):
    # The other model is Keras's own way: a fresh Adam compiled in, its slots made while the first
    # step is traced. Both models start from the same weights and see the same batches.
    x_train = images[0]
    models = {"the workbook's": workbook.autoencoder(make_bottleneck(), seed=0)}
    models["Keras's own"] = workbook.autoencoder(make_bottleneck(), seed=0)
    models["Keras's own"].compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3), loss="mse")
    assert models["the workbook's"].optimizer.built and not models["Keras's own"].optimizer.built
    traces = {}
    for name, model in models.items():
        traces[name] = 0
        step = model.train_step

        def counting(data, step=step, name=name):
            traces[name] += 1  # Python runs the step once each time TensorFlow traces it
            return step(data)

        model.train_step = counting
        keras.utils.set_random_seed(0)
        model.fit(x_train, x_train, epochs=2, batch_size=32, shuffle=False, verbose=0)
    for mine, keras_own in zip(*(model.get_weights() for model in models.values()), strict=True):
        np.testing.assert_array_equal(mine, keras_own)
    # Keras makes the slots while tracing, then traces again; made before, the step is traced once.
    assert traces == {"the workbook's": 1, "Keras's own": 2}


@pytest.mark.slow
def test_compare_bottlenecks_trains_each_variant_on_the_same_data_and_seed(images):
    x_train, x_test = images[0][:64], images[1]
    runs = workbook.compare_bottlenecks(
        {"first": None, "again": None, "cast": int_cast},
        epochs=2,
        batch_size=32,
        every=2,
        x_train=x_train,
        x_test=x_test,
        show=False,
    )
    assert list(runs) == ["first", "again", "cast"]
    first, again, cast = runs.values()
    # Same data, shuffling and initial weights: identical variants train identically.
    assert first.history["loss"] == again.history["loss"]
    assert len(first.history["loss"]) == 2 and len(first.history["val_loss"]) == 2
    assert np.array_equal(first.gradients.steps, [0, 2])  # 2 batches an epoch
    assert cast.gradients.dead_layers() == ["encoder"]
    # What the lab's monitor recorded, so it draws itself as the monitor's history does.
    assert any("encoder: no gradient" in text.get_text() for text in cast.gradients.plot().axes[0].texts)
    recomputed = float(np.mean((first.model.predict(x_test, verbose=0) - x_test) ** 2))
    assert first.test_mse == pytest.approx(recomputed, rel=1e-5)
    losses, norms, grid = comparison_figures(runs, x_test, n_images=4)
    assert len(grid.axes) == 4 * 4  # originals + three variants, four images each
    assert [ax.get_title() for ax in norms.axes if ax.get_visible()] == ["first", "again", "cast"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"bottlenecks": [None]}, r"bottlenecks=\[None\] must be a non-empty dict of label -> bottleneck"),
        ({"bottlenecks": {}}, r"bottlenecks=\{\} must be a non-empty dict"),
        ({"epochs": 0}, "epochs=0 must be a whole number of at least 1"),
        ({"batch_size": True}, "batch_size=True must be a whole number of at least 1"),
        ({"every": 2.0}, "every=2.0 must be a whole number of at least 1"),
        ({"x_train": np.zeros((4, 28, 28, 1))}, "Give both x_train and x_test, or neither"),
    ],
)
def test_compare_bottlenecks_refuses_bad_arguments_before_loading_or_training(kwargs, match, monkeypatch):
    import workbook.core.data

    def no_loading(**kwargs):
        raise AssertionError("the arguments are checked before any data is loaded")

    monkeypatch.setattr(workbook.core.data, "load_mnist", no_loading)
    with pytest.raises(ValueError, match=match):
        workbook.compare_bottlenecks(**{"bottlenecks": {"identity": None}, **kwargs})
