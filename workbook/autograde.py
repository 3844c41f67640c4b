"""nbgrader's execute step for the workbook's assignments, with the guards a hub needs.

Introduced in course/README.md and used by course/nbgrader_config.py; needs nbgrader
(``requirements-dev.txt``), which nothing else in the workbook imports. It runs in the
grader's own process, where no student code runs, and adds to nbgrader's ``Execute``:

- **a dying kernel costs one cell.** An answer cell that ends the kernel (``os._exit``,
  a crash, running out of memory) or that cannot be interrupted at its time limit is
  marked with an error; a new kernel runs the cells before it again (their outputs are
  kept from the first run) and grading goes on. nbgrader's own ``Execute`` would record
  no grade at all for the submission. After ``max_kernel_restarts`` it gives up as
  nbgrader does.
- **a time limit for the whole submission**, ``max_submission_seconds``: cells not started
  by then are marked and not run, so added cells cannot stretch grading without end.
- **tampering is caught outside the kernel.** Before anything runs, the cells a student
  could write (answers, unlocked and added cells) are read for changes to imported
  modules and objects (:func:`workbook.grading.tampering_lines`); every graded cell after
  the first such line gets no points automatically, with a message naming the line,
  and the instructor decides by hand.
- **the workbook on disk stays as it was.** Its files are hashed before and after each
  submission; a submission that changed them fails, with a message saying so.
- **a warning is not a failure.** nbgrader gives no points to a graded cell with any
  stderr output; here a graded cell's stderr (a NumPy or Keras warning raised inside
  the student's code) is kept as ordinary output, and only errors cost points.
"""

import copy
import hashlib
import pathlib
import time

from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Integer

from .grading import tampering_lines

__all__ = ["GuardedExecute", "workbook_digest"]


def workbook_digest():
    """A hash of every file of the installed ``workbook`` package."""
    digest = hashlib.sha256()
    package = pathlib.Path(__file__).resolve().parent
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(package)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _error(ename, text):
    return NotebookNode(output_type="error", ename=ename, evalue=text, traceback=[f"{ename}: {text}"])


def _is_test_cell(cell):
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("grade")) and not meta.get("solution") and cell.cell_type == "code"


class GuardedExecute(Execute):
    """nbgrader's ``Execute`` with a restart on a dead kernel, time and tampering guards."""

    max_kernel_restarts = Integer(
        2, help="How many times a submission's kernel may be restarted before the submission fails as a whole."
    ).tag(config=True)
    max_submission_seconds = Integer(
        900, help="Seconds after which the cells of a submission not yet started are not run."
    ).tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._kernel_restarts = 0
        self._started = time.monotonic()
        self._tampering = tampering_lines(nb)
        before = workbook_digest()
        nb, resources = super().preprocess(nb, resources=resources, km=km)
        if workbook_digest() != before:
            raise RuntimeError(
                "The workbook package on disk changed while this submission was graded: its code "
                "rewrote the grader's files. Reinstall the workbook, review the submission by hand, "
                "and grade the others again."
            )
        self._refuse_after_tampering(nb)
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        if time.monotonic() - self._started > self.max_submission_seconds:
            cell.outputs = [
                _error(
                    "SubmissionTimeLimit",
                    f"not run: the submission used up its {self.max_submission_seconds} s before this cell",
                )
            ]
            return cell, self.resources
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except (DeadKernelError, CellTimeoutError) as failure:
            self._recover(cell, index, failure)
            resources = self.resources
        if _is_test_cell(cell):
            for output in cell.outputs:
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    output["name"] = "stdout"
        return cell, resources

    def _recover(self, cell, index, failure):
        """Mark the cell, start a new kernel and run the cells before it again."""
        if self._kernel_restarts >= self.max_kernel_restarts:
            raise failure
        self._kernel_restarts += 1
        what = "the kernel died" if isinstance(failure, DeadKernelError) else "the kernel could not be interrupted"
        self.log.warning("In cell %d %s; grading goes on in a new kernel.", index, what)
        cell.outputs.append(
            _error(
                type(failure).__name__,
                (
                    f"{what} while running this cell (os._exit, a crash, running out of memory, or an endless "
                    f"loop that ignores interrupts). The cells before it were run again in a new kernel, and "
                    f"grading went on with the next cell."
                ),
            )
        )
        run_sync(self._new_kernel)()
        for earlier_index, earlier in enumerate(self.nb.cells[:index]):
            if earlier.cell_type == "code":  # again, for the state; the first run's outputs stay
                try:
                    self.execute_cell(copy.deepcopy(earlier), earlier_index, store_history=False)
                except (DeadKernelError, CellTimeoutError) as again:
                    raise RuntimeError(
                        f"the kernel died again while cell {earlier_index} was run a second time"
                    ) from again

    async def _new_kernel(self):
        await ensure_async(self.km.restart_kernel(now=True))
        await ensure_async(self.kc.wait_for_ready(timeout=self.startup_timeout))

    def _refuse_after_tampering(self, nb):
        """No automatic points for graded cells after the first line that changes a library."""
        if not self._tampering:
            return
        first_index, line_number, line, reason = self._tampering[0]
        message = (
            f"not graded automatically: cell {first_index}, line {line_number} ({line.strip()!r}) "
            f"{reason}. Checks after it cannot be trusted; the instructor reviews this submission."
        )
        self.log.warning("Tampering? %s", message)
        for cell in nb.cells[first_index + 1 :]:
            if _is_test_cell(cell):
                cell.outputs.append(_error("NotGradedAutomatically", message))
