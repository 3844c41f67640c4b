"""Self-check for notebook 07's exercise: an unsigned k-bit activation quantiser with a learned step.

Introduced in 07_quantisation_aware_training.ipynb.
"""

import numpy as np

from workbook.core.arguments import check_callable, check_seed, refuse

__all__ = ["check_learned_step"]


def expected_learned_step(v, step, bits, scale, upstream):
    """The forward and both gradients of LSQ for unsigned activations, written out (Esser et al. 2020, eq. 3)."""
    q_positive = 2**bits - 1
    ratio = v / step
    inside = (ratio >= 0) & (ratio <= q_positive)
    forward = np.round(np.clip(ratio, 0, q_positive)) * step
    d_step = np.where(inside, np.round(ratio) - ratio, np.where(ratio > q_positive, q_positive, 0.0))
    return forward, upstream * inside, scale * np.sum(upstream * d_step)


def check_learned_step(fn, bits=(2,), seed=0, atol=1e-4):
    """Check ``fn(v, step, bits, scale)``: LSQ for unsigned activations, with the step's gradient scaled.

    Introduced in 07_quantisation_aware_training.ipynb. On random activations ``v`` (some below 0,
    some beyond the top level) and a random projection of the output, three things are compared with
    the formulas written out: the forward ``round(clip(v / s, 0, Q_P)) * s``; the gradient for ``v``,
    1 inside the range and 0 outside; and the gradient for the step, ``scale`` times the sum of
    ``round(v/s) - v/s`` inside and ``Q_P`` above. Prints ✓ or what to fix; returns True or False.
    """
    import tensorflow as tf

    check_callable("fn", fn, "your function fn(v, step, bits, scale)", "check_learned_step")
    if not bits or not all(isinstance(b, int) and 1 <= b <= 8 for b in bits):
        refuse("bits", bits, "a tuple of whole numbers from 1 to 8, e.g. (2,)", "check_learned_step")
    check_seed(seed, "check_learned_step")
    rng = np.random.default_rng(seed)
    name = getattr(fn, "__name__", "fn")
    for b in bits:
        step_value = rng.uniform(0.2, 0.4)
        v = rng.uniform(-0.5, (2**b - 1) * step_value * 1.3, (16, 12))
        v = np.where(np.abs(v / step_value - np.round(v / step_value)) > 0.49, v + 0.05 * step_value, v)  # no ties
        upstream = rng.normal(0, 1, v.shape)
        scale = 1 / np.sqrt(v.shape[1] * (2**b - 1))
        v_t, step = tf.constant(v), tf.Variable(step_value, dtype=tf.float64)
        try:
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(v_t)
                out = fn(v_t, step, b, scale)
                projected = tf.reduce_sum(tf.cast(out, tf.float64) * upstream)
            d_v, d_step = tape.gradient(projected, v_t), tape.gradient(projected, step)
        except NotImplementedError:
            print(f"✗ {name} is not written yet: replace `raise NotImplementedError()` with your answer.")
            return False
        except Exception as error:
            print(f"✗ {name}(v, step, bits={b}, scale) raised {type(error).__name__}: {error}")
            return False
        forward, expected_v, expected_step = expected_learned_step(v, step_value, b, scale, upstream)
        problem = _first_problem(np.asarray(out), forward, d_v, expected_v, d_step, expected_step, scale, atol)
        if problem:
            print(f"✗ {name} with bits={b}: {problem}")
            return False
    print(f"✓ {name}: forward, the gradient for v and the scaled gradient for the step match LSQ's formulas.")
    return True


def _first_problem(out, forward, d_v, expected_v, d_step, expected_step, scale, atol):
    if out.shape != forward.shape or not np.allclose(out, forward, atol=atol):
        return "the forward is not round(clip(v / step, 0, Q_P)) * step (Q_P = 2**bits - 1)."
    if d_v is None or not np.allclose(np.asarray(d_v), expected_v, atol=atol):
        return "the gradient for v should be 1 where 0 <= v/step <= Q_P and 0 elsewhere: round with a straight-through."
    if d_step is None:
        return "no gradient reaches the step: it must be used in the forward, not only under stop_gradient."
    got = float(d_step)
    if np.isclose(got, expected_step, atol=atol):
        return None
    if np.isclose(got, expected_step / scale, atol=atol):
        return (
            f"the step's gradient is {got:.5f}, LSQ's unscaled one: multiply it by scale "
            f"(use step * scale + stop_gradient(step - step * scale) in place of step)."
        )
    return (
        f"the step's gradient is {got:.5f}, LSQ's is {expected_step:.5f}: scale times the sum of round(v/s) - v/s "
        f"inside the range and Q_P above it."
    )
