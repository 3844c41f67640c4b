"""The gradient workbook: what backpropagation does when an operation has no
useful derivative, and how to take control of it.

Start with notebooks/00_start_here.ipynb. Importing this package does nothing
but make the names below available; each is loaded (with TensorFlow) the first
time it is used, and :func:`setup` is the explicit way to seed and quiet a run.
"""

import importlib

__version__ = "0.1.0"

# public name -> the module (one per topic) that defines it
_EXPORTS = {
    # core/: seeding, quiet logs and versions (00_start_here), MNIST with or without a network
    "setup": "core.environment",
    "environment_report": "core.environment",
    "check_versions": "core.compatibility",
    "load_mnist": "core.data",
    # surrogates/: forward one function, backpropagate another, drawn and explored (01, 02),
    # and the students' self-check of their own (01)
    "surrogate": "surrogates.catalogue",
    "straight_through": "surrogates.catalogue",
    "SURROGATES": "surrogates.catalogue",
    "plot_derivatives": "surrogates.plots",
    "explore_surrogates": "surrogates.explorer",
    "check_surrogate": "surrogates.checks",
    # finder/: find the operation that kills the gradient (03)
    "find_gradient_breaks": "finder.diagnosis",
    "GradientReport": "finder.diagnosis",
    "Finding": "finder.diagnosis",
    # lab/: the MNIST autoencoder lab (04) and the assignment's self-checks (05)
    "check_quantizer": "lab.assignment_checks",
    "check_gradient_fix": "lab.assignment_checks",
    "check_reconstruction": "lab.assignment_checks",
    "autoencoder": "lab.models",
    "compare_bottlenecks": "lab.compare",
    # monitor/: per-layer gradient norms, live while a model trains (04)
    "GradientNormMonitor": "monitor.monitoring",
    # estimators/: gradients through discrete choices, measured against the exact gradient (06)
    "sample_latent": "estimators.sampling",
    "DiscreteBottleneck": "estimators.layers",
    "VectorQuantizer": "estimators.layers",
    "ScoreFunctionAutoencoder": "estimators.layers",
    "make_problem": "estimators.bias_variance",
    "measure_bias_and_variance": "estimators.bias_variance",
    "measure_estimators": "estimators.bias_variance",
    "plot_bias_variance": "estimators.plots",
    "check_gumbel_softmax_st": "estimators.checks",
    # quantisation/: quantisation-aware training, binarised and low-bit layers (07)
    "QuantDense": "quantisation.layers",
    "QuantConv2D": "quantisation.layers",
    "WeightClip": "quantisation.layers",
    "ActivationQuantizer": "quantisation.quantizers",
    "LearnedStepQuantizer": "quantisation.quantizers",
    "STRAIGHT_THROUGH_CLIPS": "quantisation.quantizers",
    "memory_summary": "quantisation.summary",
    "quantised_mlp": "quantisation.training",
    "train_classifier": "quantisation.training",
    "KernelSignFlips": "quantisation.training",
    "step_gradient_ratios": "quantisation.training",
    "check_learned_step": "quantisation.checks",
    # spiking/: spiking networks trained through time with surrogate gradients (08)
    "random_spike_patterns": "spiking.data",
    "randman_spikes": "spiking.data",
    "spiking_classifier": "spiking.networks",
    "plot_spikes": "spiking.plots",
    "plot_sweep": "spiking.plots",
    "plot_growing_peak": "spiking.plots",
}

# submodules a notebook may reach as workbook.NAME without importing them first: workbook.layers
# holds every Keras layer of the workbook (one import registers them all for loading).
# The instructor's side, workbook.course (nbgrader), is never imported from here.
_SUBMODULES = {"layers", "losses"}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"workbook.{name}")
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'workbook' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"workbook.{module_name}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | _SUBMODULES)
