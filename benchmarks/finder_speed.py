"""How long find_gradient_breaks takes once TensorFlow is imported (target: under 1 s)."""

import statistics
import time

import numpy as np
from keras import ops

import workbook


def quantize(z):
    """The question's eight-op Lambda: batch_dot, cast, clip, concatenate, one_hot, reshape, sum, tile."""
    batch = ops.shape(z)[0]
    flat = ops.reshape(z, (batch, -1, 1))
    level = ops.cast(ops.clip(flat * 3.0, 0.0, 3.0), "int32")
    code = ops.one_hot(level[..., 0], 4)
    palette = ops.tile(ops.reshape(ops.linspace(0.0, 1.0, 4), (1, 4, 1)), (batch, 1, 1))
    value = ops.matmul(code, palette)
    both = ops.concatenate([value, value], axis=-1)
    return ops.reshape(ops.sum(both, axis=-1) / 2.0, ops.shape(z))


def timed(function, repeats=5):
    first = None
    times = []
    for index in range(repeats):
        started = time.perf_counter()
        report = function()
        elapsed = time.perf_counter() - started
        first = elapsed if index == 0 else first
        times.append(elapsed)
    return first, statistics.median(times[1:]), report


def main():
    x = np.random.default_rng(0).uniform(size=(32, 28, 28, 1)).astype("float32")
    z = np.random.default_rng(0).uniform(size=(32, 14, 14, 10)).astype("float32")
    cases = {
        "eight-op Lambda (function)": lambda: workbook.find_gradient_breaks(quantize, z),
        "autoencoder with the eight-op Lambda, compiled, (x, y)": lambda: workbook.find_gradient_breaks(
            workbook.autoencoder(bottleneck=quantize), (x, x)
        ),
        "autoencoder, identity bottleneck, compiled, (x, y)": lambda: workbook.find_gradient_breaks(
            workbook.autoencoder(), (x, x)
        ),
    }
    rows = ["| target | first call | median of next 4 | verdict |", "|---|---|---|---|"]
    for name, function in cases.items():
        first, median, report = timed(function)
        verdict = "ok" if report.ok else f"{report.findings[0].op_type} ({report.findings[0].reason})"
        rows.append(f"| {name} | {first:.2f} s | {median:.2f} s | {verdict} |")
    return "## Finder speed\n\n`find_gradient_breaks` after TensorFlow is imported; target under 1 s (the autoencoder timings include building the model).\n\n" + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(main())
