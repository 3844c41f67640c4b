"""Self-check for notebook 06's exercise: a straight-through Gumbel-softmax of your own.

Introduced in 06_beyond_straight_through.ipynb.
"""

import numpy as np

from workbook.core.arguments import check_callable, check_count, check_seed, check_tolerance
from workbook.estimators.sampling import check_taus

__all__ = ["check_gumbel_softmax_st"]


def gumbel_noise(shape, rng):
    """Standard Gumbel noise, ``-log(-log(u))``, as float64."""
    return -np.log(-np.log(rng.uniform(1e-7, 1 - 1e-7, shape)))


def _softmax(x):
    shifted = np.exp(x - x.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def check_gumbel_softmax_st(fn, taus=(0.3, 1.0, 3.0), n_samples=2000, seed=0, atol=1e-4):
    """Check ``fn(logits, noise, tau)``: forward the one-hot Gumbel-max sample, backpropagate the relaxed one.

    Introduced in 06_beyond_straight_through.ipynb. Three checks, each against an
    independent answer: the forward values against ``one_hot(argmax(logits + noise))``;
    the gradient against the Jacobian of ``softmax((logits + noise) / tau)`` written out,
    ``(diag(y) - y y^T) / tau``; and, on a problem whose exact gradient is known by listing
    every outcome, the mean of ``n_samples`` estimates against the exact gradient (a
    straight-through Gumbel-softmax is biased, so this is reported with its noise floor, and it
    must match the bias of the workbook's own ``sample_latent(..., "gumbel_softmax_st")`` on the
    same noise).
    Prints ✓ or what failed, and returns True or False.

    Parameters
    ----------
    fn : callable
        ``fn(logits, noise, tau)`` on float64 tensors shaped (..., classes).
    taus : sequence of float
        At least one temperature, each in (0, 100].
    n_samples : int
        From 1 to 100,000.
    seed : int
    atol : float
    """
    import tensorflow as tf

    taus = _checked_arguments(fn, taus, n_samples, seed, atol)

    from workbook.estimators.bias_variance import make_problem

    rng = np.random.default_rng(seed)
    name = getattr(fn, "__name__", "fn")
    for tau in taus:
        logits = rng.normal(0, 1.5, (64, 5))
        noise = gumbel_noise(logits.shape, rng)
        weights = rng.normal(0, 1, logits.shape)
        logits_t = tf.constant(logits)
        try:
            with tf.GradientTape() as tape:
                tape.watch(logits_t)
                z = fn(logits_t, tf.constant(noise), tau)
                projected = tf.reduce_sum(tf.cast(z, tf.float64) * weights)
            gradient = tape.gradient(projected, logits_t)
        except NotImplementedError:
            print(f"✗ {name} is not written yet: replace `raise NotImplementedError()` with your answer.")
            return False
        except Exception as error:
            print(f"✗ {name}(logits, noise, tau={tau}) raised {type(error).__name__}: {error}")
            return False
        if not _forward_is_the_sample(np.asarray(z), logits, noise, tau, atol):
            return False
        y = _softmax((logits + noise) / tau)
        expected_gradient = y * (weights - np.sum(weights * y, axis=-1, keepdims=True)) / tau
        if gradient is None:
            print(
                f"✗ Backward at tau={tau}: no gradient reaches the logits (None). Add the relaxed sample "
                f"back in: hard + y - stop_gradient(y)."
            )
            return False
        gradient = gradient.numpy()
        if not np.allclose(gradient, expected_gradient, atol=atol, rtol=1e-4):
            row = int(np.argmax(np.abs(gradient - expected_gradient).max(axis=-1)))
            print(
                f"✗ Backward at tau={tau}: the gradient should be that of softmax((logits + noise) / tau); "
                f"for logits {np.round(logits[row], 3)} expected {np.round(expected_gradient[row], 4)}, "
                f"got {np.round(gradient[row], 4)}."
            )
            return False
    problem = make_problem("categorical", n_latents=4, n_classes=3, seed=seed)
    tau = 0.5
    logits = tf.constant(np.broadcast_to(problem.logits, (n_samples,) + problem.logits.shape))
    noise = gumbel_noise(logits.shape, rng)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        yours = tf.reduce_sum(problem.loss(tf.cast(fn(logits, tf.constant(noise), tau), tf.float64)))
        soft = tf.nn.softmax((logits + noise) / tau)
        hard = tf.one_hot(tf.argmax(logits + noise, axis=-1), 3, dtype=tf.float64)
        reference = tf.reduce_sum(problem.loss(hard + (soft - tf.stop_gradient(soft))))
    estimates = tape.gradient(yours, logits).numpy()
    mean_yours = estimates.mean(axis=0)
    # what an unbiased estimator's measured bias would still be, from these samples' own spread
    noise_floor = np.sqrt(np.sum(estimates.var(axis=0, ddof=1)) / n_samples) if n_samples > 1 else np.inf
    mean_reference = tape.gradient(reference, logits).numpy().mean(axis=0)
    exact = problem.exact_gradient()
    bias = np.linalg.norm(mean_yours - exact)
    if not np.allclose(mean_yours, mean_reference, atol=atol):
        print(
            f"✗ On 4 categorical latents your mean estimate is {np.round(mean_yours.ravel(), 3)}; on the same "
            f"noise the reference straight-through Gumbel-softmax gives {np.round(mean_reference.ravel(), 3)}."
        )
        return False
    print(
        f"✓ {name} forwards one-hot samples and backpropagates softmax((logits + noise) / tau) at "
        f"tau = {', '.join(f'{t:g}' for t in taus)}. Against the exact gradient on 4 categorical latents "
        f"(tau={tau}, {n_samples} samples): bias {bias:.3f}, relative {bias / np.linalg.norm(exact):.0%}, "
        f"noise floor {noise_floor:.3f} (a bias within about twice it is not resolved)."
    )
    return True


def _checked_arguments(fn, taus, n_samples, seed, atol):
    """Refuse check_gumbel_softmax_st's bad arguments by name; return the temperatures as floats."""
    owner = "check_gumbel_softmax_st"
    check_callable("fn", fn, "your function fn(logits, noise, tau)", owner)
    taus = check_taus(taus, "(0.3, 1.0, 3.0)", owner)
    check_count("n_samples", n_samples, low=1, high=100_000, owner=owner)
    check_seed(seed, owner=owner)
    check_tolerance("atol", atol, owner)
    return taus


def _forward_is_the_sample(z, logits, noise, tau, atol):
    """True if ``z`` is one_hot(argmax(logits + noise)); else prints the first row that differs."""
    expected = np.eye(5)[np.argmax(logits + noise, axis=-1)]
    if z.shape == expected.shape and np.allclose(z, expected, atol=atol):
        return True
    same_shape = z.shape == expected.shape
    row = int(np.argmax(np.abs(np.reshape(z, expected.shape) - expected).max(axis=-1))) if same_shape else 0
    print(
        f"✗ Forward at tau={tau}: expected the one-hot sample one_hot(argmax(logits + noise)); "
        f"for logits {np.round(logits[row], 3)} and noise {np.round(noise[row], 3)} the answer is "
        f"{expected[row]}, got {np.round(np.reshape(z, (-1, 5))[row] if z.size == expected.size else z, 3)}."
    )
    return False
