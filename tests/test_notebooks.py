"""Every notebook runs top to bottom, and every notebook is committed clean."""

import importlib.util

import nbformat
import pytest
from notebook_runner import (
    EXPECTED_ERRORS,
    NEWEST_END,
    NOTEBOOKS,
    error_outputs,
    execute,
    parameters_cell_index,
    stderr_outputs,
    text_of,
)

ALL_NOTEBOOKS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
#: The notebooks whose students' version, with its exercise unanswered, runs on to its end: each end
#: executes each once, the newest the instructor's version (here, for the book) and the oldest the
#: students' version (tests/test_notebook_06_claims.py, tests/test_notebook_07_claims.py) instead.
STUDENTS_VERSIONS_AT_THE_OLDEST_END = ("06_beyond_straight_through.ipynb", "07_quantisation_aware_training.ipynb")

# The book's build (tests/test_rendered_book.py) takes the notebooks executed here at the newest end,
# unchanged since.
_spec = importlib.util.spec_from_file_location("build_book", NOTEBOOKS.parent / "scripts" / "build_book.py")
build_book = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_book)


def test_there_are_notebooks():
    assert ALL_NOTEBOOKS, f"no notebooks found in {NOTEBOOKS}"


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    dirty = [
        i
        for i, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs or execution counts; clear them before committing"


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_follows_the_conventions(path):
    notebook = nbformat.read(path, as_version=4)
    parameters_cell_index(notebook)  # exactly one `parameters` cell
    assert notebook.cells[0].cell_type == "markdown" and notebook.cells[0].source.startswith("# "), (
        f"{path.name} must open with a markdown title"
    )
    setup_cells = [c for c in notebook.cells if c.cell_type == "code" and "workbook.setup(seed=" in c.source]
    assert setup_cells, f"{path.name} has no Setup cell calling workbook.setup(seed=...)"
    setup = setup_cells[0].source
    assert "workbook.check_versions()" in setup.split("workbook.setup(seed=")[0], (
        f"{path.name}: the Setup cell should call workbook.check_versions() before workbook.setup(...)"
    )
    # The supported range is checked by its floors; an exact version assert stops every older classroom.
    assert "__version__" not in setup, f"{path.name}: the Setup cell should not assert exact versions"


@pytest.mark.notebook
@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes_without_errors_or_stderr(path):
    if path.name in STUDENTS_VERSIONS_AT_THE_OLDEST_END and not NEWEST_END:
        pytest.skip(f"{path.name} is executed once at each end: here, its students' version")
    # In a process of its own with a student's environment (no PYTEST_* or TF_* variables):
    # anything written to stderr there is a red box for the student, and 0 points in nbgrader.
    notebook, seconds = execute(path)
    if NEWEST_END:  # the oldest end runs beside the newest end and keeps nothing for the book
        build_book.keep_executed(notebook, path, build_book.TEST_RUN_EXECUTED, reduced=True, seconds=seconds)
    errors = error_outputs(notebook, EXPECTED_ERRORS.get(path.name))
    assert not errors, f"{path.name} raised: " + "; ".join(errors)
    for cell in notebook.cells:
        if "raises-exception" in cell.metadata.get("tags", []):  # the error, then the culprit under it
            shown = text_of(cell)
            assert EXPECTED_ERRORS[path.name][1] in shown, shown[-2000:]
            assert "The op that cut the gradient" in shown.split(EXPECTED_ERRORS[path.name][1], 1)[1], shown[-2000:]
            assert "Cast" in shown.split("The op that cut the gradient", 1)[1], shown[-2000:]
    stderr = stderr_outputs(notebook)
    assert not stderr, f"{path.name} wrote to stderr: " + "; ".join(stderr)
    print(f"{path.name}: {seconds:.1f} s")
