"""Forward next to the derivatives: true, finite-difference and the one backprop uses.

Introduced in 01_forward_and_backward.ipynb and used for every entry of the catalog
in 02_surrogate_zoo.ipynb. Figures are built with ``matplotlib.figure.Figure``
(not pyplot), so nothing global changes, no window opens, and a figure returned
as a cell's last value is shown exactly once.
"""

import numpy as np
from matplotlib.axes import Axes
from matplotlib.transforms import ScaledTranslation

from workbook.core.arguments import check_float_dtype, refuse, shown
from workbook.core.figures import PALETTE, WIDEST, PngFigure, figure_png
from workbook.surrogates.checks import check_test_range
from workbook.surrogates.derivatives import check_grid, measure, resolve

__all__ = ["plot_derivatives", "DerivativeFigure", "figure_png"]

_COLORS = {
    "forward": PALETTE["blue"],
    "backprop": PALETTE["vermillion"],
    "true": "#555555",
    "fd": PALETTE["sky blue"],
}


class DerivativeFigure(PngFigure):
    """The figure :func:`plot_derivatives` returns; a notebook shows it as a PNG, no pyplot needed."""


def break_at_jumps(x, y, slope=None):
    """Copies of ``x``, ``y`` with NaN inserted at every jump, so no line joins two steps.

    A jump is a change bigger than the local slope can explain (``slope``: the derivative at
    each point, if known), or a change between two flat stretches.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    dx, dy = np.diff(x), np.abs(np.diff(y))
    if slope is not None:
        s = np.abs(np.asarray(slope, dtype=float))
        jumps = dy > 4 * dx * np.maximum(1.0, np.maximum(s[:-1], s[1:]))
    else:
        flat = np.concatenate([[True], dy < 1e-6 * (1 + np.abs(y[1:])), [True]])
        jumps = (dy > 1e-3 * (1 + np.nanmax(np.abs(y)))) & flat[:-2] & flat[2:]
    where = np.flatnonzero(jumps) + 1
    return np.insert(x, where, np.nan), np.insert(y, where, np.nan)


def _isolated(x, y):
    """Points with NaN on both sides (e.g. sign(0) = 0), drawn as dots."""
    finite = np.isfinite(y)
    left = np.concatenate([[False], finite[:-1]])
    right = np.concatenate([finite[1:], [False]])
    alone = finite & ~left & ~right
    return x[alone], y[alone]


def plot_derivatives(fn_or_name, x_range=(-2, 2), n_points=401, ax=None, axes=None, dtype="float32", title=None):
    """Plot a forward and, beside it, the derivatives: true, finite-difference, backprop.

    Introduced in 01_forward_and_backward.ipynb.

    Parameters
    ----------
    fn_or_name : str, SurrogateGradient, (forward, derivative) or callable
        A catalog key such as ``"sign_ste"``, an object from ``workbook.SURROGATES``, a
        pair of your own functions, or any callable (then only what backprop does is known).
    x_range : (float, float)
        The inputs plotted.
    n_points : int
        How many inputs, evenly spaced.
    ax : matplotlib Axes, optional
        Draw only the derivative panel, here (handy for a grid of surrogates).
    axes : pair of matplotlib Axes, optional
        Draw the forward in ``axes[0]`` and the derivatives in ``axes[1]``.
    dtype : str
        The float dtype the functions are evaluated in.
    title : str, optional
        Defaults to the surrogate's name.

    Returns
    -------
    matplotlib.figure.Figure
        A new figure, or the one ``ax``/``axes`` belong to. The backprop curve is the
        GradientTape gradient through ``fn``, measured, not drawn from the formula.
    """
    _check_where(ax, axes, title)
    check_grid(x_range, n_points)
    dtype = check_float_dtype("dtype", dtype, owner="plot_derivatives")
    check_test_range(x_range, dtype, owner="plot_derivatives")  # ends beyond float32 would be inf
    fn, known = resolve(fn_or_name)
    if known is None:
        _check_output(fn_or_name, fn, x_range, n_points, dtype)
    data = measure(fn, x_range, n_points, dtype)
    name = title or (known.name if known is not None else getattr(fn, "__name__", "fn"))
    figure, (ax_forward, ax_derivative), own = _panels(ax, axes)
    x = data["x"]
    slope = data["true"] if data["true"] is not None else data["backprop"]
    if ax_forward is not None:
        label = "forward: " + (known.forward_formula if known is not None else name)
        line_x, line_y = break_at_jumps(x, data["forward"], slope)
        ax_forward.plot(line_x, line_y, color=_COLORS["forward"], lw=2, label=label, gid="forward")
        ax_forward.plot(*_isolated(line_x, line_y), "o", ms=3, color=_COLORS["forward"], gid="forward_points")
        ax_forward.set(xlabel="x", title=f"{name}: forward")
        _legend_below(ax_forward)
        ax_forward.grid(alpha=0.3)
    _draw_derivatives(ax_derivative, data, known, name)
    if own:  # a figure of our own (not the caller's): every legend ends inside it
        _inside_sideways(figure)
        _room_below(figure)
    return figure


def _panels(ax, axes):
    """(figure, (forward panel or None, derivative panel), whether the figure is new): the ones given, or two new."""
    if ax is not None:
        return ax.figure, (None, ax), False
    if axes is not None:
        return axes[0].figure, tuple(axes), False
    figure = DerivativeFigure(figsize=(WIDEST, 4.4), dpi=100)
    figure.subplots_adjust(left=0.07, right=0.98, top=0.92, bottom=0.33, wspace=0.22)
    return figure, tuple(figure.subplots(1, 2)), True


def _inside_sideways(figure, margin_points=4):
    """Move a legend wider than the room beside the middle of its panel left or right, to end inside ``figure``."""
    margin = margin_points * figure.dpi / 72
    for ax in figure.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        box = legend.get_window_extent()
        shift = max(0.0, margin - box.x0) - max(0.0, box.x1 - (figure.bbox.x1 - margin))  # pixels
        if shift:
            legend.set_bbox_to_anchor((0.5, 0.0), transform=_below_the_label(ax, dx_points=shift * 72 / figure.dpi))


def _room_below(figure, margin_points=4):
    """Make ``figure`` taller, keeping each panel's size, until every legend below the axes ends inside it.

    A tall formula (a fraction in sign_swish's derivative) made the last line of the legend
    run off the bottom of the picture.
    """
    lowest = min(legend.get_window_extent().y0 for ax in figure.axes if (legend := ax.get_legend()) is not None)
    missing = (margin_points * figure.dpi / 72 - lowest) / figure.dpi  # inches
    if missing <= 0:
        return
    height = figure.get_figheight()
    params = figure.subplotpars
    taller = height + missing
    figure.set_figheight(taller)
    bottom, top = (params.bottom * height + missing) / taller, 1 - (1 - params.top) * height / taller
    figure.subplots_adjust(bottom=bottom, top=top)


def _check_where(ax, axes, title):
    """Refuse ``ax``/``axes``/``title`` that :func:`plot_derivatives` cannot draw into, naming them."""
    if ax is not None and axes is not None:
        refuse("axes", axes, "None when ax is given: pass ax=... (derivative panel only) or axes=(ax1, ax2), not both")
    if ax is not None and not isinstance(ax, Axes):
        refuse("ax", ax, "a Matplotlib Axes, e.g. ax=figure.subplots()")
    if axes is not None and not _is_pair_of_axes(axes):
        refuse("axes", axes, "a pair of Matplotlib Axes (forward, derivatives), e.g. axes=figure.subplots(1, 2)")
    if title is not None and not isinstance(title, str):
        refuse("title", title, "a string, or None for the surrogate's name")


def _check_output(fn_or_name, fn, x_range, n_points, dtype):
    """Refuse a function whose output cannot be drawn against x: None (a missing return), text, another shape.

    A function that raises is left to raise again in the measurement: its own error says more.
    """
    import tensorflow as tf

    x = tf.constant(np.linspace(x_range[0], x_range[1], n_points), dtype=dtype)
    try:
        y = fn(x)
    except Exception:
        return
    shape = getattr(y, "shape", None)
    if shape is not None and tuple(shape) == (n_points,) and np.asarray(y).dtype.kind in "biuf":
        return
    got = "None (is a `return` missing?)" if y is None else shown(y)
    allowed = f"a function returning numbers shaped like its input, ({n_points},); on that x it returned {got}"
    refuse("fn_or_name", fn_or_name, allowed, owner="plot_derivatives")


def _is_pair_of_axes(axes):
    return hasattr(axes, "__len__") and len(axes) == 2 and all(isinstance(a, Axes) for a in axes)


def _draw_derivatives(ax, data, known, name):
    x = data["x"]
    if data["true"] is not None:
        if data["true_is_none"]:
            label, style = "autodiff of forward: None (no gradient at all)", ":"
        elif not np.any(data["true"]):
            label, style = "autodiff of forward: 0 everywhere here", "--"
        else:
            label, style = "autodiff of forward alone", "--"
        ax.plot(
            *break_at_jumps(x, data["true"]), style, color=_COLORS["true"], lw=2, label=label, gid="true_derivative"
        )
    finite = data["backprop"][np.isfinite(data["backprop"])]
    if data["true"] is not None:
        finite = np.concatenate([finite, data["true"]])
    low, high = min(0.0, finite.min(initial=0.0)), max(1.0, finite.max(initial=1.0))
    pad = 0.1 * (high - low)
    low, high = low - pad, high + pad
    fd = data["finite_difference"]
    inside = (fd >= low) & (fd <= high)
    ax.plot(
        x[inside],
        fd[inside],
        ".",
        ms=3,
        color=_COLORS["fd"],
        label="finite difference of forward",
        gid="finite_difference",
    )
    if np.any(~inside):
        # Spikes at the jumps: honest, but off any useful scale, so mark them at the edge.
        ax.plot(
            x[~inside],
            np.where(fd[~inside] > high, high, low),
            "^",
            ms=5,
            color=_COLORS["fd"],
            alpha=0.6,
            label=f"finite difference off the scale\n(jumps, up to {np.abs(fd).max():.3g})",  # fits half the width
            gid="finite_difference_off_scale",
            clip_on=False,
        )
    label = "backprop uses: " + (known.formula if known is not None else f"gradient of {name}")
    if data["backprop_is_none"]:
        label = f"backprop through {name}: None (no gradient)"
    ax.plot(
        *break_at_jumps(x, data["backprop"]), color=_COLORS["backprop"], lw=2, label=label, gid="backprop", zorder=3
    )
    ax.set(xlabel="x", ylim=(low, high), title=f"{name}: derivatives")
    ax.axhline(0, color="black", lw=0.5)
    _legend_below(ax)
    ax.grid(alpha=0.3)


def _legend_below(ax):
    """The legend under the x-axis label, whatever the figure's size.

    The offset is in points (tick labels and the label keep their size in points when a
    figure shrinks into a grid), so the legend never sits on the "x" below the axis.
    """
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=_below_the_label(ax), frameon=False)


def _below_the_label(ax, dx_points=0.0):
    """Axes coordinates moved down below the x-axis label (and ``dx_points`` sideways)."""
    return ax.transAxes + ScaledTranslation(dx_points / 72, -_LABEL_DEPTH_POINTS / 72, ax.figure.dpi_scale_trans)


# Tick (3.5) + pad (3.5) + tick labels (10) + label pad (4) + label (10), plus a little air.
_LABEL_DEPTH_POINTS = 36
