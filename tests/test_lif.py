"""The leaky integrate-and-fire neuron of 02_surrogate_zoo.ipynb, against the recursion written out."""

import numpy as np
import pytest
import tensorflow as tf

from workbook.surrogates.catalogue import SURROGATES
from workbook.surrogates.lif import lif_run

STEP_ATAN = SURROGATES["step_atan"]


def numpy_lif(inputs, weights, beta, threshold):
    """u_t = beta u_{t-1} + x_t w - threshold s_{t-1}, s_t = [u_t > threshold], one step at a time."""
    membrane = np.zeros(weights.shape[1])
    spike = np.zeros(weights.shape[1])
    spikes, membranes = [], []
    for x_t in inputs:
        membrane = beta * membrane + x_t @ weights - threshold * spike
        spike = (membrane > threshold).astype(float)
        spikes.append(spike)
        membranes.append(membrane)
    return np.array(spikes), np.array(membranes)


def problem(seed=0, steps=30, n_inputs=6, n_neurons=3):
    rng = np.random.default_rng(seed)
    inputs = (rng.uniform(size=(steps, n_inputs)) < 0.3).astype("float64")
    return inputs, rng.normal(0.3, 0.2, size=(n_inputs, n_neurons))


@pytest.mark.parametrize("detach_reset", [True, False])
def test_the_forward_pass_is_the_recursion(detach_reset):
    inputs, weights = problem()
    spikes, membranes = lif_run(inputs, weights, STEP_ATAN, beta=0.8, threshold=1.0, detach_reset=detach_reset)
    expected_spikes, expected_membranes = numpy_lif(inputs, weights, 0.8, 1.0)
    assert expected_spikes.sum() > 5  # the neurons fire, so the reset is exercised
    np.testing.assert_array_equal(np.asarray(spikes), expected_spikes)
    np.testing.assert_allclose(np.asarray(membranes), expected_membranes, rtol=1e-12, atol=1e-12)


def test_the_true_step_gives_no_gradient():
    inputs, weights = problem()
    variable = tf.Variable(weights)
    with tf.GradientTape() as tape:
        spikes, _ = lif_run(inputs, variable, STEP_ATAN.forward)
        total = tf.reduce_sum(spikes)
    assert tape.gradient(total, variable) is None


def smooth_step_slope(z, h=1e-6):
    """A central finite difference of the smooth stand-in arctan(pi/2 alpha z) / pi + 1/2 of step_atan."""
    alpha = STEP_ATAN.params["alpha"]
    smooth = lambda v: np.arctan(np.pi / 2 * alpha * v) / np.pi + 0.5  # noqa: E731
    return (smooth(z + h) - smooth(z - h)) / (2 * h)


def chain_rule_gradient(inputs, weights, beta, threshold, detach_reset):
    """d(sum of spikes)/dw, backwards through time by hand, the step's slope taken from the stand-in.

    dL/ds_t = 1, plus -threshold dL/du_{t+1} when the reset is not detached (s_t is the reset
    of u_{t+1}); dL/du_t = dL/ds_t H'(u_t - threshold) + beta dL/du_{t+1}; dL/dw = sum x_t dL/du_t.
    """
    _, membranes = numpy_lif(inputs, weights, beta, threshold)
    gradient, d_next = np.zeros_like(weights), np.zeros(weights.shape[1])
    for x_t, membrane in zip(inputs[::-1], membranes[::-1], strict=True):
        d_spike = 1.0 + (0.0 if detach_reset else -threshold * d_next)
        d_next = d_spike * smooth_step_slope(membrane - threshold) + beta * d_next
        gradient += np.outer(x_t, d_next)
    return gradient


@pytest.mark.parametrize("detach_reset", [True, False])
def test_the_gradient_through_time_is_the_surrogate_chain_rule(detach_reset):
    """Backprop through the unrolled run against a gradient written out by the chain rule in NumPy."""
    inputs, weights = problem(seed=1, steps=20, n_inputs=4, n_neurons=1)
    beta, threshold = 0.8, 1.0
    variable = tf.Variable(weights)
    with tf.GradientTape() as tape:
        spikes, _ = lif_run(inputs, variable, STEP_ATAN, beta=beta, threshold=threshold, detach_reset=detach_reset)
        total = tf.reduce_sum(spikes)
    gradient = tape.gradient(total, variable).numpy()
    expected = chain_rule_gradient(inputs, weights, beta, threshold, detach_reset)
    assert np.abs(expected).max() > 1e-3
    np.testing.assert_allclose(gradient, expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    ("argument", "value"),
    [("beta", 0.0), ("beta", 1.5), ("threshold", 0), ("detach_reset", "yes"), ("surrogate", "step_atan")],
)
def test_bad_arguments_are_named(argument, value):
    inputs, weights = problem()
    options = {"surrogate": STEP_ATAN, argument: value}
    with pytest.raises(ValueError, match=f"lif_run: {argument}="):
        lif_run(inputs, weights, **options)


def test_inputs_and_weights_must_fit():
    inputs, weights = problem()
    with pytest.raises(ValueError, match="inputs=.*shaped \\(steps, n_inputs\\)"):
        lif_run(inputs[0], weights, STEP_ATAN)
    with pytest.raises(ValueError, match="weights=.*n_inputs = 6"):
        lif_run(inputs, weights[:5], STEP_ATAN)
