"""Quantised Dense and Conv2D layers, and the clip that keeps latent weights in [-1, 1].

Introduced in 07_quantisation_aware_training.ipynb. As in Larq, quantisation is a layer's
argument: ``QuantDense(64, kernel_quantizer="sign_clipped_ste", input_quantizer="sign_clipped_ste",
kernel_constraint=WeightClip(1.0))``. The layer keeps its float (latent) kernel, the one the
optimiser updates; the forward pass uses the quantised kernel on the quantised inputs, and the
quantisers' surrogates carry the gradient back to both.
"""

import keras
from keras import ops

from workbook.core.arguments import is_number, refuse
from workbook.quantisation.quantizers import quantizer

__all__ = ["QuantConv2D", "QuantDense", "WeightClip"]


@keras.saving.register_keras_serializable(package="workbook")
class WeightClip(keras.constraints.Constraint):
    """Clip every weight to ``[-clip_value, clip_value]`` after each update (Larq's ``weight_clip``).

    Introduced in 07_quantisation_aware_training.ipynb: a binarised kernel's latent weights must
    stay where the clipped straight-through passes a gradient, or they stop flipping.
    """

    def __init__(self, clip_value=1.0):
        if not is_number(clip_value, 0, 1e6, include_low=False):
            refuse("clip_value", clip_value, "a number in (0, 1e6]", "WeightClip")
        self.clip_value = float(clip_value)

    def __call__(self, w):
        return ops.clip(w, -self.clip_value, self.clip_value)

    def get_config(self):
        return {"clip_value": self.clip_value}


class _Quantised:
    """What QuantDense and QuantConv2D share: two quantisers, built with the layer and saved in its config."""

    def _take_quantizers(self, kernel_quantizer, input_quantizer):
        owner = type(self).__name__
        self.kernel_quantizer = quantizer(kernel_quantizer, "kernel_quantizer", owner)
        self.input_quantizer = quantizer(input_quantizer, "input_quantizer", owner)

    def _build_quantizers(self, input_shape):
        for part, shape in ((self.input_quantizer, input_shape), (self.kernel_quantizer, self.kernel.shape)):
            if isinstance(part, keras.layers.Layer) and not part.built:
                part.build(shape)
        if hasattr(self.kernel_quantizer, "initialise_from"):
            self.kernel_quantizer.initialise_from(self.kernel)

    def quantised_kernel(self):
        """The kernel the forward pass uses (the latent kernel if there is no kernel quantiser)."""
        return self.kernel if self.kernel_quantizer is None else self.kernel_quantizer(self.kernel)

    def _quantised_input(self, inputs):
        return inputs if self.input_quantizer is None else self.input_quantizer(inputs)

    def _quantizer_config(self):
        config = {}
        for argument in ("kernel_quantizer", "input_quantizer"):
            part = getattr(self, argument)
            if part is not None and not isinstance(part, keras.layers.Layer):
                raise NotImplementedError(
                    f"{type(self).__name__} {self.name!r}: its {argument} is your own function "
                    f"{getattr(part, '__name__', part)!r}, which cannot be saved. Give a catalogue key "
                    f"(e.g. 'sign_clipped_ste') or a registered quantiser layer instead."
                )
            config[argument] = None if part is None else keras.saving.serialize_keras_object(part)
        return config


@keras.saving.register_keras_serializable(package="workbook")
class QuantDense(_Quantised, keras.layers.Dense):
    """A Dense layer whose kernel and inputs are quantised in the forward pass.

    Introduced in 07_quantisation_aware_training.ipynb.

    Parameters
    ----------
    units : int
    kernel_quantizer, input_quantizer : str, quantiser layer, callable or None
        A key of ``workbook.SURROGATES`` (``"sign_clipped_ste"``), a quantiser layer
        (``ActivationQuantizer``, ``LearnedStepQuantizer``), a function of a tensor, or None.
    **kwargs
        Everything ``keras.layers.Dense`` takes, e.g. ``kernel_constraint=WeightClip(1.0)``.
    """

    def __init__(self, units, kernel_quantizer=None, input_quantizer=None, **kwargs):
        self._take_quantizers(kernel_quantizer, input_quantizer)
        super().__init__(units, **kwargs)

    def build(self, input_shape):
        super().build(input_shape)
        self._build_quantizers(input_shape)

    def call(self, inputs, training=None):
        outputs = ops.matmul(self._quantised_input(inputs), self.quantised_kernel())
        if self.use_bias:
            outputs = ops.add(outputs, self.bias)
        return outputs if self.activation is None else self.activation(outputs)

    def get_config(self):
        return {**super().get_config(), **self._quantizer_config()}


@keras.saving.register_keras_serializable(package="workbook")
class QuantConv2D(_Quantised, keras.layers.Conv2D):
    """A Conv2D layer whose kernel and inputs are quantised in the forward pass.

    Introduced in 07_quantisation_aware_training.ipynb. Arguments as :class:`QuantDense`, then
    everything ``keras.layers.Conv2D`` takes.
    """

    def __init__(self, filters, kernel_size, kernel_quantizer=None, input_quantizer=None, **kwargs):
        self._take_quantizers(kernel_quantizer, input_quantizer)
        super().__init__(filters, kernel_size, **kwargs)

    def build(self, input_shape):
        super().build(input_shape)
        self._build_quantizers(input_shape)

    def call(self, inputs):
        outputs = self.convolution_op(self._quantised_input(inputs), self.quantised_kernel())
        if self.use_bias:
            shape = (1,) * (self.rank + 1) + (self.filters,)
            if self.data_format != "channels_last":
                shape = (1, self.filters) + (1,) * self.rank
            outputs = ops.add(outputs, ops.reshape(self.bias, shape))
        return outputs if self.activation is None else self.activation(outputs)

    def get_config(self):
        return {**super().get_config(), **self._quantizer_config()}
