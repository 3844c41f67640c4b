"""Watch each layer's gradient norm while ``model.fit`` runs, in a figure updated in place.

Introduced in 04_autoencoder_lab.ipynb. The recording (how the monitor sees the
training step's own gradients, and what a record means) is
:mod:`workbook.monitor.recording`, which draws nothing; this module adds the pictures:
the live figure, its caption and :meth:`GradientNormHistory.plot`.
"""

import html
import time

import numpy as np

from workbook.core.arguments import is_number, refuse
from workbook.core.figures import WIDEST, figure_png, in_notebook, new_figure
from workbook.monitor.figures import draw_gradient_norms, fit_row_names, room_for_the_legend
from workbook.monitor.recording import GradientNormRecorder, GradientNormRecords


class GradientNormHistory(GradientNormRecords):
    """What a :class:`GradientNormMonitor` recorded, and a figure of it.

    Introduced in 04_autoencoder_lab.ipynb. The attributes are those of
    :class:`workbook.monitor.recording.GradientNormRecords`.
    """

    def plot(self, ax=None, title=None):
        """Draw the norms on a log scale; returns the matplotlib Figure."""
        if ax is not None:
            draw_gradient_norms(ax, self, title=title)
            return ax.figure
        figure = new_figure(figsize=(WIDEST, 3.6))
        figure.set_layout_engine("constrained")
        draw_gradient_norms(figure.subplots(), self, title=title)
        fit_row_names(figure)
        return figure


class GradientNormMonitor(GradientNormRecorder):
    """Record (and, in JupyterLab, plot live) each layer's gradient norm during ``fit``.

    Introduced in 04_autoencoder_lab.ipynb. Uses the training step's own
    gradients (see :mod:`workbook.monitor.recording` for how), so it adds almost nothing
    to the cost of ``fit``, a new monitor per ``fit`` included. Where it can
    record nothing (a ``train_step`` that updates the weights without
    ``model.optimizer.apply``), the live figure's caption says why, or, with no
    figure, one RuntimeWarning; ``fit`` runs as without it.

    Parameters
    ----------
    every : int
        Record every `every`-th batch (counted over all fits).
    live : bool
        In a notebook, show a figure that updates in place while ``fit``
        runs. In a script or plain Python nothing is ever shown or printed. A
        kernel driven by a program (nbclient, nbgrader, papermill) cannot be
        told apart from one in JupyterLab: it gets the same single figure,
        replaced in place, so its output never grows.
    refresh_seconds : float
        Least time between two redraws of the live figure (one more is
        always drawn when ``fit`` ends). Above 0, a redraw also waits nine
        times as long as a frame takes (the median of the last three, the
        first frames, which warm matplotlib up, left out), so drawing costs
        about a tenth of the training time; but that wait never holds a frame
        back past a quarter of the fit's batches, so even a fit of a few
        seconds is seen to grow (at most four frames more per fit). 0 draws
        every record.
    find_cuts : bool
        When a layer's gradient is first None or exactly 0, name the op and the
        line that cut it, in the figure and in ``history.cut_by`` (the finder
        runs once per such layer, after the step; see :mod:`workbook.monitor.recording`).

    Attributes
    ----------
    history : GradientNormHistory
    """

    history_type = GradientNormHistory

    def __init__(self, every=10, live=True, refresh_seconds=0.5, find_cuts=True):
        super().__init__(every=every, find_cuts=find_cuts)
        # Infinity is allowed: the figure is then drawn once, when training ends.
        if not is_number(refresh_seconds, low=0, finite=False):
            refuse("refresh_seconds", refresh_seconds, "a number of seconds >= 0, e.g. 0.5", type(self).__name__)
        if not isinstance(live, (bool, np.bool_)):
            refuse("live", live, "True (draw while training) or False (record only)", type(self).__name__)
        self.live = bool(live)
        self.refresh_seconds = float(refresh_seconds)
        self._screen = None

    def plot(self, ax=None, title=None):
        """The recorded norms as a Figure (see :meth:`GradientNormHistory.plot`)."""
        return self.history.plot(ax=ax, title=title)

    # -- Keras hooks: the recorder's, then the live figure ----------------------

    def on_train_begin(self, logs=None):
        self._screen = _LiveFigure(self.refresh_seconds) if self.live and in_notebook() else None
        self._calls = 0  # calls of the train function in this fit, for how far along it is
        super().on_train_begin(logs)
        if self._screen is not None:
            self._screen.show(self.history)

    def on_train_batch_end(self, batch, logs=None):
        records = len(self.history)
        self._calls += 1
        super().on_train_batch_end(batch, logs)
        if self._screen is not None and len(self.history) > records:
            self._screen.show(self.history, progress=self._progress())

    def _progress(self):
        """The fraction of this fit's batches done (None where fit does not say how many it runs)."""
        params = getattr(self, "params", None) or {}
        steps, epochs = params.get("steps"), params.get("epochs")
        if not steps or not epochs:
            return None
        per_call = getattr(self.model, "steps_per_execution", 1) or 1
        return min(1.0, self._calls * int(per_call) / (steps * epochs))

    def on_train_end(self, logs=None):
        super().on_train_end(logs)
        if self._screen is not None:
            self._screen.show(self.history, final=True)
            self._screen = None

    def _say(self, reason):
        """Why nothing is recorded: in the live figure's caption where there is one (no stderr), else a warning."""
        if self._screen is None:
            super()._say(reason)
        elif self._screen.image is not None:
            self._screen.show(self.history, final=True)


def describe(history):
    """One line for the live caption: the last record of every layer."""
    if not len(history):
        return history.not_recorded or "Gradient norms: waiting for the first training step"
    parts = []
    for name, norm, dead in zip(history.layers, history.norms[-1], history.no_gradient[-1], strict=True):
        text = "no gradient" if dead else "gradient exactly 0" if norm == 0 else f"{norm:.3g}"
        cut = f" ({history.cut_text(name)})" if (dead or norm == 0) and name in history.cut_by else ""
        parts.append(f"{name}: {text}{cut}")
    text = f"Gradient norms at step {history.steps[-1]}: " + "; ".join(parts)
    return f"{text}. {history.not_recorded}" if history.not_recorded else text


class _Shown:
    """A frame or caption as IPython displays it: a PNG or HTML, and the description as its plain text.

    IPython's own ``Image`` and ``HTML`` would put "<IPython.core.display.Image object>" where
    the description goes, which screen readers and the book's alt text read.
    """

    def __init__(self, text, png=None, html=None):
        self.text, self.png, self.html = text, png, html

    def _repr_png_(self):
        return self.png

    def _repr_html_(self):
        return self.html

    def __repr__(self):
        return self.text


class _LiveFigure:
    """One figure shown once and then replaced in place, at most once per `refresh_seconds`."""

    def __init__(self, refresh_seconds):
        self.refresh_seconds = refresh_seconds
        self.figure = new_figure(figsize=(WIDEST, 3.6))
        self.ax = self.figure.subplots()
        self.figure.subplots_adjust(left=0.1, right=0.8, bottom=0.15, top=0.9)
        self.image = self.caption = None
        self.last_drawn = 0.0
        self.costs = []  # seconds each redraw took, from the second frame with records on
        self.redraws = 0
        self.drew_records = False  # whether a frame with records has been drawn
        self.drawn_progress = 0.0  # how far along the fit was at the last frame

    def frame_cost(self):
        """What a frame costs: the median of the last three, 0 until the warm-up frames are past."""
        return float(np.median(self.costs[-3:])) if self.costs else 0.0

    def _gap(self, progress):
        """The least time from the last frame to the next: ``refresh_seconds``, or nine frames' cost if longer."""
        if self.refresh_seconds <= 0:
            return 0.0
        if progress is not None and progress - self.drawn_progress >= 0.25:
            return self.refresh_seconds  # drawing's budget never hides a quarter of the fit
        return max(self.refresh_seconds, 9 * self.frame_cost())

    def show(self, history, final=False, progress=None):
        """Draw ``history`` now, unless the last frame is too recent (the first record and the final frame always are).

        The first record is drawn whatever the last frame cost, and neither it nor the frame
        before it (no data yet) counts in what a frame costs: they are the first things
        matplotlib draws and cost several times a later frame, and throttling by them would leave
        a short fit with no frame between "waiting" and the end. The wait for the frame's cost
        ends once a quarter of the fit's batches (``progress``, a fraction) has passed since the
        last frame; ``refresh_seconds`` is always waited.
        """
        started = time.monotonic()
        first_record = len(history) > 0 and not self.drew_records
        if (
            self.image is not None
            and not final
            and not first_record
            and started - self.last_drawn < self._gap(progress)
        ):
            return
        warm = self.drew_records
        self.drew_records = self.drew_records or len(history) > 0
        from IPython.display import display

        draw_gradient_norms(self.ax, history, title="Gradient norm per layer (live)")
        room_for_the_legend(self.ax)
        text = describe(history)
        image = _Shown(text, png=figure_png(self.figure))
        caption = _Shown(
            text,
            html=(
                f'<div class="workbook-gradient-monitor" data-frame="{self.redraws + 1}" '
                f'style="font-family: monospace; font-size: 85%;">{html.escape(text)}</div>'
            ),
        )
        if self.image is None:
            self.image = display(image, display_id=True)
            self.caption = display(caption, display_id=True)
        else:
            self.image.update(image)
            self.caption.update(caption)
        self.redraws += 1
        self.last_drawn = started
        if warm:
            self.costs.append(time.monotonic() - started)
        if progress is not None:
            self.drawn_progress = progress
