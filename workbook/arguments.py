"""Argument checks shared by every public function, so a bad value is refused the same way.

Each public function names its own argument and says what is allowed, in its own words
(see the "Errors speak to a student" notes in each notebook); these predicates decide
what counts as a whole number or a number in a range, so that ``True`` is never taken
for 1, ``nan`` never passes a bound, and NumPy scalars count like Python ones.
"""

import math
import numbers

__all__ = ["check_range", "check_seed", "is_number", "is_whole_number"]


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
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    # Every int is finite (and math.isfinite cannot convert one beyond a float's range).
    if not isinstance(value, numbers.Integral) and (math.isnan(value) or (finite and math.isinf(value))):
        return False
    above = low is None or (value >= low if include_low else value > low)
    below = high is None or (value <= high if include_high else value < high)
    return bool(above and below)


def check_range(argument, value):
    """Refuse anything but two finite numbers (low, high) with low < high, naming ``argument``."""
    ok = isinstance(value, (tuple, list)) and len(value) == 2 and all(is_number(v) for v in value)
    if not ok or not value[0] < value[1]:
        raise ValueError(f"{argument}={value!r} must be two finite numbers (low, high) with low < high.")


def check_seed(seed):
    """Refuse a ``seed`` that is not a whole number of at least 0, as every seeded function does."""
    if not is_whole_number(seed, low=0):
        raise ValueError(f"seed={seed!r} must be a whole number of at least 0, e.g. seed=0.")
