"""Execute a notebook headless with its `parameters` cell turned down.

The knobs in a notebook's `parameters` cell use the workbook's fixed
vocabulary; every name below that the cell assigns is overridden by a cell
injected right after it (as papermill does), so each notebook runs in
seconds in the test suite and at full size for students.

The notebook runs the way a student's machine or a hub runs it: nbclient starts this Python's
own ``python3`` kernel, a process of its own, as JupyterLab and nbgrader start one, with a whole
environment of its own: no ``PYTEST_*`` and no ``TF_*`` variables, and a home folder of its own.
Under pytest, ipykernel stops forwarding what the process writes to file descriptor 2, so a
kernel that inherited the test process's environment would hide every stderr line a student
sees in red. The tests run nbclient in their own process (:func:`execute_notebook`); the book's
build runs it in a process of its own (``python notebook_runner.py IN OUT``).

Why not a library: the runner is nbclient, as papermill and nbmake are; nbmake starts its
kernels from the pytest process (so with ``PYTEST_*`` set), and papermill stops at a
notebook's first error and injects every parameter it is given, where the tests want every
error of a run and only the knobs a notebook has.
"""

import argparse
import ast
import copy
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import nbformat
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_core.paths import ENV_JUPYTER_PATH, SYSTEM_JUPYTER_PATH
from nbclient import NotebookClient

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"

#: Whether this runs at the newest end of the tested range (.venv), where the book is built,
#: rather than at the oldest (.venv-oldest), which `make test` runs beside it and whose script,
#: scripts/test_oldest_end.sh, says so in WORKBOOK_TEST_END.
NEWEST_END = os.environ.get("WORKBOOK_TEST_END") != "oldest"

#: The turned-down value of every knob a notebook may expose.
REDUCED_PARAMETERS = {
    "epochs": 1,
    "n_train": 512,
    "n_test": 128,
    "batch_size": 64,
    "n_points": 201,
    "n_samples": 256,
    "steps": 40,
    "train_steps": 40,
    "every": 2,
    "refresh_seconds": 0.2,
    "time_budget_seconds": 120,
    "show_live": True,
    # No network, and nothing written into ~/.keras, while the suite runs.
    "mnist_source": "bundled",
}


def parameters_cell_index(notebook):
    """Index of the one cell tagged `parameters` (ValueError if there is not exactly one)."""
    tagged = [i for i, cell in enumerate(notebook.cells) if "parameters" in cell.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        raise ValueError(f"expected exactly one cell tagged 'parameters', found {len(tagged)}")
    return tagged[0]


def assigned_names(source):
    """Names assigned at the top level of a cell's source."""
    names = set()
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            if isinstance(target, ast.Name):
                names.add(target.id)
    return names


def reduced_notebook(path):
    """The notebook at `path` with a cell that turns its parameters down injected after them."""
    notebook = nbformat.read(path, as_version=4)
    index = parameters_cell_index(notebook)
    names = assigned_names(notebook.cells[index].source) & set(REDUCED_PARAMETERS)
    lines = [f"{name} = {REDUCED_PARAMETERS[name]!r}" for name in sorted(names)]
    injected = nbformat.v4.new_code_cell(
        "# Injected by the test suite: turned-down parameters\n" + "\n".join(lines),
        metadata={"tags": ["injected-parameters"]},
    )
    notebook.cells.insert(index + 1, injected)
    return notebook


# Variables a student's kernel never has: pytest's, and TensorFlow's log switches that the
# test suite or a developer's shell may set (the notebooks must be quiet without them).
_NOT_A_STUDENTS = ("PYTEST_", "TF_")
# Per-user folders, so that they all follow HOME.
_PER_USER = (
    "JUPYTER_CONFIG_DIR",
    "JUPYTER_DATA_DIR",
    "JUPYTER_RUNTIME_DIR",
    "JUPYTER_PATH",
    "JUPYTER_CONFIG_PATH",
    "IPYTHONDIR",
    "MPLCONFIGDIR",
    "KERAS_HOME",
)


#: How long a test waits for a fresh Python it started (importing TensorFlow alone is seconds of CPU):
#: a cap for a process that hangs, far above what a loaded machine takes, never a measure of speed.
FRESH_PYTHON_SECONDS = 1800


def clean_environment(home, base=None):
    """``base`` (default: this process's environment) as a fresh kernel on a hub would see it.

    No ``PYTEST_*`` or ``TF_*`` variables; ``home`` as HOME, with every per-user folder of
    Jupyter, IPython, Matplotlib and Keras below it; this Python's scripts first on PATH.
    """
    env = {
        name: value
        for name, value in (os.environ if base is None else base).items()
        if not name.startswith(_NOT_A_STUDENTS) and name not in _PER_USER
    }
    env["HOME"] = str(home)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def run_nbgrader(folder, env, *args, check=True, timeout=1800):
    """``python -m nbgrader ARGS`` in ``folder``, as an instructor or student runs it; the result.

    With ``check``, a non-zero exit raises RuntimeError with nbgrader's output.
    """
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def execute(path, timeout_per_cell=600, home=None):
    """Run the reduced notebook in a fresh kernel with a clean environment; return (notebook, seconds).

    Errors do not raise: they stay in the executed notebook, as in a student's (see
    :func:`error_outputs` and :func:`stderr_outputs`).
    """
    path = pathlib.Path(path).resolve()
    return execute_notebook(reduced_notebook(path), path.parent, timeout_per_cell, home, name=path.name)


def execute_cells(sources, cwd, timeout_per_cell=600, home=None, **options):
    """Run code cells ``sources`` in a fresh kernel, as :func:`execute` runs a notebook; the executed notebook."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    return execute_notebook(notebook, cwd, timeout_per_cell, home, **options)[0]


def execute_notebook(notebook, cwd, timeout_per_cell=600, home=None, launcher=(), environment=None, name="cells"):
    """Run a copy of ``notebook`` in a fresh kernel in ``cwd``; return (the executed copy, seconds).

    The kernel's whole environment is :func:`clean_environment` of ``home`` (by default a new
    student's: no font cache, no Jupyter or Keras folders yet) with ``environment`` added;
    ``launcher`` goes before its command line (a program that prepares the kernel's process and
    then runs the rest of its arguments). A kernel that does not start or dies is a RuntimeError.
    """
    notebook = copy.deepcopy(notebook)
    with tempfile.TemporaryDirectory(prefix="notebook-run-") as folder:
        if home is None:
            home = pathlib.Path(folder, "home")
            home.mkdir()
        env = clean_environment(home) | (environment or {})
        started = time.perf_counter()
        try:
            run(notebook, cwd, timeout_per_cell, env, launcher, connection_file=pathlib.Path(folder, "kernel.json"))
        except Exception as error:
            raise RuntimeError(f"running {name} failed: {type(error).__name__}: {error}") from error
        seconds = time.perf_counter() - started
    return nbformat.reads(nbformat.writes(notebook), as_version=4), seconds


def run(notebook, cwd, timeout_per_cell, env=None, launcher=(), connection_file=None):
    """Execute ``notebook`` in place with nbclient, in a fresh kernel in ``cwd``; errors stay in their cells.

    The kernel is this Python's ``python3`` kernel as a new student's home finds it (from this
    environment's and the system's Jupyter folders), whose whole environment is ``env`` (default:
    this process's); ``launcher`` goes before its command line.
    """
    specs = KernelSpecManager(
        kernel_dirs=[os.path.join(path, "kernels") for path in (*ENV_JUPYTER_PATH, *SYSTEM_JUPYTER_PATH)]
    )
    manager = KernelManager(kernel_name="python3", kernel_spec_manager=specs)
    if connection_file is not None:
        manager.connection_file = str(connection_file)
    manager.kernel_spec.argv[:0] = launcher
    client = NotebookClient(
        notebook, km=manager, timeout=timeout_per_cell, allow_errors=True, resources={"metadata": {"path": str(cwd)}}
    )
    client.execute(cleanup_kc=True, **({} if env is None else {"env": env}))  # shut down here too: the manager is ours


def stderr_outputs(notebook):
    """Every stderr stream output of the executed notebook, as 'cell N: first line'."""
    found = []
    for number, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                found.append(f"cell {number}: {output['text'].strip()[:300]}")
    return found


#: The errors notebooks show on purpose, by notebook: (ename, words of evalue), each allowed only
#: in a cell tagged ``raises-exception``, and such a cell must raise exactly that.
EXPECTED_ERRORS = {
    "03_finding_gradient_killers.ipynb": ("ValueError", "No gradients provided for any variable"),
}


def error_outputs(notebook, expected=None):
    """Every error output of the executed notebook, as 'cell N: ename: evalue'.

    ``expected`` (ename, words) is not reported in a cell tagged ``raises-exception``; a
    tagged cell that raised nothing else and not it is reported.
    """
    errors = []
    for number, cell in enumerate(notebook.cells):
        tagged = "raises-exception" in cell.get("metadata", {}).get("tags", [])
        raised = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        for output in raised:
            if tagged and expected and output["ename"] == expected[0] and expected[1] in output["evalue"]:
                continue
            errors.append(f"cell {number}: {output['ename']}: {output['evalue']}")
        if tagged and cell.cell_type == "code" and not raised:
            errors.append(f"cell {number}: tagged raises-exception but raised nothing")
    return errors


def text_of(cell):
    """Everything a cell showed as text (streams, plain-text displays, tracebacks), joined."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output["text"])
        elif output.get("output_type") == "error":
            parts.append("\n".join(output.get("traceback", [])))
        else:
            parts.append(output.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def main(argv=None):
    """Execute IN (already reduced) with nbclient, in a kernel with this process's environment, and write it to OUT."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("notebook")
    parser.add_argument("out")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument("--cwd", default=str(NOTEBOOKS), help="the kernel's working folder")
    args = parser.parse_args(argv)
    notebook = nbformat.read(args.notebook, as_version=4)
    run(notebook, args.cwd, args.timeout)
    nbformat.write(notebook, args.out)


if __name__ == "__main__":
    main()


def goes_on_after_an_error(cell):
    """Whether Run All goes on after an error in ``cell``: JupyterLab's ``raises-exception`` tag."""
    return "raises-exception" in cell.get("metadata", {}).get("tags", [])


def errors_that_stop_run_all(notebook, errors):
    """Of ``errors`` ('cell N: ...'), those that stop a student's Run All of a students' version.

    An unanswered exercise raises in its answer and check cells, and in the cells that read what
    only its answer defines, which the students' version tags ``raises-exception``
    (scripts/make_assignments.py) so that Run All goes on; an error in any other cell stops it.
    """
    goes_on = {number for number, cell in enumerate(notebook.cells) if goes_on_after_an_error(cell)}
    return [error for error in errors if int(error.split(":", 1)[0].removeprefix("cell ")) not in goes_on]
