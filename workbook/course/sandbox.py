"""The sandbox a submission's kernel runs in while it is graded.

Introduced in course/README.md and used by :class:`workbook.course.autograde.GuardedExecute`;
needs jupyter_client (nbgrader's), which nothing a notebook imports needs. Each kernel
runs under bubblewrap (``bwrap``, Debian's ``bubblewrap``) in namespaces of its own:

- **files**: only what a kernel needs, read-only: the system's programs, libraries and
  settings (``/usr``, ``/etc``, ...), this Python and the workbook package. Nothing else of the
  machine exists in its view: no home, no course (this one or another), no exchange, no
  other submission's box. Its temporary folders are small memory-backed ones of its own
  (``TMPFS_BYTES``), and the only folder of the machine it can write is its own box (a
  working folder, a home, the kernel's sockets), which holds nothing but what the grader
  put there for this submission. Where the grader may mount (root), the box is a
  memory-backed file system of its own, no larger than ``MAX_DISK_BYTES``
  (:meth:`Box.bound_disk`), so that a kernel cannot fill the grader's disk;
- **processes**: a PID namespace of its own, so that every process it starts (``setsid``
  or not) is killed with it, when the grader stops its kernel or the grader itself dies;
- **network**: none (the kernel talks to the grader through Unix sockets in its box);
- **user**: run by root, the kernel runs as an unprivileged host user of its box's own (a user
  id no account has, unless one is configured), never as root, wherever this Python lives
  (:func:`_users`), so it cannot read or write what that user cannot, even outside the
  sandbox's view;
- **the box's top** is the grader's, read-only in the sandbox: the kernel writes only its
  working folder, its home and its kernel folder, and cannot put a link in their place;
- **limits**: where the grader may make control groups (root with cgroup v1's ``pids`` and
  ``memory``), each box gets one of its own, below the grader's own, that bounds
  its tasks (processes and threads) and its memory, temporary folders included, so that a
  flood or a hog stays in its box (:meth:`Box.limit`). Elsewhere, run by root, the box's own
  user's tasks (``RLIMIT_NPROC``) and each of its processes' memory (``RLIMIT_AS``) are
  bounded instead; run by another user, nothing but the container's limits bound them, and
  :meth:`Box.limit` says so.
"""

import contextlib
import functools
import os
import pathlib
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from jupyter_client.manager import AsyncKernelManager

from workbook.core.arguments import check_count, is_number, refuse

__all__ = [
    "Box",
    "SandboxedKernelManager",
    "sandboxed_kernel_manager",
    "sandbox_command",
    "sandbox_problem",
    "can_hide",
]

SANDBOX_HELP = (
    "Grading runs every submission's kernel in a bubblewrap sandbox. Install it (Debian and Ubuntu: "
    "`apt-get install bubblewrap`), or see course/README.md for a hub."
)

#: The kernel's own temporary folders (the machine's stay hidden): empty, in memory, and no larger
#: than this (bytes), so that a kernel cannot hold memory no process owns, or fill the machine,
#: while a classmate is graded.
TMPFS_BYTES = {"/tmp": 256 * 2**20, "/var/tmp": 64 * 2**20, "/dev/shm": 64 * 2**20, "/run": 2**20}
#: What one box's processes may hold together, where control groups are available: tasks
#: (processes and threads; an assignment's kernel peaks at a few dozen) and bytes of memory
#: (a few hundred MB for the assignment).
MAX_TASKS = max(512, 32 * (os.cpu_count() or 1))  # TensorFlow's thread pools grow with the cores
MAX_MEMORY_BYTES = 4 * 2**30
#: What one box's files may hold, where the grader may mount a file system of its own for it
#: (the assignment writes a few MB of recordings). Memory-backed: within the box's memory limit
#: where it has one.
MAX_DISK_BYTES = 512 * 2**20
#: ... and files (and folders): far more than the assignment writes.
MAX_FILES = 100_000
#: Where the user ids the grader gives its boxes begin (run as root): far above any account's.
FIRST_BOX_UID = 2_000_000_000
#: How long :meth:`Box.remove` waits for the box's last processes to end on their own before it
#: kills them (seconds): a kernel told to shut down takes a moment to go.
GRACE_SECONDS = 10.0
_CGROUP = pathlib.Path("/sys/fs/cgroup")
#: The machine's folders a kernel sees (read-only): programs, libraries, settings, devices' facts.
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")


def sandbox_problem():
    """Why this machine cannot sandbox a kernel (None if it can)."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed. " + SANDBOX_HELP
    return None


class Box:
    """One submission's folders: ``work`` (the kernel's working folder), ``home``, ``kernel`` (sockets).

    Owned by the sandbox's user, inside a fresh temporary folder of the grader's; removed by
    :meth:`remove`, which gives the box's last processes ``grace_seconds`` to end on their own
    before it kills them.
    """

    def __init__(self, user="", grace_seconds=GRACE_SECONDS):
        if not is_number(grace_seconds, low=0, high=3600):
            refuse("grace_seconds", grace_seconds, "a number of seconds from 0 to 3600, e.g. grace_seconds=10", "Box")
        self.grace_seconds = float(grace_seconds)
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="workbook-box-"))
        self.work, self.home, self.kernel = self.root / "work", self.root / "home", self.root / "kernel"
        self.uid = self.gid = None
        self.cgroups = []
        self.mounted = False
        self.killed = 0  # processes still running ``grace_seconds`` into :meth:`remove`, killed then
        # Run by root, the kernel is ``user`` on the host, never root: where that user cannot reach
        # this Python (under root's home, say), bwrap mounts it as root and the kernel becomes the
        # user inside the sandbox, before anything of it runs (``drops_inside``).
        self.drops_inside = False
        self.rlimits = None  # (tasks, bytes of memory per process) where the box has no control groups
        if os.geteuid() == 0:  # a user of its own for each box, unless one is named
            entry = pwd.getpwnam(user) if user else None
            self.uid, self.gid = (entry.pw_uid, entry.pw_gid) if entry else (_fresh_uid(),) * 2
            # whether that user can start this Python: as for any user who is not its owner
            self.drops_inside = not _can_run_python_as(user or "nobody")
        self._make_folders()

    def _make_folders(self):
        # The box's top stays the grader's, and read-only in the sandbox (sandbox_command): the
        # kernel cannot rename ``work`` and put a link in its place for the grader to follow.
        for folder in (self.work, self.home, self.kernel):
            folder.mkdir(exist_ok=True)
            if self.uid is not None:
                os.chown(folder, self.uid, self.gid)
            folder.chmod(0o700)
        self.root.chmod(0o755 if self.uid is not None else 0o700)  # its to read, not to write

    def bound_disk(self, disk_bytes=MAX_DISK_BYTES):
        """Make the box a file system of its own of ``disk_bytes``; why not, if this machine cannot (else None).

        A memory-backed one (tmpfs): where the box has a memory group (:meth:`limit`, called
        first), its files count against that group's limit; elsewhere they are memory outside
        every box's limit, at most ``disk_bytes``. Called before anything is put in the box,
        once; :meth:`remove` unmounts it.
        """
        check_count("disk_bytes", disk_bytes, low=2**20, owner="Box.bound_disk")
        if self.mounted:
            raise ValueError(f"the box {self.root} already has its file system; bound_disk is called once per box.")
        if os.geteuid() != 0 or shutil.which("mount") is None:
            return "the grader may not mount a file system for each box (run it as root)"
        # files as well as bytes: an empty file costs the kernel memory that size= does not count
        options = f"size={disk_bytes},nr_inodes={MAX_FILES},mode=0700,nodev,nosuid"
        self.mounted = True  # from here on, remove() unmounts whatever happens
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "workbook-box", str(self.root)], capture_output=True, text=True
        )
        if result.returncode != 0:
            self.mounted = False
            return f"its file system could not be mounted ({result.stderr.strip() or result.returncode})"
        self._make_folders()
        return None

    def give(self, path):
        """Hand a file the grader wrote in the box to the sandbox's user (read-only for it)."""
        if self.uid is not None:
            os.chown(path, self.uid, self.gid)
        os.chmod(path, 0o400)

    def limit(self, tasks=MAX_TASKS, memory_bytes=MAX_MEMORY_BYTES):
        """Give the box control groups that bound its tasks and memory; why not, if this machine cannot (else None).

        Every process started by :func:`sandbox_command` for this box joins them before it starts.
        """
        name = f"workbook-box-{secrets.token_hex(6)}"
        settings = _cgroup_settings(tasks, memory_bytes)
        if isinstance(settings, str) and self.uid is not None:
            # The box's user is its own: per-user limits bound this box alone (RLIMIT_NPROC counts
            # its user's tasks; RLIMIT_AS each process's memory, not the box's together).
            self.rlimits = (tasks, memory_bytes)
            return (
                f"{settings}; its user's tasks and each process's memory are bounded instead (RLIMIT_NPROC, RLIMIT_AS)"
            )
        if isinstance(settings, str):
            return settings
        try:
            for folder, values in settings.items():
                (folder / name).mkdir()
                self.cgroups.append(folder / name)
                for file, value in values.items():
                    if file not in _OPTIONAL or (folder / name / file).exists():
                        (folder / name / file).write_text(str(value))
        except OSError as error:
            self._remove_cgroups()
            return f"its control groups could not be made ({error})"
        return None

    def peak_memory(self):
        """The most memory (bytes) the box's group was charged at once; None without a memory group.

        Its processes', its files' in memory-backed folders, and the page cache and kernel
        memory they caused (the libraries the kernel read first, for one).
        """
        for group in self.cgroups:
            with contextlib.suppress(OSError, ValueError):
                return int((group / "memory.max_usage_in_bytes").read_text())
        return None

    def remove(self):
        """Unmount the box's file system, remove its control groups, then its folder; what it could not do, or None.

        Never raises: a box that stays mounted is left in place and named, for the grader's log.
        """
        if self.mounted:  # detached at once; its memory is freed when the last of its processes has gone
            subprocess.run(["umount", "--lazy", str(self.root)], capture_output=True)
        self.killed = self._remove_cgroups()
        if self.mounted and os.path.ismount(self.root):
            return f"the box {self.root} stayed mounted: run `umount --lazy {self.root}` as root"
        self.mounted = False
        shutil.rmtree(self.root, ignore_errors=True)
        return None

    def _remove_cgroups(self):
        """Remove the box's groups once the last of its processes has gone, killing any that stay; how many were."""
        killed = set()
        for group in self.cgroups:
            deadline, given_up = time.monotonic() + self.grace_seconds, None
            while True:
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # still busy: its processes take a moment to die; after the grace, they are killed
                    if time.monotonic() >= deadline:
                        killed |= _kill_every_process_in(group)
                        given_up = given_up or time.monotonic() + 5  # killed and still there 5 s on: left as it is
                        if time.monotonic() >= given_up:
                            break
                    time.sleep(0.1)
        self.cgroups = []
        return len(killed)


def _kill_every_process_in(group):
    """Kill every process in ``group``; the set of their ids."""
    try:
        pids = {int(pid) for pid in (group / "cgroup.procs").read_text().split()}
    except OSError:
        return set()
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return pids


def _cgroup_settings(tasks, memory_bytes):
    """{the grader's own cgroup folder to make a box's group in: {file: value}}, or why this machine gives none.

    cgroup v1 only, below the grader's own group in each hierarchy, so that a box stays within
    every limit the grader itself runs under. On cgroup v2 a group holding the grader may not
    hand memory to groups below it, and moving the grader out of its own group is not the
    workbook's to do: there, only the container's limits bound a box (course/README.md).
    """
    pids, memory = _CGROUP / "pids", _CGROUP / "memory"
    if (pids / "tasks").exists() and (memory / "tasks").exists():  # cgroup v1
        own = {name: folder / _own_cgroup_v1(name).lstrip("/") for name, folder in (("pids", pids), ("memory", memory))}
        if not all(folder.is_dir() and os.access(folder, os.W_OK) for folder in own.values()):
            return "the grader's own cgroup v1 pids and memory groups are not its to write (run it as root)"
        return {
            own["pids"]: {"pids.max": tasks},
            # memory first, then memory and swap together (where swap is counted), or a hog just swaps
            own["memory"]: {"memory.limit_in_bytes": memory_bytes, "memory.memsw.limit_in_bytes": memory_bytes},
        }
    if (_CGROUP / "cgroup.controllers").exists():
        return "this machine has cgroup v2, where a box cannot be given groups of its own below the grader's"
    return "this machine has no cgroup file system"


#: Files written only where the machine has them (swap is counted only where the kernel was built to).
_OPTIONAL = {"memory.memsw.limit_in_bytes"}


def _own_cgroup_v1(controller):
    """The grader's own group in cgroup v1's hierarchy of ``controller`` (from /proc/self/cgroup)."""
    with open("/proc/self/cgroup") as file:
        for line in file:
            _number, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                return path
    return "/"


def _fresh_uid():
    """A user id no account has, for one box: its processes and files are its own alone."""
    while True:
        uid = FIRST_BOX_UID + secrets.randbelow(2**26)
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid


@functools.cache
def _can_run_python_as(user):
    """True if ``user`` can start this Python (not so when it lives in a folder only root reads).

    Otherwise the grader, as root, starts the sandbox as root, with no user namespace, and the
    kernel becomes ``user`` inside it, with no capabilities (:func:`sandbox_command`).
    """
    entry = pwd.getpwnam(user)
    # Tried inside bwrap, as the kernel will run: setpriv alone keeps root's capabilities, which
    # would let the user through a folder that only root may enter.
    command = [
        *("setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups", "--"),
        *("bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-user", "--"),
        sys.executable,
    ]
    result = subprocess.run([*command, "-c", "import ipykernel"], capture_output=True, cwd="/", timeout=120)
    return result.returncode == 0


def sandbox_command(box, command, hidden=(), user_env=None):
    """``command`` wrapped in bwrap: read-only machine, ``hidden`` folders emptied, ``box`` writable."""
    prefix = []
    if box.cgroups:  # joined as the grader, before anything of the box runs; no group, no start
        joining = 'n=$1; shift; while [ $n -gt 0 ]; do echo $$ >"$1/cgroup.procs" || exit 125; shift; n=$((n-1)); done'
        prefix = ["sh", "-c", f'{joining}; exec "$@"', "sh", str(len(box.cgroups)), *map(str, box.cgroups)]
    before, inside, namespaces = _users(box)
    if box.rlimits:  # set as the grader, inherited by every process of the box
        before = ["prlimit", f"--nproc={box.rlimits[0]}", f"--as={box.rlimits[1]}", "--", *before]
    arguments = [*prefix, *before, "bwrap", *_visible(), "--dev", "/dev", "--proc", "/proc"]
    for folder in sorted(TMPFS_BYTES):  # the box's own small temporary folders, any user's to write
        mode = "0755" if folder == "/run" else "1777"
        arguments += ["--perms", mode, "--size", str(TMPFS_BYTES[folder]), "--tmpfs", folder]
    # Then this Python and the workbook, over them (a virtual environment made in /tmp stays
    # there), the folders above them made first, open to the kernel's user (bwrap, run as root,
    # would make them root's alone); then the hidden folders, emptied even inside those; then the box.
    python_folders = sorted(_python_folders())
    for folder in _folders_above([seen_as for _, seen_as in python_folders] + [str(box.root)]):
        arguments += ["--perms", "0755", "--dir", folder]
    for folder, seen_as in python_folders:
        arguments += ["--ro-bind", folder, seen_as]
    arguments += _hiding(hidden)
    arguments += ["--ro-bind", str(box.root), str(box.root)]  # its top read-only: only its folders are the kernel's
    for folder in (box.work, box.home, box.kernel):
        arguments += ["--bind", str(folder), str(folder)]
    arguments += [*namespaces, "--die-with-parent", "--clearenv", "--chdir", str(box.work)]
    for name, value in sorted(_sandbox_env(box, user_env).items()):
        arguments += ["--setenv", name, value]
    # The kernel's own start-up lines (the grader's log is not the place for them); what its
    # cells print reaches the notebook through the kernel's messages, not these streams.
    return [*arguments, "--", *inside, "sh", "-c", 'exec "$@" >/dev/null 2>&1', "sh", *command]


def _users(box):
    """(what runs bwrap as the box's user, what makes the kernel that user inside it, bwrap's namespaces).

    Where the user can start this Python, bwrap runs as the user, in a user namespace of its
    own. Where it cannot (the grader as root, this Python in root's home), bwrap runs as root
    with no user namespace (whose uid 0 would be the host's root) and the kernel's first step
    is to become the user, with no capabilities: either way, never root on the host.
    """
    user_namespace = ["--unshare-all", "--unshare-user", "--disable-userns"]
    if box.uid is None:
        return [], [], user_namespace
    becoming = ["setpriv", f"--reuid={box.uid}", f"--regid={box.gid}", "--clear-groups"]
    if not box.drops_inside:
        return [*becoming, "--"], [], user_namespace
    others = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    return [], [*becoming, "--inh-caps=-all", "--bounding-set=-all", "--"], others


def _visible():
    """bwrap's arguments that show the kernel the system, read-only (this Python and the workbook come later)."""
    arguments = []
    for folder in _SYSTEM:
        if os.path.islink(folder):  # /bin -> usr/bin on a merged /usr
            arguments += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            arguments += ["--ro-bind", folder, folder]
    return arguments


def _folders_above(paths):
    """The folders above ``paths`` the sandbox makes itself: not /, the system's or a temporary folder."""
    made = set()
    for path in paths:
        parent = os.path.dirname(path)
        while parent not in ("/", "") and not _is_within(parent, _SYSTEM) and parent not in TMPFS_BYTES:
            made.add(parent)
            parent = os.path.dirname(parent)
    return sorted(made, key=lambda folder: (folder.count(os.sep), folder))


def _is_within(path, folders):
    return any(path == folder or path.startswith(folder + os.sep) for folder in folders)


def _python_paths():
    """Where this Python and the workbook live (a virtual environment, the Python it was made from), as named."""
    return (sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python_folders():
    """{(folder, where the box shows it)} for this Python and the workbook: each where it is, and where it is
    reached through a link too (a virtual environment whose path is a link starts by the linked path)."""
    pairs = set()
    for path in _python_paths():
        pairs |= {(os.path.realpath(path), os.path.realpath(path)), (os.path.realpath(path), os.path.abspath(path))}
    seen = {seen_as for _, seen_as in pairs}
    return {(folder, seen_as) for folder, seen_as in pairs if not any(seen_as.startswith(o + os.sep) for o in seen)}


def _hiding(hidden):
    """bwrap's arguments that empty each hidden folder (not the temporary folders: they are the box's own)."""
    arguments = []
    for folder in sorted(set(map(str, hidden)) - set(TMPFS_BYTES)):
        if os.path.isdir(folder) and not _holds_the_python(folder):  # empty and read-only
            arguments += ["--tmpfs", folder, "--remount-ro", folder]
    return arguments


def _sandbox_env(box, user_env):
    """The only environment the kernel gets: a home in the box, a short PATH, and ``user_env``."""
    return {
        "HOME": str(box.home),
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
        "LANG": "C.UTF-8",
        "MPLBACKEND": "agg",
        "USER": "student",  # the box's user may have no account: getpass.getuser() reads these first
        "LOGNAME": "student",
        # nbgrader's own sign that a notebook is being graded (or validated)
        **({"NBGRADER_EXECUTION": os.environ["NBGRADER_EXECUTION"]} if "NBGRADER_EXECUTION" in os.environ else {}),
        **(user_env or {}),
    }


def can_hide(folder):
    """True if the sandbox can hide ``folder`` from the kernel (it holds neither this Python nor the workbook)."""
    return not _holds_the_python(folder)


def _holds_the_python(folder):
    """True if hiding ``folder`` would hide this Python or the workbook from the kernel."""
    workbook_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    needed = {
        f(path) for path in (sys.prefix, sys.base_prefix, workbook_parent) for f in (os.path.realpath, os.path.abspath)
    }
    return any(
        path == hiding or path.startswith(hiding + os.sep)
        for hiding in {os.path.realpath(folder), os.path.abspath(folder)}
        for path in needed
    )


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs in :func:`sandbox_command`'s sandbox, over Unix sockets.

    Made by :func:`sandboxed_kernel_manager`. An interrupt is a message the kernel acts on:
    a signal would reach the sandbox itself and end it.
    """

    box = None
    hidden = ()

    def write_connection_file(self, **kwargs):
        super().write_connection_file(**kwargs)
        if self.box.uid is not None and os.path.exists(self.connection_file):
            os.chown(self.connection_file, self.box.uid, self.box.gid, follow_symlinks=False)

    def format_kernel_cmd(self, extra_arguments=None):
        return sandbox_command(self.box, super().format_kernel_cmd(extra_arguments), self.hidden)


def sandboxed_kernel_manager(box, hidden=(), **options):
    """A :class:`SandboxedKernelManager` for ``box``; ``options`` go to the kernel manager."""
    manager = SandboxedKernelManager(
        transport="ipc", ip=str(box.kernel / "ipc"), connection_file=str(box.kernel / "connection.json"), **options
    )
    manager.box, manager.hidden = box, tuple(hidden)
    manager.kernel_spec.interrupt_mode = "message"
    return manager
