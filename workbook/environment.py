"""Seeding, quiet logs and a report of the machine the workbook runs on.

Introduced in 00_start_here.ipynb; every notebook's Setup cell calls :func:`setup`.
"""

import os
import platform
import random

import numpy as np

def setup(seed=0, quiet=True):
    """Seed Python, NumPy and TensorFlow and (optionally) quiet TensorFlow's log.

    Introduced in 00_start_here.ipynb. Importing :mod:`workbook` does none of
    this: a notebook asks for it explicitly in its Setup cell.

    Parameters
    ----------
    seed : int
        The seed for ``random``, NumPy and TensorFlow (through
        ``keras.utils.set_random_seed``).
    quiet : bool
        Hide TensorFlow's C++ and Python info messages.

    Returns
    -------
    dict
        The versions in use, as :func:`environment_report` gives them.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a whole number of at least 0, e.g. seed=0.")
    if quiet:
        # Read by TensorFlow's C++ runtime when it loads; harmless once loaded.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
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
