"""The answer key of 05_assignment_quantized_autoencoder: the grader's answers, for its verdicts.

Introduced in course/README.md. It lives in this course folder only, never in the workbook a
student installs, and the sandbox hides this folder from the kernel being graded. The grader
runs it as ``python -I answer_key_05.py PROBE ARTIFACTS`` after the kernel has ended
(``c.GuardedExecute.answer_keys`` in nbgrader_config.py names it); the instructor's own run of
notebook 05 loads it from here (``workbook.course.grading.judge_here``). What is judged, and how,
is in ``workbook.course.verdicts``. Part (c) is measured on the digits of
``held_out_digits_05.npz`` beside it, which are in no file of the workbook (README.md here).
"""

import os

from workbook.course.verdicts import AnswerKey, main


def quantizer(x):
    """Part (a): ``round(3 clip(x, 0, 1)) / 3`` forward; the clip's derivative, ``[0 <= x <= 1]``, backward."""
    import keras

    clipped = keras.ops.clip(x, 0.0, 1.0)
    return clipped + keras.ops.stop_gradient(keras.ops.round(3.0 * clipped) / 3.0 - clipped)


#: Part (c): the 1,000 digits the grader measures on, found beside this file wherever the
#: course folder is (the grader runs this file by its absolute path, in isolated mode).
HELD_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "held_out_digits_05.npz")

#: Part (b): the op that cuts the encoder's gradient and the variable it computes, compared as
#: the title cell of the assignment says (the op in any case, the variable exactly).
KEY = AnswerKey(quantizer=quantizer, culprit=("cast", "codes"), held_out=HELD_OUT)

if __name__ == "__main__":
    main(KEY)
