"""Keep TensorFlow's native log lines out of a notebook's output.

Introduced in 00_start_here.ipynb, through :func:`workbook.setup`. Since TensorFlow 2.20
its C++ runtime logs through Abseil before anything initialises Abseil's logging, and
such lines go straight to the process's file descriptor 2 whatever ``TF_CPP_MIN_LOG_LEVEL``
says: the ``oneDNN custom operations are on`` banner when TensorFlow loads, or ``oneDNN
supports DT_INT32 only on platforms with AVX-512`` the first time an integer op runs.
A Jupyter kernel shows descriptor 2 as red stderr output, and nbgrader gives no points
to a graded cell that printed to stderr. So :func:`filter_native_log` routes descriptor 2
through a pipe and a reader thread that passes everything on except those log lines.
"""

import atexit
import collections
import os
import re
import select
import threading

__all__ = ["filter_native_log", "is_native_log_line", "native_log_filter_installed", "dropped_lines"]

# Abseil's and glog's prefix, as TensorFlow 2.16 and newer write it:
#   "I0000 00:00:1796050408.635778    5487 port.cc:153] oneDNN custom operations are on..."
# and the prefix of TensorFlow 2.15 and older:
#   "2024-01-05 10:11:12.345678: W tensorflow/core/...cc:44] ..."
# Fatal lines ("F...") are passed on: they come just before a crash and say why (though a
# process that aborts at once may end before the filter's thread has passed them on).
_PREFIXES = (
    re.compile(rb"^[IWE]\d{4} [\d:.]+\s+\d+ [\w./+-]+:\d+\] "),
    re.compile(rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] [\w./+-]+:\d+\] "),
)
_ABSL_BANNER = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"

# Second lines of the multi-line messages TensorFlow writes when it loads.
_CONTINUATIONS = (b"To enable the following instructions:",)

# A pipe holds 64 KiB by default; a native library that writes more while it holds
# Python's lock would wait for the filter's thread, which waits for the lock. 1 MiB makes
# that unlikely (Linux only; elsewhere the default stays).
_PIPE_BYTES = 1 << 20
# How long a line without its end waits for the rest before it is passed on as it is.
_PARTIAL_LINE_SECONDS = 0.05

_state = {"thread": None, "saved_fd": None, "pipe": None, "dropped": collections.deque(maxlen=200)}
_lock = threading.Lock()


def is_native_log_line(line):
    """True for an info, warning or error line of TensorFlow's (Abseil's) native log, as bytes."""
    line = line.lstrip(b"\r")
    return line.startswith(_ABSL_BANNER) or any(prefix.match(line) for prefix in _PREFIXES)


def native_log_filter_installed():
    """True while descriptor 2 of this process goes through the filter."""
    thread = _state["thread"]
    return thread is not None and thread.is_alive()


def dropped_lines():
    """The last 200 native log lines the filter kept out of the output, oldest first, as text.

    Introduced in 00_start_here.ipynb: where TensorFlow's own log would have said something
    useful (a memory warning before a crash, say), it is still here to read.
    """
    return [line.decode("utf-8", "replace").rstrip("\n") for line in _state["dropped"]]


def filter_native_log():
    """Route file descriptor 2 through a thread that drops TensorFlow's native log lines.

    Introduced in 00_start_here.ipynb (through :func:`workbook.setup`). Everything else
    written to descriptor 2 (Python tracebacks of a script, other libraries' messages,
    fatal lines) is passed on unchanged and in order; the dropped lines are kept for
    :func:`dropped_lines`. The second line of a log message that TensorFlow writes over
    two lines is dropped with it. Calling it again does nothing; when the process exits,
    descriptor 2 is restored (unless something else has replaced it since) and the
    thread drained.

    Returns
    -------
    bool
        True if the filter is in place (False where descriptor 2 cannot be redirected).
    """
    with _lock:
        if native_log_filter_installed():
            return True
        try:
            saved_fd = os.dup(2)
            read_fd, write_fd = os.pipe()
        except OSError:
            return False
        try:
            import fcntl

            fcntl.fcntl(write_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_BYTES)
        except (ImportError, OSError):
            pass
        os.dup2(write_fd, 2)
        os.close(write_fd)  # fd 2 is now the only writer: when it is replaced, the reader sees EOF
        pipe = os.fstat(2)
        thread = threading.Thread(
            target=_forward, args=(read_fd, saved_fd), name="workbook-native-log-filter", daemon=True
        )
        first_time = _state["thread"] is None
        _state.update(thread=thread, saved_fd=saved_fd, pipe=(pipe.st_dev, pipe.st_ino))
        thread.start()
        if first_time:
            atexit.register(_restore)
        return True


def _forward(read_fd, saved_fd):
    """Copy what arrives on ``read_fd`` to ``saved_fd``, leaving out native log lines."""
    partial = b""
    try:
        while True:
            if partial and not select.select([read_fd], [], [], _PARTIAL_LINE_SECONDS)[0]:
                _write(saved_fd, partial)  # no end of line came: pass it on as it is
                partial = b""
                continue
            try:
                chunk = os.read(read_fd, 65536)
            except InterruptedError:
                continue
            if not chunk:
                break
            text = partial + chunk
            complete, _, partial = text.rpartition(b"\n")
            if complete or text.endswith(b"\n"):
                _write(saved_fd, _without_native_log(complete + b"\n"))
        _write(saved_fd, partial)
    finally:
        os.close(read_fd)
        os.close(saved_fd)


def _write(fd, data):
    while data:
        try:
            data = data[os.write(fd, data) :]
        except InterruptedError:
            continue
        except OSError:
            return  # the original stderr is gone: nothing left to write to


def _without_native_log(chunk):
    """``chunk`` without its native log messages (their known continuation lines included)."""
    kept, dropping = [], False
    for line in chunk.splitlines(keepends=True):
        if is_native_log_line(line):
            dropping = True
            _state["dropped"].append(line)
        elif dropping and line.startswith(_CONTINUATIONS):
            _state["dropped"].append(line)  # the rest of a multi-line log message
        else:
            dropping = False
            kept.append(line)
    return b"".join(kept)


def _restore():
    """Put the original descriptor 2 back and let the thread pass on what it still holds."""
    thread, saved_fd = _state["thread"], _state["saved_fd"]
    if thread is None or not thread.is_alive():
        return
    try:
        current = os.fstat(2)
        if (current.st_dev, current.st_ino) == _state["pipe"]:
            os.dup2(saved_fd, 2)  # closes the pipe's last writer: the thread reads to the end and stops
    except OSError:
        return
    thread.join(timeout=2.0)
