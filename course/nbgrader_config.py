# nbgrader settings for teaching with the workbook. Run every nbgrader command from this
# folder (course/), e.g. `nbgrader autograde 05_assignment_quantized_autoencoder`, or grade
# several submissions at once with `python -m workbook.course.grade_class 05_assignment_quantized_autoencoder`.
# The instructor's versions are the notebooks in ../notebooks: `make assignments` links
# them into source/ and writes the student versions into release/ (see README.md here).
import os

from nbgrader.converters.autograde import Autograde
from nbgrader.converters.generate_feedback import GenerateFeedback
from nbgrader.preprocessors import Execute, GetGrades, OverwriteCells, SaveAutoGrades

from workbook.course.autograde import (
    GradesWithStatus,
    GuardedExecute,
    OverwriteReleasedCells,
    RefuseMalformedMetadata,
    SaveVerdicts,
)
from workbook.course.exchange import LinkRefusingCollect
from workbook.course.feedback import FeedbackWithoutHiddenTests
from workbook.course.grading import cell_timeout

c = get_config()  # noqa: F821 (defined by nbgrader when it reads this file)

# The course folder is wherever this file is, so the commands work from any checkout.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "gradient-workbook"
# Several graders may write the gradebook at once (workbook.course.grade_class): each waits up to
# a minute for another's write to finish instead of failing at once.
c.CourseDirectory.db_url = f"sqlite:///{os.path.join(c.CourseDirectory.root, 'gradebook.db')}?timeout=60"

# A time limit per cell that follows from the assignment's own budget: part (c)'s training
# cell and its check get the 300 s budget plus a minute, every other cell two minutes
# (the reference solution needs seconds). A cell over its limit is interrupted, marked
# with an error, and the rest of the notebook is still graded.
c.Execute.timeout = 120
c.Execute.timeout_func = cell_timeout

# nbgrader's execute step with what a hub needs (workbook/course/autograde.py): the kernel runs in a
# sandbox, assignment 05's points follow verdicts the grader takes outside the kernel, part
# (c) is timed by the grader, a whole submission gets at most 15 minutes (re-runs after a
# restart included), output is capped in bytes, a cell that ends the kernel fails that cell
# only, and a warning in a graded cell is not an error.
# A verdict the grader itself could not take is left for manual grading, never saved as a 0.
c.Autograde.autograde_preprocessors = [
    {Execute: GuardedExecute, SaveAutoGrades: SaveVerdicts}.get(step, step)
    for step in Autograde.class_traits()["autograde_preprocessors"].default()
]

# How each assignment is graded. Assignment 05's points follow the verdicts of its answer key,
# a file of this folder (never of the workbook students install; the sandbox hides this folder
# from the kernel being graded). The others are self-study: their checks run in the kernel,
# which can fake them. An assignment in neither list is refused, not graded: to hand out 05
# under another name, give that name the same answer key.
c.GuardedExecute.answer_keys = {"05_assignment_quantized_autoencoder": "answer_key_05.py"}
c.GuardedExecute.self_checked = [
    "01_forward_and_backward",
    "02_surrogate_zoo",
    "03_finding_gradient_killers",
    "04_autoencoder_lab",
    "06_beyond_straight_through",
]

# A notebook whose nbgrader metadata nbgrader would stop the whole run on (another schema
# version, a grade_id used twice) fails alone, "needs manual grading: ..." in the log, and the
# rest of the class is graded. A check cell released without its hidden tests is not reported
# as changed by every student who handed it in untouched: the warning is kept for a check cell
# someone really edited.
c.Autograde.sanitize_preprocessors = [RefuseMalformedMetadata] + [
    OverwriteReleasedCells if step is OverwriteCells else step
    for step in Autograde.class_traits()["sanitize_preprocessors"].default()
]

# `nbgrader collect` copies each submission without following any link a student left in the
# exchange (a link to the instructor's source notebook would be collected as their work).
c.ExchangeFactory.collect = LinkRefusingCollect

# Feedback shows each check cell as the student had it: the hidden tests are taken out of its
# source and out of every output (a traceback, a hook that printed the cell), and what the student
# wrote cannot run script in the reader's browser.
c.GenerateFeedback.preprocessors = [
    step
    for default in GenerateFeedback.class_traits()["preprocessors"].default()
    for step in ((GetGrades, FeedbackWithoutHiddenTests) if default is GetGrades else (default,))
]

# grades.csv says which submissions could not be graded, instead of a silent 0.
c.ExportApp.plugin_class = GradesWithStatus
