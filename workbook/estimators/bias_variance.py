"""Each estimator's bias and variance, measured against the exact gradient of the expected loss.

Introduced in 06_beyond_straight_through.ipynb. On a problem small enough to list
every discrete outcome (a few Bernoulli or categorical latents), the expected loss
``E[f(z)] = sum over z of p(z | logits) f(z)`` is an ordinary differentiable sum,
so TensorFlow's tape gives its exact gradient. An estimator's single-sample
gradients are then compared with it: their mean minus the exact gradient is the
bias, their spread is the variance.
"""

import itertools
import numbers
from dataclasses import dataclass, field

import numpy as np

from workbook.core.arguments import check_count, check_seed, is_number, refuse
from workbook.core.gradients import value_and_gradient
from workbook.estimators.sampling import (
    BERNOULLI_ONLY,
    ESTIMATORS,
    LEAVE_ONE_OUT,
    check_estimator,
    check_samples,
    check_tau,
    check_taus,
    leave_one_out_baseline,
    sample_latent,
)

__all__ = [
    "DiscreteProblem",
    "make_problem",
    "BiasVariance",
    "measure_bias_and_variance",
    "measure_estimators",
]

#: Most outcomes :class:`DiscreteProblem` will list to compute the exact gradient.
MAX_OUTCOMES = 4096
#: Most rows of a problem's weights (a typo of 10**9 would not fit in memory).
MAX_OUTPUTS = 10_000

#: The losses :func:`make_problem` offers: ``r = weights @ z - target``, and f(z) is ...
OBJECTIVES = {"quadratic": "mean(r ** 2)", "quartic": "mean(r ** 4) / 10"}


@dataclass
class DiscreteProblem:
    """A loss of a few discrete latents: ``f(z) = mean((weights @ z - target) ** 2)``, or its quartic.

    Introduced in 06_beyond_straight_through.ipynb. ``z`` is flattened: ``n_latents``
    bits, or ``n_latents`` one-hot rows of ``n_classes``. A relaxed ``z`` in [0, 1] has a
    loss too, and its derivative at a corner is not the finite difference between
    corners: straight-through is biased on it. The quadratic is special: in each bit its
    derivative is a straight line, so the mean of the slopes at 0 and 1 *is* the
    difference, and the straight-through Gumbel-softmax's bias vanishes as tau goes to 0;
    on the quartic (``objective="quartic"``) it does not.

    Attributes
    ----------
    latent : {"bernoulli", "categorical"}
    logits : numpy.ndarray
        Shape (n_latents,) or (n_latents, n_classes); the gradient is taken with respect to them.
    weights : numpy.ndarray, shape (n_outputs, logits.size)
    target : numpy.ndarray, shape (n_outputs,)
    objective : {"quadratic", "quartic"}
        ``mean(r ** 2)`` or ``mean(r ** 4) / 10`` of ``r = weights @ z - target``.
    """

    latent: str
    logits: np.ndarray
    weights: np.ndarray = field(repr=False)
    target: np.ndarray = field(repr=False)
    objective: str = "quadratic"

    def with_logits(self, logits):
        """The same loss with other logits (e.g. shifted, for finite differences)."""
        return DiscreteProblem(self.latent, np.asarray(logits, dtype=float), self.weights, self.target, self.objective)

    def loss(self, z):
        """f for a batch of latents shaped (n, *logits.shape); returns shape (n,)."""
        from keras import ops

        flat = ops.reshape(z, (-1, int(np.prod(self.logits.shape))))
        weights = ops.cast(ops.convert_to_tensor(self.weights), flat.dtype)
        target = ops.cast(ops.convert_to_tensor(self.target), flat.dtype)
        squares = ops.square(ops.matmul(flat, ops.transpose(weights)) - target)
        if self.objective == "quartic":
            return ops.mean(ops.square(squares), axis=-1) / 10.0
        return ops.mean(squares, axis=-1)

    def probabilities(self):
        """p(z) of every outcome of :meth:`outcomes`, as float64."""
        outcomes = self.outcomes()
        if self.latent == "bernoulli":
            p = 1 / (1 + np.exp(-self.logits))
            return np.prod(np.where(outcomes == 1, p, 1 - p), axis=1)
        shifted = self.logits - self.logits.max(axis=-1, keepdims=True)
        p = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
        return np.prod(np.sum(outcomes * p, axis=-1), axis=1)

    def scores(self):
        """grad_logits log p(z) of every outcome, shape (n_outcomes, *logits.shape)."""
        outcomes = self.outcomes()
        if self.latent == "bernoulli":
            return outcomes - 1 / (1 + np.exp(-self.logits))
        shifted = self.logits - self.logits.max(axis=-1, keepdims=True)
        return outcomes - np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)

    def optimal_baseline(self):
        """The constant b* that gives the score function its least variance: E[f |s|^2] / E[|s|^2].

        Introduced in 06_beyond_straight_through.ipynb; ``s = grad log p(z)``, by listing outcomes.
        """
        probs, squared = self.probabilities(), self._squared_scores()
        return float(np.sum(probs * np.asarray(self.loss(self.outcomes())) * squared) / np.sum(probs * squared))

    def score_function_variance(self, baseline=0.0):
        """Exact variance (trace of the covariance) of one score-function estimate with a constant baseline.

        ``E[(f - b)^2 |s|^2] - |grad E f|^2``: a parabola in ``b``, least at :meth:`optimal_baseline`,
        and larger than with no baseline once ``b`` is beyond twice that.
        """
        probs, squared = self.probabilities(), self._squared_scores()
        losses = np.asarray(self.loss(self.outcomes()))
        return float(np.sum(probs * (losses - baseline) ** 2 * squared) - np.sum(self.exact_gradient() ** 2))

    def _squared_scores(self):
        scores = self.scores()
        return np.sum(scores.reshape(len(scores), -1) ** 2, axis=1)

    def straight_through_gumbel_limit(self):
        """The limit of the straight-through Gumbel-softmax's mean gradient as tau goes to 0 (Bernoulli).

        Introduced in 06_beyond_straight_through.ipynb. For bit i it is
        ``p_i (1 - p_i) E[(df/dz_i at z_i = 0) + (df/dz_i at z_i = 1)] / 2``, the other bits
        drawn as usual: the relaxed sample's derivative concentrates where the noise puts it on
        the threshold, and the hard sample there is 0 or 1 with equal chance. The exact gradient
        is ``p_i (1 - p_i) E[f(z_i = 1) - f(z_i = 0)]``; the two agree when f is quadratic in z_i.
        """
        import tensorflow as tf

        if self.latent != "bernoulli":
            raise ValueError(
                f"straight_through_gumbel_limit: latent={self.latent!r}; the limit is written out "
                "for Bernoulli latents only, e.g. workbook.make_problem('bernoulli')."
            )
        outcomes = tf.constant(self.outcomes(), tf.float64)
        slopes = value_and_gradient(lambda z: tf.reduce_sum(self.loss(z)), outcomes)[1].numpy()
        p = 1 / (1 + np.exp(-self.logits))
        # weight of the other bits' values: p(z) / p(z_i)
        others = self.probabilities()[:, None] / np.where(self.outcomes() == 1, p, 1 - p)
        return p * (1 - p) * np.sum(others * slopes, axis=0) / 2

    def outcomes(self):
        """Every latent value, shape (n_outcomes, *logits.shape), as float64."""
        if self.latent == "bernoulli":
            return np.array(list(itertools.product((0.0, 1.0), repeat=self.logits.shape[0])))
        n_latents, n_classes = self.logits.shape
        eye = np.eye(n_classes)
        return np.array([eye[list(choice)] for choice in itertools.product(range(n_classes), repeat=n_latents)])

    def exact_gradient(self):
        """d E[f(z)] / d logits by listing every outcome, from TensorFlow's tape (float64)."""
        import tensorflow as tf

        outcomes = tf.constant(self.outcomes(), tf.float64)
        logits = tf.constant(self.logits, tf.float64)

        def expected_loss(logits):
            if self.latent == "bernoulli":
                log_p = outcomes * tf.math.log_sigmoid(logits) + (1 - outcomes) * tf.math.log_sigmoid(-logits)
                log_p = tf.reduce_sum(log_p, axis=1)
            else:
                log_p = tf.reduce_sum(outcomes * tf.nn.log_softmax(logits, axis=-1), axis=[1, 2])
            return tf.reduce_sum(tf.exp(log_p) * self.loss(outcomes))

        return value_and_gradient(expected_loss, logits)[1].numpy()

    def expected_loss(self):
        """E[f(z)], listing every outcome."""
        return float(np.sum(self.probabilities() * np.asarray(self.loss(self.outcomes()))))


def make_problem(latent="bernoulli", n_latents=6, n_classes=3, n_outputs=8, seed=0, objective="quadratic"):
    """A random :class:`DiscreteProblem` small enough to list every outcome.

    Introduced in 06_beyond_straight_through.ipynb.

    Parameters
    ----------
    latent : {"bernoulli", "categorical"}
    n_latents : int
        Bits, or categorical variables; at most ``2 ** n_latents`` (or ``n_classes ** n_latents``)
        = 4096 outcomes, e.g. up to 12 bits.
    n_classes : int
        Classes per categorical variable (ignored for Bernoulli).
    n_outputs : int
        Rows of ``weights``, at most 10,000.
    seed : int
    objective : {"quadratic", "quartic"}
        ``mean(r ** 2)`` or ``mean(r ** 4) / 10`` of ``r = weights @ z - target``.
    """
    owner = "make_problem"
    check_estimator("straight_through", latent, owner=owner)
    if not isinstance(objective, str) or objective not in OBJECTIVES:
        allowed = (
            f"'quadratic' ({OBJECTIVES['quadratic']}) or 'quartic' ({OBJECTIVES['quartic']}), "
            "with r = weights @ z - target"
        )
        refuse("objective", objective, allowed, owner)
    check_count("n_latents", n_latents, low=1, owner=owner)
    check_count("n_classes", n_classes, low=2, high=MAX_OUTCOMES, owner=owner)
    check_count("n_outputs", n_outputs, low=1, high=MAX_OUTPUTS, owner=owner)
    check_seed(seed, owner=owner)
    classes = 2 if latent == "bernoulli" else n_classes
    # 13 latents are too many for any number of classes (2 ** 13 > 4096): no huge power is computed.
    outcomes = classes ** min(n_latents, 13)
    if outcomes > MAX_OUTCOMES:
        count = f" = {outcomes}" if n_latents <= 13 else ""
        allowed = (
            f"smaller: {classes} ** n_latents{count} outcomes is too many to list; keep it at most "
            f"{MAX_OUTCOMES}, e.g. n_latents={int(np.log(MAX_OUTCOMES) / np.log(classes))}"
        )
        refuse("n_latents", n_latents, allowed, owner)
    rng = np.random.default_rng(seed)
    shape = (n_latents,) if latent == "bernoulli" else (n_latents, n_classes)
    logits = rng.normal(0.0, 1.0, shape)
    weights = rng.normal(0.0, 1.0, (n_outputs, int(np.prod(shape))))
    target = rng.normal(0.0, 1.0, n_outputs)
    return DiscreteProblem(latent, logits, weights, target, objective)


@dataclass
class BiasVariance:
    """One estimator measured against the exact gradient by :func:`measure_bias_and_variance`.

    Introduced in 06_beyond_straight_through.ipynb.

    Attributes
    ----------
    estimator : str
    tau : float or None
        The temperature (Gumbel-softmax estimators only).
    n_samples : int
        How many independent estimates were averaged.
    exact, mean : numpy.ndarray
        The exact gradient, and the mean of the estimates (shaped like the logits).
    bias : numpy.ndarray
        ``mean - exact``.
    bias_norm : float
        Length of ``bias``.
    variance : float
        Total variance of one estimate (the trace of its covariance).
    standard_error : numpy.ndarray
        Per component, the standard deviation of ``mean`` (``std / sqrt(n_samples)``).
    noise_floor : float
        ``sqrt(variance / n_samples)``: about how long ``bias`` is from noise alone, even for
        an unbiased estimator. A ``bias_norm`` well above it is bias.
    variance_standard_error : float
        The standard error of ``variance`` itself, from the spread of the squared deviations.
    samples : int
        Loss evaluations per estimate: 1, or the draws per example of ``"score_function_loo"``
        and ``"disarm"`` (2).
    baseline : str
        The score function's baseline (``"-"`` for the others).
    estimates : numpy.ndarray or None
        The estimates themselves, shape (n_samples, *exact.shape), for :meth:`cosine`.
    """

    estimator: str
    tau: object
    n_samples: int
    exact: np.ndarray = field(repr=False)
    mean: np.ndarray = field(repr=False)
    bias: np.ndarray = field(repr=False)
    bias_norm: float
    variance: float
    standard_error: np.ndarray = field(repr=False)
    noise_floor: float
    variance_standard_error: float = 0.0
    samples: int = 1
    baseline: str = "-"
    estimates: np.ndarray = field(default=None, repr=False)

    @property
    def label(self):
        if self.tau is not None:
            return f"{self.estimator} (tau={self.tau:g})"
        if self.estimator == "score_function" and self.baseline != "moving average":
            return f"{self.estimator} ({self.baseline} baseline)"
        if self.samples > 1 and self.estimator != "disarm":
            return f"{self.estimator} ({self.samples} samples)"
        return self.estimator

    @property
    def relative_bias(self):
        """``bias_norm`` over the length of the exact gradient."""
        return self.bias_norm / float(np.linalg.norm(self.exact))

    @property
    def resolved(self):
        """True when ``bias_norm`` is more than twice the noise floor: a bias these samples can see."""
        return self.bias_norm > 2 * self.noise_floor

    @property
    def evaluations(self):
        """Loss evaluations (decoder passes, in a model) one estimate costs: ``samples``."""
        return self.samples

    def gradient_error(self, batch_size, equal_evaluations=False):
        """Expected squared error of the mean of ``batch_size`` estimates: ``|bias|^2 + variance / batch_size``.

        Introduced in 06_beyond_straight_through.ipynb: what a training step with that batch
        gets wrong. ``|bias|^2`` is taken without the part the noise adds to it
        (``|mean - exact|^2 - variance / n_samples``, not below 0). With
        ``equal_evaluations=True`` the budget is ``batch_size`` loss evaluations, not estimates:
        an estimator that evaluates the loss twice averages half as many,
        ``|bias|^2 + variance * evaluations / batch_size``.
        """
        return self.squared_bias + self.variance * self._cost(equal_evaluations) / batch_size

    def gradient_error_standard_error(self, batch_size, equal_evaluations=False):
        """About how far :meth:`gradient_error` may be off from measuring noise alone."""
        spread = self.variance_standard_error * self._cost(equal_evaluations) / batch_size
        return float(np.hypot(2 * self.bias_norm * self.noise_floor, spread))

    def _cost(self, equal_evaluations):
        return self.evaluations if equal_evaluations else 1

    def cosine(self, batch_size=1, equal_evaluations=False):
        """(mean, standard error) of the cosine between the mean of ``batch_size`` estimates and the exact gradient.

        Introduced in 06_beyond_straight_through.ipynb: 1 is the exact direction, 0 a direction
        unrelated to it, and a step along the estimate goes downhill when it is positive. The
        estimates are split into groups of ``batch_size`` (``batch_size / evaluations`` with
        ``equal_evaluations=True``, at least 1); the standard error is that of the mean over groups.
        """
        if self.estimates is None:
            refuse("estimates", None, "the estimates of measure_bias_and_variance, which keeps them", "cosine")
        check_count("batch_size", batch_size, high=self.n_samples // 2, owner="BiasVariance.cosine")
        group = max(int(batch_size) // self._cost(equal_evaluations), 1)
        usable = self.n_samples - self.n_samples % group
        means = self.estimates[:usable].reshape(usable // group, group, -1).mean(axis=1)
        exact = self.exact.reshape(-1)
        cosines = means @ exact / (np.linalg.norm(means, axis=1) * np.linalg.norm(exact) + 1e-300)
        return float(cosines.mean()), float(cosines.std(ddof=1) / np.sqrt(len(cosines)))

    @property
    def squared_bias(self):
        """``|bias|^2`` with the noise's share, ``variance / n_samples``, taken out (not below 0)."""
        return max(self.bias_norm**2 - self.variance / self.n_samples, 0.0)


def single_sample_gradients(
    problem, estimator, n_samples=1000, tau=1.0, baseline_decay=0.9, seed=0, baseline=None, samples=None
):
    """``n_samples`` independent gradient estimates, shape (n_samples, *logits.shape).

    Introduced in 06_beyond_straight_through.ipynb. By default the score-function estimates
    use a moving-average baseline as :class:`workbook.DiscreteBottleneck` does during training:
    the baseline for estimate i averages the losses of the estimates before it
    (``baseline_decay`` per step, starting at 0), so it never depends on sample i and the
    estimate stays unbiased; ``baseline_decay=None`` uses none. ``baseline`` replaces it by a
    constant, or by ``"batch_mean"``: the mean loss of the group of ``samples`` consecutive
    estimates that includes the estimate's own sample (biased, for the lesson).
    ``"score_function_loo"`` averages ``samples`` draws per estimate, each baselined by the others;
    ``"disarm"`` is written the same way over its antithetic pair.
    """
    import tensorflow as tf
    from keras import ops

    logits = tf.constant(np.broadcast_to(problem.logits, (n_samples,) + problem.logits.shape), tf.float64)
    draws = check_samples(samples, estimator) if estimator in LEAVE_ONE_OUT else None

    def objective(logits):
        z, log_prob = sample_latent(logits, problem.latent, estimator, tau=tau, seed=seed, samples=draws)
        if estimator in LEAVE_ONE_OUT:
            losses = ops.reshape(problem.loss(ops.reshape(z, (-1, *problem.logits.shape))), (draws, n_samples))
            log_prob = ops.sum(ops.reshape(log_prob, (draws, n_samples, -1)), axis=2)
            advantage = ops.stop_gradient(losses - leave_one_out_baseline(losses))
            return ops.sum(advantage * log_prob) / draws
        losses = problem.loss(z)
        if estimator != "score_function":
            return ops.sum(losses)
        baselines = score_function_baselines(ops.convert_to_numpy(losses), baseline_decay, baseline, samples)
        log_prob = ops.sum(ops.reshape(log_prob, (n_samples, -1)), axis=1)
        return ops.sum(ops.stop_gradient(losses - baselines) * log_prob)

    # Estimate i only touches row i of the tiled logits, so row i of this gradient is its estimate.
    return value_and_gradient(objective, logits)[1].numpy()


def score_function_baselines(losses, decay, baseline=None, samples=None):
    """The baseline of each score-function estimate: see :func:`single_sample_gradients`."""
    if baseline is None:
        return moving_average_baseline(losses, decay)
    if baseline == "batch_mean":
        group = samples or 2
        usable = len(losses) - len(losses) % group
        means = np.repeat(losses[:usable].reshape(-1, group).mean(axis=1), group)
        return np.concatenate([means, losses[usable:]])  # a short last group: its own loss, no gradient
    return np.full_like(losses, float(baseline))


def moving_average_baseline(losses, decay):
    """Baseline for each loss in turn: an exponential moving average of the losses before it."""
    baselines = np.zeros_like(losses)
    if decay is None:
        return baselines
    average = 0.0
    for i, value in enumerate(losses):
        baselines[i] = average
        average = decay * average + (1.0 - decay) * value
    return baselines


def check_measurement(n_samples, baseline_decay, baseline, problem):
    """Refuse what :func:`measure_bias_and_variance` cannot measure, naming the argument."""
    owner = "measure_bias_and_variance"
    check_count("n_samples", n_samples, low=2, high=1_000_000, owner=owner, example=1000)
    if baseline_decay is not None and not is_number(baseline_decay, low=0, high=1, include_high=False):
        refuse("baseline_decay", baseline_decay, "a number in [0, 1), e.g. 0.9, or None for no baseline", owner)
    if baseline is not None and baseline != "batch_mean" and not is_number(baseline):
        allowed = "None (the moving average), a number (a constant baseline) or 'batch_mean'"
        refuse("baseline", baseline, allowed, owner)
    if not isinstance(problem, DiscreteProblem):
        allowed = "a DiscreteProblem, e.g. workbook.make_problem('bernoulli', n_latents=6)"
        refuse("problem", problem, allowed, owner)


def measure_bias_and_variance(
    estimator, problem=None, n_samples=1000, tau=1.0, baseline_decay=0.9, seed=0, baseline=None, samples=None
):
    """Measure ``estimator``'s bias and variance against the exact gradient of the expected loss.

    Introduced in 06_beyond_straight_through.ipynb.

    Parameters
    ----------
    estimator : one of ``workbook.estimators.sampling.ESTIMATORS``
        ``"straight_through"``, ``"gumbel_softmax"``, ``"gumbel_softmax_st"``, ``"score_function"``,
        ``"score_function_loo"`` or ``"disarm"`` (Bernoulli problems only).
    problem : DiscreteProblem, optional
        Default: ``make_problem()``, 6 Bernoulli latents.
    n_samples : int
        How many independent estimates to average; the noise floor shrinks as ``1/sqrt(n_samples)``.
    tau : float
        Temperature of the Gumbel-softmax estimators.
    baseline_decay : float in [0, 1) or None
        The score function's moving-average baseline (None: no baseline).
    seed : int
    baseline : None, float or "batch_mean"
        The score function's baseline instead of the moving average: a constant, or the mean
        loss of a group of ``samples`` estimates that includes the estimate's own (biased).
    samples : int, optional
        Draws per example for ``"score_function_loo"`` (default 2), or the group of ``"batch_mean"``.

    Returns
    -------
    BiasVariance
    """
    check_estimator(estimator, owner="measure_bias_and_variance")
    tau = check_tau(tau, owner="measure_bias_and_variance")
    check_seed(seed, owner="measure_bias_and_variance")
    problem = make_problem() if problem is None else problem
    check_measurement(n_samples, baseline_decay, baseline, problem)
    check_estimator(estimator, problem.latent, owner="measure_bias_and_variance", latent_name="problem.latent")
    if samples is not None:
        check_samples(samples, "score_function_loo", owner="measure_bias_and_variance")
    gradients = single_sample_gradients(
        problem, estimator, int(n_samples), tau, baseline_decay, seed, baseline, samples
    )
    result = summarise(estimator, tau, gradients, problem.exact_gradient(), samples, baseline, baseline_decay)
    result.estimates = gradients
    return result


def summarise(estimator, tau, gradients, exact, samples, baseline, baseline_decay):
    """The :class:`BiasVariance` of ``gradients``, estimates along the first axis."""
    n_samples = len(gradients)
    mean = gradients.mean(axis=0)
    spread = gradients.std(axis=0, ddof=1)
    variance = float(np.sum(spread**2))
    squared_deviations = np.sum((gradients - mean).reshape(n_samples, -1) ** 2, axis=1)
    bias = mean - exact
    if estimator == "score_function":
        described = "moving average" if baseline is None and baseline_decay is not None else baseline
        described = "none" if described is None else described
        described = f"{described:.3g}" if isinstance(described, numbers.Number) else str(described)
    else:
        described = {"score_function_loo": "leave one out", "disarm": "the antithetic pair"}.get(estimator, "-")
    return BiasVariance(
        estimator,
        tau if estimator.startswith("gumbel") else None,
        n_samples,
        exact,
        mean,
        bias,
        float(np.linalg.norm(bias)),
        variance,
        spread / np.sqrt(n_samples),
        float(np.sqrt(variance / n_samples)),
        float(np.std(squared_deviations, ddof=1) / np.sqrt(n_samples)),
        check_samples(samples, estimator) if estimator in LEAVE_ONE_OUT else 1,
        described,
    )


def measure_estimators(
    problem=None, taus=(0.1, 0.25, 0.5, 1.0, 2.0), n_samples=1000, baseline_decay=0.9, seed=0, samples=2
):
    """:func:`measure_bias_and_variance` for every estimator, the Gumbel-softmax ones at every ``tau``.

    Introduced in 06_beyond_straight_through.ipynb. Every measurement uses the same noise
    (``seed``), so differences between temperatures are not sampling luck. ``samples`` is
    the leave-one-out score function's draws per example. DisARM (2 antithetic draws) is
    measured on Bernoulli problems only.

    Returns
    -------
    list of BiasVariance
    """
    taus = check_taus(taus, "(0.25, 0.5, 1.0)", "measure_estimators")
    if problem is not None and not isinstance(problem, DiscreteProblem):
        allowed = "None (the default problem) or a DiscreteProblem, e.g. workbook.make_problem('bernoulli')"
        refuse("problem", problem, allowed, "measure_estimators")
    problem = make_problem() if problem is None else problem
    results = []
    for estimator in estimators_for(problem.latent):
        for tau in taus if estimator.startswith("gumbel") else (1.0,):
            draws = samples if estimator == "score_function_loo" else None
            results.append(
                measure_bias_and_variance(estimator, problem, n_samples, tau, baseline_decay, seed, samples=draws)
            )
    return results


def estimators_for(latent):
    """The estimators that apply to a ``latent`` ("bernoulli" or "categorical"): DisARM only to bits."""
    return [estimator for estimator in ESTIMATORS if latent == "bernoulli" or estimator not in BERNOULLI_ONLY]
