"""Quantisers for weights and activations: the catalogue's surrogates by name, k-bit activations,
and a learned step size (LSQ).

Introduced in 07_quantisation_aware_training.ipynb. Every rounding here is the catalogue's own
``round_ste`` and every sign the catalogue's ``sign_*`` entry, wrapped in its registered
:class:`~workbook.surrogates.layer.Surrogate` layer: a quantiser is a small registered Keras layer,
so a model that uses one saves and loads with ``safe_mode=True``.
"""

import math

import keras
from keras import ops

from workbook.core.arguments import check_flag, is_number, is_whole_number, refuse
from workbook.surrogates.catalogue import SURROGATES, SurrogateGradient
from workbook.surrogates.layer import Surrogate

__all__ = ["ActivationQuantizer", "LearnedStepQuantizer", "STRAIGHT_THROUGH_CLIPS", "quantizer", "quantizer_bits"]

#: What the clip to [0, 1] backpropagates in a k-bit activation (Yin et al. 2019): 1 everywhere
#: (identity), 1 where x > 0 (ReLU's derivative) or 1 where 0 <= x <= 1 (clipped ReLU's, the clip's own).
STRAIGHT_THROUGH_CLIPS = ("identity", "relu", "clipped_relu")


def _check_bits(bits, owner, low=1):
    if not is_whole_number(bits, low, 16):
        refuse("bits", bits, f"a whole number from {low} to 16", owner)
    return int(bits)


@keras.saving.register_keras_serializable(package="workbook")
class ActivationQuantizer(keras.layers.Layer):
    """k-bit activations in [0, 1]: ``round(clip(x, 0, 1) * n) / n`` with ``n = 2**bits - 1``.

    Introduced in 07_quantisation_aware_training.ipynb. The rounding backpropagates 1 (the
    catalogue's ``round_ste``); what the clip backpropagates is ``straight_through``, one of
    :data:`STRAIGHT_THROUGH_CLIPS` (Yin et al. 2019, Understanding straight-through estimator in
    training activation quantized neural nets, ICLR): the whole derivative is then 1 everywhere,
    ``[x > 0]`` or ``[0 <= x <= 1]``.
    """

    def __init__(self, bits=2, straight_through="clipped_relu", **kwargs):
        super().__init__(**kwargs)
        self.bits = _check_bits(bits, "ActivationQuantizer")
        if straight_through not in STRAIGHT_THROUGH_CLIPS:
            refuse("straight_through", straight_through, f"one of {STRAIGHT_THROUGH_CLIPS}", "ActivationQuantizer")
        self.straight_through = straight_through
        self.levels = 2**self.bits - 1
        self._round = SURROGATES["round_ste"]

    def call(self, inputs):
        clipped = ops.clip(inputs, 0.0, 1.0)
        if self.straight_through == "identity":
            clipped = inputs + ops.stop_gradient(clipped - inputs)
        elif self.straight_through == "relu":
            clipped = ops.relu(inputs) - ops.stop_gradient(ops.relu(inputs - 1.0))
        return self._round(clipped * self.levels) / self.levels

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "bits": self.bits, "straight_through": self.straight_through}


def _scaled(value, scale):
    """``value`` forward; its gradient multiplied by ``scale`` (Esser et al.'s grad_scale)."""
    return ops.stop_gradient(value - value * scale) + value * scale


@keras.saving.register_keras_serializable(package="workbook")
class LearnedStepQuantizer(keras.layers.Layer):
    """Learned step size quantisation (LSQ): ``round(clip(v / s, -Q_N, Q_P)) * s`` with a trainable step ``s``.

    Introduced in 07_quantisation_aware_training.ipynb. Esser et al. (2020), Learned step size
    quantization, ICLR. Weights are signed (``Q_N = 2**(bits-1)``, ``Q_P = 2**(bits-1) - 1``),
    activations unsigned (``Q_N = 0``, ``Q_P = 2**bits - 1``). The rounding is the catalogue's
    ``round_ste``, so the step's gradient is ``-v/s + round(v/s)`` inside the range and ``-Q_N`` or
    ``Q_P`` outside; with ``gradient_scale=True`` it is multiplied by ``1 / sqrt(N * Q_P)``, ``N``
    the number of weights (``role="weights"``) or of features of one example (``"activations"``).

    Parameters
    ----------
    bits : int
        2 to 16 for weights, 1 to 16 for activations.
    role : {"weights", "activations"}
    initial_step : float or None
        None: ``2 mean(|w|) / sqrt(Q_P)`` from the weights, as the paper does (a quantised layer
        sets it when it builds its kernel), or ``1 / Q_P`` for activations.
    gradient_scale : bool
    """

    def __init__(self, bits=2, role="activations", initial_step=None, gradient_scale=True, **kwargs):
        super().__init__(**kwargs)
        if role not in ("weights", "activations"):
            refuse("role", role, "'weights' or 'activations'", "LearnedStepQuantizer")
        self.role = role
        self.bits = _check_bits(bits, "LearnedStepQuantizer", low=2 if role == "weights" else 1)
        if initial_step is not None and not is_number(initial_step, 0, 1e6, include_low=False):
            refuse("initial_step", initial_step, "a number in (0, 1e6], or None", "LearnedStepQuantizer")
        self.initial_step = None if initial_step is None else float(initial_step)
        check_flag("gradient_scale", gradient_scale, "LearnedStepQuantizer")
        self.gradient_scale = bool(gradient_scale)
        if role == "weights":
            self.q_negative, self.q_positive = 2 ** (self.bits - 1), 2 ** (self.bits - 1) - 1
        else:
            self.q_negative, self.q_positive = 0, 2**self.bits - 1
        self.n_elements = None

    def build(self, input_shape):
        shape = input_shape if self.role == "weights" else input_shape[1:]
        self.n_elements = math.prod(int(size) for size in shape)
        initial = self.initial_step or 1.0 / self.q_positive
        self.step = self.add_weight(
            name="step", shape=(), initializer=keras.initializers.Constant(initial), trainable=True
        )

    def initialise_from(self, values):
        """Set the step to the paper's ``2 mean(|v|) / sqrt(Q_P)`` unless an initial step was given."""
        if self.initial_step is None:
            self.step.assign(2 * float(ops.mean(ops.abs(values))) / math.sqrt(self.q_positive))

    @property
    def scale(self):
        """The step's gradient scale, ``1 / sqrt(N * Q_P)`` (1 without ``gradient_scale``)."""
        return 1 / math.sqrt(self.n_elements * self.q_positive) if self.gradient_scale else 1.0

    def call(self, inputs):
        step = _scaled(ops.cast(self.step, inputs.dtype), self.scale)
        clipped = ops.clip(inputs / step, -float(self.q_negative), float(self.q_positive))
        return SURROGATES["round_ste"](clipped) * step

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "bits": self.bits,
            "role": self.role,
            "initial_step": self.initial_step,
            "gradient_scale": self.gradient_scale,
        }


def quantizer(value, argument="kernel_quantizer", owner="QuantDense"):
    """A quantiser layer, or None, from what a quantised layer was given.

    Introduced in 07_quantisation_aware_training.ipynb. ``None`` (no quantisation); a key of
    ``workbook.SURROGATES`` (``"sign_clipped_ste"``), or an object from it, becomes its
    :class:`Surrogate` layer; a Keras layer (:class:`ActivationQuantizer`,
    :class:`LearnedStepQuantizer`, ``Surrogate``) is used as it is, and a saved one's config is
    rebuilt; any other callable of a tensor is called as it is (such a model cannot be saved).
    """
    if value is None or isinstance(value, keras.layers.Layer):
        return value
    if isinstance(value, dict):
        return keras.saving.deserialize_keras_object(value)
    if isinstance(value, str) and value in SURROGATES:
        return Surrogate(value)
    if isinstance(value, SurrogateGradient):
        return Surrogate(value)
    if callable(value) and not isinstance(value, str):
        return value
    allowed = f"None, one of {', '.join(sorted(SURROGATES))}, a quantiser layer or a function of a tensor"
    return refuse(argument, value, allowed, owner)


def quantizer_bits(layer_quantizer):
    """The bits one quantised value takes, or None where it stays a float.

    Introduced in 07_quantisation_aware_training.ipynb: 1 for a catalogue ``sign_*`` (two values;
    sign(0) = 0 never happens to a trained float weight), ``bits`` for the k-bit quantisers.
    """
    if isinstance(layer_quantizer, Surrogate) and layer_quantizer.surrogate.name.startswith("sign"):
        return 1
    return getattr(layer_quantizer, "bits", None)
