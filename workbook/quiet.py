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
import os
import re
import threading

__all__ = ["filter_native_log", "is_native_log_line", "native_log_filter_installed"]

# Abseil's and glog's prefix, as TensorFlow 2.16 and newer write it:
#   "I0000 00:00:1796050408.635778    5487 port.cc:153] oneDNN custom operations are on..."
# and the prefix of TensorFlow 2.15 and older:
#   "2024-01-05 10:11:12.345678: W tensorflow/core/...cc:44] ..."
# Fatal lines ("F...") are kept: they come just before a crash and say why.
_PREFIXES = (
    re.compile(rb"^[IWE]\d{4} [\d:.]+\s+\d+ [\w./+-]+:\d+\] "),
    re.compile(rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] [\w./+-]+:\d+\] "),
)
_ABSL_BANNER = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"

# Second lines of the multi-line messages TensorFlow writes when it loads.
_CONTINUATIONS = (b"To enable the following instructions:",)

_state = {"thread": None, "saved_fd": None, "dropped": 0}
_lock = threading.Lock()


def is_native_log_line(line):
    """True for an info, warning or error line of TensorFlow's (Abseil's) native log, as bytes."""
    line = line.lstrip(b"\r")
    return line.startswith(_ABSL_BANNER) or any(prefix.match(line) for prefix in _PREFIXES)


def native_log_filter_installed():
    """True while descriptor 2 of this process goes through the filter."""
    thread = _state["thread"]
    return thread is not None and thread.is_alive()


def filter_native_log():
    """Route file descriptor 2 through a thread that drops TensorFlow's native log lines.

    Introduced in 00_start_here.ipynb (through :func:`workbook.setup`). Everything else
    written to descriptor 2 (Python tracebacks of a script, other libraries' messages,
    fatal lines) is passed on unchanged and in order. The second line of a log message
    that TensorFlow writes over two lines is dropped with it. Calling it again does
    nothing; when the process exits, descriptor 2 is restored and the thread drained.

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
        os.dup2(write_fd, 2)
        os.close(write_fd)  # fd 2 is now the only writer: when it is replaced, the reader sees EOF
        thread = threading.Thread(target=_forward, args=(read_fd, saved_fd), name="workbook-native-log-filter",
                                  daemon=True)
        _state.update(thread=thread, saved_fd=saved_fd)
        thread.start()
        atexit.register(_restore)
        return True


def _forward(read_fd, saved_fd):
    """Copy what arrives on ``read_fd`` to ``saved_fd``, leaving out native log lines."""
    try:
        while True:
            try:
                chunk = os.read(read_fd, 65536)
            except InterruptedError:
                continue
            if not chunk:
                break
            kept = _without_native_log(chunk)
            while kept:
                try:
                    kept = kept[os.write(saved_fd, kept):]
                except InterruptedError:
                    continue
                except OSError:
                    kept = b""  # the original stderr is gone: nothing left to write to
    finally:
        os.close(read_fd)


def _without_native_log(chunk):
    """``chunk`` without its native log messages (their known continuation lines included)."""
    kept, dropping = [], False
    for line in chunk.splitlines(keepends=True):
        if is_native_log_line(line):
            dropping = True
            _state["dropped"] += 1
        elif dropping and line.startswith(_CONTINUATIONS):
            continue  # the rest of a multi-line log message written in the same call
        else:
            dropping = False
            kept.append(line)
    return b"".join(kept)


def _restore():
    """Put the original descriptor 2 back and let the thread pass on what it still holds."""
    thread, saved_fd = _state["thread"], _state["saved_fd"]
    if thread is None:
        return
    try:
        os.dup2(saved_fd, 2)  # closes the pipe's last writer: the thread reads to the end and stops
    except OSError:
        return
    thread.join(timeout=2.0)
