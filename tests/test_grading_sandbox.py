"""What a box holds in: the sandbox a submission's kernel runs in while it is graded.

Files (the machine read-only, the course and other boxes out of sight, the box's top the
grader's), links, users (never root on the host), limits (tasks, memory, disk, output) and the
network, each tried from inside a real box (workbook/course/sandbox.py) by the scripts of
tests/box_scripts/, or on the boxes the grader itself makes. What the grader run by nbgrader makes
of the same attacks, beside honest classmates, is tests/test_grading_round_trip.py.
"""

import contextlib
import math
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time

import nbformat
import pytest
from grading_helpers import ROOT
from notebook_runner import FRESH_PYTHON_SECONDS

from workbook.course.grading import ANSWER_KEY

BOX_SCRIPTS = pathlib.Path(__file__).parent / "box_scripts"


def script(name):
    """The text of tests/box_scripts/``name``.py (the box shows the workbook, not tests/)."""
    return (BOX_SCRIPTS / f"{name}.py").read_text()


def box_command(box, source, *arguments, hidden=()):
    """``python -c source ARGUMENTS`` in ``box``, as the sandbox starts a kernel, but with its output kept."""
    from workbook.course.sandbox import sandbox_command

    command = sandbox_command(box, [sys.executable, "-c", source, *map(str, arguments)], hidden)
    command[command.index('exec "$@" >/dev/null 2>&1')] = 'exec "$@"'  # keep its output, for the test
    return command


def run_in_a_box(name, *arguments, hidden=()):
    """tests/box_scripts/``name``.py run with ``arguments`` in a fresh box, which is removed after it."""
    from workbook.course.sandbox import Box, sandbox_problem

    if sandbox_problem():
        pytest.skip(sandbox_problem())
    box = Box()
    try:
        return subprocess.run(box_command(box, script(name), *arguments, hidden=hidden), **_CAPTURED)
    finally:
        box.remove()


_CAPTURED = dict(capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_a_process_that_outlasts_its_box_is_killed_and_counted():
    from workbook.course.sandbox import GRACE_SECONDS, Box

    for bad in (-1, math.nan, 10**400, "10"):
        with pytest.raises(ValueError, match="Box: grace_seconds="):
            Box(grace_seconds=bad)
    box = Box(grace_seconds=1)  # the grader's boxes wait 10 s (GRACE_SECONDS): the same kill, sooner
    problem = box.limit()
    if problem:
        box.remove()
        pytest.skip(problem)
    join = 'for group; do echo $$ > "$group/cgroup.procs"; done; exec sleep 600'
    lasting = subprocess.Popen(["sh", "-c", join, "sh", *map(str, box.cgroups)])
    try:
        deadline = time.monotonic() + 60
        while any(str(lasting.pid) not in (group / "cgroup.procs").read_text().split() for group in box.cgroups):
            assert time.monotonic() < deadline, "the process did not join the box's groups within 60 s"
            time.sleep(0.1)
        asked = time.monotonic()
        assert box.remove() is None
        assert 1 <= time.monotonic() - asked < GRACE_SECONDS  # given its own grace first, not the default
        assert box.killed == 1
        assert lasting.wait(timeout=60) == -signal.SIGKILL
    finally:
        lasting.kill()
        lasting.wait()


def test_a_kernel_that_cannot_be_ended_is_logged_and_left_to_the_box(caplog):
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from workbook.course.autograde import GuardedExecute

    class Unending:
        async def is_alive(self):
            return True

        async def shutdown_kernel(self, now=False):
            raise OSError("the kernel's process cannot be signalled")

        async def cleanup_resources(self):
            pass

    grader, manager = GuardedExecute(), Unending()
    grader.kc = None
    with caplog.at_level("WARNING"):
        grader._end_kernel(manager)  # no exception: the submission's grading goes on
    assert "cannot be signalled" in caplog.text and "the box's removal ends it" in caplog.text


def test_display_updates_count_against_the_cell_running_when_they_arrive():
    """nbclient writes a display update into earlier outputs, outside ``output``: it is capped all the same."""
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from workbook.course.autograde import GuardedExecute

    executor = GuardedExecute(max_output_bytes=100_000)
    executor.nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(str(i)) for i in range(3)])
    executor.reset_execution_trackers()
    executor._output_bytes, executor.clear_before_next_output = {}, False  # as preprocess and a cell set them

    def message(kind, text):
        content = {"data": {"text/plain": text}, "metadata": {}, "transient": {"display_id": "flood"}}
        return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": {}, "content": content}

    first = executor.nb.cells[0]
    executor.process_message(message("display_data", "small"), first, 0)
    for cell_index in (1, 2):  # updates from a thread while the next cells run, and the same id shown again
        cell = executor.nb.cells[cell_index]
        executor.process_message(message("update_display_data", "u" * 10_000), cell, cell_index)
        executor.process_message(message("update_display_data", "U" * 5_000_000), cell, cell_index)
        executor.process_message(message("display_data", "D" * 5_000_000), cell, cell_index)
    size = len(nbformat.writes(executor.nb))
    assert size < 100_000, size  # without the cap, every output with that id held 5 MB
    assert first.outputs[0]["data"]["text/plain"] == "u" * 10_000  # an update within the cap still arrives
    assert all("output dropped" in "".join(o.get("text", "") for o in c.outputs) for c in executor.nb.cells[1:])


def test_widget_state_counts_against_the_cell_that_sent_it():
    """A widget's state goes into the graded notebook's metadata, outside any output: it is capped all the same."""
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from workbook.course.autograde import GuardedExecute

    executor = GuardedExecute(max_output_bytes=100_000)
    executor.nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("0")])
    executor.reset_execution_trackers()
    executor._output_bytes, executor.clear_before_next_output = {}, False  # as preprocess and a cell set them
    cell = executor.nb.cells[0]
    for number in range(20):
        state = {"_model_module": "@jupyter-widgets/controls", "_model_name": "TextModel", "value": "w" * 5_000_000}
        data = {"state": state, "buffer_paths": []}
        content = {"comm_id": f"widget-{number}", "target_name": "jupyter.widget", "data": data}
        message = {"msg_type": "comm_open", "header": {"msg_type": "comm_open"}, "parent_header": {}}
        executor.process_message({**message, "content": content, "buffers": []}, cell, 0)
    executor.set_widgets_metadata()
    size = len(nbformat.writes(executor.nb))
    assert size < 200_000, size  # without the cap, 100 MB of state in the notebook's metadata
    assert "output dropped" in "".join(o.get("text", "") for o in cell.outputs)


def test_limits_a_kernel_could_not_be_graded_under_are_refused_by_name():
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from workbook.course.autograde import GuardedExecute

    for name, value in (("max_tasks", 10), ("max_memory_bytes", 2**20), ("max_disk_bytes", 2**20)):
        with pytest.raises(Exception, match=f"c.GuardedExecute.{name}={value}"):
            GuardedExecute(**{name: value})
    # files are memory too: a disk quota the memory limit cannot hold is refused before a box is made
    grader = GuardedExecute(max_memory_bytes=2**30, max_disk_bytes=512 * 2**20)
    with pytest.raises(ValueError, match="max_disk_bytes=536870912 .*max_memory_bytes=1,073,741,824"):
        grader._bound(box=None)


def graders_own_groups(groups):
    """The grader's own group (from /proc/self/cgroup) in the hierarchy of each of the box's ``groups``."""
    own = {}
    for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        own.update(dict.fromkeys(controllers.split(","), path.strip("/")))
    controllers = [group.parent.relative_to("/sys/fs/cgroup").parts[0] for group in groups]
    return [pathlib.Path("/sys/fs/cgroup", controller, own[controller]) for controller in controllers]


def flood_beside_a_classmate(flooding, classmate):
    """Start flood_and_hog in ``flooding``; while its sleepers hold its tasks, a thread in ``classmate``.

    Returns what the flood printed first (split), the classmate's run, what the flood printed after
    the hog, and the flood's process.
    """
    command = box_command(flooding, script("flood_and_hog"))
    flood = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first = flood.stdout.readline().split()
        thread = "import threading; threading.Thread().start()\nprint('ran')"
        started = subprocess.run(box_command(classmate, thread), capture_output=True, text=True, timeout=60)
        flood.stdin.write("\n")
        flood.stdin.flush()
        rest = flood.communicate(timeout=60)[0]
    finally:
        flood.kill()
    return first, started, rest, flood


def test_a_flood_and_a_hog_stay_in_their_box_and_the_classmate_still_starts_a_thread():
    from workbook.course.sandbox import Box, sandbox_problem

    if sandbox_problem():
        pytest.skip(sandbox_problem())
    flooding, classmate = Box(), Box()
    try:
        why = flooding.limit(tasks=64, memory_bytes=256 * 2**20)
        if why:
            pytest.skip(f"this machine gives the grader no per-box limits: {why}")
        assert classmate.limit() is None
        # each group below the grader's own in its hierarchy, so within every limit the grader runs under
        assert [group.parent for group in flooding.cgroups] == graders_own_groups(flooding.cgroups)
        first, started, rest, flood = flood_beside_a_classmate(flooding, classmate)
        assert first[:2] == ["stopped", "at"] and int(first[2]) < 64, first  # the flood met its box's limit...
        assert started.returncode == 0 and started.stdout == "ran\n", started  # ...and the classmate did not
        assert "held" not in rest and flood.returncode != 0, (rest, flood.returncode)  # 640 MB: killed at 256
        # what the grader logs of each box: the hog reached its limit, no more
        assert 192 * 2**20 < flooding.peak_memory() <= 256 * 2**20, flooding.peak_memory()
    finally:
        groups = [*flooding.cgroups, *classmate.cgroups]
        flooding.remove()
        classmate.remove()
    assert not [group for group in groups if group.exists()]  # removed with their boxes


def test_a_box_that_fills_its_disk_stops_at_its_quota_and_the_quota_goes_with_the_box():
    from workbook.course.sandbox import Box, sandbox_problem

    if sandbox_problem():
        pytest.skip(sandbox_problem())
    box = Box()
    try:
        why = box.bound_disk(8 * 2**20)
        if why:
            pytest.skip(f"this machine gives the grader no per-box file system: {why}")
        for bad in (2**19, 1.5e7, True, "8M"):
            with pytest.raises(ValueError, match="disk_bytes="):
                box.bound_disk(bad)
        with pytest.raises(ValueError, match="already has its file system"):
            box.bound_disk(8 * 2**20)
        result = subprocess.run(box_command(box, script("fill_disk")), **_CAPTURED)
        root = box.root
    finally:
        box.remove()
    assert result.returncode == 0, result.stderr
    total, reasons = result.stdout.split(" ", 1)
    # the grader's disk has far more room than this: the box's own file system stopped it
    assert 6 * 2**20 < int(total) <= 8 * 2**20 and reasons.strip() == "['No space left on device']", result.stdout
    assert not root.exists() and str(root) not in pathlib.Path("/proc/self/mounts").read_text()


def test_an_honest_kernel_sees_the_same_box_with_or_without_its_quota():
    from workbook.course.sandbox import Box, sandbox_problem

    if sandbox_problem():
        pytest.skip(sandbox_problem())
    outputs = []
    for quota in (None, 64 * 2**20):
        box = Box()
        try:
            if quota is not None and box.bound_disk(quota):
                pytest.skip("this machine gives the grader no per-box file system")
            result = subprocess.run(
                box_command(box, script("honest_files")), capture_output=True, text=True, timeout=120
            )
        finally:
            assert box.remove() is None and not box.root.exists()
        outputs.append((result.returncode, result.stdout, result.stderr))
    assert outputs[0] == outputs[1] and outputs[0][0] == 0, outputs


def test_the_sandbox_shows_the_machine_read_only_hides_the_course_and_ends_every_process(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / "gradebook.db").write_text("grades")
    marker = tmp_path / "outlived"
    outside = [course / "gradebook.db", ROOT / "workbook" / "zz.py", "/etc/zz"]
    result = run_in_a_box("machine_read_only", course, *outside, marker, hidden=[course])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "sees course: []", result.stdout
    assert [line.split()[0] for line in lines[1:4]] == ["refused"] * 3, result.stdout
    assert lines[4] == "no network"
    time.sleep(4)
    assert not marker.exists() and not (ROOT / "workbook" / "zz.py").exists()
    assert (course / "gradebook.db").read_text() == "grades"


def test_the_kernel_cannot_move_its_folders_or_write_in_the_boxs_top(tmp_path):
    result = run_in_a_box("box_top")
    assert result.returncode == 0, result.stderr
    done = dict(line.rsplit(" ", 1) for line in result.stdout.splitlines())
    assert done.pop("write in work") == "done", result.stdout  # its own folder is its to write
    assert "done" not in done.values(), result.stdout


@pytest.mark.parametrize(
    ("through_a_link", "mode"),
    [(False, 0o755), (True, 0o755), (False, 0o700)],
    ids=["its-own-path", "reached-through-a-link", "in-a-folder-only-its-owner-enters"],
)
def test_a_python_in_a_virtual_environment_made_in_tmp_runs_in_the_box_which_has_its_own_tmp(through_a_link, mode):
    # The last: run by root, a Python under a folder only root enters (pyenv in root's home, say) is
    # one the sandbox's user cannot start; the kernel is that user on the host all the same, never root.
    from workbook.course.sandbox import sandbox_problem

    if sandbox_problem():
        pytest.skip(sandbox_problem())
    folder = pathlib.Path(tempfile.mkdtemp(prefix="venv-in-tmp-", dir="/tmp"))
    try:
        folder.chmod(mode)
        env = folder / "env"
        # made with the installed Python itself, as a user makes one (not through this environment's link to it)
        python = os.path.realpath(sys.executable)
        made = folder / "environments" / "env" if through_a_link else env
        subprocess.run([python, "-m", "venv", "--without-pip", str(made)], check=True, timeout=120)
        if through_a_link:  # as hubs often arrange: the environment's path is a link, and it is started by it
            env.symlink_to(made, target_is_directory=True)
        site = next(env.glob("lib/python*/site-packages"))
        (site / "grader.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
        (folder / "graders_own").write_text("a file of the grader's /tmp")
        course = env / "course"  # a hidden folder inside the environment: hidden all the same
        course.mkdir()
        (course / ANSWER_KEY).write_text("the answers")
        driver = subprocess.run(
            [
                str(env / "bin" / "python"),
                str(BOX_SCRIPTS / "in_a_tmp_venv.py"),
                str(folder / "graders_own"),
                str(course),
            ],
            capture_output=True,
            text=True,
            timeout=FRESH_PYTHON_SECONDS,
        )
        assert driver.returncode == 0, driver.stderr
        returncode, stderr, *seen = driver.stdout.splitlines()
        # Before, the box's own /tmp (a tmpfs) hid the environment, and a box bound only the environment's
        # own folder where it was started through a link: "exec: .../env/bin/python: not found".
        assert returncode == "0", stderr
        prefix = env if through_a_link else env.resolve()
        assert seen == [str(prefix), "False", "[]", "refused OSError", "shadow refused PermissionError"], driver.stdout
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_sandbox_shows_no_other_course_or_box_and_bounds_its_temporary_folders(tmp_path, monkeypatch):
    """Another course's submissions and the classmate's box, outside every temporary folder: not there at all."""
    from workbook.course.sandbox import TMPFS_BYTES, Box

    (ROOT / "build").mkdir(exist_ok=True)
    outside = pathlib.Path(tempfile.mkdtemp(prefix="sandbox-test-", dir=ROOT / "build"))  # not a temporary folder
    try:
        other_course = outside / "other-course" / "submitted" / "ann"
        other_course.mkdir(parents=True)
        (other_course / "answers.ipynb").write_text("{}")
        monkeypatch.setattr(tempfile, "tempdir", str(outside))  # the classmate's box, where the grader's TMPDIR is
        classmate = Box()
        (classmate.work / "recorded.npz").write_text("weights")
        monkeypatch.undo()
        folders = [other_course, classmate.work, ROOT / "course", "~"]
        result = run_in_a_box("other_course_and_box", *folders, TMPFS_BYTES["/dev/shm"] + 2**20)
        classmate.remove()
    finally:
        shutil.rmtree(outside, ignore_errors=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["False"] * 3 + ["True", "No space left on device"], result.stdout


def is_a_kernel(pid):
    """True if process ``pid`` runs this Python (the kernel), not bwrap (whose own processes start the box)."""
    return os.path.realpath(os.readlink(f"/proc/{pid}/exe")) == os.path.realpath(sys.executable)


def kernel_uids(work):
    """The host's Uid lines (real, effective, saved, file system) of the kernels whose working folder is ``work``."""
    uids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, StopIteration):
            if os.readlink(f"/proc/{entry}/cwd") == work and is_a_kernel(entry):
                with open(f"/proc/{entry}/status") as status:
                    uids.append(next(line for line in status if line.startswith("Uid:")).split()[1:])
    return uids


def host_uids_of_the_kernels(found, stop):
    """While the grader grades, each box's kernel as the host sees it: {box work folder: kernel_uids}.

    A kernel of tests/box_scripts/what_the_kernel_is.py writes "ready" in its working folder and
    waits; this reads its process's status, then writes "seen" there.
    """
    while not stop.is_set():
        for ready in pathlib.Path(tempfile.gettempdir()).glob("workbook-box-*/work/ready"):
            if str(ready.parent) not in found:
                found[str(ready.parent)] = kernel_uids(str(ready.parent))
                (ready.parent / "seen").touch()
        time.sleep(0.05)


def graded_by_the_grader(cells, student, logs):
    """What each cell printed (one string a cell) when GuardedExecute grades ``cells`` as ``student``'s."""
    from workbook.course.autograde import GuardedExecute

    grader = GuardedExecute(self_checked=["uids"], max_tasks=64, max_memory_bytes=2**31, timeout=120)
    grader.log.warning = lambda message, *args: logs.append(message % args)
    resources = {"nbgrader": {"assignment": "uids", "student": student}}
    notebook, _ = grader.preprocess(nbformat.v4.new_notebook(cells=list(cells)), resources)
    return ["".join(output.get("text", "") for output in cell.outputs).strip() for cell in notebook.cells]


def skip_unless_boxes_are_users_of_their_own():
    from workbook.course.sandbox import sandbox_problem

    if sandbox_problem():
        pytest.skip(sandbox_problem())
    if os.geteuid() != 0:
        pytest.skip("a grader gives each box a user of its own, and per-user limits, only when it runs as root")


def one_user_each(found):
    """The host user id of each box's kernel in ``found``: one process, the same user in its four ids."""
    assert [len(kernels) for kernels in found.values()] == [1, 1], found
    host_uids = [{uid for uids in kernels for uid in uids} for kernels in found.values()]
    assert [len(uids) for uids in host_uids] == [1, 1], found
    return [uids.pop() for uids in host_uids]


def started_before_refused(printed):
    """How many processes the kernel started before it was refused; infinite if it never was."""
    refused = re.fullmatch(r"stopped at (\d+) BlockingIOError", printed)
    return int(refused.group(1)) if refused else math.inf


@pytest.mark.kernel
def test_the_graders_boxes_without_control_groups_are_host_users_of_their_own_bounded_per_user(tmp_path, monkeypatch):
    """The boxes the grader makes where control groups are missing (cgroup v2; here they are hidden from it).

    Graded twice through GuardedExecute, the code path of a real grading run: each kernel is a host
    user of its own (never root, never the grader: read from outside, in /proc), its tasks are
    bounded by RLIMIT_NPROC, each process's memory by RLIMIT_AS, and /etc/shadow is not its to read.
    """
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from workbook.course import sandbox

    skip_unless_boxes_are_users_of_their_own()
    monkeypatch.setattr(sandbox, "_CGROUP", tmp_path / "no-cgroups")  # as on a machine that gives none
    monkeypatch.chdir(tmp_path)
    cells = [nbformat.v4.new_code_cell(source.strip()) for source in script("what_the_kernel_is").split("\n# %%\n")]
    found, stop, logs = {}, threading.Event(), []
    watcher = threading.Thread(target=host_uids_of_the_kernels, args=(found, stop), daemon=True)
    watcher.start()
    try:
        graded = [graded_by_the_grader(cells, student, logs) for student in ("ann", "bob")]
    finally:
        stop.set()
        watcher.join()
    assert any("RLIMIT_NPROC, RLIMIT_AS" in message for message in logs), logs  # the path taken without groups
    first, second = one_user_each(found)
    assert first != second and not {first, second} & {"0", str(os.getuid())}, found  # not root, not the grader
    for outputs, uid in zip(graded, (first, second), strict=True):
        assert outputs[0].split()[1:2] == [uid], outputs  # and the kernel sees itself as that user
        assert started_before_refused(outputs[1]) < 64, outputs
        assert outputs[2:] == ["MemoryError", "shadow PermissionError"], outputs
    assert len(bytes(3 * 2**30)) == 3 * 2**30  # the grader's own process may: what refused the kernel was its limit
