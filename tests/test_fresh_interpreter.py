"""What only a fresh interpreter shows about the package's imports, from one interpreter.

Importing TensorFlow costs seconds of CPU, so one fresh Python runs every step below in turn
and writes what each step found (or its traceback) to a file; each test reads its own step.
In order:

1. the surrogate maths and the layer work where no display library can even be imported
   (Keras imports Matplotlib and IPython by itself when they are installed, so the probe
   makes them impossible to import, and the maths, the layer and the formulas must still work);
2. recording gradient norms and training load no display code (none is refused any more);
3. importing every module below the display (pyproject.toml's contracts, read in
   tests/test_module_layers.py) loads none of the workbook's display modules, and nothing of
   the course;
4. every public name of ``import workbook`` resolves (after the steps above have loaded much of
   the package: an interpreter of its own for this would cost another import of TensorFlow; no
   module reaches a name through the root's lazy loading, tests/test_module_layers.py).
"""

import json
import pathlib
import subprocess
import sys

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10, the oldest end: tomli, which pytest itself needs there
    import tomli as tomllib
from notebook_runner import FRESH_PYTHON_SECONDS, clean_environment

ROOT = pathlib.Path(__file__).resolve().parent.parent


def display_contract(key):
    """A list of names of pyproject.toml's display contract (tests/test_module_layers.py reads the rest)."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(contract for contract in contracts if contract["type"] == "forbidden")[key]


NO_DISPLAY = display_contract("source_modules")
DISPLAY = [name for name in display_contract("forbidden_modules") if name.startswith("workbook.")]
# The tests below share one probe: on one worker it runs once.
pytestmark = pytest.mark.xdist_group("fresh_interpreter")

# What Keras itself loads when installed, and what the figures use (refused in step 1 only).
DISPLAY_PACKAGES = ("matplotlib", "ipywidgets", "IPython")
REFUSED = (*DISPLAY_PACKAGES, "html")

PROBE = """
import importlib, importlib.abc, json, sys, traceback

RESULTS, DISPLAY_PACKAGES, REFUSED = sys.argv[1], {display_packages!r}, {refused!r}
DISPLAY, NO_DISPLAY = {display!r}, {no_display!r}
found = {{}}


def step(function):
    before = set(sys.modules)
    try:
        value = function()
    except BaseException:
        found[function.__name__] = {{"error": traceback.format_exc()}}
    else:
        added = set(sys.modules) - before
        display = sorted(m for m in added if m.split(".")[0] in DISPLAY_PACKAGES or m in DISPLAY)
        found[function.__name__] = {{"value": value, "display_loaded": display}}


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in REFUSED:
            raise ImportError(f"{{name}} is refused in this probe")


def maths_without_display():
    import keras, numpy as np, tensorflow as tf
    from workbook.layers import Surrogate
    from workbook.surrogates.catalogue import SURROGATES, smooth_floor

    inputs = keras.Input((3,))
    model = keras.Model(inputs, Surrogate("step_atan", alpha=4)(SURROGATES["round_ste"](inputs)))
    x = tf.constant([[-0.4, 0.2, 1.3]])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = model(x)
    return {{
        "gradient": tape.gradient(y, x).numpy().tolist(),
        "rounded": np.round(x.numpy()).tolist(),
        "formula": SURROGATES["floor_smooth"].with_params(depth=2).formula,
        "smooth_floor(0)": float(smooth_floor(0.0)),
    }}


def recording_and_training():
    import numpy as np
    import workbook.monitor.recording
    from workbook.lab.bottleneck_runs import train_bottlenecks

    x = np.random.default_rng(0).random((48, 28, 28, 1)).astype("float32")
    runs = train_bottlenecks({{"identity": None}}, x[:32], x[32:], epochs=1, batch_size=16, seed=0, every=1)
    return len(runs["identity"].gradients)


def every_module_below_the_display():
    for name in NO_DISPLAY:
        importlib.import_module(name)
    return sorted(name for name in sys.modules if name.startswith("workbook"))


def every_public_name():
    import workbook

    return [name for name in workbook.__all__ if getattr(workbook, name) is None]


sys.meta_path.insert(0, Refuse())
step(maths_without_display)
sys.meta_path.pop(0)
step(recording_and_training)
step(every_module_below_the_display)
step(every_public_name)
with open(RESULTS, "w") as file:
    json.dump(found, file)
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fresh")
    results = folder / "results.json"
    script = PROBE.format(
        display_packages=DISPLAY_PACKAGES, refused=REFUSED, display=tuple(DISPLAY), no_display=tuple(NO_DISPLAY)
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(results)],
        capture_output=True,
        text=True,
        cwd=folder,
        env=clean_environment(folder) | {"PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout=FRESH_PYTHON_SECONDS,
    )
    assert done.returncode == 0 and results.exists(), done.stderr[-3000:]
    found = json.loads(results.read_text())

    def read(name):
        assert "error" not in found[name], found[name]["error"]
        return found[name]

    return read


def test_the_maths_and_the_layer_work_where_no_display_library_can_be_imported(probe):
    import numpy as np

    found = probe("maths_without_display")
    value, alpha = found["value"], 4.0
    expected = (alpha / 2) / (1 + (np.pi / 2 * alpha * np.array(value["rounded"])) ** 2)
    np.testing.assert_allclose(value["gradient"], expected, rtol=1e-6)
    assert value["formula"].startswith("$") and value["smooth_floor(0)"] == -0.5
    assert found["display_loaded"] == []


def test_recording_and_training_load_no_display_code(probe):
    found = probe("recording_and_training")
    assert found["value"] == 2, "train_bottlenecks recorded the gradient norms of another number of steps"
    assert found["display_loaded"] == []


def test_importing_every_module_below_the_display_loads_none_of_the_display(probe):
    found = probe("every_module_below_the_display")
    loaded = set(found["value"])
    assert loaded >= set(NO_DISPLAY)
    assert loaded & set(DISPLAY) == set() and found["display_loaded"] == []
    assert not any(name.startswith("workbook.course") for name in loaded)


def test_every_public_name_resolves(probe):
    assert probe("every_public_name")["value"] == []
