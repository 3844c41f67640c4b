"""The surrogate maths and the layer need no display code: dependencies point from display to maths only.

The maths is surrogates.py and every workbook module it imports; the layer is layers.py.
Neither may import a plotting or widget library, nor the plots, the explorer or the figures.
"""

import ast
import pathlib
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "workbook"
DISPLAY_LIBRARIES = {"matplotlib", "ipywidgets", "IPython", "html"}
DISPLAY_MODULES = {"workbook.plots", "workbook.explorer", "workbook.figures", "workbook.estimator_plots"}


def imported_modules(module):
    """Every module ``workbook.<module>`` imports, at the top or inside a function, as absolute names."""
    imported = set()
    for node in ast.walk(ast.parse((PACKAGE / f"{module}.py").read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = f"workbook.{node.module or ''}".rstrip(".") if node.level else node.module
            imported.add(base)
            imported.update(f"{base}.{alias.name}" for alias in node.names if node.level and not node.module)
    return imported


def reachable_from(module):
    """``workbook.<module>`` and every workbook module it imports, directly or not."""
    seen, todo = set(), [f"workbook.{module}"]
    while todo:
        name = todo.pop()
        if name in seen or not (PACKAGE / f"{name.removeprefix('workbook.')}.py").exists():
            continue
        seen.add(name)
        todo.extend(m for m in imported_modules(name.removeprefix("workbook.")) if m.startswith("workbook."))
    return seen


def is_display(name):
    return name.split(".")[0] in DISPLAY_LIBRARIES or name in DISPLAY_MODULES


def test_the_reachability_walk_finds_display_code_where_there_is_some():
    """The walk below would pass on anything if it could not see an import: it sees the explorer's."""
    assert {"workbook.plots", "workbook.surrogates", "workbook.figures"} <= reachable_from("explorer")
    assert any(is_display(name) for name in imported_modules("explorer"))


def test_the_maths_and_the_layer_import_no_display_code_even_inside_functions():
    maths = reachable_from("surrogates")
    assert {"workbook.surrogates", "workbook.surrogate_formulas", "workbook.surrogate_operation"} <= maths
    for module in sorted(maths | reachable_from("layers")):
        display = sorted(name for name in imported_modules(module.removeprefix("workbook.")) if is_display(name))
        assert not display, f"{module} imports display code: {display}"


# Keras imports matplotlib and IPython by itself when they are installed, so the probe makes them
# impossible to import: the surrogate maths and the layer must then still work, formulas included.
PROBE = """
import importlib.abc, sys

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {"matplotlib", "ipywidgets", "IPython", "html"}:
            raise ImportError(f"{name} is refused in this probe")

sys.meta_path.insert(0, Refuse())
import keras, numpy as np, tensorflow as tf
from workbook.layers import Surrogate
from workbook.surrogates import SURROGATES, smooth_floor

inputs = keras.Input((3,))
model = keras.Model(inputs, Surrogate("step_atan", alpha=4)(SURROGATES["round_ste"](inputs)))
x = tf.constant([[-0.4, 0.2, 1.3]])
with tf.GradientTape() as tape:
    tape.watch(x)
    y = model(x)
alpha = 4.0
expected = (alpha / 2) / (1 + (np.pi / 2 * alpha * np.round(x.numpy())) ** 2)
np.testing.assert_allclose(tape.gradient(y, x).numpy(), expected, rtol=1e-6)
assert SURROGATES["floor_smooth"].with_params(depth=2).formula.startswith("$")
assert float(smooth_floor(0.0)) == -0.5
shown = sorted(m for m in sys.modules if m in {DISPLAY_MODULES!r})
assert not shown, shown
print("maths without display")
"""


def test_the_maths_and_the_layer_work_where_no_display_library_can_be_imported():
    code = PROBE.replace("{DISPLAY_MODULES!r}", repr(DISPLAY_MODULES))
    probe = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=PACKAGE.parent
    )
    assert probe.returncode == 0 and "maths without display" in probe.stdout, probe.stderr[-3000:]
