"""Search the installed workbook package for the assignment's answers: run as ``python -I answer_scan.py OUT [FIRST]``.

In a fresh interpreter that sees nothing of the course: every module of the package imported,
every callable in it (and in its module-level containers) tried as part (a)'s answer against the
requirement written out here, every string it holds searched for part (b)'s answer; and every
string literal of its source files read. Writes {"modules": how many, "found": [...]} to OUT as
JSON. FIRST, if given, is put first on the import path (a package with answers planted in it).
tests/test_grading_verdicts.py runs it.
"""

import ast
import contextlib
import importlib
import inspect
import io
import json
import pathlib
import pkgutil
import sys

if len(sys.argv) > 2:
    sys.path.insert(0, sys.argv[2])

import numpy as np
import tensorflow as tf

import workbook

answer = {"cast", "codes"}  # part (b): the op and the variable, as the title cell asks for them
x = np.linspace(-1.0, 2.0, 601, dtype="float32")
x = x[np.all(np.abs(x[:, None] - np.array([0.5 / 3, 1.5 / 3, 2.5 / 3, 0.0, 1.0])) > 1e-3, axis=1)]
forward = np.round(3 * np.clip(x, 0, 1)) / 3  # part (a): round(3 clip(x, 0, 1)) / 3 forward,
derivative = ((x >= 0) & (x <= 1)).astype("float32")  # the clip's derivative backward


def passes_part_a(fn):
    try:
        inspect.signature(fn).bind(x)
    except (TypeError, ValueError):
        return False
    try:
        xt = tf.constant(x)
        # What a function prints (a self-check, a tensor) stays out of the scan's own output.
        with tf.GradientTape() as tape, contextlib.redirect_stdout(io.StringIO()):
            tape.watch(xt)
            y = fn(xt)
        gradient = tape.gradient(y, xt)
        return bool(
            np.allclose(np.asarray(y, "float32"), forward, atol=1e-5)
            and gradient is not None
            and np.allclose(np.asarray(gradient), derivative, atol=1e-5)
        )
    except BaseException:  # anything the package's functions do with a tensor they were not made for
        return False


def strings(value):
    items = value.items() if isinstance(value, dict) else value
    if isinstance(value, dict):
        items = [part for pair in items for part in pair]
    return {item.strip().lower() for item in items if isinstance(item, str)}


# The quiet start's forwarder forks and ends the process that calls it: it is read, never called.
NEVER_CALLED = {"workbook.core.tensorflow_start"}
found, modules = [], ["workbook"]
modules += [info.name for info in pkgutil.walk_packages(workbook.__path__, "workbook.")]
for name in modules:
    try:
        module = importlib.import_module(name)
    except ImportError:  # needs an extra this Python lacks (nbgrader): nothing in it can be called here
        continue  # (its source is still read for the answer's words below)
    for attribute, value in list(vars(module).items()):
        if attribute == "__builtins__":  # Python's own, the same in every module (sum() alone took a minute)
            continue
        candidates = [value]
        if isinstance(value, (dict, list, tuple, set, frozenset)):
            candidates += list(value.values() if isinstance(value, dict) else value)
            if answer <= strings(value):
                found.append(f"{name}.{attribute} holds part (b)'s answer")
        for candidate in candidates:
            if getattr(candidate, "__module__", None) in NEVER_CALLED:
                continue
            if callable(candidate) and not inspect.isclass(candidate) and passes_part_a(candidate):
                found.append(f"{name}.{attribute} passes part (a)")
for path in pathlib.Path(workbook.__file__).parent.rglob("*.py"):
    literals = {
        node.value.strip().lower()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    if answer <= literals:
        found.append(f"{path.name} spells out part (b)'s answer")
pathlib.Path(sys.argv[1]).write_text(json.dumps({"modules": len(modules), "found": found}))
