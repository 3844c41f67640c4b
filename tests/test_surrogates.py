"""The catalog against the published formulas, and surrogate() in every place Keras runs it.

The formulas below are written out again with NumPy in float64 from the papers; nothing
is imported from the implementation to compute an expected value.
"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from workbook import SURROGATES, straight_through, surrogate


def plain(f):
    """A NumPy function that ignores surrogate parameters (the forwards have none but scale)."""
    return lambda x, **_: f(x)


def heaviside(x):
    return (x > 0).astype(float)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def ones(x, **_):
    return np.ones_like(x)


def smooth_floor(x, depth=3):
    u = x
    for _ in range(depth):
        u = (np.sin(2 * np.pi * u) + 2 * np.pi * u) / (2 * np.pi)
    return u - 0.5


def smooth_floor_derivative(x, depth=3):
    # Central difference of the smooth floor in float64: a different route to the same number.
    h = 1e-6
    return (smooth_floor(x + h, depth) - smooth_floor(x - h, depth)) / (2 * h)


# name -> (forward, derivative, default params, other params, where forward or derivative jump)
PUBLISHED = {
    "sign_ste": (plain(np.sign), ones, {}, {}, lambda p: [0.0]),
    "sign_clipped_ste": (
        plain(np.sign),
        lambda x, clip=1.0: (np.abs(x) <= clip).astype(float),
        {"clip": 1.0},
        {"clip": 0.4},
        lambda p: [0.0, p["clip"], -p["clip"]],
    ),
    "sign_approx": (
        plain(np.sign),
        lambda x: np.where(np.abs(x) <= 1, 2 - 2 * np.abs(x), 0.0),
        {},
        {},
        lambda p: [0.0],
    ),
    "sign_swish": (
        plain(np.sign),
        lambda x, beta=5.0: beta * (2 - beta * x * np.tanh(beta * x / 2)) / (1 + np.cosh(beta * x)),
        {"beta": 5.0},
        {"beta": 2.5},
        lambda p: [0.0],
    ),
    "step_fast_sigmoid": (
        plain(heaviside),
        lambda x, slope=25.0: 1 / (1 + slope * np.abs(x)) ** 2,
        {"slope": 25.0},
        {"slope": 7.0},
        lambda p: [0.0],
    ),
    "step_sigmoid": (
        plain(heaviside),
        lambda x, slope=25.0: slope * sigmoid(slope * x) * (1 - sigmoid(slope * x)),
        {"slope": 25.0},
        {"slope": 4.0},
        lambda p: [0.0],
    ),
    "step_atan": (
        plain(heaviside),
        lambda x, alpha=2.0: (alpha / 2) / (1 + (np.pi / 2 * alpha * x) ** 2),
        {"alpha": 2.0},
        {"alpha": 5.0},
        lambda p: [0.0],
    ),
    "round_ste": (plain(np.round), ones, {}, {}, lambda p: np.arange(-10, 10) + 0.5),
    "floor_ste": (plain(np.floor), ones, {}, {}, lambda p: np.arange(-10, 11.0)),
    "floor_smooth": (
        plain(np.floor),
        smooth_floor_derivative,
        {"depth": 3},
        {"depth": 2},
        lambda p: np.arange(-10, 11.0),
    ),
    "sigmoid_identity": (plain(sigmoid), ones, {}, {}, lambda p: []),
    "cast_int_ste": (
        lambda x, scale=1.0: np.trunc(x * scale) / scale,
        ones,
        {"scale": 1.0},
        {"scale": 4.0},
        lambda p: np.arange(-40, 41) / p["scale"],
    ),
}


def test_every_catalog_entry_is_a_published_formula_with_its_default_parameters():
    assert set(SURROGATES) == set(PUBLISHED), "every entry needs its formula in PUBLISHED, and no more"
    for name, (_, _, defaults, _, _) in PUBLISHED.items():
        assert SURROGATES[name].name == name
        assert SURROGATES[name].params == defaults, name


def sample_points(params, jumps, n_random=1200, seed=0):
    """1,200 random points in [-3, 3], plus points near 0 and near every jump, but off them."""
    rng = np.random.default_rng(seed)
    near_zero = np.concatenate([np.logspace(-4, -0.5, 30), -np.logspace(-4, -0.5, 30)])
    edges = np.asarray(jumps(params), dtype=float)
    edges = edges[np.abs(edges) <= 3]
    near_edges = (edges[:, None] + np.array([-3e-3, -1e-3, 1e-3, 3e-3])).ravel()
    x = np.concatenate([rng.uniform(-3, 3, n_random), near_zero, near_edges]).astype(np.float32)
    if len(edges):
        x = x[np.min(np.abs(x[:, None].astype(float) - edges[None, :]), axis=1) > 5e-4]
    return x


def tape_gradient(fn, x, upstream=None):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return y, tape.gradient(y, x, output_gradients=upstream)


@pytest.mark.parametrize("which", ["defaults", "other"])
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_forward_and_backprop_match_the_published_formulas(name, which):
    forward, derivative, defaults, other, jumps = PUBLISHED[name]
    params = defaults if which == "defaults" else other
    entry = SURROGATES[name].with_params(**params) if params else SURROGATES[name]
    assert entry.params == {**defaults, **params}
    x = sample_points({**defaults, **params}, jumps)
    assert len(x) >= 1000
    x64 = x.astype(np.float64)
    upstream = np.random.default_rng(1).uniform(0.5, 2.0, x.shape).astype(np.float32)
    y, grad = tape_gradient(entry, x, upstream=tf.constant(upstream))
    assert y.dtype == tf.float32 and grad.dtype == tf.float32
    np.testing.assert_allclose(y.numpy(), forward(x64, **params), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(grad.numpy() / upstream, derivative(x64, **params), rtol=1e-5, atol=2e-6)
    # .forward / .derivative are the plain pieces the plots and checks use
    np.testing.assert_allclose(entry.forward(x).numpy(), forward(x64, **params), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(entry.derivative(x).numpy(), derivative(x64, **params), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("dtype, rtol", [("float16", 2e-2), ("float64", 1e-9)])
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_catalog_works_in_float16_and_float64(name, dtype, rtol):
    forward, derivative, defaults, _, jumps = PUBLISHED[name]
    x = sample_points(defaults, jumps, n_random=200).astype(dtype)
    x = x[np.min(np.abs(x[:, None] - np.append(jumps(defaults), 99)[None, :]), axis=1) > 2e-2]
    y, grad = tape_gradient(SURROGATES[name], x)
    assert y.dtype == dtype and grad.dtype == dtype
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y.numpy(), forward(x64), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(grad.numpy(), derivative(x64), rtol=rtol, atol=rtol * 10)


def test_round_is_half_to_even():
    y = SURROGATES["round_ste"](tf.constant([-1.5, -0.5, 0.5, 1.5, 2.5]))
    np.testing.assert_array_equal(y.numpy(), [-2.0, 0.0, 0.0, 2.0, 2.0])


def test_true_derivative_is_what_autodiff_of_the_forward_alone_gives():
    x = tf.constant([-1.3, -0.2, 0.7, 2.1])
    none = {name: SURROGATES[name].true_derivative_is_none for name in PUBLISHED}
    assert not any(none[n] for n in ("sign_ste", "sign_clipped_ste", "sign_approx", "sign_swish", "sigmoid_identity"))
    assert all(
        none[n]
        for n in (
            "step_fast_sigmoid",
            "step_sigmoid",
            "step_atan",
            "round_ste",
            "floor_ste",
            "floor_smooth",
            "cast_int_ste",
        )
    )
    for name in PUBLISHED:
        if name != "sigmoid_identity":
            np.testing.assert_array_equal(SURROGATES[name].true_derivative(x).numpy(), 0.0)
    s = sigmoid(x.numpy().astype(float))
    np.testing.assert_allclose(SURROGATES["sigmoid_identity"].true_derivative(x).numpy(), s * (1 - s), rtol=1e-6)


def test_with_params_refuses_unknown_names_and_bad_values():
    with pytest.raises(ValueError, match="alpha"):
        SURROGATES["step_atan"].with_params(beta=3)
    with pytest.raises(ValueError, match="parameter='clip' must be left out: it has no parameters"):
        SURROGATES["sign_ste"].with_params(clip=1)
    for bad in (-1, 0, float("nan"), "2", True):
        with pytest.raises(ValueError, match="slope"):
            SURROGATES["step_sigmoid"].with_params(slope=bad)
    with pytest.raises(ValueError, match="whole number"):
        SURROGATES["floor_smooth"].with_params(depth=2.5)
    # the whole message, word for word: it is what a student reads
    message = "surrogate 'step_sigmoid': slope=0 must be a number in (0, 1000] (default 25.0)."
    with pytest.raises(ValueError) as refused:
        SURROGATES["step_sigmoid"].with_params(slope=0)
    assert str(refused.value) == message
    with pytest.raises(ValueError) as refused:
        SURROGATES["floor_smooth"].with_params(depth=11)
    assert str(refused.value).endswith("depth=11 must be a whole number in [1, 10] (default 3).")
    # bounds: a closed lower bound takes its end, an open one does not; 3.0 is the whole number 3
    assert SURROGATES["floor_smooth"].with_params(depth=1).params == {"depth": 1}
    depth = SURROGATES["floor_smooth"].with_params(depth=3.0).params["depth"]
    assert depth == 3 and isinstance(depth, int)
    assert SURROGATES["step_sigmoid"].with_params(slope=1000).params == {"slope": 1000.0}
    # the catalog entry itself is untouched
    assert SURROGATES["step_atan"].with_params(alpha=4).params == {"alpha": 4.0}
    assert SURROGATES["step_atan"].params == {"alpha": 2.0}


def test_every_entry_has_a_formula_a_source_and_a_docstring():
    from matplotlib.mathtext import MathTextParser

    parser = MathTextParser("path")
    for name, entry in SURROGATES.items():
        for latex in (entry.formula, entry.forward_formula):
            assert latex.startswith("$") and latex.endswith("$"), name
            parser.parse(latex)  # raises if matplotlib cannot typeset it
        assert entry.reference and entry.reference in entry.__doc__, name
    assert "2.5" in SURROGATES["sign_swish"].with_params(beta=2.5).formula


def test_formulas_fill_in_the_parameters_and_name_your_own_surrogate():
    """The legends' LaTeX, written out by hand: parameters filled in, 1 never written as a coefficient."""
    assert SURROGATES["step_atan"].formula == r"$\dfrac{1}{1 + (\pi x)^2}$"
    assert SURROGATES["step_atan"].with_params(alpha=5).formula == r"$\dfrac{2.5}{1 + (2.5\pi x)^2}$"
    assert SURROGATES["sign_clipped_ste"].with_params(clip=0.5).formula == r"$[\,|x| \leq 0.5\,]$"
    assert SURROGATES["cast_int_ste"].forward_formula == r"$\mathrm{int}(x)$"
    assert SURROGATES["cast_int_ste"].with_params(scale=4).forward_formula == r"$\mathrm{trunc}(4x)/4$"
    mine = surrogate(keras.ops.sign, keras.ops.ones_like, name="my_sign")
    assert (mine.forward_formula, mine.formula) == (r"$\mathrm{my\_sign}(x)$", r"$\mathrm{my\_sign}'(x)$")
    assert surrogate(keras.ops.sign, keras.ops.ones_like, formula="$1$").formula == "$1$"
    ste = straight_through(keras.ops.round)
    assert (ste.name, ste.forward_formula, ste.formula) == ("straight_through_round", r"$\mathrm{round}(x)$", "$1$")


# --- surrogate() and straight_through() wherever Keras runs them --------------------------


def fast_sigmoid_numpy(x):
    return 1 / (1 + 10 * np.abs(x)) ** 2


def mine():
    return surrogate(keras.ops.sign, lambda x: 1 / keras.ops.square(1 + 10 * keras.ops.abs(x)), name="mine")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("shape", [(), (7,), (2, 3, 4, 5)])
def test_surrogate_and_straight_through_any_dtype_and_shape(dtype, shape):
    x = np.random.default_rng(0).uniform(-2, 2, shape).astype(dtype)
    y, grad = tape_gradient(mine(), x)
    assert y.dtype == dtype and grad.dtype == dtype and grad.shape == shape
    np.testing.assert_array_equal(y.numpy(), np.sign(x))
    tol = 2e-3 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(grad.numpy(), fast_sigmoid_numpy(x.astype(float)), rtol=tol, atol=tol)
    y, grad = tape_gradient(straight_through(keras.ops.sigmoid), x)
    np.testing.assert_allclose(y.numpy(), sigmoid(x.astype(float)), rtol=tol)
    np.testing.assert_array_equal(grad.numpy(), 1.0)


def test_surrogate_inside_tf_function():
    g = mine()

    @tf.function
    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = g(x)
        return y, tape.gradient(y, x)

    x = np.linspace(-1.01, 1.01, 51).astype("float32")
    y, grad = gradient(tf.constant(x))
    np.testing.assert_array_equal(y.numpy(), np.sign(x))
    np.testing.assert_allclose(grad.numpy(), fast_sigmoid_numpy(x), rtol=1e-5)


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.g = mine()

    def call(self, x):
        return self.g(x)


def models():
    inputs = keras.Input((6,))
    return {
        "sequential_lambda": keras.Sequential([keras.Input((6,)), keras.layers.Lambda(mine())]),
        "functional_direct": keras.Model(inputs, mine()(inputs)),
        "functional_lambda": keras.Model(inputs, keras.layers.Lambda(mine())(inputs)),
        "subclassed": Subclassed(),
    }


@pytest.mark.parametrize("kind", ["sequential_lambda", "functional_direct", "functional_lambda", "subclassed"])
def test_surrogate_inside_keras_models(kind):
    model = models()[kind]
    x = np.random.default_rng(2).uniform(-1, 1, (4, 6)).astype("float32")
    y, grad = tape_gradient(model, x)
    np.testing.assert_array_equal(y.numpy(), np.sign(x))
    np.testing.assert_allclose(grad.numpy(), fast_sigmoid_numpy(x), rtol=1e-5)


def train_before_layer(bottleneck):
    """Fit Dense -> bottleneck -> Dense; return how far the first Dense's kernel moved."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(4, name="before"), bottleneck, keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = model.get_layer("before").kernel.numpy().copy()
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Gradients do not exist" for the plain round
        model.fit(rng.uniform(-2, 2, (64, 4)), rng.uniform(-2, 2, (64, 1)), epochs=2, verbose=0)
    return np.abs(model.get_layer("before").kernel.numpy() - before).max()


def test_model_fit_moves_weights_only_through_the_surrogate():
    assert train_before_layer(keras.layers.Lambda(keras.ops.round)) == 0.0
    assert train_before_layer(keras.layers.Lambda(SURROGATES["round_ste"])) > 1e-3


def test_wrong_derivative_shape_or_dtype_is_a_value_error():
    scalar = surrogate(keras.ops.sign, lambda x: keras.ops.ones(()), name="scalar")
    with pytest.raises(ValueError, match=r"'scalar'.*shape \(\).*shape \(3,\)"):
        tape_gradient(scalar, np.ones(3, "float32"))
    wrong_dtype = surrogate(keras.ops.sign, lambda x: keras.ops.ones_like(x, dtype="float32"), name="f32")
    with pytest.raises(ValueError, match=r"'f32'.*float32.*float16"):
        tape_gradient(wrong_dtype, np.ones(3, "float16"))
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(2),
            keras.layers.Lambda(surrogate(keras.ops.sign, lambda x: keras.ops.sum(x, axis=-1), name="summed")),
            keras.layers.Dense(1),
        ]
    )
    model.compile("sgd", "mse")
    with pytest.raises(ValueError, match=r"'summed'.*\(None,\).*\(None, 2\)"):
        model.fit(np.ones((4, 3)), np.ones((4, 1)), verbose=0)


def test_a_plain_number_as_derivative_means_that_number_everywhere():
    _, grad = tape_gradient(surrogate(keras.ops.floor, lambda x: 0.5), np.arange(6, dtype="float64"))
    assert grad.dtype == tf.float64
    np.testing.assert_array_equal(grad.numpy(), 0.5)


def test_integer_input_and_bad_forward_are_value_errors():
    with pytest.raises(ValueError, match="int32"):
        SURROGATES["sign_ste"](tf.constant([1, 2]))
    with pytest.raises(ValueError, match="forward returned shape"):
        surrogate(keras.ops.sum, keras.ops.ones_like, name="total")(tf.ones((3,)))
    with pytest.raises(ValueError, match="derivative"):
        surrogate(keras.ops.sign, "not a function")


def test_smooth_floor_is_the_nest_and_floor_smooth_backpropagates_its_derivative():
    """Notebooks 01 and 02: the smooth floor as a forward, against the formula and floor."""
    from workbook.surrogates.catalogue import smooth_floor

    x = np.linspace(-2.0, 2.0, 801)
    nest = x.copy()
    for depth in range(1, 5):
        nest = nest + np.sin(2 * np.pi * nest) / (2 * np.pi)  # a(x) = x + sin(2 pi x) / (2 pi)
        got = keras.ops.convert_to_numpy(smooth_floor(x, depth))
        np.testing.assert_allclose(got, nest - 0.5, atol=1e-12)
        # it is not floor: half a step off at every integer, where a(n) = n
        assert np.max(np.abs(got - np.floor(x))) == pytest.approx(0.5)
        # TensorFlow's autodiff of the nest is what floor_smooth backpropagates
        xt = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            y = smooth_floor(xt, depth)
        np.testing.assert_allclose(
            tape.gradient(y, xt).numpy(),
            SURROGATES["floor_smooth"].with_params(depth=depth).derivative(x),
            rtol=1e-9,
            atol=1e-12,
        )
