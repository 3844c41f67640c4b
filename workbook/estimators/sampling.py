"""Gradients through a random discrete choice: five estimators for Bernoulli and categorical latents.

Introduced in 06_beyond_straight_through.ipynb. A latent ``z`` is drawn from a
distribution whose parameters are ``logits``; the loss depends on ``z``. The
gradient of the *expected* loss with respect to the logits has no pathwise
form, since ``z`` is a step function of the noise. Each estimator below gives
one, with its own trade-off:

``straight_through``
    Forward the sample, backpropagate as if it were its mean (Bengio, Léonard
    and Courville 2013, arXiv:1308.3432): ``z = b + p - stop_gradient(p)``, so the
    gradient is multiplied by the sigmoid's (softmax's) derivative. The same paper
    also defines the plain copy, which backpropagates 1 through the threshold (the
    ``x + stop_gradient(f(x) - x)`` trick of notebook 01). Low variance, biased.
``gumbel_softmax``
    Forward a relaxed sample ``softmax((logits + g) / tau)``, ``g`` Gumbel noise
    (Jang, Gu and Poole 2017, arXiv:1611.01144; Maddison, Mnih and Teh 2017,
    "The Concrete distribution", arXiv:1611.00712). Not discrete; biased,
    less so as ``tau`` goes to 0, when its variance grows.
``gumbel_softmax_st``
    Forward the hard sample, backpropagate the relaxed one (Jang et al. 2017). As
    ``tau`` goes to 0 its bias does not vanish in general: for one bit it tends to
    ``p(1-p) (f'(0) + f'(1)) / 2``, a trapezoid rule for ``f(1) - f(0)``, exact only
    when ``f`` is quadratic in that bit.
``score_function``
    Forward the sample with no gradient at all, and return its log-probability:
    ``(loss - baseline) * log_prob`` has the unbiased REINFORCE gradient
    (Williams 1992, "Simple statistical gradient-following algorithms",
    Machine Learning 8:229-256). Unbiased, high variance; a baseline that does not
    depend on the sample keeps it unbiased and lowers the variance near its best value.
``score_function_loo``
    The score function with ``samples`` draws per example, each baselined by the
    mean loss of the others (:func:`leave_one_out_baseline`; Kool, van Hoof and
    Welling 2019, "Buy 4 REINFORCE samples, get a baseline for free!"). The
    baseline depends on the example, not on the draw it corrects: unbiased, and
    the per-example baseline removes the spread of the loss between examples.
``disarm``
    Bernoulli only. Two *antithetic* draws per example, ``b = 1[u > 1 - p]`` and
    ``b~ = 1[u < p]`` from the same uniform ``u``, and for bit i the estimate
    ``(f(b) - f(b~)) / 2 * (b_i - b~_i) * sigmoid(|logit_i|)`` (Dong, Mnih and Tucker 2020,
    "DisARM: an antithetic gradient estimator for binary latent variables", NeurIPS,
    arXiv:2006.10680). Unbiased, with 2 loss evaluations like leave-one-out over 2 draws, and
    usually less variance: the pair disagrees only on the bits the noise leaves uncertain.
    It is written as leave-one-out over the pair, whose ``log_prob`` has the value of the
    log-probability and the gradient ``(b - b~) * sigmoid(|logit|) / 2``.

Every function uses ``keras.ops`` and works eagerly, in ``tf.function`` and in a layer.
"""

import numbers

from workbook.core.arguments import check_count, check_seed, is_number, is_whole_number, refuse, shown

__all__ = [
    "ESTIMATORS",
    "LATENTS",
    "sample_latent",
    "latent_mode",
    "leave_one_out_baseline",
    "check_estimator",
    "check_tau",
    "check_taus",
    "check_samples",
    "check_annealing",
]

#: The estimator names :func:`sample_latent` understands.
ESTIMATORS = (
    "straight_through",
    "gumbel_softmax",
    "gumbel_softmax_st",
    "score_function",
    "score_function_loo",
    "disarm",
)

#: The estimators whose gradient comes from ``log_prob`` instead of through ``z``.
SCORE_FUNCTIONS = ("score_function", "score_function_loo", "disarm")

#: The estimators that baseline each draw by the example's other draws (the loss of each draw is needed).
LEAVE_ONE_OUT = ("score_function_loo", "disarm")

#: The estimators that exist for Bernoulli latents only.
BERNOULLI_ONLY = ("disarm",)

#: The kinds of latent: one bit per logit, or one of ``logits.shape[-1]`` classes.
LATENTS = ("bernoulli", "categorical")

#: The most training steps between two updates of an annealed temperature (a typo beyond it).
MAX_ANNEAL_EVERY = 1_000_000

#: The floor of an annealed temperature unless one is given, as in Jang, Gu and Poole (2017).
DEFAULT_TAU_MIN = 0.5

# Keeps log(u) and log(1 - u) finite for uniform noise u.
_EPSILON = 1e-7


def check_estimator(estimator, latent="bernoulli", owner="sample_latent", latent_name="latent"):
    """Raise a ValueError naming the argument unless both names are known.

    ``latent_name`` is where the latent was given (``problem.latent`` when it came with a problem).
    """
    if estimator not in ESTIMATORS:
        refuse("estimator", estimator, f"one of {', '.join(map(repr, ESTIMATORS))}", owner)
    if latent not in LATENTS:
        allowed = "'bernoulli' (one bit per logit) or 'categorical' (one class along the last axis)"
        refuse(latent_name, latent, allowed, owner)
    if estimator in BERNOULLI_ONLY and latent != "bernoulli":
        allowed = (
            f"'bernoulli' with estimator={estimator!r}: DisARM is for Bernoulli latents only; "
            "use latent='bernoulli', or estimator='score_function_loo' for a categorical latent"
        )
        refuse(latent_name, latent, allowed, owner)


def check_tau(tau, owner="sample_latent"):
    """``tau`` as a float, or a ValueError saying what is allowed."""
    if not is_number(tau, low=0, high=100, include_low=False):
        refuse("tau", tau, "a temperature in (0, 100], e.g. tau=1.0; small tau is closer to discrete", owner)
    return float(tau)


def check_taus(taus, example, owner):
    """``taus`` as a list of floats, each a temperature in (0, 100], or a ValueError naming ``taus``."""
    allowed = f"a non-empty list of temperatures in (0, 100], e.g. taus={example}"
    if isinstance(taus, (str, numbers.Number)) or not hasattr(taus, "__len__") or len(taus) == 0:
        refuse("taus", taus, allowed, owner)
    for index, tau in enumerate(taus):  # all of them before the first measurement
        if not is_number(tau, low=0, high=100, include_low=False):
            refuse("taus", taus, f"{allowed}; taus[{index}]={shown(tau)} is not", owner)
    return [float(tau) for tau in taus]


def check_annealing(estimator, tau, anneal_rate, anneal_every=None, tau_min=None, owner="DiscreteBottleneck"):
    """``(anneal_rate, anneal_every, tau_min)`` as numbers, all None for a fixed ``tau``, or a ValueError.

    Introduced in 06_beyond_straight_through.ipynb: the temperature is annealed as
    ``max(tau_min, tau * exp(-anneal_rate * t))``, ``t`` the training steps taken, updated
    every ``anneal_every`` steps (Jang, Gu and Poole 2017: ``tau = 1``, ``tau_min = 0.5``).
    """
    if anneal_rate is None:
        for argument, value in (("anneal_every", anneal_every), ("tau_min", tau_min)):
            if value is not None:
                refuse(argument, value, "None unless anneal_rate is given: tau is fixed without it", owner)
        return None, None, None
    if not estimator.startswith("gumbel_softmax"):
        allowed = f"None for estimator={estimator!r}: only the Gumbel-softmax estimators have a temperature"
        refuse("anneal_rate", anneal_rate, allowed, owner)
    if not is_number(anneal_rate, low=0, high=1, include_low=False):
        allowed = "None (a fixed tau) or a number in (0, 1], the fall of log(tau) per training step, e.g. 3e-3"
        refuse("anneal_rate", anneal_rate, allowed, owner)
    anneal_every = 1 if anneal_every is None else anneal_every
    check_count("anneal_every", anneal_every, low=1, high=MAX_ANNEAL_EVERY, owner=owner)
    tau_min = DEFAULT_TAU_MIN if tau_min is None else tau_min
    if not is_number(tau_min, low=0, high=tau, include_low=False):
        refuse("tau_min", tau_min, f"a temperature in (0, tau={tau:g}], the floor of the annealing, e.g. 0.5", owner)
    return float(anneal_rate), int(anneal_every), float(tau_min)


def check_samples(samples, estimator, owner="sample_latent"):
    """Draws per example as an int (None: 1, or 2 for ``"score_function_loo"`` and ``"disarm"``), or a ValueError."""
    least = 2 if estimator in LEAVE_ONE_OUT else 1
    if samples is None:
        return least
    if estimator == "disarm" and not (is_whole_number(samples) and samples == 2):
        allowed = "None (or 2): DisARM draws exactly one antithetic pair per example; leave samples=None"
        refuse("samples", samples, allowed, owner)
    if not is_whole_number(samples, low=least, high=1024):
        why = " (leave-one-out needs another draw to baseline each one), e.g. samples=2" if least == 2 else ""
        refuse("samples", samples, f"a whole number from {least} to 1024{why}", owner)
    return int(samples)


def check_logits(logits, latent, owner="sample_latent"):
    """``logits`` as a float tensor, with at least one class for a categorical latent, or a ValueError."""
    import keras
    from keras import ops

    try:
        tensor = ops.convert_to_tensor(logits)
        dtype = keras.backend.standardize_dtype(tensor.dtype)
    except (TypeError, ValueError):
        refuse("logits", logits, "a float array or tensor of log-odds (or of log-probabilities)", owner)
    if "float" not in dtype:
        refuse("logits", logits, "a float tensor, e.g. keras.ops.cast(logits, 'float32')", owner)
    if latent == "categorical" and (len(tensor.shape) == 0 or tensor.shape[-1] == 0):
        refuse("logits", logits, "shaped (..., classes) with at least one class along the last axis", owner)
    # Values are known only outside a traced function (in a layer they are symbolic).
    if hasattr(tensor, "numpy") and not bool(ops.all(ops.isfinite(tensor))):
        refuse("logits", logits, "finite: it holds NaN or infinity, which give no probability", owner)
    return tensor


def sample_latent(logits, latent="bernoulli", estimator="straight_through", tau=1.0, seed=None, samples=None):
    """Draw a discrete latent from ``logits``, with ``estimator``'s gradient.

    Introduced in 06_beyond_straight_through.ipynb.

    Parameters
    ----------
    logits : tensor
        Bernoulli: one log-odds per bit, any shape. Categorical: the last axis holds the
        classes' unnormalised log-probabilities.
    latent : {"bernoulli", "categorical"}
    estimator : one of :data:`ESTIMATORS`
    tau : float
        The Gumbel-softmax temperature (ignored by the other estimators).
    seed : int, keras.random.SeedGenerator or None
        Passed to ``keras.random.uniform``: a whole number from 0 to 2**32 - 1, a generator,
        or None for fresh noise.
    samples : int or None
        Independent draws from the same logits, along a new first axis. None: one draw
        and no new axis, except for ``"score_function_loo"``, which needs at least 2
        (default 2) to baseline each draw by the others.

    Returns
    -------
    (z, log_prob)
        ``z`` has the shape of ``logits`` (with ``samples`` in front when there are
        several): bits, or one-hot rows for categorical (relaxed values in [0, 1] for
        ``"gumbel_softmax"``). ``log_prob`` is the log-probability of the hard sample, per
        bit (Bernoulli) or per row (categorical), differentiable with respect to
        ``logits``. Only the score functions need it; their ``z`` carries no gradient.
        For ``"disarm"`` the two draws are an antithetic pair, and ``log_prob``'s gradient
        is DisARM's, not the score's: weighted by the leave-one-out advantages
        (:func:`leave_one_out_baseline`) and averaged over the pair, it gives DisARM's estimate.
    """
    import keras
    from keras import ops

    check_estimator(estimator, latent)
    tau = check_tau(tau)
    draws = check_samples(samples, estimator)
    if not isinstance(seed, keras.random.SeedGenerator):
        seed = check_seed(seed, owner="sample_latent", allow_none=True)  # np.int64(3) draws as 3 does
    logits = check_logits(logits, latent)
    if samples is not None or draws > 1:
        logits = ops.broadcast_to(logits[None], (draws, *ops.shape(logits)))
    return draw_latent(logits, latent, estimator, tau, seed)


def draw_latent(logits, latent, estimator, tau, seed):
    """:func:`sample_latent` without its checks; ``tau`` may be a tensor (an annealed temperature).

    Introduced in 06_beyond_straight_through.ipynb. ``logits`` already carry the draws along
    their first axis when there are several.
    """
    import keras
    from keras import ops

    if estimator == "disarm":  # one uniform per example, and its antithetic partner 1 - u
        u = keras.random.uniform(
            ops.shape(logits)[1:], minval=_EPSILON, maxval=1.0 - _EPSILON, dtype=logits.dtype, seed=seed
        )
        u = ops.stack([u, 1.0 - u])
    else:
        u = keras.random.uniform(
            ops.shape(logits), minval=_EPSILON, maxval=1.0 - _EPSILON, dtype=logits.dtype, seed=seed
        )
    if latent == "bernoulli":
        noise = ops.log(u) - ops.log(1.0 - u)  # logistic: P(logits + noise > 0) = sigmoid(logits)
        perturbed = logits + noise
        hard = ops.cast(perturbed > 0, logits.dtype)
        mean = ops.sigmoid(logits)
        relaxed = ops.sigmoid(perturbed / tau)
        log_prob = hard * ops.log_sigmoid(logits) + (1.0 - hard) * ops.log_sigmoid(-logits)
    else:
        perturbed = logits - ops.log(-ops.log(u))  # Gumbel-max: argmax is a sample
        classes = ops.shape(logits)[-1]
        hard = ops.one_hot(ops.argmax(perturbed, axis=-1), classes, dtype=logits.dtype)
        mean = ops.softmax(logits, axis=-1)
        relaxed = ops.softmax(perturbed / tau, axis=-1)
        log_prob = ops.sum(hard * ops.log_softmax(logits, axis=-1), axis=-1)
    # hard + (y - stop_gradient(y)): the bracket is exactly 0 forward, so z is exactly the bit
    # (hard + y - stop_gradient(y) rounds: 1 + y - y can be 0.99999994 in float32).
    if estimator == "straight_through":
        z = hard + (mean - ops.stop_gradient(mean))
    elif estimator == "gumbel_softmax":
        z = relaxed
    elif estimator == "gumbel_softmax_st":
        z = hard + (relaxed - ops.stop_gradient(relaxed))
    else:
        z = ops.stop_gradient(hard)
    if estimator == "disarm":
        log_prob = disarm_log_prob(logits, hard, log_prob)
    return z, log_prob


def disarm_log_prob(logits, hard, log_prob):
    """``log_prob``'s value with DisARM's gradient, ``(b - b~) * sigmoid(|logits|) / 2`` (Dong et al. 2020).

    Introduced in 06_beyond_straight_through.ipynb. ``hard`` holds the antithetic pair
    ``(b, b~)`` along the first axis. With leave-one-out advantages ``f(b) - f(b~)`` and
    ``f(b~) - f(b)``, the mean over the pair of advantage times this gradient is DisARM's
    ``(f(b) - f(b~)) / 2 * (b - b~) * sigmoid(|logits|)``.
    """
    from keras import ops

    other = ops.flip(hard, axis=0)
    slope = ops.stop_gradient((hard - other) * ops.sigmoid(ops.abs(logits)) / 2.0)
    return ops.stop_gradient(log_prob) + (logits * slope - ops.stop_gradient(logits * slope))


def leave_one_out_baseline(losses):
    """For each draw, the mean loss of the other draws of the same example (first axis: the draws).

    Introduced in 06_beyond_straight_through.ipynb. ``losses`` is shaped (samples, ...)
    with ``samples >= 2``; no draw's baseline depends on that draw, so
    ``(loss - baseline) * grad log p`` stays unbiased (Kool, van Hoof and Welling 2019).
    A mean that included the draw itself would shrink the gradient by ``1 - 1/samples``.
    """
    from keras import ops

    losses = ops.convert_to_tensor(losses)
    samples = ops.shape(losses)[0]
    return (ops.sum(losses, axis=0, keepdims=True) - losses) / ops.cast(samples - 1, losses.dtype)


def latent_mode(logits, latent="bernoulli"):
    """The most likely latent for ``logits`` (no noise): what a trained model uses at test time.

    Introduced in 06_beyond_straight_through.ipynb.
    """
    from keras import ops

    check_estimator("straight_through", latent, owner="latent_mode")
    logits = ops.convert_to_tensor(logits)
    if latent == "bernoulli":
        return ops.cast(logits > 0, logits.dtype)
    return ops.one_hot(ops.argmax(logits, axis=-1), ops.shape(logits)[-1], dtype=logits.dtype)
