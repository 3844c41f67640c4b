"""Gradient estimators for discrete latents (notebook 06), each against an independent answer:
the exact gradient of the expected loss by listing outcomes, formulas from the papers,
NumPy, and TensorFlow's own tape."""

import dataclasses
import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

import workbook
from workbook.estimators.bias_variance import (
    make_problem,
    measure_bias_and_variance,
    moving_average_baseline,
    single_sample_gradients,
)
from workbook.estimators.layers import DiscreteBottleneck, ScoreFunctionAutoencoder, VectorQuantizer
from workbook.estimators.ranking import (
    BEST_CONSTANT,
    clearly_smaller_error,
    paired_error_difference,
    rank_estimators,
    summarise_ranking,
)
from workbook.estimators.sampling import ESTIMATORS, sample_latent


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# --- sampling and each estimator's gradient, against the formulas ----------------------------


@pytest.mark.parametrize("estimator", [e for e in ESTIMATORS if e != "gumbel_softmax"])  # the others forward bits
def test_bernoulli_samples_are_bits_with_probability_sigmoid_of_the_logit(estimator):
    logits = np.array([-2.0, -0.5, 0.0, 0.7, 3.0])
    tiled = tf.constant(np.tile(logits, (20_000, 1)))
    z, _ = sample_latent(tiled, "bernoulli", estimator, seed=4)
    z = z.numpy().reshape(-1, len(logits))  # leave-one-out: its 2 draws per example stacked
    assert set(np.unique(z)) <= {0.0, 1.0}
    p = sigmoid(logits)
    # binomial standard error of a frequency over 20,000 draws; 5 of them
    assert np.all(np.abs(z.mean(axis=0) - p) < 5 * np.sqrt(p * (1 - p) / 20_000))


def test_categorical_samples_are_one_hot_with_softmax_frequencies():
    logits = np.array([1.0, -1.0, 0.3, 2.0])
    z, log_prob = sample_latent(tf.constant(np.tile(logits, (20_000, 1))), "categorical", "straight_through", seed=5)
    z = z.numpy()
    assert np.all(z.sum(axis=1) == 1) and set(np.unique(z)) <= {0.0, 1.0}
    p = softmax(logits)
    assert np.all(np.abs(z.mean(axis=0) - p) < 5 * np.sqrt(p * (1 - p) / 20_000))
    np.testing.assert_allclose(log_prob.numpy(), np.log(p)[z.argmax(axis=1)], rtol=1e-6)


def tape_gradient(logits, latent, estimator, tau=1.0, seed=0, weights=None):
    logits = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        z, _ = sample_latent(logits, latent, estimator, tau=tau, seed=seed)
        loss = tf.reduce_sum(z * (1.0 if weights is None else weights))
    return z.numpy(), tape.gradient(loss, logits)


def test_straight_through_bernoulli_backpropagates_the_sigmoid_derivative():
    # Bengio, Léonard and Courville (2013): d z / d logit = d sigmoid / d logit = p (1 - p)
    logits = np.linspace(-4, 4, 33)
    _, gradient = tape_gradient(logits, "bernoulli", "straight_through")
    np.testing.assert_allclose(gradient.numpy(), sigmoid(logits) * (1 - sigmoid(logits)), rtol=1e-6)


@pytest.mark.parametrize("tau", [0.3, 1.0, 2.5])
def test_binary_gumbel_softmax_is_a_sigmoid_at_temperature_tau(tau):
    # Maddison, Mnih and Teh (2017), binary Concrete: z = sigmoid((logit + L) / tau), dz/dlogit = z (1 - z) / tau
    logits = np.linspace(-3, 3, 25)
    z, gradient = tape_gradient(logits, "bernoulli", "gumbel_softmax", tau=tau)
    assert np.all((z > 0) & (z < 1))
    np.testing.assert_allclose(gradient.numpy(), z * (1 - z) / tau, rtol=1e-5, atol=1e-12)
    hard, gradient_st = tape_gradient(logits, "bernoulli", "gumbel_softmax_st", tau=tau)
    np.testing.assert_array_equal(hard, (z > 0.5).astype(float))  # the same noise: the relaxed sample rounded
    np.testing.assert_allclose(gradient_st.numpy(), gradient.numpy(), rtol=1e-6)


def test_categorical_gumbel_softmax_gradient_is_the_softmax_jacobian():
    # Jang, Gu and Poole (2017): y = softmax((logits + g) / tau); dy/dlogits = (diag(y) - y y^T) / tau
    rng = np.random.default_rng(0)
    logits, weights, tau = rng.normal(size=(50, 4)), rng.normal(size=(50, 4)), 0.6
    y, gradient = tape_gradient(logits, "categorical", "gumbel_softmax", tau=tau, weights=weights)
    expected = y * (weights - np.sum(weights * y, axis=-1, keepdims=True)) / tau
    np.testing.assert_allclose(gradient.numpy(), expected, rtol=1e-5, atol=1e-10)
    hard, gradient_st = tape_gradient(logits, "categorical", "gumbel_softmax_st", tau=tau, weights=weights)
    np.testing.assert_array_equal(hard, np.eye(4)[y.argmax(axis=1)])
    np.testing.assert_allclose(gradient_st.numpy(), expected, rtol=1e-5, atol=1e-10)


def test_score_function_sample_carries_no_gradient():
    _, gradient = tape_gradient(np.zeros(5), "bernoulli", "score_function")
    assert gradient is None


def test_bad_names_tau_and_sizes_are_value_errors_naming_the_argument():
    with pytest.raises(ValueError, match="estimator='reinforce'.*score_function"):
        sample_latent(np.zeros(3), "bernoulli", "reinforce")
    with pytest.raises(ValueError, match="latent='gaussian'"):
        sample_latent(np.zeros(3), "gaussian")
    with pytest.raises(ValueError, match=r"tau=0 must be a temperature in \(0, 100\]"):
        DiscreteBottleneck("categorical", "gumbel_softmax", tau=0)
    with pytest.raises(ValueError, match="n_codes=1"):
        VectorQuantizer(n_codes=1)
    with pytest.raises(ValueError, match="test_latent='mean'"):
        DiscreteBottleneck(test_latent="mean")
    with pytest.raises(ValueError, match="n_samples=1 must be"):
        measure_bias_and_variance("straight_through", n_samples=1)
    with pytest.raises(ValueError, match=r"2 \*\* n_latents = 8192 outcomes is too many to list"):  # 2 ** 13
        make_problem("bernoulli", n_latents=13)


# --- bias and variance against the exact gradient ------------------------------------------


@pytest.mark.parametrize("latent", ["bernoulli", "categorical"])
def test_exact_gradient_agrees_with_finite_differences_of_the_expected_loss(latent):
    problem = make_problem(latent, n_latents=5 if latent == "bernoulli" else 3, seed=2)
    exact = problem.exact_gradient()
    step, base = 1e-6, problem.expected_loss()
    finite = np.zeros(problem.logits.size)
    for i in range(problem.logits.size):
        shifted = problem.logits.ravel().copy()
        shifted[i] += step
        finite[i] = (problem.with_logits(shifted.reshape(problem.logits.shape)).expected_loss() - base) / step
    np.testing.assert_allclose(exact.ravel(), finite, atol=1e-4)


def test_exact_gradient_of_one_bit_is_the_difference_between_outcomes():
    # d/dtheta [p f(1) + (1 - p) f(0)] = p (1 - p) (f(1) - f(0)), written out by hand
    problem = make_problem("bernoulli", n_latents=1, seed=3)
    f0, f1 = np.asarray(problem.loss(np.array([[0.0], [1.0]])))
    p = sigmoid(problem.logits[0])
    np.testing.assert_allclose(problem.exact_gradient(), [p * (1 - p) * (f1 - f0)], rtol=1e-10)


@pytest.mark.parametrize("latent,n_latents", [("bernoulli", 10), ("categorical", 4)])
@pytest.mark.parametrize("baseline_decay", [0.9, None])
def test_score_function_agrees_with_the_exact_gradient_within_its_measured_error(latent, n_latents, baseline_decay):
    problem = make_problem(latent, n_latents=n_latents, seed=1)
    result = measure_bias_and_variance(
        "score_function", problem, n_samples=8000, baseline_decay=baseline_decay, seed=11
    )
    # unbiased: each component of the mean within 4.5 of its own standard errors (about 1 in 150,000 by chance)
    assert np.all(np.abs(result.bias) <= 4.5 * result.standard_error), result.bias / result.standard_error


def test_the_baseline_lowers_the_score_functions_variance():
    problem = make_problem("bernoulli", n_latents=6)
    with_baseline = measure_bias_and_variance("score_function", problem, n_samples=4000, baseline_decay=0.9)
    without = measure_bias_and_variance("score_function", problem, n_samples=4000, baseline_decay=None)
    assert with_baseline.variance < 0.5 * without.variance


def test_bias_variance_and_standard_errors_are_the_statistics_of_the_single_sample_estimates():
    # The unbiasedness and bias tests above trust these numbers; here they are NumPy's own
    # statistics of the same estimates: variance is the trace of their covariance.
    problem, n = make_problem("categorical", n_latents=2, seed=4), 300
    result = measure_bias_and_variance("score_function", problem, n_samples=n, baseline_decay=0.5, seed=9)
    estimates = single_sample_gradients(problem, "score_function", n, baseline_decay=0.5, seed=9).reshape(n, -1)
    covariance = np.cov(estimates, rowvar=False)
    np.testing.assert_allclose(result.mean.ravel(), estimates.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(result.bias.ravel(), estimates.mean(axis=0) - problem.exact_gradient().ravel())
    assert result.bias_norm == pytest.approx(np.sqrt(np.sum(result.bias**2)))
    assert result.variance == pytest.approx(np.trace(covariance))
    np.testing.assert_allclose(result.standard_error.ravel(), np.sqrt(np.diag(covariance) / n))
    assert result.noise_floor == pytest.approx(np.sqrt(np.trace(covariance) / n))


def test_moving_average_baseline_uses_only_earlier_losses():
    np.testing.assert_allclose(moving_average_baseline(np.array([1.0, 2.0, 3.0]), 0.5), [0.0, 0.5, 1.25])


def test_straight_through_is_biased_well_beyond_its_noise():
    result = measure_bias_and_variance("straight_through", make_problem("bernoulli", n_latents=6), n_samples=8000)
    assert result.bias_norm > 5 * result.noise_floor


@pytest.mark.parametrize("latent", ["bernoulli", "categorical"])
def test_soft_gumbel_softmax_bias_shrinks_and_variance_grows_as_tau_goes_to_zero(latent):
    problem = make_problem(latent, n_latents=6 if latent == "bernoulli" else 4, seed=0)
    sweep = [
        measure_bias_and_variance("gumbel_softmax", problem, n_samples=4000, tau=tau) for tau in (2.0, 1.0, 0.5, 0.25)
    ]
    biases = [r.bias_norm for r in sweep]
    variances = [r.variance for r in sweep]
    assert all(b > a for a, b in itertools.pairwise(variances)), variances
    # each step down in bias must be more than the noise of the two measurements
    for hotter, colder in itertools.pairwise(sweep):
        assert (
            colder.bias_norm < hotter.bias_norm - 2 * (hotter.noise_floor + colder.noise_floor)
            or colder.bias_norm < 3 * colder.noise_floor
        ), biases


def quartic_reference(problem):
    """(exact gradient, straight-through Gumbel-softmax limit) of a quartic Bernoulli problem, in NumPy alone."""
    weights, target, logits = problem.weights, problem.target, problem.logits
    n = len(logits)
    p = sigmoid(logits)
    outcomes = np.array(list(itertools.product((0.0, 1.0), repeat=n)))

    def f(z):
        return np.mean((z @ weights.T - target) ** 4, axis=-1) / 10

    def slope(z):  # d f / d z, by hand: 4/10 mean over outputs of r^3 W
        return 0.4 * ((z @ weights.T - target) ** 3) @ weights / len(target)

    exact, limit = np.zeros(n), np.zeros(n)
    for i in range(n):
        others = [j for j in range(n) if j != i]
        for rest in itertools.product((0.0, 1.0), repeat=n - 1):
            weight = np.prod([p[j] if v else 1 - p[j] for j, v in zip(others, rest, strict=True)])
            z0, z1 = np.zeros(n), np.zeros(n)
            z0[others] = z1[others] = rest
            z1[i] = 1
            exact[i] += weight * p[i] * (1 - p[i]) * (f(z1[None])[0] - f(z0[None])[0])
            limit[i] += weight * p[i] * (1 - p[i]) * (slope(z0)[i] + slope(z1)[i]) / 2
    assert outcomes.shape == (2**n, n)
    return exact, limit


def test_quartic_problem_its_exact_gradient_and_the_straight_through_gumbel_limit_match_numpy():
    problem = make_problem("bernoulli", n_latents=5, seed=3, objective="quartic")
    z = np.random.default_rng(0).integers(0, 2, (7, 5)).astype(float)
    np.testing.assert_allclose(
        np.asarray(problem.loss(z)), np.mean((z @ problem.weights.T - problem.target) ** 4, axis=1) / 10, rtol=1e-12
    )
    exact, limit = quartic_reference(problem)
    np.testing.assert_allclose(problem.exact_gradient(), exact, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(problem.straight_through_gumbel_limit(), limit, rtol=1e-9, atol=1e-12)
    assert np.linalg.norm(limit - exact) > 0.05 * np.linalg.norm(exact)  # the trapezoid rule is off on a quartic
    quadratic = make_problem("bernoulli", n_latents=5, seed=3)
    np.testing.assert_allclose(quadratic.straight_through_gumbel_limit(), quadratic.exact_gradient(), atol=1e-12)


def test_straight_through_gumbel_softmax_tends_to_its_trapezoid_limit_and_the_soft_one_to_the_exact_gradient():
    problem = make_problem("bernoulli", n_latents=6, seed=0, objective="quartic")
    _, limit = quartic_reference(problem)
    exact = problem.exact_gradient()
    st = measure_bias_and_variance("gumbel_softmax_st", problem, n_samples=100_000, tau=0.05, seed=5)
    soft = measure_bias_and_variance("gumbel_softmax", problem, n_samples=100_000, tau=0.05, seed=5)
    # within 4.5 standard errors, plus the O(tau) distance that is left at tau = 0.05
    assert np.all(np.abs(st.mean - limit) <= 4.5 * st.standard_error + 0.02 * np.linalg.norm(exact))
    assert st.bias_norm > 5 * st.noise_floor
    assert soft.bias_norm < st.bias_norm - 3 * np.hypot(soft.noise_floor, st.noise_floor)


def exact_score_reference(problem):
    """Per outcome: probability, loss and score grad log p, for a Bernoulli problem, in NumPy alone."""
    p = sigmoid(problem.logits)
    outcomes = np.array(list(itertools.product((0.0, 1.0), repeat=len(p))))
    probs = np.prod(np.where(outcomes == 1, p, 1 - p), axis=1)
    losses = np.mean((outcomes @ problem.weights.T - problem.target) ** 2, axis=1)
    return probs, losses, outcomes - p


def test_optimal_baseline_and_score_function_variance_match_their_formulas_and_the_measurement():
    problem = make_problem("bernoulli", n_latents=4, seed=2)
    probs, losses, scores = exact_score_reference(problem)
    squared = np.sum(scores**2, axis=1)
    b_star = np.sum(probs * losses * squared) / np.sum(probs * squared)
    assert problem.optimal_baseline() == pytest.approx(b_star, rel=1e-10)
    gradient = np.sum(probs[:, None] * losses[:, None] * scores, axis=0)
    np.testing.assert_allclose(problem.exact_gradient(), gradient, rtol=1e-10)
    for b in (0.0, b_star, 3 * b_star):
        expected = np.sum(probs * (losses - b) ** 2 * squared) - np.sum(gradient**2)
        assert problem.score_function_variance(b) == pytest.approx(expected, rel=1e-10)
        measured = measure_bias_and_variance("score_function", problem, n_samples=20_000, baseline=b, seed=3)
        assert abs(measured.variance - expected) < 4.5 * measured.variance_standard_error
        assert np.all(np.abs(measured.bias) <= 4.5 * measured.standard_error)


def test_a_batch_mean_baseline_shrinks_the_gradient_by_one_over_the_batch_and_leave_one_out_does_not():
    problem = make_problem("bernoulli", n_latents=6, seed=0)
    probs, losses, scores = exact_score_reference(problem)
    exact = np.sum(probs[:, None] * losses[:, None] * scores, axis=0)
    for group in (2, 8):
        batch = measure_bias_and_variance("score_function", problem, 40_000, baseline="batch_mean", samples=group)
        assert np.all(np.abs(batch.mean - (1 - 1 / group) * exact) <= 4.5 * batch.standard_error)
        assert batch.bias_norm > 4 * batch.noise_floor
        loo = measure_bias_and_variance("score_function_loo", problem, 40_000, samples=group, seed=1)
        assert np.all(np.abs(loo.mean - exact) <= 4.5 * loo.standard_error), (loo.mean - exact) / loo.standard_error


@pytest.mark.parametrize("latent,n_latents", [("bernoulli", 8), ("categorical", 4)])
def test_leave_one_out_score_function_is_unbiased_against_the_exact_gradient(latent, n_latents):
    problem = make_problem(latent, n_latents=n_latents, seed=6)
    result = measure_bias_and_variance("score_function_loo", problem, n_samples=8000, samples=3, seed=2)
    assert result.samples == 3 and result.label == "score_function_loo (3 samples)"
    assert np.all(np.abs(result.bias) <= 4.5 * result.standard_error), result.bias / result.standard_error


def test_leave_one_out_estimate_is_the_kool_et_al_formula_on_given_draws():
    # (1/K) sum_k (f_k - mean_{j != k} f_j) grad log p_k, written out for K = 3 draws of one bit
    logit = tf.Variable([0.4])
    with tf.GradientTape() as tape:
        z, log_prob = sample_latent(logit, "bernoulli", "score_function_loo", samples=3, seed=8)
        losses = tf.reshape((z - 0.3) ** 2, (3,))
        baseline = workbook.estimators.sampling.leave_one_out_baseline(losses)
        term = tf.reduce_mean(tf.stop_gradient(losses - baseline) * tf.reshape(log_prob, (3,)))
    bits, p = z.numpy().ravel(), sigmoid(0.4)
    f = (bits - 0.3) ** 2
    expected = np.mean([(f[k] - np.mean(np.delete(f, k))) * (bits[k] - p) for k in range(3)])
    np.testing.assert_allclose(tape.gradient(term, logit).numpy(), [expected], rtol=1e-6)
    np.testing.assert_allclose(baseline.numpy(), [(f.sum() - f[k]) / 2 for k in range(3)], rtol=1e-6)


# --- DisARM (Dong, Mnih and Tucker 2020), the cosine, and comparisons at equal evaluations ----


def test_disarm_pair_is_antithetic_and_its_estimate_is_the_papers_formula_on_given_draws():
    # (f(b) - f(b~)) / 2 * (b - b~) * sigmoid(|logit|), with b = 1[u < p] and b~ = 1[1 - u < p]
    logits = tf.Variable([0.4, -1.3, 2.0, 0.0, -0.2])
    weights = tf.constant([1.0, -2.0, 0.5, 3.0, -1.0])
    with tf.GradientTape() as tape:
        z, log_prob = sample_latent(logits, "bernoulli", "disarm", seed=3)
        losses = (tf.reduce_sum(z * weights, axis=1) - 0.7) ** 2
        baseline = workbook.estimators.sampling.leave_one_out_baseline(losses)
        term = tf.reduce_mean(tf.stop_gradient(losses - baseline)[:, None] * log_prob, axis=0)
        term = tf.reduce_sum(term)
    b, other = z.numpy()
    f = losses.numpy()
    expected = (f[0] - f[1]) / 2 * (b - other) * sigmoid(np.abs(logits.numpy()))
    np.testing.assert_allclose(tape.gradient(term, logits).numpy(), expected, rtol=1e-5, atol=1e-7)
    # the value is the log-probability of each draw
    p = sigmoid(logits.numpy())
    np.testing.assert_allclose(log_prob.numpy(), np.log(np.where(z.numpy() == 1, p, 1 - p)), rtol=1e-5)
    # antithetic: with u uniform, b = 1[u > 1 - p] and b~ = 1[u < p]; both 1 needs u > 1 - p and u < p
    tiled = tf.constant(np.tile([0.3, -0.8], (20_000, 1)))
    pairs = sample_latent(tiled, "bernoulli", "disarm", seed=5)[0].numpy()
    both, p = np.mean(pairs[0] * pairs[1], axis=0), sigmoid(np.array([0.3, -0.8]))
    expected_both = np.maximum(2 * p - 1, 0)
    assert np.all(np.abs(both - expected_both) < 5 * np.sqrt(np.maximum(p * (1 - p), 0.01) / 20_000))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_disarm_is_unbiased_and_has_less_variance_than_leave_one_out_at_two_evaluations(seed):
    problem = make_problem("bernoulli", seed=seed)
    disarm = measure_bias_and_variance("disarm", problem, n_samples=8000, seed=seed + 10)
    loo = measure_bias_and_variance("score_function_loo", problem, n_samples=8000, seed=seed + 10)
    assert disarm.evaluations == loo.evaluations == 2 and disarm.label == "disarm"
    assert np.all(np.abs(disarm.bias) <= 4.5 * disarm.standard_error), disarm.bias / disarm.standard_error
    margin = 3 * np.hypot(disarm.variance_standard_error, loo.variance_standard_error)
    assert disarm.variance + margin < loo.variance, (disarm.variance, loo.variance, margin)


def disarm_pairs_written_out(logits):
    """Every antithetic pair of one bit, (b, b~, probability), from u uniform: b = 1[u > 1 - p], b~ = 1[u < p]."""
    p = sigmoid(logits)
    return [
        [
            (1.0, 1.0, max(2 * q - 1, 0.0)),
            (1.0, 0.0, min(q, 1 - q)),
            (0.0, 1.0, min(q, 1 - q)),
            (0.0, 0.0, max(1 - 2 * q, 0.0)),
        ]
        for q in p
    ]


@pytest.mark.parametrize("objective", ["quadratic", "quartic"])
def test_disarm_mean_and_variance_are_those_of_its_4_to_the_d_antithetic_pairs_listed(objective):
    problem = make_problem("bernoulli", n_latents=4, seed=2, objective=objective)
    # every one of the 4^4 joint outcomes of the four pairs, with its probability, through the paper's formula
    mean, second_moment = np.zeros(4), 0.0
    for outcome in itertools.product(*disarm_pairs_written_out(problem.logits)):
        b, other, probability = (np.array(values) for values in zip(*outcome, strict=True))
        f = np.asarray(problem.loss(np.stack([b, other])))
        estimate = (f[0] - f[1]) / 2 * (b - other) * sigmoid(np.abs(problem.logits))
        mean += probability.prod() * estimate
        second_moment += probability.prod() * np.sum(estimate**2)
    exact_variance = second_moment - np.sum(mean**2)
    np.testing.assert_allclose(mean, problem.exact_gradient(), atol=1e-9)  # unbiased, exactly
    measured = measure_bias_and_variance("disarm", problem, n_samples=20_000, seed=7)
    assert abs(measured.variance - exact_variance) < 4 * measured.variance_standard_error, (
        measured.variance,
        exact_variance,
    )


def test_paired_error_difference_is_the_difference_of_errors_written_out_for_shifted_estimates():
    problem = make_problem("bernoulli", n_latents=4, seed=1)
    measured = measure_bias_and_variance("score_function", problem, n_samples=2000, seed=3)
    assert paired_error_difference(measured, measured, 64) == (0.0, 0.0)
    shift = np.array([0.05, -0.02, 0.0, 0.01])
    shifted = dataclasses.replace(measured, estimates=measured.estimates + shift)
    # each group's variance is unchanged, its bias moves by the shift: |m - e + s|^2 - |m - e|^2, averaged
    groups = measured.estimates.reshape(20, 100, 4).mean(axis=1) - problem.exact_gradient()
    expected = np.mean(np.sum((groups + shift) ** 2 - groups**2, axis=1))
    difference, standard_error = paired_error_difference(shifted, measured, 64)
    assert difference == pytest.approx(expected, rel=1e-9)
    assert standard_error == pytest.approx(np.std(2 * groups @ shift, ddof=1) / np.sqrt(20), rel=1e-9)
    with pytest.raises(ValueError, match="same problem"):
        paired_error_difference(measured, measure_bias_and_variance("score_function", problem, 1000, seed=3), 64)


def test_disarm_is_refused_for_categorical_latents_and_other_sample_counts():
    with pytest.raises(ValueError, match="latent='categorical' must be 'bernoulli' with estimator='disarm'"):
        sample_latent(np.zeros((2, 3)), "categorical", "disarm")
    with pytest.raises(ValueError, match="latent='categorical' must be 'bernoulli' with estimator='disarm'"):
        DiscreteBottleneck("categorical", "disarm")
    with pytest.raises(ValueError, match=r"samples=3 must be None \(or 2\): DisARM draws exactly one antithetic pair"):
        sample_latent(np.zeros(3), "bernoulli", "disarm", samples=3)
    with pytest.raises(ValueError, match="problem.latent='categorical' must be 'bernoulli' with estimator='disarm'"):
        measure_bias_and_variance("disarm", make_problem("categorical", n_latents=2))


def test_cosine_is_the_mean_cosine_of_groups_of_estimates_with_the_exact_gradient():
    result = measure_bias_and_variance("score_function", make_problem(n_latents=4), n_samples=400, seed=1)
    estimates, exact = result.estimates.reshape(400, -1), result.exact.ravel()

    def cosines(group):
        means = estimates.reshape(-1, group, estimates.shape[1]).mean(axis=1)
        return means @ exact / np.linalg.norm(means, axis=1) / np.linalg.norm(exact)

    assert result.cosine() == pytest.approx((cosines(1).mean(), cosines(1).std(ddof=1) / np.sqrt(400)))
    assert result.cosine(8)[0] == pytest.approx(cosines(8).mean())
    loo = measure_bias_and_variance("score_function_loo", make_problem(n_latents=4), n_samples=400, seed=1)
    assert loo.cosine(8, equal_evaluations=True)[0] == pytest.approx(loo.cosine(4)[0])  # half as many estimates
    with pytest.raises(ValueError, match="batch_size=1000"):
        result.cosine(1000)


def test_equal_evaluations_charge_two_evaluation_estimators_twice_the_variance():
    loo = measure_bias_and_variance("score_function_loo", make_problem(n_latents=4), n_samples=400, seed=1)
    assert loo.gradient_error(10, equal_evaluations=True) == pytest.approx(loo.squared_bias + 2 * loo.variance / 10)
    assert loo.gradient_error(10, equal_evaluations=True) == pytest.approx(loo.gradient_error(5))
    problems = [make_problem(n_latents=3, seed=s) for s in (0, 1)]
    rankings = rank_estimators(problems, batch_size=16, n_samples=200, seed=0)
    assert len(rankings) == 2
    for ranking in rankings:
        errors = [r.gradient_error(16, equal_evaluations=True) for r in ranking]
        assert errors == sorted(errors) and len(ranking) == 15  # 14, and the score function at b*
    summary = summarise_ranking(rankings[0], batch_size=16)
    straight = next(r for r in rankings[0] if r.estimator == "straight_through")
    assert rankings[0][summary.rank - 1] is straight and summary.n_estimators == 15
    best_constant = next(r for r in rankings[0] if r.baseline == BEST_CONSTANT)
    assert best_constant.label == "score_function (best constant baseline)"
    assert best_constant.variance == pytest.approx(
        problems[0].score_function_variance(problems[0].optimal_baseline()), rel=0.5
    )
    assert summary.best_constant_minus_straight_through == paired_error_difference(best_constant, straight, 16)
    assert summary.beaten_by == sum(clearly_smaller_error(r, straight, 16) for r in rankings[0])
    loo = next(r for r in rankings[0] if r.estimator == "score_function_loo")
    score = next(r for r in rankings[0] if r.label == "score_function")  # the moving average
    assert summary.leave_one_out_per_evaluation[0] == pytest.approx(2 * loo.variance / score.variance)
    with pytest.raises(ValueError, match="problems="):
        rank_estimators(problems[0])


def test_disarm_model_trains_with_its_pair_and_its_gradient_is_the_papers_formula(digits):
    x_train, _ = digits
    x = x_train[:16]
    model = workbook.autoencoder(DiscreteBottleneck("bernoulli", "disarm", seed=0))
    assert isinstance(model, ScoreFunctionAutoencoder)
    layer = model.get_layer("bottleneck")
    assert layer.samples == 2 and "disarm" in repr(layer)
    encoder, decoder = keras.Sequential(model.layers[:2]), keras.Sequential(model.layers[3:])
    with tf.GradientTape(persistent=True) as tape:
        logits = encoder(x)
        codes, log_prob = layer.sample(logits)
        losses = tf.reduce_mean((decoder(codes) - tf.concat([x, x], axis=0)) ** 2, axis=[1, 2, 3])
        term = layer.score_function_loss(losses, log_prob)
        pair = tf.reshape(codes, (2, 16, *logits.shape[1:]))
        f = tf.stop_gradient(tf.reshape(losses, (2, 16)))
        slope = tf.stop_gradient((f[0] - f[1])[:, None, None, None] / 2 * (pair[0] - pair[1]))
        manual = tf.reduce_sum(slope * tf.stop_gradient(tf.sigmoid(tf.abs(logits))) * logits) / 16
    kernel = model.get_layer("encoder").kernel
    np.testing.assert_allclose(
        tape.gradient(term, kernel).numpy(), tape.gradient(manual, kernel).numpy(), rtol=1e-4, atol=1e-8
    )
    history = model.fit(x_train[:128], x_train[:128], epochs=1, batch_size=64, verbose=0)
    assert np.isfinite(history.history["loss"][0]) and float(layer.baseline.numpy()) == 0


def test_samples_adds_a_first_axis_of_independent_draws():
    logits = np.zeros((4, 5))
    z, log_prob = sample_latent(logits, "bernoulli", "straight_through", samples=3, seed=1)
    assert z.shape == (3, 4, 5) and log_prob.shape == (3, 4, 5)
    assert not np.array_equal(z.numpy()[0], z.numpy()[1])
    z, _ = sample_latent(logits, "categorical", "score_function_loo", seed=1)  # two draws by default
    assert z.shape == (2, 4, 5)
    with pytest.raises(ValueError, match="samples=1 must be a whole number from 2"):
        sample_latent(logits, "bernoulli", "score_function_loo", samples=1)
    with pytest.raises(ValueError, match="samples=2 must be None .*draws per example are used only by"):
        DiscreteBottleneck("bernoulli", "score_function", samples=2)
    with pytest.raises(ValueError, match="objective='cubic'"):
        make_problem(objective="cubic")
    with pytest.raises(ValueError, match="restart_after=0"):
        VectorQuantizer(restart_after=0)


def test_measure_estimators_covers_every_estimator_and_every_tau():
    results = workbook.measure_estimators(make_problem("bernoulli", n_latents=3), taus=(0.5, 1.0), n_samples=50)
    assert [r.label for r in results] == [
        "straight_through",
        "gumbel_softmax (tau=0.5)",
        "gumbel_softmax (tau=1)",
        "gumbel_softmax_st (tau=0.5)",
        "gumbel_softmax_st (tau=1)",
        "score_function",
        "score_function_loo (2 samples)",
        "disarm",
    ]
    categorical = workbook.measure_estimators(make_problem("categorical", n_latents=2), taus=(1.0,), n_samples=50)
    assert "disarm" not in [r.estimator for r in categorical]  # DisARM is for bits only
    figure = workbook.plot_bias_variance(results, batch_size=16)
    assert len(figure.axes) == 3 and all(ax.get_xscale() == "log" for ax in figure.axes)
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == ["0.5", "1"]  # tau on the axis, legible
    error = results[0].gradient_error(16)
    assert error == pytest.approx(
        max(results[0].bias_norm ** 2 - results[0].variance / 50, 0) + results[0].variance / 16
    )


# --- the exercise's self-check, with implementations from public sources ------------------------


def straight_through_gumbel_pytorch_style(logits, noise, tau):
    # torch.nn.functional.gumbel_softmax(hard=True): ret = y_hard - y_soft.detach() + y_soft
    y_soft = tf.nn.softmax((logits + noise) / tau)
    y_hard = tf.one_hot(tf.argmax(y_soft, axis=-1), tf.shape(y_soft)[-1], dtype=y_soft.dtype)
    return y_hard - tf.stop_gradient(y_soft) + y_soft


def straight_through_gumbel_jang_style(logits, noise, tau):
    # E. Jang's Categorical VAE notebook (github.com/ericjang/gumbel-softmax): y = stop_gradient(y_hard - y) + y
    y = tf.nn.softmax((logits + noise) / tau)
    y_hard = tf.cast(tf.equal(y, tf.reduce_max(y, -1, keepdims=True)), y.dtype)
    return tf.stop_gradient(y_hard - y) + y


def straight_through_softmax_without_noise(logits, noise, tau):
    # A common mix-up in public code: straight-through softmax, no Gumbel noise in the sample
    y = tf.nn.softmax(logits)
    y_hard = tf.one_hot(tf.argmax(y, axis=-1), tf.shape(y)[-1], dtype=y.dtype)
    return tf.stop_gradient(y_hard - y) + y


def soft_sample_only(logits, noise, tau):
    return tf.nn.softmax((logits + noise) / tau)


def relaxed_gradient_without_tau(logits, noise, tau):
    y = tf.nn.softmax(logits + noise)
    return tf.stop_gradient(tf.one_hot(tf.argmax(y, -1), tf.shape(y)[-1], dtype=y.dtype) - y) + y


@pytest.mark.parametrize("fn", [straight_through_gumbel_pytorch_style, straight_through_gumbel_jang_style])
def test_check_gumbel_softmax_st_accepts_published_implementations(fn, capsys):
    assert workbook.check_gumbel_softmax_st(fn, n_samples=500)
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn,message",
    [
        (straight_through_softmax_without_noise, "Forward"),
        (soft_sample_only, "Forward"),
        (relaxed_gradient_without_tau, "Backward"),
    ],
)
def test_check_gumbel_softmax_st_rejects_common_mistakes(fn, message, capsys):
    assert not workbook.check_gumbel_softmax_st(fn, n_samples=500)
    assert message in capsys.readouterr().out


def test_check_gumbel_softmax_st_turns_an_unfinished_answer_into_a_message(capsys):
    def unfinished(logits, noise, tau):
        raise NotImplementedError()

    assert not workbook.check_gumbel_softmax_st(unfinished)
    assert "NotImplementedError" in capsys.readouterr().out


# --- the vector quantiser ----------------------------------------------------------------


def test_vector_quantiser_picks_the_nearest_code_and_passes_the_gradient_straight_through():
    layer = VectorQuantizer(n_codes=7, seed=1)
    x = tf.constant(np.random.default_rng(0).uniform(0, 1, (3, 4, 4, 5)).astype("float32"))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        projected = tf.reduce_sum(y * tf.range(5, dtype=tf.float32))
    codebook = layer.codebook.numpy()
    distances = ((x.numpy()[..., None, :] - codebook) ** 2).sum(-1)  # brute force, NumPy
    np.testing.assert_allclose(y.numpy(), codebook[distances.argmin(-1)], rtol=1e-6)
    np.testing.assert_array_equal(tape.gradient(projected, x).numpy(), np.broadcast_to(np.arange(5.0), x.shape))


def test_codebook_loss_gradient_pulls_each_code_toward_the_mean_of_its_inputs():
    # d/de_k mean((x - e_k)^2 over assigned x and the D coordinates) = -2 / (N D) * sum over i in k of (x_i - e_k)
    layer = VectorQuantizer(n_codes=5, seed=2)
    x = tf.constant(np.random.default_rng(1).uniform(0, 1, (40, 3)).astype("float32"))
    layer.build(x.shape)
    with tf.GradientTape() as tape:
        codebook_loss, _ = layer.codebook_losses(x)
    gradient = tf.convert_to_tensor(tape.gradient(codebook_loss, layer.codebook)).numpy()
    codebook, assigned = layer.codebook.numpy(), layer.nearest_codes(x).numpy()
    expected = np.zeros_like(codebook)
    for k in range(5):
        expected[k] = -2 / x.numpy().size * (x.numpy()[assigned == k] - codebook[k]).sum(axis=0)
    np.testing.assert_allclose(gradient, expected, rtol=1e-5, atol=1e-7)


def test_training_moves_the_codebook_toward_the_encoder_outputs(digits):
    x_train, _ = digits
    model = workbook.autoencoder(VectorQuantizer(n_codes=16), learning_rate=3e-3)
    encoder_outputs = keras.Model(model.inputs, model.get_layer("pool").output)
    layer = model.get_layer("bottleneck")

    def distance_to_nearest_code():
        outputs = encoder_outputs.predict(x_train[:256], verbose=0).reshape(-1, 10)
        codes = layer.codebook.numpy()
        return np.sqrt(((outputs[:, None, :] - codes) ** 2).sum(-1).min(axis=1)).mean()

    before, codebook_before = distance_to_nearest_code(), layer.codebook.numpy()
    model.fit(x_train, x_train, epochs=1, batch_size=64, verbose=0)
    after = distance_to_nearest_code()
    assert not np.allclose(layer.codebook.numpy(), codebook_before)
    assert after < 0.5 * before, (before, after)


# --- in the autoencoder: training, saving, comparing ---------------------------------------------


@pytest.fixture(scope="module")
def digits():
    (x_train, _), (x_test, _) = workbook.load_mnist(n_train=1024, n_test=256, source="bundled", seed=0)
    return x_train, x_test


def mean_image_mse(digits):
    x_train, x_test = digits
    return float(np.mean((x_test - x_train.mean(axis=0)) ** 2))


# The stated test error: below the best image that ignores the input (the mean training image,
# a test MSE of about 0.066), so the code must carry information about the digit. Budgets are
# what each estimator needs on 1,024 bundled digits (16 steps per epoch), measured at seed 0.
TRAINING_CASES = {
    "categorical straight_through": (lambda: DiscreteBottleneck("categorical", "straight_through", seed=0), 5),
    "categorical gumbel_softmax": (lambda: DiscreteBottleneck("categorical", "gumbel_softmax", seed=0), 5),
    "categorical gumbel_softmax_st": (lambda: DiscreteBottleneck("categorical", "gumbel_softmax_st", seed=0), 5),
    "categorical score_function": (lambda: DiscreteBottleneck("categorical", "score_function", seed=0), 10),
    "categorical score_function_loo": (lambda: DiscreteBottleneck("categorical", "score_function_loo", seed=0), 5),
    "bernoulli score_function_loo": (lambda: DiscreteBottleneck("bernoulli", "score_function_loo", seed=0), 6),
    "bernoulli disarm": (lambda: DiscreteBottleneck("bernoulli", "disarm", seed=0), 6),
    "bernoulli gumbel_softmax_st": (lambda: DiscreteBottleneck("bernoulli", "gumbel_softmax_st", seed=0), 5),
    "vector quantiser": (lambda: VectorQuantizer(n_codes=32), 5),
    "vector quantiser, 10 codes restarted": (lambda: VectorQuantizer(n_codes=10, restart_after=5), 5),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(TRAINING_CASES))
def test_each_estimator_trains_the_autoencoder_below_the_mean_image_error(case, digits):
    make_bottleneck, epochs = TRAINING_CASES[case]
    x_train, x_test = digits
    keras.utils.set_random_seed(0)
    model = workbook.autoencoder(make_bottleneck(), learning_rate=3e-3)
    model.fit(x_train, x_train, epochs=epochs, batch_size=64, verbose=0)
    test_mse = float(np.mean((model.predict(x_test, verbose=0) - x_test) ** 2))
    assert test_mse < 0.9 * mean_image_mse(digits), (case, test_mse, mean_image_mse(digits))


def test_score_function_model_gives_the_encoder_the_reinforce_gradient_only_through_its_train_step(digits):
    x_train, _ = digits
    model = workbook.autoencoder(DiscreteBottleneck("categorical", "score_function", seed=0))
    assert isinstance(model, ScoreFunctionAutoencoder)
    assert model.get_layer("encoder").activation.__name__ == "linear"
    # Through a plain forward pass the sampled code is a constant: the encoder gets nothing.
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x_train[:32], training=True) - x_train[:32]) ** 2)
    assert all(g is None for g in tape.gradient(loss, model.get_layer("encoder").trainable_weights))
    # The train step adds the score-function term: the encoder's weights move, the baseline follows the loss.
    before = model.get_layer("encoder").get_weights()[0].copy()
    history = model.fit(x_train[:256], x_train[:256], epochs=1, batch_size=64, verbose=0)
    assert not np.allclose(model.get_layer("encoder").get_weights()[0], before)
    baseline = float(model.get_layer("bottleneck").baseline.numpy())
    assert 0 < baseline < history.history["loss"][0]


def test_plain_models_keep_the_relu_encoder_and_sequential_class():
    model = workbook.autoencoder("round_ste")
    assert type(model) is keras.Sequential and model.get_layer("encoder").activation.__name__ == "relu"


@pytest.mark.parametrize(
    "bottleneck",
    [
        lambda: DiscreteBottleneck("categorical", "score_function", seed=3, test_latent="mode"),
        lambda: DiscreteBottleneck("bernoulli", "gumbel_softmax", tau=0.5, seed=3, test_latent="mode"),
        lambda: VectorQuantizer(n_codes=8, commitment=0.5),
        lambda: DiscreteBottleneck("bernoulli", "score_function_loo", samples=3, seed=3, test_latent="mode"),
        lambda: VectorQuantizer(n_codes=8, restart_after=2),
        lambda: DiscreteBottleneck("bernoulli", "disarm", seed=3, test_latent="mode"),
    ],
    ids=[
        "score_function",
        "gumbel_softmax",
        "vector_quantiser",
        "score_function_loo",
        "restarting_quantiser",
        "disarm",
    ],
)
def test_saves_and_loads_in_safe_mode_and_keeps_training(bottleneck, digits, tmp_path):
    x_train, x_test = digits
    model = workbook.autoencoder(bottleneck())
    model.fit(x_train[:128], x_train[:128], epochs=1, batch_size=64, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(model)
    assert loaded.get_layer("bottleneck").get_config() == model.get_layer("bottleneck").get_config()
    np.testing.assert_allclose(loaded.predict(x_test[:16], verbose=0), model.predict(x_test[:16], verbose=0), atol=1e-6)
    loaded.fit(x_train[:128], x_train[:128], epochs=1, batch_size=64, verbose=0)


@pytest.mark.slow
def test_compare_bottlenecks_trains_discrete_bottlenecks_with_live_gradient_norms(digits):
    x_train, x_test = digits
    runs = workbook.compare_bottlenecks(
        {
            "score function": DiscreteBottleneck("categorical", "score_function", seed=0),
            "vector quantiser": VectorQuantizer(n_codes=8),
        },
        epochs=1,
        every=2,
        x_train=x_train[:256],
        x_test=x_test[:64],
        show=False,
    )
    for run in runs.values():
        assert "encoder" in run.gradients.layers and not run.gradients.dead_layers()
        assert np.all(run.gradients.norms[:, run.gradients.layers.index("encoder")] > 0)
    codebook = runs["vector quantiser"].gradients
    assert np.all(codebook.norms[:, codebook.layers.index("bottleneck")] > 0)  # the codebook learns


def test_the_figures_of_compare_bottlenecks_change_no_code_drawn_after_them(digits, monkeypatch):
    from workbook.core import figures
    from workbook.lab.bottleneck_runs import per_image_errors

    monkeypatch.setattr(figures, "show_figure", lambda figure: None)  # drawn, then not displayed
    x_train, x_test = digits
    measured = {}
    for show in (False, True):
        bottleneck = DiscreteBottleneck("categorical", "gumbel_softmax", tau=1.0, seed=0)
        runs = workbook.compare_bottlenecks(
            {"soft": bottleneck}, epochs=1, x_train=x_train[:128], x_test=x_test[:64], show=show
        )
        measured[show] = per_image_errors(runs["soft"].model, x_test[:64])  # a new draw of the code
    # the same training, then the same draw: the figure's reconstructions drew codes of their own
    np.testing.assert_array_equal(measured[True], measured[False])


# --- the annealed Gumbel-softmax temperature (Jang, Gu and Poole 2017) ----------------------------


def jang_temperature(steps, rate, every, tau_min, tau=1.0):
    """The paper's schedule written out: max(tau_min, tau * exp(-rate * t)), t updated every ``every`` steps."""
    return max(tau_min, tau * np.exp(-rate * every * (steps // every)))


def test_an_annealed_temperature_follows_the_schedule_of_jang_et_al_step_by_step(digits):
    x_train, _ = digits
    bottleneck = DiscreteBottleneck("categorical", "gumbel_softmax_st", anneal_rate=0.05, anneal_every=3, seed=0)
    model = workbook.autoencoder(bottleneck, seed=0)
    assert bottleneck.temperature == 1.0
    for epochs, steps in ((1, 4), (1, 8), (3, 20)):  # 256 images in batches of 64: 4 steps an epoch
        model.fit(x_train[:256], x_train[:256], epochs=epochs, batch_size=64, verbose=0)
        assert float(bottleneck.training_steps.numpy()) == steps
        assert bottleneck.temperature == pytest.approx(jang_temperature(steps, 0.05, 3, 0.5), rel=1e-6)
    assert jang_temperature(20, 0.05, 3, 0.5) == 0.5  # the floor is reached: exp(-0.05 * 18) = 0.41
    # Testing, predicting and measuring take no training step.
    model.predict(x_train[:64], verbose=0)
    model(x_train[:64], training=False)
    assert float(bottleneck.training_steps.numpy()) == 20


@pytest.mark.parametrize("estimator", ["gumbel_softmax", "gumbel_softmax_st"])
def test_an_annealed_layer_samples_as_a_fixed_one_at_the_temperature_it_has_reached(estimator):
    logits = tf.constant(np.random.default_rng(0).normal(size=(8, 5, 4)), dtype="float32")
    annealed = DiscreteBottleneck("categorical", estimator, anneal_rate=0.1, anneal_every=2, tau_min=0.2, seed=7)
    annealed.training_steps.assign(5.0)  # updated at 4: tau = exp(-0.4)
    fixed = DiscreteBottleneck("categorical", estimator, tau=float(np.exp(-0.4)), seed=7)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        z_annealed, z_fixed = annealed(logits, training=True), fixed(logits, training=True)
        weights = tf.constant(np.arange(4.0), dtype="float32")
        loss_annealed, loss_fixed = tf.reduce_sum(z_annealed**2 * weights), tf.reduce_sum(z_fixed**2 * weights)
    np.testing.assert_allclose(z_annealed, z_fixed, rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(loss_annealed, logits), tape.gradient(loss_fixed, logits), rtol=1e-5)
    assert float(annealed.training_steps.numpy()) == 6  # one training step more
    late = DiscreteBottleneck("categorical", estimator, anneal_rate=0.1, anneal_every=2, tau_min=0.2, seed=7)
    late.training_steps.assign(1000.0)  # long past the floor
    cold = DiscreteBottleneck("categorical", estimator, tau=0.2, seed=7)
    np.testing.assert_allclose(late(logits, training=True), cold(logits, training=True), rtol=1e-6)


def test_a_fixed_temperature_adds_no_weight_and_samples_as_before():
    layer = DiscreteBottleneck("categorical", "gumbel_softmax", tau=0.7, seed=3)
    assert [weight.name for weight in layer.weights] == ["baseline"]
    assert layer.temperature == 0.7 and layer.get_config()["anneal_rate"] is None
    logits = tf.constant(np.random.default_rng(1).normal(size=(4, 3, 5)), dtype="float32")
    expected, _ = sample_latent(logits, "categorical", "gumbel_softmax", tau=0.7, seed=keras.random.SeedGenerator(3))
    np.testing.assert_allclose(layer(logits, training=True), expected, rtol=1e-6)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"anneal_rate": 0.0}, r"anneal_rate=0.0 must be None \(a fixed tau\) or a number in \(0, 1\]"),
        ({"anneal_rate": float("nan")}, "anneal_rate=nan must be"),
        ({"anneal_rate": "1e-3"}, "anneal_rate='1e-3' must be"),
        ({"anneal_rate": 1e-3, "anneal_every": 0}, "anneal_every=0 must be a whole number from 1 to 1000000"),
        ({"anneal_rate": 1e-3, "anneal_every": 2.5}, "anneal_every=2.5 must be"),
        ({"anneal_rate": 1e-3, "tau_min": 1.5}, r"tau_min=1.5 must be a temperature in \(0, tau=1\]"),
        ({"anneal_rate": 1e-3, "tau": 0.3}, r"tau_min=0.5 must be a temperature in \(0, tau=0.3\]"),
        ({"anneal_rate": 1e-3, "tau_min": 0}, "tau_min=0 must be"),
        ({"tau_min": 0.5}, "tau_min=0.5 must be None unless anneal_rate is given"),
        ({"anneal_every": 10}, "anneal_every=10 must be None unless anneal_rate is given"),
    ],
)
def test_bad_annealing_arguments_are_refused_naming_the_argument_the_value_and_what_is_allowed(arguments, message):
    with pytest.raises(ValueError, match="^DiscreteBottleneck: " + message):
        DiscreteBottleneck("categorical", "gumbel_softmax", **arguments)


@pytest.mark.parametrize("estimator", ["straight_through", "score_function", "score_function_loo"])
def test_annealing_is_refused_for_an_estimator_without_a_temperature(estimator):
    with pytest.raises(ValueError, match=f"anneal_rate=0.001 must be None for estimator='{estimator}'"):
        DiscreteBottleneck("categorical", estimator, anneal_rate=1e-3)


def test_an_annealed_model_saves_and_loads_in_safe_mode_where_its_schedule_had_got_to(digits, tmp_path):
    x_train, x_test = digits
    bottleneck = DiscreteBottleneck(
        "bernoulli", "gumbel_softmax", anneal_rate=0.02, anneal_every=2, tau_min=0.6, test_latent="mode"
    )
    model = workbook.autoencoder(bottleneck, seed=0)
    model.fit(x_train[:192], x_train[:192], epochs=1, batch_size=64, verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras", safe_mode=True)
    layer = loaded.get_layer("bottleneck")
    assert layer.get_config() == bottleneck.get_config()
    assert (layer.anneal_rate, layer.anneal_every, layer.tau_min) == (0.02, 2, 0.6)
    assert layer.temperature == pytest.approx(jang_temperature(3, 0.02, 2, 0.6), rel=1e-6)
    np.testing.assert_allclose(loaded.predict(x_test[:16], verbose=0), model.predict(x_test[:16], verbose=0), atol=1e-6)
    loaded.fit(x_train[:128], x_train[:128], epochs=1, batch_size=64, verbose=0)
    assert layer.temperature == pytest.approx(jang_temperature(5, 0.02, 2, 0.6), rel=1e-6)  # goes on from 3
    assert "anneal_rate=0.02, anneal_every=2, tau_min=0.6" in repr(layer)


def test_leave_one_out_model_trains_on_every_draw_with_the_others_as_baseline(digits):
    x_train, _ = digits
    x = x_train[:32]
    model = workbook.autoencoder(DiscreteBottleneck("bernoulli", "score_function_loo", samples=2, seed=0))
    assert isinstance(model, ScoreFunctionAutoencoder)
    layer = model.get_layer("bottleneck")
    # The encoder's gradient, against Kool et al.'s formula written out on the same draws:
    # mean over the 2 x 32 draws of (f_k - f_other) * grad log p_k, log p by hand from the logits.
    encoder, decoder = keras.Sequential(model.layers[:2]), keras.Sequential(model.layers[3:])
    with tf.GradientTape(persistent=True) as tape:
        logits = encoder(x)
        codes, log_prob = layer.sample(logits)
        losses = tf.reduce_mean((decoder(codes) - tf.concat([x, x], axis=0)) ** 2, axis=[1, 2, 3])
        term = layer.score_function_loss(losses, log_prob)
        bits = tf.reshape(codes, (2, 32, *logits.shape[1:]))
        log_p = tf.reduce_sum(bits * tf.math.log_sigmoid(logits) + (1 - bits) * tf.math.log_sigmoid(-logits), [2, 3, 4])
        f = tf.stop_gradient(tf.reshape(losses, (2, 32)))
        manual = tf.reduce_mean(tf.stack([f[0] - f[1], f[1] - f[0]]) * log_p)
    kernel = model.get_layer("encoder").kernel
    np.testing.assert_allclose(
        tape.gradient(term, kernel).numpy(), tape.gradient(manual, kernel).numpy(), rtol=1e-4, atol=1e-8
    )
    assert model(x, training=True).shape == x.shape  # a plain forward pass: one draw per image
    history = model.fit(x_train[:128], x_train[:128], epochs=1, batch_size=64, verbose=0)
    assert np.isfinite(history.history["loss"][0]) and float(layer.baseline.numpy()) == 0  # no moving average


def test_codebook_usage_and_perplexity_are_counted_from_the_nearest_codes():
    layer = VectorQuantizer(n_codes=6, seed=4)
    x = tf.constant(np.random.default_rng(2).uniform(0, 1, (50, 3)).astype("float32"))
    layer.build(x.shape)
    codebook = layer.codebook.numpy()
    assigned = ((x.numpy()[:, None, :] - codebook) ** 2).sum(-1).argmin(1)
    frequencies = np.bincount(assigned, minlength=6) / 50
    nonzero = frequencies[frequencies > 0]
    used, perplexity = layer.usage(x)
    assert used == len(nonzero)
    assert perplexity == pytest.approx(np.exp(-np.sum(nonzero * np.log(nonzero))), rel=1e-5)


def test_restarting_moves_codes_idle_for_restart_after_steps_onto_encoder_outputs():
    layer = VectorQuantizer(n_codes=4, seed=0, restart_after=2)
    x = tf.constant(np.full((8, 3), 5.0, "float32"))  # every vector far away: only one code is ever nearest
    layer.build(x.shape)
    layer(x, training=True)
    assert layer.usage(x)[0] == 1 and not np.any(np.all(layer.codebook.numpy() == 5.0, axis=1))
    layer(x, training=True)  # the second idle step: the three unused codes jump onto the inputs
    np.testing.assert_array_equal(np.sum(np.all(layer.codebook.numpy() == 5.0, axis=1)), 3)


def test_compare_bottlenecks_reports_codebook_usage_only_for_a_codebook(digits):
    x_train, x_test = digits
    runs = workbook.compare_bottlenecks(
        {"vq": VectorQuantizer(n_codes=8), "st": DiscreteBottleneck("categorical", seed=0)},
        epochs=1,
        x_train=x_train[:128],
        x_test=x_test[:64],
        show=False,
    )
    model = runs["vq"].model
    inputs = keras.Model(model.inputs[0], model.get_layer("pool").output).predict(x_test[:64], verbose=0)
    assert (runs["vq"].codes_used, runs["vq"].n_codes) == (model.get_layer("bottleneck").usage(inputs)[0], 8)
    assert 1 <= runs["vq"].perplexity <= runs["vq"].codes_used
    assert runs["st"].codes_used is None and runs["st"].perplexity is None


# --- how many bits a code carries: code_rate ------------------------------------------------


def test_code_rate_of_a_code_that_ignores_the_image_is_zero_and_all_noise(digits):
    from workbook.estimators.rate import code_rate

    model = workbook.autoencoder(DiscreteBottleneck("categorical", "straight_through", seed=0))
    encoder = model.get_layer("encoder")
    encoder.set_weights([np.zeros_like(w) for w in encoder.get_weights()])  # logits 0: uniform, whatever the image
    rate = code_rate(model, digits[1])
    assert rate.nominal_bits == pytest.approx(196 * np.log2(10))
    assert rate.information_bits == pytest.approx(0, abs=1e-9) and rate.noise_bits == pytest.approx(rate.nominal_bits)
    assert not rate.deterministic and rate.halves_bits == pytest.approx(0, abs=1e-9)


def test_code_rate_is_the_sum_over_positions_of_the_mutual_information_written_out(digits):
    from workbook.estimators.rate import code_rate

    x = digits[1][:40]
    model = workbook.autoencoder(DiscreteBottleneck("bernoulli", "straight_through", seed=0), seed=3)
    logits = keras.Sequential(model.layers[:2])(x).numpy().reshape(40, -1)
    p = sigmoid(logits)

    def entropy(q):
        return -(q * np.log2(np.where(q > 0, q, 1)) + (1 - q) * np.log2(np.where(q < 1, 1 - q, 1)))

    expected = np.sum(entropy(p.mean(axis=0)) - entropy(p).mean(axis=0))
    rate = code_rate(model, x)
    assert rate.information_bits == pytest.approx(expected, rel=1e-5)
    assert rate.nominal_bits == logits.shape[1]
    # a codebook: deterministic, the bound is the entropy of each position's code over the images
    quantiser = workbook.autoencoder(VectorQuantizer(n_codes=4, seed=0), seed=3)
    codes = quantiser.get_layer("bottleneck").nearest_codes(keras.Sequential(quantiser.layers[:2])(x)).numpy()
    codes = codes.reshape(40, -1)
    frequencies = np.stack([(codes == k).mean(axis=0) for k in range(4)], axis=-1)
    expected = -np.sum(frequencies * np.log2(np.where(frequencies > 0, frequencies, 1)))
    rate = code_rate(quantiser, x)
    assert rate.deterministic and rate.noise_bits == 0 and rate.information_bits == pytest.approx(expected, rel=1e-6)
