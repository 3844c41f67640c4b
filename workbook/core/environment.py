"""Seeding, a quiet start and a report of the machine the workbook runs on.

Introduced in 00_start_here.ipynb; every notebook's Setup cell calls :func:`setup`.
"""

import os
import platform
import sys

import numpy as np

from workbook.core import internals
from workbook.core.arguments import check_flag, check_seed
from workbook.core.tensorflow_start import import_tensorflow_quietly

# What TensorFlow reads when it loads, set by setup() unless already set. Measured in fresh
# processes at import, first integer op, first fit, a tf.data loop and a failed op, with
# TensorFlow 2.18 and 2.21 (README, "What reaches stderr").
# Its C++ runtime's info, warning and error lines: ``cpu_feature_guard`` at import,
# ``local_rendezvous`` after a tf.data loop or a failed op, 2.18's oneDNN line at import and
# its "oneDNN supports DT_INT32 only on platforms with AVX-512" error at the first integer
# cast in a model. Fatal lines, written just before a crash, stay.
_LOG_LEVEL = ("TF_CPP_MIN_LOG_LEVEL", "3")

# oneDNN's CPU kernels, which TensorFlow turns on by itself only on x86 CPUs with AVX-512 VNNI or
# BF16, or AMX: on the others (AVX2 laptops, lab machines, many cloud CPUs) training the lab's
# autoencoder took about 3x the CPU time without them (README, "Performance"). TensorFlow builds
# them into its x86-64 Linux and Windows packages; elsewhere the variable is left alone.
_FAST_KERNELS = ("TF_ENABLE_ONEDNN_OPTS", "1")
_FAST_KERNEL_PLATFORMS = {("Linux", "x86_64"), ("Windows", "AMD64")}


def setup(seed=0, quiet=True):
    """Seed Python, NumPy and TensorFlow and (optionally) keep TensorFlow's log unwritten.

    Introduced in 00_start_here.ipynb. Importing :mod:`workbook` does none of
    this, and loads no TensorFlow: a notebook asks for it in its Setup cell, before
    anything imports TensorFlow.

    Parameters
    ----------
    seed : int
        The seed for ``random``, NumPy and TensorFlow (through
        ``keras.utils.set_random_seed``): a whole number from 0 to 2**32 - 1.
    quiet : bool
        Keep TensorFlow's start-up and runtime log lines from being written at all: the
        environment variable TensorFlow reads when it loads (``TF_CPP_MIN_LOG_LEVEL=3``; a
        value already set is kept) and the level of its Python loggers; the few lines that
        TensorFlow writes while it loads, which that level does not stop, are dropped by
        :func:`workbook.core.tensorflow_start.import_tensorflow_quietly` (everything else written
        meanwhile is passed on as it is written); and import Matplotlib without its one-time
        messages (building the font cache, a read-only home folder). Standard error is otherwise
        untouched. The variable is inherited by subprocesses started afterwards; a subprocess
        that imports TensorFlow still writes those few lines, as it would without ``setup``.

        TensorFlow reads them once, when it loads. If it was imported before ``setup``, its
        start-up lines have already been written and later runtime lines may be too; the
        Python loggers are still quieted. Restart the kernel and run the Setup cell first.

        Whatever ``quiet`` is, on x86-64 Linux and Windows ``setup`` also asks TensorFlow for
        oneDNN's fast CPU kernels (``TF_ENABLE_ONEDNN_OPTS=1``) where it would leave them off,
        unless the variable is already set; the report's ``cpu kernels`` says which are in use.

    Returns
    -------
    dict
        The versions in use, as :func:`environment_report` gives them.
    """
    check_seed(seed)
    check_flag("quiet", quiet)
    _fast_cpu_kernels()
    try:
        if quiet:
            _quiet_start()
        import keras
    except ImportError as error:  # a broken or missing install: say so, and what to do, above its traceback
        raise ImportError(_cannot_import(error)) from error

    # Python's random, NumPy's and TensorFlow's (Keras 3.8 and newer seed all three); a NumPy
    # integer too, as Keras takes only Python's own int.
    keras.utils.set_random_seed(int(seed))
    return environment_report()


def _cannot_import(error):
    """What setup() says when TensorFlow or Keras cannot be imported, and how to get them."""
    from workbook.core.compatibility import MINIMUM_VERSIONS, on_colab, what_to_do

    why = (f"{type(error).__name__}: {error}".splitlines() or [""])[0][:300]
    needed = f"TensorFlow {MINIMUM_VERSIONS['tensorflow']} or newer with Keras {MINIMUM_VERSIONS['keras']} or newer"
    problems = [f"tensorflow could not be imported ({why})", f"keras could not be imported ({why})"]
    return f"workbook.setup: the workbook needs {needed}, which could not be imported ({why}). " + what_to_do(
        problems, on_colab()
    )


def _fast_cpu_kernels():
    """Ask for oneDNN's CPU kernels before TensorFlow loads, unless the variable is already set
    (the student's own setting always wins) or TensorFlow has loaded (it read it then)."""
    if (platform.system(), platform.machine()) in _FAST_KERNEL_PLATFORMS and "tensorflow" not in sys.modules:
        os.environ.setdefault(*_FAST_KERNELS)


def _quiet_start():
    """Keep TensorFlow's log unwritten (its level set before it loads, its few start-up lines
    dropped while it loads, its Python loggers at ERROR) and import Matplotlib without its
    one-time warnings."""
    import logging

    os.environ.setdefault(*_LOG_LEVEL)
    # Matplotlib's first import logs warnings that a notebook shows in red: "Matplotlib is
    # building the font cache" in a new home folder, and, where the home folder is read-only,
    # "mkdir -p failed" and "created a temporary cache directory" (it then uses that one).
    matplotlib_logger = logging.getLogger("matplotlib")
    level = matplotlib_logger.level
    matplotlib_logger.setLevel(logging.ERROR)
    try:
        import matplotlib.font_manager  # noqa: F401 (builds the cache once)
    finally:
        matplotlib_logger.setLevel(level)
    tf = import_tensorflow_quietly()
    tf.get_logger().setLevel("ERROR")
    try:
        import absl.logging

        absl.logging.set_verbosity(absl.logging.ERROR)
    except ImportError:
        pass


def environment_report():
    """Versions, processor and accelerators, as a dict for the start notebook's table.

    Introduced in 00_start_here.ipynb.
    """
    import keras
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    try:
        kernels = "oneDNN" if internals.onednn_kernels_on() else "TensorFlow's own (oneDNN off)"
    except Exception:  # a private function a TensorFlow build may lack: the report goes on without it
        kernels = "unknown"
    return {
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "keras backend": keras.backend.backend(),
        "numpy": np.__version__,
        "platform": f"{platform.system()} {platform.machine()}",
        "cpu cores visible": os.cpu_count(),
        "cpu kernels": kernels,
        "gpus": ", ".join(gpu.name for gpu in gpus) if gpus else "none (CPU only)",
    }
