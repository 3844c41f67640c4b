"""workbook.setup() keeps TensorFlow's own log out of the output, and nothing else."""

import subprocess
import sys

import pytest
from notebook_runner import clean_environment

# Lines TensorFlow 2.21 wrote to stderr on this project's machines (notebook 05 under
# nbgrader, and `import tensorflow` in a plain Python), and the form older TensorFlow uses
# (tensorflow/tensorflow#31870).
NATIVE_LOG_LINES = [
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    b"I0000 00:00:1796050408.635778    5487 port.cc:153] oneDNN custom operations are on. You may see "
    b"slightly different numerical results due to floating-point round-off errors from different "
    b"computation orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.\n",
    b"E0000 00:00:1796050411.801424    5487 util.cc:131] oneDNN supports DT_INT32 only on platforms "
    b"with AVX-512. Falling back to the default Eigen-based implementation if present.\n",
    b"I0000 00:00:1796050436.215719    7223 cpu_feature_guard.cc:227] This TensorFlow binary is optimized "
    b"to use available CPU instructions in performance-critical operations.\n",
    b"2019-08-26 11:45:17.907378: I tensorflow/stream_executor/platform/default/dso_loader.cc:44] "
    b"Successfully opened dynamic library cudart64_100.dll\n",
]
OTHER_LINES = [
    b"Traceback (most recent call last):\n",
    b"F0000 00:00:1796050411.801424    5487 tensor.cc:10] Check failed: a fatal line says why it crashes\n",
    b"WARNING: something else\n",
    b"2019-08-26 a date that is not a log prefix\n",
]


@pytest.mark.parametrize("line", NATIVE_LOG_LINES, ids=range(len(NATIVE_LOG_LINES)))
def test_tensorflow_native_log_lines_are_recognised(line):
    from workbook.quiet import is_native_log_line

    assert is_native_log_line(line)


@pytest.mark.parametrize("line", OTHER_LINES, ids=range(len(OTHER_LINES)))
def test_other_stderr_lines_are_kept(line):
    from workbook.quiet import is_native_log_line

    assert not is_native_log_line(line)


def test_setup_silences_tensorflow_in_a_fresh_process_and_keeps_everything_else(tmp_path):
    # A student's process: no TF_* variables. Before setup, TensorFlow's start-up lines
    # reach stderr (checked, so the test shows the filter is what removes them).
    script = (
        "import os, sys\n"
        "{before}\n"
        "import tensorflow as tf\n"
        "print(int(tf.cast(tf.constant(2.7), 'int32')))\n"
        "os.write(2, b'written to fd 2 by other code\\n')\n"
        "print('from Python', file=sys.stderr)\n"
    )
    env = clean_environment(tmp_path)
    loud = subprocess.run([sys.executable, "-c", script.format(before="")], capture_output=True, env=env, timeout=300)
    quiet = subprocess.run(
        [sys.executable, "-c", script.format(before="import workbook; workbook.setup(seed=0)")],
        capture_output=True,
        env=env,
        timeout=300,
    )
    assert loud.returncode == quiet.returncode == 0, quiet.stderr.decode()[-2000:]
    if b"oneDNN" not in loud.stderr and b"cpu_feature_guard" not in loud.stderr:
        pytest.skip("this TensorFlow build logs nothing at start-up here, so there is nothing to filter")
    assert quiet.stdout.strip() == b"2"
    assert quiet.stderr == b"written to fd 2 by other code\nfrom Python\n"


def test_a_log_line_written_in_pieces_is_dropped_whole_and_kept_for_reading(tmp_path):
    script = (
        "import os, time, workbook.quiet as quiet\n"
        "quiet.filter_native_log()\n"
        "os.write(2, b'W0000 00:00:1796050411.801424    5487 util.cc:131] half of a line, the rest ')\n"
        "time.sleep(0.01)\n"
        "os.write(2, b'written in a second call\\nand a line of its own\\n')\n"
        "os.write(2, b'a prompt with no end of line')\n"
        "time.sleep(0.3)\n"
        "print(quiet.dropped_lines())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=clean_environment(tmp_path), timeout=300
    )
    assert result.stderr == "and a line of its own\na prompt with no end of line"
    assert "the rest written in a second call" in result.stdout


def test_a_scripts_traceback_still_reaches_stderr(tmp_path):
    script = "import workbook; workbook.setup(seed=0)\nraise RuntimeError('the real error')\n"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=clean_environment(tmp_path), timeout=300
    )
    assert result.returncode == 1
    assert result.stderr.startswith("Traceback") and "RuntimeError: the real error" in result.stderr
