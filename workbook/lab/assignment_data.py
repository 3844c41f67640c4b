"""The digits of the graded assignment that its notebook hands out.

Introduced in 05_assignment_quantized_autoencoder.ipynb (its data cell) and course/README.md.
The notebook's ``x_train`` and ``x_test`` are the workbook's bundled digits; the grader measures
part (c) on 1,000 other digits that only the course folder holds (``held_out_digits_05.npz``,
beside the answer key), so that nothing trained or stopped on what a student can load is
measured on it.
"""

from workbook.core.arguments import refuse
from workbook.core.data import bundled_mnist, load_mnist
from workbook.lab import assignment_spec as spec

__all__ = ["load_assignment_digits"]


def load_assignment_digits(n_train=None, n_test=None):
    """``(x_train, y_train), (x_test, y_test)`` for the assignment: bundled digits, never the grader's.

    Introduced in 05_assignment_quantized_autoencoder.ipynb (its data cell). ``x_train`` is
    ``workbook.load_mnist(n_train, source="bundled")``'s; ``x_test`` is the first ``n_test`` of
    the bundled test digits, in the file's order (at most ``spec.N_TEST``, all there are).
    """
    if n_test is not None and not (isinstance(n_test, int) and 1 <= n_test <= spec.N_TEST):
        allowed = (
            f"None (all {spec.N_TEST:,}) or a whole number from 1 to {spec.N_TEST:,}: the assignment hands out "
            f"at most {spec.N_TEST:,} test digits (the {spec.N_HELD_OUT:,} it is graded on are the grader's)"
        )
        refuse("n_test", n_test, allowed)
    (x_train, y_train), _ = load_mnist(n_train, source="bundled", seed=0)
    _, (x_test, y_test) = bundled_mnist()
    given = slice(0, spec.N_TEST if n_test is None else n_test)
    return (x_train, y_train), (x_test[given], y_test[given])
