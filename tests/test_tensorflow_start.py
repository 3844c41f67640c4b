"""The one place the workbook touches a file descriptor: TensorFlow's first lines held back while it loads.

workbook/core/tensorflow_start.py points file descriptor 2 at a temporary file for the length of
``import tensorflow`` (and one tiny graph session) inside ``setup()``, puts it back, and passes
on everything written meanwhile but TensorFlow's log lines. These tests pin, at each end of the
supported range, that TensorFlow still writes such lines while it loads (else the module can go),
that nothing else written in that window is lost or reordered, and that standard error is the
same file afterwards.
"""

import subprocess
import sys

import pytest
from notebook_runner import clean_environment

from workbook.core.tensorflow_start import is_tensorflow_log_line

# Copied from TensorFlow 2.21 and 2.18 writing to a terminal, and from Abseil.
TENSORFLOW_LINES = [
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    b"I0000 00:00:1796150506.700275   29336 port.cc:153] oneDNN custom operations are on. You may see\n",
    b"I0000 00:00:1796154990.055375   30135 mlir_graph_optimization_pass.cc:401] MLIR V1 optimization pass"
    b" is not enabled\n",
    b"W1201 18:24:04.123456    4711 local_rendezvous.cc:405] Local rendezvous is aborting with status\n",
    b"E1201 18:24:04.123456    4711 cpu_utils.cc:70] oneDNN supports DT_INT32 only on platforms with AVX-512\n",
]
OTHER_LINES = [
    b"F1201 18:24:04.123456    4711 check.cc:12] Check failed: a fatal line says why the process ends\n",
    b"Traceback (most recent call last):\n",
    b"WARNING: a line of your own\n",
    b"I0000 is how my own table starts\n",
    b"\n",
]


@pytest.mark.parametrize("line", TENSORFLOW_LINES)
def test_tensorflows_log_lines_are_recognised(line):
    assert is_tensorflow_log_line(line)


@pytest.mark.parametrize("line", OTHER_LINES)
def test_other_lines_are_not(line):
    assert not is_tensorflow_log_line(line)


def run(tmp_path, script):
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, env=clean_environment(tmp_path), timeout=300
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    return result.stdout.decode(), result.stderr


def test_this_tensorflow_still_writes_lines_before_it_reads_its_log_level(tmp_path):
    # The reason the module exists. If a TensorFlow release stops writing them, this fails:
    # then tensorflow_start.py can be deleted and setup() can import TensorFlow plainly.
    script = (
        "import os\nos.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'\n"
        "import tensorflow as tf\nfrom workbook.core.tensorflow_start import _first_graph_session\n"
        "_first_graph_session(tf)\n"
    )
    _, stderr = run(tmp_path, script)
    written = [line for line in stderr.splitlines(keepends=True) if line.strip()]
    assert written and all(is_tensorflow_log_line(line) for line in written), stderr.decode()


def test_what_others_write_while_tensorflow_loads_is_passed_on_whole_and_in_order(tmp_path):
    # A thread writes numbered lines to fd 2 until setup() returns, noting which it wrote while
    # TensorFlow was loading (after its module appeared, before setup returned).
    script = (
        "import os, sys, threading, time\n"
        "before = os.fstat(2)\n"
        "done, during = threading.Event(), []\n"
        "def write():\n"
        "    i = 0\n"
        "    while not done.is_set():\n"
        "        os.write(2, b'line %d of a thread\\n' % i)\n"
        "        if 'tensorflow' in sys.modules:\n"
        "            during.append(i)\n"
        "        i += 1\n"
        "        time.sleep(0.001)\n"
        "    print(i, len(during))\n"
        "writer = threading.Thread(target=write)\n"
        "import workbook\n"
        "writer.start(); workbook.setup(seed=0); done.set(); writer.join()\n"
        "after = os.fstat(2)\n"
        "os.write(2, b'E0000 00:00:0.0 1 mine.cc:1] a line of my own after setup\\n')\n"
        "print((before.st_dev, before.st_ino) == (after.st_dev, after.st_ino))\n"
    )
    stdout, stderr = run(tmp_path, script)
    counts, same_file = stdout.split("\n")[:2]
    written, while_loading = map(int, counts.split())
    assert same_file == "True"  # standard error is the file it was
    assert while_loading > 10, "the thread wrote nothing while TensorFlow loaded: the test shows nothing"
    expected = b"".join(b"line %d of a thread\n" % i for i in range(written))
    assert stderr == expected + b"E0000 00:00:0.0 1 mine.cc:1] a line of my own after setup\n"


def test_a_tensorflow_imported_before_setup_is_left_alone(tmp_path):
    script = (
        "import os\nimport tensorflow\nbefore = os.fstat(2)\n"
        "from workbook.core.tensorflow_start import import_tensorflow_quietly\n"
        "assert import_tensorflow_quietly() is tensorflow\n"
        "os.write(2, b'after\\n')\n"
    )
    _, stderr = run(tmp_path, script)
    assert stderr.endswith(b"after\n")
