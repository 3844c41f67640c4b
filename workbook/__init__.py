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
    # environment.py: seeding, quiet logs, versions (00_start_here)
    "setup": "environment",
    "environment_report": "environment",
    # compatibility.py: the supported versions, checked in every Setup cell; Colab (00_start_here)
    "check_versions": "compatibility",
    # data.py: MNIST with or without a network (00_start_here)
    "load_mnist": "data",
    # surrogates.py: forward one function, backpropagate another (01, 02); its formulas'
    # text is in surrogate_formulas.py, its Keras operation in surrogate_operation.py
    "surrogate": "surrogates",
    "straight_through": "surrogates",
    "SURROGATES": "surrogates",
    # plots.py and explorer.py: forward next to true and surrogate derivatives (01, 02)
    "plot_derivatives": "plots",
    "explore_surrogates": "explorer",
    # checks.py: self-checks students run before submitting (01-05)
    "check_surrogate": "checks",
    "check_quantizer": "assignment_checks",
    "check_gradient_fix": "assignment_checks",
    "check_reconstruction": "assignment_checks",
    # diagnosis.py: find the operation that kills the gradient (03)
    "find_gradient_breaks": "diagnosis",
    "GradientReport": "diagnosis",
    "Finding": "diagnosis",
    # models.py, monitoring.py, compare.py: the MNIST autoencoder lab (04); the recording
    # behind the monitor is recording.py, the training behind the comparison bottleneck_runs.py
    "autoencoder": "models",
    "GradientNormMonitor": "monitoring",
    "compare_bottlenecks": "compare",
    # estimators.py, discrete_layers.py, bias_variance.py, estimator_plots.py:
    # gradients through discrete choices, measured against the exact gradient (06)
    "sample_latent": "estimators",
    "DiscreteBottleneck": "discrete_layers",
    "VectorQuantizer": "discrete_layers",
    "ScoreFunctionAutoencoder": "discrete_layers",
    "make_problem": "bias_variance",
    "measure_bias_and_variance": "bias_variance",
    "measure_estimators": "bias_variance",
    "plot_bias_variance": "estimator_plots",
    "check_gumbel_softmax_st": "estimator_checks",
}

# submodules a notebook may reach as workbook.NAME without importing them first
_SUBMODULES = {"layers"}

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
