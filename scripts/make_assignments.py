"""Generate the student versions of the workbook's exercises with nbgrader.

The instructor's source is ``notebooks/`` itself: every notebook there with nbgrader
cells is an assignment named after the notebook (``05_assignment_quantized_autoencoder``).
nbgrader wants ``course/source/<assignment>/<notebook>.ipynb``, so that path is a symbolic
link to the notebook, made here: nothing is copied, and nothing is edited twice. Then
nbgrader's own ``generate_assignment`` writes ``course/release/<assignment>/``.

    python scripts/make_assignments.py            # what `make assignments` runs
    python scripts/make_assignments.py --check    # only check the nbgrader metadata
"""

import argparse
import ast
import os
import pathlib
import subprocess
import sys

import nbformat

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
COURSE = ROOT / "course"

SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")


def nbgrader_cells(notebook):
    """The cells carrying nbgrader metadata, as (index, cell, metadata) triples."""
    return [
        (i, cell, cell.metadata["nbgrader"])
        for i, cell in enumerate(notebook.cells)
        if "nbgrader" in cell.get("metadata", {})
    ]


def assignment_notebooks(notebooks=NOTEBOOKS):
    """Every numbered notebook with at least one nbgrader cell, in order."""
    return [
        path
        for path in sorted(pathlib.Path(notebooks).glob("[0-9][0-9]_*.ipynb"))
        if nbgrader_cells(nbformat.read(path, as_version=4))
    ]


def metadata_problems(path):
    """What in one notebook breaks nbgrader's conventions, one message per problem."""
    notebook = nbformat.read(path, as_version=4)
    problems, seen = [], {}
    for index, cell, meta in nbgrader_cells(notebook):
        where = f"{path.name} cell {index}"
        grade_id = meta.get("grade_id")
        if not grade_id:
            problems.append(f"{where}: nbgrader metadata without a grade_id")
        elif grade_id in seen:
            problems.append(f"{where}: grade_id {grade_id!r} is also used by cell {seen[grade_id]}")
        else:
            seen[grade_id] = index
        problems += [f"{where}: {problem}" for problem in _cell_problems(cell, meta)]
    for index, cell in enumerate(notebook.cells):
        if "nbgrader" not in cell.get("metadata", {}) and any(
            m in cell.source for m in SOLUTION_MARKERS + HIDDEN_MARKERS
        ):
            problems.append(f"{path.name} cell {index}: nbgrader markers in a cell without nbgrader metadata")
    return problems


def _cell_problems(cell, meta):
    """What in one nbgrader cell's metadata and markers disagrees."""
    problems = []
    if meta.get("schema_version") != 3:
        problems.append(f"schema_version is {meta.get('schema_version')!r}, nbgrader 0.9 writes 3")
    if meta.get("grade") and not isinstance(meta.get("points"), (int, float)):
        problems.append(f"a graded cell needs points, got {meta.get('points')!r}")
    if meta.get("grade") and not meta.get("solution") and not meta.get("locked"):
        problems.append("a graded test cell should be locked, so grading restores it")
    source = cell.source
    if meta.get("solution") and cell.cell_type == "code" and not all(m in source for m in SOLUTION_MARKERS):
        problems.append(f"a solution cell without {' / '.join(SOLUTION_MARKERS)}")
    if any(m in source for m in SOLUTION_MARKERS) and not meta.get("solution"):
        problems.append("solution markers in a cell that is not a solution cell")
    if any(m in source for m in HIDDEN_MARKERS) and not meta.get("grade"):
        problems.append("hidden-test markers in a cell that is not graded")
    return problems


def link_sources(course, notebooks):
    """Make ``course/source/<name>/<name>.ipynb`` a relative link to each notebook.

    An existing link to the same notebook is kept; anything else at that path is left
    alone and reported, since it may be an instructor's own file.
    """
    for path in notebooks:
        target = pathlib.Path(course) / "source" / path.stem / path.name
        wanted = os.path.relpath(path, target.parent)
        if target.is_symlink() and os.readlink(target) == wanted:
            continue
        if target.exists() or target.is_symlink():
            raise SystemExit(
                f"{target} exists and is not a link to {path}; move it away (it is left untouched) "
                f"and run again. The instructor's source is {path} itself."
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(wanted)


def with_venv_on_path(env=None):
    """``env`` (default: this process's) with this Python's scripts folder first on PATH.

    nbgrader runs the ``alembic`` command to open its gradebook, so it must be found
    even when the virtual environment is not activated (as under ``make``).
    """
    env = dict(os.environ if env is None else env)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def generate(course, names=("*",), env=None):
    """Run nbgrader's generate_assignment in ``course`` for each name ("*": every assignment there)."""
    env = with_venv_on_path(env)
    for name in names:
        command = [sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force"]
        result = subprocess.run(command, cwd=course, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"nbgrader generate_assignment {name} failed:\n{result.stdout}{result.stderr}")
        for path in sorted((pathlib.Path(course) / "release").glob(f"{name}/*.ipynb")):
            prepare_for_students(path)
        print(f"{pathlib.Path(course).name}/release/{name}/ generated")


#: The cell tag that lets Run All go on past a cell that raises (JupyterLab sends such a cell with
#: ``stop_on_error`` off, and nbclient and nbconvert do not stop at it either).
GOES_ON_AFTER_AN_ERROR = "raises-exception"


def exercise_cells(notebook):
    """The code cells a student answers in or is checked by: nbgrader solution or graded cells."""
    return [
        cell
        for _, cell, meta in nbgrader_cells(notebook)
        if cell.cell_type == "code" and (meta.get("solution") or meta.get("grade"))
    ]


def assigned_names(source):
    """The names a cell's top level assigns, defines or imports (IPython's magics allowed)."""
    from IPython.core.inputtransformer2 import TransformerManager

    names = set()
    for node in ast.parse(TransformerManager().transform_cell(source)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        else:
            targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
            names.update(n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def used_names(source):
    """The names a cell reads anywhere."""
    from IPython.core.inputtransformer2 import TransformerManager

    tree = ast.parse(TransformerManager().transform_cell(source))
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def cells_that_need_an_answer(source):
    """Indices of the code cells of ``source`` (an instructor's notebook), exercise cells aside,
    that read a name only an answer cell assigns."""
    exercises = exercise_cells(source)
    answered, given = set(), set()
    for cell in source.cells:
        if cell.cell_type != "code":
            continue
        is_answer = any(cell is e for e in exercises) and cell.metadata["nbgrader"].get("solution")
        (answered if is_answer else given).update(assigned_names(cell.source))
    only_answered = answered - given
    return [
        index
        for index, cell in enumerate(source.cells)
        if cell.cell_type == "code"
        and not any(cell is e for e in exercises)
        and used_names(cell.source) & only_answered
    ]


def prepare_for_students(path):
    """Finish a student version nbgrader generated: answer cells unfolded, and Run All never stopped by one.

    In ``notebooks/`` a worked solution is collapsed until the reader opens it; nbgrader
    copies that folding into the release, where the cell is the student's to type into.
    An unanswered exercise raises (``raise NotImplementedError()``, then its check fails), and
    so does a later cell that reads what only the answer defines (a plot of it, a model it
    trains; found in the instructor's version in ``course/source/``): each of those cells is
    tagged ``raises-exception``, so that the error shows where the exercise is and Run All still
    runs the rest of the chapter.
    """
    path = pathlib.Path(path)
    notebook = nbformat.read(path, as_version=4)
    source = nbformat.read(path.parents[2] / "source" / path.parent.name / path.name, as_version=4)
    changed = False
    for cell in notebook.cells:
        folding = cell.get("metadata", {}).get("jupyter", {})
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution") and folding:
            for key in ("source_hidden", "outputs_hidden"):
                changed |= folding.pop(key, None) is not None
            if not folding:
                del cell.metadata["jupyter"]
    needing = [notebook.cells[index] for index in cells_that_need_an_answer(source)]
    for cell in exercise_cells(notebook) + needing:
        tags = cell.metadata.setdefault("tags", [])
        if GOES_ON_AFTER_AN_ERROR not in tags:
            tags.append(GOES_ON_AFTER_AN_ERROR)
            changed = True
    if changed:
        nbformat.write(notebook, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check the nbgrader metadata")
    args = parser.parse_args(argv)
    notebooks = assignment_notebooks()
    problems = [problem for path in notebooks for problem in metadata_problems(path)]
    if problems:
        raise SystemExit("nbgrader metadata problems:\n  " + "\n  ".join(problems))
    print(f"{len(notebooks)} notebooks with exercises: {', '.join(p.stem for p in notebooks)}")
    if args.check:
        return
    link_sources(COURSE, notebooks)
    generate(COURSE, [path.stem for path in notebooks])


if __name__ == "__main__":
    main()
