# nbgrader settings for teaching with the workbook. Run every nbgrader command from this
# folder (course/), e.g. `nbgrader autograde 05_assignment_quantized_autoencoder`.
# The instructor's versions are the notebooks in ../notebooks: `make assignments` links
# them into source/ and writes the student versions into release/ (see README.md here).
import os

from nbgrader.converters.autograde import Autograde
from nbgrader.preprocessors import Execute

from workbook.autograde import KernelSurvivingExecute
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

# A cell that ends the kernel (os._exit, a crash, out of memory) fails that cell only: a new
# kernel reruns the cells before it and grading goes on (nbgrader's own Execute would
# record no grade at all for the submission).
c.Autograde.autograde_preprocessors = [
    KernelSurvivingExecute if step is Execute else step
    for step in Autograde.class_traits()["autograde_preprocessors"].default()
]
