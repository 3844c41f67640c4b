"""The package's modules depend on each other in one direction only.

From the bottom: foundations (argument checks, the gradient helper, set-up, data),
then the maths (surrogates, estimators, the finder), then Keras layers, then models and
the monitor, then figures and widgets, then the checks and grading that notebooks call.
A module may import from its own layer or below, never above; and nothing below the
figures imports display code (Matplotlib, ipywidgets, IPython). Every import is read
from the source, including those inside functions, so a lazy import cannot hide one.
"""

import ast
import functools
import pathlib
import re
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "workbook"

# Layer of every module, bottom first. A new module must be placed here (the first test says so).
LAYERS = {
    "foundation": {
        "arguments",
        "gradients",
        "tensorflow_start",
        "environment",
        "compatibility",
        "data",
        "code_origin",
        "notebook_cells",
    },
    "maths": {
        "surrogates",
        "surrogate_formulas",
        "surrogate_operation",
        "derivatives",
        "estimators",
        "bias_variance",
        "graph_program",
        "gradient_probe",
        "graph_walk",
        "finder_targets",
        "layer_causes",
        "finder_hints",
        "finder_advice",
        "diagnosis_report",
        "diagnosis",
    },
    "layers": {"layers", "discrete_layers"},
    "models and monitor": {"models", "recording", "bottleneck_runs"},
    "figures": {"figures", "plots", "explorer", "estimator_plots", "monitoring", "compare", "missing_gradients"},
    "checks and grading": {
        "checks",
        "assignment_checks",
        "estimator_checks",
        "grading",
        "verdicts",
        "sandbox",
        "autograde",
        "grade_class",
    },
}
ORDER = list(LAYERS)
LAYER_OF = {module: ORDER.index(layer) for layer, modules in LAYERS.items() for module in modules}
# Drawing, widgets, the notebook frontend, and rendering HTML or images for it.
DISPLAY_LIBRARIES = {"matplotlib", "ipywidgets", "IPython", "html", "base64"}
# The few display imports below the figures, each with its reason.
DISPLAY_ALLOWED = {
    # setup() imports Matplotlib with its log silenced (the font cache it builds once, a
    # read-only home folder), so that a notebook's first plot prints nothing on stderr; it draws nothing.
    ("environment", "matplotlib"),
    # The finder names the notebook cell a line came from through the running kernel's
    # compiler (IPython.get_ipython().compile.format_code_name); it draws nothing.
    ("notebook_cells", "IPython"),
    # The finder's report escapes its own text for GradientReport._repr_html_ (a table, no drawing).
    ("diagnosis_report", "html"),
}


def module_names():
    return sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__")


@functools.cache
def public_name_modules():
    """``workbook.NAME`` -> the module that defines it, read from ``workbook/__init__.py``."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_EXPORTS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("workbook/__init__.py has no _EXPORTS table")


def imports(source, exports):
    """(workbook modules, top-level outside packages) that ``source`` imports anywhere in it."""
    own, outside = set(), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "workbook":
                    own.update(parts[1:2])
                else:
                    outside.add(parts[0])
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and not module.startswith("workbook"):
                outside.add(module.split(".")[0])
                continue
            path = module.split(".")[1:] if node.level == 0 else module.split(".") if module else []
            if path:
                own.add(path[0])
            else:  # `from . import x` or `from workbook import NAME`
                for alias in node.names:
                    own.add(exports.get(alias.name, alias.name))
    return own, outside


def problems(name, source, exports):
    own, outside = imports(source, exports)
    found = [
        f"{name} ({ORDER[LAYER_OF[name]]}) imports {other} ({ORDER[LAYER_OF[other]]}), a layer above it"
        for other in sorted(own)
        if other in LAYER_OF and LAYER_OF[other] > LAYER_OF[name]
    ]
    if LAYER_OF[name] < ORDER.index("figures"):
        found += [
            f"{name} ({ORDER[LAYER_OF[name]]}) imports the display library {library}"
            for library in sorted(outside & DISPLAY_LIBRARIES)
            if (name, library) not in DISPLAY_ALLOWED
        ]
    return found


def test_every_module_has_a_layer_and_every_layer_entry_is_a_module():
    assert set(module_names()) == set(LAYER_OF), (
        f"not placed in a layer: {sorted(set(module_names()) - set(LAYER_OF))}; "
        f"placed but missing: {sorted(set(LAYER_OF) - set(module_names()))}"
    )


@pytest.mark.parametrize("name", module_names())
def test_module_imports_only_its_own_layer_or_below_and_no_display_below_the_figures(name):
    source = (PACKAGE / f"{name}.py").read_text()
    assert problems(name, source, public_name_modules()) == []


@pytest.mark.parametrize(
    "name, source, expected",
    [
        ("surrogates", "def f():\n    from .plots import plot_derivatives\n", "a layer above it"),
        ("surrogates", "from workbook import plot_derivatives\n", "a layer above it"),
        ("models", "import workbook.figures\n", "a layer above it"),
        ("recording", "from . import monitoring\n", "a layer above it"),
        ("graph_walk", "def f():\n    import matplotlib.pyplot as plt\n", "display library matplotlib"),
        ("bottleneck_runs", "from IPython.display import display\n", "display library IPython"),
        ("recording", "def f():\n    import base64\n", "display library base64"),
        ("surrogate_formulas", "import html\n", "display library html"),
    ],
)
def test_the_check_finds_an_upward_or_display_import_however_it_is_written(name, source, expected):
    found = problems(name, source, public_name_modules())
    assert len(found) == 1 and expected in found[0], found


def test_the_check_allows_imports_from_the_same_layer_or_below():
    source = "from .arguments import check_range\nfrom workbook import SURROGATES\nimport numpy\n"
    assert problems("layers", source, public_name_modules()) == []


def test_importing_every_module_below_the_figures_loads_nothing_above_them(tmp_path):
    """The same rule, observed: a fresh interpreter imports them all and lists the workbook modules loaded.

    (TensorFlow itself loads Matplotlib and IPython, so only the workbook's own modules tell.)
    """
    below = sorted(LAYERS["foundation"] | LAYERS["maths"] | LAYERS["layers"] | LAYERS["models and monitor"])
    code = (
        "import importlib, sys\n"
        f"for name in {below!r}:\n"
        "    importlib.import_module('workbook.' + name)\n"
        "print(sorted(name[9:] for name in sys.modules if name.startswith('workbook.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(PACKAGE.parent), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = set(ast.literal_eval(result.stdout.strip().splitlines()[-1]))
    assert loaded >= set(below)
    assert loaded - set(below) == set()


def test_the_readme_table_of_layers_lists_the_same_modules_in_the_same_order():
    readme = (PACKAGE.parent / "README.md").read_text()
    section = readme.split("## Working on the workbook", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and ".py`" in line]
    in_readme = [set(re.findall(r"`(\w+)\.py`", row)) for row in rows]
    assert in_readme == [LAYERS[layer] for layer in ORDER]
