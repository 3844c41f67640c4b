"""Train the lab's autoencoder with several bottlenecks and put them side by side.

Introduced in 04_autoencoder_lab.ipynb. The training and measuring are
:mod:`workbook.lab.bottleneck_runs` (no drawing there); this module loads the images,
draws and shows.
"""

import numpy as np

from workbook.core.arguments import check_count, check_flag, check_images, check_seed, is_whole_number, refuse
from workbook.lab.bottleneck_runs import BottleneckRun, check_arguments, gradient_norms, train_bottlenecks

# BottleneckRun and gradient_norms are also reached from here, as the lab does.
__all__ = ["BottleneckRun", "compare_bottlenecks", "comparison_figures", "gradient_norms"]

# Upper bounds, so that a typo such as epochs=10**9 is refused instead of training for days.
MAX_EPOCHS = 1000
MAX_BATCH_SIZE = 60_000  # all of MNIST's training images in one batch
MAX_EVERY = 100_000
MAX_IMAGES = 32  # reconstructions drawn per row


def compare_bottlenecks(
    bottlenecks,
    epochs=2,
    n_train=2000,
    n_test=500,
    batch_size=64,
    seed=0,
    live=False,
    every=5,
    x_train=None,
    x_test=None,
    source="auto",
    show=True,
    flip_images=None,
):
    """Train one autoencoder per bottleneck on the same data and seed; show and return the results.

    Introduced in 04_autoencoder_lab.ipynb; the training is :func:`~workbook.lab.bottleneck_runs.train_bottlenecks`.

    Parameters
    ----------
    bottlenecks : dict
        ``{label: bottleneck}``, each bottleneck anything :func:`workbook.autoencoder` accepts.
    epochs, batch_size : int
        Passed to ``model.fit``: at most 1000 epochs and 60,000 images a batch.
    n_train, n_test : int
        How many images :func:`workbook.load_mnist` loads (ignored when `x_train`
        and `x_test` are given).
    seed : int
        Same data, same shuffling and same initial weights for every variant.
    live : bool
        Show each variant's live gradient-norm plot while it trains (in a notebook).
    every : int
        Record the gradient norms every `every` batches (at most 100,000).
    x_train, x_test : numpy.ndarray, optional
        Images already loaded, shaped (n, 28, 28, 1), finite and in [0, 1].
    source : str
        Passed to :func:`workbook.load_mnist`.
    show : bool
        Display the three figures in a notebook (nothing is shown elsewhere).
    flip_images : numpy.ndarray, optional
        A few images shaped (n, 28, 28, 1) whose bottleneck codes are compared after every
        training step: each run's ``flips`` is then the share of codes that changed at each step.

    Returns
    -------
    dict
        ``{label: BottleneckRun}``, in the order given.
    """
    check_flag("live", live, owner="compare_bottlenecks")
    check_flag("show", show, owner="compare_bottlenecks")
    if (x_train is None) != (x_test is None):
        missing, given = ("x_test", "x_train") if x_test is None else ("x_train", "x_test")
        refuse(
            missing,
            None,
            f"images too when {given} is given. Give both x_train and x_test, or neither (then they are loaded)",
            owner="compare_bottlenecks",
        )
    x_train, x_test = check_arguments(bottlenecks, epochs, batch_size, every, x_train, x_test, seed)  # before loading
    _check_bounds_and_loading(epochs, batch_size, every, n_train, n_test, source)
    seed = check_seed(seed, owner="compare_bottlenecks")  # Keras seeds only with Python's own int
    if flip_images is not None:
        flip_images = check_images("flip_images", flip_images, "compare_bottlenecks")
    if x_train is None:
        from workbook.core.data import load_mnist

        (x_train, _), (x_test, _) = load_mnist(n_train=n_train, n_test=n_test, source=source, seed=seed)
    runs = train_bottlenecks(
        bottlenecks, x_train, x_test, epochs, batch_size, seed, every, _new_monitor, flip_images=flip_images, live=live
    )
    if show:
        from workbook.core.figures import show_figure

        for figure in comparison_figures(runs, x_test):
            show_figure(figure)
    return runs


def _check_bounds_and_loading(epochs, batch_size, every, n_train, n_test, source):
    """The upper bounds of the counts, and load_mnist's arguments even when x_train makes them unused."""
    from workbook.core.data import SOURCES

    owner = "compare_bottlenecks"
    check_count("epochs", epochs, high=MAX_EPOCHS, owner=owner)
    check_count("batch_size", batch_size, high=MAX_BATCH_SIZE, owner=owner)
    check_count("every", every, high=MAX_EVERY, owner=owner)
    for argument, value in (("n_train", n_train), ("n_test", n_test)):
        if value is not None and not is_whole_number(value, low=1):
            refuse(argument, value, "None (all images) or a whole number of at least 1", owner)
    if not isinstance(source, str) or source not in SOURCES:
        refuse("source", source, f"one of {', '.join(map(repr, SOURCES))}", owner)


def _new_monitor(**options):
    """A :class:`~workbook.GradientNormMonitor`, imported only once the arguments passed their checks."""
    from workbook.monitor.monitoring import GradientNormMonitor

    return GradientNormMonitor(**options)


def comparison_figures(runs, x_test, n_images=8):
    """Loss curves, gradient norms side by side and reconstructions, as three Figures.

    Introduced in 04_autoencoder_lab.ipynb; :func:`compare_bottlenecks` shows them. The
    gradient-norm panels share one y-axis, so their heights compare directly; the last
    shows the first ``n_images`` (1 to 32) test images and their reconstructions.
    """
    owner = "comparison_figures"
    if not isinstance(runs, dict) or not runs or not all(isinstance(run, BottleneckRun) for run in runs.values()):
        refuse("runs", runs, "the non-empty dict of BottleneckRun that compare_bottlenecks returns", owner)
    x_test = check_images("x_test", x_test, owner)
    check_count("n_images", n_images, high=MAX_IMAGES, owner=owner)
    return _loss_figure(runs), _gradient_norm_figure(runs), _reconstruction_figure(runs, x_test, n_images)


def _loss_figure(runs):
    """Each bottleneck's training and test loss per epoch, in one panel with the legend beside it."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    from workbook.core.figures import PALETTE, WIDEST, new_figure

    figure = new_figure(figsize=(WIDEST, 3.4))
    figure.set_layout_engine("constrained")
    ax = figure.subplots()
    colors = list(PALETTE.values())
    for i, (label, run) in enumerate(runs.items()):
        color = colors[i % len(colors)]
        history = run.history
        epochs = np.arange(1, len(history.get("loss", [])) + 1)
        ax.plot(epochs, history.get("loss", []), "o-", color=color, label=label)
        if "val_loss" in history:
            ax.plot(epochs, history["val_loss"], "s--", color=color, alpha=0.7)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean squared error")
    ax.set_title("Reconstruction loss")
    styles = [
        Line2D([], [], color="black", marker="o", ls="-", label="training digits"),
        Line2D([], [], color="black", marker="s", ls="--", alpha=0.7, label="test digits"),
    ]
    # Beside the axes, so that no legend covers a curve: one entry per bottleneck, two styles.
    handles = [*ax.get_legend_handles_labels()[0], Line2D([], [], ls="none", label=" "), *styles]
    figure.legend(handles=handles, loc="outside right upper")
    ax.grid(True, alpha=0.3)
    return figure


def _gradient_norm_figure(runs):
    """One panel of per-layer gradient norms per bottleneck, two a row, on one y-axis."""
    from workbook.core.figures import WIDEST, new_figure
    from workbook.monitor.figures import draw_gradient_norms, fit_row_names, rows_below_the_break

    labels = list(runs)
    columns = min(len(labels), 2)  # two panels fill the notebook's width with text at full size
    rows = -(-len(labels) // columns)
    figure = new_figure(figsize=(WIDEST * columns / 2, 3.0 * rows + 0.8))
    figure.set_layout_engine("constrained")
    axes = np.atleast_1d(figure.subplots(rows, columns, squeeze=False).ravel())
    histories = [runs[label].gradients for label in labels]
    decades = _shared_decades(histories)
    reserve = max(len(rows_below_the_break(history)) for history in histories)
    # Not strict: a grid can hold more axes than there are runs (those are hidden below).
    for ax, label, history in zip(axes, labels, histories, strict=False):
        draw_gradient_norms(ax, history, title=label, decades=decades, legend=False, reserve_rows=reserve)
    for ax in axes[len(labels) :]:
        ax.set_visible(False)
    handles = {line.get_label(): line for ax in axes for line in ax.lines if not line.get_label().startswith("_")}
    figure.legend(
        list(handles.values()),
        list(handles),
        loc="outside lower center",
        ncols=len(handles),
        title="gradient norm of each layer (same y-axis in every panel)",
    )
    fit_row_names(figure)
    return figure


def _shared_decades(histories):
    """The powers of ten that hold every run's finite, non-zero gradient norms: one y-axis for all."""
    from workbook.monitor.figures import decade_range

    spans = [decade_range(history.norms) for history in histories if np.isfinite(history.norms).any()]
    spans = [span for span in spans if span != (0, 0)] or [(0, 0)]
    return min(low for low, _ in spans), max(high for _, high in spans)


def _reconstruction_figure(runs, x_test, n_images):
    """The first test images on top, and each bottleneck's reconstructions below, each row named above itself.

    A name above its row, not beside it, leaves the images the notebook's whole width.
    """
    from workbook.core.figures import WIDEST, new_figure

    n_images = min(n_images, len(x_test))
    rows_of_images = [("test images", x_test[:n_images])]
    rows_of_images += [
        (_row_name(label, run), _drawn_without_a_trace(run.model, x_test[:n_images])) for label, run in runs.items()
    ]
    side, gap, name, title = min(1.0, (WIDEST - 0.2) / n_images), 0.04, 0.28, 0.4  # inches
    height = title + len(rows_of_images) * (side + name) + 0.05
    figure = new_figure(figsize=(WIDEST, height))
    cells = figure.subplots(len(rows_of_images), n_images, squeeze=False)
    figure.subplots_adjust(
        left=0.1 / WIDEST,
        right=(0.1 + n_images * side) / WIDEST,
        top=1 - (title + name) / height,
        bottom=0.05 / height,
        wspace=gap / (side - gap),
        hspace=name / side,
    )
    for r, (row_name, images) in enumerate(rows_of_images):
        for c in range(n_images):
            cell = cells[r, c]
            cell.imshow(images[c, :, :, 0], cmap="gray", vmin=0, vmax=1)
            cell.set_xticks([])
            cell.set_yticks([])
        cells[r, 0].annotate(
            row_name, xy=(0, 1), xycoords="axes fraction", xytext=(0, 3), textcoords="offset points", va="bottom"
        )
    figure.suptitle("Test images (top) and their reconstructions")
    return figure


def _drawn_without_a_trace(model, x):
    """``model.predict(x)``, with the model's random state put back as it was before.

    A sampling bottleneck draws its code from a seed generator whose state is a variable of the
    model: a figure that draws codes would otherwise change every code measured after it.
    """
    state = [(variable, variable.numpy()) for variable in model.variables if not variable.trainable]
    try:
        return model.predict(x, verbose=0)
    finally:
        for variable, value in state:
            variable.assign(value)


def _row_name(label, run):
    name = f"{label}: MSE {run.test_mse:.4f}"
    if run.codes_used is not None:
        name += f", {run.codes_used}/{run.n_codes} codes, perplexity {run.perplexity:.1f}"
    return name
