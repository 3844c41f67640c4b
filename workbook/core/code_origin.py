"""Whose code made an op: the student's, the workbook's, or a library's.

Introduced in 03_finding_gradient_killers.ipynb. :func:`workbook.find_gradient_breaks`
names the line of *your* code behind each op: of the frames that made it, the innermost
one that is neither a library's (the standard library, installed packages, code
TensorFlow generates) nor the workbook's own. Both are decided by where the file really
is, so a notebook or a script of yours is never mistaken for either.
"""

import ast
import functools
import inspect
import linecache
import os
import re
import sys
import sysconfig

__all__ = [
    "WORKBOOK_DIR",
    "is_library",
    "is_workbook",
    "scope_of",
    "source_span",
    "user_calls",
    "user_frame",
    "user_frames",
    "within",
]

WORKBOOK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY_DIRS = tuple(
    os.path.abspath(path) + os.sep
    for path in {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
)


def is_workbook(filename):
    """Whether ``filename`` is a module of the workbook package itself (any of its subpackages)."""
    return bool(filename) and os.path.abspath(filename).startswith(WORKBOOK_DIR + os.sep)


@functools.lru_cache(maxsize=4096)
def is_library(filename):
    """Whether code in ``filename`` is not the student's: a library's, the workbook's, or generated."""
    if not filename or filename.startswith("<") or "__autograph_generated" in filename:
        return True
    return os.path.abspath(filename).startswith(LIBRARY_DIRS) or is_workbook(filename)


def user_frames(frames, below=None):
    """The frames in the user's code, outermost first; with ``below`` (a file), only those under its innermost frame.

    A tool that calls the user's code (to trace it) passes its own file: the
    frames above that call are the tool's caller, not the code being looked at.
    """
    frames = list(frames or [])
    start = 0
    for index, frame in enumerate(frames):
        if below is not None and os.path.abspath(frame.filename) == os.path.abspath(below):
            start = index + 1
    return [frame for frame in frames[start:] if not is_library(frame.filename)]


def user_frame(frames, below=None):
    """(file, line, code) of the innermost frame in the user's code (see :func:`user_frames`), or (None, None, None)."""
    own = user_frames(frames, below)
    if not own:
        return None, None, None
    frame = own[-1]
    code = (getattr(frame, "line", None) or linecache.getline(frame.filename, frame.lineno)).strip()
    return frame.filename, frame.lineno, code


def user_calls(function, values):
    """(file, line, code) of each call of ``function`` in the user's code that could have made an object.

    Introduced in 03_finding_gradient_killers.ipynb: a layer that a Keras model calls for you
    (Sequential, a functional model) was made by a line of yours that no traced op remembers;
    this finds it by reading your code (your modules, scripts and notebook cells) for calls
    ``Name(...)`` or ``x.Name(...)`` of ``function`` (a class). ``values`` are the object's
    arguments as it reports them (a layer's ``get_config()``): a call that passes another
    literal value, or leaves out one whose default differs, is not the one. Of the calls left,
    those that pass the same ``name=`` come first, if any.
    """
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        parameters = {}
    found = {True: [], False: []}
    for filename in _user_source_files():
        source = "".join(linecache.getlines(filename))
        if not re.search(rf"\b{re.escape(function.__name__)}\s*\(", source):
            continue
        lines = source.splitlines()
        for line, passed in _calls(source, function.__name__):
            arguments = _bound(passed, parameters)
            if all(_agrees(value, values.get(key)) is not False for key, value in arguments.items()):
                named = _agrees(arguments.get("name"), values.get("name")) is True
                found[named].append((filename, line, lines[line - 1].strip()))
    return found[True] or found[False]


def scope_of(filename, line):
    """(filename, first line, last line) of the innermost function of ``filename`` around ``line``, else the whole file.

    Introduced in 03_finding_gradient_killers.ipynb: the code that made a model is read as one piece.
    """
    spans = _function_spans("".join(linecache.getlines(filename)))
    inner = [(first, last) for first, last in spans if first <= line <= last]
    first, last = max(inner, default=(1, sys.maxsize))
    return filename, first, last


def source_span(obj):
    """(filename, first line, last line) of the source of a function or class, or None where it has none."""
    try:
        lines, start = inspect.getsourcelines(obj)
        filename = inspect.getsourcefile(obj)
    except (TypeError, OSError):
        return None
    return filename, start, start + len(lines) - 1


def within(scope, filename, line):
    """Whether ``line`` of ``filename`` lies in ``scope`` (:func:`scope_of`)."""
    return filename == scope[0] and scope[1] <= line <= scope[2]


@functools.lru_cache(maxsize=256)
def _function_spans(source):
    """(first line, last line) of each function defined in ``source``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    return tuple((node.lineno, node.end_lineno) for node in ast.walk(tree) if isinstance(node, kinds))


def _user_source_files():
    """The files of the user's code loaded so far: modules, the script run, and notebook cells."""
    return _source_files_among(len(sys.modules), len(linecache.cache))


@functools.lru_cache(maxsize=1)
def _source_files_among(modules, cached):
    """:func:`_user_source_files`, read again only once a module or a cell has been added (``modules``, ``cached``)."""
    files = {getattr(module, "__file__", None) for module in list(sys.modules.values())}
    files.update(name for name in list(linecache.cache) if name.endswith(".py"))
    return tuple(sorted(f for f in files if f and f.endswith(".py") and not is_library(f)))


#: An argument whose value cannot be read from the source (a variable, an expression).
UNKNOWN = object()


@functools.lru_cache(maxsize=256)
def _calls(source, name):
    """(line, (positional values, keyword values)) of each call of ``name`` in ``source``; UNKNOWN for no literal."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    calls = []
    for node in ast.walk(tree):
        func = getattr(node, "func", None)
        if isinstance(node, ast.Call) and (getattr(func, "id", None) or getattr(func, "attr", None)) == name:
            positional = tuple(_literal(argument) for argument in node.args)
            keywords = tuple((k.arg, _literal(k.value)) for k in node.keywords if k.arg)
            calls.append((node.lineno, (positional, keywords)))
    return tuple(calls)


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return UNKNOWN


def _bound(passed, parameters):
    """Parameter name -> the value a call passes, or the default it leaves in place (UNKNOWN ones left out).

    Not ``inspect.Signature.bind_partial``: a Keras layer takes ``name=`` through ``**kwargs``, where
    binding would hide it in a dict, and a call that does not bind (one argument too many) is still
    the student's call to point at.
    """
    positional, keywords = passed
    names = [name for name, p in parameters.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    arguments = {name: p.default for name, p in parameters.items() if p.default is not p.empty}
    arguments.update(zip(names, positional, strict=False))
    arguments.update(keywords)
    return {key: value for key, value in arguments.items() if value is not UNKNOWN}


def _agrees(literal, value):
    """True if a literal argument and a reported value are the same, False if surely not, None if it cannot be told.

    Only values of one kind are compared (numbers, strings, booleans, sequences of them): an object
    may report an argument in another form than it was given (a factor 0.5 as the range (-0.5, 0.5)).
    """
    if isinstance(literal, (list, tuple)) and isinstance(value, (list, tuple)):
        return _sequences_agree(literal, value)
    kind = _kind(literal)
    return None if kind is None or kind != _kind(value) else literal == value


def _kind(value):
    if isinstance(value, bool):
        return bool
    if isinstance(value, (int, float)):
        return float
    return str if isinstance(value, str) else None


def _sequences_agree(literal, value):
    if len(literal) != len(value):
        return False
    verdicts = {_agrees(a, b) for a, b in zip(literal, value, strict=True)}
    if False in verdicts:
        return False
    return None if None in verdicts else True
