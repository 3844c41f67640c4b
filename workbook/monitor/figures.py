"""Gradient norms on a log axis, with "no gradient" and "exactly 0" shown honestly.

Introduced in 04_autoencoder_lab.ipynb: the live figure of
:class:`workbook.monitor.monitoring.GradientNormMonitor`, :meth:`GradientNormHistory.plot`, and
the lab's panels of per-layer gradient norms (:func:`workbook.lab.compare.comparison_figures`)
draw a :class:`~workbook.monitor.recording.GradientNormRecords` through
:func:`draw_gradient_norms`.
"""

import numpy as np

from workbook.core.figures import PALETTE

__all__ = ["draw_gradient_norms", "fit_row_names", "room_for_the_legend", "decade_range", "rows_below_the_break"]

NO_GRADIENT_COLOR = PALETTE["vermillion"]
ZERO_GRADIENT_COLOR = PALETTE["orange"]
LAYER_COLORS = tuple(PALETTE[name] for name in ("blue", "bluish green", "reddish purple", "sky blue", "black"))


def decade_range(norms):
    """(lowest, highest) power of ten that spans the positive finite values of `norms`."""
    norms = np.asarray(norms, dtype=float)
    positive = norms[np.isfinite(norms) & (norms > 0)]
    if not positive.size:
        return 0, 0
    return int(np.floor(np.log10(positive.min()))), int(np.ceil(np.log10(positive.max())))


def draw_gradient_norms(ax, history, title=None, decades=None, legend=True, reserve_rows=0):
    """Plot a :class:`~workbook.monitor.recording.GradientNormRecords` on `ax`, log scale.

    Introduced in 04_autoencoder_lab.ipynb. A log axis cannot show 0, so nothing that is 0
    or None is drawn at a number: below the lowest decade, past a dashed break, each layer
    that ever had no gradient (red x, tick "None") or a gradient of exactly 0 (orange o,
    tick "0") gets a row of its own, named just above it ("encoder: no gradient"), so no two
    markers or labels lie on top of each other.

    Parameters
    ----------
    decades : (int, int), optional
        The powers of ten the axis spans (default: those of this history); give panels
        that are compared the same, see :func:`decade_range`.
    legend : bool
        Add a legend of the layers drawn as curves, beside the axes (on the right, where it
        covers no curve; :func:`room_for_the_legend` makes room for it in a fixed layout).
    reserve_rows : int
        Room for at least this many rows below the break, so that panels with fewer
        rows keep the same y-axis as the others.
    """
    _remove_what_was_drawn(ax)
    steps, norms = history.steps, history.norms
    low, high = decades if decades is not None else decade_range(norms)
    high = max(high, low + 1)
    ax.set_yscale("log")
    _draw_curves(ax, history)
    rows = rows_below_the_break(history)
    levels = [10.0 ** (low - 1 - 0.5 * i) for i in range(len(rows))]
    _draw_rows(ax, steps, rows, levels)
    _draw_ticks_and_break(ax, rows, levels, low, high)
    lowest_row = max(len(rows), reserve_rows) - 1
    bottom = (10.0 ** (low - 1 - 0.5 * lowest_row) if lowest_row >= 0 else 10.0**low) / 10**0.3
    ax.set_ylim(bottom, 10.0**high * 1.2)
    _finish_axes(ax, steps, title, legend)


def _draw_curves(ax, history):
    """One line per layer, through its steps with a positive, finite gradient norm."""
    for j, name in enumerate(history.layers):
        values = history.norms[:, j]
        curve = np.where(np.isfinite(values) & (values > 0) & ~history.no_gradient[:, j], values, np.nan)
        if np.isfinite(curve).any():
            ax.plot(history.steps, curve, color=LAYER_COLORS[j % len(LAYER_COLORS)], lw=1.8, label=name)


def _draw_ticks_and_break(ax, rows, levels, low, high):
    """The decades' ticks, each row's tick in its colour, and the dashed axis break above the rows."""
    decade_ticks = [10.0**k for k in range(low, high + 1)]
    ax.set_yticks(
        decade_ticks + levels, [f"$10^{{{k}}}$" for k in range(low, high + 1)] + [tick for _, tick, *_ in rows]
    )
    # Not strict: an axes given with its tick labels turned off has none to colour.
    for tick, (_, _, color, *_) in zip(ax.get_yticklabels()[len(decade_ticks) :], rows, strict=False):
        tick.set_color(color)
        tick.set_fontweight("bold")
    ax.minorticks_off()
    if rows:
        ax.axhline(10.0 ** (low - 0.5), color="gray", ls=(0, (6, 3)), lw=1)  # the axis break


def _finish_axes(ax, steps, title, legend):
    """The x range (or a note that no step came yet), the labels, title, legend and grid."""
    from matplotlib.ticker import MaxNLocator

    if len(steps):
        ax.set_xlim(steps.min() - 0.5, steps.max() + 0.5)
    else:
        ax.text(
            0.5,
            0.5,
            "waiting for the first training step...",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="gray",
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step (batch)")
    ax.set_ylabel("gradient norm (log)")
    if title:
        ax.set_title(title)
    if legend and any(line.get_label() and not line.get_label().startswith("_") for line in ax.lines):
        # Beside the axes, where it covers no curve (inside, "best" still covered the encoder's in 04).
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.grid(True, which="major", alpha=0.3)


def _remove_what_was_drawn(ax):
    """Remove only what was drawn: clearing the axes would rebuild every tick, the slow part."""
    for artist in [*ax.lines, *ax.texts]:
        artist.remove()
    if ax.get_legend() is not None:
        ax.get_legend().remove()


def _draw_rows(ax, steps, rows, levels):
    """Each row of :func:`rows_below_the_break` at its level, named just above itself."""
    for level, (label, _, color, marker, mask) in zip(levels, rows, strict=True):
        ax.plot(steps, np.where(mask, level, np.nan), color=color, ls="--", lw=2, marker=marker, ms=5, label=None)
        # The layer's name inside the axes, just above its own row: it never meets another row.
        name = ax.annotate(
            label,
            xy=(0.01, level),
            xycoords=("axes fraction", "data"),
            xytext=(0, 3),
            textcoords="offset points",
            va="bottom",
            color=color,
            fontweight="bold",
            gid="row_name",
            in_layout=False,  # the layout leaves the panel its size; the name is shortened to fit it
        )
        _fit_in_axes(name, ax)


def room_for_the_legend(ax, margin_points=4):
    """Narrow ``ax`` (in a figure without a layout engine) so its legend beside it ends inside the figure.

    Cheaper than a layout engine, which draws the figure once more: the live figure of
    04_autoencoder_lab.ipynb is redrawn while training runs. Row names are fitted again.
    """
    legend = ax.get_legend()
    figure = ax.figure
    if legend is None:
        return
    over = legend.get_window_extent().x1 + margin_points * figure.dpi / 72 - figure.bbox.x1
    if abs(over) < 1:
        return
    # A legend wider than the room beside the axes keeps the panel at least a quarter of the figure wide:
    # it then runs past the edge, and training goes on (the live figure is drawn during fit).
    right = max(figure.subplotpars.left + 0.25, figure.subplotpars.right - over / figure.bbox.width)
    figure.subplots_adjust(right=min(right, 1.0))
    for text in ax.texts:
        if text.get_gid() == "row_name":
            _fit_in_axes(text, ax)


def fit_row_names(figure):
    """Lay ``figure`` out, then shorten each row name of :func:`draw_gradient_norms` to end inside its panel.

    For a figure with a layout engine, which moves the panels only when it is drawn.
    """
    figure.draw_without_rendering()
    for ax in figure.axes:
        for text in ax.texts:
            if text.get_gid() == "row_name":
                _fit_in_axes(text, ax)


def _fit_in_axes(text, ax):
    """Shorten ``text``, word by word and then letter by letter, ending in "…", until it ends inside ``ax``."""
    right = ax.get_window_extent().x1
    kept = text.full_text = getattr(text, "full_text", text.get_text())  # from the whole name every time
    text.set_text(kept)
    while len(kept) > 3 and text.get_window_extent().x1 > right:
        kept = kept.rsplit(" ", 1)[0] if " " in kept else kept[:-1]
        text.set_text(kept.rstrip(",:") + "…")


def rows_below_the_break(history):
    """(label, tick label, colour, marker, mask of records) for each "None" or "0" row of the figure."""
    rows = []
    cut_by = getattr(history, "cut_by", {})
    for j, name in enumerate(history.layers):
        dead, values = history.no_gradient[:, j], history.norms[:, j]
        # The op the finder named, where it named one: "encoder: no gradient, cut by Round at cell 3, line 4".
        cut = f", {history.cut_text(name, code=False)}" if not isinstance(cut_by.get(name, ""), str) else ""
        if dead.any():
            rows.append((f"{name}: no gradient{cut}", "None", NO_GRADIENT_COLOR, "x", dead))
        if ((values == 0) & ~dead).any():
            rows.append((f"{name}: gradient exactly 0{cut}", "0", ZERO_GRADIENT_COLOR, "o", (values == 0) & ~dead))
    return rows
