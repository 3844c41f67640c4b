"""Models saved by workbook 0.1.0 (tests/saved_models, written by scripts/make_saved_models.py
with Keras 3.8, the oldest supported) still load in safe mode and give the answers they gave then.

A renamed class, a registered name that moved, or a surrogate whose parameters or formula
changed makes these fail: a student's saved model from a course must keep working.
"""

import functools
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import workbook
import workbook.layers  # noqa: F401  (registers every workbook layer for loading)

SAVED = pathlib.Path(__file__).parent / "saved_models"

# The models were saved compiled but never trained, so their Adam has no slots yet; Keras says
# so while loading ("Skipping variable loading for optimizer"). That is expected here.
pytestmark = pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer:UserWarning")
EXPECTED = dict(np.load(SAVED / "expected.npz"))


@functools.cache  # each file is read once; the tests only read the models
def load(name):
    return keras.saving.load_model(SAVED / f"{name}.keras", safe_mode=True)


def test_the_catalog_model_forwards_and_backpropagates_as_it_did_when_saved():
    model = load("catalog")
    assert {layer.name for layer in model.layers} >= set(workbook.SURROGATES)
    x = tf.constant(EXPECTED["catalog/x"])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = model(x)
    np.testing.assert_allclose(y.numpy(), EXPECTED["catalog/y"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), EXPECTED["catalog/dy_dx"], rtol=1e-5, atol=1e-6)


# The parameters the catalog model was saved with in 0.1.0 (1.5 times each float default,
# plus 0.25), written out: a loaded layer must not fall back to today's defaults.
SAVED_PARAMETERS = {
    "cast_int_ste": {"scale": 1.75},
    "floor_smooth": {"depth": 3},
    "floor_ste": {},
    "round_ste": {},
    "sigmoid_identity": {},
    "sign_approx": {},
    "sign_clipped_ste": {"clip": 1.75},
    "sign_ste": {},
    "sign_swish": {"beta": 7.75},
    "step_atan": {"alpha": 3.25},
    "step_fast_sigmoid": {"slope": 37.75},
    "step_sigmoid": {"slope": 37.75},
}


def test_the_catalog_model_keeps_the_parameters_it_was_saved_with():
    model = load("catalog")
    loaded = {layer.name: layer.params for layer in model.layers if hasattr(layer, "params")}
    assert loaded == SAVED_PARAMETERS


@pytest.mark.parametrize("name", ["cast_int", "bernoulli_mode", "score_function_mode", "vector_quantizer"])
def test_a_saved_autoencoder_reconstructs_as_it_did_when_saved(name):
    model = load(f"autoencoder_{name}")
    got = model.predict(EXPECTED[f"{name}/x"], verbose=0)
    np.testing.assert_allclose(got, EXPECTED[f"{name}/y"], rtol=1e-4, atol=1e-6)


def test_a_saved_score_function_autoencoder_comes_back_as_one():
    model = load("autoencoder_score_function_mode")
    assert type(model).__name__ == "ScoreFunctionAutoencoder"
    assert model.get_layer("bottleneck").estimator == "score_function"


def test_a_saved_quantised_model_forwards_and_backpropagates_as_it_did_when_saved():
    # notebook 07's layers: a binarised convolution, k-bit activations and learned steps, saved with Keras 3.8
    model = load("quantised")
    expected = dict(np.load(SAVED / "expected_quantised.npz"))
    x = tf.constant(expected["x"])
    with tf.GradientTape() as tape:
        y = model(x)
    np.testing.assert_allclose(y.numpy(), expected["y"], rtol=1e-5, atol=1e-6)
    gradients = tape.gradient(y, model.trainable_weights)
    assert len(gradients) == len(expected) - 2 == 10  # 3 kernels and biases, gamma and beta, 2 learned steps
    for index, gradient in enumerate(gradients):
        np.testing.assert_allclose(gradient.numpy(), expected[f"d/{index}"], rtol=1e-4, atol=1e-5)
    learned = model.get_layer("learned_step")
    assert (learned.kernel_quantizer.bits, learned.kernel_quantizer.role) == (3, "weights")
    assert learned.input_quantizer.straight_through == "relu"
    assert model.get_layer("binary_conv").kernel_constraint.clip_value == 1.0
