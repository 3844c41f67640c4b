"""The student's frames in a traced op's traceback: those below the finder's own tracing call.

Introduced in 03_finding_gradient_killers.ipynb. An op traced by
:func:`workbook.find_gradient_breaks` remembers every frame up to the student's call of the
finder; the frames above the finder's tracing call (``diagnosis.py``) are that caller, not
the code that made the op, and are left out.
"""

import os

from workbook.core import code_origin

__all__ = ["TRACING_FILE", "user_frame", "user_frames"]

#: The finder's module that calls the traced code.
TRACING_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "diagnosis.py")


def user_frames(frames):
    """The student's frames of ``frames``, outermost first (:func:`workbook.core.code_origin.user_frames`)."""
    return code_origin.user_frames(frames, below=TRACING_FILE)


def user_frame(frames):
    """(file, line, code) of the student's innermost frame (:func:`workbook.core.code_origin.user_frame`)."""
    return code_origin.user_frame(frames, below=TRACING_FILE)
