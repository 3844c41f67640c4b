"""The bias-variance picture of the gradient estimators.

Introduced in 06_beyond_straight_through.ipynb; draws what
:func:`workbook.measure_estimators` measured.
"""

from workbook.core.arguments import check_count, is_number, refuse, shown
from workbook.core.figures import PALETTE, WIDEST, new_figure

__all__ = ["plot_bias_variance"]

#: The largest batch the third panel scores (a typo beyond it, not a batch anyone trains with).
MAX_BATCH_SIZE = 1_000_000

_COLORS = {
    "straight_through": PALETTE["blue"],
    "gumbel_softmax": PALETTE["orange"],
    "gumbel_softmax_st": PALETTE["sky blue"],
    "score_function": PALETTE["vermillion"],
    "score_function_loo": PALETTE["black"],
    "disarm": PALETTE["bluish green"],
}


def plot_bias_variance(results, batch_size=64, title="One-sample gradient estimates against the exact gradient"):
    """Bias, variance and the error of a batch's mean gradient, against the temperature tau.

    Introduced in 06_beyond_straight_through.ipynb. Three panels (bias and variance on top,
    the error below, the legend beside it) share the tau axis (log):
    the bias (length of mean estimate - exact gradient) with its noise floor as an error bar,
    the variance of one estimate, and ``|bias|^2 + variance * evaluations / batch_size``, the
    expected squared error of a step's mean gradient over ``batch_size`` loss evaluations (an
    estimator that evaluates the loss twice, leave-one-out or DisARM, averages half as many).
    The Gumbel-softmax estimators are lines over tau; the others, which have no tau, are
    dashed horizontal lines. A hollow marker is
    a bias within twice its noise floor: not resolved by this many samples.

    Parameters
    ----------
    results : list of BiasVariance
        From :func:`workbook.measure_estimators` or :func:`workbook.measure_bias_and_variance`.
    batch_size : int
        The loss evaluations whose mean gradient the third panel scores (1 to 1,000,000).
    title : str

    Returns
    -------
    matplotlib.figure.Figure
        Shown as a PNG when it is a cell's last value.
    """
    check_count("batch_size", batch_size, high=MAX_BATCH_SIZE, owner="plot_bias_variance")
    if not isinstance(title, str):
        refuse("title", title, "a string", owner="plot_bias_variance")
    results = _checked_results(results)
    figure = new_figure(figsize=(WIDEST, 6.6))
    figure.set_layout_engine("constrained")
    axes = _three_panels(figure)
    taus = sorted({r.tau for r in results if r.tau is not None}) or [1.0]
    by_estimator = _by_estimator(results)
    for ax, (ylabel, value) in zip(axes, _panels(batch_size), strict=True):
        for estimator, mine in by_estimator.items():
            draw = _draw_constant if mine[0].tau is None else _draw_over_tau
            draw(ax, mine, value, _COLORS.get(estimator, "black"), is_bias=ax is axes[0])
        _format_panel(ax, ylabel, taus)
    handles = [_legend_entry(results, estimator) for estimator in by_estimator]
    handles.append(_unresolved_entry())
    # In the fourth place of the grid, beside the third panel: text at full size, over no curve.
    figure.legend(
        handles=handles, loc="center left", bbox_to_anchor=(1.08, 0.5), bbox_transform=axes[2].transAxes, frameon=False
    )
    figure.suptitle(f"{title} ({min(r.n_samples for r in results):,} estimates each)")
    return figure


def _three_panels(figure):
    """Bias and variance side by side, the error below the bias; the place beside it is the legend's."""
    grid = figure.add_gridspec(2, 2)
    bias = figure.add_subplot(grid[0, 0])
    return [bias, figure.add_subplot(grid[0, 1], sharex=bias), figure.add_subplot(grid[1, 0], sharex=bias)]


def _checked_results(results):
    """``results`` as a list of BiasVariance whose numbers can be drawn, or a refusal naming it."""
    from workbook.estimators.bias_variance import BiasVariance

    allowed = "a non-empty list of BiasVariance, e.g. workbook.measure_estimators()"
    if not isinstance(results, (list, tuple)) or not all(isinstance(r, BiasVariance) for r in results) or not results:
        refuse("results", results, allowed, owner="plot_bias_variance")
    for i, r in enumerate(results):
        # A log axis cannot place NaN, infinity, a negative spread or a tau of 0.
        measured = all(is_number(value, low=0) for value in (r.bias_norm, r.variance, r.noise_floor))
        if not measured or not (r.tau is None or is_number(r.tau, low=0, include_low=False)):
            numbers = f"tau={shown(r.tau)}, bias_norm={shown(r.bias_norm)}, variance={shown(r.variance)}"
            refuse(
                "results",
                results,
                f"{allowed} with finite numbers; results[{i}] has {numbers}",
                "plot_bias_variance",
            )
    return list(results)


def _panels(batch_size):
    """The three panels: a y label and the value each result is drawn at."""
    return (
        ("bias  |mean - exact|", lambda r: r.bias_norm),
        ("variance of one estimate", lambda r: r.variance),
        (
            f"error of a step of B = {batch_size} loss evaluations\n|bias|² + variance × evaluations / B",
            lambda r: r.gradient_error(batch_size, equal_evaluations=True),
        ),
    )


def _by_estimator(results):
    """Each estimator's results, in the order they first appear, sorted by tau (None first)."""
    groups = {}
    for r in results:
        groups.setdefault(r.estimator, []).append(r)
    return {estimator: sorted(mine, key=lambda r: r.tau or 0) for estimator, mine in groups.items()}


def _draw_constant(ax, mine, value, color, is_bias):
    """An estimator without tau: a dashed horizontal line per result, dotted when its bias is unresolved."""
    for r in mine:
        unresolved = is_bias and not r.resolved
        ax.axhline(value(r), color=color, ls=":" if unresolved else "--", lw=1.5)


def _draw_over_tau(ax, mine, value, color, is_bias):
    """A Gumbel-softmax estimator: a line over tau with a marker per tau (hollow: unresolved bias)."""
    x = [r.tau for r in mine]
    ax.plot(x, [value(r) for r in mine], "-", color=color)
    for r in mine:
        hollow = is_bias and not r.resolved
        ax.plot(r.tau, value(r), "o", color=color, mfc="white" if hollow else color, ms=6, zorder=3)
    if is_bias:
        low = [min(r.noise_floor, 0.9 * r.bias_norm) for r in mine]
        high = [r.noise_floor for r in mine]
        ax.errorbar(x, [r.bias_norm for r in mine], yerr=[low, high], fmt="none", ecolor=color, alpha=0.5)


def _format_panel(ax, ylabel, taus):
    """Log axes, tau ticks labelled as the numbers they are, a title and a light grid."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(taus, [f"{t:g}" for t in taus])
    ax.minorticks_off()
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("temperature τ (Gumbel-softmax)")
    ax.set_title(ylabel)
    ax.grid(True, which="major", alpha=0.25)


def _legend_entry(results, estimator):
    from matplotlib.lines import Line2D

    over_tau = estimator.startswith("gumbel")
    return Line2D(
        [],
        [],
        color=_COLORS.get(estimator, "black"),
        marker="o" if over_tau else None,
        ls="-" if over_tau else "--",
        label=label_of(results, estimator),
    )


def _unresolved_entry():
    from matplotlib.lines import Line2D

    return Line2D(
        [],
        [],
        color="grey",
        marker="o",
        mfc="white",
        ls="none",
        label="hollow, or dotted: a bias within 2x its\nnoise floor (the error bar), unresolved",
    )


def label_of(results, estimator):
    """The legend's name for an estimator: with its draws per example when it has several."""
    draws = max(r.samples for r in results if r.estimator == estimator)
    if estimator == "disarm":
        return "disarm (an antithetic pair per example)"
    return f"{estimator} ({draws} draws per example)" if draws > 1 else estimator
