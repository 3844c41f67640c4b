"""plot_derivatives draws what backprop measures; the explorer redraws; check_surrogate gives verdicts."""

import inspect

import keras
import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure

import workbook
from workbook import SURROGATES, check_surrogate, explore_surrogates, plot_derivatives, surrogate


def line(figure, gid):
    found = [ln for ax in figure.axes for ln in ax.get_lines() if ln.get_gid() == gid]
    assert len(found) == 1, f"expected one line {gid!r}, found {len(found)}"
    return np.asarray(found[0].get_xdata(), float), np.asarray(found[0].get_ydata(), float)


def smooth_floor(x, depth=3):
    for _ in range(depth):
        x = x + np.sin(2 * np.pi * x) / (2 * np.pi)
    return x - 0.5


# The default derivatives, from the papers, in NumPy (floor_smooth: a central difference of its nest).
PUBLISHED_DERIVATIVES = {
    "step_atan": lambda x: 1 / (1 + (np.pi * x) ** 2),
    "sign_clipped_ste": lambda x: (np.abs(x) <= 1).astype(float),
    "floor_smooth": lambda x: (smooth_floor(x + 1e-6) - smooth_floor(x - 1e-6)) / 2e-6,
    "sigmoid_identity": np.ones_like,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_DERIVATIVES))
def test_backprop_line_is_the_published_derivative(name):
    figure = plot_derivatives(name, x_range=(-2, 2), n_points=201)
    assert isinstance(figure, Figure) and len(figure.axes) == 2
    x, y = line(figure, "backprop")
    keep = np.isfinite(y)
    assert keep.sum() >= 199  # at most a couple of breaks at the derivative's own jumps
    np.testing.assert_allclose(y[keep], PUBLISHED_DERIVATIVES[name](x[keep]), rtol=1e-5, atol=1e-5)


def test_backprop_line_is_measured_not_copied_from_the_formula():
    # A surrogate whose derivative function lies about itself can't exist, so check the other
    # way: for a plain callable (no formula at all) the line is still autodiff's answer.
    figure = plot_derivatives(lambda x: x * keras.ops.abs(x), x_range=(-1, 1), n_points=101)
    x, y = line(figure, "backprop")
    np.testing.assert_allclose(y, 2 * np.abs(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, jumps", [("floor_ste", 4), ("round_ste", 4), ("sign_ste", 2)])
def test_forward_line_never_joins_two_steps(name, jumps):
    figure = plot_derivatives(name, x_range=(-2, 2), n_points=401)
    x, y = line(figure, "forward")
    assert np.isnan(y).sum() == jumps  # floor: at -1, 0, 1, 2; round: at +-0.5, +-1.5; sign: both sides of 0
    finite_neighbours = np.isfinite(y[:-1]) & np.isfinite(y[1:])
    assert np.all(np.abs(np.diff(y)[finite_neighbours]) < 1e-6)  # every drawn segment is flat
    assert np.nanmax(y) - np.nanmin(y) >= 2  # and the steps are all still there


def test_continuous_forward_is_one_unbroken_line():
    x, y = line(plot_derivatives("sigmoid_identity", n_points=201), "forward")
    assert not np.isnan(y).any() and len(y) == 201


def test_legends_show_the_formulas_and_say_when_autodiff_gives_none():
    figure = plot_derivatives("step_fast_sigmoid", n_points=101)
    forward_labels, derivative_labels = ([t.get_text() for t in ax.get_legend().get_texts()] for ax in figure.axes)
    assert forward_labels == [r"forward: $H(x) = [x > 0]$"]
    assert "autodiff of forward: None (no gradient at all)" in derivative_labels
    assert r"backprop uses: $\dfrac{1}{(1 + 25|x|)^2}$" in derivative_labels
    _, true = line(figure, "true_derivative")
    assert np.all(true[np.isfinite(true)] == 0)


def test_finite_difference_is_off_the_scale_at_jumps_and_right_elsewhere():
    figure = plot_derivatives("sigmoid_identity", n_points=201)
    x, fd = line(figure, "finite_difference")
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(fd, s * (1 - s), rtol=1e-2, atol=1e-3)
    figure = plot_derivatives("floor_ste", n_points=201)
    x_off, _ = line(figure, "finite_difference_off_scale")
    assert np.all(np.min(np.abs(x_off[:, None] - np.arange(-2, 3)[None, :]), axis=1) < 0.03)


def test_accepts_a_pair_an_object_and_given_axes():
    pair = (keras.ops.floor, lambda x: keras.ops.ones_like(x) * 0.5)
    x, y = line(plot_derivatives(pair, n_points=51), "backprop")
    np.testing.assert_array_equal(y, 0.5)
    figure = Figure()
    ax = figure.subplots()
    assert plot_derivatives(SURROGATES["step_atan"].with_params(alpha=8), ax=ax, n_points=51) is figure
    assert [ln.get_gid() for ln in ax.get_lines()].count("backprop") == 1
    axes = Figure().subplots(1, 2)
    assert plot_derivatives("round_ste", axes=axes, n_points=51) is axes[0].figure


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="sign_ste"):
        plot_derivatives("no_such_thing")
    with pytest.raises(ValueError, match="x_range"):
        plot_derivatives("sign_ste", x_range=(2, -2))
    for bad in (1, 2, 100_001, 50.0, True):
        with pytest.raises(ValueError) as refused:
            plot_derivatives("sign_ste", n_points=bad)
        assert str(refused.value) == f"n_points={bad!r} must be a whole number from 3 to 100000."
    assert len(line(plot_derivatives("sign_ste", n_points=np.int64(3)), "backprop")[0]) == 3


def test_plotting_leaves_matplotlib_alone_and_renders():
    # Every formula is typeset in test_surrogates.py; here three whole figures become PNGs.
    rc = dict(matplotlib.rcParams)
    for name in ("sign_swish", "floor_smooth", SURROGATES["cast_int_ste"].with_params(scale=4)):
        figure = plot_derivatives(name, n_points=51)
        assert figure._repr_png_().startswith(b"\x89PNG")  # every LaTeX legend typesets
    assert dict(matplotlib.rcParams) == rc
    assert "matplotlib.pyplot" not in __import__("sys").modules or matplotlib.pyplot.get_fignums() == []


# --- the explorer ------------------------------------------------------------------------


def test_explorer_builds_and_redraws_when_a_slider_moves():
    explorer = explore_surrogates(n_points=101, start="step_atan")
    assert "workbook-explorer" in explorer._dom_classes
    assert "workbook-explorer-plot" in explorer.image._dom_classes
    assert explorer.dropdown.value == "step_atan" and set(explorer.sliders) == {"alpha"}
    before = bytes(explorer.image.value)
    assert before.startswith(b"\x89PNG")
    explorer.sliders["alpha"].value = 6.0
    assert bytes(explorer.image.value) != before
    assert explorer.current.params == {"alpha": 6.0}
    explorer.dropdown.value = "floor_smooth"
    assert set(explorer.sliders) == {"depth"} and explorer.slider_box.children[0] is explorer.sliders["depth"]


def test_an_entry_whose_value_lies_outside_its_usual_range_shows_it_on_a_wider_slider():
    wide = explore_surrogates(custom={"wide": SURROGATES["step_atan"].with_params(alpha=40)}, n_points=51)
    assert (wide.sliders["alpha"].max, wide.sliders["alpha"].value) == (40.0, 40.0)


def _parameters_taken(entry):
    """{name: default} of the parameters an entry's forward and derivative take, read off their own signatures."""
    taken = {}
    for function in (entry._forward, entry._derivative):
        after_x = list(inspect.signature(function).parameters.values())[1:]
        taken.update({p.name: p.default for p in after_x if p.kind is p.POSITIONAL_OR_KEYWORD})
    return taken


@pytest.mark.parametrize("key", sorted(SURROGATES))
def test_every_parameter_has_a_slider_that_starts_at_its_default_and_stops_only_at_allowed_values(key):
    # A slider for each parameter the formulas take (none for an entry whose formulas take none),
    # starting where the formula's own default is; whatever a student drags to must be a value
    # the surrogate accepts (with_params refuses the others).
    explorer = explore_surrogates(n_points=51, start=key)
    taken = _parameters_taken(SURROGATES[key])
    assert set(explorer.sliders) == set(taken)
    for name, default in taken.items():
        slider = explorer.sliders[name]
        assert slider.value == default, (key, name)
        for value in np.arange(slider.min, slider.max + slider.step / 2, slider.step):
            SURROGATES[key].with_params(**{name: value})


def test_explorer_takes_your_own_pair_and_reports_its_errors():
    mine = (keras.ops.sign, lambda x: 1 / keras.ops.square(1 + keras.ops.abs(x)))
    explorer = explore_surrogates(custom={"mine": mine, "broken": (keras.ops.sign, lambda x: 1 / 0)}, n_points=51)
    assert explorer.dropdown.value == "mine" and explorer.sliders == {}
    assert bytes(explorer.image.value).startswith(b"\x89PNG")
    explorer.dropdown.value = "broken"
    assert "ZeroDivisionError" in explorer.status.value
    with pytest.raises(ValueError, match="custom"):
        explore_surrogates(custom={"bad": 3})


# --- check_surrogate ---------------------------------------------------------------------


def fast_sigmoid(x):
    return 1 / keras.ops.square(1 + 25 * keras.ops.abs(x))


def test_check_surrogate_passes_a_right_answer(capsys):
    assert check_surrogate(surrogate(keras.ops.sign, fast_sigmoid), keras.ops.sign, fast_sigmoid) is True
    assert "passes" in capsys.readouterr().out


def test_check_surrogate_fails_a_wrong_answer_and_names_the_worst_input(capsys):
    wrong = surrogate(keras.ops.sign, keras.ops.ones_like)  # straight-through, not fast sigmoid
    assert check_surrogate(wrong, keras.ops.sign, fast_sigmoid, x_range=(-1, 1)) is False
    out = capsys.readouterr().out
    # the worst mismatch is where 1 and 1/(1+25|x|)^2 differ most: at the edge of the range
    worst = float(out.split("Worst at x = ")[1].split(":")[0])
    assert abs(worst) > 0.99 and "expected" in out and "got 1" in out


def test_check_surrogate_survives_a_function_that_raises_or_has_no_gradient(capsys):
    def broken(x):
        raise RuntimeError("I am not finished")

    assert check_surrogate(broken, keras.ops.sign, fast_sigmoid) is False
    assert "I am not finished" in capsys.readouterr().out
    assert check_surrogate(keras.ops.floor, keras.ops.floor, keras.ops.ones_like) is False
    assert "None" in capsys.readouterr().out
    assert check_surrogate(lambda x: keras.ops.round(x) + 1, keras.ops.round, keras.ops.ones_like) is False
    assert "differs from forward" in capsys.readouterr().out


def test_check_surrogate_takes_a_numpy_reference(capsys):
    """The most independent reference a student can write is plain NumPy."""
    numpy_round = lambda x: np.round(np.asarray(x))  # noqa: E731 - the reference as a student writes it
    numpy_one = lambda x: np.ones_like(np.asarray(x))  # noqa: E731
    assert check_surrogate(surrogate(keras.ops.round, keras.ops.ones_like), numpy_round, numpy_one) is True
    assert check_surrogate(surrogate(keras.ops.floor, keras.ops.ones_like), numpy_round, numpy_one) is False
    assert "Worst at x" in capsys.readouterr().out


# --- figures read at the size they are shown ---------------------------------------------


def overlaps(box, other):
    return box.x0 < other.x1 and other.x0 < box.x1 and box.y0 < other.y1 and other.y0 < box.y1


def rendered(figure):
    """Lay `figure` out on the Agg canvas, as a notebook does before showing it; its renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = figure.canvas if isinstance(figure.canvas, FigureCanvasAgg) else FigureCanvasAgg(figure)
    canvas.draw()
    return canvas.get_renderer()


def test_legend_never_covers_the_x_label_in_a_grid_of_panels():
    """Notebook 02 draws every catalog entry in a 6 x 2 grid, 8 x 21 inches; each legend goes under its "x"."""
    figure = Figure(figsize=(8, 21), layout="constrained")
    for ax, name in zip(figure.subplots(6, 2).flat, SURROGATES, strict=True):
        plot_derivatives(name, n_points=51, ax=ax)
    renderer = rendered(figure)
    for ax in figure.axes:
        label = ax.xaxis.label.get_window_extent(renderer)
        legend = ax.get_legend().get_window_extent(renderer)
        assert not overlaps(label, legend), f"{ax.get_title()}: the legend covers the x-axis label"
        assert legend.y1 <= label.y0, f"{ax.get_title()}: the legend should sit below the x-axis label"
    # no two legends touch, and no legend reaches into the panel below it
    legends = [ax.get_legend().get_window_extent(renderer) for ax in figure.axes]
    assert not any(overlaps(a, b) for i, a in enumerate(legends) for b in legends[i + 1 :])
    for upper, lower in zip(figure.axes[:-2], figure.axes[2:], strict=True):
        assert not overlaps(upper.get_legend().get_window_extent(renderer), lower.get_window_extent(renderer))
    assert all(figure.bbox.x0 <= box.x0 and box.x1 <= figure.bbox.x1 for box in legends)  # and none runs off


class FakeHistory:
    """What draw_gradient_norms reads from a GradientNormHistory, with known values."""

    def __init__(self, layers, norms, no_gradient):
        self.layers = layers
        self.norms = np.asarray(norms, dtype=float)
        self.no_gradient = np.asarray(no_gradient, dtype=bool)
        self.steps = np.arange(0, 2 * len(self.norms), 2)


def lab_history():
    # encoder: no gradient (None); decoder: exactly 0; output: positive, from 0.05 to 0.2
    norms = [[0.0, 0.0, 0.05], [0.0, 0.0, 0.1], [0.0, 0.0, 0.2]]
    dead = [[True, False, False]] * 3
    return FakeHistory(["encoder", "decoder", "output"], norms, dead)


def test_a_row_name_too_long_for_a_narrow_panel_is_shortened_to_end_inside_it():
    """04's small panels: "encoder: no gradient, cut by Cast at cell In[6], line 5" ran past the panel's edge."""
    from workbook.monitor.figures import draw_gradient_norms

    history = lab_history()
    history.layers[0] = "encoder_of_the_student_model_with_a_long_name"
    figure = Figure(figsize=(3.3, 3.6))  # as narrow, for names at 10 pt, as 2.5 inches was for 7.5 pt
    ax = figure.subplots()
    draw_gradient_norms(ax, history)
    renderer = rendered(figure)
    names = {text.get_text(): text.get_window_extent(renderer) for text in ax.texts}
    right = ax.get_window_extent(renderer).x1
    assert all(box.x1 <= right + 1 for box in names.values()), names
    assert any(name.startswith("encoder_of_the_student") and name.endswith("…") for name in names), names


def test_gradient_norms_never_draw_zero_or_none_at_a_number():
    from workbook.monitor.figures import draw_gradient_norms

    figure = Figure(figsize=(7, 3.6))
    ax = figure.subplots()
    draw_gradient_norms(ax, lab_history(), title="integer cast")
    ticks = [(tick.get_text(), tick.get_position()[1]) for tick in ax.get_yticklabels()]
    rows = [y for text, y in ticks if text in ("None", "0")]
    assert [text for text, _ in ticks if text in ("None", "0")] == ["None", "0"]
    # each on a row of its own, below every decade the axis labels as a number
    decades = [y for text, y in ticks if text.startswith("$10^")]
    assert rows[0] != rows[1] and max(rows) < min(decades)
    # each row named just above itself, inside the axes, and no two names overlap
    names = {text.get_text(): text for text in ax.texts}
    assert set(names) == {"encoder: no gradient", "decoder: gradient exactly 0"}
    renderer = rendered(figure)
    boxes = [text.get_window_extent(renderer) for text in names.values()]
    assert not overlaps(*boxes) and all(ax.get_window_extent(renderer).contains(b.x0, b.y0) for b in boxes)
    # the only curve at a number is the layer with a positive gradient, at its own values
    curves = [line for line in ax.lines if not line.get_label().startswith("_")]
    assert [line.get_label() for line in curves] == ["output"]
    np.testing.assert_allclose(curves[0].get_ydata(), [0.05, 0.1, 0.2])
    assert min(decades) <= 0.05 and ax.get_ylim()[0] < min(rows)
    # whole training steps only
    rendered(figure)
    assert all(float(tick).is_integer() for tick in ax.get_xticks())


def test_comparison_panels_share_their_y_axis_and_epochs_are_whole():
    from workbook.lab.compare import BottleneckRun, comparison_figures

    class Model:
        variables = ()  # no random state for the figure to put back

        def predict(self, x, verbose=0):
            return np.zeros_like(x)

    alive = FakeHistory(["encoder", "decoder", "output"], [[0.003, 0.1, 0.2]] * 3, [[False] * 3] * 3)
    runs = {
        label: BottleneckRun(label, Model(), {"loss": [0.3, 0.2], "val_loss": [0.31, 0.21]}, history, 0.2)
        for label, history in [("integer cast", lab_history()), ("identity", alive)]
    }
    losses, norms, _ = comparison_figures(runs, np.zeros((4, 28, 28, 1), dtype="float32"), n_images=4)
    panels = [ax for ax in norms.axes if ax.get_visible()]
    assert len(panels) == 2 and panels[0].get_ylim() == panels[1].get_ylim()
    rendered(norms)
    renderer = rendered(losses)
    epoch_axis = losses.axes[0]
    assert all(float(tick).is_integer() for tick in epoch_axis.get_xticks())
    # the legend sits beside the curves, not on them
    legend = losses.legends[0].get_window_extent(renderer)
    assert not overlaps(legend, epoch_axis.get_window_extent(renderer))


def test_gradient_norms_of_one_batch_match_the_formula_and_say_none():
    """A Dense layer with zero weights predicts 0, so the MSE's gradient has a closed form."""
    from workbook.lab.compare import gradient_norms

    x = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.0]], dtype="float32")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, kernel_initializer="zeros", name="dense")])
    model.compile(optimizer="sgd", loss="mse")
    norms = gradient_norms(model, x)
    batch, features = x.shape
    # L = sum((0 - x)^2) / (B F): dL/dW = -2 x^T x / (B F), dL/db = -2 sum_batch x / (B F)
    kernel = -2 * x.T @ x / (batch * features)
    bias = -2 * x.sum(axis=0) / (batch * features)
    assert norms[model.layers[0].kernel.path] == pytest.approx(np.linalg.norm(kernel), rel=1e-5)
    assert norms[model.layers[0].bias.path] == pytest.approx(np.linalg.norm(bias), rel=1e-5)
    assert model.get_weights()[0].tolist() == [[0.0, 0.0], [0.0, 0.0]]  # nothing was trained

    cut = keras.Sequential(
        [
            keras.Input((2,)),
            keras.layers.Dense(2, name="before"),
            keras.layers.Lambda(keras.ops.round),
            keras.layers.Dense(2, name="after"),
        ]
    )
    cut.compile(optimizer="sgd", loss="mse")
    norms = gradient_norms(cut, x)
    assert norms[cut.layers[0].kernel.path] is None and norms[cut.layers[2].kernel.path] > 0


def test_a_figure_png_records_its_smallest_text_and_what_it_draws():
    """The book reads both from the PNG: the text size as shown on a phone, and the start of the alt text."""
    import io

    from PIL import Image

    from workbook.core.figures import SMALLEST_TEXT_KEY, figure_png, new_figure

    figure = new_figure(dpi=90)
    figure.suptitle("Two views")
    left, right = figure.subplots(1, 2)
    left.plot([0, 1], label=r"$\mathrm{round}(x)$")
    left.plot([1, 0], label="_hidden")
    left.set(title="forward", xlabel="x", ylabel="f(x)")
    right.plot([0, 1])
    right.text(0.5, 0.5, "tiny", fontsize=8)  # 8 pt at 90 dpi: 10 px
    with Image.open(io.BytesIO(figure_png(figure))) as png:
        assert png.text[SMALLEST_TEXT_KEY] == "10.0"
        assert png.text["Description"] == "Two views: 2 panels. forward, f(x) against x, curves round(x)"


@pytest.mark.parametrize("name", ["sign_swish", "floor_smooth", "round_ste"])
def test_the_derivative_figures_legends_end_inside_the_picture(name):
    """sign_swish's derivative is a fraction: its legend line ran off the bottom of the explorer's picture."""
    figure = plot_derivatives(SURROGATES[name])
    renderer = rendered(figure)
    boxes = [ax.get_legend().get_window_extent(renderer) for ax in figure.axes if ax.get_legend() is not None]
    assert len(boxes) == 2 and min(box.y0 for box in boxes) >= 0, boxes


# --- every workbook figure reads at the page's body size in JupyterLab -------------------

#: JupyterLab 4's output area is 848 px wide in a 1280 x 1000 window; a wider PNG is shown scaled down to it.
OUTPUT_AREA_PX = 848
#: The notebook's body text is 14 px; matplotlib's default 10 pt at 100 dpi (13.9 px) counts as that size.
BODY_TEXT_PX = 13.5


def recorded_history():
    """A GradientNormHistory as 04's cast leaves it: the encoder cut by a Cast, named with its cell and line."""
    from types import SimpleNamespace

    from workbook.monitor.monitoring import GradientNormHistory

    history = GradientNormHistory()
    history.layers = ["encoder", "decoder", "output"]
    history._steps = list(range(0, 128, 2))
    history._rows = [
        {"encoder": (0.0, True), "decoder": (0.0, False), "output": (0.1 + 0.001 * i, False)} for i in range(64)
    ]
    history.cut_by["encoder"] = SimpleNamespace(op_type="Cast", where="cell In[6], line 5", code='tf.cast(z, "int32")')
    return history


def figures_of_every_kind():
    """(name, figure) for each kind of figure the workbook draws, at the size a notebook draws it."""
    from workbook.estimators.bias_variance import make_problem
    from workbook.lab.compare import BottleneckRun, comparison_figures
    from workbook.monitor.monitoring import _LiveFigure

    class Model:
        variables = ()  # no random state for the figure to put back

        def predict(self, x, verbose=0):
            return x

    alive = FakeHistory(["encoder", "decoder", "output"], [[0.003, 0.1, 0.2]] * 3, [[False] * 3] * 3)
    labels = ["identity", "integer cast", "cast_int_ste, 1/4", "floor_smooth, 1/4", "round_ste, 1/4"]
    runs = {
        label: BottleneckRun(label, Model(), {"loss": [0.3, 0.2], "val_loss": [0.31, 0.21]}, history, 0.2)
        for label, history in zip(labels, [alive, lab_history(), alive, alive, alive], strict=True)
    }
    live = _LiveFigure(refresh_seconds=0)
    live.show(recorded_history(), final=True)  # outside a notebook, IPython's display prints the text instead
    results = workbook.measure_estimators(make_problem("bernoulli", n_latents=3), taus=(0.5, 1.0), n_samples=50)
    losses, norms, images = comparison_figures(runs, np.zeros((8, 28, 28, 1), dtype="float32"))
    return [
        ("plot_derivatives", plot_derivatives("floor_smooth", n_points=101)),
        ("comparison: losses", losses),
        ("comparison: gradient norms", norms),
        ("comparison: reconstructions", images),
        ("monitor: history.plot()", recorded_history().plot()),
        ("monitor: live figure", live.figure),
        ("plot_bias_variance", workbook.plot_bias_variance(results, batch_size=64)),
    ]


def test_every_kind_of_figure_shows_its_text_at_the_body_size_in_jupyterlab():
    """The smallest text the PNG records, times the ratio at which JupyterLab shows it, is the page's body size."""
    import io

    from PIL import Image

    from workbook.core.figures import SMALLEST_TEXT_KEY, figure_png

    for name, figure in figures_of_every_kind():
        with Image.open(io.BytesIO(figure_png(figure))) as png:
            smallest, width = float(png.text[SMALLEST_TEXT_KEY]), png.size[0]
        shown = smallest * min(width, OUTPUT_AREA_PX) / width
        assert shown >= BODY_TEXT_PX, f"{name}: smallest text {smallest} px in {width} px, {shown:.1f} px as shown"
        assert width <= OUTPUT_AREA_PX, f"{name}: {width} px wide, shown scaled down in a {OUTPUT_AREA_PX} px area"
        # Everything drawn (ticks, titles, legends) ends inside the picture, and so does every name in a panel.
        renderer, picture = rendered(figure), figure.bbox.padded(1)
        drawn = figure.get_tightbbox(renderer).transformed(figure.dpi_scale_trans)
        assert is_inside(drawn, picture), f"{name}: something drawn runs out of the picture: {drawn} in {picture}"
        names = [t for ax in figure.axes for t in ax.texts if t.get_visible() and t.get_text().strip()]
        outside = [t.get_text() for t in names if not is_inside(t.get_window_extent(renderer), picture)]
        assert not outside, f"{name}: text running out of the picture: {outside}"


def is_inside(box, other):
    return other.x0 <= box.x0 and box.x1 <= other.x1 and other.y0 <= box.y0 and box.y1 <= other.y1


def test_a_legend_wider_than_the_room_beside_the_axes_leaves_a_panel_and_raises_nothing():
    """The live figure makes room for its legend while fit runs: a very long layer name must not stop training."""
    from workbook.core.figures import new_figure
    from workbook.monitor.figures import room_for_the_legend

    figure = new_figure(figsize=(6, 3))
    ax = figure.add_subplot()
    ax.plot([0, 1], [0, 1], label="a layer named at great length " * 10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    room_for_the_legend(ax)  # before, subplots_adjust refused: "left cannot be >= right"
    assert figure.subplotpars.right >= figure.subplotpars.left + 0.25
