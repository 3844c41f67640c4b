"""Keras layers of leaky integrate-and-fire neurons, unrolled through time.

Introduced in 08_spiking_networks.ipynb. :class:`LIF` runs the recursion of
:func:`workbook.surrogates.lif.lif_steps` (02_surrogate_zoo.ipynb) on a batch, with the
catalogue's surrogate as its spike, as snnTorch's ``snn.Leaky(beta=..., spike_grad=...)`` does;
:class:`LeakyReadout` is the non-spiking output layer of SpyTorch's first tutorial. Both are
registered, so a model of them saves and loads in safe mode (``import workbook.layers``).
"""

import keras
from keras import ops

from workbook.core.arguments import check_flag, is_number, is_whole_number, refuse
from workbook.surrogates.layer import _resolve as resolve_surrogate
from workbook.surrogates.layer import catalog_key
from workbook.surrogates.lif import lif_steps

__all__ = ["LIF", "LeakyReadout"]


def _check_common(owner, units, beta):
    if not is_whole_number(units, 1):
        refuse("units", units, "a whole number of neurons, at least 1, e.g. 16", owner)
    if not is_number(beta, 0, 1, include_low=False):
        refuse("beta", beta, "a number in (0, 1]: the share of the membrane kept from one step to the next", owner)


def _check_steps(shape, value, owner):
    if len(shape) != 3 or shape[1] is None:
        refuse(
            "inputs",
            value,
            "shaped (batch, time_steps, features) with a fixed number of time steps, "
            "e.g. keras.Input((50, 100)): the layer unrolls every step",
            owner,
        )


def _time_major(inputs, owner):
    """(batch, steps, features) -> (steps, batch, features); the steps must be known to unroll them."""
    _check_steps(inputs.shape, inputs, owner)
    return ops.transpose(inputs, (1, 0, 2))


@keras.saving.register_keras_serializable(package="workbook")
class LIF(keras.layers.Layer):
    """Leaky integrate-and-fire neurons: ``u_t = beta u_{t-1} + x_t W (+ s_{t-1} V) - threshold s_{t-1}``,
    ``s_t = H(u_t - threshold)``, with ``H`` the surrogate (forward: the step; backward: its bump).

    Introduced in 08_spiking_networks.ipynb.

    Parameters
    ----------
    units : int
        Number of neurons.
    surrogate : str or SurrogateGradient
        The spike: a key of ``workbook.SURROGATES`` (``"step_fast_sigmoid"``, SuperSpike's) or an
        object such as ``SURROGATES["step_sigmoid"].with_params(slope=10)``. Your own
        ``workbook.surrogate(...)`` works too, but such a layer cannot be saved.
    beta : float
        The share of the membrane kept from one step to the next, in (0, 1].
    threshold : float
        The membrane value above which a neuron spikes; a spike subtracts it at the next step.
    detach_reset : bool
        True (snnTorch's and SpyTorch's default): no gradient flows through the reset.
    recurrent : bool
        True: each neuron also receives the layer's spikes of the step before, through ``V``.
    kernel_initializer, recurrent_initializer : initializer
        For ``W`` and ``V``.

    Call ``layer(x)`` for the spikes (batch, steps, units); ``layer.run(x)`` also returns the membranes.
    """

    def __init__(
        self,
        units,
        surrogate="step_fast_sigmoid",
        beta=0.9,
        threshold=1.0,
        detach_reset=True,
        recurrent=False,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        surrogate_params=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = "LIF"
        _check_common(owner, units, beta)
        if not is_number(threshold, 0, include_low=False):
            refuse("threshold", threshold, "a number greater than 0, e.g. 1.0", owner)
        check_flag("detach_reset", detach_reset, owner)
        check_flag("recurrent", recurrent, owner)
        self.units, self.beta, self.threshold = int(units), float(beta), float(threshold)
        self.detach_reset, self.recurrent = detach_reset, recurrent
        self.surrogate = resolve_surrogate(surrogate, dict(surrogate_params or {}))
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)

    def build(self, input_shape):
        _check_steps(input_shape, f"an input shaped {tuple(input_shape)}", "LIF")
        self.kernel = self.add_weight(
            name="kernel", shape=(input_shape[-1], self.units), initializer=self.kernel_initializer
        )
        self.recurrent_kernel = None
        if self.recurrent:
            self.recurrent_kernel = self.add_weight(
                name="recurrent_kernel", shape=(self.units, self.units), initializer=self.recurrent_initializer
            )

    def run(self, inputs):
        """Spikes and membranes, each shaped (batch, steps, units)."""
        if not self.built:  # called before the layer's first __call__, which would build it
            self.build(tuple(inputs.shape))
            self.built = True
        currents = ops.matmul(_time_major(inputs, "LIF"), self.kernel)
        spikes, membranes = lif_steps(
            currents, self.surrogate, self.beta, self.threshold, self.detach_reset, self.recurrent_kernel
        )
        return ops.transpose(spikes, (1, 0, 2)), ops.transpose(membranes, (1, 0, 2))

    def call(self, inputs):
        return self.run(inputs)[0]

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.units)

    def get_config(self):
        key = catalog_key(self.surrogate, f"The LIF layer {self.name!r} spikes with")
        return {
            **super().get_config(),
            "units": self.units,
            "surrogate": key,
            "surrogate_params": dict(self.surrogate.params),
            "beta": self.beta,
            "threshold": self.threshold,
            "detach_reset": self.detach_reset,
            "recurrent": self.recurrent,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "recurrent_initializer": keras.initializers.serialize(self.recurrent_initializer),
        }


@keras.saving.register_keras_serializable(package="workbook")
class LeakyReadout(keras.layers.Layer):
    """Non-spiking leaky neurons: ``u_t = beta u_{t-1} + x_t W``; returns every ``u_t`` (batch, steps, units).

    Introduced in 08_spiking_networks.ipynb: the readout of SpyTorch's first tutorial, whose
    maximum over time is each class's score.
    """

    def __init__(self, units, beta=0.9, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        _check_common("LeakyReadout", units, beta)
        self.units, self.beta = int(units), float(beta)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        self.kernel = self.add_weight(
            name="kernel", shape=(input_shape[-1], self.units), initializer=self.kernel_initializer
        )

    def call(self, inputs):
        currents = ops.matmul(inputs, self.kernel)
        steps = _time_major(inputs, "LeakyReadout").shape[0]
        # u_t = sum over s <= t of beta^(t - s) x_s W: the whole recursion as one matrix product in time
        lag = ops.arange(steps)[:, None] - ops.arange(steps)[None, :]
        decay = ops.where(lag >= 0, ops.power(self.beta, ops.cast(ops.maximum(lag, 0), currents.dtype)), 0.0)
        return ops.einsum("ts,bsu->btu", ops.cast(decay, currents.dtype), currents)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.units)

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "beta": self.beta,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
