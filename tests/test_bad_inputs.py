"""Every bad input to the public API is refused with a ValueError naming the argument and its value.

One table of bad calls over every name in ``workbook.__all__`` (and ``workbook.layers``)
that takes arguments: wrong types, shapes and sizes, NaN and infinity, huge values,
empty arrays, negative counts and out-of-range seeds. Each row says what the message
must contain (the argument and the value as written, or what the value holds); nothing
may be printed before the refusal, so no check prints a verdict on a bad argument.
No row trains a model or allocates much: everything is refused before the work starts.
"""

import dataclasses
import functools
import io
import math
import random
from contextlib import redirect_stdout
from types import SimpleNamespace

import keras
import numpy as np
import pytest

import workbook
from workbook.lab.bottleneck_runs import BottleneckRun
from workbook.lab.compare import comparison_figures

IMAGES = np.zeros((4, 28, 28, 1), dtype="float32")
NAN_IMAGES = IMAGES.copy()
NAN_IMAGES[2, 3, 4, 0] = np.nan
BYTE_IMAGES = IMAGES.copy()
BYTE_IMAGES[:, 10:18, 10:18, 0] = 255.0  # pixels in 0-255, not divided by 255
X = np.linspace(-1, 1, 7).astype("float32")


def sign_ste():
    return workbook.SURROGATES["sign_ste"]


def ones(x):
    return keras.ops.ones_like(x)


def check_surrogate(**kwargs):
    return workbook.check_surrogate(**{"fn": sign_ste(), "forward": keras.ops.sign, "derivative": ones, **kwargs})


def check_reconstruction(**kwargs):
    arguments = {"model": None, "x_test": IMAGES, "target_mse": 0.1, "seconds": 1.0, "time_budget_seconds": 10}
    return workbook.check_reconstruction(**{**arguments, **kwargs})


def compare(**kwargs):
    arguments = {"bottlenecks": {"identity": None}, "x_train": IMAGES, "x_test": IMAGES, "show": False}
    return workbook.compare_bottlenecks(**{**arguments, **kwargs})


def gumbel_softmax_st(logits, noise, tau):
    soft = keras.ops.softmax((logits + noise) / tau)
    hard = keras.ops.one_hot(keras.ops.argmax(logits + noise, axis=-1), logits.shape[-1], dtype=soft.dtype)
    return hard + soft - keras.ops.stop_gradient(soft)


def check_gumbel(**kwargs):
    return workbook.check_gumbel_softmax_st(**{"fn": gumbel_softmax_st, **kwargs})


def a_keras_model():
    inputs = keras.Input(shape=(28, 28, 1))
    return keras.Model(inputs, keras.layers.Identity(name="bottleneck")(inputs))


def a_measured(**fields):
    """A real BiasVariance (a handful of estimates), with ``fields`` replaced."""
    result = workbook.measure_bias_and_variance("gumbel_softmax", n_samples=4)
    return dataclasses.replace(result, **fields)


# What compare_bottlenecks returns, as far as drawing needs before any model is asked.
RUNS = {"identity": BottleneckRun("identity", None, {}, None, 0.0)}


def loss(name, y_true, y_pred):
    return lambda: getattr(workbook.losses, name)(y_true, y_pred)


MASK, PROBABILITIES = np.ones((4, 1)), np.full((4, 1), 0.5, "float32")
# Every workbook.losses function: a shape that does not fit, an empty batch, predictions that are
# not floats, and what is wrong for that loss alone (a 1-D prediction for kappa, float CTC labels).
LOSS_CALLS = {
    "losses.soft_iou(shapes (4, 1) and (3, 1))": (
        loss("soft_iou", MASK, PROBABILITIES[:3]),
        ["soft_iou: y_true=", "shape (4, 1)", "a mask shaped like y_pred, (3, 1)"],
    ),
    "losses.soft_iou(integer y_pred)": (
        loss("soft_iou", [1, 0], [1, 0]),
        ["soft_iou: y_pred=", "dtype int32", "float predictions"],
    ),
    "losses.soft_iou(strings)": (loss("soft_iou", ["a"], [0.5]), ["y_true=['a']", "tensor of numbers"]),
    "losses.soft_dice(empty batch)": (
        loss("soft_dice", MASK[:0], PROBABILITIES[:0]),
        ["soft_dice: y_true=", "shape (0, 1)", "at least one example"],
    ),
    "losses.soft_dice(shapes (4,) and (4, 1))": (
        loss("soft_dice", np.ones(4), PROBABILITIES),
        ["soft_dice: y_true=", "shape (4,)", "(4, 1)"],
    ),
    "losses.box_iou(3 corners)": (
        loss("box_iou", np.ones((2, 3)), np.ones((2, 3), "float32")),
        ["box_iou: y_pred=", "shape (2, 3)", "(x1, y1, x2, y2)", "of size 4"],
    ),
    "losses.box_iou(two boxes and three)": (
        loss("box_iou", np.ones((2, 4)), np.ones((3, 4), "float32")),
        ["box_iou: y_true=", "shape (2, 4)", "(3, 4)"],
    ),
    "losses.pairwise_ranking(3 labels, 4 scores)": (
        loss("pairwise_ranking", np.ones(3), PROBABILITIES),
        ["pairwise_ranking: y_true=", "shape (3,)", "one 0/1 label per score", "4 scores"],
    ),
    "losses.pairwise_ranking(a scalar)": (
        loss("pairwise_ranking", 1.0, 0.5),
        ["pairwise_ranking: y_true=", "at least one example"],
    ),
    "losses.smooth_directional(one sample)": (
        loss("smooth_directional", MASK[:1], PROBABILITIES[:1]),
        ["smooth_directional: y_pred=", "shape (1, 1)", "at least two consecutive samples"],
    ),
    "losses.smooth_directional(shapes (4, 1) and (4, 2))": (
        loss("smooth_directional", MASK, np.ones((4, 2), "float32")),
        ["smooth_directional: y_true=", "(4, 2)"],
    ),
    "losses.soft_qwk(1-D y_pred)": (
        loss("soft_qwk", np.ones(4), np.ones(4, "float32")),
        ["soft_qwk: y_pred=", "shape (4,)", "shaped (n, classes)", "at least 2 classes"],
    ),
    "losses.soft_qwk(3 labels, 4 rows)": (
        loss("soft_qwk", np.ones(3), np.ones((4, 3), "float32")),
        ["soft_qwk: y_true=", "shape (3,)", "one row per row of y_pred (4), not 3"],
    ),
    "losses.soft_qwk(one-hot of 2 classes for 3)": (
        loss("soft_qwk", np.ones((4, 2)), np.ones((4, 3), "float32")),
        ["soft_qwk: y_true=", "shape (4, 2)", "one-hot labels (n, 3)"],
    ),
    "losses.ctc(float labels)": (
        loss("ctc", np.full((2, 3), 1.5), np.zeros((2, 5, 4), "float32")),
        ["ctc: y_true=", "shape (2, 3)", "whole class numbers from 0 to 2", "the blank"],
    ),
    "losses.ctc(the blank as a label)": (
        loss("ctc", np.full((2, 3), 3), np.zeros((2, 5, 4), "float32")),
        ["ctc: y_true=", "whole class numbers from 0 to 2"],
    ),
    "losses.ctc(2-D logits)": (
        loss("ctc", np.ones((2, 3)), np.zeros((2, 4), "float32")),
        ["ctc: y_pred=", "shape (2, 4)", "(n, steps, classes)"],
    ),
    "losses.ctc(1-D labels)": (
        loss("ctc", np.ones(2), np.zeros((2, 5, 4), "float32")),
        ["ctc: y_true=", "shape (2,)", "(n, length)"],
    ),
}

# (call, fragments the message must contain); the row's id is the call as written.
BAD_CALLS = {
    # environment.py, data.py
    "setup(seed=2**32)": (lambda: workbook.setup(seed=2**32), ["seed=4294967296", "2**32 - 1"]),
    "setup(seed=-1)": (lambda: workbook.setup(seed=-1), ["seed=-1", "from 0 to"]),
    "setup(quiet='no')": (lambda: workbook.setup(quiet="no"), ["quiet='no'", "True or False"]),
    "load_mnist(seed=2**32)": (lambda: workbook.load_mnist(source="bundled", seed=2**32), ["seed=4294967296"]),
    "load_mnist(n_train=10**9)": (lambda: workbook.load_mnist(n_train=10**9, source="bundled"), ["n_train=1000000000"]),
    "load_mnist(n_test=-1)": (lambda: workbook.load_mnist(n_test=-1), ["n_test=-1"]),
    "load_mnist(source=None)": (lambda: workbook.load_mnist(source=None), ["source=None"]),
    # surrogates.py, layers.py
    "surrogate(None, ones)": (lambda: workbook.surrogate(None, ones), ["forward=None"]),
    "surrogate(sign, 3)": (lambda: workbook.surrogate(keras.ops.sign, 3), ["derivative=3"]),
    "surrogate(name=5)": (lambda: workbook.surrogate(keras.ops.sign, ones, name=5), ["name=5"]),
    "surrogate(formula=5)": (lambda: workbook.surrogate(keras.ops.sign, ones, formula=5), ["formula=5"]),
    "straight_through('sign')": (lambda: workbook.straight_through("sign"), ["forward='sign'"]),
    "straight_through(name=5)": (lambda: workbook.straight_through(keras.ops.sign, name=5), ["name=5", "string"]),
    "surrogate(sign, ones)(None)": (
        lambda: workbook.surrogate(keras.ops.sign, ones)(None),
        ["surrogate 'sign': x=None", "float tensor"],
    ),
    "surrogate(sign, ones)('x')": (lambda: workbook.surrogate(keras.ops.sign, ones)("x"), ["x='x'", "string"]),
    "SURROGATES['sign_ste'](ints)": (
        lambda: workbook.SURROGATES["sign_ste"](np.arange(3)),
        ["x=<ndarray of shape (3,), dtype int64>", "not int64", "keras.ops.cast"],
    ),
    "with_params(alpha=nan)": (lambda: workbook.SURROGATES["step_atan"].with_params(alpha=math.nan), ["alpha=nan"]),
    "with_params(alpha=10**400)": (
        lambda: workbook.SURROGATES["step_atan"].with_params(alpha=10**400),
        ["alpha=", "(0, 100]"],
    ),
    "with_params(clip=1)": (lambda: workbook.SURROGATES["step_atan"].with_params(clip=1), ["'clip'", "alpha"]),
    "layers.Surrogate('nope')": (lambda: workbook.layers.Surrogate("nope"), ["surrogate='nope'"]),
    "layers.Surrogate(alpha=-1)": (lambda: workbook.layers.Surrogate("step_atan", alpha=-1), ["alpha=-1"]),
    "layers.Surrogate(name=0)": (
        lambda: workbook.layers.Surrogate("sign_ste", name=0),
        ["Surrogate: name=0", "string"],
    ),
    # plots.py, explorer.py
    "plot_derivatives(n_points=10**9)": (
        lambda: workbook.plot_derivatives("sign_ste", n_points=10**9),
        ["n_points=1000000000", "from 3 to 100000"],
    ),
    "plot_derivatives(n_points=2.5)": (lambda: workbook.plot_derivatives("sign_ste", n_points=2.5), ["n_points=2.5"]),
    "plot_derivatives(x_range=(0, nan))": (
        lambda: workbook.plot_derivatives("sign_ste", x_range=(0, math.nan)),
        ["x_range=(0, nan)"],
    ),
    "plot_derivatives(x_range=(1, 0))": (lambda: workbook.plot_derivatives("sign_ste", x_range=(1, 0)), ["x_range="]),
    "plot_derivatives(dtype='int32')": (
        lambda: workbook.plot_derivatives("sign_ste", dtype="int32"),
        ["dtype='int32'", "float"],
    ),
    "plot_derivatives(dtype='banana')": (lambda: workbook.plot_derivatives("sign_ste", dtype="banana"), ["dtype="]),
    "plot_derivatives(42)": (lambda: workbook.plot_derivatives(42), ["fn_or_name=42"]),
    "plot_derivatives('nope')": (lambda: workbook.plot_derivatives("nope"), ["fn_or_name='nope'"]),
    "plot_derivatives(axes=5)": (lambda: workbook.plot_derivatives("sign_ste", axes=5), ["axes=5", "pair"]),
    "plot_derivatives(ax=5)": (lambda: workbook.plot_derivatives("sign_ste", ax=5), ["ax=5", "Axes"]),
    "plot_derivatives(axes=(1, 2))": (lambda: workbook.plot_derivatives("sign_ste", axes=(1, 2)), ["axes=(1, 2)"]),
    "plot_derivatives(title=5)": (lambda: workbook.plot_derivatives("sign_ste", title=5), ["title=5"]),
    "plot_derivatives(lambda x: None)": (
        lambda: workbook.plot_derivatives(lambda x: None),
        ["fn_or_name=<function", "returned None", "`return` missing"],
    ),
    "plot_derivatives(lambda x: x[:0])": (
        lambda: workbook.plot_derivatives(lambda x: x[:0], n_points=5),
        ["fn_or_name=", "shaped like its input, (5,)", "shape (0,)"],
    ),
    "plot_derivatives(lambda x: sum(x))": (
        lambda: workbook.plot_derivatives(lambda x: keras.ops.sum(x), n_points=5),
        ["fn_or_name=", "shape ()"],
    ),
    "plot_derivatives(lambda x: 'a')": (lambda: workbook.plot_derivatives(lambda x: "a"), ["fn_or_name=", "'a'"]),
    "plot_derivatives(x_range=(-inf, 0))": (
        lambda: workbook.plot_derivatives("sign_ste", x_range=(-math.inf, 0)),
        ["x_range=(-inf, 0)", "finite"],
    ),
    "plot_derivatives(x_range=[])": (lambda: workbook.plot_derivatives("sign_ste", x_range=[]), ["x_range=[]"]),
    "plot_derivatives(x_range beyond float32)": (
        lambda: workbook.plot_derivatives("sign_ste", x_range=(-1e39, 1e39)),
        ["plot_derivatives: x_range=(-1e+39, 1e+39)", "float32"],
    ),
    "plot_derivatives(x_range beyond float16)": (
        lambda: workbook.plot_derivatives("sign_ste", x_range=(0, 1e5), dtype="float16"),
        ["x_range=(0, 100000.0)", "float16"],
    ),
    "explore_surrogates(n_points=10**9)": (
        lambda: workbook.explore_surrogates(n_points=10**9),
        ["n_points=1000000000"],
    ),
    "explore_surrogates(x_range=(1, 0))": (lambda: workbook.explore_surrogates(x_range=(1, 0)), ["x_range=(1, 0)"]),
    "explore_surrogates(custom=[1])": (lambda: workbook.explore_surrogates(custom=[1]), ["custom=[1]"]),
    "explore_surrogates(start='nope')": (lambda: workbook.explore_surrogates(start="nope"), ["start='nope'"]),
    "explore_surrogates(start=[])": (lambda: workbook.explore_surrogates(start=[]), ["start=[]", "sign_ste"]),
    # checks.py
    "check_surrogate(n_points=10**9)": (lambda: check_surrogate(n_points=10**9), ["n_points=1000000000"]),
    "check_surrogate(n_points=0)": (lambda: check_surrogate(n_points=0), ["n_points=0", "from 2 to"]),
    "check_surrogate(n_points=1.5)": (lambda: check_surrogate(n_points=1.5), ["n_points=1.5"]),
    "check_surrogate(n_samples=-1)": (lambda: check_surrogate(n_samples=-1), ["n_samples=-1", "from 0 to"]),
    "check_surrogate(n_samples=10**9)": (lambda: check_surrogate(n_samples=10**9), ["n_samples=1000000000"]),
    "check_surrogate(seed=-1)": (lambda: check_surrogate(seed=-1), ["seed=-1"]),
    "check_surrogate(seed=2**32)": (lambda: check_surrogate(seed=2**32), ["seed=4294967296"]),
    "check_surrogate(rtol=nan)": (lambda: check_surrogate(rtol=math.nan), ["rtol=nan", "at least 0"]),
    "check_surrogate(rtol=inf)": (lambda: check_surrogate(rtol=math.inf), ["rtol=inf"]),
    "check_surrogate(atol=-1)": (lambda: check_surrogate(atol=-1), ["atol=-1"]),
    "check_surrogate(atol='small')": (lambda: check_surrogate(atol="small"), ["atol='small'"]),
    "check_surrogate(dtype='int32')": (lambda: check_surrogate(dtype="int32"), ["dtype='int32'"]),
    "check_surrogate(fn=None)": (lambda: check_surrogate(fn=None), ["fn=None"]),
    "check_surrogate(forward=None)": (lambda: check_surrogate(forward=None), ["forward=None"]),
    "check_surrogate(derivative=1)": (lambda: check_surrogate(derivative=1), ["derivative=1"]),
    "check_surrogate(x_range beyond float32)": (
        lambda: check_surrogate(x_range=(-1e300, 1e300)),
        ["x_range=(-1e+300, 1e+300)", "float32"],
    ),
    "check_surrogate(x_range=(0, 0))": (lambda: check_surrogate(x_range=(0, 0)), ["x_range=(0, 0)"]),
    # assignment_checks.py
    "check_quantizer(None)": (lambda: workbook.check_quantizer(None), ["fn=None"]),
    "check_quantizer(gradient='yes')": (lambda: workbook.check_quantizer(ones, gradient="yes"), ["gradient='yes'"]),
    "check_quantizer(n_points=10**9)": (lambda: workbook.check_quantizer(ones, n_points=10**9), ["n_points="]),
    "check_quantizer(seed=2**32)": (lambda: workbook.check_quantizer(ones, seed=2**32), ["seed=4294967296"]),
    "check_quantizer(x_range beyond float32)": (
        lambda: workbook.check_quantizer(ones, x_range=(0, 1e39)),
        ["x_range=(0, 1e+39)", "float32"],
    ),
    "check_quantizer(x_range at a jump)": (
        lambda: workbook.check_quantizer(ones, x_range=(0.1664, 0.1669)),
        ["x_range=(0.1664, 0.1669)", "jump"],
    ),
    "check_gradient_fix(example=[])": (lambda: workbook.check_gradient_fix(ones, ones, example=[]), ["example=[]"]),
    "check_gradient_fix(example=empty array)": (
        lambda: workbook.check_gradient_fix(ones, ones, example=np.zeros((0, 3))),
        ["example=", "shape (0, 3)", "non-empty"],
    ),
    "check_gradient_fix(example=[nan])": (
        lambda: workbook.check_gradient_fix(ones, ones, example=[0.5, math.nan]),
        ["example=[0.5, nan]", "NaN"],
    ),
    "check_gradient_fix(example=ragged)": (
        lambda: workbook.check_gradient_fix(ones, ones, example=[[1, 2], [3]]),
        ["example=[[1, 2], [3]]"],
    ),
    "check_gradient_fix(example='abc')": (
        lambda: workbook.check_gradient_fix(ones, ones, example="abc"),
        ["example='abc'"],
    ),
    "check_gradient_fix(example=True)": (
        lambda: workbook.check_gradient_fix(ones, ones, example=True),
        ["example=True", "not of True/False"],
    ),
    "check_gradient_fix(seed=-1)": (lambda: workbook.check_gradient_fix(ones, ones, seed=-1), ["seed=-1"]),
    "check_gradient_fix(None, f)": (lambda: workbook.check_gradient_fix(None, ones), ["fixed=None"]),
    "check_gradient_fix(f, None)": (lambda: workbook.check_gradient_fix(ones, None), ["original=None"]),
    "check_gradient_fix(derivative=5)": (
        lambda: workbook.check_gradient_fix(ones, ones, derivative=5),
        ["derivative=5"],
    ),
    "check_reconstruction(n_probe=-1)": (lambda: check_reconstruction(n_probe=-1), ["n_probe=-1", "from 1 to"]),
    "check_reconstruction(n_probe=0)": (lambda: check_reconstruction(n_probe=0), ["n_probe=0"]),
    "check_reconstruction(n_probe=1.5)": (lambda: check_reconstruction(n_probe=1.5), ["n_probe=1.5"]),
    "check_reconstruction(x_test=NaN)": (
        lambda: check_reconstruction(x_test=NAN_IMAGES),
        ["x_test=", "x_test[2] holds NaN"],
    ),
    "check_reconstruction(x_test=(n, 28, 28))": (
        lambda: check_reconstruction(x_test=IMAGES[..., 0]),
        ["x_test=", "(4, 28, 28)", "x[..., None]"],
    ),
    "check_reconstruction(x_test=empty)": (
        lambda: check_reconstruction(x_test=IMAGES[:0]),
        ["x_test=", "(0, 28, 28, 1)", "at least one image"],
    ),
    "check_reconstruction(x_test=0-255)": (
        lambda: check_reconstruction(x_test=BYTE_IMAGES),
        ["x_test=", "[0, 255]", "divide by 255"],
    ),
    "check_reconstruction(x_test=flat)": (
        lambda: check_reconstruction(x_test=IMAGES.reshape(4, 784)),
        ["x_test=", "(4, 784)"],
    ),
    "check_reconstruction(target_mse=nan)": (lambda: check_reconstruction(target_mse=math.nan), ["target_mse=nan"]),
    "check_reconstruction(seconds=inf)": (lambda: check_reconstruction(seconds=math.inf), ["seconds=inf"]),
    "check_reconstruction(time_budget_seconds=-1)": (
        lambda: check_reconstruction(time_budget_seconds=-1),
        ["time_budget_seconds=-1"],
    ),
    "check_reconstruction(time_budget_seconds=0)": (
        lambda: check_reconstruction(model=a_keras_model(), time_budget_seconds=0),
        ["check_reconstruction: time_budget_seconds=0", "above 0"],
    ),
    "check_reconstruction(time_budget_seconds=inf)": (
        lambda: check_reconstruction(time_budget_seconds=math.inf),
        ["time_budget_seconds=inf", "finite"],
    ),
    "check_reconstruction(target_mse=0)": (
        lambda: check_reconstruction(model=a_keras_model(), target_mse=0),
        ["target_mse=0", "above 0"],
    ),
    "check_reconstruction(seconds=-1)": (lambda: check_reconstruction(seconds=-1), ["seconds=-1", "at least 0"]),
    "check_reconstruction(model='m')": (
        lambda: check_reconstruction(model="m"),
        ["check_reconstruction: model='m'", "keras.Model"],
    ),
    "check_reconstruction(model=None)": (lambda: check_reconstruction(model=None), ["model=None"]),
    "check_reconstruction(n_probe=10**9)": (
        lambda: check_reconstruction(n_probe=10**9),
        ["n_probe=1000000000", "from 1 to 10000"],
    ),
    # diagnosis.py
    "find_gradient_breaks(42, x)": (lambda: workbook.find_gradient_breaks(42, X), ["target=42"]),
    "find_gradient_breaks(lambda x: None, x)": (
        lambda: workbook.find_gradient_breaks(lambda x: None, X),
        ["returned None", "return"],
    ),
    "find_gradient_breaks(f, [])": (lambda: workbook.find_gradient_breaks(ones, []), ["example=[]"]),
    "find_gradient_breaks(f, [nan])": (
        lambda: workbook.find_gradient_breaks(ones, np.array([1.0, math.nan])),
        ["example=", "NaN"],
    ),
    "find_gradient_breaks(f, None)": (
        lambda: workbook.find_gradient_breaks(ones, None),
        ["example=None", "array or tensor"],
    ),
    "find_gradient_breaks(loss=3)": (lambda: workbook.find_gradient_breaks(ones, X, loss=3), ["loss=3"]),
    # models.py, monitoring.py, compare.py
    "autoencoder(seed=2**70)": (lambda: workbook.autoencoder(seed=2**70), ["seed=1180591620717411303424"]),
    "autoencoder(seed=-1)": (lambda: workbook.autoencoder(seed=-1), ["seed=-1"]),
    "autoencoder(seed=1.5)": (lambda: workbook.autoencoder(seed=1.5), ["seed=1.5"]),
    "autoencoder(learning_rate=nan)": (lambda: workbook.autoencoder(learning_rate=math.nan), ["learning_rate=nan"]),
    "autoencoder(learning_rate=0)": (lambda: workbook.autoencoder(learning_rate=0), ["learning_rate=0"]),
    "autoencoder(epochs=3)": (lambda: workbook.autoencoder(epochs=3), ["'epochs'", "'learning_rate'"]),
    "autoencoder(lambda x: x[..., :5])": (
        lambda: workbook.autoencoder(lambda x: x[..., :5]),
        ["bottleneck=", "shape (2, 14, 14, 5)", "(14, 14, 10)"],
    ),
    "autoencoder(lambda x: None)": (lambda: workbook.autoencoder(lambda x: None), ["bottleneck=", "returned None"]),
    "autoencoder(5)": (lambda: workbook.autoencoder(5), ["bottleneck=5"]),
    "autoencoder('nope')": (lambda: workbook.autoencoder("nope"), ["bottleneck='nope'"]),
    "autoencoder(keras.layers.Dense)": (lambda: workbook.autoencoder(keras.layers.Dense), ["bottleneck=", "class"]),
    "GradientNormMonitor(every=0)": (lambda: workbook.GradientNormMonitor(every=0), ["every=0"]),
    "GradientNormMonitor(every=1.5)": (lambda: workbook.GradientNormMonitor(every=1.5), ["every=1.5"]),
    "GradientNormMonitor(live='yes')": (lambda: workbook.GradientNormMonitor(live="yes"), ["live='yes'"]),
    "GradientNormMonitor(refresh_seconds=nan)": (
        lambda: workbook.GradientNormMonitor(refresh_seconds=math.nan),
        ["refresh_seconds=nan"],
    ),
    "compare_bottlenecks(seed=-1)": (lambda: compare(seed=-1), ["seed=-1"]),
    "compare_bottlenecks(seed=2**32)": (lambda: compare(seed=2**32), ["seed=4294967296"]),
    "compare_bottlenecks(x_train=empty)": (
        lambda: compare(x_train=IMAGES[:0]),
        ["x_train=", "(0, 28, 28, 1)", "at least one image"],
    ),
    "compare_bottlenecks(x_train=(n, 28, 28))": (
        lambda: compare(x_train=IMAGES[..., 0]),
        ["x_train=", "(4, 28, 28)", "x[..., None]"],
    ),
    "compare_bottlenecks(x_train=NaN)": (lambda: compare(x_train=NAN_IMAGES), ["x_train=", "x_train[2] holds NaN"]),
    "compare_bottlenecks(x_test=NaN)": (lambda: compare(x_test=NAN_IMAGES), ["x_test=", "x_test[2] holds NaN"]),
    "compare_bottlenecks(x_train=0-255)": (lambda: compare(x_train=BYTE_IMAGES), ["x_train=", "divide by 255"]),
    "compare_bottlenecks(x_train=None)": (lambda: compare(x_train=None), ["x_train=None", "x_train and x_test"]),
    "compare_bottlenecks(x_test=None)": (
        lambda: compare(x_test=None),
        ["compare_bottlenecks: x_test=None", "when x_train is given"],
    ),
    "compare_bottlenecks({'a': 5})": (lambda: compare(bottlenecks={"a": 5}), ["'a'", "bottleneck=5"]),
    "compare_bottlenecks({'a': slice})": (
        lambda: compare(bottlenecks={"ok": None, "a": lambda x: x[..., :5]}),
        ["'a'", "shape (2, 14, 14, 5)"],
    ),
    "compare_bottlenecks({})": (lambda: compare(bottlenecks={}), ["bottlenecks={}"]),
    "compare_bottlenecks(epochs=0)": (lambda: compare(epochs=0), ["epochs=0"]),
    "compare_bottlenecks(epochs=10**9)": (lambda: compare(epochs=10**9), ["epochs=1000000000", "from 1 to 1000"]),
    "compare_bottlenecks(batch_size=-1)": (lambda: compare(batch_size=-1), ["batch_size=-1"]),
    "compare_bottlenecks(batch_size=10**9)": (
        lambda: compare(batch_size=10**9),
        ["batch_size=1000000000", "from 1 to 60000"],
    ),
    "compare_bottlenecks(every=10**9)": (lambda: compare(every=10**9), ["every=1000000000", "from 1 to 100000"]),
    "compare_bottlenecks(n_train='x')": (lambda: compare(n_train="x"), ["n_train='x'", "None (all images)"]),
    "compare_bottlenecks(n_test=0)": (lambda: compare(n_test=0), ["n_test=0"]),
    "compare_bottlenecks(source=None)": (lambda: compare(source=None), ["source=None", "'bundled'"]),
    "compare_bottlenecks(live='yes')": (lambda: compare(live="yes"), ["live='yes'"]),
    "compare_bottlenecks(show='no')": (lambda: compare(show="no"), ["show='no'"]),
    "compare_bottlenecks(n_train=-1)": (lambda: compare(x_train=None, x_test=None, n_train=-1), ["n_train=-1"]),
    # estimators.py, discrete_layers.py
    "sample_latent(seed=-1)": (lambda: workbook.sample_latent(np.zeros(3), seed=-1), ["seed=-1"]),
    "sample_latent(seed=2**32)": (lambda: workbook.sample_latent(np.zeros(3), seed=2**32), ["seed=4294967296"]),
    "sample_latent(seed=1.5)": (lambda: workbook.sample_latent(np.zeros(3), seed=1.5), ["seed=1.5"]),
    "sample_latent(int logits)": (
        lambda: workbook.sample_latent(np.zeros(3, dtype="int64")),
        ["logits=", "int64", "float"],
    ),
    "sample_latent(NaN logits)": (
        lambda: workbook.sample_latent(np.array([0.0, math.nan])),
        ["logits=", "NaN"],
    ),
    "sample_latent('abc')": (lambda: workbook.sample_latent("abc"), ["logits="]),
    "sample_latent(no classes)": (
        lambda: workbook.sample_latent(np.zeros((2, 0)), "categorical"),
        ["logits=", "(2, 0)", "at least one class"],
    ),
    "sample_latent(tau=nan)": (lambda: workbook.sample_latent(np.zeros(3), tau=math.nan), ["tau=nan"]),
    "sample_latent(estimator='x')": (lambda: workbook.sample_latent(np.zeros(3), estimator="x"), ["estimator='x'"]),
    "DiscreteBottleneck(seed=2**32)": (lambda: workbook.DiscreteBottleneck(seed=2**32), ["seed=4294967296"]),
    "DiscreteBottleneck(seed=-1)": (lambda: workbook.DiscreteBottleneck(seed=-1), ["seed=-1", "or None"]),
    "DiscreteBottleneck(tau=inf)": (lambda: workbook.DiscreteBottleneck(tau=math.inf), ["tau=inf"]),
    "DiscreteBottleneck(baseline_decay=1)": (
        lambda: workbook.DiscreteBottleneck(baseline_decay=1),
        ["baseline_decay=1"],
    ),
    "DiscreteBottleneck(latent='gaussian')": (
        lambda: workbook.DiscreteBottleneck(latent="gaussian"),
        ["latent='gaussian'"],
    ),
    "VectorQuantizer(seed=2**32)": (lambda: workbook.VectorQuantizer(seed=2**32), ["seed=4294967296"]),
    "VectorQuantizer(n_codes=10**9)": (lambda: workbook.VectorQuantizer(n_codes=10**9), ["n_codes=1000000000"]),
    "VectorQuantizer(commitment=nan)": (lambda: workbook.VectorQuantizer(commitment=math.nan), ["commitment=nan"]),
    "VectorQuantizer()(None)": (
        lambda: workbook.VectorQuantizer()(None),
        ["VectorQuantizer: inputs.shape=None", "vectors along the last axis"],
    ),
    "VectorQuantizer()(no vector)": (lambda: workbook.VectorQuantizer()(np.zeros((2, 0))), ["inputs.shape=(2, 0)"]),
    "VectorQuantizer()(ints)": (
        lambda: workbook.VectorQuantizer()(np.zeros((2, 3), "int64")),
        ["inputs=<", "dtype int64>", "a float tensor"],
    ),
    "VectorQuantizer()(nan)": (
        lambda: workbook.VectorQuantizer()(np.array([[0.0, math.nan]], "float32")),
        ["VectorQuantizer: inputs=<", "shape (1, 2)", "finite: it holds NaN or infinity"],
    ),
    "VectorQuantizer()(inf)": (
        lambda: workbook.VectorQuantizer()(np.array([[math.inf, 0.0]], "float32")),
        ["VectorQuantizer: inputs=<", "finite: it holds NaN or infinity"],
    ),
    "VectorQuantizer(restart_after=10**9)": (
        lambda: workbook.VectorQuantizer(restart_after=10**9),
        ["restart_after=1000000000", "from 1 to 1000000"],
    ),
    # losses.py: every stand-in, each way it can be handed what it cannot compare
    **LOSS_CALLS,
    # bias_variance.py, estimator_plots.py, estimator_checks.py
    "make_problem(n_latents=20000)": (
        lambda: workbook.make_problem(n_latents=20000),
        ["n_latents=20000", "too many", "4096"],
    ),
    "make_problem(n_latents=0)": (lambda: workbook.make_problem(n_latents=0), ["n_latents=0"]),
    "make_problem(objective=[])": (lambda: workbook.make_problem(objective=[]), ["objective=[]", "'quartic'"]),
    "make_problem(n_classes=1)": (lambda: workbook.make_problem("categorical", n_classes=1), ["n_classes=1"]),
    "make_problem(n_classes=10**9)": (
        lambda: workbook.make_problem("categorical", n_classes=10**9),
        ["n_classes=1000000000"],
    ),
    "make_problem(n_outputs=10**9)": (lambda: workbook.make_problem(n_outputs=10**9), ["n_outputs=1000000000"]),
    "make_problem(seed=2**32)": (lambda: workbook.make_problem(seed=2**32), ["seed=4294967296"]),
    "make_problem(latent='x')": (lambda: workbook.make_problem("x"), ["latent='x'"]),
    "measure_bias_and_variance(seed=-1)": (
        lambda: workbook.measure_bias_and_variance("straight_through", seed=-1),
        ["seed=-1"],
    ),
    "measure_bias_and_variance(seed=2**32)": (
        lambda: workbook.measure_bias_and_variance("straight_through", seed=2**32),
        ["seed=4294967296"],
    ),
    "measure_bias_and_variance(n_samples=10**9)": (
        lambda: workbook.measure_bias_and_variance("straight_through", n_samples=10**9),
        ["n_samples=1000000000"],
    ),
    "measure_bias_and_variance(problem=5)": (
        lambda: workbook.measure_bias_and_variance("straight_through", problem=5),
        ["problem=5"],
    ),
    "measure_bias_and_variance(tau=nan)": (
        lambda: workbook.measure_bias_and_variance("gumbel_softmax", tau=math.nan),
        ["tau=nan"],
    ),
    "measure_bias_and_variance(estimator='x')": (lambda: workbook.measure_bias_and_variance("x"), ["estimator='x'"]),
    "sample_latent(categorical, estimator='disarm')": (
        lambda: workbook.sample_latent(np.zeros((2, 3)), "categorical", "disarm"),
        ["latent='categorical'", "estimator='disarm'", "latent='bernoulli'"],
    ),
    "sample_latent(estimator='disarm', samples=3)": (
        lambda: workbook.sample_latent(np.zeros(3), estimator="disarm", samples=3),
        ["samples=3", "samples=None"],
    ),
    "DiscreteBottleneck(categorical, estimator='disarm')": (
        lambda: workbook.DiscreteBottleneck("categorical", "disarm"),
        ["latent='categorical'", "estimator='disarm'"],
    ),
    "BiasVariance.cosine(batch_size=0)": (
        lambda: workbook.measure_bias_and_variance("straight_through", n_samples=4).cosine(0),
        ["batch_size=0"],
    ),
    "rank_estimators(problems=5)": (
        lambda: __import__("workbook.estimators.ranking").estimators.ranking.rank_estimators(5),
        ["problems=5", "list of DiscreteProblem"],
    ),
    "rank_estimators(batch_size=0)": (
        lambda: __import__("workbook.estimators.ranking").estimators.ranking.rank_estimators(
            [workbook.make_problem()], batch_size=0
        ),
        ["batch_size=0"],
    ),
    "code_rate(batch_size=0)": (
        lambda: __import__("workbook.estimators.rate").estimators.rate.code_rate(None, np.zeros((2, 28, 28, 1)), 0),
        ["batch_size=0"],
    ),
    "code_rate(one image)": (
        lambda: __import__("workbook.estimators.rate").estimators.rate.code_rate(None, np.zeros((1, 28, 28, 1))),
        ["x=", "at least 2 images"],
    ),
    "code_rate(no bottleneck)": (
        lambda: __import__("workbook.estimators.rate").estimators.rate.code_rate(
            workbook.autoencoder(), np.zeros((2, 28, 28, 1))
        ),
        ["model=", "bottleneck"],
    ),
    "measure_estimators(taus=[])": (lambda: workbook.measure_estimators(taus=[]), ["taus=[]"]),
    "measure_estimators(taus=[1, nan])": (
        lambda: workbook.measure_estimators(taus=[1.0, math.nan]),
        ["measure_estimators: taus=[1.0, nan]", "temperatures in (0, 100]", "taus[1]=nan"],
    ),
    "measure_estimators(problem=5)": (
        lambda: workbook.measure_estimators(problem=5),
        ["measure_estimators: problem=5", "DiscreteProblem", "make_problem"],
    ),
    "measure_estimators(taus=0.5)": (lambda: workbook.measure_estimators(taus=0.5), ["taus=0.5"]),
    "measure_estimators(n_samples=1)": (lambda: workbook.measure_estimators(n_samples=1), ["n_samples=1"]),
    "measure_estimators(seed=-1)": (lambda: workbook.measure_estimators(seed=-1), ["seed=-1"]),
    "plot_bias_variance([])": (lambda: workbook.plot_bias_variance([]), ["results=[]", "non-empty list"]),
    "plot_bias_variance([1])": (lambda: workbook.plot_bias_variance([1]), ["results=[1]", "BiasVariance"]),
    "plot_bias_variance(None)": (lambda: workbook.plot_bias_variance(None), ["plot_bias_variance: results=None"]),
    "plot_bias_variance(one result)": (
        lambda: workbook.plot_bias_variance(a_measured()),
        ["results=BiasVariance(", "list of BiasVariance"],
    ),
    "plot_bias_variance(tau=inf)": (
        lambda: workbook.plot_bias_variance([a_measured(tau=math.inf)]),
        ["results=", "results[0] has tau=inf"],
    ),
    "plot_bias_variance(tau=0)": (
        lambda: workbook.plot_bias_variance([a_measured(), a_measured(tau=0.0)]),
        ["results[1] has tau=0.0"],
    ),
    "plot_bias_variance(variance=nan)": (
        lambda: workbook.plot_bias_variance([a_measured(variance=math.nan)]),
        ["results[0] has", "variance=nan"],
    ),
    "plot_bias_variance(title=5)": (
        lambda: workbook.plot_bias_variance([a_measured()], title=5),
        ["title=5", "string"],
    ),
    "plot_bias_variance(batch_size=10**9)": (
        lambda: workbook.plot_bias_variance([a_measured()], batch_size=10**9),
        ["batch_size=1000000000", "from 1 to 1000000"],
    ),
    "comparison_figures(n_images=0)": (
        lambda: comparison_figures(RUNS, IMAGES, n_images=0),
        ["n_images=0", "whole number"],
    ),
    "comparison_figures(n_images=10**9)": (
        lambda: comparison_figures(RUNS, IMAGES, n_images=10**9),
        ["n_images=1000000000", "from 1 to 32"],
    ),
    "comparison_figures(None, x)": (lambda: comparison_figures(None, IMAGES), ["runs=None", "BottleneckRun"]),
    "comparison_figures({}, x)": (lambda: comparison_figures({}, IMAGES), ["runs={}", "non-empty"]),
    "comparison_figures(runs, None)": (lambda: comparison_figures(RUNS, None), ["x_test=None"]),
    "plot_bias_variance(batch_size=0)": (
        lambda: workbook.plot_bias_variance([SimpleNamespace(bias_norm=1.0, variance=1.0)], batch_size=0),
        ["batch_size=0", "whole number"],
    ),
    "check_gumbel_softmax_st(None)": (lambda: check_gumbel(fn=None), ["fn=None"]),
    "check_gumbel_softmax_st(taus=[])": (lambda: check_gumbel(taus=[]), ["taus=[]", "non-empty"]),
    "check_gumbel_softmax_st(taus=[0])": (lambda: check_gumbel(taus=[0]), ["taus=[0]", "taus[0]=0 is not"]),
    "check_gumbel_softmax_st(taus=[nan])": (lambda: check_gumbel(taus=[math.nan]), ["taus=[nan]", "taus[0]=nan"]),
    "check_gumbel_softmax_st(taus=0.5)": (lambda: check_gumbel(taus=0.5), ["taus=0.5"]),
    "check_gumbel_softmax_st(n_samples=0)": (lambda: check_gumbel(n_samples=0), ["n_samples=0"]),
    "check_gumbel_softmax_st(n_samples=10**9)": (lambda: check_gumbel(n_samples=10**9), ["n_samples=1000000000"]),
    "check_gumbel_softmax_st(seed=-1)": (lambda: check_gumbel(seed=-1), ["seed=-1"]),
    "check_gumbel_softmax_st(atol=nan)": (lambda: check_gumbel(atol=math.nan), ["atol=nan"]),
    # quantisation/ (07)
    "QuantDense(kernel_quantizer='sgn')": (
        lambda: workbook.QuantDense(3, kernel_quantizer="sgn"),
        ["QuantDense: kernel_quantizer='sgn'", "sign_clipped_ste"],
    ),
    "QuantConv2D(input_quantizer=2)": (
        lambda: workbook.QuantConv2D(3, 3, input_quantizer=2),
        ["QuantConv2D: input_quantizer=2", "a quantiser layer"],
    ),
    "WeightClip(-1)": (lambda: workbook.WeightClip(-1), ["WeightClip: clip_value=-1", "(0, 1e6]"]),
    "ActivationQuantizer(0)": (lambda: workbook.ActivationQuantizer(0), ["bits=0", "from 1 to 16"]),
    "ActivationQuantizer(2, 'tanh')": (
        lambda: workbook.ActivationQuantizer(2, "tanh"),
        ["straight_through='tanh'", "clipped_relu"],
    ),
    "LearnedStepQuantizer(1, role='weights')": (
        lambda: workbook.LearnedStepQuantizer(1, role="weights"),
        ["bits=1", "from 2 to 16"],
    ),
    "LearnedStepQuantizer(role='bias')": (lambda: workbook.LearnedStepQuantizer(2, role="bias"), ["role='bias'"]),
    "LearnedStepQuantizer(gradient_scale='yes')": (
        lambda: workbook.LearnedStepQuantizer(2, gradient_scale="yes"),
        ["gradient_scale='yes'", "True or False"],
    ),
    "LearnedStepQuantizer(initial_step=0)": (
        lambda: workbook.LearnedStepQuantizer(2, initial_step=0),
        ["initial_step=0", "or None"],
    ),
    "memory_summary('model')": (lambda: workbook.memory_summary("model"), ["memory_summary: model='model'"]),
    "quantised_mlp(hidden=())": (lambda: workbook.quantised_mlp(hidden=()), ["hidden=()", "positive whole numbers"]),
    "train_classifier(epochs=0)": (
        lambda: workbook.train_classifier(None, None, None, None, None, epochs=0),
        ["train_classifier: epochs=0"],
    ),
    "step_gradient_ratios(float model)": (
        lambda: workbook.step_gradient_ratios(workbook.quantised_mlp(hidden=(4,)), None, None),
        ["step_gradient_ratios: model=", "LearnedStepQuantizer"],
    ),
    "check_learned_step(None)": (lambda: workbook.check_learned_step(None), ["fn=None"]),
    "check_learned_step(bits=(9,))": (lambda: workbook.check_learned_step(lambda *a: a[0], bits=(9,)), ["bits=(9,)"]),
    # spiking networks (08)
    "random_spike_patterns(rate=0)": (lambda: workbook.random_spike_patterns(rate=0), ["rate=0", "(0, 1]"]),
    "randman_spikes(n_per_class=0)": (lambda: workbook.randman_spikes(n_per_class=0), ["n_per_class=0"]),
    "spiking_classifier(n_hidden=0)": (
        lambda: workbook.spiking_classifier(50, 100, 2, n_hidden=0),
        ["spiking_classifier: n_hidden=0", "whole number"],
    ),
    "spiking_classifier(weight_scale=0)": (
        lambda: workbook.spiking_classifier(50, 100, 2, weight_scale=0),
        ["weight_scale=0", "greater than 0"],
    ),
    "plot_spikes(1-D)": (lambda: workbook.plot_spikes([1, 2], [1], [1]), ["plot_spikes: inputs=", "(steps, neurons)"]),
    "plot_sweep([])": (lambda: workbook.plot_sweep([]), ["plot_sweep: accuracies=[]", "{steepness: {learning_rate"]),
    "plot_growing_peak(one variant)": (
        lambda: workbook.plot_growing_peak({("a", "b"): 0.5}, ["5c"], "doi.org/x"),
        ["plot_growing_peak: accuracies=", "two variants"],
    ),
}


@pytest.mark.parametrize("call, fragments", list(BAD_CALLS.values()), ids=list(BAD_CALLS))
def test_a_bad_call_is_refused_naming_the_argument_before_anything_is_printed(call, fragments, capsys):
    with pytest.raises(ValueError) as refused:
        call()
    message = str(refused.value)
    for fragment in fragments:
        assert fragment in message, message
    assert capsys.readouterr().out == "", "a verdict was printed before the refusal"


def test_the_finder_says_a_function_returned_none_not_that_its_output_ignores_x():
    with pytest.raises(ValueError) as refused:
        workbook.find_gradient_breaks(lambda x: None, X)
    assert "does not depend" not in str(refused.value)


@pytest.mark.parametrize("seed", [0, 2**32 - 1])
def test_every_seeded_function_takes_both_ends_of_the_seed_range(seed):
    # The same rule everywhere: 0 and 2**32 - 1 both pass, as NumPy and TensorFlow take them.
    workbook.sample_latent(np.zeros(3), seed=seed)
    workbook.make_problem(n_latents=2, seed=seed)
    workbook.DiscreteBottleneck(seed=seed)
    workbook.VectorQuantizer(seed=seed)
    assert workbook.load_mnist(n_train=10, n_test=10, source="bundled", seed=seed)[0][0].shape == (10, 28, 28, 1)


def test_a_bottleneck_function_shaped_like_its_input_is_accepted_and_one_that_raises_is_left_to_fit():
    model = workbook.autoencoder(lambda x: keras.ops.round(x))
    assert model.get_layer("bottleneck").compute_output_shape((None, 14, 14, 10)) == (None, 14, 14, 10)

    def unfinished(x):
        raise NotImplementedError()

    workbook.autoencoder(unfinished)  # fit shows the student's own error, as before


def test_the_names_checked_here_are_every_public_name_that_takes_arguments():
    # A new public function must get rows above: the table names each one it covers.
    without_arguments = {"environment_report", "check_versions", "SURROGATES", "GradientReport", "Finding"}
    # Built by workbook.autoencoder; its arguments are a Sequential's.
    without_arguments.add("ScoreFunctionAutoencoder")
    without_arguments |= {"KernelSignFlips", "STRAIGHT_THROUGH_CLIPS"}  # a callback of no arguments, a tuple (07)
    covered = {row.split("(")[0] for row in BAD_CALLS} | {"SURROGATES"}  # through with_params
    assert set(workbook.__all__) - without_arguments - covered == set()
    assert "layers.Surrogate" in covered
    # ... and every function of workbook.losses.
    assert {f"losses.{name}" for name in workbook.losses.__all__} <= covered


def printed(call):
    """(what ``call`` returned, what it printed): a self-check's whole verdict."""
    text = io.StringIO()
    with redirect_stdout(text):
        result = call()
    return result, text.getvalue()


def after_setup(seed):
    import tensorflow as tf

    workbook.setup(seed=seed, quiet=False)
    # tf.random, not keras.random: Keras 3.8 does not restart its own generator on a new seed.
    return random.random(), np.random.random(), float(tf.random.uniform(()))


def trained(seed):
    runs = compare(seed=seed, epochs=1, batch_size=2, every=1)
    return runs["identity"].model.get_weights(), runs["identity"].history["loss"]


def made(seed):
    problem = workbook.make_problem(n_latents=3, seed=seed)
    return problem.logits, problem.weights, problem.target


def codebook(seed):
    layer = workbook.VectorQuantizer(n_codes=4, seed=seed)
    layer.build((None, 3))
    return layer.codebook.numpy()


# Every public function or layer that takes a seed -> what it gives for that seed. Each name
# the table above refuses a bad seed of must be here (the last test below checks that).
SEEDED = {
    "setup": after_setup,
    "load_mnist": lambda seed: workbook.load_mnist(n_train=10, n_test=10, source="bundled", seed=seed)[0][0],
    "sample_latent": lambda seed: workbook.sample_latent(np.zeros(8, "float32"), seed=seed)[0],
    "DiscreteBottleneck": lambda seed: workbook.DiscreteBottleneck(seed=seed)(
        np.zeros((2, 8), "float32"), training=True
    ),
    "VectorQuantizer": codebook,
    "autoencoder": lambda seed: workbook.autoencoder(seed=seed).get_weights(),
    "make_problem": made,
    "measure_bias_and_variance": lambda seed: (
        workbook.measure_bias_and_variance("gumbel_softmax", n_samples=8, seed=seed).mean
    ),
    "measure_estimators": lambda seed: [
        r.mean for r in workbook.measure_estimators(taus=(1.0,), n_samples=4, seed=seed)
    ],
    "check_surrogate": lambda seed: printed(lambda: check_surrogate(derivative=keras.ops.sign, n_samples=8, seed=seed)),
    "check_quantizer": lambda seed: printed(lambda: workbook.check_quantizer(keras.ops.sign, n_points=8, seed=seed)),
    "check_gradient_fix": lambda seed: printed(lambda: workbook.check_gradient_fix(keras.ops.sign, ones, seed=seed)),
    "check_gumbel_softmax_st": lambda seed: printed(lambda: check_gumbel(taus=[1.0], n_samples=8, seed=seed)),
    "compare_bottlenecks": trained,
}


def assert_same(a, b):
    """Nested tuples/lists of arrays and numbers (and printed text), equal to the last bit."""
    if isinstance(a, str):
        assert a == b
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@functools.cache
def with_python_seed(name):
    """What ``name`` gives for the Python int 3, the answer each NumPy integer type is compared with."""
    return SEEDED[name](3)


@pytest.mark.parametrize("name", list(SEEDED))
@pytest.mark.parametrize("numpy_int", [np.int64, np.uint32, np.int8], ids=lambda t: t.__name__)
def test_a_numpy_integer_seed_gives_exactly_what_the_equal_python_int_gives(name, numpy_int):
    assert_same(SEEDED[name](numpy_int(3)), with_python_seed(name))


@pytest.mark.parametrize(
    "name", ["load_mnist", "sample_latent", "DiscreteBottleneck", "VectorQuantizer", "make_problem"]
)
def test_the_seed_comparison_above_can_fail_another_seed_gives_another_result(name):
    with pytest.raises(AssertionError):
        assert_same(SEEDED[name](4), with_python_seed(name))


def test_every_function_refused_a_bad_seed_above_is_checked_with_a_numpy_seed():
    refused = {row.split("(")[0] for row in BAD_CALLS if "seed=" in row}
    assert refused - set(SEEDED) == set()


LOAD_AFTER_IMPORT_WORKBOOK = """\
import sys

import keras

import workbook

for path in sys.argv[1:]:
    try:
        keras.saving.load_model(path)
    except TypeError as error:
        print("refused:", str(error).split(". ")[0])
import workbook.losses

for path in sys.argv[1:]:
    print("loaded:", keras.saving.load_model(path).loss.__name__)
"""


def test_a_model_saved_with_a_stand_in_loss_says_which_module_to_import_and_then_loads(tmp_path):
    # A fresh process: only `import workbook`, which registers nothing. Keras's own refusal then
    # names the module to import, and a file saved under the former name ("workbook>") loads too.
    import json
    import subprocess
    import sys
    import zipfile

    from notebook_runner import FRESH_PYTHON_SECONDS, clean_environment

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="sgd", loss=workbook.losses.soft_iou)
    model.save(tmp_path / "now.keras")
    with zipfile.ZipFile(tmp_path / "now.keras") as saved, zipfile.ZipFile(tmp_path / "before.keras", "w") as before:
        for item in saved.infolist():
            content = saved.read(item)
            if item.filename == "config.json":
                config = json.loads(content)
                assert config["compile_config"]["loss"]["config"] == "workbook.losses>soft_iou"
                config["compile_config"]["loss"]["config"] = "workbook>soft_iou"
                content = json.dumps(config).encode()
            before.writestr(item, content)
    done = subprocess.run(
        [sys.executable, "-c", LOAD_AFTER_IMPORT_WORKBOOK, str(tmp_path / "now.keras"), str(tmp_path / "before.keras")],
        capture_output=True,
        text=True,
        env=clean_environment(tmp_path) | {"TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout=FRESH_PYTHON_SECONDS,
    )
    assert done.stdout.splitlines() == [
        "refused: Could not locate function 'workbook.losses>soft_iou'",
        "refused: Could not locate function 'workbook>soft_iou'",
        "loaded: soft_iou",
        "loaded: soft_iou",
    ], done.stdout + done.stderr[-2000:]
