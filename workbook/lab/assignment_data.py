"""The digits of the graded assignment: what its notebook hands out, and the grader's held-out ones.

Introduced in 05_assignment_quantized_autoencoder.ipynb (its data cell) and course/README.md.
The 2,000 bundled test digits are split once, the same way everywhere: the notebook's
``x_test`` comes from one half, and the grader measures part (c) on the other half, which
the notebook never loads, so that nothing trained or stopped on ``x_test`` is measured on it.
"""

from workbook.core.arguments import refuse
from workbook.core.data import load_mnist
from workbook.lab import assignment_spec as spec

__all__ = ["load_assignment_digits", "held_out_digits"]

# Fixes the order in which the bundled test digits are split (any seed would do; never change it).
_SPLIT_SEED = 2505


def _test_halves():
    """(images, labels) of the bundled test digits in a fixed order: the held-out half first."""
    (_, _), (x_test, y_test) = load_mnist(source="bundled", seed=_SPLIT_SEED)
    return x_test, y_test


def load_assignment_digits(n_train=None, n_test=None):
    """``(x_train, y_train), (x_test, y_test)`` for the assignment: bundled digits, ``x_test`` never held out.

    Introduced in 05_assignment_quantized_autoencoder.ipynb (its data cell). ``x_train`` is
    ``workbook.load_mnist(n_train, source="bundled")``'s; ``x_test`` is ``n_test`` of the
    bundled test digits that the grader does not measure on (at most ``spec.N_TEST``).
    """
    if n_test is not None and not (isinstance(n_test, int) and 1 <= n_test <= spec.N_TEST):
        allowed = (
            f"None (all {spec.N_TEST:,}) or a whole number from 1 to {spec.N_TEST:,}: the assignment hands out "
            f"at most {spec.N_TEST:,} test digits (the other {spec.N_HELD_OUT:,} are the grader's)"
        )
        refuse("n_test", n_test, allowed)
    (x_train, y_train), _ = load_mnist(n_train, source="bundled", seed=0)
    x_test, y_test = _test_halves()
    given = slice(spec.N_HELD_OUT, spec.N_HELD_OUT + (spec.N_TEST if n_test is None else n_test))
    return (x_train, y_train), (x_test[given], y_test[given])


def held_out_digits():
    """The grader's images for part (c): the bundled test digits the assignment never hands out.

    Introduced in course/README.md; read by :mod:`workbook.course.verdicts`.
    """
    x_test, _ = _test_halves()
    return x_test[: spec.N_HELD_OUT]
