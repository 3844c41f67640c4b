"""Every Keras layer of the workbook, in one import: ``import workbook.layers`` registers them
all, so ``keras.saving.load_model(path, safe_mode=True)`` loads any saved model of the workbook.

``Surrogate`` (02_surrogate_zoo.ipynb) is defined in workbook.surrogates.layer;
``DiscreteBottleneck``, ``VectorQuantizer`` and ``ScoreFunctionAutoencoder``
(06_beyond_straight_through.ipynb) in workbook.estimators.layers; ``QuantDense``, ``QuantConv2D``,
``WeightClip``, ``ActivationQuantizer`` and ``LearnedStepQuantizer``
(07_quantisation_aware_training.ipynb) in workbook.quantisation; ``LIF`` and ``LeakyReadout``
(08_spiking_networks.ipynb) in workbook.spiking.neurons.
"""

from workbook.estimators.layers import DiscreteBottleneck, ScoreFunctionAutoencoder, VectorQuantizer
from workbook.quantisation.layers import QuantConv2D, QuantDense, WeightClip
from workbook.quantisation.quantizers import ActivationQuantizer, LearnedStepQuantizer
from workbook.spiking.neurons import LIF, LeakyReadout
from workbook.surrogates.layer import Surrogate

__all__ = [
    "LIF",
    "ActivationQuantizer",
    "DiscreteBottleneck",
    "LeakyReadout",
    "LearnedStepQuantizer",
    "QuantConv2D",
    "QuantDense",
    "ScoreFunctionAutoencoder",
    "Surrogate",
    "VectorQuantizer",
    "WeightClip",
]
