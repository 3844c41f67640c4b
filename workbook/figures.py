"""Figures that show themselves in a notebook without pyplot's global state.

Used by the plots of 01_forward_and_backward.ipynb onwards, the explorer and the
autoencoder lab's live monitor (04_autoencoder_lab.ipynb).
"""

import io

from matplotlib.figure import Figure

__all__ = ["PngFigure", "new_figure", "figure_png", "in_notebook", "show_figure"]


class PngFigure(Figure):
    """A matplotlib Figure that a notebook shows as a PNG when it is a cell's last value."""

    def _repr_png_(self):
        return figure_png(self)


def new_figure(figsize=(7, 3.6), dpi=90):
    """A :class:`PngFigure` on the Agg canvas: no window, no pyplot, no global settings."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure = PngFigure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(figure)
    return figure


def figure_png(figure, dpi=None):
    """PNG bytes of ``figure`` (at its own dpi unless ``dpi`` is given)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi or "figure")
    return buffer.getvalue()


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
