"""Raster plots of spikes and traces of membranes, as snnTorch's and SpyTorch's tutorials draw them.

Introduced in 08_spiking_networks.ipynb (and used in 02_surrogate_zoo.ipynb's spiking section).
"""

import numpy as np
from matplotlib.ticker import MaxNLocator

from workbook.core.arguments import refuse
from workbook.core.figures import PALETTE, WIDEST, new_figure

__all__ = ["plot_spikes"]


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
