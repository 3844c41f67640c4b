"""Every notebook runs top to bottom, and every notebook is committed clean."""

import importlib.util
import re

import nbformat
import pytest
from notebook_runner import (
    EXPECTED_ERRORS,
    NEWEST_END,
    NOTEBOOKS,
    error_outputs,
    errors_that_stop_run_all,
    execute,
    goes_on_after_an_error,
    parameters_cell_index,
    stderr_outputs,
    text_of,
)

ALL_NOTEBOOKS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
RELEASE = NOTEBOOKS.parent / "course" / "release"


def students_version(path):
    """The students' version of a notebook (course/release/), or None if it has no exercise."""
    released = RELEASE / path.stem / path.name
    return released if released.exists() else None


def version_executed_here(path):
    """What this end executes of ``path``: each notebook is executed once at each end.

    The newest end executes the instructor's version (for the book); the oldest the students'
    version where there is one, with every exercise unanswered, as a student's Run All meets it.
    """
    return path if NEWEST_END else students_version(path) or path


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
    # In a process of its own with a student's environment (no PYTEST_* or TF_* variables):
    # anything written to stderr there is a red box for the student, and 0 points in nbgrader.
    executed = version_executed_here(path)
    notebook, seconds = execute(executed)
    if NEWEST_END:  # the oldest end runs beside the newest end and keeps nothing for the book
        build_book.keep_executed(notebook, path, build_book.TEST_RUN_EXECUTED, reduced=True, seconds=seconds)
    errors = error_outputs(notebook, EXPECTED_ERRORS.get(path.name))
    if executed != path:
        errors = errors_that_stop_run_all(notebook, errors)
        # each check of an unanswered exercise says so (an error, or what is missing), and Run All went on
        silent = [n for n, c in enumerate(notebook.cells) if is_exercise(c) and grade(c) and not text_of(c).strip()]
        assert not silent, f"{executed.name}: the checks in cells {silent} of unanswered exercises said nothing"
    assert not errors, f"{executed.name} raised: " + "; ".join(errors)
    shown_on_purpose = {cell.source for cell in nbformat.read(path, as_version=4).cells if goes_on_after_an_error(cell)}
    for cell in notebook.cells:
        if goes_on_after_an_error(cell) and cell.source in shown_on_purpose:
            shown = text_of(cell)  # the error, then the culprit under it
            assert EXPECTED_ERRORS[path.name][1] in shown, shown[-2000:]
            assert "The op that cut the gradient" in shown.split(EXPECTED_ERRORS[path.name][1], 1)[1], shown[-2000:]
            assert "Cast" in shown.split("The op that cut the gradient", 1)[1], shown[-2000:]
    stderr = stderr_outputs(notebook)
    assert not stderr, f"{executed.name} wrote to stderr: " + "; ".join(stderr)
    print(f"{executed.relative_to(NOTEBOOKS.parent)}: {seconds:.1f} s")


def grade(cell):
    """Whether nbgrader grades the cell."""
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("grade"))


def is_exercise(cell):
    """An answer cell or a graded check cell (nbgrader's metadata)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("solution") or meta.get("grade"))


#: "`make bench` measured 42 s and 949 MiB": what a notebook's introduction quotes of its budget.
QUOTED_BUDGET = re.compile(r"`make bench` measured (\d+) s and (\d+) MiB")


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: p.name)
def test_a_quoted_time_and_memory_are_those_make_bench_measured(path):
    quoted = QUOTED_BUDGET.findall(nbformat.read(path, as_version=4).cells[0].source)
    if not quoted:
        pytest.skip(f"{path.name} quotes no budget")
    results = (NOTEBOOKS.parent / "benchmarks" / "results.md").read_text()
    row = re.search(rf"^\| {re.escape(path.name)} \| (\d+) s \| (\d+) MiB \|", results, re.M)
    assert row, f"benchmarks/results.md has no budget row for {path.name}"
    assert quoted == [row.groups()], f"{path.name} quotes {quoted}; benchmarks/results.md says {row.groups()}"
