"""`make book`: every numbered notebook (00, 01, ...), executed, as a static HTML site (Sphinx with MyST-NB).

Three steps, each its own function:

1. :func:`execute_all` runs every chapter top to bottom in a fresh kernel, with the
   test suite's runner (``scripts/notebook_runner.py``, here in a process of its own)
   in a student's clean environment, two at a time. Classroom defaults by default;
   ``--reduced`` uses the test suite's turned-down parameters (CI). Each executed
   notebook is kept under ``build/book/executed/`` with a key made of its source,
   the parameters and the workbook's code, so a rebuild executes only what changed;
   ``--reuse DIR`` also takes notebooks the test run executed (``build/executed/``).
2. :func:`prepare` writes the pages: the executed notebooks with worked solutions
   folded (as in JupyterLab), the explorer widget as its picture, alt text on every
   figure, links into the repository made absolute, and the landing page.
3. Sphinx renders ``build/book/source`` into ``build/book/html`` with execution off (each
   figure a link to itself at full size: ``book/conf.py``).

The graded assignment is shown as students receive it (``course/release/``), and
every Colab, Binder and download link points at the students' version.
"""

import argparse
import concurrent.futures
import copy
import hashlib
import itertools
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

import nbformat

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # also when this file is loaded by benchmarks/book_build.py
from notebook_runner import (  # noqa: E402  (beside this script)
    EXPECTED_ERRORS,
    REDUCED_PARAMETERS,
    clean_environment,
    error_outputs,
    reduced_notebook,
)

NOTEBOOKS, RELEASE, BOOK = ROOT / "notebooks", ROOT / "course" / "release", ROOT / "book"
BUILD = ROOT / "build" / "book"
#: Where the test run keeps the notebooks it executed (tests/test_notebooks.py), for --reuse.
TEST_RUN_EXECUTED = ROOT / "build" / "executed"

REPOSITORY, BRANCH = "gradient-workbook/gradient-workbook", "main"
GITHUB = f"https://github.com/{REPOSITORY}/blob/{BRANCH}/"
COLAB = f"https://colab.research.google.com/github/{REPOSITORY}/blob/{BRANCH}/"
BINDER = f"https://mybinder.org/v2/gh/{REPOSITORY}/{BRANCH}?urlpath=lab/tree/"

#: Shown under the explorer's picture in place of its sliders.
INTERACTIVE_NOTE = (
    "A picture of the interactive explorer as it first appears. In JupyterLab (Binder or your own "
    "computer) or on Colab, its menu and sliders redraw the plot for every surrogate and parameter."
)
STUDENT_VERSION_NOTE = (
    "This page is the assignment as students receive it: nbgrader's student version, with empty "
    "answer cells and without the hidden tests. The cells that need an answer (and the checks and "
    "figures that use one) therefore show no output here; open the notebook to work on it."
)


# -- which notebooks, in which version --------------------------------------------


def chapters():
    """Every chapter, in order: dicts with name, title, the version shown, and the students' version."""
    found = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        released = RELEASE / path.stem / path.name
        graded = "_assignment_" in path.stem
        if graded and not released.exists():
            raise FileNotFoundError(f"{released.relative_to(ROOT)} is missing: run `make assignments` first")
        notebook = nbformat.read(path, as_version=4)
        found.append(
            {
                "name": path.stem,
                "title": notebook.cells[0].source.splitlines()[0].lstrip("# ").strip(),
                "shown": released if graded else path,  # the graded assignment: its student version
                "student": released if released.exists() else path,  # Colab, Binder, download
                "graded": graded,
                "time": stated_time(notebook.cells[0].source),
            }
        )
    return found


def stated_time(introduction):
    """The notebook's own estimate of the time it takes ("About 45 minutes"), or None."""
    match = re.search(r"\*\*Time[.:]?\*\*:?\s*(about [^.;:,(]+)", introduction, re.IGNORECASE)
    return " ".join(match.group(1).split()).capitalize() if match else None


# -- 1. executing, with a cache ----------------------------------------------------


def workbook_fingerprint():
    """A hash of everything besides the notebook that decides what it prints."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "workbook").rglob("*")):
        if path.is_file() and path.suffix in {".py", ".npz"}:
            digest.update(path.relative_to(ROOT).as_posix().encode())
            digest.update(path.read_bytes())
    digest.update((ROOT / "scripts" / "notebook_runner.py").read_bytes())
    return digest.hexdigest()


def execution_key(source, reduced, fingerprint=None):
    """What an executed copy of `source` must have been made from to be reused."""
    notebook = nbformat.read(source, as_version=4)
    cells = [[cell.cell_type, cell.source, cell.metadata.get("tags", [])] for cell in notebook.cells]
    settings = {
        "reduced": REDUCED_PARAMETERS if reduced else None,
        "workbook": fingerprint or workbook_fingerprint(),
        "environment": sys.prefix,  # the oldest end's test run executes with other versions
    }
    return hashlib.sha256(json.dumps([cells, settings], sort_keys=True, default=str).encode()).hexdigest()


def keep_executed(notebook, source, folder, reduced, seconds=None):
    """Write an executed `notebook` of `source` into `folder`, marked with its key and run time (see --reuse)."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    notebook = copy.deepcopy(notebook)
    notebook.metadata["workbook_book"] = {"key": execution_key(source, reduced), "seconds": seconds}
    target = folder / pathlib.Path(source).name
    nbformat.write(notebook, target)
    return target


def cached(path, key):
    """The executed notebook at `path` if it was made with `key`, else None."""
    if not path.exists():
        return None
    notebook = nbformat.read(path, as_version=4)
    return notebook if notebook.metadata.get("workbook_book", {}).get("key") == key else None


#: What jupyter_client says when a kernel did not start in time (a loaded machine): the run is tried once more.
KERNEL_START_TIMEOUT = "Kernel didn't respond"


def run_notebook(source, reduced, timeout_per_cell=900, attempts=2):
    """Execute `source` in a fresh kernel, from a clean process (scripts/notebook_runner.py); (notebook, seconds).

    A kernel that does not start in time is started once more; any other failure stops the build.
    """
    for attempt in range(1, attempts + 1):
        try:
            return _run_notebook_once(source, reduced, timeout_per_cell)
        except RuntimeError as error:
            if KERNEL_START_TIMEOUT not in str(error) or attempt == attempts:
                raise
            print(f"  {source.name}: the kernel did not start in time; starting it again", flush=True)


def _run_notebook_once(source, reduced, timeout_per_cell):
    with tempfile.TemporaryDirectory(prefix="book-run-") as folder:
        given, executed, home = (pathlib.Path(folder, name) for name in ("given.ipynb", "executed.ipynb", "home"))
        home.mkdir()
        nbformat.write(reduced_notebook(source) if reduced else nbformat.read(source, as_version=4), given)
        command = [sys.executable, str(ROOT / "scripts" / "notebook_runner.py"), str(given), str(executed)]
        command += ["--timeout", str(timeout_per_cell), "--cwd", str(pathlib.Path(source).parent)]
        started = time.perf_counter()
        result = subprocess.run(command, env=clean_environment(home), capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if result.returncode != 0 or not executed.exists():
            raise RuntimeError(f"executing {source.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return nbformat.read(executed, as_version=4), seconds


def execute_all(chapter_list, reduced=False, jobs=2, reuse=None, out=BUILD):
    """({name: (executed notebook, seconds its run took)}, [names executed now rather than taken from a cache])."""
    folder = pathlib.Path(out) / "executed" / ("reduced" if reduced else "classroom")
    fingerprint = workbook_fingerprint()
    done, missing, ran = {}, [], []
    for chapter in chapter_list:
        key = execution_key(chapter["shown"], reduced, fingerprint)
        places = [folder] + ([pathlib.Path(reuse)] if reuse else [])
        found = next((nb for place in places if (nb := cached(place / chapter["shown"].name, key)) is not None), None)
        if found is not None:
            folder.mkdir(parents=True, exist_ok=True)
            nbformat.write(found, folder / chapter["shown"].name)  # taken from --reuse: kept with the rest
            done[chapter["name"]] = (found, found.metadata["workbook_book"].get("seconds"))
        else:
            missing.append(chapter)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(run_notebook, chapter["shown"], reduced): chapter for chapter in missing}
        for future in concurrent.futures.as_completed(futures):
            chapter = futures[future]
            notebook, seconds = future.result()
            keep_executed(notebook, chapter["shown"], folder, reduced, seconds)
            print(f"  executed {chapter['shown'].name} in {seconds:.0f} s", flush=True)
            done[chapter["name"]] = (notebook, seconds)
            ran.append(chapter["name"])
    return done, ran


# -- 2. the pages --------------------------------------------------------------------


def fold_solutions(notebook):
    """Cells folded in JupyterLab (``jupyter.source_hidden``) stay folded on the page (MyST-NB's tags)."""
    for cell in notebook.cells:
        folded = cell.metadata.get("jupyter", {})
        tags = cell.metadata.setdefault("tags", [])
        if folded.get("source_hidden") and "hide-input" not in tags:
            tags.append("hide-input")
        if folded.get("outputs_hidden") and "hide-output" not in tags:
            tags.append("hide-output")


def problems(notebook, name):
    """Error and stderr outputs, as 'cell N: text' (a page must show neither).

    The one error a notebook raises on purpose (notebook 03's, in a cell tagged
    ``raises-exception``, the test suite's ``EXPECTED_ERRORS``) is part of its lesson.
    """
    found = error_outputs(notebook, EXPECTED_ERRORS.get(name))
    for number, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "stream" and output.name == "stderr":
                found.append(f"cell {number}: stderr: {output.text.strip()[:300]}")
    return found


def as_student_receives_it(notebook):
    """The student version executed, without the errors of its unanswered cells (the page says so).

    Those cells carry the tag that lets Run All go on past their errors (scripts/make_assignments.py);
    with the errors gone from the page, the tag goes too.
    """
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        kept = [output for output in cell.outputs if output.output_type != "error"]
        meta = cell.metadata.get("nbgrader", {})
        tags = cell.metadata.get("tags", [])
        if (len(kept) < len(cell.outputs) or meta.get("solution") or meta.get("grade")) and "raises-exception" in tags:
            tags.remove("raises-exception")
        cell.outputs = kept


def widget_pictures(notebook):
    """Replace each widget view whose state holds a PNG (the explorer) by that picture and a note."""
    state = notebook.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    for cell in notebook.cells:
        outputs = []
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get("application/vnd.jupyter.widget-view+json")
            png = view and widget_png(state, view["model_id"])
            if not png:
                outputs.append(output)
                continue
            outputs.append(nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "explorer"}))
            shown = widget_text(state, view["model_id"])
            if shown:
                outputs.append(nbformat.v4.new_output("display_data", data={"text/html": shown, "text/plain": shown}))
            outputs.append(
                nbformat.v4.new_output(
                    "display_data", data={"text/markdown": f"*{INTERACTIVE_NOTE}*", "text/plain": INTERACTIVE_NOTE}
                )
            )
        if cell.cell_type == "code":
            cell.outputs = outputs
    # The embedded state would load the widget manager from a CDN, for sliders that need a kernel.
    notebook.metadata.pop("widgets", None)


def widget_models(state, model_id):
    """Every widget model in the tree under `model_id`, depth first."""
    model = state.get(model_id)
    if model is None:
        return []
    children = model.get("state", {}).get("children", [])
    return [model] + [m for child in children for m in widget_models(state, child.removeprefix("IPY_MODEL_"))]


def widget_png(state, model_id):
    """Base64 PNG of the first Image widget in the tree under `model_id`, or None."""
    for model in widget_models(state, model_id):
        if model.get("model_name") == "ImageModel":
            return next((b["data"] for b in model.get("buffers", []) if b.get("path") == ["value"]), None)
    return None


def widget_text(state, model_id):
    """The HTML the HTML widgets under `model_id` show (the explorer's line on the surrogate shown)."""
    return " ".join(
        m["state"].get("value", "") for m in widget_models(state, model_id) if m["model_name"] == "HTMLModel"
    )


# Reprs that say nothing about what a figure shows.
_UNINFORMATIVE = re.compile(r"^(<.*>|explorer|)$", re.DOTALL)


def plain_text(markdown):
    """Markdown (and its LaTeX) as one line of plain text, for alt text."""
    text = re.sub(r"<[^>]+>", " ", markdown)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"\\(?:text|mathrm|operatorname)\{([^}]*)\}", r"\1", text)
    text = re.sub(r"\\[lr]?Vert", "‖", text)
    text = re.sub(r"\\[a-zA-Z]+|[{}$*`#|>]", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def introduction(notebook, index):
    """The paragraph that introduces cell `index`: the last one of the markdown cell before it."""
    before = next((c for c in reversed(notebook.cells[:index]) if c.cell_type == "markdown"), None)
    paragraphs = [p for p in before.source.split("\n\n") if plain_text(p)] if before is not None else []
    return plain_text(paragraphs[-1]) if paragraphs else ""


def shorten(text, limit):
    return text if len(text) <= limit else text[: limit - 1].rsplit(" ", 1)[0] + "…"


def one_image_per_cell(notebook):
    """Split a cell that shows several images into one cell per image (the later ones without input).

    MyST-NB gives every image of a cell the same alt text; split, each gets its own.
    Each image keeps the outputs that follow it (the live monitor's caption, say).
    """
    cells = []
    for cell in notebook.cells:
        outputs = cell.get("outputs", [])
        starts = [i for i, o in enumerate(outputs) if "image/png" in o.get("data", {})][1:]
        if not starts:
            cells.append(cell)
            continue
        bounds = [0, *starts, len(outputs)]
        for part, (start, end) in enumerate(itertools.pairwise(bounds)):
            # MyST-NB skips a cell without source; this one's is not shown.
            continuing = nbformat.v4.new_code_cell(
                "# the outputs of the cell above", metadata={"tags": ["remove-input"]}
            )
            piece = cell if part == 0 else continuing
            piece.outputs = outputs[start:end]
            piece.metadata["book_part"] = [part + 1, len(bounds) - 1]
            cells.append(piece)
    notebook.cells = cells


def add_alt_text(notebook, title):
    """Give every image output alt text (MyST-NB reads ``mystnb.image.alt`` from the cell's metadata).

    An image whose own text says what it shows (the live monitor's caption) keeps it;
    otherwise the words come from the paragraph that introduces the cell, and which of
    its pictures this is.
    """
    count = 0
    for index, cell in enumerate(notebook.cells):
        images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        if not images:
            continue
        own = str(images[0]["data"].get("text/plain", "")).strip()
        drawn = png_description(images[0]["data"]["image/png"])
        if own and not _UNINFORMATIVE.match(own):  # the live monitor's caption: what the last frame shows
            words = f"{drawn}. {own}" if drawn else own
        elif drawn:  # what is drawn, from the figure's own text, then the point the notebook makes of it
            words = f"{drawn}. {shorten(first_sentence(introduction(notebook, index)), 300)}"
        else:
            part, parts = cell.metadata.get("book_part", [1, 1])
            words = shorten(introduction(notebook, index), 400)  # the split parts share it
            words += f" (picture {part} of the {parts} this cell draws)" if parts > 1 else ""
        picture = "Picture of the interactive explorer" if widget_note(cell) else "Figure"
        cell.metadata.setdefault("mystnb", {}).setdefault("image", {})["alt"] = f"{picture} in {title}: {words}"
        count += len(images)
    return count


#: A path into an installed library or into the project, up to the part a reader can place:
#: ".../site-packages/keras/src/..." reads "keras/src/...", the project's own files from its root.
_LIBRARY_PREFIX = re.compile(r"(?:/[^\s\"'(\x1b]*/)?(?:site|dist)-packages/")


def relative_paths(notebook):
    """Tracebacks and printed text show paths relative to the library or the project, not the build machine's."""
    project = f"{ROOT}/"
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output["traceback"] = [_relative(line, project) for line in output["traceback"]]
            elif output.get("output_type") == "stream":
                output["text"] = _relative(output["text"], project)


def _relative(text, project):
    return _LIBRARY_PREFIX.sub("", text).replace(project, "")


def png_description(data):
    """The description a figure carries in its PNG (workbook.core.figures.figure_png writes it), or ''."""
    import base64
    import io

    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(data))) as png:
        return png.text.get("Description", "").strip()


def first_sentence(text):
    return re.split(r"(?<=[.:?!])\s", text.strip(), maxsplit=1)[0]


def widget_note(cell):
    return any(INTERACTIVE_NOTE in str(o.get("data", {}).get("text/plain", "")) for o in cell.get("outputs", []))


def absolute_links(notebook, shown, chapter_files):
    """Links to files of the repository work from the site: chapters stay pages, others go to GitHub."""

    def rewrite(match):
        text, target = match.group(1), match.group(2)
        if re.match(r"^[a-z]+:|^#", target):
            return match.group(0)
        path, _, anchor = target.partition("#")
        name = pathlib.PurePosixPath(path).name
        if name in chapter_files and not path.startswith(".."):
            return f"[{text}]({name}{'#' + anchor if anchor else ''})"
        resolved = (shown.parent / path).resolve().relative_to(ROOT).as_posix()
        return f"[{text}]({GITHUB}{resolved}{'#' + anchor if anchor else ''})"

    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = re.sub(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)", rewrite, cell.source)
            # The chapter's launch buttons take the place of its Colab badge, an image from elsewhere.
            cell.source = re.sub(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)\n?", "", cell.source)


def launch_buttons(chapter):
    """MyST for the row of buttons under a chapter's title: Colab, Binder, download."""
    path = chapter["student"].relative_to(ROOT).as_posix()
    which = "the students' version, without the worked solutions" if chapter["student"] != chapter["shown"] else ""
    if chapter["graded"]:
        which = "the students' version"
    label = f" ({which})" if which else ""
    return (
        f"[Open in Colab]({COLAB}{path}){{.book-launch .book-colab}} "
        f"[Open in Binder]({BINDER}{path}){{.book-launch .book-binder}} "
        f"{{download}}`Download the notebook <{download_path(chapter)}>`{label}"
    )


def download_path(chapter):
    return f"_notebooks/{chapter['student'].name}"


def questions():
    """Chapter name -> the question it answers, from the table of notebook 00's plan."""
    start = nbformat.read(next(NOTEBOOKS.glob("00_*.ipynb")), as_version=4)
    text = "\n".join(cell.source for cell in start.cells if cell.cell_type == "markdown")
    return {
        name: question.strip()
        for name, question in re.findall(r"^\| \[[^\]]*\]\(([^)]+)\.ipynb\) \| (.*?) \|$", text, re.M)
    }


def landing_page(chapter_list, seconds, reduced):
    """index.md: book/index.md with the table of chapters and the parameters of this build filled in."""
    asked = questions()
    rows = ["| | Chapter: the question it answers | Reading time | Runs in | Open |", "|---|---|---|---|---|"]
    for number, chapter in enumerate(chapter_list):
        ran = seconds.get(chapter["name"])
        student = chapter["student"].relative_to(ROOT).as_posix()
        download = f"{{download}}`download <{download_path(chapter)}>`"
        buttons = f"[Colab]({COLAB}{student}) · [Binder]({BINDER}{student}) · {download}"
        question = re.sub(r"\s*\*\(you are here\)\*", "", asked.get(chapter["name"], ""))
        rows.append(
            f"| {number:02d} | **[{chapter['title']}]({chapter['name']}.ipynb)**: {question} | "
            f"{chapter['time'] or 'not stated'} | {f'{ran:.0f} s' if ran is not None else '—'} | {buttons} |"
        )
    parameters = (
        "the test suite's turned-down parameters (a quick build; `make book` uses the classroom defaults)"
        if reduced
        else "the classroom defaults"
    )
    template = (BOOK / "index.md").read_text()
    toctree = "\n".join(chapter["name"] for chapter in chapter_list)
    return (
        template.replace("{{ chapters }}", "\n".join(rows))
        .replace("{{ parameters }}", parameters)
        .replace("{{ toctree }}", toctree)
    )


def prepare(chapter_list, executed, reduced, out=BUILD):
    """Write build/book/source: the config, the landing page and one prepared notebook per chapter."""
    source = pathlib.Path(out) / "source"
    if source.exists():
        shutil.rmtree(source)
    shutil.copytree(BOOK, source, ignore=shutil.ignore_patterns("index.md", "__pycache__"))
    (source / "_notebooks").mkdir()
    files = {chapter["shown"].name for chapter in chapter_list}
    summary = {}
    for chapter in chapter_list:
        notebook = copy.deepcopy(executed[chapter["name"]][0])
        if chapter["graded"]:
            as_student_receives_it(notebook)
        found = problems(notebook, chapter["shown"].name)
        if found:
            raise RuntimeError(f"{chapter['shown'].name} shows errors or stderr: " + "; ".join(found))
        notebook.cells = [c for c in notebook.cells if "injected-parameters" not in c.metadata.get("tags", [])]
        fold_solutions(notebook)
        widget_pictures(notebook)
        one_image_per_cell(notebook)
        absolute_links(notebook, chapter["shown"], files)
        relative_paths(notebook)
        header = launch_buttons(chapter) + (
            f"\n\n:::{{note}}\n{STUDENT_VERSION_NOTE}\n:::" if chapter["graded"] else ""
        )
        notebook.cells[0].source = notebook.cells[0].source.replace("\n", f"\n\n{header}\n", 1)
        figures = add_alt_text(notebook, chapter["title"])
        notebook.metadata["workbook_book"] = {"reduced": reduced}
        nbformat.write(notebook, source / f"{chapter['name']}.ipynb")
        shutil.copy(chapter["student"], source / download_path(chapter))
        summary[chapter["name"]] = figures
    seconds = {name: s for name, (_, s) in executed.items() if s is not None}
    (source / "index.md").write_text(landing_page(chapter_list, seconds, reduced))
    return summary


# -- 3. Sphinx -------------------------------------------------------------------------


def render(out=BUILD):
    """Sphinx: build/book/source -> build/book/html; warnings are errors."""
    out = pathlib.Path(out)
    html = out / "html"
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q"]
    command += ["-d", str(out / "doctrees"), str(out / "source"), str(html)]
    subprocess.run(command, check=True, cwd=ROOT)
    return html


def site_size(html):
    """(bytes, files) of the built site."""
    files = [p for p in pathlib.Path(html).rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def build(reduced=False, jobs=2, reuse=None, out=BUILD):
    """All three steps; returns a dict of what was done and how long each step took."""
    started = time.perf_counter()
    chapter_list = chapters()
    executed, ran = execute_all(chapter_list, reduced=reduced, jobs=jobs, reuse=reuse, out=out)
    executing = time.perf_counter() - started
    figures = prepare(chapter_list, executed, reduced, out=out)
    render_started = time.perf_counter()
    html = render(out=out)
    size, files = site_size(html)
    return {
        "html": html,
        "executing_seconds": executing,
        "executed": sorted(ran),
        "rendering_seconds": time.perf_counter() - render_started,
        "seconds": time.perf_counter() - started,
        "bytes": size,
        "files": files,
        "figures": figures,
    }


def main(argv=None):
    if sys.version_info < (3, 11):
        raise SystemExit("The book is built with Sphinx 9, which needs Python 3.11 or newer; this is " + sys.version)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reduced", action="store_true", help="the test suite's turned-down parameters (CI)")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks executed at once (default 2)")
    parser.add_argument("--reuse", help="a folder of executed notebooks to take when their key matches")
    parser.add_argument("--out", default=str(BUILD), help="the build folder (default build/book)")
    args = parser.parse_args(argv)
    result = build(reduced=args.reduced, jobs=args.jobs, reuse=args.reuse, out=args.out)
    print(
        f"The book: {result['html'] / 'index.html'}\n"
        f"  {sum(result['figures'].values())} figures in {len(result['figures'])} chapters; "
        f"{result['bytes'] / 2**20:.1f} MiB in {result['files']} files\n"
        f"  executing {result['executing_seconds']:.0f} s ({len(result['executed'])} notebooks run, the rest cached), "
        f"rendering {result['rendering_seconds']:.0f} s, in all {result['seconds']:.0f} s"
    )


if __name__ == "__main__":
    main()
