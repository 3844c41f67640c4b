"""code_origin tells the student's code from the workbook's and the libraries', by where files really are."""

import os
import traceback

import numpy as np
import tensorflow as tf

import workbook.core.gradients
import workbook.finder.diagnosis
from workbook.core.code_origin import is_library, user_frame

USER_FILE = os.path.abspath(__file__)


def frame(filename, lineno, line="code()"):
    return traceback.FrameSummary(filename, lineno, "f", line=line)


def test_installed_packages_the_standard_library_and_generated_code_are_libraries():
    assert is_library(tf.__file__) and is_library(np.__file__) and is_library(os.__file__)
    assert is_library("<string>") and is_library(None)


def test_the_workbook_is_not_the_students_code_but_this_file_is():
    assert is_library(workbook.core.gradients.__file__) and is_library(workbook.finder.diagnosis.__file__)
    assert not is_library(USER_FILE)


def test_the_innermost_user_frame_below_the_finder_is_named():
    frames = [
        frame(USER_FILE, 1, "report = find_gradient_breaks(f, x)"),  # the caller: not the culprit
        frame(workbook.finder.diagnosis.__file__, 60),
        frame(tf.__file__, 100),
        frame(USER_FILE, 7, "return tf.round(x)"),
        frame(np.__file__, 5),
    ]
    assert user_frame(frames) == (USER_FILE, 7, "return tf.round(x)")


def test_the_caller_of_the_finder_is_never_named():
    from workbook.finder.trace import frames as finder_frames

    frames = [frame(USER_FILE, 1, "report = find_gradient_breaks(f, x)"), frame(workbook.finder.diagnosis.__file__, 60)]
    assert finder_frames.user_frame(frames + [frame(tf.__file__, 100)]) == (None, None, None)
    assert finder_frames.user_frame([]) == (None, None, None)
    # The foundation knows no tool above it: without ``below`` the caller is the user's code.
    assert user_frame(frames + [frame(tf.__file__, 100)])[:2] == (USER_FILE, 1)
