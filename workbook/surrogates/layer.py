"""A Keras layer that applies a catalog surrogate, and saves and loads safely.

Introduced in 02_surrogate_zoo.ipynb. Unlike ``keras.layers.Lambda(lambda x: ...)``,
a model using :class:`Surrogate` loads with ``keras.saving.load_model(path,
safe_mode=True)`` (after ``import workbook.layers``, which registers it and every other
layer of the workbook), and the loaded model still backpropagates the surrogate derivative.
"""

import keras

from workbook.core.arguments import refuse
from workbook.surrogates.catalogue import SURROGATES, SurrogateGradient
from workbook.surrogates.operation import unique_name

__all__ = ["Surrogate"]

# Keyword arguments that belong to keras.layers.Layer rather than to the surrogate.
_LAYER_KWARGS = {
    "trainable",
    "dtype",
    "autocast",
    "activity_regularizer",
    "input_shape",
    "input_dim",
    "batch_size",
    "batch_input_shape",
}


@keras.saving.register_keras_serializable(package="workbook")
class Surrogate(keras.layers.Layer):
    """Forward a catalog operation, backpropagate its surrogate derivative.

    Introduced in 02_surrogate_zoo.ipynb.

    Parameters
    ----------
    surrogate : str or SurrogateGradient
        A key of ``workbook.SURROGATES`` (e.g. ``"cast_int_ste"``) or an object from it,
        e.g. ``SURROGATES["round_ste"]`` or ``SURROGATES["step_atan"].with_params(alpha=4)``.
        An object made by ``workbook.surrogate(...)`` also works, but such a model
        cannot be saved (its functions are not in the catalog).
    name : str, optional
        The layer's name (default: the catalog key, made unique: ``round_ste_1``...).
    **params
        The surrogate's parameters, e.g. ``Surrogate("cast_int_ste", scale=4)``; plus the
        usual layer keywords (``dtype``, ``trainable``).

    Examples
    --------
    >>> bottleneck = Surrogate("cast_int_ste", scale=4, name="bottleneck")
    """

    def __init__(self, surrogate, name=None, **params):
        if name is not None and not isinstance(name, str):
            refuse("name", name, "a string, e.g. name='bottleneck', or None (the catalog key)", "Surrogate")
        layer_kwargs = {key: params.pop(key) for key in list(params) if key in _LAYER_KWARGS}
        self.surrogate = _resolve(surrogate, params)
        super().__init__(name=name or unique_name(self.surrogate.name), **layer_kwargs)
        self.supports_masking = True

    @property
    def params(self):
        """The surrogate's parameter values (a copy)."""
        return dict(self.surrogate.params)

    def call(self, inputs):
        return self.surrogate(inputs)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        key = catalog_key(self.surrogate, f"The Surrogate layer {self.name!r} holds")
        return {**super().get_config(), "surrogate": key, **self.surrogate.params}

    def __repr__(self):
        args = "".join(f", {key}={value!r}" for key, value in self.surrogate.params.items())
        return f"<Surrogate({self.surrogate.name!r}{args}) name={self.name!r}>"


def catalog_key(surrogate, holder):
    """The catalog key a layer saves for ``surrogate``; NotImplementedError if it is not from the catalog.

    ``holder`` begins the message, e.g. "The Surrogate layer 'spike' holds".
    """
    key = surrogate.name
    if not surrogate.same_definition(SURROGATES.get(key)):
        raise NotImplementedError(
            f"{holder} your own surrogate {key!r}, which is not "
            f"in workbook.SURROGATES, so it cannot be saved. Add it to the catalog first "
            f"(workbook.SURROGATES[{key!r}] = your_surrogate), or use a catalog key."
        )
    return key


def _resolve(surrogate, params):
    """The SurrogateGradient a key or object names, with ``params`` applied (ValueError if unknown)."""
    if isinstance(surrogate, SurrogateGradient):
        return surrogate.with_params(**params)
    if not isinstance(surrogate, str) or surrogate not in SURROGATES:
        allowed = f"one of: {', '.join(sorted(SURROGATES))}; or an object from workbook.SURROGATES"
        refuse("surrogate", surrogate, allowed, "Surrogate")
    return SURROGATES[surrogate].with_params(**params)
