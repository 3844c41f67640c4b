"""Forward one function, backpropagate another: surrogate gradients.

Introduced in 01_forward_and_backward.ipynb (``surrogate``, ``straight_through``)
and 02_surrogate_zoo.ipynb (the ``SURROGATES`` catalog). Every function here
uses ``keras.ops`` so that it keeps the input's dtype (float16, float32 or
float64) and works eagerly, in ``tf.function`` and inside any Keras model.

This module is the maths only. Each entry is one ``_entry`` call: its forward, derivative,
formulas (LaTeX text, filled in by :mod:`workbook.surrogates.formulas`) and parameters, each
``Param`` carrying its explorer slider's range; the symbolic Keras operation is in
:mod:`workbook.surrogates.operation`.
"""

import copy
import math
import numbers
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from workbook.core.arguments import check_callable, is_number, refuse
from workbook.core.gradients import value_and_gradient
from workbook.surrogates.formulas import FLOOR, SIGN, STEP, function_formula, render, times
from workbook.surrogates.operation import SurrogateOperation

__all__ = ["surrogate", "straight_through", "SURROGATES", "SurrogateGradient", "Param", "smooth_floor"]


@dataclass(frozen=True)
class Param:
    """One parameter of a catalog surrogate: its default and the values allowed.

    Introduced in 02_surrogate_zoo.ipynb (the explorer builds its sliders from these).
    """

    default: float
    low: float
    high: float
    integer: bool = False
    low_inclusive: bool = False
    slider: tuple | None = None  # (low, high, step): the part of the allowed values worth sliding through

    def allowed(self):
        opening = "[" if self.low_inclusive else "("
        kind = "a whole number" if self.integer else "a number"
        return f"{kind} in {opening}{self.low:g}, {self.high:g}]"

    def check(self, owner, name, value):
        in_range = is_number(value, self.low, self.high, include_low=self.low_inclusive)
        if not in_range or (self.integer and not float(value).is_integer()):
            refuse(name, value, f"{self.allowed()} (default {self.default!r})", owner)
        return int(value) if self.integer else float(value)


class SurrogateGradient:
    """A forward operation paired with the derivative that backprop should use instead.

    Introduced in 01_forward_and_backward.ipynb. Calling the object on ``x``
    returns ``forward(x)`` exactly; backprop through the result multiplies the
    upstream gradient by ``derivative(x)`` elementwise. Built by
    :func:`surrogate`, :func:`straight_through` or taken from ``SURROGATES``.

    Attributes
    ----------
    name : str
        The catalog key (or the name you gave).
    params : dict
        The parameter values; change them with :meth:`with_params`.
    formula, forward_formula : str
        LaTeX (matplotlib mathtext) for the derivative and the forward, for legends.
    reference : str
        Where the derivative was published.
    """

    def __init__(
        self,
        forward,
        derivative,
        name=None,
        *,
        params=None,
        spec=None,
        formula=None,
        forward_formula=None,
        reference="",
        doc=None,
    ):
        check_callable("forward", forward, "a function of x, e.g. keras.ops.sign")
        check_callable("derivative", derivative, "a function of x, e.g. keras.ops.ones_like")
        if name is not None and not isinstance(name, str):
            refuse("name", name, "a string or None")
        self._forward, self._derivative = forward, derivative
        self.name = name or getattr(forward, "__name__", "surrogate").strip("<>")
        self._spec = dict(spec or {})
        self.params = {key: p.default for key, p in self._spec.items()}
        self.params.update(params or {})
        self._formula, self._forward_formula = formula, forward_formula
        self.reference = reference
        if doc:
            self.__doc__ = doc  # a catalog entry's own formulas and citation
        self._none_cache = None

    # --- the three functions a student compares ------------------------------
    def forward(self, x):
        """The plain forward operation (its own autodiff gradient, nothing replaced)."""
        return self._forward(ops.convert_to_tensor(x), **self.params)

    def derivative(self, x):
        """The surrogate derivative that backprop uses, as a tensor shaped like ``x``."""
        return self._checked_derivative(ops.convert_to_tensor(x))

    def true_derivative(self, x):
        """What autodiff of the forward alone gives (zeros where TensorFlow gives None).

        See :attr:`true_derivative_is_none` to tell "no gradient" from "zero gradient".
        """
        x = tf.convert_to_tensor(ops.convert_to_tensor(x))
        _, grad = value_and_gradient(self.forward, x)
        return tf.zeros_like(x) if grad is None else grad

    @property
    def true_derivative_is_none(self):
        """True if TensorFlow has no gradient at all for the forward (floor, round, casts)."""
        if self._none_cache is None:
            _, grad = value_and_gradient(self.forward, tf.constant([-1.7, -0.3, 0.6, 2.4]))
            self._none_cache = grad is None
        return self._none_cache

    # --- parameters and labels ------------------------------------------------
    def with_params(self, **params):
        """A copy with some parameters changed, e.g. ``SURROGATES["step_atan"].with_params(alpha=4)``."""
        checked, owner = dict(self.params), f"surrogate {self.name!r}"
        for key, value in params.items():
            if key not in self._spec:
                known = ", ".join(map(repr, sorted(self._spec)))
                refuse("parameter", key, f"one of {known}" if known else "left out: it has no parameters", owner)
            checked[key] = self._spec[key].check(owner, key, value)
        # A shallow copy shares the functions, formulas and parameter specs, which never change; it is
        # not dataclasses.replace because the constructor checks a student's functions, and forward and
        # derivative are methods here, so the class cannot be a dataclass without a new constructor.
        changed = copy.copy(self)
        changed.params, changed._none_cache = checked, None
        return changed

    @property
    def param_specs(self):
        """Parameter name -> :class:`Param` (default and allowed values)."""
        return dict(self._spec)

    @property
    def formula(self):
        """LaTeX for the surrogate derivative, with the current parameters filled in."""
        return render(self._formula, self.params) or function_formula(self.name, prime="'")

    @property
    def forward_formula(self):
        """LaTeX for the forward, with the current parameters filled in."""
        return render(self._forward_formula, self.params) or function_formula(self.name)

    def same_definition(self, other):
        """True if ``other`` is this surrogate with (possibly) other parameters."""
        return (
            isinstance(other, SurrogateGradient)
            and other._forward is self._forward
            and other._derivative is self._derivative
        )

    def __repr__(self):
        args = "".join(f", {key}={value!r}" for key, value in self.params.items())
        return f"<surrogate {self.name!r}{args}>"

    # --- applying it ------------------------------------------------------------
    def __call__(self, x):
        if isinstance(x, keras.KerasTensor):
            # Functional-model construction: record an operation, run it later on real tensors.
            return SurrogateOperation(self)(x)
        return self._apply(x)

    def _apply(self, x):
        owner = f"surrogate {self.name!r}"
        try:
            tensor = tf.convert_to_tensor(ops.convert_to_tensor(x))
        except (TypeError, ValueError):
            refuse("x", x, "a float tensor or array, e.g. keras.ops.linspace(-2.0, 2.0, 5)", owner)
        if not tensor.dtype.is_floating:
            refuse(
                "x",
                x,
                f"a floating-point tensor, not {tensor.dtype.name}: gradients only flow through floats. "
                f"Cast first: keras.ops.cast(x, 'float32')",
                owner,
            )
        x = tensor

        # On TensorFlow, keras.ops.custom_gradient is exactly tf.custom_gradient; calling it
        # directly keeps the grad(upstream) signature unambiguous (float16/32/64 are tested).
        @tf.custom_gradient
        def apply_surrogate(x):
            y = tf.convert_to_tensor(self._forward(x, **self.params))
            _check_like(self.name, "forward", x, y)

            def grad(upstream):
                return upstream * self._checked_derivative(x)

            return y, grad

        return apply_surrogate(x)

    def _checked_derivative(self, x):
        d = self._derivative(x, **self.params)
        # A plain number means "that value everywhere": any real, nan and inf included, so
        # this is not arguments.is_number (which refuses nan and inf).
        if isinstance(d, numbers.Real) and not isinstance(d, bool):
            return tf.fill(tf.shape(x), tf.cast(d, x.dtype))
        if isinstance(d, np.ndarray):
            d = tf.convert_to_tensor(d)
        _check_like(self.name, "derivative", x, d)
        return d


def _check_like(name, role, x, result):
    """ValueError unless ``result`` has the shape and dtype of ``x`` (as far as known statically)."""
    shape, dtype = getattr(result, "shape", None), getattr(result, "dtype", None)
    same_shape = (
        shape is not None
        and len(shape) == len(x.shape)
        and all(a is None or b is None or a == b for a, b in zip(x.shape, shape, strict=True))
    )
    same_dtype = dtype is not None and tf.as_dtype(dtype) == x.dtype
    if not (same_shape and same_dtype):
        got = (
            f"shape {tuple(shape)} dtype {getattr(dtype, 'name', dtype)}"
            if shape is not None
            else f"{type(result).__name__} {result!r}"
        )
        raise ValueError(
            f"surrogate {name!r}: {role} returned {got} for an input of shape "
            f"{tuple(x.shape)} dtype {x.dtype.name}. It must return a tensor shaped like its input "
            f"with the same dtype, e.g. keras.ops.ones_like(x) or keras.ops.cast(..., x.dtype)."
        )


def surrogate(forward, derivative, name=None, formula=None):
    """Forward ``forward(x)``; backpropagate ``upstream * derivative(x)`` instead of its own gradient.

    Introduced in 01_forward_and_backward.ipynb.

    Parameters
    ----------
    forward : callable
        The operation to run, e.g. ``keras.ops.sign``. Must return a tensor shaped like ``x``.
    derivative : callable
        ``derivative(x)`` returns the elementwise derivative backprop should use, a tensor
        with the shape and dtype of ``x`` (or a plain number, meaning that value everywhere).
        Anything else raises ``ValueError`` when the gradient is computed.
    name : str, optional
        A label for messages and plots (default: the forward's ``__name__``).
    formula : str, optional
        LaTeX for the derivative, used in plot legends.

    Returns
    -------
    SurrogateGradient
        A callable ``g`` with ``g(x) == forward(x)`` and ``dL/dx = dL/dg * derivative(x)``.
        Use it in ``tf.function``, in ``keras.layers.Lambda`` or on a functional model's
        tensors; to save a model, use :class:`workbook.surrogates.layer.Surrogate` instead.
    """
    if formula is not None and not isinstance(formula, str):
        refuse("formula", formula, "a string (LaTeX for the derivative) or None")
    return SurrogateGradient(forward, derivative, name, formula=formula)


def straight_through(forward, name=None):
    """The straight-through estimator: forward ``forward(x)``, backpropagate a derivative of 1.

    Introduced in 01_forward_and_backward.ipynb; ``straight_through(keras.ops.sigmoid)`` is
    "forward a sigmoid, backpropagate 1" (Bengio, Leonard & Courville 2013).
    """
    if name is not None and not isinstance(name, str):
        refuse("name", name, "a string or None", owner="straight_through")
    label = getattr(forward, "__name__", "forward").strip("<>")
    return SurrogateGradient(
        forward,
        _ones_like,
        name or f"straight_through_{label}",
        formula="$1$",
        forward_formula=function_formula(label),
    )


# --- the catalog: forwards and published derivatives -----------------------------


def _ones_like(x, **_):
    return ops.ones_like(x)


def _sign(x, **_):
    return ops.sign(x)


def _heaviside(x, **_):
    return ops.cast(ops.greater(x, 0), x.dtype)


def _round(x, **_):
    return ops.round(x)


def _floor(x, **_):
    return ops.floor(x)


def _sigmoid(x, **_):
    return ops.sigmoid(x)


def _cast_int(x, scale=1.0, **_):
    # A real cast (like a student's Lambda does), so TensorFlow has no gradient for it.
    return ops.divide(ops.cast(ops.cast(ops.multiply(x, scale), "int64"), x.dtype), scale)


def _clipped_ones(x, clip=1.0):
    return ops.cast(ops.less_equal(ops.abs(x), clip), x.dtype)


def _approx_sign_derivative(x):
    return ops.where(ops.less_equal(ops.abs(x), 1), 2 - 2 * ops.abs(x), ops.zeros_like(x))


def _swish_sign_derivative(x, beta=5.0):
    z = ops.multiply(x, beta)
    # 1 / (1 + cosh z) rewritten as 2 e^-|z| / (1 + e^-|z|)^2, which never overflows.
    e = ops.exp(-ops.abs(z))
    return beta * (2 - z * ops.tanh(z / 2)) * (2 * e / ops.square(1 + e))


def _fast_sigmoid_derivative(x, slope=25.0):
    return 1 / ops.square(1 + slope * ops.abs(x))


def _sigmoid_derivative(x, slope=25.0):
    # s (1 - s) written as sigmoid(z) sigmoid(-z): 1 - s would lose every digit in the tails.
    return slope * ops.sigmoid(slope * x) * ops.sigmoid(-slope * x)


def _atan_derivative(x, alpha=2.0):
    return (alpha / 2) / (1 + ops.square((math.pi / 2 * alpha) * x))


def smooth_floor(x, depth=3):
    """The smooth staircase ``a(a(...a(x))) - 1/2`` (``depth`` times), ``a(x) = x + sin(2 pi x) / (2 pi)``.

    Introduced in 01_forward_and_backward.ipynb, as a *forward* function: differentiable
    everywhere, but not ``floor``; ``SURROGATES["floor_smooth"]`` backpropagates its
    derivative while forwarding the true ``floor``.
    """
    u = ops.convert_to_tensor(x)
    for _ in range(depth):
        u = u + ops.sin(2 * math.pi * u) / (2 * math.pi)
    return u - 0.5


def _smooth_floor_derivative(x, depth=3):
    two_pi = 2 * math.pi
    u, d = x, ops.ones_like(x)
    for _ in range(depth):  # chain rule through a(a(...a(x))): a'(u) = 1 + cos(2 pi u)
        d = d * (1 + ops.cos(two_pi * u))
        u = u + ops.sin(two_pi * u) / two_pi
    return d


_BENGIO = (
    "Bengio, Leonard & Courville (2013), Estimating or propagating gradients "
    "through stochastic neurons for conditional computation, arXiv:1308.3432"
)


def _entry(name, doc, forward, derivative, reference, formulas, **spec):
    """One catalog entry, registered in one call: its functions, source, formulas and parameters.

    ``formulas`` is (the derivative's LaTeX, the forward's), each a string or a function of
    the parameters; a :class:`Param` carries the values allowed and the explorer's slider.
    """
    doc = f"{doc}\n\n    Source: {reference}.\n    Introduced in 02_surrogate_zoo.ipynb."
    formula, forward_formula = formulas
    return name, SurrogateGradient(
        forward,
        derivative,
        name,
        spec=spec,
        formula=formula,
        forward_formula=forward_formula,
        reference=reference,
        doc=doc,
    )


SURROGATES = dict(
    [
        _entry(
            "sign_ste",
            "sign(x) (0 at 0); derivative 1, the straight-through estimator.",
            _sign,
            _ones_like,
            _BENGIO,
            formulas=("$1$", SIGN),
        ),
        _entry(
            "sign_clipped_ste",
            "sign(x); derivative 1 where |x| <= clip, else 0 (hardtanh's derivative).",
            _sign,
            _clipped_ones,
            "Courbariaux, Hubara et al. (2016), Binarized Neural Networks, arXiv:1602.02830",
            formulas=(lambda p: rf"$[\,|x| \leq {p['clip']:g}\,]$", SIGN),
            clip=Param(1.0, 0.0, 100.0, slider=(0.1, 3.0, 0.1)),
        ),
        _entry(
            "sign_approx",
            "sign(x); derivative 2 - 2|x| where |x| <= 1, else 0.",
            _sign,
            _approx_sign_derivative,
            "Liu et al. (2018), Bi-Real Net, ECCV, arXiv:1808.00278",
            formulas=(r"$(2 - 2|x|)\,[\,|x| \leq 1\,]$", SIGN),
        ),
        _entry(
            "sign_swish",
            "sign(x); derivative beta (2 - beta x tanh(beta x / 2)) / (1 + cosh(beta x)).",
            _sign,
            _swish_sign_derivative,
            "Darabi et al. (2018), BNN+: Improved binary network training, arXiv:1812.11800",
            formulas=(
                lambda p: (
                    rf"$\dfrac{{{p['beta']:g}\,(2 - {p['beta']:g}x\,\tanh({p['beta']:g}x/2))}}"
                    rf"{{1 + \cosh({p['beta']:g}x)}}$"
                ),
                SIGN,
            ),
            beta=Param(5.0, 0.0, 100.0, slider=(0.5, 20.0, 0.5)),
        ),
        _entry(
            "step_fast_sigmoid",
            "Heaviside step [x > 0]; derivative 1 / (1 + slope |x|)^2 (the fast sigmoid's).",
            _heaviside,
            _fast_sigmoid_derivative,
            "Zenke & Ganguli (2018), SuperSpike, Neural Computation 30(6)",
            formulas=(lambda p: rf"$\dfrac{{1}}{{(1 + {p['slope']:g}|x|)^2}}$", STEP),
            slope=Param(25.0, 0.0, 1000.0, slider=(1.0, 100.0, 1.0)),
        ),
        _entry(
            "step_sigmoid",
            "Heaviside step [x > 0]; derivative slope s (1 - s) with s = sigmoid(slope x).",
            _heaviside,
            _sigmoid_derivative,
            "Neftci, Mostafa & Zenke (2019), Surrogate gradient learning in spiking neural "
            "networks, IEEE Signal Processing Magazine 36(6)",
            formulas=(lambda p: rf"${p['slope']:g}\,\sigma({p['slope']:g}x)\,(1 - \sigma({p['slope']:g}x))$", STEP),
            slope=Param(25.0, 0.0, 1000.0, slider=(1.0, 100.0, 1.0)),
        ),
        _entry(
            "step_atan",
            "Heaviside step [x > 0]; derivative (alpha/2) / (1 + (pi/2 alpha x)^2) (arctan's).",
            _heaviside,
            _atan_derivative,
            "Fang et al. (2021), Incorporating learnable membrane time constant to enhance "
            "learning of spiking neural networks, ICCV; the ATan surrogate of SpikingJelly",
            formulas=(lambda p: rf"$\dfrac{{{p['alpha'] / 2:g}}}{{1 + ({times(p['alpha'] / 2)}\pi x)^2}}$", STEP),
            alpha=Param(2.0, 0.0, 100.0, slider=(0.5, 10.0, 0.5)),
        ),
        _entry(
            "round_ste",
            "round(x), half to even as keras.ops.round and tf.round do (0.5 -> 0, 1.5 -> 2); derivative 1.",
            _round,
            _ones_like,
            _BENGIO,
            formulas=("$1$", r"$\mathrm{round}(x)$"),
        ),
        _entry(
            "floor_ste",
            "floor(x); derivative 1.",
            _floor,
            _ones_like,
            _BENGIO,
            formulas=("$1$", FLOOR),
        ),
        _entry(
            "floor_smooth",
            "floor(x); derivative that of the smooth floor a(...a(x)) - 0.5 (a nested depth\n"
            "    times) with a(x) = (sin(2 pi x) + 2 pi x) / (2 pi).",
            _floor,
            _smooth_floor_derivative,
            "the smooth staircase obtained by iterating a(x) = x + sin(2 pi x) / (2 pi), whose "
            "fixed points at half-integers attract",
            formulas=(
                lambda p: (
                    rf"$\dfrac{{d}}{{dx}}\,a^{{{p['depth']}}}(x),\ "
                    r"a(x) = x + \dfrac{\sin 2\pi x}{2\pi}$"
                ),
                FLOOR,
            ),
            depth=Param(3, 1, 10, integer=True, low_inclusive=True, slider=(1, 6, 1)),
        ),
        _entry(
            "sigmoid_identity",
            "sigmoid(x); derivative 1: 'forward a sigmoid, backpropagate 1'.",
            _sigmoid,
            _ones_like,
            _BENGIO,
            formulas=("$1$", r"$\sigma(x)$"),
        ),
        _entry(
            "cast_int_ste",
            "trunc(x * scale) / scale: a cast to integer (toward zero) and back to float at a\n"
            "    resolution of 1/scale (scale=1 is the plain cast); derivative 1.",
            _cast_int,
            _ones_like,
            _BENGIO,
            formulas=(
                "$1$",
                lambda p: (
                    r"$\mathrm{int}(x)$" if p["scale"] == 1 else rf"$\mathrm{{trunc}}({p['scale']:g}x)/{p['scale']:g}$"
                ),
            ),
            scale=Param(1.0, 0.0, 1e6, slider=(1.0, 16.0, 1.0)),
        ),
    ]
)
