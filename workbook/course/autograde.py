"""nbgrader's execute step for the workbook's assignments: a sandboxed kernel, verdicts outside it.

Introduced in course/README.md and used by course/nbgrader_config.py; needs nbgrader
(``requirements-dev.txt``), which nothing else in the workbook imports. It runs in the
grader's own process, where no student code runs, and changes nbgrader's ``Execute`` so:

- **the kernel runs in a sandbox** (:mod:`workbook.course.sandbox`): a box of its own holding
  nothing but the grader's inputs for this submission (``grading_probe.npz``), the rest
  of the machine read-only, the course, the exchange and every temporary folder hidden,
  no network, an unprivileged user, and every process it started killed with it; its tasks
  and memory bounded per box where the machine gives the grader control groups, and its
  files by a file system of its own where the grader may mount one;
- **the verdicts are the grader's**: after the kernel has ended, the graded cells of an
  assignment with an answer key (``answer_keys``: assignment 05's, in the course folder) get
  their points from that key, run by this Python in isolated mode on what the hidden tests
  recorded; the kernel can only lose its own points (an error in a graded cell still costs
  them), never earn one. A verdict the grader could not take is left for manual grading
  (:class:`SaveVerdicts`), never a 0. An assignment with neither an answer key nor a place in
  ``self_checked`` is refused before its kernel starts;
- **part (c) is timed here**: from the start of the notebook's first cell to the end of part
  (c)'s check, kernel restarts included, by this process's clock, so that work however
  scheduled (a hook, a thread) counts; each judged cell's recording is taken out of the box
  as soon as its check ends, so that nothing done afterwards changes it;
- **a dying kernel costs one cell**: it is marked, a new kernel runs the cells before it
  again, grading goes on; after ``max_kernel_restarts`` the submission fails as a whole;
- **the whole submission has ``max_submission_seconds``**, re-runs after restarts
  included; cells not started by then are marked and not run;
- **output is capped in bytes** per cell (``max_output_bytes``), as it arrives;
- **a warning is not a failure**: a graded cell's stderr is kept as ordinary output.
"""

import copy
import csv
import os
import pathlib
import shutil
import stat
import tempfile
import time

from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbgrader.plugins import CsvExportPlugin
from nbgrader.preprocessors import ClearHiddenTests, Execute, NbGraderPreprocessor, OverwriteCells, SaveAutoGrades
from nbgrader.utils import is_grade, is_locked, is_solution, is_task
from traitlets import Dict, Integer, List, Unicode, validate

from workbook.core.arguments import refuse
from workbook.course.grading import ARTIFACTS_FOLDER, PROBE_FILE, run_verdicts, verdict_peak_memory, write_probe
from workbook.course.sandbox import (
    MAX_DISK_BYTES,
    MAX_MEMORY_BYTES,
    MAX_TASKS,
    TMPFS_BYTES,
    Box,
    can_hide,
    sandbox_problem,
    sandboxed_kernel_manager,
)
from workbook.course.verdicts import MAX_ARTIFACT_BYTES
from workbook.lab import assignment_spec as spec

__all__ = ["GuardedExecute", "SaveVerdicts", "OverwriteReleasedCells", "GradesWithStatus", "RefuseMalformedMetadata"]

# Where GuardedExecute tells SaveVerdicts which graded cells the grader could not judge.
_UNJUDGED = "workbook_unjudged"


def _error(ename, text):
    return NotebookNode(output_type="error", ename=ename, evalue=text, traceback=[f"{ename}: {text}"])


def _grade_id(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_test_cell(cell):
    return cell.cell_type == "code" and bool(is_grade(cell)) and not is_solution(cell)


class GuardedExecute(Execute):
    """nbgrader's ``Execute`` in a sandbox, with the grader's verdicts and time, output and restart guards."""

    max_kernel_restarts = Integer(
        2, help="How many times a submission's kernel may be restarted before the submission fails as a whole."
    ).tag(config=True)
    max_submission_seconds = Integer(
        900, help="Seconds a whole submission may run, re-runs after a kernel restart included."
    ).tag(config=True)
    max_output_bytes = Integer(100_000, help="Bytes of output kept per cell; the rest is dropped.").tag(config=True)
    max_tasks = Integer(
        MAX_TASKS, help="Processes and threads one submission's kernel may hold together (where cgroups allow)."
    ).tag(config=True)
    max_memory_bytes = Integer(
        MAX_MEMORY_BYTES, help="Memory one submission's kernel may hold, temporary folders included (cgroups)."
    ).tag(config=True)

    max_disk_bytes = Integer(
        MAX_DISK_BYTES, help="Bytes of files one submission's box may hold (a memory-backed file system; root)."
    ).tag(config=True)

    @validate("max_tasks", "max_memory_bytes", "max_disk_bytes")
    def _a_limit_a_kernel_can_start_under(self, proposal):
        least = {"max_tasks": 64, "max_memory_bytes": 512 * 2**20, "max_disk_bytes": 16 * 2**20}[proposal["trait"].name]
        if proposal["value"] < least:
            why = "a kernel with TensorFlow needs that much to start; the default is far above it"
            allowed = f"at least {least:,} ({why})"
            refuse(f"c.GuardedExecute.{proposal['trait'].name}", proposal["value"], allowed)
        return proposal["value"]

    sandbox_user = Unicode(
        "",
        help="The user a kernel runs as when the grader runs as root; empty: a user id of its own for each box.",
    ).tag(config=True)
    hidden_folders = List(
        Unicode(),
        help="Folders the kernel must not see, besides the course, the exchange, the grader's home and /tmp.",
    ).tag(config=True)
    answer_keys = Dict(
        value_trait=Unicode(),
        help="{assignment: its answer key}, a file of the course folder (relative to it, or absolute) "
        "whose verdicts give the graded cells their points.",
    ).tag(config=True)
    self_checked = List(
        Unicode(), help="Assignments graded by their checks in the kernel (self-study: a student can fake them)."
    ).tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        problem = sandbox_problem()
        if problem:
            raise RuntimeError(problem)
        answer_key = self._answer_key((resources or {}).get("nbgrader", {}).get("assignment"))
        self._started = time.monotonic()
        self._kernel_restarts = 0
        self._output_bytes = {}
        self._times = {}
        self._notebook_started = None
        self._failed_cells = set()
        box, ours, work = Box(self.sandbox_user), None, None
        try:  # from here on, whatever fails, the box and its control groups are removed
            self._bound(box)
            # The grader's own folder, which the kernel never sees: its copy of the probe (the
            # kernel's may be rewritten) and, afterwards, what the kernel recorded.
            ours = pathlib.Path(tempfile.mkdtemp(prefix="workbook-verdict-"))
            write_probe(ours / PROBE_FILE)
            shutil.copyfile(ours / PROBE_FILE, box.work / PROBE_FILE)
            box.give(box.work / PROBE_FILE)
            # Its working folder, held before the kernel starts: what the grader takes out of the box
            # later is found from this handle, never through a path the kernel could have changed.
            work = os.open(box.work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            resources = dict(resources or {})
            resources["metadata"] = {**resources.get("metadata", {}), "path": str(box.work)}
            limit = self.timeout_func or (lambda cell: self.timeout)
            self.timeout_func = lambda cell: max(1, min(limit(cell) or self.max_submission_seconds, self._left()))
            manager = sandboxed_kernel_manager(box, self._hidden(), kernel_name=self.kernel_name or "python3")
            self._recordings = (work, ours / ARTIFACTS_FOLDER)
            self._recordings[1].mkdir()
            try:
                nb, resources = super().preprocess(nb, resources=resources, km=manager)
            finally:
                self.timeout_func = limit
                self._end_kernel(manager)
            if answer_key:
                resources[_UNJUDGED] = self._apply_verdicts(nb, box, ours, answer_key)
        finally:
            if work is not None:
                os.close(work)
            self._remove(box)
            if ours is not None:
                shutil.rmtree(ours, ignore_errors=True)
        return nb, resources

    def _end_kernel(self, manager):
        """End the box's kernel once its cells have run: nbclient leaves running a kernel it did not start.

        Without this, the box waited for it to end on its own, and killed it after 10 s. Never
        raises: where this fails, the box's removal still ends every process, and the grades stand.
        """
        try:
            if self.kc is not None:
                self.kc.stop_channels()
                self.kc = None
            if run_sync(manager.is_alive)():
                run_sync(manager.shutdown_kernel)(now=True)
            run_sync(manager.cleanup_resources)()
        except Exception as error:  # noqa: BLE001 (a kernel already gone is no failure either)
            if "No kernel is running!" not in str(error):
                self.log.warning("The kernel could not be ended (%s): the box's removal ends it.", error)

    def _bound(self, box):
        """Give ``box`` its limits; the log says which this machine cannot give, and why."""
        temporary = sum(TMPFS_BYTES.values())
        if self.max_disk_bytes + temporary >= self.max_memory_bytes // 2:  # all of it memory, charged to the box
            allowed = (
                f"below {self.max_memory_bytes // 2 - temporary:,}, so that with the kernel's "
                f"temporary folders ({temporary:,} bytes) it stays below half of "
                f"c.GuardedExecute.max_memory_bytes={self.max_memory_bytes:,}, or a kernel that fills its files "
                "is killed for memory before it is told its disk is full"
            )
            refuse("c.GuardedExecute.max_disk_bytes", self.max_disk_bytes, allowed)
        unlimited = box.limit(self.max_tasks, self.max_memory_bytes)
        if unlimited:
            self.log.warning("The kernel's tasks and memory are bounded only by the machine's limits: %s.", unlimited)
        unbounded = box.bound_disk(self.max_disk_bytes)
        if unbounded:
            self.log.warning("The kernel's files are bounded only by the grader's disk: %s.", unbounded)

    def _remove(self, box):
        """Remove ``box``, logging the most memory it held and anything it left behind (the grades stand)."""
        peak = box.peak_memory()
        if peak is not None:  # for the instructor's capacity planning (make bench reads it)
            self.log.info("The box held at most %.0f MiB of memory.", peak / 2**20)
        left = box.remove()
        if box.killed:
            killed, grace = box.killed, box.grace_seconds
            self.log.warning("%d of the box's processes still ran %g s into the box's removal: killed.", killed, grace)
        if left:
            self.log.error("%s.", left)

    def _course_root(self):
        root = self.config.get("CourseDirectory", {}).get("root")
        return root if isinstance(root, str) else os.getcwd()

    def _answer_key(self, assignment):
        """The answer key of ``assignment`` (None if it is self-checked); refuses an assignment with neither."""
        if assignment in self.answer_keys:
            path = os.path.join(self._course_root(), self.answer_keys[assignment])
            if not os.path.isfile(path):
                raise RuntimeError(
                    f"The answer key of assignment {assignment!r}, {path}, is missing: c.GuardedExecute.answer_keys "
                    f"in nbgrader_config.py names it. Put it back (course/{spec.NAME}'s is answer_key_05.py)."
                )
            if not can_hide(os.path.dirname(path)):
                raise RuntimeError(
                    f"The answer key {path} is in a folder the sandboxed kernel must see (it holds Python or the "
                    f"workbook): the student's kernel could read it. Keep it in the course folder."
                )
            return path
        if assignment in self.self_checked:
            return None
        raise RuntimeError(
            f"Assignment {assignment!r} has no verdict spec, so it is not graded: its checks run in the "
            f"student's kernel, which can fake them. In nbgrader_config.py, give it an answer key "
            f"(c.GuardedExecute.answer_keys[{assignment!r}] = 'answer_key_05.py' for assignment 05 under "
            f"another name), or list it in c.GuardedExecute.self_checked if it is self-study."
        )

    def _hidden(self):
        folders = [os.getcwd(), self._course_root(), os.path.expanduser("~"), *self.hidden_folders]
        folders += [os.path.dirname(os.path.join(self._course_root(), key)) for key in self.answer_keys.values()]
        for section, name in (("CourseDirectory", "root"), ("Exchange", "root")):
            value = self.config.get(section, {}).get(name)
            if isinstance(value, str):
                folders.append(value)
        folders.append("/srv/nbgrader")  # nbgrader's default exchange
        return folders

    def _left(self):
        return self.max_submission_seconds - (time.monotonic() - self._started)

    def preprocess_cell(self, cell, resources, index):
        if self._left() <= 0:
            cell.outputs = [
                _error(
                    "SubmissionTimeLimit",
                    f"not run: the submission used up its {self.max_submission_seconds} s before this cell",
                )
            ]
            return cell, self.resources
        started = time.monotonic()
        if self._notebook_started is None:
            self._notebook_started = started
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except (DeadKernelError, CellTimeoutError) as failure:
            self._failed_cells.add(index)
            self._recover(cell, index, failure)
            resources = self.resources
        self._after_cell(cell, index, started)
        return cell, resources

    def _after_cell(self, cell, index, started):
        """Note the cell's first run (its times; a judged check's recording, taken now); keep a check's warnings."""
        if any(output.get("ename") == "CellTimeoutError" for output in cell.get("outputs", [])):
            self._failed_cells.add(index)  # not run again after a restart: it would only time out again
        if _grade_id(cell) not in self._times:
            self._times[_grade_id(cell)] = (started, time.monotonic())
            if _is_test_cell(cell) and _grade_id(cell) in spec.JUDGED:
                _take_recording(*self._recordings, _grade_id(cell))
        if _is_test_cell(cell):
            for output in cell.outputs:
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    output["name"] = "stdout"

    def output(self, outs, msg, display_id, cell_index):
        """Keep at most ``max_output_bytes`` of a cell's output; say once that the rest was dropped."""
        if display_id or self._charge(msg, cell_index):  # a display id's message was charged on arrival
            return super().output(outs, msg, display_id, cell_index)
        self._say_dropped(outs, msg, cell_index)
        return None

    def process_message(self, msg, cell, cell_index):
        """A message with a display id counts against the cell running when it arrives; past the cap it is dropped.

        nbclient writes such a message into every earlier output with that id, in any cell, before
        (and besides) :meth:`output`: without this, a handle updated from a thread, or shown again
        under one id, put any number of bytes into the graded notebook.
        """
        transient = msg.get("content", {}).get("transient") or {}
        kinds = ("display_data", "update_display_data", "execute_result")
        charged = msg.get("msg_type") in kinds and transient.get("display_id")
        # a widget's state (comm messages) goes into the graded notebook's metadata: charged the same way
        charged = charged or str(msg.get("msg_type", "")).startswith("comm")
        if charged and not self._charge(msg, cell_index):
            self._say_dropped(cell.outputs, msg, cell_index)
            return None
        return super().process_message(msg, cell, cell_index)

    def _say_dropped(self, outs, msg, cell_index):
        """The notice that output was dropped, once per cell: when ``msg`` is the one that went past the cap."""
        if self._output_bytes[cell_index] - len(repr(msg.get("content", ""))) <= self.max_output_bytes:
            notice = f"... output dropped: a cell may show at most {self.max_output_bytes:,} bytes ...\n"
            outs.append(NotebookNode(output_type="stream", name="stdout", text=notice))

    def _charge(self, msg, cell_index):
        """Count ``msg``'s bytes against cell ``cell_index``; True while the cell is within ``max_output_bytes``."""
        buffers = sum(memoryview(buffer).nbytes for buffer in msg.get("buffers") or ())
        used = self._output_bytes.get(cell_index, 0) + len(repr(msg.get("content", ""))) + buffers
        self._output_bytes[cell_index] = used
        return used <= self.max_output_bytes

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
            if earlier.cell_type == "code" and earlier_index not in self._failed_cells and self._left() > 0:
                # again, for the state; the first run's outputs stay
                try:
                    self.execute_cell(copy.deepcopy(earlier), earlier_index, store_history=False)
                except (DeadKernelError, CellTimeoutError) as again:
                    raise RuntimeError(
                        f"the kernel died again while cell {earlier_index} was run a second time"
                    ) from again

    async def _new_kernel(self):
        await ensure_async(self.km.restart_kernel(now=True))
        await ensure_async(self.kc.wait_for_ready(timeout=self.startup_timeout))

    def _training_seconds(self):
        """From the start of the first cell to the end of part (c)'s check: hooks, threads and re-runs included."""
        if spec.TIMED_TO not in self._times:
            return None
        return self._times[spec.TIMED_TO][1] - self._notebook_started

    def _apply_verdicts(self, nb, box, ours, answer_key):
        """Set each judged cell's outcome from the grader's verdict; the grade ids it could not judge.

        The kernel's own outcome can only cost points. A verdict the grader could not take
        (its process failed, or one part of it) is marked for manual grading, never a fail.
        """
        artifacts = ours / ARTIFACTS_FOLDER  # each taken when its check cell ended (_take_recording)
        try:
            verdicts = run_verdicts(answer_key, ours / PROBE_FILE, artifacts, self._training_seconds())
        except Exception as error:
            verdicts = dict.fromkeys(spec.JUDGED, (None, f"the verdict process failed: {error}"))
        peak = verdict_peak_memory(answer_key)
        if peak is not None:  # for the instructor's capacity planning (make bench reads it)
            self.log.info("The verdict process held at most %.0f MiB of memory.", peak / 2**20)
        unjudged = []
        for cell in nb.cells:
            grade_id = _grade_id(cell)
            if not _is_test_cell(cell) or grade_id not in verdicts:
                continue
            passed, message = verdicts[grade_id]
            # A number shown as a cell's result would be read as partial credit: only the verdict counts.
            cell.outputs = [o for o in cell.outputs if o.get("output_type") != "execute_result"]
            if passed:
                cell.outputs.append(NotebookNode(output_type="stream", name="stdout", text=message + "\n"))
            elif passed is None:  # why goes to the instructor's log, not into the student's feedback
                self.log.error("Cell %s needs manual grading: %s", grade_id, message)
                unjudged.append(grade_id)
                told = "the grader could not take its verdict on this cell; your instructor grades it by hand."
                cell.outputs.insert(0, _error("NeedsManualGrading", told))
            else:
                cell.outputs.insert(0, _error("NotPassed", message))
        return unjudged


def _take_recording(work, artifacts, grade_id):
    """Copy what the hidden test of ``grade_id`` recorded in the box into ``artifacts``, now.

    ``work`` is the handle of the kernel's working folder, taken before the kernel started. The
    kernel is still running: nothing is followed through a link (the recordings' folder
    included), nothing but a regular file of at most MAX_ARTIFACT_BYTES is read, and a pipe
    never blocks.
    """
    try:
        folder = os.open(ARTIFACTS_FOLDER, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=work)
    except OSError:
        return
    try:
        for name in (f"{grade_id}.npz", f"{grade_id}.json"):
            data = _read_plain_file(folder, name)
            if data is not None:
                (artifacts / name).write_bytes(data)
    finally:
        os.close(folder)


def _read_plain_file(folder, name):
    """The bytes of ``name`` in the open ``folder``: a regular file within MAX_ARTIFACT_BYTES, else None."""
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except OSError:
        return None
    with os.fdopen(descriptor, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ARTIFACT_BYTES:
            return None
        return file.read(MAX_ARTIFACT_BYTES + 1)


class SaveVerdicts(SaveAutoGrades):
    """nbgrader's ``SaveAutoGrades``, leaving a cell the grader could not judge to the instructor.

    Introduced in course/README.md (in place of ``SaveAutoGrades`` in nbgrader_config.py). Such
    a cell has no automatic score (not a 0), and its notebook is flagged in the formgrader;
    ``nbgrader export`` says ``needs manual grading``.
    """

    def _add_score(self, cell, resources):
        super()._add_score(cell, resources)
        if _grade_id(cell) not in resources.get(_UNJUDGED, ()):
            return
        grade = self.gradebook.find_grade(_grade_id(cell), self.notebook_id, self.assignment_id, self.student_id)
        grade.auto_score, grade.needs_manual_grade = None, True
        grade.notebook.flagged = True
        self.gradebook.db.commit()


class MalformedSubmission(Exception):
    """A submission whose nbgrader metadata cannot be graded: it fails alone, and the rest of the class is graded."""


class RefuseMalformedMetadata(NbGraderPreprocessor):
    """Fail a submission whose nbgrader metadata nbgrader would abort a whole run on; say why, for the instructor.

    Introduced in course/README.md (first of ``c.Autograde.sanitize_preprocessors``). nbgrader
    stops grading everyone still waiting when one notebook's cell metadata has another schema
    version (``{"nbgrader": {"schema_version": 99}}``, or ``{}``, which reads as version 0),
    and so too for a ``grade_id`` used twice (it empties one copy's metadata, which then reads as
    version 0). Such a notebook fails here with an ordinary error, which nbgrader reports for
    that submission alone before it goes on with the next.
    """

    def preprocess(self, nb, resources):
        from nbgrader.nbgraderformat import MetadataValidator

        validator, seen = MetadataValidator(), {}
        for index, cell in enumerate(nb.cells):
            meta = cell.get("metadata", {})
            if "nbgrader" not in meta:
                continue
            where = f"cell {index + 1}"
            if not isinstance(meta["nbgrader"], dict):
                raise MalformedSubmission(f"needs manual grading: {where}'s nbgrader metadata is not a mapping")
            try:
                validator.validate_cell(cell)
            except Exception as error:  # noqa: BLE001 (any way it is malformed, the same outcome)
                why = str(error).splitlines()[0][:200]
                raise MalformedSubmission(
                    f"needs manual grading: {where}'s nbgrader metadata is malformed ({why})"
                ) from None
            grade_id = meta["nbgrader"].get("grade_id")
            graded = any(test(cell) for test in (is_grade, is_solution, is_locked, is_task))
            if graded and grade_id in seen:
                raise MalformedSubmission(
                    f"needs manual grading: cells {seen[grade_id]} and {index + 1} have the same grade_id "
                    f"{str(grade_id)[:80]!r} (a cell copied with its metadata)"
                )
            seen.setdefault(grade_id, index + 1)
        return nb, resources


class OverwriteReleasedCells(OverwriteCells):
    """nbgrader's ``OverwriteCells``, silent about a locked cell that is exactly as it was released.

    Introduced in course/README.md. A check cell with hidden tests is released without them,
    so its checksum never matches the instructor's; nbgrader puts the hidden tests back
    (as it should) and warns for every such cell of every honest submission, which buries
    the warning about a check a student really changed. This warns only about that one.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        self._as_released = self._released_source(cell) == cell.source
        try:
            return super().preprocess_cell(cell, resources, cell_index)
        finally:
            self._as_released = False

    def _released_source(self, cell):
        grade_id = _grade_id(cell)
        try:
            source = self.gradebook.find_source_cell(grade_id, self.notebook_id, self.assignment_id).source
        except Exception:
            return None
        stripped = NotebookNode(cell_type=cell.cell_type, source=source, metadata=copy.deepcopy(cell.metadata))
        stripped, _ = ClearHiddenTests(enforce_metadata=False).preprocess_cell(stripped, {}, 0)
        return stripped.source

    def report_change(self, name, attr, old, new):
        if attr == "checksum" and getattr(self, "_as_released", False):
            return
        super().report_change(name, attr, old, new)


class GradesWithStatus(CsvExportPlugin):
    """nbgrader's grades.csv with a ``status`` column: ``graded``, or why a submission has no grade.

    Introduced in course/README.md (``c.ExportApp.plugin_class``). A submission whose
    autograding failed (not a notebook, a kernel that kept dying) keeps nbgrader's score
    of 0 but reads ``not graded: ...``, so that nobody takes it for a zero.
    """

    def export(self, gradebook):
        super().export(gradebook)
        path = self.to or "grades.csv"
        with open(path, newline="") as file:
            rows = list(csv.DictReader(file))
        if not rows:
            return
        for row in rows:
            row["status"] = _status(gradebook, row["assignment"], row["student_id"])
        with open(path, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def _status(gradebook, assignment, student):
    from nbgrader.api import MissingEntry

    try:
        submission = gradebook.find_submission(assignment, student)
    except MissingEntry:
        return "not submitted"
    grades = [grade for notebook in submission.notebooks for grade in notebook.grades]
    ungraded = [grade for grade in grades if _has_no_score(grade)]
    if not ungraded:
        return "graded"
    # Flagged by SaveVerdicts: graded, with the verdicts the grader could not take left to a person.
    if len(ungraded) < len(grades) or any(notebook.flagged for notebook in submission.notebooks):
        return "needs manual grading"
    return "not graded: autograding failed (see the autograde log)"


def _has_no_score(grade):
    return grade.auto_score is None and grade.manual_score is None
