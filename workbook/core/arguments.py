"""Argument checks shared by every public function, so a bad value is refused the same way.

Each public function names its own argument and says what is allowed (see the "Errors
speak to a student" notes in each notebook); the predicates here decide what counts as a
whole number or a number in a range, so that ``True`` is never taken for 1, ``nan`` never
passes a bound, and NumPy scalars count like Python ones. The ``check_*`` functions hold
the rules every function shares (one range for every seed, an upper bound on every
count, finite tolerances, MNIST images) and refuse through :func:`refuse`, as
``[function: ]argument=value must be what is allowed.``
"""

import math
import numbers

import numpy as np

__all__ = [
    "MAX_SEED",
    "check_count",
    "check_callable",
    "check_flag",
    "check_float_dtype",
    "check_images",
    "check_range",
    "check_seed",
    "check_tolerance",
    "is_number",
    "is_whole_number",
    "refuse",
    "shown",
]

#: The largest seed any seeded function takes: NumPy, Python and TensorFlow all accept 0 to 2**32 - 1.
MAX_SEED = 2**32 - 1


def is_whole_number(value, low=None, high=None):
    """True if ``value`` is an int (not a bool) with ``low <= value <= high`` (None: no bound)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return False
    return bool((low is None or value >= low) and (high is None or value <= high))


def is_number(value, low=None, high=None, include_low=True, include_high=True, finite=True):
    """True if ``value`` is a real number (not a bool, not NaN) between ``low`` and ``high``.

    ``include_low``/``include_high`` say whether the bounds themselves are allowed;
    ``finite=False`` also allows infinity where it means something ("never").
    """
    if not _is_real(value, finite):
        return False
    above = low is None or (value >= low if include_low else value > low)
    below = high is None or (value <= high if include_high else value < high)
    return bool(above and below)


def _is_real(value, finite):
    """A real number that is not a bool, not NaN, and (when ``finite``) not infinite."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    # Every int is finite (and math.isfinite cannot convert one beyond a float's range).
    return isinstance(value, numbers.Integral) or not (math.isnan(value) or (finite and math.isinf(value)))


def check_range(argument, value, owner=None):
    """Refuse anything but two finite numbers (low, high) with low < high, naming ``argument``."""
    ok = isinstance(value, (tuple, list)) and len(value) == 2 and all(is_number(v) for v in value)
    if not ok or not value[0] < value[1]:
        refuse(argument, value, "two finite numbers (low, high) with low < high", owner)


def shown(value):
    """``value`` as a message shows it: an array by its shape and dtype, a huge int by its size."""
    if isinstance(value, np.generic):
        value = value.item()  # np.float32(0.5) reads 0.5, under NumPy 1 and 2 alike
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None and not isinstance(value, numbers.Number):
        return f"<{type(value).__name__} of shape {tuple(shape)}, dtype {getattr(dtype, 'name', dtype)}>"
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and abs(int(value)) >= 2**100:
        return f"<a {int(value).bit_length()}-bit integer>"  # repr of a huge int is slow, or refused
    text = repr(value)
    if len(text) <= 80:
        return text
    size = f" of length {len(value)}" if hasattr(value, "__len__") else ""
    return f"{text[:60]}... ({type(value).__name__}{size})"


def refuse(argument, value, allowed, owner=None):
    """Raise the one ValueError every check gives: ``[owner: ]argument=value must be allowed.``"""
    prefix = f"{owner}: " if owner else ""
    raise ValueError(f"{prefix}{argument}={shown(value)} must be {allowed}.")


def check_seed(seed, owner=None, allow_none=False):
    """``seed`` as a Python int from 0 to 2**32 - 1 (the one rule of every seeded function), or a refusal.

    NumPy, Python's ``random`` and TensorFlow all take these seeds. A NumPy integer such as
    ``np.int64(3)`` is taken and returned as ``3``, since ``random.seed`` and Keras refuse
    NumPy's own; ``allow_none`` also lets None through where it means "fresh randomness".
    """
    if allow_none and seed is None:
        return None
    if not is_whole_number(seed, low=0, high=MAX_SEED):
        allowed = f"a whole number from 0 to 2**32 - 1 = {MAX_SEED}, e.g. seed=0"
        refuse("seed", seed, allowed + (", or None" if allow_none else ""), owner)
    return int(seed)


def check_count(argument, value, low=1, high=None, owner=None, example=None):
    """Refuse a count that is not a whole number from ``low`` to ``high`` (None: no upper bound).

    An upper bound keeps a typo such as ``n_points=10**9`` from allocating gigabytes;
    ``example``, if given, ends the message as ``e.g. argument=example``.
    """
    if not is_whole_number(value, low=low, high=high):
        allowed = f"a whole number of at least {low}" if high is None else f"a whole number from {low} to {high}"
        refuse(argument, value, allowed + ("" if example is None else f", e.g. {argument}={example}"), owner)


def check_tolerance(argument, value, owner=None):
    """Refuse a tolerance (``rtol``, ``atol``) that is not a finite number of at least 0."""
    if not is_number(value, low=0):
        refuse(argument, value, "a finite number of at least 0, e.g. 1e-5", owner)


def check_flag(argument, value, owner=None):
    """Refuse anything but True or False (a NumPy bool too), so that ``"no"`` is never taken for yes."""
    if not isinstance(value, (bool, np.bool_)):
        refuse(argument, value, "True or False", owner)


def check_callable(argument, value, what, owner=None):
    """Refuse a ``value`` that cannot be called; ``what`` says what it should be ("your function of x")."""
    if not callable(value):
        refuse(argument, value, what, owner)


#: The float dtypes inputs can be made of (gradients flow only through floating point).
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def check_float_dtype(argument, value, owner=None):
    """The name of a float dtype (``"float32"``, ``np.float64``, ``tf.float16``...), or a refusal."""
    try:
        name = None if value is None else np.dtype(value).name  # np.dtype(None) would be float64
    except TypeError:
        name = getattr(value, "name", value)
    if name not in FLOAT_DTYPES:
        refuse(argument, value, f"a float dtype: one of {', '.join(map(repr, FLOAT_DTYPES))}", owner)
    return name


def check_images(argument, value, owner=None):
    """``value`` as float32 MNIST images shaped (n, 28, 28, 1) with n >= 1, finite and in [0, 1].

    Refuses, naming ``argument``, anything that is not: an image without its channel axis is
    told to add one, images in 0-255 are told to divide by 255.
    """
    try:
        images = np.asarray(value, dtype="float32")
    except (TypeError, ValueError):
        refuse(argument, value, "MNIST images, an array shaped (n, 28, 28, 1)", owner)
    if images.ndim == 3 and images.shape[1:] == (28, 28):
        refuse(argument, value, "shaped (n, 28, 28, 1): add the channel axis with x[..., None]", owner)
    if images.ndim != 4 or images.shape[1:] != (28, 28, 1) or len(images) == 0:
        refuse(argument, value, "MNIST images shaped (n, 28, 28, 1) with at least one image", owner)
    finite = np.isfinite(images)
    if not finite.all():
        bad = int(np.argmin(finite.reshape(len(images), -1).all(axis=1)))
        refuse(argument, value, f"finite; {argument}[{bad}] holds NaN or infinity", owner)
    if images.min() < 0 or images.max() > 1:
        refuse(argument, value, f"in [0, 1]; it spans [{images.min():g}, {images.max():g}] (divide by 255?)", owner)
    return images
