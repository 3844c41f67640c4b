"""An interactive explorer: pick a surrogate, move its sliders, watch its derivative change.

Introduced in 02_surrogate_zoo.ipynb. The plot is an ``ipywidgets.Image`` whose PNG
bytes are replaced on every change, so it updates in place without flicker; building
the explorer displays nothing and never blocks, with or without a browser attached.
Each catalog entry's parameters say their slider's range (``Param.slider``).
"""

import html

import ipywidgets as widgets

from workbook.core.arguments import refuse
from workbook.surrogates.catalogue import SURROGATES, SurrogateGradient, surrogate
from workbook.surrogates.derivatives import check_grid
from workbook.surrogates.plots import figure_png, plot_derivatives

__all__ = ["explore_surrogates", "SurrogateExplorer"]


def explore_surrogates(custom=None, x_range=(-2, 2), n_points=401, start=None):
    """An ipywidgets explorer of the catalog (and of your own surrogates).

    Introduced in 02_surrogate_zoo.ipynb.

    Parameters
    ----------
    custom : dict, optional
        Your own entries, name -> ``(forward, derivative)`` or a surrogate object, e.g.
        ``{"mine": (keras.ops.sign, lambda x: 1 / (1 + keras.ops.abs(x)) ** 2)}``.
    x_range : (float, float)
        The inputs plotted.
    n_points : int
        How many inputs are plotted.
    start : str, optional
        The entry shown first (default: the first custom entry, else ``"sign_ste"``).

    Returns
    -------
    SurrogateExplorer
        An ``ipywidgets.VBox``; display it as a cell's last value. Attributes: ``dropdown``,
        ``sliders`` (parameter name -> slider, for the entry shown), ``image`` (the plot),
        ``status`` (source, or the error if drawing failed), ``current`` (the surrogate
        shown, with the sliders' values) and ``redraw()``.
    """
    if custom is not None and not isinstance(custom, dict):
        example = "custom={'mine': (keras.ops.sign, my_derivative)}"
        allowed = f"a dict from a name to a (forward, derivative) pair, e.g. {example}"
        refuse("custom", custom, allowed)
    check_grid(x_range, n_points)
    entries = dict(SURROGATES)
    for name, value in (custom or {}).items():
        entries[name] = _as_surrogate(name, value)
    if start is None:
        start = next(iter(custom)) if custom else "sign_ste"
    if not isinstance(start, str) or start not in entries:
        refuse("start", start, f"an entry, one of: {', '.join(entries)}")
    return SurrogateExplorer(entries, start, x_range, n_points)


class SurrogateExplorer(widgets.VBox):
    """The widget :func:`explore_surrogates` returns (introduced in 02_surrogate_zoo.ipynb)."""

    def __init__(self, entries, start, x_range=(-2, 2), n_points=401):
        self.entries, self.x_range, self.n_points = entries, x_range, n_points
        self.dropdown = widgets.Dropdown(options=list(entries), value=start, description="surrogate")
        self.slider_box = widgets.HBox()
        self.image = widgets.Image(format="png", layout=widgets.Layout(width="100%", max_width="900px"))
        self.image.add_class("workbook-explorer-plot")
        self.status = widgets.HTML()
        self.sliders = {}
        super().__init__([widgets.HBox([self.dropdown, self.slider_box]), self.image, self.status])
        self.add_class("workbook-explorer")
        self.dropdown.observe(self._rebuild_sliders, names="value")
        self._rebuild_sliders()

    @property
    def current(self):
        """The surrogate shown, with the sliders' parameter values."""
        entry = self.entries[self.dropdown.value]
        return entry.with_params(**{name: s.value for name, s in self.sliders.items()})

    def redraw(self, *_):
        """Draw the current surrogate into the image (errors go to ``status``, not a traceback)."""
        try:
            shown = self.current
            png = figure_png(plot_derivatives(shown, x_range=self.x_range, n_points=self.n_points))
            self.status.value = f"<small>{html.escape(caption(shown))}</small>"  # first: it is current once the plot is
            self.image.value = png
        except Exception as error:  # a student's own derivative may fail: say so, keep the old plot
            self.status.value = (
                f"<b style='color:#b00'>Could not draw {html.escape(self.dropdown.value)}: "
                f"{html.escape(type(error).__name__)}: {html.escape(str(error))}</b>"
            )

    def _rebuild_sliders(self, *_):
        entry = self.entries[self.dropdown.value]
        self.sliders = {name: _slider(name, spec, entry.params[name]) for name, spec in entry.param_specs.items()}
        for slider in self.sliders.values():
            slider.observe(self.redraw, names="value")
        self.slider_box.children = tuple(self.sliders.values())
        self.redraw()


def caption(shown):
    """What the explorer says under its plot: the entry, its parameters' values and its source, in words."""
    values = ", ".join(f"{name} = {value:.3g}" for name, value in shown.params.items())
    text = f"{shown.name} with {values}" if values else shown.name
    return f"{text}. Source: {shown.reference}." if shown.reference else f"{text}."


def _slider(name, spec, value):
    """A slider for one parameter: its Param's ``slider``, else from its bounds and a tenth of its default."""
    slider_range = spec.slider
    if slider_range is None:
        first = spec.low if spec.low_inclusive else spec.default / 10
        slider_range = (first, spec.high, spec.default / 10)
    low, high, step = slider_range
    low, high = min(low, value), max(high, value)
    kind = widgets.IntSlider if spec.integer else widgets.FloatSlider
    return kind(
        value=value,
        min=low,
        max=high,
        step=step,
        description=name,
        continuous_update=False,
        readout_format="d" if spec.integer else ".3g",
    )


def _as_surrogate(name, value):
    if isinstance(value, SurrogateGradient):
        return value
    if isinstance(value, tuple) and len(value) == 2 and all(map(callable, value)):
        return surrogate(value[0], value[1], name=name)
    allowed = "a (forward, derivative) pair of functions or a surrogate made by workbook.surrogate(...)"
    refuse(f"custom[{name!r}]", value, allowed)
