"""What the graded check cells of the assignment trust, and what they measure elsewhere.

Introduced in 05_assignment_quantized_autoencoder.ipynb (its hidden tests) and
course/README.md. A graded notebook runs the student's answer cells and the check
cells in one kernel, so an answer cell can rebind anything a check relies on. Three
defences, none of which trusts the student's kernel for its reference:

- :func:`assert_genuine` compares every function of the workbook, NumPy, Keras,
  TensorFlow and the few standard modules a check calls with the same functions in a
  fresh Python process, and fails the check when one was replaced;
- :func:`measure_reconstruction_apart` measures part (c)'s test error in a separate
  Python process, from the trained weights alone, on test images that process loads
  itself, through a 2-bit quantizer of its own;
- :func:`cell_timeout` gives nbgrader a time limit per cell that follows from the
  assignment's budget, so a looping answer costs minutes, not the whole grading run.

What a determined student can still do inside the kernel (rewrite this module's own
functions through their code objects, or read the hidden tests' verdicts and forge
output) is listed in course/README.md, with what to review by hand.
"""

import ast
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import types

import numpy as np

__all__ = [
    "assert_genuine",
    "replaced_functions",
    "measure_reconstruction_apart",
    "cell_timeout",
    "tampering_lines",
    "TIME_BUDGET_SECONDS",
    "TARGET_MSE",
]

#: Part (c)'s budget for building and training the model, and its target; the check
#: cell repeats both as literals, so that no answer cell can change what is graded.
TIME_BUDGET_SECONDS = 300
TARGET_MSE = 0.006
#: The test images part (c) is measured on: all 2,000 of the bundled test split.
N_TEST_MEASURED = 2000

# Modules whose functions a check calls, directly or through the workbook: these, and every
# module of theirs this process has loaded whose name starts with one of them. Classes are
# looked into (their methods) only where they belong to the same library.
_LIBRARIES = (
    "builtins",
    "math",
    "time",
    "subprocess",
    "json",
    "tempfile",
    "os",
    "types",
    "functools",
    "numpy",
    "keras",
    "tensorflow",
)
# Only what the checks reach: the rest of TensorFlow (thousands of modules) is left out.
_LIBRARY_PACKAGES = (
    "numpy",
    "keras.src.ops",
    "keras.src.backend.tensorflow",
    "keras.src.models",
    "keras.src.layers",
    "keras.src.trainers",
    "tensorflow.python.ops",
    "tensorflow.python.eager",
    "tensorflow.python.framework",
)

# The fresh process's fingerprints, by the modules asked for.
_pristine = {}

# What a Jupyter kernel itself replaces: ipykernel routes input() to the front end.
_KERNEL_REPLACES = frozenset({"builtins.input"})


def _code_digest(code):
    """A digest of what a code object does (marshal's output depends on reference counts)."""
    digest = hashlib.sha256()
    for part in (
        code.co_name,
        code.co_filename,
        code.co_firstlineno,
        code.co_code,
        code.co_names,
        code.co_varnames,
        code.co_freevars,
        code.co_argcount,
        code.co_kwonlyargcount,
    ):
        digest.update(repr(part).encode())
    for constant in code.co_consts:
        digest.update((_code_digest(constant) if isinstance(constant, types.CodeType) else _simple(constant)).encode())
    return digest.hexdigest()[:16]


def _simple(value):
    """``value`` if it is a plain constant (then its repr is stable across processes), else "object".

    Not the type: a default such as ``sys.stdout`` is a file in a fresh process and
    ipykernel's stream object in a kernel.
    """
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return repr(value)
    if isinstance(value, tuple):
        return "(" + ", ".join(_simple(item) for item in value) + ")"
    return "object"


def _function_digest(function, depth=0):
    """Code, name and defaults of a function, and of the functions it wraps (functools.wraps)."""
    text = (
        f"{_code_digest(function.__code__)} {getattr(function, '__qualname__', '')} "
        f"defaults {_simple(function.__defaults__)}"
    )
    wrapped = getattr(function, "__wrapped__", None)
    if isinstance(wrapped, types.FunctionType) and depth < 4:
        text += " wraps " + _function_digest(wrapped, depth + 1)
    return text


def _fingerprint(value):
    """What identifies a function across processes: its code, or its native name."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, types.FunctionType):
        return "function " + _function_digest(value)
    if isinstance(value, np.ufunc):
        return f"ufunc {value.__name__} {value.nin}->{value.nout}"
    if isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return f"builtin {getattr(value, '__module__', None)}.{getattr(value, '__qualname__', value.__name__)}"
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if callable(value) and not isinstance(value, type) and hasattr(value, "__qualname__"):
        # A wrapper object, such as NumPy's dispatcher for np.mean or a tf.function.
        wrapped = getattr(value, "__wrapped__", None) or getattr(value, "_implementation", None)
        inner = _function_digest(wrapped) if isinstance(wrapped, types.FunctionType) else ""
        return f"callable {type(value).__qualname__} {getattr(value, '__module__', None)}.{value.__qualname__} {inner}"
    return None


def _module_fingerprints(module, own_only=False):
    """{name: fingerprint} for a module's functions and its own classes' methods.

    With ``own_only``, only what the module defines itself: a name a module merely binds
    to another module's function (a loop variable left over from its import, say) may
    differ between processes with the order of imports.
    """
    root = module.__name__.split(".")[0]
    found = {}
    for name, value in list(vars(module).items()):
        if name.startswith("__"):
            continue
        if own_only and getattr(value, "__module__", None) != module.__name__:
            continue
        fingerprint = _fingerprint(value)
        if fingerprint is not None:
            found[f"{module.__name__}.{name}"] = fingerprint
        elif isinstance(value, type) and str(getattr(value, "__module__", "")).split(".")[0] == root:
            for attribute, member in list(vars(value).items()):
                fingerprint = _fingerprint(member)
                if fingerprint is not None and not fingerprint.startswith("module"):
                    found[f"{module.__name__}.{name}.{attribute}"] = fingerprint
    return found


def _fingerprints(module_names, reference=False):
    """Fingerprints of every function in the named modules that this process has imported.

    ``reference``: this is the fresh process, whose answer says what to compare. Inside a
    library's own modules it names only what each module defines; a name the kernel has
    and the reference does not is not compared.

    A module itself is fingerprinted by its file, so that an entry of ``sys.modules``
    replaced by another object (or another file) shows up too.
    """
    found = {}
    for name in module_names:
        module = sys.modules.get(name)
        if module is None:
            continue
        if not isinstance(module, types.ModuleType):
            found[name] = f"not a module: {type(module).__name__}"
            continue
        found[name] = f"module {getattr(module, '__file__', None)}"
        own_only = reference and name not in _LIBRARIES and not name.startswith("workbook")
        found.update(_module_fingerprints(module, own_only))
    return found


def _modules_to_compare():
    packages = tuple(f"{package}." for package in _LIBRARY_PACKAGES) + ("workbook.",)
    loaded = sorted(
        name
        for name, module in list(sys.modules.items())
        if module is not None and (name == "workbook" or name.startswith(packages))
    )
    return list(_LIBRARIES) + loaded


def replaced_functions(timeout=120):
    """Names of functions that differ from the same functions in a fresh Python process.

    Introduced in 05_assignment_quantized_autoencoder.ipynb (its hidden tests). The
    fresh process imports the same modules (and resolves the same ``workbook`` names)
    as this one and reports their fingerprints: a function's compiled code and
    defaults, a native function's name. A function an answer cell replaced, in the
    workbook or in a library a check calls, shows up here.

    Returns
    -------
    list of str
        Sorted dotted names, e.g. ``["numpy.mean", "workbook.check_quantizer"]``.
    """
    names = _modules_to_compare()
    import workbook

    resolved = sorted(name for name in vars(workbook) if name in getattr(workbook, "_EXPORTS", {}))
    key = (tuple(names), tuple(resolved))
    if key not in _pristine:  # one fresh process per kernel and set of modules: it takes seconds
        request = json.dumps({"modules": names, "workbook_names": resolved})
        result = _run_fresh(["fingerprints"], timeout, request)
        if result.returncode != 0:
            raise RuntimeError(f"the fresh process could not report its functions:\n{result.stderr[-2000:]}")
        _pristine[key] = json.loads(result.stdout.strip().splitlines()[-1])
    pristine = _pristine[key]
    here = _fingerprints(names)
    replaced = {
        name
        for name, fingerprint in here.items()
        if name in pristine and pristine[name] != fingerprint and name not in _KERNEL_REPLACES
    }
    # A workbook function deleted, or a module entry replaced by something without it.
    replaced |= {
        name
        for name, fingerprint in pristine.items()
        if name.startswith("workbook.")
        and name not in here
        and name.rsplit(".", 1)[0] in here
        and not fingerprint.startswith("module")
    }
    return sorted(replaced)


def assert_genuine():
    """Raise AssertionError if an answer cell replaced a function a check relies on.

    Introduced in 05_assignment_quantized_autoencoder.ipynb (its hidden tests).
    """
    replaced = replaced_functions()
    assert not replaced, (
        f"This notebook replaced {len(replaced)} function(s) that the checks rely on: "
        f"{', '.join(replaced[:8])}{' ...' if len(replaced) > 8 else ''}. A submission may define its own "
        f"functions, but must not change the workbook's, NumPy's, Keras's or TensorFlow's; this check "
        f"gives no points while they are changed."
    )


def measure_reconstruction_apart(model, target_mse=TARGET_MSE, timeout=300):
    """Part (c)'s test MSE, measured in a separate Python process from ``model``'s weights.

    Introduced in 05_assignment_quantized_autoencoder.ipynb (its hidden tests). The
    other process builds :func:`workbook.autoencoder` with a 2-bit quantizer of its own
    (``round(3 clip(x, 0, 1)) / 3``), loads the weights, loads all 2,000 bundled test
    images itself and computes the mean squared error. Nothing the student's kernel
    defines or changes takes part, apart from the weights.

    Returns
    -------
    bool
        True if that MSE is at most ``target_mse``; one line says what was measured.
    """
    try:
        weights = [np.asarray(weight) for weight in model.get_weights()]
    except Exception as error:
        print(f"✗ Could not read the weights of model: {type(error).__name__}: {error}")
        return False
    with tempfile.TemporaryDirectory(prefix="workbook-grading-") as folder:
        path = os.path.join(folder, "weights.npz")
        np.savez(path, *weights)
        result = _run_fresh(["reconstruction", path], timeout)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        print(f"✗ The separate measurement failed: {result.stderr.strip().splitlines()[-1:] or ['no output']}")
        return False
    measured = json.loads(lines[-1])
    if "error" in measured:
        print(f"✗ {measured['error']}")
        return False
    mse = measured["mse"]
    verdict = "✓" if mse <= target_mse else "✗"
    print(
        f"{verdict} measured apart: test MSE {mse:.5f} on all {measured['n_test']:,} bundled test images "
        f"(target {target_mse:g})."
    )
    return mse <= target_mse


def cell_timeout(cell):
    """Seconds nbgrader may spend on one cell of a submission (``Execute.timeout_func``).

    Introduced in course/README.md. Part (c)'s training cell may take the assignment's
    budget plus a minute for building the model; every other cell takes seconds in the
    reference solution and gets two minutes, so an endless loop costs at most that and
    the rest of the notebook is still graded.
    """
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "") if cell is not None else ""
    if grade_id in ("c_train_answer", "c_reconstruction"):
        return TIME_BUDGET_SECONDS + 60
    return 120


# What an honest answer never needs: tools that change code or modules behind their backs.
_TAMPERING_CALLS = {
    "setattr": "calls setattr",
    "delattr": "calls delattr",
    "__import__": "calls __import__",
    "exec": "runs code from a string (exec)",
    "eval": "runs code from a string (eval)",
    "compile": "compiles code from a string",
}
_TAMPERING_ATTRIBUTES = {
    "__code__",
    "__globals__",
    "__dict__",
    "__defaults__",
    "__kwdefaults__",
    "__closure__",
    "__class__",
    "__bases__",
    "__builtins__",
    "modules",
}
_TAMPERING_MODULES = {"builtins", "gc", "ctypes"}


def tampering_lines(notebook):
    """Lines of a submission's writable cells that change imported modules or objects.

    Introduced in course/README.md; :class:`workbook.autograde.GuardedExecute` calls it in
    the grader's own process, before the student's code runs. The cells read are those a
    student can write: answer cells, unlocked cells and added cells (nbgrader restores
    the locked ones). A line counts when it assigns to or deletes an attribute of a name
    that came from an ``import`` (``np.mean = ...``, ``workbook.check_quantizer = ...``), or
    uses ``setattr``, ``delattr``, ``__import__``, ``exec``, ``eval``, ``compile``,
    ``sys.modules``, ``__code__``-like attributes, or the ``builtins``, ``gc`` or
    ``ctypes`` modules.

    Returns
    -------
    list of (cell index, line number, line, reason)
        In the order of the notebook; empty for an honest submission.
    """
    from IPython.core.inputtransformer2 import TransformerManager

    transformer = TransformerManager()
    imported, found = set(), []
    for index, cell in enumerate(notebook.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") != "code":
            continue
        try:
            tree = ast.parse(transformer.transform_cell(cell.source))
        except SyntaxError:
            continue  # it fails when it runs, and earns nothing
        imported |= _imported_names(tree)
        if meta.get("locked"):
            continue
        lines = cell.source.splitlines()
        for node in ast.walk(tree):
            reason = _tampering_reason(node, imported)
            if reason:
                line_number = getattr(node, "lineno", 1)
                found.append((index, line_number, lines[line_number - 1] if line_number <= len(lines) else "", reason))
    return sorted(set(found))


def _imported_names(tree):
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def _tampering_reason(node, imported):
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            for element in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                root = element
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(element, ast.Attribute) and isinstance(root, ast.Name) and root.id in imported:
                    return f"changes {ast.unparse(element)}, which belongs to an imported module or object"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _TAMPERING_CALLS:
        return _TAMPERING_CALLS[node.func.id]
    if isinstance(node, ast.Attribute) and node.attr in _TAMPERING_ATTRIBUTES:
        return f"reaches {node.attr}"
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
        touched = [m for m in modules if m.split(".")[0] in _TAMPERING_MODULES]
        if touched:
            return f"imports {touched[0]}"
    return None


def _run_fresh(arguments, timeout, request=None):
    """``python -m workbook.grading ARGUMENTS`` in a fresh process that imports what this one does.

    It runs in an empty folder (no module a submission left in its own folder can shadow a
    library) with this process's import path, minus that folder, as PYTHONPATH: a workbook
    or library installed with ``--user`` or found through PYTHONPATH is found there too.
    """
    here = os.path.abspath(os.getcwd())
    path = [entry for entry in sys.path if entry and os.path.abspath(entry) != here]
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONSTARTUP", "PYTHONINSPECT")}
    env["PYTHONPATH"] = os.pathsep.join(path)
    with tempfile.TemporaryDirectory(prefix="workbook-fresh-") as empty:
        return subprocess.run(
            [sys.executable, "-m", "workbook.grading", *arguments],
            input=request,
            cwd=empty,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )


# --- what runs in the fresh process --------------------------------------------------


def _report_fingerprints(request):
    import importlib

    from .environment import _quiet_tensorflow

    _quiet_tensorflow()
    for name in request["modules"]:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    import workbook

    for name in request["workbook_names"]:
        getattr(workbook, name)
    return _fingerprints(request["modules"], reference=True)


def _measure_reconstruction(path):
    from .environment import _quiet_tensorflow

    _quiet_tensorflow()
    import keras

    from .data import load_mnist
    from .models import autoencoder

    def quantize_2bit(x):
        return keras.ops.round(3.0 * keras.ops.clip(x, 0.0, 1.0)) / 3.0

    with np.load(path) as stored:
        weights = [stored[f"arr_{i}"] for i in range(len(stored.files))]
    model = autoencoder(bottleneck=quantize_2bit)
    expected = [tuple(weight.shape) for weight in model.get_weights()]
    if [tuple(weight.shape) for weight in weights] != expected:
        return {
            "error": "part (c) is measured on workbook.autoencoder(bottleneck=...)'s layers; model has "
            f"weights shaped {[tuple(w.shape) for w in weights]}, not {expected}."
        }
    model.set_weights(weights)
    (_, _), (x_test, _) = load_mnist(n_test=N_TEST_MEASURED, source="bundled")
    reconstructions = np.asarray(model.predict(x_test, batch_size=250, verbose=0), dtype="float64")
    return {"mse": float(np.mean((reconstructions - x_test) ** 2)), "n_test": len(x_test)}


def _main(argv):
    if argv[:1] == ["fingerprints"]:
        print(json.dumps(_report_fingerprints(json.loads(sys.stdin.read()))))
    elif argv[:1] == ["reconstruction"] and len(argv) == 2:
        print(json.dumps(_measure_reconstruction(argv[1])))
    else:
        raise SystemExit("usage: python -m workbook.grading fingerprints < request.json | reconstruction WEIGHTS.npz")


if __name__ == "__main__":
    _main(sys.argv[1:])
