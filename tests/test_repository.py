"""The front door: README, Binder files, the start notebook's contents, requirements.

Fast checks that need no TensorFlow: they catch a Binder badge pointing at a
deleted notebook, a new notebook nobody listed, and Binder pins drifting away
from the ones `make lab` installs.
"""

import contextlib
import os
import pathlib
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.parse

import nbformat
import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

import workbook

try:
    import tomllib
except ImportError:  # Python 3.10, the oldest end: tomli, which pytest itself needs there
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
README = ROOT / "README.md"
START = NOTEBOOKS / "00_start_here.ipynb"
ALL_NOTEBOOKS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))

# [text](target) or [text](target "title"); images ![..](..) match too.
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCED_CODE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def links(markdown):
    """Every link target in `markdown`, code blocks left out."""
    return MARKDOWN_LINK.findall(FENCED_CODE.sub("", markdown))


def relative_links(markdown):
    """Link targets that point into the repository (no scheme, not a bare #anchor), anchors cut off."""
    targets = []
    for target in links(markdown):
        parsed = urllib.parse.urlparse(target)
        if parsed.scheme or parsed.netloc or target.startswith("#"):
            continue
        targets.append(urllib.parse.unquote(parsed.path))
    return targets


def start_notebook_markdown():
    notebook = nbformat.read(START, as_version=4)
    return "\n\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")


def requirement_set(path):
    """The requirements in a pip requirements file, normalized: comments, blanks and spacing ignored."""
    found = set()
    for line in path.read_text().splitlines():
        line = re.sub(r"(^|\s)#.*", "", line).strip()
        if not line:
            continue
        if line.startswith("-"):
            found.add(" ".join(line.split()))
            continue
        requirement = Requirement(line)
        found.add(
            (
                canonicalize_name(requirement.name),
                tuple(sorted(requirement.extras)),
                str(requirement.specifier),
                str(requirement.marker) if requirement.marker else "",
            )
        )
    return found


def requirements_by_name(path):
    requirements = {}
    for line in path.read_text().splitlines():
        line = re.sub(r"(^|\s)#.*", "", line).strip()
        if line and not line.startswith("-"):
            requirement = Requirement(line)
            requirements.setdefault(canonicalize_name(requirement.name), []).append(requirement)
    return requirements


# --- Binder ------------------------------------------------------------------


def test_binder_installs_the_same_requirements_as_make_lab():
    ours, binders = requirement_set(ROOT / "requirements.txt"), requirement_set(ROOT / "binder" / "requirements.txt")
    assert ours, "requirements.txt names no packages"
    assert binders == ours, (
        "binder/requirements.txt must name the same packages and pins as requirements.txt; "
        f"only in requirements.txt: {sorted(map(str, ours - binders))}; "
        f"only in binder/requirements.txt: {sorted(map(str, binders - ours))}"
    )


def test_binder_requirements_are_self_contained():
    # Binder installs binder/requirements.txt before it copies the rest of the
    # repository (so the layer is cached); a reference to another file would break there.
    options = [
        line for line in (ROOT / "binder" / "requirements.txt").read_text().splitlines() if line.strip().startswith("-")
    ]
    assert not options, f"binder/requirements.txt must not refer to other files: {options}"


def test_binder_runs_a_python_the_package_declares_it_supports():
    # repo2docker reads "python-X.Y"; Binder must not run a Python that pip would refuse to install into.
    runtime = re.fullmatch(r"python-(\d+)\.(\d+)", (ROOT / "binder" / "runtime.txt").read_text().strip())
    assert runtime, "binder/runtime.txt must read python-X.Y"
    version = ".".join(runtime.groups())
    pyproject = (ROOT / "pyproject.toml").read_text()
    requires = re.search(r'^requires-python\s*=\s*"([^"]+)"', pyproject, re.MULTILINE).group(1)
    assert SpecifierSet(requires).contains(version), f"Binder's Python {version} is outside requires-python {requires}"
    assert f'"Programming Language :: Python :: {version}"' in pyproject, f"no classifier for Python {version}"


def test_postbuild_installs_the_package_and_survives_a_failed_download(tmp_path):
    # Stand-ins for pip and python: pip records its arguments, python fails the way
    # an MNIST download without a network does. postBuild must still succeed.
    calls = tmp_path / "pip-calls"
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "pip").write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n')
    (fake_bin / "python").write_text("#!/bin/sh\necho 'URLError: no network' >&2\nexit 1\n")
    for tool in fake_bin.iterdir():
        tool.chmod(0o755)
    run = subprocess.run(
        [str(ROOT / "binder" / "postBuild")],
        env={"PATH": f"{fake_bin}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, f"postBuild failed when the download failed:\n{run.stdout}\n{run.stderr}"
    assert calls.read_text().split() == ["install", "--no-deps", "-e", "."]
    assert "bundled" in run.stdout, "postBuild should say the bundled digits will be used"


# --- README and the start notebook ---------------------------------------------


def test_readme_binder_badge_opens_an_existing_notebook():
    readme = README.read_text()
    badge = re.search(
        r"\[!\[[^\]]*\]\(https://mybinder\.org/badge_logo\.svg\)\]\((https://mybinder\.org/v2/gh/[^)\s]+)\)", readme
    )
    assert badge, (
        "README needs a Binder badge: [![Binder](https://mybinder.org/badge_logo.svg)](https://mybinder.org/v2/gh/...)"
    )
    urlpath = urllib.parse.parse_qs(urllib.parse.urlparse(badge.group(1)).query).get("urlpath", [""])[0]
    assert urlpath.startswith("lab/tree/"), f"the badge should open JupyterLab (urlpath=lab/tree/...), got {urlpath!r}"
    target = ROOT / urlpath.removeprefix("lab/tree/")
    assert target.is_file(), f"the Binder badge opens {target.relative_to(ROOT)}, which does not exist"


@pytest.mark.parametrize("document", ["README.md", "notebooks/00_start_here.ipynb"])
def test_relative_links_point_to_existing_files(document):
    if document.endswith(".ipynb"):
        markdown, base = start_notebook_markdown(), NOTEBOOKS
    else:
        markdown, base = README.read_text(), ROOT
    targets = relative_links(markdown)
    assert targets, f"{document} has no relative links; its notebook table is missing"
    broken = [target for target in targets if not (base / target).exists()]
    assert not broken, f"{document} links to files that do not exist: {broken}"


def test_every_notebook_is_in_both_tables_of_contents():
    assert ALL_NOTEBOOKS, "no notebooks found"
    in_start = {
        pathlib.PurePosixPath(target).name
        for target in relative_links(start_notebook_markdown())
        if target.endswith(".ipynb")
    }
    in_readme = {target for target in relative_links(README.read_text()) if target.endswith(".ipynb")}
    for path in ALL_NOTEBOOKS:
        assert path.name in in_start, f"{path.name} is missing from the contents table in 00_start_here.ipynb"
        assert f"notebooks/{path.name}" in in_readme, f"{path.name} is missing from the notebook table in README.md"


def test_readme_shows_how_to_run_it_in_a_code_block():
    # as commands to copy (a line of a fenced block), not merely mentioned in a sentence
    commands = [
        line.split("#")[0].strip() for block in FENCED_CODE.findall(README.read_text()) for line in block.splitlines()
    ]
    for command in ("make lab", "make test"):
        assert command in commands, f"README should show `{command}` in a code block"


def test_readme_describes_every_public_name_and_no_other():
    # Names only: `import workbook` is lazy, so this needs no TensorFlow.
    readme = README.read_text()
    public = set(workbook.__all__) | set(workbook._SUBMODULES)
    # Modules started by name (`%load_ext workbook.X`, `python -m workbook.X`) are not names to import.
    started = set(re.findall(r"(?:%(?:un)?load_ext|python -m) workbook\.([\w.]+\w)", readme))
    assert all((ROOT / "workbook" / f"{name.replace('.', '/')}.py").is_file() for name in started), started
    readme = re.sub(r"(?:%(?:un)?load_ext|python -m) workbook\.[\w.]+", "", readme)
    mentioned = set(re.findall(r"(?<![\w/.-])workbook\.([A-Za-z_]\w*)", readme))
    # The subpackages are rooms of the package ("Working on the workbook"), not names to import.
    rooms = {path.name for path in (ROOT / "workbook").iterdir() if (path / "__init__.py").is_file()}
    assert not (public - mentioned), f"README's helper section should list {sorted(public - mentioned)}"
    unknown = mentioned - public - rooms
    assert not unknown, f"README mentions names workbook does not export: {sorted(unknown)}"


# --- Google Colab ---------------------------------------------------------------------

COLAB_BADGE = re.compile(
    r"\[!\[Open In Colab\]\(https://colab\.research\.google\.com/assets/colab-badge\.svg\)\]"
    r"\(https://colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)/blob/([\w./-]+?)/"
    r"((?:notebooks|course/release/[\w.-]+)/[\w.-]+\.ipynb)\)"
)
INSTALL_LINE = re.compile(r'"git\+https://github\.com/([\w.-]+/[\w.-]+)@([\w./-]+)"')


def binder_repository():
    match = re.search(r"https://mybinder\.org/v2/gh/([\w.-]+/[\w.-]+)/", README.read_text())
    assert match, "README needs its Binder badge"
    return match.group(1)


def colab_path(path):
    """Where a notebook's Colab badge should point, from the repository's root.

    A notebook with exercises (nbgrader cells: 01-06) opens as the student version nbgrader made
    in course/release/, without worked solutions or hidden tests, so that no solution is a click
    away; the start page, which has none, opens as it is.
    """
    notebook = nbformat.read(path, as_version=4)
    if any("nbgrader" in cell.get("metadata", {}) for cell in notebook.cells):
        return f"course/release/{path.stem}/{path.name}"
    return f"notebooks/{path.name}"


def test_the_graded_notebooks_open_in_colab_as_student_versions():
    # the rule has teeth: the assignment is graded, the start page is not, and each release exists
    assert colab_path(NOTEBOOKS / "05_assignment_quantized_autoencoder.ipynb").startswith("course/release/")
    assert colab_path(NOTEBOOKS / "03_finding_gradient_killers.ipynb").startswith("course/release/")
    assert colab_path(START) == "notebooks/00_start_here.ipynb"
    for path in ALL_NOTEBOOKS:
        assert (ROOT / colab_path(path)).is_file(), (
            f"{path.name}: {colab_path(path)} does not exist; run `make assignments`"
        )


def notebook_setup_source(notebook):
    return next(
        cell.source for cell in notebook.cells if cell.cell_type == "code" and "workbook.setup(seed=" in cell.source
    )


def test_readme_has_an_open_in_colab_badge_for_every_notebook_in_this_repository():
    badges = COLAB_BADGE.findall(README.read_text())
    assert sorted(target for _, _, target in badges) == sorted(colab_path(path) for path in ALL_NOTEBOOKS)
    assert {(repository, ref) for repository, ref, _ in badges} == {(binder_repository(), "main")}


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_opens_with_its_own_colab_badge_and_installs_the_workbook_from_the_same_ref(path):
    notebook = nbformat.read(path, as_version=4)
    first = notebook.cells[0]
    assert first.cell_type == "markdown"
    badge = COLAB_BADGE.search(first.source.strip().splitlines()[-1])
    assert badge, f"{path.name}: the first cell's last line should be its Open in Colab badge"
    repository, ref, target = badge.groups()
    assert (repository, target) == (binder_repository(), colab_path(path))
    setup = notebook_setup_source(notebook)
    install = INSTALL_LINE.search(setup)
    assert install, f"{path.name}: the Setup cell should install the workbook from git+https://github.com/..."
    assert install.groups() == (repository, ref), (
        f"{path.name}: the badge opens {repository}@{ref}, "
        f"the Setup cell installs {install.group(1)}@{install.group(2)}"
    )
    # Only the workbook: Colab's TensorFlow, Keras and ipywidgets stay; the tests point it at this checkout.
    assert "%pip install --quiet --no-deps {install_source}" in setup
    assert re.search(r'os\.environ\.get\(\s*"WORKBOOK_INSTALL_SOURCE"', setup)
    assert setup.index('find_spec("workbook") is None') < setup.index("%pip install")


# --- How it is installed and run --------------------------------------------------


def test_ci_runs_make_lint_then_make_test(tmp_path):
    # .ci/run itself, run from a copy with a make that only records its arguments (and the
    # system tools it would install already there): lint first, then the full gate.
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text((ROOT / ".ci" / "run").read_text())
    tools, calls = tmp_path / "bin", tmp_path / "calls"
    tools.mkdir()
    for name, body in (("make", f'echo "$@" >> {calls}'), ("chromium", "true"), ("bwrap", "true")):
        (tools / name).write_text(f"#!/bin/sh\n{body}\n")
        (tools / name).chmod(0o755)
    environment = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run(
        ["bash", str(tmp_path / ".ci" / "run")], env=environment, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert calls.read_text().splitlines() == ["lint", "test"]


def fake_checkout(tmp_path, book_status=0, first_pytest_status=0, oldest_status=0):
    """A copy of the Makefile whose venv is up to date and whose Python and oldest end only record what they did."""
    (tmp_path / "Makefile").write_text((ROOT / "Makefile").read_text())
    calls = tmp_path / "calls"
    for name in ("requirements.txt", "requirements-dev.txt", "requirements-book.txt", "pyproject.toml"):
        (tmp_path / name).write_text("")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "test_oldest_end.sh").write_text(
        f'echo "oldest end started" >> {calls}\necho "the oldest end\'s own output"\nexit {oldest_status}\n'
    )
    bin_folder = tmp_path / ".venv" / "bin"
    bin_folder.mkdir(parents=True)
    # the first pytest line ignores the book's tests, the second names them
    (bin_folder / "python").write_text(
        f'#!/bin/sh\necho "python $*" >> {calls}\ncase "$*" in\n'
        f'  *"--ignore=tests/test_rendered_book.py"*) exit {first_pytest_status};;\n'
        f'  *"tests/test_rendered_book.py"*) exit {book_status};;\nesac\n'
    )
    (bin_folder / "python").chmod(0o755)
    earlier = time.time() - 100  # what the stamps depend on, older than them
    for name in ("Makefile", "requirements.txt", "requirements-dev.txt", "requirements-book.txt", "pyproject.toml"):
        os.utime(tmp_path / name, (earlier, earlier))
    for stamp in (".installed", ".installed-dev"):
        (tmp_path / ".venv" / stamp).write_text("")
    return calls


def test_ctrl_c_stops_make_test_and_the_oldest_end_beside_it(tmp_path):
    calls = fake_checkout(tmp_path)
    sleep = f"sleep 120.{secrets.randbelow(10**9):09d}"  # the oldest end's child, found by its own command line
    (tmp_path / "scripts" / "test_oldest_end.sh").write_text(f'echo "oldest end started" >> {calls}\n{sleep} &\nwait\n')
    python = tmp_path / ".venv" / "bin" / "python"
    waiting = f'case "$*" in *pytest*) echo "newest end started" >> {calls}; sleep 120;; esac\ncase'
    python.write_text(python.read_text().replace("case", waiting, 1))
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("MAKE", "WORKERS"))}
    # As a terminal starts it: a process group of its own, which Ctrl-C signals as a whole, and SIGINT
    # not ignored (a test run started in the background, as make test starts the oldest end, ignores it).
    make = subprocess.Popen(
        ["make", "test"],
        cwd=tmp_path,
        env=environment,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        stop_both_ends_with_ctrl_c(make, calls, sleep)
    finally:  # whatever failed, nothing of this test keeps running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, signal.SIGKILL)
        subprocess.run(["pkill", "-f", f"^{sleep}$"], capture_output=True)
        make.wait()


def stop_both_ends_with_ctrl_c(make, calls, sleep):
    deadline = time.monotonic() + 60
    while not calls.exists() or not {"oldest end started", "newest end started"} <= set(calls.read_text().splitlines()):
        assert time.monotonic() < deadline, "make test did not start both ends within 60 s"
        time.sleep(0.1)
    os.killpg(make.pid, signal.SIGINT)
    output, _ = make.communicate(timeout=60)
    assert make.returncode != 0, output
    assert "stopped: the oldest end too" in output
    left = subprocess.run(["pgrep", "-f", f"^{sleep}$"], capture_output=True, text=True).stdout.split()
    assert not left, f"the oldest end's {sleep} still runs: {left}"


def run_make_test(tmp_path, **statuses):
    calls = fake_checkout(tmp_path, **statuses)
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("MAKE", "WORKERS"))}
    run = subprocess.run(["make", "test"], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=60)
    return run, calls.read_text().splitlines()


def test_make_test_runs_every_test_module_once_and_the_oldest_end_beside_them(tmp_path):
    run, calls = run_make_test(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    pytest_lines = [line.split() for line in calls if " -m pytest" in line]
    assert len(pytest_lines) == 2, calls
    everything = {f"tests/{path.name}" for path in (ROOT / "tests").glob("test_*.py")}
    runs = []
    for words in pytest_lines:
        ignored = {word.removeprefix("--ignore=") for word in words if word.startswith("--ignore=")}
        named = {word for word in words if word.startswith("tests/test_")}
        runs.append(named or everything - ignored)
    assert runs[0] | runs[1] == everything and not runs[0] & runs[1], runs  # each module once
    assert "oldest end started" in calls
    assert "the oldest end's own output" in run.stdout  # shown, after the newest end's


@pytest.mark.parametrize(
    "statuses, book_runs",
    [(dict(oldest_status=1), True), (dict(first_pytest_status=1), False), (dict(book_status=2), True)],
    ids=["the oldest end fails", "the newest end fails", "the book's tests fail"],
)
def test_make_test_fails_when_either_end_fails_and_still_runs_and_shows_the_oldest_end(tmp_path, statuses, book_runs):
    run, calls = run_make_test(tmp_path, **statuses)
    assert run.returncode != 0, run.stdout
    assert "oldest end started" in calls
    assert "the oldest end's own output" in run.stdout
    assert any("test_rendered_book.py" in line and "--ignore" not in line for line in calls) == book_runs, calls


def test_the_oldest_end_is_skipped_loudly_without_a_package_index(tmp_path):
    # A copy of what the script reads, and a pip that can reach no index (nothing listens on
    # port 9 of this machine; PIP_CONFIG_FILE=/dev/null drops any configured mirror).
    for name in ("constraints-oldest.txt", "pyproject.toml", "scripts/test_oldest_end.sh"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text())
    environment = {
        **os.environ,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_NO_CACHE_DIR": "1",
        "OLDEST_PYTHON": sys.executable,
    }
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "WORKBOOK_SKIP_OLDEST"):
        environment.pop(name, None)
    run = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "test_oldest_end.sh")],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SKIPPED: the package index cannot be reached" in run.stdout
    assert "NOT tested" in run.stdout
    assert not (tmp_path / ".venv-oldest").exists()


@pytest.mark.parametrize(
    "platform, expected",
    [
        ({"sys_platform": "linux", "platform_machine": "x86_64"}, "tensorflow-cpu"),
        ({"sys_platform": "linux", "platform_machine": "aarch64"}, "tensorflow"),
        ({"sys_platform": "darwin", "platform_machine": "arm64"}, "tensorflow"),
        ({"sys_platform": "win32", "platform_machine": "AMD64"}, "tensorflow"),
    ],
    ids=["linux-x86_64", "linux-aarch64", "macos-arm64", "windows"],
)
def test_exactly_one_tensorflow_wheel_is_chosen_per_platform(platform, expected):
    requirements = requirements_by_name(ROOT / "requirements.txt")
    environment = {**default_environment(), **platform}
    chosen = [
        canonicalize_name(requirement.name)
        for name in ("tensorflow", "tensorflow-cpu")
        for requirement in requirements.get(name, [])
        if requirement.marker is None or requirement.marker.evaluate(environment)
    ]
    assert chosen == [expected]


# --- Licences and data provenance --------------------------------------------------


# The MIT licence's text after its copyright line, as the Open Source Initiative publishes it.
MIT_TERMS = """Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction, including
without limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is furnished to do so, subject to the
following conditions:
The above copyright notice and this permission notice shall be included in all copies or substantial
portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT
LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO
EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER
IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE
USE OR OTHER DEALINGS IN THE SOFTWARE."""


def test_licence_file_holds_the_whole_mit_licence_that_the_package_declares():
    words = (ROOT / "LICENSE").read_text().split()
    assert words[:2] == ["MIT", "License"] and words[2] == "Copyright", words[:3]
    assert " ".join(MIT_TERMS.split()) in " ".join(words), "LICENSE does not hold the MIT licence's whole text"
    assert re.search(r'^license\s*=\s*"MIT"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)


def test_bundled_data_has_its_provenance_beside_it():
    bundled = ROOT / "workbook" / "bundled"
    archives = sorted(bundled.glob("*.npz"))
    assert archives, "no bundled data found"
    note = (bundled / "README.md").read_text()
    for archive in archives:
        assert archive.name in note, f"workbook/bundled/README.md should describe {archive.name}"
    assert "CC BY-SA" in note and "LeCun" in note


def test_every_folder_of_the_package_is_installed():
    # A folder left out of pyproject.toml's packages is missing from every non-editable install
    # (Colab's, Binder's, a wheel), though an editable one finds it.
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    on_disk = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "workbook").rglob("*.py")}
    assert not on_disk - set(declared), f"pyproject.toml's packages leave out {sorted(on_disk - set(declared))}"
