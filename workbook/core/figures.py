"""Figures that show themselves in a notebook without pyplot's global state.

Used by the plots of 01_forward_and_backward.ipynb onwards, the explorer and the
gradient-norm figures of the monitor (workbook/monitor/figures.py).
"""

import io
import re

from matplotlib.figure import Figure

__all__ = [
    "PngFigure",
    "new_figure",
    "figure_png",
    "smallest_text",
    "describe_figure",
    "SMALLEST_TEXT_KEY",
    "in_notebook",
    "show_figure",
    "WIDEST",
]

#: The widest a figure can be, in inches at 100 dpi, and still be shown at its own size: JupyterLab's
#: output area is 848 px wide in a 1280 px window. Its text then reads at the page's body size
#: (14 px) when no text is below matplotlib's default 10 pt (13.9 px at 100 dpi).
WIDEST = 8.4


class PngFigure(Figure):
    """A matplotlib Figure that a notebook shows as a PNG when it is a cell's last value."""

    def _repr_png_(self):
        return figure_png(self)


def new_figure(figsize=(7, 3.6), dpi=100):
    """A :class:`PngFigure` on the Agg canvas: no window, no pyplot, no global settings.

    At most :data:`WIDEST` inches wide, so that a notebook shows it at its own size.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure = PngFigure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(figure)
    return figure


#: The PNG text key under which :func:`figure_png` records the height of the smallest text, in pixels.
SMALLEST_TEXT_KEY = "Smallest text (px)"


def figure_png(figure, dpi=None):
    """PNG bytes of ``figure`` (at its own dpi unless ``dpi`` is given).

    The PNG records the size of its smallest text in pixels (``SMALLEST_TEXT_KEY``), so that
    whoever shows it smaller (the book, on a phone) can tell whether it still reads.
    """
    dpi = dpi or figure.dpi
    buffer = io.BytesIO()
    smallest = f"{smallest_text(figure) * dpi / 72:.1f}"
    metadata = {SMALLEST_TEXT_KEY: smallest, "Description": describe_figure(figure)}
    figure.savefig(buffer, format="png", dpi=dpi, metadata=metadata)
    return buffer.getvalue()


def describe_figure(figure, limit=600):
    """What ``figure`` shows, in words, from its own text: each panel's title, axes and labelled curves.

    The book's alt text starts with it (what is drawn), and adds the point from the notebook's text.
    """
    drawn = [_describe_axes(ax) for ax in figure.get_axes() if ax.get_visible() and ax.has_data()]
    title = figure.get_suptitle()
    head = f"{title}: " if title else ""
    if len(drawn) > 1:
        head += f"{len(drawn)} panels. "
    return (head + "; ".join(panel for panel in drawn if panel))[:limit].strip()


def _describe_axes(ax):
    parts = [ax.get_title()] if ax.get_title() else []
    x, y = ax.get_xlabel(), ax.get_ylabel()
    if x and y:
        parts.append(f"{y} against {x}")
    elif x or y:
        parts.append(f"axis {x or y}")
    labels = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
    if labels:
        parts.append("curves " + ", ".join(dict.fromkeys(labels)))
    return _plain(", ".join(parts))


def _plain(text):
    """Mathtext as words: $\\mathrm{round}(x)$ reads round(x) (Matplotlib parses mathtext only to draw it)."""
    text = re.sub(r"\\(?:mathrm|operatorname|text)\{([^}]*)\}", r"\1", text)
    return re.sub(r"[$\\{}]", "", text)


def smallest_text(figure):
    """The font size in points of the smallest visible text drawn in ``figure`` (0 when it has none)."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in figure.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return min(sizes, default=0.0)


def in_notebook():
    """True in a Jupyter kernel with a front end that can show images; False in scripts and plain IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def show_figure(figure):
    """Display ``figure`` in a notebook; do nothing anywhere else."""
    if in_notebook():
        from IPython.display import Image, display

        display(Image(figure_png(figure)))


#: Okabe and Ito's colours, chosen to stay apart for readers with any common colour-vision
#: deficiency (matplotlib's default red and green merge for deuteranopes); every figure draws with them.
PALETTE = {
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "bluish green": "#009E73",
    "orange": "#E69F00",
    "reddish purple": "#CC79A7",
    "sky blue": "#56B4E9",
    "black": "#000000",
}
