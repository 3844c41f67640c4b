"""Google Colab, simulated: no workbook, Colab's own packages, and the notebook's own install cell.

Colab's runtime has TensorFlow, Keras, NumPy, matplotlib and ipywidgets 7.7.1 but not the
workbook. A notebook opened there from its "Open in Colab" badge installs the workbook in its
Setup cell with ``%pip install --no-deps`` from the repository, and must leave Colab's
packages alone. Here the environment is .venv-oldest, which `make test` prepares as that
Colab-like set (its packages are the supported range's oldest, ipywidgets 7.7.1 as on Colab)
with the workbook uninstalled; WORKBOOK_INSTALL_SOURCE points the install cell at this
checkout instead of the repository. In an environment that has the workbook installed
(.venv) the test is skipped, and says why.
"""

import json
import os
import pathlib
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "00_start_here.ipynb"
COLAB_PACKAGES = ("tensorflow", "tensorflow-cpu", "keras", "numpy", "matplotlib", "ipywidgets")
# Small and offline: the same knobs the notebook tests turn down.
SMALL = 'n_train = 512\nn_test = 128\nmnist_source = "bundled"'


def pip_list():
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True, check=True
    ).stdout
    return {entry["name"].lower(): entry["version"] for entry in json.loads(listed)}


def workbook_importable_outside_the_checkout(tmp_path):
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('workbook') else 1)"
    return subprocess.run([sys.executable, "-c", probe], cwd=tmp_path).returncode == 0


@pytest.mark.notebook
@pytest.mark.timeout(900)
def test_the_setup_cell_installs_the_workbook_on_a_colab_like_runtime_and_the_notebook_runs(tmp_path):
    if workbook_importable_outside_the_checkout(tmp_path):
        pytest.skip(
            "the workbook is installed in this environment; `make test` runs this test in "
            ".venv-oldest after uninstalling it there"
        )
    before = pip_list()
    assert "gradient-workbook" not in before
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    (parameters,) = [i for i, cell in enumerate(notebook.cells) if "parameters" in cell.metadata.get("tags", [])]
    notebook.cells.insert(parameters + 1, nbformat.v4.new_code_cell(SMALL))
    environment = {**os.environ, "WORKBOOK_INSTALL_SOURCE": str(ROOT)}
    # Colab's working folder is /content: nothing of the checkout is importable from there.
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute(env=environment)

    errors = [
        f"cell {i}: {out.ename}: {out.evalue}"
        for i, cell in enumerate(notebook.cells)
        for out in cell.get("outputs", [])
        if out.output_type == "error"
    ]
    assert not errors, errors
    stderr = [
        f"cell {i}: {out.text}"
        for i, cell in enumerate(notebook.cells)
        for out in cell.get("outputs", [])
        if out.output_type == "stream" and out.name == "stderr"
    ]
    assert not stderr, stderr

    after = pip_list()
    assert after.get("gradient-workbook") == "0.1.0", "the Setup cell should have installed the workbook"
    assert {name: after.get(name) for name in COLAB_PACKAGES} == {name: before.get(name) for name in COLAB_PACKAGES}, (
        "installing the workbook must not change the runtime's TensorFlow, Keras, NumPy, matplotlib or ipywidgets"
    )
    # Installed from the checkout into site-packages (not a link to it), as Colab would from the repository.
    location = subprocess.run(
        [sys.executable, "-c", "import workbook; print(workbook.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert pathlib.Path(location).parent.parent.name == "site-packages", location
