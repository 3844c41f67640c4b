"""What `workbook.setup()` changes in training speed: its quiet start and oneDNN's kernels.

TensorFlow reads the settings that keep its log lines unwritten, and whether to run
oneDNN's CPU kernels, when it loads (and ``setup()`` holds back the lines written before those
are read), so each variant trains in a process of its own: one where ``workbook.setup()`` ran
before TensorFlow loaded, two with TensorFlow's defaults (the second is the A/A row, the noise
floor), and one with oneDNN's kernels turned off (``TF_ENABLE_ONEDNN_OPTS=0``, set before
``setup()``, which keeps it): what TensorFlow's defaults give on CPUs without AVX-512 VNNI or BF16
or AMX, where ``setup()`` turns them on. The workers
are started and warmed once, then asked in turn, round after round in a rotating order,
for one epoch each; every worker times its own epoch in CPU time (all its threads) and
wall time, and the ratios are taken round by round against that round's default worker.
"""

import json
import os
import statistics
import subprocess
import sys

from ab import ratio_cell

WORKER = r"""
import json, sys, time
if sys.argv[1] == "setup":
    import workbook
    workbook.setup(seed=0)
import keras
import workbook
keras.utils.set_random_seed(0)
(x, _), _ = workbook.load_mnist(n_train=int(sys.argv[2]), n_test=100, source="bundled")
model = workbook.autoencoder(bottleneck="round_ste")
from workbook.core.internals import onednn_kernels_on
onednn = onednn_kernels_on()
def epoch():
    cpu, wall = time.process_time(), time.perf_counter()
    model.fit(x, x, epochs=1, batch_size=int(sys.argv[3]), verbose=0)
    return time.process_time() - cpu, time.perf_counter() - wall
epoch()  # the warm-up: tracing and the first allocations
print(json.dumps({"ready": True, "onednn": onednn}), flush=True)
for _ in sys.stdin:
    cpu, wall = epoch()
    print(json.dumps({"cpu": cpu, "wall": wall}), flush=True)
"""

VARIANTS = {
    "TensorFlow's defaults (A/A: the noise floor)": "default",
    "after `workbook.setup()`": "setup",
    "oneDNN's kernels off (`TF_ENABLE_ONEDNN_OPTS=0`), then `workbook.setup()`": "setup",
}
#: The variables each variant starts with, beside a student's defaults.
SETTINGS = {"oneDNN's kernels off (`TF_ENABLE_ONEDNN_OPTS=0`), then `workbook.setup()`": {"TF_ENABLE_ONEDNN_OPTS": "0"}}


def _environment():
    """This process's environment without TensorFlow's switches: the defaults a student has."""
    return {name: value for name, value in os.environ.items() if not name.startswith("TF_")}


def _start(name, variant, n_train, batch_size):
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, variant, str(n_train), str(batch_size)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_environment() | SETTINGS.get(name, {}),
    )
    return worker, json.loads(worker.stdout.readline())


def _epoch(worker):
    worker.stdin.write("\n")
    worker.stdin.flush()
    return json.loads(worker.stdout.readline())


def main(n_train=4000, batch_size=64, rounds=5):
    names = ["baseline", *VARIANTS]
    variants = {"baseline": "default", **VARIANTS}
    workers, onednn = {}, {}
    try:
        for name in names:
            workers[name], ready = _start(name, variants[name], n_train, batch_size)
            onednn[name] = ready["onednn"]
        ratios = {name: {"cpu": [], "wall": []} for name in VARIANTS}
        seconds = {name: [] for name in names}
        for round_index in range(rounds):
            shift = round_index % len(names)
            timings = {name: _epoch(workers[name]) for name in names[shift:] + names[:shift]}
            for name in names:
                seconds[name].append(timings[name]["cpu"])
            for name in VARIANTS:
                for kind in ("cpu", "wall"):
                    ratios[name][kind].append(timings[name][kind] / timings["baseline"][kind])
    finally:
        for worker in workers.values():
            worker.stdin.close()
            worker.wait(timeout=60)
    rows = [
        "| TensorFlow loaded | oneDNN kernels | CPU time ratio, median (min–max) | wall time ratio | CPU s / epoch |",
        "|---|---|---|---|---|",
    ]
    for name in VARIANTS:
        cpu, wall = ratios[name]["cpu"], ratios[name]["wall"]
        summary = [(statistics.median(v), min(v), max(v)) for v in (cpu, wall)]
        rows.append(
            f"| {name} | {'on' if onednn[name] else 'off'} | {ratio_cell(summary[0])} | {ratio_cell(summary[1])} "
            f"| {statistics.median(seconds[name]):.1f} |"
        )
    header = (
        "## What `setup()` changes in training speed: the quiet start and oneDNN's kernels\n\n"
        f"One epoch of `fit` of the `round_ste` autoencoder ({n_train} bundled images, batch {batch_size}) in "
        f"worker processes of their own, {rounds} rotating rounds after a warm-up, against a worker with "
        f"TensorFlow's defaults (oneDNN kernels {'on' if onednn['baseline'] else 'off'} on this machine; "
        f"{statistics.median(seconds['baseline']):.1f} CPU s per epoch). `setup()` turns oneDNN's kernels "
        "on where TensorFlow would leave them off, unless `TF_ENABLE_ONEDNN_OPTS` is already set, and holds "
        "back the lines TensorFlow writes before it reads `TF_CPP_MIN_LOG_LEVEL`. The last row is a CPU "
        "without oneDNN's kernels: its ratio to the `setup()` row is what they give a student whose CPU "
        "TensorFlow leaves them off on. Target for `setup()`: at most 1.05x."
    )
    return header + "\n\n" + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(main())
