"""The one place the workbook touches a file descriptor: TensorFlow's first lines dropped while it loads.

workbook/core/tensorflow_start.py points file descriptor 2 at a pipe for the length of
``import tensorflow`` (and one tiny graph session) inside ``setup()``; a process of its own
writes everything on as it arrives, but TensorFlow's exact start-up lines. These tests pin,
at each end of the supported range, that TensorFlow still writes such lines while it loads
(else the module can go), which lines are dropped and which are not however the bytes are
cut, and that standard error is the same file afterwards. tests/test_environment.py runs setup()
in fresh processes (what others write in that window is passed on whole and in order there),
tests/test_stderr_kept.py in real kernels.
"""

import re
import subprocess
import sys

import pytest
from notebook_runner import FRESH_PYTHON_SECONDS, clean_environment

from workbook.core.tensorflow_start import _Forwarder, _may_become_start_line, is_tensorflow_start_line

# Copied from TensorFlow 2.21 and 2.18 with TF_CPP_MIN_LOG_LEVEL=3, and from Abseil.
TENSORFLOW_START_LINES = [
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    b"I0000 00:00:1796243083.522094    8985 port.cc:153] oneDNN custom operations are on. You may see slightly"
    b" different numerical results due to floating-point round-off errors from different computation orders."
    b" To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.\n",
    b"I0000 00:00:1796243082.335188    8264 mlir_graph_optimization_pass.cc:437] MLIR V1 optimization pass"
    b" is not enabled\n",
    b"I0000 00:00:1796154990.055375   30135 mlir_graph_optimization_pass.cc:401] MLIR V1 optimization pass"
    b" is not enabled\n",
]
OTHER_LINES = [
    b"F1201 18:24:04.123456    4711 check.cc:12] Check failed: a fatal line says why the process ends\n",
    b"Traceback (most recent call last):\n",
    b"WARNING: a line of your own\n",
    b"WARNING: All log messages before absl::InitializeLog() is called: my own sentence\n",
    b"I0000 is how my own table starts\n",
    b"I think, therefore I am\n",
    b"\n",
    b"I0000 00:00:1796150506.700275   29336 port.cc:153] oneDNN custom operations are on, says my own line\n",
    b"I0000 00:00:1796154990.055375   30135 mlir_graph_optimization_pass.cc:401] MLIR V1 is mine\n",
    b"I0000 00:00:1796154990.055375   30135 my_port.cc:153] MLIR V1 optimization pass is not enabled\n",
    b"W1201 18:24:04.123456    4711 local_rendezvous.cc:405] Local rendezvous is aborting with status\n",
    b"E1201 18:24:04.123456    4711 util.cc:70] my own line, in the form of a log line\n",
]


@pytest.mark.parametrize("line", TENSORFLOW_START_LINES)
def test_tensorflows_start_lines_are_recognised(line):
    assert is_tensorflow_start_line(line)
    assert all(_may_become_start_line(line[:end]) for end in range(len(line)))


@pytest.mark.parametrize("line", OTHER_LINES)
def test_other_lines_are_not(line):
    assert not is_tensorflow_start_line(line)
    assert not is_tensorflow_start_line(line.rstrip(b"\n"))


MARKER = b"\0marker\0"


def forward(pieces):
    """Feed `pieces` to a forwarder; what it wrote and acknowledged, in order."""
    events = []
    forwarder = _Forwarder(MARKER, lambda data: events.append(data), lambda: events.append("acknowledged"))
    for piece in pieces:
        forwarder.feed(piece)
    forwarder.close()
    return events


def written(events):
    return b"".join(event for event in events if event != "acknowledged")


@pytest.mark.parametrize("size", [1, 2, 3, 7, 50, 10_000])
def test_only_tensorflows_lines_are_dropped_however_the_bytes_are_cut(size):
    lines = [line for pair in zip(TENSORFLOW_START_LINES * 3, OTHER_LINES, strict=False) for line in pair]
    data = b"".join(lines) + b"no newline at the end"
    events = forward([data[i : i + size] for i in range(0, len(data), size)])
    assert written(events) == b"".join(OTHER_LINES) + b"no newline at the end"


def test_a_partial_line_goes_out_at_once_unless_it_may_still_become_tensorflows():
    events = []
    forwarder = _Forwarder(MARKER, events.append, lambda: None)
    forwarder.feed(b"a partial line, ")
    assert events[-1] == b"a partial line, "
    forwarder.feed(b"finished\nI0000 00:00:1.5 ")  # may become one of TensorFlow's lines: held
    assert written(events) == b"a partial line, finished\n"
    forwarder.feed(b"7 port.cc:153] my own words")  # cannot any more: out at once
    assert written(events) == b"a partial line, finished\nI0000 00:00:1.5 7 port.cc:153] my own words"
    forwarder.feed(b"\n" + TENSORFLOW_START_LINES[0][:30])
    forwarder.feed(TENSORFLOW_START_LINES[0][30:] + b"I")
    assert written(events).endswith(b"my own words\n")
    forwarder.feed(b" am here\n" + TENSORFLOW_START_LINES[1] + b"my prefix: ")
    assert written(events).endswith(b"my own words\nI am here\nmy prefix: ")
    forwarder.feed(TENSORFLOW_START_LINES[1])  # the rest of a line whose beginning went out: kept
    assert written(events).endswith(b"my own words\nI am here\nmy prefix: " + TENSORFLOW_START_LINES[1])


def test_a_progress_bar_redrawn_with_carriage_returns_goes_out_at_once():
    events = []
    forwarder = _Forwarder(MARKER, events.append, lambda: None)
    for percent in (10, 20, 30):
        forwarder.feed(b"\r%3d%% |%s|" % (percent, b"#" * (percent // 10)))
        assert written(events).endswith(b"%d%% |%s|" % (percent, b"#" * (percent // 10)))


def test_the_marker_is_answered_after_all_before_it_is_written_and_never_shown():
    events = forward([b"before\nhalf a li", b"ne" + MARKER[:3], MARKER[3:] + b" and after\n"])
    answered = events.index("acknowledged")
    assert written(events[:answered]) == b"before\nhalf a line"
    assert written(events[answered:]) == b" and after\n"


def run(tmp_path, script, **variables):
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        env=clean_environment(tmp_path) | variables,
        timeout=FRESH_PYTHON_SECONDS,
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    return result.stdout.decode(), result.stderr


# What TensorFlow writes at its start without the workbook: the import and a first graph session.
PLAIN_START = (
    "import os\nimport tensorflow as tf\ngraph = tf.Graph()\n"
    "with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:\n"
    "    session.run(tf.constant([1.0]) + 1.0)\n"
    "os.write(2, b'after\\n')\nprint(tf.constant(2).numpy())\n"
)
# Abseil's header without its time and thread, which differ from run to run.
HEADER_TIME_AND_THREAD = re.compile(rb"^I\d{4} \d\d:\d\d:\d+\.\d+ +\d+ ", re.MULTILINE)


def test_where_the_forwarder_cannot_start_tensorflow_loads_and_writes_exactly_its_start_lines(tmp_path):
    # Harmless when it fails: no Python to start the forwarder with, and the import goes on,
    # writing what TensorFlow writes without the workbook (TF_CPP_MIN_LOG_LEVEL=3, as setup()
    # sets it). Those lines are the reason the module exists, and what a process the notebook
    # starts after setup() writes when it imports TensorFlow (it inherits the level).
    # TensorFlow 2.20 and newer write theirs only where oneDNN's kernels are on, which it
    # decides from the CPU (some with AVX2 and no AVX-512 get none); TF_ENABLE_ONEDNN_OPTS=1
    # asks for them wherever they can run, so the verdict does not depend on the CPU that runs
    # the test. If a TensorFlow release stops writing them, this fails:
    # then tensorflow_start.py can be deleted and setup() can import plainly.
    level = {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "1"}
    script = (
        "import os, sys\nsys.executable = ''\n"
        "from workbook.core.tensorflow_start import import_tensorflow_quietly\n"
        "tf = import_tensorflow_quietly()\nos.write(2, b'after\\n')\nprint(tf.constant(2).numpy())\n"
    )
    outputs = [run(tmp_path, code, **level) for code in (script, PLAIN_START)]
    assert all(stdout == "2\n" and stderr.endswith(b"after\n") for stdout, stderr in outputs)
    (_, stderr), (_, plain) = outputs
    lines = stderr.splitlines(keepends=True)[:-1]
    assert lines and all(is_tensorflow_start_line(line) for line in lines), stderr.decode()
    assert HEADER_TIME_AND_THREAD.sub(b"", stderr) == HEADER_TIME_AND_THREAD.sub(b"", plain), plain.decode()


def test_the_forwarder_ends_when_the_pipe_is_closed(tmp_path):
    # run() reads standard error until every writer has closed it, the forwarder included:
    # a forwarder that outlived the pipe would make it wait for its timeout and fail.
    script = (
        "import os\nfrom workbook.core.tensorflow_start import _start_lines_dropped\n"
        "with _start_lines_dropped():\n    os.write(2, b'inside\\n')\n"
        "os.write(2, b'outside\\n')\n"
    )
    _, stderr = run(tmp_path, script)
    assert stderr == b"inside\noutside\n"


def test_descriptor_2_is_put_back_when_the_import_raises(tmp_path):
    # The student's error (here a KeyError in the window) goes on unchanged; stderr is the same file.
    script = (
        "import os\nfrom workbook.core.tensorflow_start import _start_lines_dropped\n"
        "before = os.fstat(2)\n"
        "try:\n"
        "    with _start_lines_dropped():\n"
        "        os.write(2, b'inside\\n')\n"
        "        raise KeyError('mine')\n"
        "except KeyError as error:\n"
        "    print(repr(error))\n"
        "after = os.fstat(2)\n"
        "print((before.st_dev, before.st_ino) == (after.st_dev, after.st_ino))\n"
        "os.write(2, b'outside\\n')\n"
    )
    stdout, stderr = run(tmp_path, script)
    assert stdout == "KeyError('mine')\nTrue\n" and stderr == b"inside\noutside\n"


def test_an_acknowledgement_is_heard_on_a_descriptor_numbered_above_1024():
    # A kernel that has opened many files gets high descriptors; select() refuses those
    # (ValueError), which setup() would have raised into the Setup cell.
    import os
    import resource

    from workbook.core import tensorflow_start

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 1500:
        pytest.skip(f"this machine allows {hard} descriptors, not 1500")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1600), hard))
    reading, writing = os.pipe()
    high = os.dup2(reading, 1500)
    try:
        os.write(writing, tensorflow_start._READY)
        assert tensorflow_start._answered(high, tensorflow_start._READY)
    finally:
        for descriptor in (reading, writing, high):
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
