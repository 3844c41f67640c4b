"""Seeding, quiet logs and a report of the machine the workbook runs on.

Introduced in 00_start_here.ipynb; every notebook's Setup cell calls :func:`setup`.
"""

import os
import platform
import random

import numpy as np

from .arguments import check_flag, check_seed


def setup(seed=0, quiet=True):
    """Seed Python, NumPy and TensorFlow and (optionally) quiet TensorFlow's log.

    Introduced in 00_start_here.ipynb. Importing :mod:`workbook` does none of
    this: a notebook asks for it explicitly in its Setup cell.

    Parameters
    ----------
    seed : int
        The seed for ``random``, NumPy and TensorFlow (through
        ``keras.utils.set_random_seed``): a whole number from 0 to 2**32 - 1.
    quiet : bool
        Keep TensorFlow's start-up and runtime log lines (C++ and Python) out of the
        output, and build Matplotlib's font cache without its one-time message. Call
        ``setup`` before importing TensorFlow or Matplotlib: their start-up lines are
        written when they load.

    Returns
    -------
    dict
        The versions in use, as :func:`environment_report` gives them.
    """
    check_seed(seed)
    check_flag("quiet", quiet)
    if quiet:
        _quiet_tensorflow()
    import keras
    import tensorflow as tf

    if quiet:
        tf.get_logger().setLevel("ERROR")
        try:
            import absl.logging

            absl.logging.set_verbosity(absl.logging.ERROR)
        except ImportError:
            pass
    random.seed(seed)
    np.random.seed(seed)
    keras.utils.set_random_seed(seed)
    return environment_report()


def _quiet_tensorflow():
    """Silence what TensorFlow and Matplotlib write to stderr on their own."""
    import logging

    from .quiet import filter_native_log

    # Older TensorFlow reads this when its runtime loads; newer TensorFlow logs through
    # Abseil before Abseil is set up, which no variable silences: the filter does.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    filter_native_log()
    # The first import of Matplotlib in a new home folder logs "Matplotlib is building
    # the font cache; this may take a moment." as a warning, which a notebook shows in red.
    font_logger = logging.getLogger("matplotlib.font_manager")
    level = font_logger.level
    font_logger.setLevel(logging.ERROR)
    try:
        import matplotlib.font_manager  # noqa: F401 (builds the cache once)
    finally:
        font_logger.setLevel(level)


def environment_report():
    """Versions, processor and accelerators, as a dict for the start notebook's table.

    Introduced in 00_start_here.ipynb.
    """
    import keras
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    return {
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "keras backend": keras.backend.backend(),
        "numpy": np.__version__,
        "platform": f"{platform.system()} {platform.machine()}",
        "cpu cores visible": os.cpu_count(),
        "gpus": ", ".join(gpu.name for gpu in gpus) if gpus else "none (CPU only)",
    }
