"""Whose code made an op: the student's, the workbook's, or a library's.

Introduced in 03_finding_gradient_killers.ipynb. :func:`workbook.find_gradient_breaks`
names the line of *your* code behind each op: of the frames that made it, the innermost
one that is neither a library's (the standard library, installed packages, code
TensorFlow generates) nor the workbook's own. Both are decided by where the file really
is, so a notebook or a script of yours is never mistaken for either.
"""

import functools
import importlib.util
import linecache
import os
import sysconfig

__all__ = ["WORKBOOK_DIR", "is_library", "is_workbook", "user_frame", "user_frames"]

WORKBOOK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY_DIRS = tuple(
    os.path.abspath(path) + os.sep
    for path in {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
)
#: The module that calls the target: frames outside its innermost one are the caller of find_gradient_breaks.
TRACING_MODULE = "workbook.finder.diagnosis"


def is_workbook(filename):
    """Whether ``filename`` is a module of the workbook package itself (any of its subpackages)."""
    return bool(filename) and os.path.abspath(filename).startswith(WORKBOOK_DIR + os.sep)


@functools.lru_cache(maxsize=4096)
def is_library(filename):
    """Whether code in ``filename`` is not the student's: a library's, the workbook's, or generated."""
    if not filename or filename.startswith("<") or "__autograph_generated" in filename:
        return True
    return os.path.abspath(filename).startswith(LIBRARY_DIRS) or is_workbook(filename)


@functools.cache
def _tracing_file():
    return os.path.abspath(importlib.util.find_spec(TRACING_MODULE).origin)


def user_frames(frames):
    """The frames in the user's code, outermost first, below the workbook's own tracing call.

    Frames above that call are the caller of find_gradient_breaks, not the code that made
    the op: they are skipped.
    """
    frames = list(frames or [])
    tracing = _tracing_file()
    start = 0
    for index, frame in enumerate(frames):
        if os.path.abspath(frame.filename) == tracing:
            start = index + 1
    return [frame for frame in frames[start:] if not is_library(frame.filename)]


def user_frame(frames):
    """(file, line, code) of the innermost frame in the user's code, or (None, None, None)."""
    own = user_frames(frames)
    if not own:
        return None, None, None
    frame = own[-1]
    code = (getattr(frame, "line", None) or linecache.getline(frame.filename, frame.lineno)).strip()
    return frame.filename, frame.lineno, code
