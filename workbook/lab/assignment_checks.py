"""Self-checks for the graded assignment: a verdict with the failing input, never a traceback.

Introduced in 05_assignment_quantized_autoencoder.ipynb. Every check prints one line per
requirement (✓, or ✗ with the input that failed and what to try) and returns True or
False, so that a graded cell reads ``assert check_...(...)`` and a student can run the
same line before submitting.
"""

import numpy as np

from workbook.core.arguments import (
    check_callable,
    check_count,
    check_flag,
    check_images,
    check_seed,
    is_number,
    refuse,
)
from workbook.core.gradients import value_and_gradient
from workbook.lab import assignment_spec as spec
from workbook.surrogates.checks import MAX_POINTS, check_test_range, report_mismatch, sample_points

__all__ = ["check_quantizer", "check_gradient_fix", "check_reconstruction", "LEVELS"]

#: The most test images check_reconstruction looks at the code of (a typo beyond it).
MAX_PROBE = 10_000

#: The four values of a 2-bit code in [0, 1].
LEVELS = (0.0, 1 / 3, 2 / 3, 1.0)

# Inputs closer than TIE_MARGIN to a jump of the quantizer (3x = k + 1/2) or to the ends of the
# clip are left out: there the forward or the derivative legitimately depends on the tie rule.
_TIE_MARGIN, _TIES = spec.TIE_MARGIN, spec.TIES


def check_quantizer(fn, gradient=True, x_range=(-1.0, 2.0), n_points=601, seed=0):
    """Check a 2-bit quantizer: forward ``round(3 clip(x, 0, 1)) / 3``, backward ``[0 <= x <= 1]``.

    Introduced in 05_assignment_quantized_autoencoder.ipynb (part a). The forward takes
    the four values 0, 1/3, 2/3 and 1; the derivative backprop uses is 1 where the clip
    lets ``x`` through and 0 outside (the clipped straight-through estimator).

    Parameters
    ----------
    fn : callable
        Your quantizer, a function of one float tensor.
    gradient : bool
        Also check the derivative backprop uses (False: the forward only).
    x_range : (float, float)
        Where to test.
    n_points : int
        Grid points in ``x_range`` (as many random points are added).
    seed : int
        For the random points.

    Returns
    -------
    bool
    """
    import tensorflow as tf

    check_callable("fn", fn, "your quantizer, a function of one float tensor", owner="check_quantizer")
    check_flag("gradient", gradient, owner="check_quantizer")
    check_test_range(x_range, "float32", owner="check_quantizer")
    check_count("n_points", n_points, low=2, high=MAX_POINTS, owner="check_quantizer")
    check_seed(seed, owner="check_quantizer")
    x = _away_from(sample_points(x_range, n_points, n_points, seed, off_grid=False), _TIES)
    if len(x) == 0:
        refuse("x_range", x_range, "wider: every input in it is next to a jump of the quantizer", "check_quantizer")
    name = _name(fn, "your quantizer")
    xt = tf.constant(x, dtype="float32")
    try:
        y, grad = value_and_gradient(fn, xt) if gradient else (fn(xt), None)
        got = _as_array(y, x.shape, f"{name}(x)")
    except Exception as error:  # a student's function: any failure becomes a verdict
        print(f"✗ {name} raised {_describe(error)} on {len(x):,} inputs in {list(x_range)}.")
        return False

    expected = np.round(3 * np.clip(x, 0, 1)) / 3
    if not report_mismatch(f"{name}(x)", "round(3 clip(x, 0, 1)) / 3", x, expected, got):
        off = np.abs(got[:, None] - np.array(LEVELS)[None, :]).min(axis=1) > 1e-6
        if off.any():
            i = int(np.argmax(off))
            print(f"  It is not on the four levels 0, 1/3, 2/3, 1: at x = {x[i]:.4g} it returns {got[i]:.4g}.")
        return False
    print(f"✓ {name}(x) is round(3 clip(x, 0, 1)) / 3 at {len(x):,} inputs in {list(x_range)}.")
    if not gradient:
        return True

    return _check_quantizer_gradient(name, x, grad)


def _check_quantizer_gradient(name, x, grad):
    """check_quantizer's second half: backprop uses 1 inside [0, 1] and 0 outside. Prints the verdict."""
    if grad is None:
        print(
            f"✗ {name}(x) has no gradient at all (TensorFlow gives None): backprop stops inside it. "
            f"Replace its gradient, e.g. with workbook.surrogate(forward, derivative)."
        )
        return False
    got_derivative = _as_array(grad, x.shape, f"the gradient of {name}")
    inside = ((x >= 0) & (x <= 1)).astype(float)
    if not report_mismatch(f"the gradient of {name}", "1 for 0 <= x <= 1, else 0", x, inside, got_derivative):
        if np.allclose(got_derivative, 0):
            print("  It is 0 everywhere: backprop used round's own derivative, not a surrogate.")
        elif np.allclose(got_derivative, 1):
            print("  It is 1 everywhere: outside [0, 1] the clip holds the output still, so it should be 0 there.")
        return False
    print(f"✓ backprop through {name} uses 1 for 0 <= x <= 1 and 0 outside.")
    return True


def check_gradient_fix(fixed, original, derivative=None, example=None, seed=0):
    """Check that ``fixed`` forwards what ``original`` does and lets the gradient through.

    Introduced in 03_finding_gradient_killers.ipynb (the exercise) and used in
    05_assignment_quantized_autoencoder.ipynb (part b). When the gradient is missing,
    :func:`workbook.find_gradient_breaks` names the op and the line that still cut it.

    Parameters
    ----------
    fixed, original : callable
        Your repaired function and the one with the gradient killer.
    derivative : callable, optional
        The elementwise derivative backprop should use, a function of ``x``. Without it,
        the check asks only that a gradient reaches the input everywhere the graph goes
        (no op cuts it).
    example : array, optional
        Inputs to test on (default: 3,920 values in [-0.5, 1.5], two codes shaped like
        the autoencoder's bottleneck, kept away from the quantizer's jumps).
    seed : int
        For the default example.

    Returns
    -------
    bool
    """
    import tensorflow as tf

    x = _fix_example(fixed, original, derivative, example, seed)
    name = _name(fixed, "your function")
    xt = tf.constant(x)
    try:
        expected = _as_array(original(xt), None, _name(original, "the original"))
        expected_derivative = None if derivative is None else _as_array(derivative(xt), x.shape, "derivative(x)")
    except Exception as error:
        print(f"✗ Could not evaluate the original or the derivative: {_describe(error)}.")
        return False
    try:
        y, grad = value_and_gradient(fixed, xt)
        got = _as_array(y, expected.shape, f"{name}(x)")
    except Exception as error:
        print(f"✗ {name} raised {_describe(error)} on an input of shape {x.shape}.")
        return False

    flat = x.reshape(-1) if expected.shape == x.shape else np.arange(expected.size, dtype="float32")
    if not report_mismatch(
        f"{name}(x)", f"{_name(original, 'the original')}(x)", flat, expected.reshape(-1), got.reshape(-1)
    ):
        print("  A fix changes the backward pass only: the values going forward must stay the same.")
        return False
    print(f"✓ {name}(x) returns the same values as {_name(original, 'the original')}(x) on {x.size:,} inputs.")
    if grad is None:
        print(f"✗ {name}(x) has no gradient at all (TensorFlow gives None).")
        _explain_break(fixed, xt)
        return False
    if derivative is None:
        return _no_break_left(fixed, xt, name)
    flat = x.reshape(-1)
    got_derivative = _as_array(grad, x.shape, f"the gradient of {name}").reshape(-1)
    if not report_mismatch(
        f"the gradient of {name}", "derivative(x)", flat, expected_derivative.reshape(-1), got_derivative
    ):
        if np.allclose(got_derivative, 0):
            _explain_break(fixed, xt)
        return False
    print(f"✓ backprop through {name} uses derivative(x): the gradient gets through.")
    return True


def check_reconstruction(model, x_test, target_mse, seconds, time_budget_seconds, n_probe=8):
    """Check the trained 2-bit autoencoder: its code, its gradient, its test MSE, its training time.

    Introduced in 05_assignment_quantized_autoencoder.ipynb (part c).

    Parameters
    ----------
    model : keras.Model
        The trained autoencoder, with a layer named ``bottleneck`` (as
        :func:`workbook.autoencoder` builds it).
    x_test : array
        Test images, (n, 28, 28, 1) in [0, 1]; never used for training.
    target_mse : float
        The largest test reconstruction MSE that passes (above 0).
    seconds : float
        How long training took.
    time_budget_seconds : float
        The most it may take (above 0).
    n_probe : int
        Test images used to look at the code and to trace the gradient (1 to 10,000; at most
        ``len(x_test)`` are used).

    Returns
    -------
    bool
        True if the code takes only the four levels, the encoder receives a gradient,
        the test MSE is at most ``target_mse`` and ``seconds <= time_budget_seconds``.
    """
    import keras

    owner = "check_reconstruction"
    # A target or a budget of 0 cannot be met: it is a typo, not a verdict to print.
    for argument, value in (("target_mse", target_mse), ("time_budget_seconds", time_budget_seconds)):
        if not is_number(value, low=0, include_low=False):
            refuse(argument, value, "a finite number above 0", owner)
    if not is_number(seconds, low=0):
        refuse("seconds", seconds, "a finite number of at least 0 (how long training took)", owner)
    x_test = check_images("x_test", x_test, owner=owner)
    check_count("n_probe", n_probe, low=1, high=MAX_PROBE, owner=owner)
    if not isinstance(model, keras.Model):
        refuse("model", model, "your trained Keras model (a keras.Model), e.g. one workbook.autoencoder built", owner)
    probe = x_test[:n_probe]
    results = [_check_code(model, probe), _check_encoder_learns(model, probe)]

    try:
        reconstructions = np.asarray(model.predict(x_test, batch_size=256, verbose=0), dtype="float64")
        mse = float(np.mean((reconstructions.reshape(x_test.shape) - x_test) ** 2))
    except Exception as error:
        print(f"✗ model could not reconstruct x_test: {type(error).__name__}: {error}")
        return False
    if mse <= target_mse:
        print(f"✓ test reconstruction MSE {mse:.5f} <= target {target_mse:g} ({len(x_test):,} test images).")
    else:
        worst = int(np.argmax(np.mean((reconstructions.reshape(x_test.shape) - x_test) ** 2, axis=(1, 2, 3))))
        print(
            f"✗ test reconstruction MSE {mse:.5f} is above the target {target_mse:g} "
            f"({len(x_test):,} test images; the worst is x_test[{worst}]). Train longer, or try "
            f"another learning rate, within the time budget."
        )
    results.append(mse <= target_mse)

    if seconds <= time_budget_seconds:
        print(f"✓ training took {seconds:.0f} s, within the budget of {time_budget_seconds:g} s.")
    else:
        print(
            f"✗ training took {seconds:.0f} s, over the budget of {time_budget_seconds:g} s. If you "
            f"paused between cells, run the clock cell, your training cell and this check again."
        )
    results.append(seconds <= time_budget_seconds)
    return all(results)


# --- the pieces of check_reconstruction ------------------------------------------------


def _weightless_bottleneck(model):
    """The model's layer named ``bottleneck``, or None (and why, printed) if it is missing or has weights."""
    try:
        layer = model.get_layer("bottleneck")
    except ValueError:
        names = ", ".join(layer.name for layer in model.layers)
        print(
            f"✗ model has no layer named 'bottleneck' (its layers: {names}). "
            f"Build it with workbook.autoencoder(bottleneck=...)."
        )
        return None
    if layer.weights:
        print(
            f"✗ the bottleneck has weights ({', '.join(w.name for w in layer.weights)}); part (c) is graded "
            f"with a quantizer that has none. Use your quantizer as the bottleneck."
        )
        return None
    return layer


def _check_code(model, probe):
    """✓ if the layer named ``bottleneck`` is quantize_2bit's forward on ``probe``: the four levels."""
    import keras

    layer = _weightless_bottleneck(model)
    if layer is None:
        return False
    try:
        inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
        before, code = keras.Model(inputs, [layer.input, layer.output])(probe, training=False)
        before, code = np.asarray(before, dtype="float64"), np.asarray(code, dtype="float64")
    except Exception as error:
        print(f"✗ Could not compute the bottleneck's output: {type(error).__name__}: {error}")
        return False
    distance = np.abs(code.reshape(-1, 1) - np.array(LEVELS)).min(axis=1)
    if distance.max() > 1e-5:
        value = code.reshape(-1)[int(np.argmax(distance))]
        image = int(np.argmax(distance)) // (code.size // len(probe))
        print(
            f"✗ the bottleneck outputs {value:.4g} for x_test[{image}]; a 2-bit code takes only "
            f"the values 0, 1/3, 2/3 and 1. Use your quantizer as the bottleneck."
        )
        return False
    # The grader measures part (c) again with round(3 clip(x, 0, 1)) / 3 as the bottleneck.
    near_tie = np.zeros(before.shape, dtype=bool)
    for tie in _TIES:
        near_tie |= np.abs(before - tie) <= _TIE_MARGIN
    wrong = (np.abs(code - np.round(3 * np.clip(before, 0, 1)) / 3) > 1e-5) & ~near_tie
    if wrong.any():
        i = int(np.argmax(wrong.reshape(-1)))
        print(
            f"✗ the bottleneck maps {before.reshape(-1)[i]:.4g} to {code.reshape(-1)[i]:.4g}, not to "
            f"round(3 clip(x, 0, 1)) / 3; part (c) is graded with that quantizer (quantize_2bit's forward)."
        )
        return False
    used = np.unique(np.round(code * 3).astype(int))
    names = ", ".join(("0", "1/3", "2/3", "1")[level] for level in used)
    print(f"✓ the bottleneck outputs a 2-bit code (levels used on {len(probe)} test images: {names}).")
    return True


def _check_encoder_learns(model, probe):
    """✓ if every layer's variables receive a gradient (traced with find_gradient_breaks)."""
    from workbook.finder.diagnosis import find_gradient_breaks

    try:
        report = find_gradient_breaks(model, (probe, probe) if model.compiled else probe)
    except Exception as error:
        print(f"✗ Could not trace the gradient through model: {type(error).__name__}: {error}")
        return False
    if report.layers_without_gradient or not report.ok:
        dead = ", ".join(report.layers_without_gradient) or "some inputs"
        where = ""
        if report.culprit is not None:
            where = f" The gradient is cut by {report.culprit.op_type} at {report.culprit.where}: {report.culprit.code}"
        print(f"✗ no gradient reaches {dead}: that part of the model never learned.{where}")
        return False
    print("✓ the gradient reaches every layer, the encoder included.")
    return True


def _explain_break(fn, xt):
    """Print the op and line that cut the gradient of ``fn``, as find_gradient_breaks finds them."""
    from workbook.finder.diagnosis import find_gradient_breaks

    try:
        report = find_gradient_breaks(fn, xt)
    except Exception:
        return  # the verdict already printed is enough
    if report.culprit is not None:
        culprit = report.culprit
        print(f"  find_gradient_breaks: {culprit.op_type} at {culprit.where} cuts it: {culprit.code}")


def _no_break_left(fn, xt, name):
    """True when find_gradient_breaks finds nothing left that cuts the gradient of ``fn``."""
    from workbook.finder.diagnosis import find_gradient_breaks

    report = find_gradient_breaks(fn, xt)
    if report.ok:
        print(f"✓ find_gradient_breaks finds nothing left that cuts the gradient of {name}.")
        return True
    print(f"✗ {len(report.findings)} op(s) still cut the gradient of {name}:")
    print(report)
    return False


# --- small pieces ----------------------------------------------------------------------


def _name(fn, default):
    name = getattr(fn, "name", None) or getattr(fn, "__name__", None)
    return name if isinstance(name, str) and name != "<lambda>" else default


def _describe(error):
    if isinstance(error, NotImplementedError) and not str(error):
        return "NotImplementedError: it is not written yet (replace `raise NotImplementedError()` with your code)"
    return f"{type(error).__name__}: {error}"


def _fix_example(fixed, original, derivative, example, seed):
    """The inputs :func:`check_gradient_fix` tests on, once its arguments are checked."""
    owner = "check_gradient_fix"
    check_callable("fixed", fixed, "your repaired function of one tensor", owner)
    check_callable("original", original, "the function with the gradient killer", owner)
    if derivative is not None:
        check_callable("derivative", derivative, "None or a function of x (the elementwise derivative)", owner)
    check_seed(seed, owner=owner)
    if example is not None:
        return _example_array(example, owner)
    rng = np.random.default_rng(seed)
    values = _away_from(rng.uniform(-0.5, 1.5, 4 * 14 * 14 * 10), _TIES)
    return values[: 2 * 14 * 14 * 10].reshape(2, 14, 14, 10).astype("float32")


def _example_array(example, owner):
    """``example`` as a non-empty, finite float32 array, or a ValueError naming it."""
    try:
        x = np.asarray(example, dtype="float32")
        is_bool = np.asarray(example).dtype == bool
    except (TypeError, ValueError):
        refuse("example", example, "an array of numbers (inputs to test on), or None for the default", owner)
    if is_bool:  # True is not the number 1 here, as nowhere in the workbook
        refuse("example", example, "an array of numbers, not of True/False", owner)
    if x.size == 0:
        refuse("example", example, "a non-empty array: a check on 0 inputs would pass whatever the function", owner)
    if not np.isfinite(x).all():
        refuse("example", example, "finite: it holds NaN or infinity, where no two values can be compared", owner)
    return x


def _away_from(x, points):
    keep = np.ones(len(x), dtype=bool)
    for point in points:
        keep &= np.abs(x - point) > _TIE_MARGIN
    return x[keep]


def _as_array(value, shape, what):
    """``value`` as a float64 array, which must have ``shape`` (None: any shape)."""
    array = np.asarray(value, dtype="float64")
    if shape is not None and array.shape != shape:
        raise ValueError(f"{what} has shape {array.shape}; it must have the input's shape {shape}.")
    return array
