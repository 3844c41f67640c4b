"""Nothing written to stderr is lost, torn, delayed to another cell, reordered or blocked by setup().

Each case runs in a real kernel, through the runner the notebooks use (nbclient, and a kernel
with a clean environment), twice: in a kernel whose first cell calls ``workbook.setup()`` and in one whose
first cell only imports the workbook. The cases that are about a process of the student's
own (a script that crashes, exits, or leaves a process behind) run that process from a cell,
with the same first line: ``workbook.setup()`` or not. Both kernels import TensorFlow in their
first cell, and a hook writes, starts a process and (in processes of their own) crashes while it
loads: inside ``setup()``'s window with it. Every case compares with what was written, and both
kernels must give it. Only TensorFlow's own log lines differ, and they are the last case: with
``setup()``, none.
"""

import json
import re
import textwrap

import pytest
from notebook_runner import execute_cells, stderr_outputs
from test_environment import TENSORFLOW_AT_WORK

N_LINES = 50_000
LOOK_ALIKES = [
    "E0000 00:00:1796050411.801424    5487 util.cc:131] my own line, in the form of a log line",
    "W1201 12:00:00.000000 4321 train.py:7] a warning of my own",
    "I0000 00:00:1796050411.000000 1 child.py:1] a line of a child process",
]
CRASH_MESSAGES = {
    "faulthandler": "Fatal Python error: Segmentation fault",
    "os.abort": "F1201 12:00:00.000000 1 model.cc:1] Check failed: why it stops",
    "os._exit": "last words before os._exit",
    "fork": "RuntimeError: the forked child says why it stops",
}
GRANDCHILD = """
import os, pathlib, sys, time
folder = pathlib.Path(sys.argv[1])
while not (folder / "go").exists():
    time.sleep(0.02)
os.write(2, b"the background process outlived its parent\\n")
(folder / "done").touch()
"""

# What the student's code writes while TensorFlow loads: from a hook that runs when the kernel
# first imports TensorFlow (inside setup() with it, at the first cell's own import without).
DURING_THE_IMPORT = [
    "a line of my own while TensorFlow loads",
    *LOOK_ALIKES[:2],
    "I0000 00:00:1796050411.000000 1 port.cc:153] oneDNN custom operations are on, says my own line",
    "I0000 00:00:1796050411.000000 1 mlir_graph_optimization_pass.cc:401] MLIR V1 optimization pass: mine",
    "WARNING: All log messages before absl::InitializeLog() is called: my own sentence",
    "F1201 12:00:00.000000 1 model.cc:1] Check failed: a fatal line of my own",
]
# A process started during the import: it writes, then waits for a flag set in the last cell.
CHILD_OF_THE_IMPORT = f"""
import os, pathlib, sys, time
folder = pathlib.Path(sys.argv[1])
os.write(2, {LOOK_ALIKES[2]!r}.encode() + b"\\n")
for i in range(100):
    os.write(2, b"child line %d during the import\\n" % i)
deadline = time.monotonic() + 600
while not (folder / "go").exists() and time.monotonic() < deadline:
    time.sleep(0.02)
for i in range(100):
    os.write(2, b"child line %d after the import\\n" % i)
"""
FIRST_CELL_STDERR = (
    "".join(line + "\n" for line in DURING_THE_IMPORT)
    + "a partial line, finished later\n"
    + LOOK_ALIKES[2]
    + "\n"
    + "".join(f"child line {i} during the import\n" for i in range(100))
    + "after the import\n"
)
# A process of the student's own that dies while TensorFlow loads: the hook, then {first}.
CRASHES_DURING_THE_IMPORT = {
    "faulthandler": ("ctypes.string_at(0)", "Fatal Python error: Segmentation fault"),
    "os.abort": (
        "os.write(2, b'F1201 12:00:00.000000 1 model.cc:1] Check failed: it stops mid-import\\n'); os.abort()",
        "F1201 12:00:00.000000 1 model.cc:1] Check failed: it stops mid-import",
    ),
    "os._exit": ("os.write(2, b'last words mid-import\\n'); os._exit(3)", "last words mid-import"),
    "SIGTERM": (
        "os.write(2, b'stopped from outside mid-import\\n'); os.kill(os.getpid(), signal.SIGTERM)",
        "stopped from outside mid-import",
    ),
}
CRASH_DURING_THE_IMPORT = """
import ctypes, faulthandler, os, signal, sys
faulthandler.enable()
class Crash:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            {action}
sys.meta_path.insert(0, Crash())
"""

# One kernel's cells; {first} is the first line of the kernel and of every child process.
CELLS = {
    "first": """
        import contextlib, os, subprocess, sys, tempfile, time
        IMPORT_WINDOW = {"folder": tempfile.mkdtemp()}
        KERNEL_STDERR = os.fstat(2)
        SEEN = []

        @contextlib.contextmanager
        def watching():
            # Records the text the kernel passes on to the notebook as its stderr stream.
            write = type(sys.stderr).write
            sys.stderr.write = lambda text: (SEEN.append(text), write(sys.stderr, text))[1]
            try:
                yield
            finally:
                del sys.stderr.write

        def arrived(text):
            # A condition with a generous cap, never a schedule.
            deadline = time.monotonic() + 60
            while text not in "".join(SEEN) and time.monotonic() < deadline:
                time.sleep(0.01)
            return text in "".join(SEEN)

        class DuringTheImport:
            def find_spec(self, name, path=None, target=None):
                if name == "tensorflow":
                    sys.meta_path.remove(self)
                    during_the_import()

        def during_the_import():
            IMPORT_WINDOW["descriptor 2 swapped"] = os.fstat(2).st_ino != KERNEL_STDERR.st_ino
            with watching():
                for line in {during!r}:
                    os.write(2, line.encode() + b"\\n")
                os.write(2, b"a partial line, ")
                IMPORT_WINDOW["a partial line at once"] = arrived("a partial line, ")
                os.write(2, b"finished later\\n")
                IMPORT_WINDOW["child"] = subprocess.Popen(
                    [sys.executable, "-c", {child_of_the_import!r}, IMPORT_WINDOW["folder"]]
                )
                IMPORT_WINDOW["a child's lines at once"] = arrived("child line 99 during the import\\n")

        sys.meta_path.insert(0, DuringTheImport())
        {first}
        import tensorflow
        os.write(2, b"after the import\\n")
        import json, pathlib, threading
        FIRST = {first!r}
        GRANDCHILD = {grandchild!r}

        def child(code, **options):
            return subprocess.run([sys.executable, "-c", FIRST + "\\n" + code], **options)

        def drained():
            # ipykernel forwards descriptor 2 from a reader thread of its own, which on a busy
            # machine can lag behind the cell; what it has not read when the cell ends comes
            # after it (JupyterLab still shows it there; nbclient, which runs these, would not).
            # So a cell that writes much waits until the kernel's pipe is empty, as a person would.
            import fcntl, struct, termios

            while struct.unpack("i", fcntl.ioctl(2, termios.FIONREAD, b"\\0" * 4))[0]:
                time.sleep(0.01)
            time.sleep(0.2)

        drained()
    """,
    "lines": f"""
        for i in range({N_LINES}):
            os.write(2, b"line %d\\n" % i)
        drained()
    """,
    "subprocess": f"""
        code = "import os\\nfor i in range({N_LINES}): os.write(2, b'child line %d\\\\n' % i)"
        _ = subprocess.run([sys.executable, "-c", code])
        drained()
    """,
    "threads": """
        def write(k):
            for i in range(20):
                os.write(2, b"thread %d line %d\\n" % (k, i))

        threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        drained()
    """,
    "after threads": "print('the next cell')",
    # The kernel's reader thread may also lag behind one short write; drained() waits it out, and
    # a partial line held back for its newline would still miss its cell.
    **{f"no newline {k}": f"_ = os.write(2, b'cell {k} ends without a newline')\ndrained()" for k in range(5)},
    "long lines and one file": """
        log = pathlib.Path(tempfile.mkdtemp()) / "log"
        with open(log, "wb") as both:
            child(
                "import os, threading\\n"
                "def write(k):\\n"
                "    for _ in range(100): os.write(2, (b'%d' % k) * 100_000 + b'\\\\n')\\n"
                "threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]\\n"
                "[t.start() for t in threads]; [t.join() for t in threads]\\n"
                "for i in range(2000):\\n"
                "    print('out', i, flush=True) if i % 2 == 0 else os.write(2, b'err %d\\\\n' % i)",
                stdout=both,
                stderr=subprocess.STDOUT,
            )
        lines = log.read_bytes().split(b"\\n")[:-1]
        print(json.dumps({
            "intact": sum(len(line) == 100_000 and len(set(line)) == 1 for line in lines[:400]),
            "then": [line.decode() for line in lines[400:]],
        }))
    """,
    "crashes": """
        _ = child("import ctypes, faulthandler\\nfaulthandler.enable()\\nctypes.string_at(0)")
        _ = child(
            "import os\\n"
            "os.write(2, b'F1201 12:00:00.000000 1 model.cc:1] Check failed: why it stops\\\\n')\\n"
            "os.abort()"
        )
        _ = child("import os\\nos.write(2, b'last words before os._exit\\\\n')\\nos._exit(3)")
        _ = subprocess.run([sys.executable, "-c",
            "import os\\n"
            "pid = os.fork()\\n"
            "if pid == 0:\\n"
            "    " + FIRST + "\\n"
            "    raise RuntimeError('the forked child says why it stops')\\n"
            "os.waitpid(pid, 0)"])
        drained()
    """,
    "exit and a process left behind": """
        folder = pathlib.Path(tempfile.mkdtemp())
        _ = child(
            "import subprocess, sys\\n"
            f"subprocess.Popen([sys.executable, '-c', {GRANDCHILD!r}, {str(folder)!r}])\\n"
            "sys.stderr.write('y' * 900_000 + '\\\\n')"
        )
        (folder / "go").touch()
        deadline = time.monotonic() + 60
        while not (folder / "done").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        drained()
        print("done" if (folder / "done").exists() else "the background process never finished")
    """,
    "C holds the GIL": """
        written = child(
            "import ctypes\\ndata = b'x' * 4_000_000 + b'\\\\n'\\nprint(ctypes.PyDLL(None).write(2, data, len(data)))",
            capture_output=True,
            timeout=120,
        )
        print(json.dumps({"returncode": written.returncode, "written": written.stdout.decode().strip(),
                          "stderr": len(written.stderr)}))
    """,
    "look-alikes": f"""
        SEEN.clear()
        with watching():
            _ = os.write(2, {LOOK_ALIKES[0]!r}.encode() + b"\\n")
            # One write per line: print() writes the text and its newline apart, and the kernel
            # may put a line from file descriptor 2 between the two (ipykernel 6 at the oldest end).
            _ = sys.stderr.write({LOOK_ALIKES[1]!r} + "\\n")
            sys.stderr.flush()
            code = "import sys\\nsys.stderr.write(" + repr({LOOK_ALIKES[2]!r} + "\\n") + ")"
            _ = subprocess.run([sys.executable, "-c", code])
            # The child's line reaches the kernel's reader thread, which on a busy machine can lag
            # behind the cell: the cell ends once the kernel has passed it on, as a person would wait.
            _ = arrived({LOOK_ALIKES[2]!r} + "\\n")
    """,
    "crashes during the import": """
        report = {}
        for how, (action, _) in {crashes_during_the_import!r}.items():
            folder = tempfile.mkdtemp()
            script = {crash_during_the_import!r}.replace("{action}", action) + FIRST + "\\nimport tensorflow\\n"
            # Its stderr captured: read until every writer has closed it, the forwarder included.
            died = subprocess.run(
                [sys.executable, "-c", script], capture_output=True, env=dict(os.environ, TMPDIR=folder), timeout=1800
            )
            report[how] = {
                "stderr": died.stderr.decode(errors="replace")[-3000:],
                "left behind": os.listdir(folder),
                "failed": died.returncode != 0,
            }
        print(json.dumps(report))
    """,
    "tensorflow": TENSORFLOW_AT_WORK + "print('trained')",
    "after the import": """
        with watching():
            (pathlib.Path(IMPORT_WINDOW["folder"]) / "go").touch()
            IMPORT_WINDOW["a child's lines after the import"] = arrived("child line 99 after the import\\n")
            IMPORT_WINDOW["child"].wait(timeout=120)
        drained()
        print(json.dumps({name: value for name, value in IMPORT_WINDOW.items() if isinstance(value, bool)}))
    """,
}
NAMES = list(CELLS)
VARIANTS = {"with setup()": "import workbook; workbook.setup(seed=0)", "without setup()": "import workbook"}


# The kernels are started once for the module's tests, which stay in one worker.
pytestmark = [pytest.mark.kernel, pytest.mark.xdist_group("stderr kernels")]


@pytest.fixture(scope="session")  # at most once per worker process
def kernels(tmp_path_factory):
    """The executed cells of each kernel, by variant and case name."""
    runs = {}
    for variant, first in VARIANTS.items():
        sources = [
            textwrap.dedent(CELLS[name])
            .strip()
            .replace("{first!r}", repr(first))
            .replace("{grandchild!r}", repr(GRANDCHILD))
            .replace("{during!r}", repr(DURING_THE_IMPORT))
            .replace("{child_of_the_import!r}", repr(CHILD_OF_THE_IMPORT))
            .replace("{crashes_during_the_import!r}", repr(CRASHES_DURING_THE_IMPORT))
            .replace("{crash_during_the_import!r}", repr(CRASH_DURING_THE_IMPORT))
            .replace("{first}", first)
            for name in NAMES
        ]
        # Long enough for the waits of the first cell to run out, so a failure names its case.
        notebook = execute_cells(sources, tmp_path_factory.mktemp("cwd"), timeout_per_cell=300)
        runs[variant] = dict(zip(NAMES, notebook.cells, strict=True))
    return runs


def stream(cell, name="stderr"):
    return "".join(o["text"] for o in cell.outputs if o.get("output_type") == "stream" and o.get("name") == name)


def errors(cell):
    return [f"{o['ename']}: {o['evalue']}" for o in cell.outputs if o.get("output_type") == "error"]


variants = pytest.mark.parametrize("variant", VARIANTS)


@variants
def test_every_cell_ran(kernels, variant):
    failed = {name: errors(cell) for name, cell in kernels[variant].items() if errors(cell)}
    assert not failed


@variants
def test_fifty_thousand_lines_arrive_whole_and_in_order(kernels, variant):
    assert stream(kernels[variant]["lines"]) == "".join(f"line {i}\n" for i in range(N_LINES))


@variants
def test_a_subprocess_that_inherits_stderr_is_shown_whole_in_its_cell(kernels, variant):
    cells = kernels[variant]
    assert stream(cells["subprocess"]) == "".join(f"child line {i}\n" for i in range(N_LINES))
    assert "child line" not in stream(cells["threads"])


@variants
def test_threads_output_stays_in_its_cell(kernels, variant):
    lines = stream(kernels[variant]["threads"]).splitlines()
    assert sorted(lines) == sorted(f"thread {k} line {i}" for k in range(4) for i in range(20))
    for k in range(4):  # each thread's lines in the order it wrote them
        own = [line for line in lines if line.startswith(f"thread {k} ")]
        assert own == [f"thread {k} line {i}" for i in range(20)]
    after = kernels[variant]["after threads"]
    assert stream(after) == "" and stream(after, "stdout") == "the next cell\n"


@variants
def test_a_write_without_a_newline_shows_in_its_own_cell(kernels, variant):
    for k in range(5):
        assert stream(kernels[variant][f"no newline {k}"]) == f"cell {k} ends without a newline"


@variants
def test_long_lines_from_threads_are_not_torn_and_one_file_keeps_the_order(kernels, variant):
    # In a script whose stdout and stderr go to one file. (In a kernel itself, ipykernel's own
    # pipe can interleave writes longer than 4 KiB from threads, with or without the workbook.)
    report = json.loads(stream(kernels[variant]["long lines and one file"], "stdout"))
    assert report["intact"] == 400
    assert report["then"] == [f"out {i}" if i % 2 == 0 else f"err {i}" for i in range(2000)]


@variants
@pytest.mark.parametrize("how", CRASH_MESSAGES)
def test_the_message_before_a_crash_is_kept(kernels, variant, how):
    assert CRASH_MESSAGES[how] in stream(kernels[variant]["crashes"])


@variants
def test_what_is_pending_at_exit_arrives_and_a_process_left_behind_is_heard(kernels, variant):
    cell = kernels[variant]["exit and a process left behind"]
    assert stream(cell, "stdout") == "done\n"  # not killed by SIGPIPE when its parent exited
    assert stream(cell) == "y" * 900_000 + "\n" + "the background process outlived its parent\n"


@variants
def test_c_code_holding_the_gil_writes_four_megabytes_without_hanging(kernels, variant):
    # In a process of its own: in the kernel itself, ipykernel's pipe would block it, with or
    # without the workbook (its reader thread needs the lock the writer holds).
    report = json.loads(stream(kernels[variant]["C holds the GIL"], "stdout"))
    assert report == {"returncode": 0, "written": "4000001", "stderr": 4_000_001}


@variants
def test_a_students_line_that_looks_like_a_log_line_is_kept(kernels, variant):
    shown = stream(kernels[variant]["look-alikes"]).splitlines()
    assert sorted(shown) == sorted(LOOK_ALIKES)


# What TensorFlow writes while it loads when no log level is set, whole lines, in either version.
TENSORFLOW_START = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|.*[ /]port\.cc:\d+\] oneDNN custom operations are on\. You may see .*"
    r"|.*[ /]cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized .*"
    r"|To enable the following instructions: .*)\n",
    re.MULTILINE,
)


@variants
def test_what_is_written_while_tensorflow_loads_arrives_whole_in_order_and_at_once(kernels, variant):
    # Both kernels import TensorFlow in their first cell; a hook writes while it loads, waiting
    # each time until the kernel has passed the text on (a partial line, a child's lines), and
    # the cell writes once more after the import. Without setup(), TensorFlow's lines are there too.
    cells = kernels[variant]
    shown = stream(cells["first"])
    assert (shown if variant == "with setup()" else TENSORFLOW_START.sub("", shown)) == FIRST_CELL_STDERR
    report = json.loads(stream(cells["after the import"], "stdout"))
    assert report == {
        "descriptor 2 swapped": variant == "with setup()",  # the hook ran inside setup()'s window
        "a partial line at once": True,
        "a child's lines at once": True,
        "a child's lines after the import": True,
    }


@variants
def test_a_process_started_during_the_import_is_heard_to_its_end(kernels, variant):
    expected = "".join(f"child line {i} after the import\n" for i in range(100))
    assert stream(kernels[variant]["after the import"]) == expected


@variants
@pytest.mark.parametrize("how", CRASHES_DURING_THE_IMPORT)
def test_a_crash_while_tensorflow_loads_keeps_its_message_and_leaves_no_file(kernels, variant, how):
    report = json.loads(stream(kernels[variant]["crashes during the import"], "stdout"))[how]
    assert report["failed"] and CRASHES_DURING_THE_IMPORT[how][1] in report["stderr"], report["stderr"]
    assert report["left behind"] == []  # in the process's own TMPDIR


# TensorFlow's own lines: at import (Abseil's banner, oneDNN, cpu_feature_guard), at runtime
# (local_rendezvous after a tf.data loop or a failed op), in either version's format.
TENSORFLOW_LOG = re.compile(
    r"^(WARNING: All log messages before absl|[IWE]\d{4} |\d{4}-\d\d-\d\d [\d:.]+: [IWE] )", re.MULTILINE
)


def test_with_setup_tensorflow_writes_no_log_line_in_any_cell(kernels):
    cells = kernels["with setup()"]
    assert stream(cells["tensorflow"], "stdout") == "trained\n"
    assert stream(cells["first"]) == FIRST_CELL_STDERR and stream(cells["tensorflow"]) == ""
    without = stream(kernels["without setup()"]["first"]) + stream(kernels["without setup()"]["tensorflow"])
    if not TENSORFLOW_LOG.search(without):
        pytest.skip("this TensorFlow writes no log line here even without setup(), so the check shows nothing")


def test_setup_leaves_no_stderr_in_a_kernel_with_a_read_only_home(tmp_path):
    """Matplotlib's cache warnings included; without setup() they are there (the home is read-only)."""
    import os
    import shutil

    home = tmp_path / "home"
    home.mkdir()
    # Jupyter's connection files and IPython's profile need a writable folder of their own
    # (as on a hub with read-only homes); Matplotlib is left to find out for itself.
    environment = {"JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "IPYTHONDIR": str(tmp_path / "ipython")}
    launcher = ()
    if os.geteuid() == 0:  # root writes through permissions: make it a read-only mount instead
        if shutil.which("unshare") is None:
            pytest.skip("running as root without unshare: no way to make a home folder read-only")
        launcher = ("unshare", "--mount", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(home))
    else:
        home.chmod(0o555)
    plot = "import matplotlib.pyplot as plt\nplt.plot([0, 1])\nplt.show()"
    runs = {}
    for first in VARIANTS.values():
        cells = [first, plot, "import pathlib\nprint(pathlib.Path.home().joinpath('probe').touch())"]
        runs[first] = execute_cells(cells, tmp_path, home=home, launcher=launcher, environment=environment)
    with_setup, without = runs[VARIANTS["with setup()"]], runs[VARIANTS["without setup()"]]
    assert [error.split(":")[0] for error in errors(with_setup.cells[2])] in (["OSError"], ["PermissionError"])
    assert not stderr_outputs(with_setup), stderr_outputs(with_setup)
    assert "Matplotlib created a temporary cache directory" in stream(without.cells[1])
