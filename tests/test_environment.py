"""workbook.setup() keeps TensorFlow's own log lines from being written, and touches nothing else.

Three fresh processes do a student's work with TensorFlow: one without ``setup()`` (what it
writes then), one after ``setup()``, and one after ``setup()`` where the student asked for every
line (``TF_CPP_MIN_LOG_LEVEL=0``). Each costs an import of TensorFlow, so each runs once and
the tests below read what it wrote. The process after ``setup()`` also has a thread writing
numbered lines to file descriptor 2 all through ``setup()``, checks that standard error is the
same file afterwards, and ends with the student's own exception.
"""

import json
import subprocess
import sys

import pytest
from notebook_runner import FRESH_PYTHON_SECONDS, clean_environment

# The three processes are module fixtures: on one worker each runs once.
pytestmark = pytest.mark.xdist_group("environment")

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
# With marks after loading and after the work, so a line left over says when.
SCRIPT = (
    "import os, sys\n{before}\nimport tensorflow\nos.write(2, b'-- imported\\n')\n"
    + TENSORFLOW_AT_WORK
    + "os.write(2, b'-- trained\\n')\n"
    "os.write(2, b'written to fd 2 by other code\\n')\n"
    "print('from Python', file=sys.stderr)\n"
    "{after}\n"
)
MARKS_AND_OURS = b"-- imported\n-- trained\nwritten to fd 2 by other code\nfrom Python\n"

# A thread writes numbered lines to fd 2 until setup() returns, noting which it wrote while
# TensorFlow was loading (after its module appeared, before setup returned).
SETUP_WITH_A_WRITER = """
import json, threading, time
before = os.fstat(2)
done, during = threading.Event(), []
def write():
    i = 0
    while not done.is_set():
        os.write(2, b'line %d of a thread\\n' % i)
        if 'tensorflow' in sys.modules:
            during.append(i)
        i += 1
        time.sleep(0.001)
    found['written'], found['while_loading'] = i, len(during)
found = {}
writer = threading.Thread(target=write, daemon=True)
import workbook
writer.start()
try:
    workbook.setup(seed=0)
finally:  # a setup() that raises ends the script with its traceback, not a hang
    done.set(); writer.join()
after = os.fstat(2)
found['same_file'] = (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)
found['log_threads'] = [t.name for t in threading.enumerate() if 'log' in t.name.lower()]
os.write(2, b'E0000 00:00:0.0 1 mine.cc:1] a line of my own after setup\\n')
"""
# Written by the student after setup(), in the very form of TensorFlow's log lines.
OWN_LOG_LINE = b"E0000 00:00:0.0 1 mine.cc:1] a line of my own after setup\n"
ENDS_WITH_AN_ERROR = "print(json.dumps(found))\nraise RuntimeError('the real error')"
# Without setup: TensorFlow loaded before the workbook, which must then leave it alone. With the
# level setup() sets, only that guard keeps the forwarder from starting, so starting it fails here.
LEFT_ALONE = """
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
from workbook.core import tensorflow_start
def _started(*args):
    raise AssertionError("the forwarder was started for a TensorFlow already loaded")
tensorflow_start._start_lines_dropped = _started
assert tensorflow_start.import_tensorflow_quietly() is tensorflow
os.write(2, b"after\\n")
"""


def run(tmp_path_factory, before, after="", **variables):
    home = tmp_path_factory.mktemp("home")
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(before=before, after=after)],
        capture_output=True,
        env=clean_environment(home) | variables,
        timeout=FRESH_PYTHON_SECONDS,
    )


@pytest.fixture(scope="module")
def without_setup(tmp_path_factory):
    done = run(tmp_path_factory, "", LEFT_ALONE)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stderr


@pytest.fixture(scope="module")
def after_setup(tmp_path_factory):
    """(stderr, what the script found about the writer and descriptor 2, its exit code)."""
    done = run(tmp_path_factory, SETUP_WITH_A_WRITER, ENDS_WITH_AN_ERROR)
    assert done.stdout.strip(), done.stderr.decode()[-2000:]  # the script got as far as printing what it found
    found = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return done.stderr, found, done.returncode


@pytest.fixture(scope="module")
def every_line_asked_for(tmp_path_factory):
    done = run(tmp_path_factory, "import workbook; workbook.setup(seed=0)", TF_CPP_MIN_LOG_LEVEL="0")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stderr


def thread_lines(found):
    return b"".join(b"line %d of a thread\n" % i for i in range(found["written"]))


def split_off(stderr, found):
    """Standard error after setup() without the thread's lines: (the marks and ours, the traceback)."""
    rest = stderr.removeprefix(thread_lines(found))
    where = rest.find(b"Traceback")
    return rest[:where], rest[where:]


def test_setup_keeps_tensorflows_lines_unwritten_and_everything_else_as_it_is(after_setup, without_setup):
    # Without setup, TensorFlow's lines are there (checked, so the test shows that setup is
    # what keeps them out).
    stderr, found, _ = after_setup
    assert split_off(stderr, found)[0] == OWN_LOG_LINE + MARKS_AND_OURS
    if without_setup == MARKS_AND_OURS + b"after\n":
        pytest.skip("this TensorFlow writes no log line here even without setup(), so the check shows nothing")


def test_a_log_level_the_user_set_is_kept(every_line_asked_for, without_setup):
    # TF_CPP_MIN_LOG_LEVEL=0 asks for every line: setup() does not override it.
    if without_setup == MARKS_AND_OURS + b"after\n":
        pytest.skip("this TensorFlow writes no log line here, so the check shows nothing")
    assert every_line_asked_for != MARKS_AND_OURS


def test_what_others_write_while_tensorflow_loads_is_passed_on_whole_and_in_order(after_setup):
    stderr, found, _ = after_setup
    assert found["while_loading"] > 10, "the thread wrote nothing while TensorFlow loaded: the test shows nothing"
    assert stderr.startswith(thread_lines(found)), stderr.decode()[-3000:]


def test_setup_touches_no_file_descriptor(after_setup):
    # Standard error stays the very file it was: no pipe, no thread, nothing to drain at exit.
    _, found, _ = after_setup
    assert found["same_file"] is True and found["log_threads"] == []


def test_a_scripts_traceback_still_reaches_stderr(after_setup):
    stderr, found, returncode = after_setup
    traceback = split_off(stderr, found)[1].decode()
    assert returncode == 1
    assert traceback.startswith("Traceback") and traceback.rstrip().endswith("RuntimeError: the real error")


def test_a_tensorflow_imported_before_setup_is_left_alone(without_setup):
    # The script asserts that the workbook hands back the TensorFlow already loaded.
    assert without_setup.endswith(b"after\n")


# TensorFlow installed but broken, as a wheel for another platform or a half-finished install
# leaves it: its import raises ImportError.
BROKEN_TENSORFLOW = 'raise ImportError("libtensorflow_framework.so.2: cannot open shared object file")\n'


@pytest.mark.parametrize("with_setup", [False, True], ids=["import tensorflow", "workbook.setup()"])
def test_setup_with_tensorflow_unimportable_keeps_the_error_and_says_what_to_do(tmp_path, with_setup):
    broken = tmp_path / "site" / "tensorflow"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(BROKEN_TENSORFLOW)
    code = "print('before', flush=True)\n" + (
        "import workbook\nworkbook.setup(seed=0)" if with_setup else "import tensorflow"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=clean_environment(tmp_path) | {"PYTHONPATH": str(broken.parent)},
        timeout=FRESH_PYTHON_SECONDS,
    )
    # As without the workbook: the same output, exit code and TensorFlow's own last words ...
    assert (done.stdout, done.returncode) == ("before\n", 1), done.stderr
    assert (
        done.stderr.count("ImportError: libtensorflow_framework.so.2: cannot open shared object file") == 1 + with_setup
    )
    if with_setup:  # ... then, last, what it means and what to do
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("ImportError: workbook.setup: the workbook needs TensorFlow 2.18 or newer"), last
        assert "make lab" in last and '"tensorflow>=2.18"' in last


def test_the_report_goes_on_when_the_cpu_kernels_cannot_be_read(monkeypatch):
    # onednn_kernels_on reaches a private TensorFlow function a build may lack: setup() must not fail on it.
    from workbook.core import environment, internals

    def missing():
        raise ImportError("cannot import name '_pywrap_util_port'")

    monkeypatch.setattr(internals, "onednn_kernels_on", missing)
    report = environment.environment_report()
    assert report["cpu kernels"] == "unknown" and report["tensorflow"]
