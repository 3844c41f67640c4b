"""Interleaved A/B timing: both variants built once, warmed, then alternated.

Wall-clock time on a shared machine swings by tens of percent between
identical runs; the process's CPU time (all threads) varies by a few percent.
Both are reported, as ratios of B over A taken pair by pair.
"""

import statistics
import time


def measure(function):
    """(CPU seconds, wall seconds) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    function()
    return time.process_time() - cpu, time.perf_counter() - wall


def interleaved(baseline, variants, pairs=5, warmup=1):
    """Run ``baseline`` and each variant alternately; return {name: ratio summary}.

    ``variants`` maps a name to a callable. Each round runs the baseline and
    every variant once, in an order that rotates from round to round (so no
    one always runs first, or right after another), and the ratios compare
    each variant with that round's baseline.
    """
    for _ in range(warmup):
        baseline()
        for function in variants.values():
            function()
    names = list(variants)
    ratios = {name: {"cpu": [], "wall": []} for name in names}
    seconds = {name: [] for name in ["baseline"] + names}
    everyone = [None] + names  # None: the baseline
    for round_index in range(pairs):
        shift = round_index % len(everyone)
        timings = {}
        for name in everyone[shift:] + everyone[:shift]:
            timings[name] = measure(baseline if name is None else variants[name])
        base_cpu, base_wall = timings[None]
        seconds["baseline"].append(base_cpu)
        for name in names:
            cpu, wall = timings[name]
            seconds[name].append(cpu)
            ratios[name]["cpu"].append(cpu / base_cpu)
            ratios[name]["wall"].append(wall / base_wall)
    return {name: summarize(ratios[name], seconds[name]) for name in names} | {
        "baseline": {"cpu_seconds": statistics.median(seconds["baseline"])}
    }


def summarize(ratio_lists, cpu_seconds):
    def stats(values):
        return statistics.median(values), min(values), max(values)

    return {
        "cpu": stats(ratio_lists["cpu"]),
        "wall": stats(ratio_lists["wall"]),
        "cpu_seconds": statistics.median(cpu_seconds),
    }


def ratio_cell(summary):
    """'1.02x (0.99–1.05)' for a (median, min, max) triple."""
    median, low, high = summary
    return f"{median:.2f}x ({low:.2f}–{high:.2f})"
