"""Load TensorFlow without the log lines it writes before it reads its own log level.

Introduced in 00_start_here.ipynb, through :func:`workbook.setup`. TensorFlow 2.20 and newer
write Abseil's "All log messages before absl::InitializeLog()" and "oneDNN custom operations
are on" while they load, before ``TF_CPP_MIN_LOG_LEVEL`` is read; 2.18 and 2.19 write "MLIR V1
optimization pass is not enabled" at the first graph-mode session. Nothing TensorFlow reads
turns those off except ``TF_ENABLE_ONEDNN_OPTS=0``, which turns oneDNN's kernels off and makes
training about 3x slower on CPUs where they are on by default (``make bench``, "The quiet
start's cost").

So for the length of one call only (the import and one tiny session, a fraction of a second
inside the Setup cell, before any of the notebook's own code runs), file descriptor 2 points at
a temporary file. It is always put back (``finally``), and then every line written meanwhile
that is not a TensorFlow log line is written to standard error, in order. This is the one place
the workbook touches a file descriptor; tests/test_tensorflow_start.py pins it at both ends of
the supported range.
"""

import contextlib
import os
import re
import sys
import tempfile

__all__ = ["is_tensorflow_log_line", "import_tensorflow_quietly"]

# A line of TensorFlow's C++ log: severity I, W or E, date, time, thread, file:line] message.
# Fatal (F) lines are never held back: they say why the process is about to end.
# Before Abseil is initialised the time reads as seconds since 1970 ("00:00:1796155033.955327").
_LOG_LINE = re.compile(rb"^[IWE]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w./-]+:\d+\] ")
_ABSEIL_BANNER = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def is_tensorflow_log_line(line):
    """True for a line (bytes) of TensorFlow's native info, warning or error log, or Abseil's banner."""
    return bool(_LOG_LINE.match(line)) or line.rstrip(b"\r\n") == _ABSEIL_BANNER


def _pass_on(held, target):
    """Write what is new in `held`, but TensorFlow's log lines, to file descriptor `target`."""
    lines = held.read().splitlines(keepends=True)
    kept = memoryview(b"".join(line for line in lines if not is_tensorflow_log_line(line)))
    while kept:
        kept = kept[os.write(target, kept) :]


@contextlib.contextmanager
def _tensorflow_log_held_back():
    """File descriptor 2 into a temporary file for the block; then everything but TensorFlow's log passed on."""
    sys.stderr.flush()
    handle, path = tempfile.mkstemp(prefix="workbook-tensorflow-start-")
    os.close(handle)
    saved = os.dup(2)
    # Writers append through descriptor 2; this reads through a file position of its own.
    appended = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        with open(path, "rb") as held:
            os.dup2(appended, 2)
            try:
                yield
            finally:
                with contextlib.suppress(Exception):
                    sys.stderr.flush()
                # What was held goes out before descriptor 2 is put back, so that nothing written
                # after it can overtake it; what came in between those two steps follows at once.
                _pass_on(held, saved)
                os.dup2(saved, 2)
                _pass_on(held, 2)
    finally:
        os.close(appended)
        os.close(saved)
        os.unlink(path)


def _first_graph_session(tf):
    """Run a one-op graph once: TensorFlow 2.18-2.19 log their one-time MLIR line at the first session."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, shape=[1])
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(x + 1.0, feed_dict={x: [0.0]})


def import_tensorflow_quietly():
    """Import TensorFlow (and run its first graph session) with its start-up log lines held back.

    Does nothing to file descriptor 2 if TensorFlow is already imported: its start-up
    lines were written then. Returns the ``tensorflow`` module.
    """
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    with _tensorflow_log_held_back():
        import tensorflow as tf

        _first_graph_session(tf)
    return tf
