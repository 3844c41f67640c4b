"""Execute a notebook headless with its `parameters` cell turned down.

The knobs in a notebook's `parameters` cell use the workbook's fixed
vocabulary; every name below that the cell assigns is overridden by a cell
injected right after it (as papermill does), so each notebook runs in
seconds in the test suite and at full size for students.
"""

import ast
import pathlib
import time

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"

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
    tagged = [
        i for i, cell in enumerate(notebook.cells)
        if "parameters" in cell.get("metadata", {}).get("tags", [])
    ]
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


def execute(path, timeout_per_cell=600):
    """Run the reduced notebook in a fresh kernel; return (notebook, seconds). Raises on any error."""
    notebook = reduced_notebook(path)
    client = NotebookClient(
        notebook,
        timeout=timeout_per_cell,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    started = time.perf_counter()
    client.execute()
    return notebook, time.perf_counter() - started


def error_outputs(notebook):
    """Every error output of the executed notebook, as 'cell N: ename: evalue'."""
    errors = []
    for number, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                errors.append(f"cell {number}: {output['ename']}: {output['evalue']}")
    return errors
