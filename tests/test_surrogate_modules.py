"""The surrogate maths and the layer work where no display library can even be imported.

Which modules may import what is read from the source in tests/test_module_layers.py; this
observes it: the catalogue, a layer, a gradient and the formulas, with display refused.
"""

import pathlib
import subprocess
import sys

from notebook_runner import FRESH_PYTHON_SECONDS

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "workbook"
DISPLAY_MODULES = {
    "workbook.surrogates.plots",
    "workbook.surrogates.explorer",
    "workbook.core.figures",
    "workbook.estimators.plots",
}


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
from workbook.surrogates.catalogue import SURROGATES, smooth_floor

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
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=FRESH_PYTHON_SECONDS, cwd=PACKAGE.parent
    )
    assert probe.returncode == 0 and "maths without display" in probe.stdout, probe.stderr[-3000:]
