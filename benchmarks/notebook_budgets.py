"""Each notebook executed headless with its classroom defaults: wall time and the kernel's peak memory.

Targets (Binder: about 2 GB and one CPU): every notebook at most 1.5 GB and
3 minutes, measured as Binder runs it, on one CPU: the kernel (and everything it starts)
is held to one core of this machine. Another process using that core only makes the
times longer, so a time measured beside other work is an upper bound.

Each notebook runs twice: with ``setup()``'s choice of CPU kernels (oneDNN's, wherever
TensorFlow supports them) and with oneDNN's kernels forced off (``TF_ENABLE_ONEDNN_OPTS=0`` in
the kernel's environment, which ``setup()`` keeps), as TensorFlow's defaults leave them on a
CPU without AVX-512 VNNI or BF16 or AMX: so a CPU without the fast kernels is measured on any
machine.
"""

import os
import pathlib
import threading
import time

import nbformat
import psutil
from nbclient import NotebookClient

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"


class PeakMemory:
    """Samples the resident memory of a process and its children in the background."""

    def __init__(self, pid, interval=0.2):
        self.pid, self.interval, self.peak = pid, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                process = psutil.Process(self.pid)
                total = process.memory_info().rss + sum(
                    child.memory_info().rss for child in process.children(recursive=True)
                )
                self.peak = max(self.peak, total)
            except psutil.Error:
                pass
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def one_cpu():
    """Hold this process, and so every kernel it starts, to one core (Binder gives one CPU)."""
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


#: The variable that turns oneDNN's CPU kernels off, and its value.
ONEDNN_OFF = ("TF_ENABLE_ONEDNN_OPTS", "0")


def cpu_seconds(pid):
    """The CPU time of a process and its children, all threads, so far."""
    process = psutil.Process(pid)
    times = [process.cpu_times()] + [child.cpu_times() for child in process.children(recursive=True)]
    return sum(t.user + t.system for t in times)


def run_notebook(path, onednn_off=False):
    """(wall seconds, kernel CPU seconds, peak kernel memory in bytes, error or None) for one notebook
    at full size."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    env = {name: value for name, value in os.environ.items() if name != ONEDNN_OFF[0]}
    if onednn_off:
        env[ONEDNN_OFF[0]] = ONEDNN_OFF[1]
    started = time.perf_counter()
    error = None
    with client.setup_kernel(env=env):
        pid = client.km.provisioner.process.pid
        with PeakMemory(pid) as memory:
            try:
                for index, cell in enumerate(notebook.cells):
                    client.execute_cell(cell, index)
            except Exception as failure:  # reported in the table, not raised: the other notebooks still run
                error = f"{type(failure).__name__}"
            cpu = cpu_seconds(pid)
    return time.perf_counter() - started, cpu, memory.peak, error


def main(only=()):
    """The section for every notebook, or for those whose names start with one of ``only`` (e.g. "06")."""
    allowed = os.sched_getaffinity(0)
    core = one_cpu()
    rows = [
        "| notebook | wall time | peak kernel memory | within budget (3 min, 1.5 GB) "
        "| oneDNN's kernels off: wall time (CPU time ratio) |",
        "|---|---|---|---|---|",
    ]
    totals, cpus = {False: 0.0, True: 0.0}, {False: 0.0, True: 0.0}
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        if only and not path.name.startswith(tuple(only)):
            continue
        seconds, cpu, peak, error = run_notebook(path)
        off_seconds, off_cpu, _, off_error = run_notebook(path, onednn_off=True)
        totals[False] += seconds
        totals[True] += off_seconds
        cpus[False] += cpu
        cpus[True] += off_cpu
        within = seconds <= 180 and peak <= 1.5e9 and error is None
        verdict = "yes" if within else ("error: " + error if error else "no")
        off = f"error: {off_error}" if off_error else f"{off_seconds:.0f} s ({off_cpu / cpu:.2f}x)"
        rows.append(f"| {path.name} | {seconds:.0f} s | {peak / 2**20:.0f} MiB | {verdict} | {off} |")
    total, off_total = totals[False], totals[True]
    rows.append(
        f"| **all notebooks** | **{total:.0f} s** | | {'yes' if total <= 600 else 'no'} (10 min) "
        f"| {off_total:.0f} s ({cpus[True] / max(cpus[False], 1e-9):.2f}x) |"
    )
    os.sched_setaffinity(0, allowed)
    load = os.getloadavg()[0]
    return (
        "## Notebook budgets\n\nEach notebook run top to bottom with its classroom defaults (not the test suite's "
        f"turned-down ones), in a fresh kernel held to one CPU (core {core}, as on Binder; load average "
        f"{load:.1f} when it ended: other work on that core makes the times longer, never shorter); memory is "
        "the kernel's resident set, sampled every 0.2 s, children included. Each notebook runs again with "
        "oneDNN's kernels off (`TF_ENABLE_ONEDNN_OPTS=0`, which `setup()` keeps), as on a CPU where TensorFlow "
        "leaves them off and `setup()` would turn them on; its ratio is of the kernel's CPU time, children "
        "included, which other work on the machine does not stretch.\n\n" + "\n".join(rows) + "\n"
    )


if __name__ == "__main__":
    import sys

    print(main(sys.argv[1:]))  # python benchmarks/notebook_budgets.py [04 06 ...]
