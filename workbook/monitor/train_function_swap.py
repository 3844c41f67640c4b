"""The monitor's step put in place of Keras's train function for one batch at a time.

Introduced in 04_autoencoder_lab.ipynb (how the monitor works: workbook/monitor/recording.py).
The Keras attribute it reads and writes is reached through
:func:`workbook.core.internals.train_function` and :func:`~workbook.core.internals.set_train_function`,
pinned by tests/test_internals.py.
"""

import enum

from workbook.core import internals


class Swap(enum.Enum):
    """Whose function ``model.train_function`` is, as far as a :class:`TrainFunctionSwap` knows."""

    UNPATCHED = "Keras's own: nothing of the monitor's is in place"
    ARMED = "the monitor's call, for the next batch only: it puts Keras's back when it runs"


class TrainFunctionSwap:
    """``model.train_function`` replaced by ``call`` for one batch at a time.

    The swap spans two callbacks (a batch's begin and end), so it is a pair of methods, not a
    ``with``: :meth:`arm` puts ``call`` in place, :meth:`disarm` (called first thing by ``call``,
    and at the batch's end) puts back what was there. ``state`` says which of the two was last done.
    """

    def __init__(self, model, call):
        self.model, self.call = model, call
        self.replaced = None  # what model.train_function was when armed
        self.state = Swap.UNPATCHED

    def arm(self):
        if internals.train_function(self.model) is not self.call:
            self.replaced = internals.train_function(self.model)
            internals.set_train_function(self.model, self.call)
        self.state = Swap.ARMED

    def disarm(self):
        """Put back what :meth:`arm` replaced, if ``call`` is still in place (Keras may have made a new one)."""
        if internals.train_function(self.model) is self.call:
            internals.set_train_function(self.model, self.replaced)
        self.replaced = None
        self.state = Swap.UNPATCHED
