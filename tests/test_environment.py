"""workbook.setup() keeps TensorFlow's own log lines from being written, and touches nothing else."""

import subprocess
import sys

import pytest
from notebook_runner import FRESH_PYTHON_SECONDS, clean_environment

#: What a student's code does with TensorFlow after loading it: an integer op, a fit, a
#: tf.data loop and a failed op, each of which has made TensorFlow log a line.
TENSORFLOW_AT_WORK = """
import keras
import numpy as np
import tensorflow as tf

_ = tf.cast(tf.constant([1.5, 2.7]), "int32") + 1
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(np.zeros((32, 4), "float32"), np.zeros((32, 1), "float32"), epochs=1, verbose=0)
for _ in tf.data.Dataset.range(3).batch(2):
    pass
try:
    tf.reshape(tf.zeros([4]), [3, 5])
except tf.errors.InvalidArgumentError:
    pass
"""
# In a fresh process, with marks after loading and after the work, so a line left over says when.
SCRIPT = (
    "import os, sys\n{before}\nimport tensorflow\nos.write(2, b'-- imported\\n')\n"
    + TENSORFLOW_AT_WORK
    + "os.write(2, b'-- trained\\n')\n"
    "os.write(2, b'written to fd 2 by other code\\n')\n"
    "print('from Python', file=sys.stderr)\n"
)
MARKS_AND_OURS = b"-- imported\n-- trained\nwritten to fd 2 by other code\nfrom Python\n"


def run(tmp_path, before, **variables):
    env = clean_environment(tmp_path) | variables
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(before=before)], capture_output=True, env=env, timeout=FRESH_PYTHON_SECONDS
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    return result.stderr


def test_setup_keeps_tensorflows_lines_unwritten_and_everything_else_as_it_is(tmp_path):
    # A student's process: no TF_* variables. Without setup, TensorFlow's lines are there
    # (checked, so the test shows that setup is what keeps them out).
    loud = run(tmp_path, "")
    quiet = run(tmp_path, "import workbook; workbook.setup(seed=0)")
    assert quiet == MARKS_AND_OURS
    if loud == MARKS_AND_OURS:
        pytest.skip("this TensorFlow writes no log line here even without setup(), so the check shows nothing")


def test_a_log_level_the_user_set_is_kept(tmp_path):
    # TF_CPP_MIN_LOG_LEVEL=0 asks for every line: setup() does not override it.
    loud = run(tmp_path, "import workbook; workbook.setup(seed=0)", TF_CPP_MIN_LOG_LEVEL="0")
    quiet = run(tmp_path, "import workbook; workbook.setup(seed=0)")
    if quiet == loud:
        pytest.skip("this TensorFlow writes no log line here, so the check shows nothing")
    assert loud != MARKS_AND_OURS


def test_setup_touches_no_file_descriptor(tmp_path):
    # Standard error stays the very file it was: no pipe, no thread, nothing to drain at exit.
    script = (
        "import os, threading\n"
        "before = os.fstat(2)\n"
        "import workbook; workbook.setup(seed=0)\n"
        "after = os.fstat(2)\n"
        "print((before.st_dev, before.st_ino) == (after.st_dev, after.st_ino), "
        "[t.name for t in threading.enumerate() if 'log' in t.name.lower()])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=clean_environment(tmp_path),
        timeout=FRESH_PYTHON_SECONDS,
    )
    assert result.stdout.strip() == "True []", result.stderr[-2000:]


def test_a_scripts_traceback_still_reaches_stderr(tmp_path):
    script = "import workbook; workbook.setup(seed=0)\nraise RuntimeError('the real error')\n"
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=clean_environment(tmp_path),
        timeout=FRESH_PYTHON_SECONDS,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("Traceback") and "RuntimeError: the real error" in result.stderr
