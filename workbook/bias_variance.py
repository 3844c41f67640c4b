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

from .arguments import check_count, check_seed, is_number, is_whole_number, refuse
from .estimators import ESTIMATORS, check_estimator, check_tau, sample_latent
from .gradients import value_and_gradient

__all__ = ["DiscreteProblem", "make_problem", "BiasVariance", "measure_bias_and_variance", "measure_estimators"]

#: Most outcomes :class:`DiscreteProblem` will list to compute the exact gradient.
MAX_OUTCOMES = 4096
#: Most rows of a problem's weights (a typo of 10**9 would not fit in memory).
MAX_OUTPUTS = 10_000


@dataclass
class DiscreteProblem:
    """A loss of a few discrete latents: ``f(z) = mean((weights @ z - target) ** 2)``.

    Introduced in 06_beyond_straight_through.ipynb. ``z`` is flattened: ``n_latents``
    bits, or ``n_latents`` one-hot rows of ``n_classes``. Quadratic, so a relaxed ``z``
    in [0, 1] has a loss too, and its derivative at a corner is not the finite
    difference between corners: straight-through is biased on it.

    Attributes
    ----------
    latent : {"bernoulli", "categorical"}
    logits : numpy.ndarray
        Shape (n_latents,) or (n_latents, n_classes); the gradient is taken with respect to them.
    weights : numpy.ndarray, shape (n_outputs, logits.size)
    target : numpy.ndarray, shape (n_outputs,)
    """

    latent: str
    logits: np.ndarray
    weights: np.ndarray = field(repr=False)
    target: np.ndarray = field(repr=False)

    def with_logits(self, logits):
        """The same loss with other logits (e.g. shifted, for finite differences)."""
        return DiscreteProblem(self.latent, np.asarray(logits, dtype=float), self.weights, self.target)

    def loss(self, z):
        """f for a batch of latents shaped (n, *logits.shape); returns shape (n,)."""
        from keras import ops

        flat = ops.reshape(z, (-1, int(np.prod(self.logits.shape))))
        weights = ops.cast(ops.convert_to_tensor(self.weights), flat.dtype)
        target = ops.cast(ops.convert_to_tensor(self.target), flat.dtype)
        return ops.mean(ops.square(ops.matmul(flat, ops.transpose(weights)) - target), axis=-1)

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
        outcomes = self.outcomes()
        if self.latent == "bernoulli":
            p = 1 / (1 + np.exp(-self.logits))
            probs = np.prod(np.where(outcomes == 1, p, 1 - p), axis=1)
        else:
            shifted = self.logits - self.logits.max(axis=-1, keepdims=True)
            p = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
            probs = np.prod(np.sum(outcomes * p, axis=-1), axis=1)
        return float(np.sum(probs * np.asarray(self.loss(outcomes))))


def make_problem(latent="bernoulli", n_latents=6, n_classes=3, n_outputs=8, seed=0):
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
    """
    owner = "make_problem"
    check_estimator("straight_through", latent, owner=owner)
    check_count("n_latents", n_latents, low=1, owner=owner)
    check_count("n_classes", n_classes, low=2, high=MAX_OUTCOMES, owner=owner)
    check_count("n_outputs", n_outputs, low=1, high=MAX_OUTPUTS, owner=owner)
    check_seed(seed, owner=owner)
    classes = 2 if latent == "bernoulli" else n_classes
    # 13 latents are too many for any number of classes (2 ** 13 > 4096): no huge power is computed.
    outcomes = classes ** min(n_latents, 13)
    if outcomes > MAX_OUTCOMES:
        count = f" = {outcomes}" if n_latents <= 13 else ""
        raise ValueError(
            f"make_problem: {classes} ** n_latents{count} outcomes is too many to list; keep it at most "
            f"{MAX_OUTCOMES} (n_latents={n_latents}; e.g. n_latents={int(np.log(MAX_OUTCOMES) / np.log(classes))})."
        )
    rng = np.random.default_rng(seed)
    shape = (n_latents,) if latent == "bernoulli" else (n_latents, n_classes)
    logits = rng.normal(0.0, 1.0, shape)
    weights = rng.normal(0.0, 1.0, (n_outputs, int(np.prod(shape))))
    target = rng.normal(0.0, 1.0, n_outputs)
    return DiscreteProblem(latent, logits, weights, target)


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
    exact, mean : numpy.ndarray
        The exact gradient, and the mean of the single-sample estimates (shaped like the logits).
    bias : numpy.ndarray
        ``mean - exact``.
    bias_norm : float
        Length of ``bias``.
    variance : float
        Total variance of one single-sample estimate (the trace of its covariance).
    standard_error : numpy.ndarray
        Per component, the standard deviation of ``mean`` (``std / sqrt(n_samples)``).
    noise_floor : float
        ``sqrt(variance / n_samples)``: about how long ``bias`` is from noise alone, even for
        an unbiased estimator. A ``bias_norm`` well above it is bias.
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

    @property
    def label(self):
        return self.estimator if self.tau is None else f"{self.estimator} (tau={self.tau:g})"

    @property
    def relative_bias(self):
        """``bias_norm`` over the length of the exact gradient."""
        return self.bias_norm / float(np.linalg.norm(self.exact))


def single_sample_gradients(problem, estimator, n_samples=1000, tau=1.0, baseline_decay=0.9, seed=0):
    """``n_samples`` independent single-sample gradient estimates, shape (n_samples, *logits.shape).

    Introduced in 06_beyond_straight_through.ipynb. The score-function estimates use a
    moving-average baseline as :class:`workbook.DiscreteBottleneck` does during training: the
    baseline for sample i averages the losses of the samples before it (``baseline_decay`` per
    step, starting at 0), so it never depends on sample i and the estimate stays unbiased.
    ``baseline_decay=None`` uses no baseline.
    """
    import tensorflow as tf
    from keras import ops

    logits = tf.constant(np.broadcast_to(problem.logits, (n_samples,) + problem.logits.shape), tf.float64)

    def objective(logits):
        z, log_prob = sample_latent(logits, problem.latent, estimator, tau=tau, seed=seed)
        losses = problem.loss(z)
        if estimator != "score_function":
            return ops.sum(losses)
        baselines = moving_average_baseline(ops.convert_to_numpy(losses), baseline_decay)
        log_prob = ops.sum(ops.reshape(log_prob, (n_samples, -1)), axis=1)
        return ops.sum(ops.stop_gradient(losses - baselines) * log_prob)

    # Sample i only touches row i of the tiled logits, so row i of this gradient is its estimate.
    return value_and_gradient(objective, logits)[1].numpy()


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


def measure_bias_and_variance(estimator, problem=None, n_samples=1000, tau=1.0, baseline_decay=0.9, seed=0):
    """Measure ``estimator``'s bias and variance against the exact gradient of the expected loss.

    Introduced in 06_beyond_straight_through.ipynb.

    Parameters
    ----------
    estimator : one of ``workbook.estimators.ESTIMATORS``
        ``"straight_through"``, ``"gumbel_softmax"``, ``"gumbel_softmax_st"`` or ``"score_function"``.
    problem : DiscreteProblem, optional
        Default: ``make_problem()``, 6 Bernoulli latents.
    n_samples : int
        How many single-sample estimates to average; the noise floor shrinks as ``1/sqrt(n_samples)``.
    tau : float
        Temperature of the Gumbel-softmax estimators.
    baseline_decay : float in [0, 1) or None
        The score function's moving-average baseline (None: no baseline).
    seed : int

    Returns
    -------
    BiasVariance
    """
    check_estimator(estimator, owner="measure_bias_and_variance")
    tau = check_tau(tau, owner="measure_bias_and_variance")
    check_seed(seed, owner="measure_bias_and_variance")
    if not is_whole_number(n_samples, low=2, high=1_000_000):
        raise ValueError(
            f"measure_bias_and_variance: n_samples={n_samples!r} must be a whole number "
            f"from 2 to 1000000, e.g. n_samples=1000."
        )
    if baseline_decay is not None and not is_number(baseline_decay, low=0, high=1, include_high=False):
        raise ValueError(
            f"measure_bias_and_variance: baseline_decay={baseline_decay!r} must be a number "
            f"in [0, 1), e.g. 0.9, or None for no baseline."
        )
    problem = make_problem() if problem is None else problem
    if not isinstance(problem, DiscreteProblem):
        raise ValueError(
            f"measure_bias_and_variance: problem={problem!r} must be a DiscreteProblem, "
            f"e.g. workbook.make_problem('bernoulli', n_latents=6)."
        )
    gradients = single_sample_gradients(problem, estimator, int(n_samples), tau, baseline_decay, seed)
    exact = problem.exact_gradient()
    mean = gradients.mean(axis=0)
    spread = gradients.std(axis=0, ddof=1)
    variance = float(np.sum(spread**2))
    bias = mean - exact
    uses_tau = estimator.startswith("gumbel")
    return BiasVariance(
        estimator,
        tau if uses_tau else None,
        int(n_samples),
        exact,
        mean,
        bias,
        float(np.linalg.norm(bias)),
        variance,
        spread / np.sqrt(n_samples),
        float(np.sqrt(variance / n_samples)),
    )


def measure_estimators(problem=None, taus=(0.1, 0.25, 0.5, 1.0, 2.0), n_samples=1000, baseline_decay=0.9, seed=0):
    """:func:`measure_bias_and_variance` for every estimator, the Gumbel-softmax ones at every ``tau``.

    Introduced in 06_beyond_straight_through.ipynb. Every measurement uses the same noise
    (``seed``), so differences between temperatures are not sampling luck.

    Returns
    -------
    list of BiasVariance
    """
    if isinstance(taus, (str, numbers.Number)) or not hasattr(taus, "__len__") or len(taus) == 0:
        refuse("taus", taus, "a non-empty list of temperatures, e.g. taus=(0.25, 0.5, 1.0)", "measure_estimators")
    for tau in taus:  # all of them before the first measurement
        check_tau(tau, owner="measure_estimators")
    problem = make_problem() if problem is None else problem
    results = []
    for estimator in ESTIMATORS:
        for tau in taus if estimator.startswith("gumbel") else (1.0,):
            results.append(measure_bias_and_variance(estimator, problem, n_samples, tau, baseline_decay, seed))
    return results
