"""nbgrader's execute step for the workbook's assignments: a dying kernel costs one cell.

Introduced in course/README.md and used by course/nbgrader_config.py; needs nbgrader
(``requirements-dev.txt``), which nothing else in the workbook imports. With nbgrader's
own ``Execute``, an answer cell that ends the kernel (``os._exit(1)``, a crash, running
out of memory) stops the whole submission: nbgrader logs an error, writes no autograded
notebook and records no grade, also for the parts done right. :class:`KernelSurvivingExecute`
marks that cell with an error instead, starts a new kernel, runs the cells before it
again (their outputs are kept from the first run) and goes on, so every other check cell
is graded as usual. After ``max_kernel_restarts`` deaths it gives up as nbgrader does.
"""

import copy

from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Integer

__all__ = ["KernelSurvivingExecute"]


class KernelSurvivingExecute(Execute):
    """nbgrader's ``Execute``, except that a kernel that dies in a cell fails that cell only."""

    max_kernel_restarts = Integer(
        2, help="How many times a submission's kernel may die before the submission fails as a whole."
    ).tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._kernel_restarts = 0
        return super().preprocess(nb, resources=resources, km=km)

    def preprocess_cell(self, cell, resources, index):
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            if self._kernel_restarts >= self.max_kernel_restarts:
                raise
            self._kernel_restarts += 1
            self.log.warning("The kernel died in cell %d; grading goes on in a new kernel.", index)
            cell.outputs.append(NotebookNode(
                output_type="error", ename="DeadKernelError",
                evalue="the kernel died while running this cell",
                traceback=["DeadKernelError: the kernel died while running this cell (os._exit, a crash or "
                           "running out of memory). The cells before it were run again in a new kernel, and "
                           "grading went on with the next cell."]))
            run_sync(self._new_kernel)()
            for earlier_index, earlier in enumerate(self.nb.cells[:index]):
                if earlier.cell_type == "code":  # again, for the state; the first run's outputs stay
                    self.execute_cell(copy.deepcopy(earlier), earlier_index, store_history=False)
            return cell, self.resources

    async def _new_kernel(self):
        await ensure_async(self.km.restart_kernel(now=True))
        await ensure_async(self.kc.wait_for_ready(timeout=self.startup_timeout))
