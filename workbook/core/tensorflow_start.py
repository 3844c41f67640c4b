"""Load TensorFlow without the few lines it writes before it reads its own log level.

Introduced in 00_start_here.ipynb, through :func:`workbook.setup`. With
``TF_CPP_MIN_LOG_LEVEL=3`` (which setup() sets), TensorFlow 2.20 and newer still write
Abseil's "All log messages before absl::InitializeLog()" banner and "oneDNN custom operations
are on", twice (two shared libraries), while they load, where oneDNN's kernels are on
(TensorFlow decides that from the CPU; on others they write none); 2.18 and 2.19 write the
banner and "MLIR V1 optimization pass is not enabled" at the first graph-mode session. No variable that
TensorFlow or Abseil reads turns those off except ``TF_ENABLE_ONEDNN_OPTS=0``, which turns
oneDNN's kernels off and makes training about 3x slower (``make bench``, "The quiet start's
cost").

So for the length of one call only (the import and one tiny graph session, inside the Setup
cell), file descriptor 2 points at a pipe. A small process of its own reads that pipe and writes
every byte on to the real standard error as it arrives, dropping only those exact lines (a line
is held only while it can still become one of them). Before descriptor 2 is put back, a marker
through the pipe is acknowledged, so what was written before it comes out first. There is no
temporary file, and this is the one place the workbook touches a file descriptor;
tests/test_tensorflow_start.py and tests/test_stderr_kept.py pin it at both ends of the
supported range.

The forwarder is a process, not a thread, because it must outlive the kernel's troubles: when
the kernel dies in the middle of the import (a segmentation fault, an abort after a fatal line,
``os._exit``, SIGTERM) it still passes on the last words; it reads until every writer has closed
the pipe, so a process started during the import is heard to its end; and in a session of its
own, an interrupt sent to the kernel's process group does not stop it.
"""

import contextlib
import os
import re
import select
import struct
import subprocess
import sys

__all__ = ["is_tensorflow_start_line", "import_tensorflow_quietly"]

# The exact lines, matched by their source file and whole message, so that a line of the
# student's own in the same form but with other words passes.
_BANNER = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
_MESSAGES = {
    b"port.cc": b"oneDNN custom operations are on. You may see slightly different numerical results due to"
    b" floating-point round-off errors from different computation orders. To turn them off, set the"
    b" environment variable `TF_ENABLE_ONEDNN_OPTS=0`.",
    b"mlir_graph_optimization_pass.cc": b"MLIR V1 optimization pass is not enabled",
}
# Abseil's header: severity I, date, time (seconds since 1970 before Abseil is initialised),
# thread, file:line].
_HEADER = re.compile(rb"I\d{4} \d\d:\d\d:\d+\.\d+ +\d+ ([\w.]+):\d+\] ")
_HEADER_ATOMS = (rb"I", *[rb"\d"] * 4, rb" ", rb"\d\d?", rb":", rb"\d\d?", rb":", rb"\d+", rb"\.", rb"\d+")
_HEADER_ATOMS += (rb" +", rb"\d+", rb" ", rb"[\w.]+", rb":", rb"\d+", rb"\]")


def _prefixes(atoms):
    """A pattern that matches every beginning of the sequence of regular expressions `atoms`."""
    pattern = b""
    for atom in reversed(atoms):
        pattern = atom + (b"(?:" + pattern + b")?" if pattern else b"")
    return re.compile(pattern)


_HEADER_BEGINNING = _prefixes(_HEADER_ATOMS)


def is_tensorflow_start_line(line):
    """True for one whole line (bytes, with its newline) that TensorFlow writes while it loads."""
    if not line.endswith(b"\n"):
        return False
    text = line.rstrip(b"\r\n")
    header = _HEADER.match(text)
    if header:
        return _MESSAGES.get(header.group(1)) == text[header.end() :]
    return text == _BANNER


def _may_become_start_line(partial):
    """True while `partial` (a line's beginning, no newline) can still become one of those lines."""
    if _BANNER.startswith(partial):
        return True
    header = _HEADER.match(partial)
    if header:
        message = _MESSAGES.get(header.group(1))
        return message is not None and message.startswith(partial[header.end() :])
    return _HEADER_BEGINNING.fullmatch(partial) is not None


class _Forwarder:
    """Everything fed to it written on at once, but TensorFlow's start-up lines and the markers."""

    def __init__(self, marker, write, acknowledge):
        self.marker, self.write, self.acknowledge = marker, write, acknowledge
        self.held = b""  # the beginning of a line that may still become a dropped one, or a marker
        self.mid_line = False  # a line's beginning has gone out: its rest is never dropped

    def feed(self, data):
        data = self.held + data
        at = data.find(self.marker)
        while at >= 0:
            self._pass(data[:at], final=True)
            self.acknowledge()
            data = data[at + len(self.marker) :]
            at = data.find(self.marker)
        self.held = self._pass(data, final=False)

    def close(self):
        self._pass(self.held, final=True)
        self.held = b""

    def _pass(self, data, final):
        """Write `data` on but the dropped lines; return the end that must wait for more."""
        *lines, partial = data.split(b"\n")  # lines end at "\n" only: "\r" redraws a progress bar
        kept = []
        for line in lines:
            if self.mid_line or not is_tensorflow_start_line(line + b"\n"):
                kept.append(line + b"\n")
            self.mid_line = False
        partial, held = self._split(partial, final)
        if partial:
            kept.append(partial)
            self.mid_line = True
        self.write(b"".join(kept))
        return held

    def _split(self, partial, final):
        """(what of a line's beginning goes out now, what waits for more bytes)."""
        if final:
            return partial, b""
        if not self.mid_line and _may_become_start_line(partial):
            return b"", partial
        cut = len(partial) - _marker_beginning(partial, self.marker)
        return partial[:cut], partial[cut:]


def _marker_beginning(data, marker):
    """The length of the longest end of `data` that is a beginning of `marker`."""
    for length in range(min(len(data), len(marker) - 1), 0, -1):
        if data.endswith(marker[:length]):
            return length
    return 0


def _forward(token):
    """The forwarder's life: standard input on to standard error until every writer has closed it."""
    if os.fork():
        os._exit(0)  # the starter ends at once: setup() waits for it, and nobody waits for its child
    broken = []

    def write(data):
        while data and not broken:
            try:
                data = data[os.write(2, data) :]
            except OSError as error:  # nobody reads standard error: keep reading, so no writer blocks
                broken.append(error)

    owed = []

    def acknowledge():
        owed.append(_DONE)

    forwarder = _Forwarder(_marker(token), write, acknowledge)
    os.write(1, _READY)
    reads = 0
    while chunk := os.read(0, 65536):
        forwarder.feed(chunk)
        reads = reads + 1 if owed else 0
        # The answer waits until the pipe is empty and all of it written (or a few reads more,
        # for writers that never pause), so that a line written just after the marker is out
        # too when descriptor 2 is put back.
        if owed and (reads > 16 or not _unread(0)):
            with contextlib.suppress(OSError):
                os.write(1, b"".join(owed))
            owed.clear()
    forwarder.close()


def _unread(descriptor):
    """The number of bytes waiting in the pipe at `descriptor` (0 where that cannot be asked)."""
    import fcntl  # POSIX only, as the forwarder is
    import termios

    try:
        return struct.unpack("i", fcntl.ioctl(descriptor, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


_READY, _DONE = b"r", b"d"
# Python's own start-up and a fork, on a machine that may be busy: a cap, never a schedule.
_PATIENCE_SECONDS = 60


def _marker(token):
    return b"\0workbook-tensorflow-start-" + token.encode() + b"\0"


def _answered(acknowledgements, expected):
    """True once the forwarder has written `expected`; False if it ended or kept silent too long."""
    # poll, not select: select refuses a descriptor numbered 1024 or more, which a kernel may hold.
    waiting = select.poll()
    waiting.register(acknowledgements, select.POLLIN)
    return bool(waiting.poll(_PATIENCE_SECONDS * 1000)) and os.read(acknowledgements, 1) == expected


def _started(token, reading, acknowledging):
    """True once the forwarder's starter has run and ended (it leaves the forwarder running)."""
    try:
        starter = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__, token],
            stdin=reading,
            stdout=acknowledging,
            start_new_session=True,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    try:
        return starter.wait(timeout=_PATIENCE_SECONDS) == 0
    except subprocess.TimeoutExpired:
        starter.kill()
        starter.wait()
        return False
    except BaseException:  # an interrupt while it starts: end it, and let the interrupt through
        starter.kill()
        starter.wait()
        raise


def _start_forwarder():
    """(write end of its pipe, its acknowledgements, the marker), or None where it cannot start."""
    if os.name != "posix" or not sys.executable:
        return None
    token = os.urandom(16).hex()
    reading, writing = os.pipe()
    acknowledgements, acknowledging = os.pipe()
    try:
        started = _started(token, reading, acknowledging)
    finally:
        os.close(reading)
        os.close(acknowledging)
    try:
        if started and _answered(acknowledgements, _READY):
            return writing, acknowledgements, _marker(token)
    except BaseException:  # an interrupt while it waits: a forwarder left running ends with its pipe
        os.close(writing)
        os.close(acknowledgements)
        raise
    os.close(writing)
    os.close(acknowledgements)
    return None


def _passed_through(marker, acknowledgements):
    """Send `marker` through descriptor 2 until the forwarder has written all and the pipe is empty."""
    for _ in range(100):  # a bound, for a writer that never pauses
        os.write(2, marker)
        if not _answered(acknowledgements, _DONE) or not _unread(2):
            return


@contextlib.contextmanager
def _start_lines_dropped():
    """File descriptor 2 through the forwarder for the block; then put back, in order."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    started = _start_forwarder()
    if started is None:  # TensorFlow's lines are then shown; the student's work goes on
        yield
        return
    writing, acknowledgements, marker = started
    try:
        saved = os.dup(2)
    except BaseException:  # no descriptor left: the forwarder ends with its pipe closed
        os.close(writing)
        os.close(acknowledgements)
        raise
    try:
        os.dup2(writing, 2)
        os.close(writing)
        try:
            yield
        finally:
            try:
                # Everything written before the marker is out before descriptor 2 is put
                # back, so nothing written after it can overtake it.
                with contextlib.suppress(Exception):
                    sys.stderr.flush()
                with contextlib.suppress(OSError):
                    _passed_through(marker, acknowledgements)
            finally:  # also when an interrupt comes while it waits
                os.dup2(saved, 2)
    finally:
        os.close(saved)
        os.close(acknowledgements)


def _first_graph_session(tf):
    """Run a one-op graph once: TensorFlow 2.18-2.19 log their one-time MLIR line at the first session."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, shape=[1])
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(x + 1.0, feed_dict={x: [0.0]})


def _info_lines_hidden():
    """True if the log level in effect (``TF_CPP_MIN_LOG_LEVEL``) hides TensorFlow's info lines."""
    level = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0").strip()
    return level.isdigit() and int(level) >= 1


def import_tensorflow_quietly():
    """Import TensorFlow (and run its first graph session) without its start-up lines.

    Does nothing to file descriptor 2 if TensorFlow is already imported (its start-up
    lines were written then) or if ``TF_CPP_MIN_LOG_LEVEL`` asks for info lines (every
    line is then shown). Returns the ``tensorflow`` module.
    """
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    if not _info_lines_hidden():
        import tensorflow as tf

        return tf
    with _start_lines_dropped():
        import tensorflow as tf

        _first_graph_session(tf)
    return tf


if __name__ == "__main__":
    _forward(sys.argv[1])
