"""Raster plots of spikes and traces of membranes, as snnTorch's and SpyTorch's tutorials draw them.

Introduced in 08_spiking_networks.ipynb (and used in 02_surrogate_zoo.ipynb's spiking section).
"""

import numpy as np
from matplotlib.ticker import MaxNLocator

from workbook.core.arguments import refuse
from workbook.core.figures import PALETTE, WIDEST, new_figure

__all__ = ["plot_spikes", "plot_sweep", "plot_growing_peak"]


def plot_spikes(inputs, spikes, membranes, threshold=1.0, n_traces=3, title=None):
    """Input raster, output raster and the membranes of a few neurons, over time, for one sample.

    Introduced in 08_spiking_networks.ipynb. ``inputs`` is (steps, n_inputs) and ``spikes``,
    ``membranes`` are (steps, n_neurons), e.g. one sample of ``LIF.run``; the membranes of the
    ``n_traces`` most active neurons are drawn against the threshold, a dot where each fired.
    Returns the figure (a notebook shows it as a cell's last value).
    """
    inputs, spikes, membranes = (np.asarray(a, dtype=float) for a in (inputs, spikes, membranes))
    for name, array in (("inputs", inputs), ("spikes", spikes), ("membranes", membranes)):
        if array.ndim != 2:
            refuse(name, array, "shaped (steps, neurons): one sample, e.g. spikes[0]", "plot_spikes")
    if spikes.shape != membranes.shape or inputs.shape[0] != spikes.shape[0]:
        allowed = f"shaped like spikes {spikes.shape}, with {inputs.shape[0]} steps"
        refuse("membranes", membranes, allowed, "plot_spikes")
    figure = new_figure(figsize=(WIDEST, 6.4))
    raster_in, raster_out, traces = figure.subplots(3, 1, sharex=True, height_ratios=[1.3, 1, 1.3])
    for ax, array, label, colour in (
        (raster_in, inputs, "input neuron", PALETTE["black"]),
        (raster_out, spikes, "neuron", PALETTE["blue"]),
    ):
        steps, neurons = np.nonzero(array)
        ax.scatter(steps, neurons, marker="|", s=40, color=colour)
        ax.set_ylabel(label)
        ax.set_ylim(-0.5, array.shape[1] - 0.5)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # neurons are counted, never halved
    raster_in.set_title(f"input spikes ({int(inputs.sum())})")
    raster_out.set_title(f"output spikes ({int(spikes.sum())})")
    colours = [PALETTE["vermillion"], PALETTE["bluish green"], PALETTE["reddish purple"], PALETTE["orange"]]
    busiest = np.argsort(-spikes.sum(axis=0), kind="stable")[: max(1, min(n_traces, spikes.shape[1]))]
    for i, neuron in enumerate(busiest):
        colour = colours[i % len(colours)]
        traces.plot(membranes[:, neuron], color=colour, label=f"neuron {neuron}")
        fired = np.nonzero(spikes[:, neuron])[0]
        traces.plot(fired, membranes[fired, neuron], "o", color=colour, markersize=4, label="_spikes")
    traces.axhline(threshold, color=PALETTE["black"], linestyle="--", linewidth=1, label="threshold")
    traces.set_title("membranes (a dot where the neuron fired)")
    traces.set_xlabel("time step")
    traces.set_ylabel("membrane u")
    traces.legend(loc="upper right", fontsize=10, ncols=2)
    if title:
        figure.suptitle(title)
    figure.set_layout_engine("constrained")
    return figure


#: The sweep's lines, one per steepness, in the palette colour-blind readers tell apart.
SWEEP_COLOURS = [PALETTE[name] for name in ("blue", "vermillion", "bluish green", "orange", "reddish purple")]


def plot_sweep(accuracies, title=None):
    """Test accuracy against the learning rate, one line for each steepness of the surrogate.

    Introduced in 08_spiking_networks.ipynb, the sweep Zenke & Vogels (2021) draw in their
    Figure 3: ``accuracies`` maps each steepness to ``{learning_rate: accuracy}``, the same
    learning rates for every steepness (at most as many steepnesses as the palette has colours),
    each line with markers of its own. Returns the figure.
    """
    slopes, rates, grid = _sweep_grid(accuracies)
    figure = new_figure(figsize=(WIDEST, 3.4))
    figure.set_layout_engine("constrained")
    ax = figure.subplots()
    for slope, row, colour, marker in zip(slopes, grid, SWEEP_COLOURS, "osD^v", strict=False):
        ax.plot(rates, row, color=colour, marker=marker, label=f"k = {slope:g}")
    ax.set_xscale("log")
    ax.set_xticks(rates, [f"{rate:g}" for rate in rates])
    ax.minorticks_off()
    ax.margins(x=0.08)
    ax.set_ylim(0.0, 1.0)
    ax.set_xlabel("learning rate (Adam)")
    ax.set_ylabel("test accuracy")
    ax.legend(title="steepness", loc="lower right")
    ax.set_title(title or "test accuracy over steepness and learning rate")
    return figure


def plot_growing_peak(accuracies, paper_groups, paper_url, chance=None, ours_title="ours"):
    """Our test accuracies beside a schematic of what Zenke & Vogels (2021) report in their Figure 5.

    Introduced in 08_spiking_networks.ipynb. ``accuracies`` maps ``(network, variant)`` to a test
    accuracy, two variants per network: the control first, then the surrogate whose peak grows
    with its steepness. The right panel draws no values, only the direction the paper reports
    for each of ``paper_groups`` (the control above the growing peak) and where to read it.
    ``ours_title`` titles the left panel (say what was trained: the task and the steps).
    """
    networks, variants = _growing_peak_groups(accuracies, paper_groups)
    colours = SWEEP_COLOURS[:2]
    figure = new_figure(figsize=(WIDEST, 3.8))
    ours, paper = figure.subplots(1, 2, sharey=True)
    for i, (variant, colour) in enumerate(zip(variants, colours, strict=True)):
        heights = [accuracies[(network, variant)] for network in networks]
        bars = ours.bar(np.arange(len(networks)) + (i - 0.5) * 0.38, heights, width=0.36, color=colour, label=variant)
        ours.bar_label(bars, fmt="%.2f", fontsize=10)
        # the paper's direction without its values: the control high, the growing peak lower
        level = [0.9, 0.55][i]
        paper.bar(
            np.arange(len(paper_groups)) + (i - 0.5) * 0.38,
            level,
            width=0.36,
            color=colour,
            hatch="//",
            edgecolor="white",
        )
    if chance is not None:
        ours.axhline(chance, color=PALETTE["black"], linestyle=":", linewidth=1, label="chance")
    ours.set_xticks(range(len(networks)), networks)
    ours.set_ylim(0, 1.15)
    ours.set_ylabel("test accuracy")
    ours.set_title(ours_title)
    ours.legend(loc="upper right", fontsize=10)
    paper.set_xticks(range(len(paper_groups)), paper_groups)
    paper.tick_params(axis="y", left=False, labelleft=False)
    paper.set_title("Zenke & Vogels (2021), Figure 5")
    paper.set_xlabel(f"a schematic: the direction they report, not their values\n({paper_url})")
    figure.set_layout_engine("constrained")
    return figure


def _sweep_grid(accuracies):
    """(steepnesses, learning rates, accuracies as rows of steepness), each sorted; refused if ragged."""
    if not isinstance(accuracies, dict) or not accuracies or not all(isinstance(v, dict) for v in accuracies.values()):
        refuse("accuracies", accuracies, "a dict {steepness: {learning_rate: accuracy}}", "plot_sweep")
    slopes = sorted(accuracies)
    rates = sorted(accuracies[slopes[0]])
    if len(slopes) > len(SWEEP_COLOURS):
        refuse("accuracies", accuracies, f"at most {len(SWEEP_COLOURS)} steepnesses, one colour each", "plot_sweep")
    if any(sorted(accuracies[slope]) != rates for slope in slopes):
        refuse("accuracies", accuracies, f"the same learning rates {rates} for every steepness", "plot_sweep")
    grid = np.array([[accuracies[slope][rate] for rate in rates] for slope in slopes])
    return slopes, rates, grid


def _growing_peak_groups(accuracies, paper_groups):
    """The networks and the two variants of ``accuracies``, in their order; refused if any pair is missing."""
    owner = "plot_growing_peak"
    if not isinstance(accuracies, dict) or not accuracies:
        refuse("accuracies", accuracies, "a dict {(network, variant): accuracy}", owner)
    networks = list(dict.fromkeys(network for network, _ in accuracies))
    variants = list(dict.fromkeys(variant for _, variant in accuracies))
    complete = len(variants) == 2 and len(accuracies) == len(networks) * len(variants)  # every pair, once
    if not complete:
        refuse("accuracies", accuracies, "two variants, the same two for every network", owner)
    if not (isinstance(paper_groups, (list, tuple)) and paper_groups):
        refuse("paper_groups", paper_groups, "a list of the paper's comparisons, e.g. ['reset attached (5c)']", owner)
    return networks, variants
