"""The spec of the graded assignment, 05_assignment_quantized_autoencoder: what is graded, and how.

Introduced in 05_assignment_quantized_autoencoder.ipynb (its title cell promises these numbers)
and course/README.md. One spec that the self-checks (:mod:`workbook.lab.assignment_checks`), what
the hidden tests record and the cells' time limits (:mod:`workbook.course.grading`), the grader's
verdicts (:mod:`workbook.course.verdicts`) and nbgrader's execute step
(:mod:`workbook.course.autograde`) all read. It holds no answer: the answer key lives in the
course folder, with the grader.
"""

import types

#: The assignment's name (nbgrader's), after its notebook.
NAME = "05_assignment_quantized_autoencoder"

#: The graded cells whose points follow the grader's verdicts, and their points.
POINTS = types.MappingProxyType({"a_forward": 1, "a_gradient": 2, "b_culprit": 1, "b_fix": 2, "c_reconstruction": 4})
JUDGED = tuple(POINTS)

#: Part (c): the wall time the notebook may take up to the end of part (c)'s check (building
#: and training the model included), and the MSE to reach on the grader's ``N_HELD_OUT`` digits
#: (course/held_out_digits_05.npz, in no file of the workbook); the notebook's ``x_test`` holds (at
#: most) the ``N_TEST`` bundled test digits (:mod:`workbook.lab.assignment_data`).
TIME_BUDGET_SECONDS = 300
TARGET_MSE = 0.006
N_TEST = 1000
N_HELD_OUT = 1000

#: Part (c)'s clock, the grader's, runs from the start of the notebook to the end of this cell.
TIMED_TO = "c_reconstruction"
#: The cells that may take the budget (and a minute more): part (c)'s training and its check.
TRAINING_CELLS = ("c_train_answer", "c_reconstruction")

#: Where the 2-bit quantizer's forward jumps (3x = k + 1/2) and its clip ends: inputs closer
#: than ``TIE_MARGIN`` to these are never tested, since there the tie rule decides.
TIES = (0.5 / 3, 1.5 / 3, 2.5 / 3, 0.0, 1.0)
TIE_MARGIN = 1e-3

#: The grader's inputs (:func:`workbook.course.grading.write_probe`, read again by the verdicts):
#: points on the line, codes shaped like the autoencoder's bottleneck, and images for the
#: gradient inside the autoencoder.
N_POINTS = 1200
CODE_SHAPE = (2, 14, 14, 10)
N_IMAGES = 4
#: The inputs a function is evaluated on, each a point of what the assignment asks of it
#: ("any tensor"), not only where the notebook's own checks look: ``x`` on the line around
#: [0, 1], ``code`` shaped like the bottleneck, ``far`` far outside the clip's window (up to
#: 1e4 either way), ``rank3`` and ``rank0`` with shapes of rank 3 and 0, ``float64`` in double
#: precision.
PROBED = ("x", "code", "far", "rank3", "rank0", "float64")
