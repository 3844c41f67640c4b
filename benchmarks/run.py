"""`make bench`: run every benchmark and write benchmarks/results.md.

Each benchmark module has a main() that returns a markdown section. Speed is
reported as ratios measured side by side in one run; absolute seconds are
given for scale only.
"""

import datetime
import importlib
import os
import pathlib
import platform
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
SECTIONS = [
    "import_cost",
    "finder_speed",
    "missing_gradients_overhead",
    "monitor_overhead",
    "surrogate_overhead",
    "spiking_cost",
    "quiet_cost",
    "estimator_cost",
    "notebook_06_seeds",
    "quantisation_cost",
    "notebook_07_seeds",
    "notebook_budgets",
    "grading_time",
    "book_build",
]


def machine():
    import keras
    import psutil
    import tensorflow as tf

    return (
        f"- Machine: {os.cpu_count()} CPU cores ({platform.machine()}), "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB memory, no GPU used\n"
        f"- Python {platform.python_version()}, TensorFlow {tf.__version__}, Keras {keras.__version__}\n"
        f"- Measured {datetime.date.today().isoformat()}; shared machine, so CPU-time ratios are the figures to trust\n"
    )


def main(names=None):
    sys.path.insert(0, str(HERE))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    names = names or SECTIONS
    parts = ["# Benchmarks\n\nWritten by `make bench` (benchmarks/run.py); do not edit by hand.\n\n" + machine()]
    started = time.perf_counter()
    for name in names:
        print(f"running {name} ...", flush=True)
        section_started = time.perf_counter()
        parts.append(importlib.import_module(name).main())
        print(f"  {name}: {time.perf_counter() - section_started:.0f} s", flush=True)
    parts.append(f"\nThe whole run took {time.perf_counter() - started:.0f} s.\n")
    text = "\n".join(parts)
    (HERE / "results.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:] or None)
