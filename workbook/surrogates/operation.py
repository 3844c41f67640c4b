"""Keras plumbing for surrogates: a symbolic operation for functional models, and unique names.

Introduced in 02_surrogate_zoo.ipynb, where a surrogate is called on a functional model's
``keras.Input`` and where two ``Surrogate`` layers of one model must not share a name.
"""

import re

import keras

__all__ = ["SurrogateOperation", "unique_name"]


def unique_name(base):
    """``base``, or ``base_1``, ``base_2``... so that two layers in one model never clash."""
    base = re.sub(r"\W+", "_", base).strip("_") or "surrogate"
    uid = keras.backend.get_uid(base)
    return base if uid == 1 else f"{base}_{uid - 1}"


class SurrogateOperation(keras.Operation):
    """A surrogate recorded on symbolic tensors while a functional model is built, run later on real ones."""

    def __init__(self, surrogate):
        super().__init__(name=unique_name(surrogate.name))
        self.surrogate = surrogate

    def call(self, x):
        return self.surrogate._apply(x)

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype=x.dtype)
