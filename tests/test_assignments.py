"""Course assignments: nbgrader's metadata, the student versions, and the self-checks.

Grading them for real, through a hub's round trip, is tests/test_grading_round_trip.py. nbgrader runs
in a temporary course directory with a temporary home, so neither the repository nor the
user's Jupyter, IPython or Keras folders are written to.
"""

import ast
import importlib.util
import re
import shutil

import nbformat
import numpy as np
import pytest
from grading_helpers import ASSIGNMENT_POINTS
from notebook_runner import NOTEBOOKS, clean_environment, run_nbgrader

ROOT = NOTEBOOKS.parent
COURSE = ROOT / "course"
RELEASE = COURSE / "release"
ASSIGNMENT = "05_assignment_quantized_autoencoder"

_spec = importlib.util.spec_from_file_location("make_assignments", ROOT / "scripts" / "make_assignments.py")
make_assignments = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_assignments)

SOURCES = make_assignments.assignment_notebooks()
RELEASED = sorted(RELEASE.glob("*/*.ipynb"))


def nbgrader_meta(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


def marked_blocks(source, begin, end):
    """The text between each pair of marker lines (markers excluded)."""
    return re.findall(rf"^[ \t]*{re.escape(begin)}[^\n]*\n(.*?)^[ \t]*{re.escape(end)}", source, re.M | re.S)


# --- the sources ----------------------------------------------------------------------


def test_the_exercise_notebooks_include_the_assignment():
    names = [path.stem for path in SOURCES]
    assert ASSIGNMENT in names and "01_forward_and_backward" in names, names


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_source_follows_nbgrader_conventions(path):
    problems = make_assignments.metadata_problems(path)
    assert not problems, "\n".join(problems)


def test_metadata_check_catches_broken_cells(tmp_path):
    cells = [
        nbformat.v4.new_code_cell(
            "### BEGIN SOLUTION\nx = 1\n### END SOLUTION",
            metadata={
                "nbgrader": {"grade_id": "same", "solution": True, "grade": False, "locked": False, "schema_version": 3}
            },
        ),
        nbformat.v4.new_code_cell(
            "assert x == 1",
            metadata={
                "nbgrader": {"grade_id": "same", "solution": False, "grade": True, "locked": True, "schema_version": 3}
            },
        ),
        nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS\nassert x\n### END HIDDEN TESTS"),
    ]
    path = tmp_path / "99_broken.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    problems = "\n".join(make_assignments.metadata_problems(path))
    assert "'same' is also used by cell 0" in problems
    assert "needs points" in problems
    assert "cell 2: nbgrader markers in a cell without nbgrader metadata" in problems


def test_graded_cells_carry_the_points_the_title_cell_promises():
    notebook = nbformat.read(NOTEBOOKS / f"{ASSIGNMENT}.ipynb", as_version=4)
    graded = [
        (nbgrader_meta(c)["grade_id"], nbgrader_meta(c)["points"])
        for c in notebook.cells
        if nbgrader_meta(c).get("grade")
    ]
    assert dict(graded) == ASSIGNMENT_POINTS
    # the title cell's table, one row per graded cell in order: | (a) | what | points |
    title = notebook.cells[0].source
    promised = [int(points) for points in re.findall(r"^\| \([abc]\) \|[^\n]*\| (\d+) \|$", title, re.M)]
    assert promised == [points for _, points in graded]
    assert f"({sum(promised)} points;" in title


# --- the committed student versions -----------------------------------------------------


def test_every_exercise_notebook_is_released():
    assert [p.parent.name for p in RELEASED] == [p.stem for p in SOURCES], (
        "course/release/ is out of date: run `make assignments`"
    )


@pytest.mark.parametrize("path", RELEASED, ids=lambda p: p.name)
def test_release_holds_no_solution_and_no_hidden_test(path):
    released = nbformat.read(path, as_version=4)
    source = nbformat.read(NOTEBOOKS / path.name, as_version=4)
    text = "\n".join(cell.source for cell in released.cells)
    for marker in make_assignments.SOLUTION_MARKERS + make_assignments.HIDDEN_MARKERS:
        assert marker not in text, f"{path.name} contains {marker!r}"
    by_id = {nbgrader_meta(c).get("grade_id"): c for c in released.cells if nbgrader_meta(c)}
    for cell in source.cells:
        meta = nbgrader_meta(cell)
        blocks = marked_blocks(cell.source, *make_assignments.SOLUTION_MARKERS) + marked_blocks(
            cell.source, *make_assignments.HIDDEN_MARKERS
        )
        for block in blocks:
            assert block.strip() not in text, f"{path.name}: text of {meta.get('grade_id')} leaked"
            # every line of code in it (brackets alone and comments say nothing of the answer)
            lines = [
                line.strip()
                for line in block.splitlines()
                if re.search(r"\w\w", line) and not line.strip().startswith("#")
            ]
            leaked = [line for line in lines if line in by_id[meta["grade_id"]].source]
            assert not leaked, f"{path.name}, cell {meta['grade_id']}: {leaked}"


@pytest.mark.parametrize("path", RELEASED, ids=lambda p: p.name)
def test_release_answer_cells_raise_not_implemented(path):
    released = nbformat.read(path, as_version=4)
    answers = [c for c in released.cells if nbgrader_meta(c).get("solution")]
    assert answers, f"{path.name} has no answer cells"
    for cell in answers:
        if cell.cell_type == "markdown":  # a written answer: the student starts from a blank
            assert cell.source.strip() == "YOUR ANSWER HERE", f"{path.name}: {nbgrader_meta(cell)['grade_id']}"
            continue
        namespace = {}
        with pytest.raises(NotImplementedError):
            exec(compile(cell.source, f"{path.name}:{nbgrader_meta(cell)['grade_id']}", "exec"), namespace)
            # a cell that only defines functions raises when they are called
            for name, value in list(namespace.items()):
                if callable(value) and not name.startswith("__"):
                    value(*([None] * value.__code__.co_argcount))


@pytest.mark.parametrize("path", RELEASED, ids=lambda p: p.name)
def test_worked_solutions_are_folded_for_readers_and_answer_cells_open_for_students(path):
    source = nbformat.read(NOTEBOOKS / path.name, as_version=4)
    released = nbformat.read(path, as_version=4)
    answers = [c for c in source.cells if nbgrader_meta(c).get("solution") and c.cell_type == "code"]
    folded = [nbgrader_meta(c)["grade_id"] for c in answers if c.metadata.get("jupyter", {}).get("source_hidden")]
    if path.stem in ("01_forward_and_backward", "02_surrogate_zoo"):  # their worked solutions are code
        assert folded == [nbgrader_meta(c)["grade_id"] for c in answers]
    still_folded = [
        nbgrader_meta(c).get("grade_id")
        for c in released.cells
        if nbgrader_meta(c).get("solution") and c.metadata.get("jupyter")
    ]
    assert not still_folded, f"{path.name}: answer cells {still_folded} arrive folded for the student"


@pytest.mark.parametrize("path", RELEASED, ids=lambda p: p.name)
def test_release_is_committed_locked_and_without_outputs(path):
    released = nbformat.read(path, as_version=4)
    for cell in released.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None
        if meta.get("locked"):
            assert cell.metadata.get("editable") is False and cell.metadata.get("deletable") is False


# --- nbgrader for real -------------------------------------------------------------------


@pytest.fixture(scope="module")
def nbgrader_env(tmp_path_factory):
    """A hub's environment for nbgrader and its kernels: a temporary home, no PYTEST_* or TF_* variables."""
    return clean_environment(tmp_path_factory.mktemp("home"))


def new_course(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(COURSE / "nbgrader_config.py", course)
    return course


@pytest.mark.hub
@pytest.mark.timeout(300)
def test_committed_release_is_in_sync_with_the_source(tmp_path, nbgrader_env):
    course = new_course(tmp_path)
    make_assignments.link_sources(course, SOURCES)
    run_nbgrader(course, nbgrader_env, "generate_assignment", "*", "--force", "--no-db")
    generated = sorted((course / "release").glob("*/*.ipynb"))
    for path in generated:
        make_assignments.prepare_for_students(path)
    assert [p.relative_to(course / "release") for p in generated] == [p.relative_to(RELEASE) for p in RELEASED]
    for fresh_path, committed_path in zip(generated, RELEASED, strict=True):
        fresh = nbformat.read(fresh_path, as_version=4)
        committed = nbformat.read(committed_path, as_version=4)
        assert fresh.metadata == committed.metadata
        stale = [
            i
            for i, (a, b) in enumerate(zip(fresh.cells, committed.cells, strict=False))
            if (a.cell_type, a.source, a.metadata) != (b.cell_type, b.source, b.metadata)
        ]
        assert len(fresh.cells) == len(committed.cells) and not stale, (
            f"{committed_path.name}: cells {stale or 'count'} differ from what nbgrader makes of "
            f"notebooks/{committed_path.name}; run `make assignments`"
        )


# --- the self-checks students run (workbook/lab/assignment_checks.py) ---------------------------
# Expected values come from the formulas written out here with NumPy or tf.custom_gradient,
# or from Keras's own loss; none is taken from the checks themselves.


def _reference_quantizer():
    import tensorflow as tf

    @tf.custom_gradient
    def quantize(x):
        y = tf.round(3 * tf.clip_by_value(x, 0, 1)) / 3

        def grad(upstream):
            return upstream * tf.cast((x >= 0) & (x <= 1), x.dtype)

        return y, grad

    return quantize


def _worst_x(printed):
    return float(re.search(r"Worst at x = (\S+?):", printed).group(1))


def test_check_quantizer_accepts_a_correct_quantizer(capsys):
    from workbook.lab.assignment_checks import check_quantizer

    assert check_quantizer(_reference_quantizer()) is True
    assert capsys.readouterr().out.count("✓") == 2


def test_check_quantizer_names_an_input_where_the_forward_is_wrong(capsys):
    import keras

    from workbook.lab.assignment_checks import check_quantizer

    floor_instead = lambda x: keras.ops.floor(3 * keras.ops.clip(x, 0, 1)) / 3  # noqa: E731
    assert check_quantizer(floor_instead) is False
    x = _worst_x(capsys.readouterr().out)
    assert np.floor(3 * np.clip(x, 0, 1)) != np.round(3 * np.clip(x, 0, 1))  # a real counterexample


def test_check_quantizer_explains_a_missing_or_unclipped_gradient(capsys):
    import keras

    import workbook
    from workbook.lab.assignment_checks import check_quantizer

    forward = lambda x: keras.ops.round(3 * keras.ops.clip(x, 0, 1)) / 3  # noqa: E731
    assert check_quantizer(forward) is False
    assert "no gradient at all" in capsys.readouterr().out
    assert check_quantizer(forward, gradient=False) is True  # the forward alone is right
    capsys.readouterr()
    assert check_quantizer(workbook.straight_through(forward)) is False
    printed = capsys.readouterr().out
    assert "should be 0 there" in printed and not 0 <= _worst_x(printed) <= 1


def test_checks_turn_an_unfinished_answer_into_a_message(capsys):
    from workbook.lab.assignment_checks import check_gradient_fix, check_quantizer

    def unfinished(x):
        raise NotImplementedError()

    assert check_quantizer(unfinished) is False
    assert check_gradient_fix(unfinished, _reference_quantizer(), derivative=lambda x: x) is False
    assert capsys.readouterr().out.count("not written yet") == 2


def _colleague(x):
    import keras

    import workbook

    levels = workbook.SURROGATES["round_ste"](3.0 * keras.ops.clip(x, 0.0, 1.0))
    codes = keras.ops.cast(levels, "uint8")
    return keras.ops.cast(codes, x.dtype) / 3.0


def _inside(x):
    import keras

    return keras.ops.cast((x > 0) & (x < 1), x.dtype)


def test_check_gradient_fix_points_at_the_cast_and_accepts_the_fix(capsys):
    from workbook.lab.assignment_checks import check_gradient_fix

    assert check_gradient_fix(_colleague, _colleague, derivative=_inside) is False
    printed = capsys.readouterr().out
    assert "find_gradient_breaks: Cast" in printed and 'codes = keras.ops.cast(levels, "uint8")' in printed
    assert check_gradient_fix(_reference_quantizer(), _colleague, derivative=_inside) is True


def test_check_gradient_fix_rejects_a_fix_that_changes_the_forward(capsys):
    from workbook.lab.assignment_checks import check_gradient_fix

    reference = _reference_quantizer()
    assert check_gradient_fix(lambda x: reference(x) + 0.01, _colleague, derivative=_inside) is False
    assert "must stay the same" in capsys.readouterr().out


@pytest.fixture(scope="module")
def digits():
    import workbook

    (_, _), (x_test, _) = workbook.load_mnist(n_train=100, n_test=64, source="bundled")
    return x_test


def test_check_reconstruction_passes_and_reports_the_test_mse(digits, capsys):
    import workbook
    from workbook.lab.assignment_checks import check_reconstruction

    model = workbook.autoencoder(bottleneck=_reference_quantizer())
    keras_mse = model.evaluate(digits, digits, verbose=0)  # Keras's own mean squared error
    # an untrained model scores about 0.23: a target above that passes, one below fails
    assert check_reconstruction(model, digits, target_mse=0.5, seconds=1.0, time_budget_seconds=10) is True
    printed = capsys.readouterr().out
    assert float(re.search(r"MSE (\S+) <=", printed).group(1)) == pytest.approx(keras_mse, rel=1e-3)
    assert check_reconstruction(model, digits, target_mse=0.01, seconds=1.0, time_budget_seconds=10) is False
    assert "above the target" in capsys.readouterr().out
    assert check_reconstruction(model, digits, target_mse=0.5, seconds=11.0, time_budget_seconds=10) is False
    assert "over the budget" in capsys.readouterr().out


def test_check_reconstruction_rejects_a_float_code_and_a_dead_encoder(digits, capsys):
    import keras

    import workbook
    from workbook.lab.assignment_checks import check_reconstruction

    float_code = workbook.autoencoder(bottleneck=None)
    assert check_reconstruction(float_code, digits, target_mse=0.5, seconds=1.0, time_budget_seconds=10) is False
    assert "a 2-bit code takes only the values" in capsys.readouterr().out
    no_gradient = workbook.autoencoder(bottleneck=lambda x: keras.ops.round(3 * keras.ops.clip(x, 0, 1)) / 3)
    assert check_reconstruction(no_gradient, digits, target_mse=0.5, seconds=1.0, time_budget_seconds=10) is False
    assert "no gradient reaches encoder" in capsys.readouterr().out


def test_check_reconstruction_rejects_bad_arguments_by_name(digits):
    import workbook
    from workbook.lab.assignment_checks import check_reconstruction

    model = workbook.autoencoder()
    with pytest.raises(ValueError, match="target_mse=-1"):
        check_reconstruction(model, digits, target_mse=-1, seconds=1.0, time_budget_seconds=10)
    with pytest.raises(ValueError, match=r"x_test=<ndarray of shape \(64, 784\)"):
        check_reconstruction(model, digits.reshape(64, 784), target_mse=0.5, seconds=1.0, time_budget_seconds=10)


def test_check_reconstruction_rejects_another_four_level_map(digits, capsys):
    import keras

    import workbook
    from workbook.lab.assignment_checks import check_reconstruction

    # Four levels, a surrogate gradient, but not the quantizer part (c) is graded with.
    sigmoid_levels = workbook.straight_through(lambda x: keras.ops.round(3 * keras.ops.sigmoid(x)) / 3)
    model = workbook.autoencoder(bottleneck=sigmoid_levels)
    assert check_reconstruction(model, digits, target_mse=0.5, seconds=1.0, time_budget_seconds=10) is False
    printed = capsys.readouterr().out
    match = re.search(r"maps (\S+) to (\S+), not to round", printed)
    assert match, printed
    x, y = float(match.group(1)), float(match.group(2))
    assert abs(np.round(3 / (1 + np.exp(-x))) / 3 - y) < 1e-3  # what the sigmoid map gives there...
    assert abs(np.round(3 * np.clip(x, 0, 1)) / 3 - y) > 0.3  # ...is a level away from the graded one


# --- What the cells need is imported where it is needed ----------------------------------

MODULE_ALIASES = {"np", "tf", "keras", "ops", "plt", "workbook", "math"}


def _code_of(cell):
    """A code cell's source as Python, IPython magics and shell lines left out."""
    return "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))


def _imported(tree):
    return {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }


def _modules_used(tree):
    return {
        node.value.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in MODULE_ALIASES
    }


HIDDEN_TESTS = re.compile(r"^### BEGIN HIDDEN TESTS$.*?^### END HIDDEN TESTS$\n?", re.MULTILINE | re.DOTALL)


def _names_loaded(tree):
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def locked_check_problems(notebook):
    """{grade_id: names} a graded check uses without importing them where the student's version keeps them.

    The student's version is the cell with its hidden tests cut out (as nbgrader's
    generate_assignment does): a module alias it uses must be imported there, and so must
    any name the cell imports only inside its hidden tests.
    """
    problems = {}
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("locked") and meta.get("grade"):
            whole = ast.parse(_code_of(cell))
            kept = ast.parse(HIDDEN_TESTS.sub("", _code_of(cell)))
            only_hidden = _imported(whole) - _imported(kept)
            missing = (_modules_used(kept) | (_names_loaded(kept) & only_hidden)) - _imported(kept)
            if missing:
                problems[meta["grade_id"]] = sorted(missing)
    return problems


def test_every_check_of_the_graded_assignment_imports_the_modules_it_uses():
    # A student may rebind `keras` or `np` in an answer cell; a graded check of 05 (the
    # assignment that counts, and guards against tampering) that relied on the notebook's
    # earlier import would then check against the student's object. And what the check
    # calls must be imported outside its hidden tests, or the student's version has no
    # check_quantizer to call (import sorting once moved such an import into the hidden block).
    path = NOTEBOOKS / "05_assignment_quantized_autoencoder.ipynb"
    problems = locked_check_problems(nbformat.read(path, as_version=4))
    assert not problems, f"{path.name}: graded cells use names they do not import: {problems}"


def test_the_import_check_catches_an_import_moved_into_the_hidden_tests_and_a_missing_module():
    notebook = nbformat.read(NOTEBOOKS / "05_assignment_quantized_autoencoder.ipynb", as_version=4)
    cells = {cell.metadata.get("nbgrader", {}).get("grade_id"): cell for cell in notebook.cells}
    # what ruff's import sorting once did to this cell: its one import joined the hidden block
    cells["a_forward"].source = cells["a_forward"].source.replace(
        "from workbook.lab.assignment_checks import check_quantizer\n\n### BEGIN HIDDEN TESTS\n",
        "### BEGIN HIDDEN TESTS\nfrom workbook.lab.assignment_checks import check_quantizer\n",
    )
    cells["b_fix"].source = cells["b_fix"].source.replace("import keras\n", "")
    assert locked_check_problems(notebook) == {"a_forward": ["check_quantizer"], "b_fix": ["keras"]}


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.name)
def test_a_module_the_text_tells_students_to_use_after_the_setup_is_imported_by_then(path):
    # e.g. 05's part (a) suggests `tf.custom_gradient`: the Setup cell must have imported tf.
    # (The title cells before the Setup cell describe the lesson; nothing runs there.)
    notebook = nbformat.read(path, as_version=4)
    imported, missing, after_setup = set(), [], False
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            imported |= _imported(ast.parse(_code_of(cell)))
            after_setup = after_setup or "workbook.setup(" in cell.source
        elif after_setup:
            for code in re.findall(r"`([^`]+)`", cell.source):
                aliases = set(re.findall(r"\b(\w+)\.\w", code)) & MODULE_ALIASES
                missing += [f"cell {index}: `{code}`" for _ in sorted(aliases - imported)]
    assert after_setup, f"{path.name} has no Setup cell"
    assert not missing, f"{path.name}: the text names modules not imported by then: {missing}"
