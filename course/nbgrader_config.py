# nbgrader settings for teaching with the workbook. Run every nbgrader command from this
# folder (course/), e.g. `nbgrader autograde 05_assignment_quantized_autoencoder`.
# The instructor's versions are the notebooks in ../notebooks: `make assignments` links
# them into source/ and writes the student versions into release/ (see README.md here).
import os

c = get_config()  # noqa: F821 (defined by nbgrader when it reads this file)

# The course folder is wherever this file is, so the commands work from any checkout.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "gradient-workbook"

# Autograding runs each notebook as it is. Part (c) of notebook 05 trains for up to its
# time_budget_seconds (300 s), so a cell may take that long plus the checks; nbgrader's
# default of 30 s per cell would fail every correct submission.
c.Execute.timeout = 900
