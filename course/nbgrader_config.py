# nbgrader settings for teaching with the workbook. Run every nbgrader command from this
# folder (course/), e.g. `nbgrader autograde 05_assignment_quantized_autoencoder`.
# The instructor's versions are the notebooks in ../notebooks: `make assignments` links
# them into source/ and writes the student versions into release/ (see README.md here).
import os

from nbgrader.converters.autograde import Autograde
from nbgrader.preprocessors import Execute

from workbook.autograde import GuardedExecute
from workbook.grading import cell_timeout

c = get_config()  # noqa: F821 (defined by nbgrader when it reads this file)

# The course folder is wherever this file is, so the commands work from any checkout.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "gradient-workbook"

# A time limit per cell that follows from the assignment's own budget: part (c)'s training
# cell and its check get the 300 s budget plus a minute, every other cell two minutes
# (the reference solution needs seconds). A cell over its limit is interrupted, marked
# with an error, and the rest of the notebook is still graded.
c.Execute.timeout = 120
c.Execute.timeout_func = cell_timeout

# nbgrader's execute step with the guards a hub needs (workbook/autograde.py): a cell that
# ends the kernel fails that cell only, a whole submission gets at most 15 minutes, lines
# that change imported modules are caught before any student code runs, the workbook's
# files are checked to be unchanged afterwards, and a warning in a graded cell is not an error.
c.Autograde.autograde_preprocessors = [
    GuardedExecute if step is Execute else step
    for step in Autograde.class_traits()["autograde_preprocessors"].default()
]
