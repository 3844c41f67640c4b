"""The package's rooms depend on each other in one direction only.

The rules are import-linter's contracts in pyproject.toml, which `make lint` checks with
`lint-imports` (every import statement of every module, those inside functions too): the
foundations (core) at the bottom, then the topics the notebooks teach (surrogates, finder,
estimators; none imports another), then the monitor, then the lab and workbook.layers, then the
instructor's course; and the maths, layers and recording never import display code.
Here: that every module is in a layer, that the contracts hold through the real command line,
what import-linter cannot see (the root's lazy names), and the README's table kept equal to the
contract. The same rule is observed in a fresh interpreter in
tests/test_fresh_interpreter.py.
"""

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys

import tomllib
from notebook_runner import FRESH_PYTHON_SECONDS

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "workbook"
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = {contract["type"]: contract for contract in CONFIG["contracts"]}
LAYERS = [[name.strip() for name in layer.split("|")] for layer in CONTRACTS["layers"]["layers"]]
NO_DISPLAY = CONTRACTS["forbidden"]["source_modules"]
DISPLAY = [name for name in CONTRACTS["forbidden"]["forbidden_modules"] if name.startswith("workbook.")]
LINT_IMPORTS = shutil.which("lint-imports", path=os.path.dirname(sys.executable))


def modules():
    """Every module of the package, dotted, from the files on disk."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def lint_imports(root):
    """`lint-imports` run as `make lint` runs it, on the package under ``root``."""
    assert LINT_IMPORTS, "lint-imports is not installed next to this Python (requirements-dev.txt)"
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(root), "HOME": str(root)},
        timeout=FRESH_PYTHON_SECONDS,
    )


def test_every_module_is_in_a_layer_and_every_module_below_the_display_is_named():
    in_layers = [name for layer in LAYERS for name in layer]
    for name in modules():
        if name != "workbook":
            assert any(name == room or name.startswith(room + ".") for room in in_layers), f"{name}: in no layer"
    display_free = set(NO_DISPLAY) | set(DISPLAY)
    below_course = [name for name in modules() if name.count(".") >= 2 and not name.startswith("workbook.course.")]
    # A folder named in a contract names every module in it (import-linter's own reading).
    unnamed = sorted(
        name for name in below_course if not any(name == n or name.startswith(n + ".") for n in display_free)
    )
    assert not unnamed, f"pyproject.toml: do these draw (forbidden_modules) or not (source_modules)? {unnamed}"
    missing = sorted(display_free - set(modules()))
    assert not missing, f"pyproject.toml's contracts name modules that do not exist: {missing}"


def test_the_contracts_hold():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert f"Contracts: {len(CONFIG['contracts'])} kept, 0 broken." in result.stdout


def test_no_module_of_the_package_reaches_a_name_through_the_root():
    """``from workbook import NAME`` loads NAME's module lazily, where import-linter cannot see it."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "workbook":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom) and node.level:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} (relative)")
    assert not found, f"import the defining module by its full name instead: {found}"


def test_the_readme_table_of_rooms_lists_the_layers_in_order():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Working on the workbook", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`workbook" in line]
    in_readme = [re.findall(r"`(workbook[\w.]*)`", row.split("|")[1]) for row in rows]
    assert in_readme == LAYERS
