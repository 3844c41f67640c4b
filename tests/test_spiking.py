"""The spiking room of 08_spiking_networks.ipynb: the layer against its recursion written out in
NumPy, its gradient through time against the chain rule with the surrogate's smooth twin
differenced numerically, safe-mode saving, and the data sets it learns from."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import workbook
from workbook.layers import LIF, LeakyReadout
from workbook.spiking.data import randman_spikes, random_spike_patterns
from workbook.spiking.networks import accuracy, spiking_classifier

# A model saved compiled but never trained has no Adam slots; Keras says so while loading it.
pytestmark = pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer:UserWarning")
SLOPE = 10.0
SPIKE = workbook.SURROGATES["step_fast_sigmoid"].with_params(slope=SLOPE)


def numpy_lif(x, kernel, recurrent_kernel, beta, threshold):
    """u_t = beta u_{t-1} + x_t W + s_{t-1} V - threshold s_{t-1}, s_t = [u_t > threshold], step by step."""
    batch, steps, _ = x.shape
    units = kernel.shape[1]
    membrane, spike = np.zeros((batch, units)), np.zeros((batch, units))
    spikes, membranes = np.zeros((batch, steps, units)), np.zeros((batch, steps, units))
    for t in range(steps):
        current = x[:, t] @ kernel + (spike @ recurrent_kernel if recurrent_kernel is not None else 0.0)
        membrane = beta * membrane + current - threshold * spike
        spike = (membrane > threshold).astype(float)
        spikes[:, t], membranes[:, t] = spike, membrane
    return spikes, membranes


def smooth_twin_slope(z, h=1e-6):
    """Central differences of z / (1 + k|z|), the fast sigmoid whose derivative SuperSpike backpropagates."""
    twin = lambda v: v / (1 + SLOPE * np.abs(v))  # noqa: E731
    return (twin(z + h) - twin(z - h)) / (2 * h)


def numpy_gradients(x, kernel, recurrent_kernel, beta, threshold, detach_reset, weights):
    """d/dW and d/dV of sum(weights * spikes), backwards through time by hand.

    dL/ds_t = c_t + dL/du_{t+1} V^T (- threshold dL/du_{t+1} when the reset is not detached);
    dL/du_t = dL/ds_t H'(u_t - threshold) + beta dL/du_{t+1};
    dL/dW = sum_t x_t^T dL/du_t; dL/dV = sum_t s_{t-1}^T dL/du_t.
    """
    spikes, membranes = numpy_lif(x, kernel, recurrent_kernel, beta, threshold)
    steps = x.shape[1]
    d_kernel, d_recurrent = np.zeros_like(kernel), np.zeros_like(recurrent_kernel)
    d_next = np.zeros_like(membranes[:, 0])
    for t in reversed(range(steps)):
        d_spike = weights[:, t] + d_next @ recurrent_kernel.T - (0.0 if detach_reset else threshold * d_next)
        d_membrane = d_spike * smooth_twin_slope(membranes[:, t] - threshold) + beta * d_next
        d_kernel += x[:, t].T @ d_membrane
        if t > 0:
            d_recurrent += spikes[:, t - 1].T @ d_membrane
        d_next = d_membrane
    return d_kernel, d_recurrent


def problem(seed=0, batch=3, steps=25, n_inputs=8, units=4):
    rng = np.random.default_rng(seed)
    x = (rng.uniform(size=(batch, steps, n_inputs)) < 0.3).astype("float64")
    kernel = rng.normal(0.3, 0.3, size=(n_inputs, units))
    recurrent_kernel = rng.normal(0.0, 0.3, size=(units, units))
    return x, kernel, recurrent_kernel, rng.normal(size=(batch, steps, units))


def built_layer(kernel, recurrent_kernel, **options):
    layer = LIF(kernel.shape[1], surrogate=SPIKE, beta=0.8, threshold=1.0, dtype="float64", **options)
    layer.build((None, 25, kernel.shape[0]))
    layer.kernel.assign(kernel)
    if layer.recurrent:
        layer.recurrent_kernel.assign(recurrent_kernel)
    return layer


@pytest.mark.parametrize("recurrent", [False, True])
def test_the_forward_pass_is_the_recursion_step_by_step(recurrent):
    x, kernel, recurrent_kernel, _ = problem()
    layer = built_layer(kernel, recurrent_kernel, recurrent=recurrent)
    spikes, membranes = layer.run(x)
    expected_spikes, expected_membranes = numpy_lif(x, kernel, recurrent_kernel if recurrent else None, 0.8, 1.0)
    assert 10 < expected_spikes.sum() < expected_spikes.size / 2  # fires, so reset and recurrence act
    np.testing.assert_array_equal(np.asarray(spikes), expected_spikes)
    np.testing.assert_allclose(np.asarray(membranes), expected_membranes, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(layer(x)), expected_spikes)


@pytest.mark.parametrize("detach_reset", [True, False])
def test_the_gradient_through_time_is_the_chain_rule_with_the_smooth_twin(detach_reset):
    x, kernel, recurrent_kernel, weights = problem(seed=1)
    layer = built_layer(kernel, recurrent_kernel, recurrent=True, detach_reset=detach_reset)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(x) * weights)
    d_kernel, d_recurrent = tape.gradient(loss, [layer.kernel, layer.recurrent_kernel])
    expected_kernel, expected_recurrent = numpy_gradients(x, kernel, recurrent_kernel, 0.8, 1.0, detach_reset, weights)
    assert np.abs(expected_kernel).max() > 1e-2 and np.abs(expected_recurrent).max() > 1e-2
    np.testing.assert_allclose(np.asarray(d_kernel), expected_kernel, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(np.asarray(d_recurrent), expected_recurrent, rtol=1e-6, atol=1e-9)


def test_the_reset_choice_changes_the_gradient_and_not_the_forward():
    x, kernel, recurrent_kernel, weights = problem(seed=2)
    results = []
    for detach_reset in (True, False):
        layer = built_layer(kernel, recurrent_kernel, detach_reset=detach_reset)
        with tf.GradientTape() as tape:
            spikes = layer(x)
            loss = tf.reduce_sum(spikes * weights)
        results.append((np.asarray(spikes), tape.gradient(loss, layer.kernel).numpy()))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    assert np.abs(results[0][1] - results[1][1]).max() > 1e-3


def test_the_readout_is_the_leaky_recursion():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 30, 5))
    layer = LeakyReadout(3, beta=0.7, dtype="float64")
    got = np.asarray(layer(x))
    kernel = layer.kernel.numpy()
    membrane, expected = np.zeros((2, 3)), []
    for t in range(30):
        membrane = 0.7 * membrane + x[:, t] @ kernel
        expected.append(membrane)
    np.testing.assert_allclose(got, np.stack(expected, axis=1), rtol=1e-10, atol=1e-12)


def test_a_spiking_classifier_saves_and_loads_in_safe_mode_and_backpropagates_the_same(tmp_path):
    surrogate = workbook.SURROGATES["step_sigmoid"].with_params(slope=7.5)
    model = spiking_classifier(20, 12, 3, n_hidden=6, surrogate=surrogate, recurrent=True, detach_reset=False)
    x, y = randman_spikes(n_classes=3, n_per_class=4, n_inputs=12, time_steps=20, seed=1)
    model.save(tmp_path / "spiking.keras")
    loaded = keras.saving.load_model(tmp_path / "spiking.keras", safe_mode=True)
    hidden = loaded.get_layer("hidden")
    assert (hidden.surrogate.name, hidden.surrogate.params) == ("step_sigmoid", {"slope": 7.5})
    assert (hidden.recurrent, hidden.detach_reset, hidden.beta) == (True, False, pytest.approx(0.67))

    def gradients(m):
        with tf.GradientTape() as tape:
            loss = keras.losses.sparse_categorical_crossentropy(y, m(x), from_logits=True)
        return [g.numpy() for g in tape.gradient(loss, m.trainable_weights)]

    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(model(x)), rtol=1e-6)
    for got, expected in zip(gradients(loaded), gradients(model), strict=True):
        assert np.abs(expected).max() > 0
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def test_a_layer_with_your_own_surrogate_says_why_it_cannot_be_saved():
    mine = workbook.surrogate(SPIKE.forward, SPIKE.derivative, name="mine")
    with pytest.raises(
        NotImplementedError, match="spikes with your own surrogate 'mine', which is not in workbook.SURROGATES"
    ):
        LIF(4, surrogate=mine).get_config()


def test_random_spike_patterns_are_seeded_with_the_rate_asked():
    x, y = random_spike_patterns(n_samples=256, time_steps=50, n_inputs=100, rate=0.02, seed=4)
    again, labels = random_spike_patterns(n_samples=256, time_steps=50, n_inputs=100, rate=0.02, seed=4)
    np.testing.assert_array_equal(x, again)
    np.testing.assert_array_equal(y, labels)
    # 1,280,000 Bernoulli(0.02) draws: standard error of the rate 0.000124
    assert abs(x.mean() - 0.02) < 5 * np.sqrt(0.02 * 0.98 / x.size)
    assert set(np.unique(y)) == {0, 1} and abs(y.mean() - 0.5) < 5 * 0.5 / np.sqrt(256)


def test_randman_fires_each_input_once_and_its_classes_are_in_the_timing():
    x, y = randman_spikes(n_classes=4, n_per_class=60, n_inputs=20, time_steps=50, seed=0)
    assert x.shape == (240, 50, 20) and np.bincount(y).tolist() == [60] * 4
    np.testing.assert_array_equal(x.sum(axis=1), np.ones((240, 20)))  # exactly one spike per input
    # every class has the same spike counts, so only the times tell them apart: a nearest-centroid
    # rule on each input's spike time, fitted on half, classifies the other half above chance (1/4; on
    # 120 samples its standard error is 0.04): a linear rule is not enough to do much better
    times = x.argmax(axis=1).astype(float)
    centroids = np.stack([times[:120][y[:120] == c].mean(axis=0) for c in range(4)])
    guess = np.argmin(((times[120:, None, :] - centroids[None]) ** 2).sum(-1), axis=1)
    assert np.mean(guess == y[120:]) > 0.4


def test_a_network_classifies_as_its_scores_say():
    x, y = random_spike_patterns(n_samples=16, time_steps=10, n_inputs=5, seed=0)
    model = spiking_classifier(10, 5, 2, n_hidden=3)
    scores = np.asarray(model(x))
    assert accuracy(model, x, y) == np.mean(scores.argmax(axis=1) == y)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: LIF(0), "LIF: units=0"),
        (lambda: LIF(4, beta=0), "LIF: beta=0"),
        (lambda: LIF(4, threshold=-1), "LIF: threshold=-1"),
        (lambda: LIF(4, surrogate="step"), "surrogate='step'"),
        (lambda: LIF(4, recurrent="yes"), "LIF: recurrent='yes'"),
        (lambda: random_spike_patterns(rate=2), "random_spike_patterns: rate=2"),
        (lambda: randman_spikes(n_classes=1), "randman_spikes: n_classes=1"),
    ],
)
def test_bad_arguments_are_named(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_a_layer_without_a_fixed_number_of_steps_says_so():
    with pytest.raises(ValueError, match="fixed number of time steps"):
        LIF(3)(keras.Input((None, 5)))


def test_the_raster_draws_one_tick_per_spike_and_the_traces_the_membranes():
    from workbook.spiking.plots import plot_spikes

    x, kernel, _, _ = problem(seed=4, batch=1, steps=40)
    expected_spikes, expected_membranes = numpy_lif(x, kernel, None, 0.8, 1.0)
    figure = plot_spikes(x[0], expected_spikes[0], expected_membranes[0], n_traces=2)
    raster_in, raster_out, traces = figure.axes
    assert len(raster_in.collections[0].get_offsets()) == x[0].sum()
    assert len(raster_out.collections[0].get_offsets()) == expected_spikes[0].sum() > 0
    busiest = np.argsort(-expected_spikes[0].sum(axis=0), kind="stable")[:2]
    drawn = [line for line in traces.get_lines() if line.get_label().startswith("neuron")]
    for line, neuron in zip(drawn, busiest, strict=True):
        np.testing.assert_allclose(line.get_ydata(), expected_membranes[0][:, neuron])
    with pytest.raises(ValueError, match="plot_spikes: membranes="):
        plot_spikes(x[0], expected_spikes[0], expected_membranes[0][:-1])


def test_a_layer_runs_before_its_first_call():
    x, kernel, _, _ = problem()
    layer = LIF(3)
    spikes, membranes = layer.run(x)
    assert layer.built and spikes.shape == membranes.shape == (3, 25, 3)


def test_peak_one_divides_the_derivative_by_its_peak_and_keeps_the_forward():
    from workbook.spiking.networks import peak_one

    sigmoid = workbook.SURROGATES["step_sigmoid"].with_params(slope=40.0)
    scaled = peak_one(sigmoid)
    x = np.linspace(-0.5, 0.5, 11, dtype="float32")
    # the sigmoid's derivative k s (1 - s) peaks at k / 4 = 10, written out
    z = 40.0 * x.astype("float64")  # s (1 - s) as s(z) s(-z): 1 - s in float32 would lose the tails
    expected = 40.0 / (1 + np.exp(-z)) / (1 + np.exp(z)) / 10.0
    np.testing.assert_allclose(np.asarray(scaled.derivative(x)), expected, rtol=1e-5, atol=1e-9)
    np.testing.assert_array_equal(np.asarray(scaled(x)), (x > 0).astype("float32"))
    with pytest.raises(ValueError, match="peak_one: surrogate="):
        peak_one("step_sigmoid")


def test_train_steps_refuses_a_count_of_steps_it_would_not_train_in_full():
    from workbook.spiking.networks import train_steps

    with pytest.raises(ValueError, match=r"steps=75.*a multiple of chunk=10"):
        train_steps(None, None, None, 75)


def test_a_learning_rate_sweep_trains_each_rate_as_a_fresh_network_would():
    from workbook.spiking.networks import accuracy_by_learning_rate, train_steps

    x, y = randman_spikes(n_classes=3, n_per_class=12, n_inputs=6, time_steps=12, seed=1)
    swept = spiking_classifier(12, 6, 3, n_hidden=5, learning_rate=1e-2, seed=2)
    found = accuracy_by_learning_rate(swept, x, y, x, y, [0.2, 0.05], 20)  # 0.05 after a run at 0.2
    fresh = spiking_classifier(12, 6, 3, n_hidden=5, learning_rate=0.05, seed=2)
    train_steps(fresh, x, y, 20)
    for trained, expected in zip(swept.get_weights(), fresh.get_weights(), strict=True):
        np.testing.assert_allclose(trained, expected, rtol=1e-6, atol=1e-7)
    assert found[0.05] == accuracy(fresh, x, y) and set(found) == {0.2, 0.05}
    assert int(swept.optimizer.iterations.numpy()) == 20
    with pytest.raises(ValueError, match=r"accuracy_by_learning_rate: learning_rates=\[0\]"):
        accuracy_by_learning_rate(swept, x, y, x, y, [0], 20)


def test_the_sweep_draws_a_line_per_steepness_through_its_accuracies():
    from workbook.spiking.plots import plot_sweep

    accuracies = {1.0: {0.1: 0.9, 0.01: 0.7}, 100.0: {0.1: 0.6, 0.01: 0.4}}
    figure = plot_sweep(accuracies)
    ax = figure.axes[0]
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.lines}
    assert lines == {"k = 1": ([0.01, 0.1], [0.7, 0.9]), "k = 100": ([0.01, 0.1], [0.4, 0.6])}  # rising rates
    assert len({line.get_color() for line in ax.lines}) == len({line.get_marker() for line in ax.lines}) == 2
    with pytest.raises(ValueError, match="plot_sweep: accuracies="):
        plot_sweep({1.0: {0.1: 0.9}, 10.0: {0.01: 0.5}})


def test_our_bars_stand_at_our_accuracies_beside_the_papers_unnumbered_schematic():
    from workbook.spiking.plots import plot_growing_peak

    accuracies = {("a", "control"): 0.8, ("a", "grown"): 0.7, ("b", "control"): 0.75, ("b", "grown"): 0.4}
    ours, paper = plot_growing_peak(accuracies, ["5c", "5e"], "doi.org/x", chance=0.25).axes
    heights = sorted(round(bar.get_height(), 3) for bar in ours.patches)
    assert heights == [0.4, 0.7, 0.75, 0.8]
    assert not paper.get_yticklabels() or not any(t.get_text() for t in paper.get_yticklabels())
    assert "not their values" in paper.get_xlabel()
    with pytest.raises(ValueError, match="plot_growing_peak: accuracies="):
        plot_growing_peak({("a", "control"): 0.8}, ["5c"], "doi.org/x")
