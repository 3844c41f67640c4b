"""workbook.layers.Surrogate: a registered layer that saves, loads in safe mode and still backpropagates."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import workbook
from workbook import SURROGATES, surrogate
from workbook.layers import Surrogate


def gradient(model, x):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = model(x)
    return y.numpy(), tape.gradient(y, x).numpy()


def atan_derivative(x, alpha):  # Fang et al. (2021), written out again
    return (alpha / 2) / (1 + (np.pi / 2 * alpha * x) ** 2)


def test_layer_forwards_the_op_and_backpropagates_the_surrogate():
    layer = Surrogate("step_atan", alpha=4)
    x = np.linspace(-2.01, 2.01, 101).astype("float32")
    y, grad = gradient(layer, x)
    np.testing.assert_array_equal(y, (x > 0).astype("float32"))
    np.testing.assert_allclose(grad, atan_derivative(x.astype(float), 4.0), rtol=1e-5, atol=1e-7)
    assert layer.params == {"alpha": 4.0}
    assert layer.compute_output_shape((None, 3, 5)) == (None, 3, 5)


def test_cast_int_bottleneck_as_in_the_issue():
    bottleneck = Surrogate("cast_int_ste", scale=4, name="bottleneck")
    assert bottleneck.name == "bottleneck"
    y, grad = gradient(bottleneck, np.array([-0.3, 0.3, 0.62, 1.99], "float32"))
    np.testing.assert_allclose(y, [-0.25, 0.25, 0.5, 1.75])
    np.testing.assert_array_equal(grad, 1.0)


def test_default_names_are_the_catalog_key_and_unique():
    model = keras.Sequential([keras.Input((3,)), Surrogate("round_ste"), Surrogate("round_ste")])
    first, second = (layer.name for layer in model.layers)
    assert first.startswith("round_ste") and second.startswith("round_ste") and first != second


def test_accepts_a_catalog_object_and_merges_params():
    layer = Surrogate(SURROGATES["step_sigmoid"].with_params(slope=3), name="spike")
    assert layer.params == {"slope": 3.0}
    assert Surrogate(SURROGATES["step_sigmoid"].with_params(slope=3), slope=9).params == {"slope": 9.0}


def test_unknown_key_or_parameter_is_a_value_error_listing_what_is_allowed():
    with pytest.raises(ValueError, match=r"not_a_surrogate.*one of: .*sign_ste.*step_atan"):
        Surrogate("not_a_surrogate")
    with pytest.raises(ValueError, match="alpha"):
        Surrogate("step_atan", slope=2)
    with pytest.raises(ValueError, match="alpha"):
        Surrogate("step_atan", alpha=-1)


@pytest.mark.parametrize("name", sorted(SURROGATES))
def test_get_config_round_trips_every_entry(name):
    layer = Surrogate(name, name=f"layer_{name}")
    clone = Surrogate.from_config(layer.get_config())
    assert clone.name == layer.name and clone.params == layer.params
    assert clone.surrogate.same_definition(SURROGATES[name])


def test_get_config_keeps_non_default_params_and_dtype():
    layer = Surrogate("floor_smooth", depth=5, dtype="float64")
    clone = Surrogate.from_config(layer.get_config())
    assert clone.params == {"depth": 5} and clone.dtype_policy.name == "float64"


def make_model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((5,))
    hidden = keras.layers.Dense(5, name="encoder")(inputs)
    code = Surrogate("step_atan", alpha=3, name="bottleneck")(hidden)
    return keras.Model(inputs, keras.layers.Dense(2, name="decoder")(code))


def test_saved_model_loads_in_safe_mode_and_still_backpropagates(tmp_path):
    model = make_model()
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    bottleneck = loaded.get_layer("bottleneck")
    assert isinstance(bottleneck, Surrogate) and bottleneck.params == {"alpha": 3.0}
    x = np.random.default_rng(0).uniform(-1, 1, (4, 5)).astype("float32")
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-6)
    # The gradient reaching the encoder's kernel: independent answer by the chain rule.
    encoder, decoder = loaded.get_layer("encoder"), loaded.get_layer("decoder")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(loaded(x))
    got = tape.gradient(loss, encoder.kernel).numpy()
    h = x @ encoder.kernel.numpy() + encoder.bias.numpy()
    upstream = np.ones((4, 2)) @ decoder.kernel.numpy().T * atan_derivative(h, 3.0)
    np.testing.assert_allclose(got, x.T @ upstream, rtol=1e-4, atol=1e-6)
    assert np.abs(got).max() > 1e-3


def test_a_lambda_model_does_not_load_in_safe_mode(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Lambda(lambda x: keras.ops.round(x))])
    path = tmp_path / "lambda.keras"
    model.save(path)
    with pytest.raises(ValueError, match="safe_mode"):
        keras.saving.load_model(path, safe_mode=True)


# Keras's serialization guide: a registered custom function is saved by its registered name
# ("package>name") and found again on load, so safe mode has no code to refuse; only a Python
# lambda's bytecode is refused (keras/src/layers/core/lambda_layer.py, get_config).
@keras.saving.register_keras_serializable(package="workbook_tests")
def sign_straight_through(x):
    """Forward sign, backpropagate 1: a plain-Keras custom gradient, as notebook 01 opens with."""

    @keras.ops.custom_gradient
    def forward_and_backward(x):
        def backward(*args, upstream=None):
            return args[0] if upstream is None else upstream

        return keras.ops.sign(x), backward

    return forward_and_backward(x)


@pytest.mark.parametrize("wrap", [keras.layers.Lambda, keras.layers.Activation])
def test_a_registered_function_loads_in_safe_mode_and_keeps_its_gradient(tmp_path, wrap):
    model = keras.Sequential([keras.Input((3,)), wrap(sign_straight_through)])
    path = tmp_path / "registered.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    x = np.array([[-2.0, 0.5, 3.0]], dtype="float32")
    y, grad = gradient(loaded, x)
    np.testing.assert_array_equal(y, np.sign(x))  # the forward: sign
    np.testing.assert_array_equal(grad, np.ones_like(x))  # the backward: 1, not sign's 0


def test_own_surrogate_works_in_the_layer_but_saving_explains_why_not():
    mine = surrogate(keras.ops.sign, keras.ops.ones_like, name="mine")
    layer = Surrogate(mine)
    _, grad = gradient(layer, np.array([-1.0, 2.0], "float32"))
    np.testing.assert_array_equal(grad, 1.0)
    with pytest.raises(NotImplementedError, match="SURROGATES"):
        layer.get_config()


def test_float16_layer():
    layer = Surrogate("sign_swish", dtype="float16")
    y, grad = gradient(layer, np.array([-0.5, 0.0, 0.25], "float16"))
    assert y.dtype == np.float16 and grad.dtype == np.float16
    z = 5 * np.array([-0.5, 0.0, 0.25])
    expected = 5 * (2 - z * np.tanh(z / 2)) / (1 + np.cosh(z))
    np.testing.assert_allclose(grad, expected, rtol=1e-2, atol=1e-2)


def test_registered_under_the_workbook_package():
    assert keras.saving.get_registered_name(Surrogate) == "workbook>Surrogate"
    assert keras.saving.get_registered_object("workbook>Surrogate") is Surrogate


def test_own_surrogate_added_to_the_catalog_as_advised_saves_and_loads(tmp_path, monkeypatch):
    """The NotImplementedError says: workbook.SURROGATES[key] = your_surrogate. Doing so works."""
    mine = surrogate(keras.ops.sign, lambda x: keras.ops.full_like(x, 0.5), name="half_sign")
    model = keras.Sequential([keras.Input((3,)), workbook.layers.Surrogate(mine, name="half")])
    monkeypatch.setitem(workbook.SURROGATES, "half_sign", mine)
    path = tmp_path / "half_sign.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    y, grad = gradient(loaded, np.array([[-2.0, 0.5, 3.0]], "float32"))
    np.testing.assert_array_equal(y, [[-1.0, 1.0, 1.0]])
    np.testing.assert_array_equal(grad, 0.5)  # the derivative given, not sign's 0
