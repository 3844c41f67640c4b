"""How long find_gradient_breaks takes once TensorFlow is imported.

Targets: under 1 s for each small case (the eight-op Lambda, the autoencoder), under 2 s for
every case of the public corpora (tests/finder_corpus.py, and the fix corpora, where the
finder also measures where the gradient dies and checks its fix on the case's own code), and
on a ResNet50-sized model no slower than what `fit` does first: tracing the training step
and running it once.
"""

import pathlib
import statistics
import sys
import time

import keras
import numpy as np
from ab import interleaved, measure, ratio_cell
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
    return (
        "## Finder speed\n\n`find_gradient_breaks` after TensorFlow is imported; target under 1 s (the autoencoder "
        "timings include building the model).\n\n"
        + "\n".join(rows)
        + "\n\n"
        + corpus_section()
        + "\n"
        + resnet_section()
        + "\n"
        + told_section()
    )


def corpus_section():
    """Each case of both public corpora once, in a fresh build: CPU and wall time of the finder alone."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
    import finder_corpus
    import finder_fix_corpus
    import finder_fix_corpus_deep  # noqa: F401  (its cases join finder_fix_corpus.CASES)

    first = []
    for builder in finder_corpus.CASES:
        built = builder()
        first.append((builder.__name__, built[:2], built[2] if len(built) > 2 else {}))
    fixes = []
    for builder in finder_fix_corpus.CASES:
        built = builder()
        fixes.append((builder.__name__, (built.broken, built.example), built.options))
    return _timings_line("public corpus (tests/finder_corpus.py)", first) + _timings_line(
        "cases the advice is checked on (tests/finder_fix_corpus.py and finder_fix_corpus_deep.py)", fixes
    )


def _timings_line(corpus, cases):
    timings = []
    for name, arguments, options in cases:
        cpu, wall = measure(lambda a=arguments, o=options: workbook.find_gradient_breaks(*a, **o))
        timings.append((wall, cpu, name))
    walls, cpus = [t[0] for t in timings], [t[1] for t in timings]
    slowest = max(timings)
    return (
        f"The {len(timings)} cases of the {corpus}, each once: median "
        f"{statistics.median(walls):.2f} s wall / {statistics.median(cpus):.2f} s CPU, slowest {slowest[0]:.2f} s "
        f"wall / {slowest[1]:.2f} s CPU (`{slowest[2]}`); {sum(w < 1.0 for w in walls)} of {len(walls)} under 1 s, "
        f"{sum(w < 2.0 for w in walls)} under 2 s.\n"
    )


def resnet_section(batch_size=2, pairs=3):
    """The finder on keras.applications.ResNet50 (weights=None) against tracing and one training step."""
    x = np.random.default_rng(0).uniform(size=(batch_size, 224, 224, 3)).astype("float32")
    y = keras.utils.to_categorical(np.arange(batch_size) % 10, 10)

    def resnet():
        model = keras.applications.ResNet50(weights=None, classes=10, input_shape=(224, 224, 3))
        model.compile(optimizer="sgd", loss="categorical_crossentropy")
        return model

    trained, diagnosed = resnet(), resnet()

    def trace_and_step():
        trained.make_train_function(force=True)  # what the first fit() does: trace the step ...
        trained.train_on_batch(x, y)  # ... and run it once

    results = interleaved(
        trace_and_step, {"finder": lambda: workbook.find_gradient_breaks(diagnosed, (x, y))}, pairs=pairs
    )
    r = results["finder"]
    return (
        f"On `keras.applications.ResNet50(weights=None)` ({len(diagnosed.trainable_variables)} trainable variables, "
        f"batch {batch_size} at 224x224), compiled, `(x, y)`; {pairs} interleaved rounds after a warm-up. "
        "Target at most 1x.\n\n"
        "| target | against | CPU time ratio, median (min–max) | wall time ratio | CPU s |\n|---|---|---|---|---|\n"
        f"| find_gradient_breaks(ResNet50, (x, y)) | tracing the train step + one step | {ratio_cell(r['cpu'])} | "
        f"{ratio_cell(r['wall'])} | {r['cpu_seconds']:.1f} (baseline {results['baseline']['cpu_seconds']:.1f}) |\n"
    )


def rounded(t):
    return ops.round(t)


def told_section(batch_size=2, pairs=3):
    """The finder told that a gradient starves (the monitor's and the extension's way in) against the plain call.

    On a ResNet50 whose features are rounded before its head: every weight of the backbone starves.
    """
    from workbook.finder.diagnosis import find_known_breaks

    x = np.random.default_rng(0).uniform(size=(batch_size, 224, 224, 3)).astype("float32")
    y = keras.utils.to_categorical(np.arange(batch_size) % 10, 10)
    backbone = keras.applications.ResNet50(weights=None, include_top=False, input_shape=(224, 224, 3), pooling="avg")
    inputs = keras.Input((224, 224, 3))
    outputs = keras.layers.Dense(10)(keras.layers.Lambda(rounded)(backbone(inputs)))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="sgd", loss="categorical_crossentropy")
    results = interleaved(
        lambda: workbook.find_gradient_breaks(model, (x, y)),
        {"told": lambda: find_known_breaks(model, (x, y))},
        pairs=pairs,
    )
    r = results["told"]
    return (
        "Told that a gradient starves, as the monitor and the missing-gradients extension call it "
        "(`find_known_breaks`: where the gradient dies is measured in the first run, not in a trace of its own), "
        f"on the same ResNet50 with its pooled features rounded before a Dense head, so that every weight of the "
        f"backbone starves; {pairs} interleaved rounds after a warm-up.\n\n"
        "| target | against | CPU time ratio, median (min–max) | wall time ratio | CPU s |\n|---|---|---|---|---|\n"
        f"| find_known_breaks(cut ResNet50, (x, y)) | find_gradient_breaks on it | {ratio_cell(r['cpu'])} | "
        f"{ratio_cell(r['wall'])} | {r['cpu_seconds']:.1f} (baseline {results['baseline']['cpu_seconds']:.1f}) |\n"
    )


if __name__ == "__main__":
    print(main())
