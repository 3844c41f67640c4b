"""Advice checked before it is shown: each candidate fix applied to your own code, and measured.

Introduced in 03_finding_gradient_killers.ipynb (the section "The fix, checked on your example").
A hint of the form "Replace `OLD` with `NEW`" (:mod:`workbook.finder.advice.rewrites`) is applied
the way you would apply it: in the function whose line made the culprit, OLD becomes NEW.
The target then runs once more, eagerly, on your example, under a ``GradientTape``, and the
candidate passes when the gradient now reaches every input and weight that the culprit
starved, and the output stays what it was. The first candidate that passes is shown, with
"Checked on your example: ..."; one that fails is never shown as the fix. Failing that, one that
gets the gradient past this line while a later row still cuts it, or one that passes it while
moving the output (an interpolation, another random draw), is shown saying so. The function
is put back as it was afterwards, also when the check fails.
"""

import contextlib
import gc
import re
import textwrap
import types

import numpy as np

from workbook.core.internals import kept_random_state
from workbook.finder.advice.rebuilt import edited_source, runs_once
from workbook.finder.advice.words import CHECKED
from workbook.finder.walk.reach import tf_variable

REPLACE = re.compile(r"[Rr]eplace `([^`]+)` with `([^`]+)`")
#: The verdicts of a fix that gets the gradient past its line while a later row still cuts it; "unreached" when
#: that was known from the cuts measured before the fix (see :func:`_past_as_measured`).
PAST = ("past", "unreached")
#: How far the output may move and still be "unchanged": relative to its largest value, float32 round-off.
TOLERANCE = 1e-4


def check_culprit(report, followed, rebuilt, measured):
    """Choose the culprit's hint among its candidates by applying each to your code; mark the one shown.

    ``followed`` is the :class:`~workbook.finder.trace.targets.Target` the report was made on, and
    ``measured`` the :class:`~workbook.finder.measure.cut.MeasuredCut` s found on it (where its gradient died). A
    culprit with no candidate that can be applied keeps its hint as it is. A culprit on a line that
    runs once, when the model is made, is checked on the model made again (``rebuilt``, a
    :class:`~workbook.finder.advice.rebuilt.Rebuilt`); where it cannot be, its fix says it was not checked.
    """
    if not has_a_fix_to_check(report):
        return
    culprit = report.culprit
    once = runs_once(culprit)
    starving = _starving(report, culprit, once)
    names = ", ".join(report.sources[i].label for i in starving)
    alone = len(report.findings) == 1
    check = (
        _Rebuilt(followed, culprit, starving, alone, rebuilt)
        if once
        else _Check(followed, culprit, starving, alone, measured)
    )
    # A cause read from a layer's code (a disconnected weight) has one hint, not a list of candidates.
    chosen, tried = check.choose(culprit.candidates or ([culprit.hint] if once else []), names)
    _show(culprit, chosen, tried, once)


def _show(culprit, chosen, tried, once):
    """Show on ``culprit`` the fix ``chosen``, or what was ``tried``, or that a fix of a run-once line is unchecked."""
    if chosen is not None:
        culprit.hint, culprit.checked = chosen, True
    elif tried:
        culprit.hint = CHECKED["none_passed"].format(tried="; ".join(tried), hint=culprit.fallback)
        culprit.checked = False
    elif once and _replacements(culprit.hint):
        culprit.hint += CHECKED["not_checked"]


def has_a_fix_to_check(report):
    """Whether :func:`check_culprit` has anything to run: a culprit at a line of yours that starves a source."""
    culprit = report.culprit
    return bool(culprit is not None and culprit.file and _starving(report, culprit, runs_once(culprit)))


def _partly(reached, change, names):
    """What the check says of a fix that gets past this line only, or that moves the output."""
    if reached in PAST:
        return CHECKED["past"]
    return CHECKED["changed"].format(names=names, change=f"{change:.3g}")


def _starving(report, culprit, once=False):
    """The indices of the float sources ``culprit`` cuts that the tape measured no gradient for ([] if none).

    A weight the culprit leaves disconnected counts only when the line runs ``once`` (it is
    checked on the model made again); its finding does not list what it cuts otherwise.
    """
    return [
        index
        for index, status in enumerate(report.sources)
        if status.owner in culprit.cuts and status.measured != "flowing" and status.static != "not a float"
    ]


class _Check:
    """Applies candidate fixes to the code of one culprit, against one run of the code as it is."""

    def __init__(self, followed, culprit, starving, alone, measured=()):
        self.followed, self.culprit, self.starving, self.alone = followed, culprit, starving, alone
        self.measured = list(measured)
        self._baseline = self._functions = None
        # Once a fix that gets past this line is chosen, only one that passes can replace it: whether a
        # later fix gets past the line is not measured (the measurement traces the code again).
        self._past_chosen = False

    def choose(self, hints, names):
        """(the first of ``hints`` that passes, with what the check found; or None) and what failed, in words.

        A fix that brings the gradient to every starving source with the output unchanged wins. Else
        the first that gets it past this line (a later row cuts it too), or that passes it while
        computing something a little different (an interpolation, another draw), saying so. The
        search ends early where no later hint can pass (:meth:`_none_later_passes`).
        """
        tried, fallback, hints = [], None, list(hints)
        for index, hint, pairs, (reached, change) in self.verdicts(hints):
            if reached == "passed" and change <= TOLERANCE:
                return hint + CHECKED["passed"].format(names=names), tried
            if reached == "cut" or (reached in PAST and change > TOLERANCE):
                tried.append(CHECKED["cut" if reached == "cut" else "output"].format(fix=pairs[0][1]))
            elif fallback is None:
                fallback = hint + _partly(reached, change, names)
                self._past_chosen = True
                if self._none_later_passes(reached, hints[index + 1 :]):
                    break
        return fallback, tried

    def verdicts(self, hints):
        """(position, hint, its replacements, its verdict) of each of ``hints`` that can be applied, lazily."""
        for index, hint in enumerate(hints):
            pairs = _replacements(hint)
            verdict = self.verdict(pairs) if pairs else None
            if verdict:
                yield index, hint, pairs, verdict

    def _none_later_passes(self, reached, later):
        """Whether no ``later`` hint can pass, once one was judged ``reached`` (see :func:`_past_as_measured`).

        So when no gradient reached the line before the fix ("unreached") and each later one rewrites that line alone.
        """
        # A hint with no replacement is never applied.
        return reached == "unreached" and all(_on_the_line(self.culprit, _replacements(hint)) for hint in later)

    def verdict(self, pairs):
        """What :func:`_try` says of ``pairs``, or None if they cannot be applied (or the code fails as it is)."""
        if self._baseline is None:
            self._functions = _functions_at(self.culprit.file, self.culprit.line)
            # The code as it is: only its outputs are compared with a fix's, so no gradient is taken.
            self._baseline = bool(self._functions) and (_run(self.followed, gradients=False) or False)
        if not self._baseline:
            return None
        alone = self.alone or self._past_chosen  # "past" is not asked for: a fix that does not pass counts as "cut"
        before = (self._baseline, self._functions, self.measured)
        return _try(self.followed, self.culprit, pairs, before, self.starving, alone)


class _Rebuilt(_Check):
    """Applies candidate fixes to a line that runs once, by making the target again with each (``rebuilt``)."""

    def __init__(self, followed, culprit, starving, alone, rebuilt):
        super().__init__(followed, culprit, starving, alone)
        self.rebuilt = rebuilt

    def verdict(self, pairs):
        """("passed" or "cut", how far the output moved) on the target made again with ``pairs``; None if not made."""
        made, after = self._run_made_again(pairs)
        if after is None:
            return None
        outputs, flows = after
        flowing = _flowing_by_name(self.followed, made, flows)
        still = [i for i in self.starving if not flowing.get(_source_name(self.followed, i), False)]
        if still and not self.alone:  # another row may cut them too: whether this line still does is not known
            return None
        return ("cut" if still else "passed"), _change(self._baseline[0], outputs)

    def _run_made_again(self, pairs):
        """(the target made again with ``pairs``, :func:`_run` of it); (None, None) if it cannot be made or run."""
        if self._baseline is None:
            self._baseline = _run(self.followed, gradients=False) or False  # only its outputs are compared
        made = self.rebuilt.followed(pairs) if self._baseline and self.rebuilt is not None else None
        return (made, _run(made)) if made is not None else (None, None)


def _source_names(followed):
    """The name of each source of ``followed``, in the order of its gradients: inputs, then weights (by path)."""
    return [name for name, _ in followed.inputs] + [v.path for v in followed.variables]


def _source_name(followed, index):
    return _source_names(followed)[index]


def _flowing_by_name(followed, made, flows):
    """Source name (as ``followed`` names them) -> whether the gradient reaches it in the target ``made`` again.

    Weights are matched by path, or by position when both have as many (a layer made again inside
    another gets a new name, and so do its weights' paths).
    """
    names, made_names = _source_names(followed), _source_names(made)
    if len(names) == len(made_names):
        return dict(zip(names, flows, strict=True))
    return dict(zip(made_names, flows, strict=True))


def _replacements(hint):
    """[(old, new), ...] of a hint that starts "Replace `OLD` with `NEW`" (", and replace ..."), else []."""
    pairs, end = [], 0
    for match in REPLACE.finditer(hint):
        if hint[end : match.start()] != ("" if not pairs else ", and "):
            break
        pairs.append((match.group(1), match.group(2)))
        end = match.end()
    return pairs


def _try(followed, culprit, pairs, before, starving, alone):
    """(verdict, how far the output moved: :func:`_change`) with ``pairs`` applied, or None if they cannot be.

    ``before`` is (the run of the code as it is, the functions that hold the culprit's line, the
    measured cuts of the code as it is). The verdict is "passed" (the gradient reaches every
    starving source), "past" (it gets past the culprit's line, and a later row cuts it: ``alone``
    is False), or "cut".
    """
    baseline, functions, measured = before
    codes = [_edited_code(function, pairs) for function in functions]
    if not functions or None in codes:
        return None
    with contextlib.ExitStack() as stack:
        for function, code in zip(functions, codes, strict=True):
            stack.enter_context(_swapped(function, code))
        after = _run(followed)
        if after is None:
            return None
        outputs, flows = after
        change = _change(baseline[0], outputs)
        still = [i for i in starving if not flows[i]]
        verdict = _verdict(followed, culprit, still, alone, _standing(measured, culprit, pairs, change))
    return verdict, change


def _standing(measured, culprit, pairs, change):
    """The cuts ``measured`` before the fix ``pairs``, if they still stand for it: see :func:`_past_as_measured`.

    They do for a fix of the culprit's line alone that leaves the output exactly as it was; else ().
    """
    return measured if change == 0.0 and _on_the_line(culprit, pairs) else ()


def _on_the_line(culprit, pairs):
    """Whether every replacement of ``pairs`` rewrites code on the culprit's line."""
    return all(old in (culprit.code or "") for old, _ in pairs)


def _verdict(followed, culprit, still, alone, measured):
    """ "passed" if no source is ``still`` starving; "past" if the gradient gets past the culprit's line; else "cut".

    "unreached" is "past" known from what was measured before the fix. ``measured`` are the cuts
    measured on the code as it is, given only when the fix changes the culprit's line alone and
    leaves the output exactly as it was (see :func:`_past_as_measured`).
    """
    if not still:
        return "passed"
    if alone:
        return "cut"
    if _past_as_measured(culprit, still, measured):
        return "unreached"
    return "cut" if _still_dies_at(followed, culprit, still) else "past"


def _past_as_measured(culprit, still, measured):
    """Whether the cuts measured before the fix already show that its line is not where ``still`` starve.

    The fix changes the culprit's line alone and its output is exactly what it was, so the values
    after the line are too, and the ops of every other line get the gradient they got before. If no measured cut
    was at the line then (the gradient reached it and went on, or never reached it), and another
    was on the way of ``still``, the line gets what it got before: the same cuts stand and none
    is at the line, which is what measuring again would find; and no other rewrite of the line
    alone that keeps the output can bring the gradient further. Otherwise (False: a cut at the line,
    or none measured) only measuring again tells.
    """
    mine = [cut for cut in measured if cut.sources & set(still)]
    return bool(mine) and not any(_at_the_line(cut, culprit, any_op=True) for cut in measured)


def _at_the_line(cut, culprit, any_op=False):
    """Whether measured ``cut`` is an op like the culprit (any op, with ``any_op``), made at the culprit's line."""
    from workbook.finder.trace.frames import user_frame

    alike = any_op or cut.op.type == culprit.op_type
    return alike and user_frame(cut.op.traceback)[:2] == (culprit.file, culprit.line)


def _still_dies_at(followed, culprit, starving):
    """Whether the measured gradient of ``starving`` still dies at an op like the culprit, on its line."""
    from workbook.finder.measure.cut import measured_cuts

    cuts = measured_cuts(followed, starving, lambda concrete, arguments: concrete(*arguments))
    return not cuts or any(_at_the_line(cut, culprit) for cut in cuts)


def _functions_at(file, line):
    """The Python functions (closures too) made from the innermost code of ``file`` that holds ``line``.

    The code is looked up from the module of ``file`` (or ``__main__``, for a notebook cell), inside
    its functions and classes; the functions made from it are every function alive that runs that
    code: a closure made per call, or a function that IPython's autoreload gave the new code of an
    edited cell or module while a model built before still holds it.
    """
    codes = [code for code in _codes_of(file) if _holds(code, file, line)]
    if not codes:
        return []
    code = max(codes, key=lambda c: c.co_firstlineno)
    return _functions_running(code)


def _functions_running(code):
    """Every Python function alive that runs ``code``, read from the collector's list of objects.

    Not ``gc.get_referrers(code)``: it asks every object of the process for what it refers to,
    and an extension object whose answer is broken crashes the kernel (it did beside two Keras
    ResNet50 models). Listing the objects asks them nothing.
    """
    objects = gc.get_objects()
    try:
        return [f for f in objects if type(f) is types.FunctionType and f.__code__ is code]
    finally:
        del objects


def _codes_of(file):
    """Every code object compiled from ``file`` that its module's (or ``__main__``'s) names lead to."""
    import sys

    modules = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == file]
    modules += [sys.modules["__main__"]] if "__main__" in sys.modules else []
    names = {module.__name__ for module in modules}
    stack, seen, codes = [vars(module) for module in modules], set(), []
    while stack:
        item = stack.pop()
        if id(item) not in seen:
            seen.add(id(item))
            if isinstance(item, types.CodeType) and item.co_filename == file:
                codes.append(item)
            stack.extend(_inside(item, names))
    return codes


def _inside(item, names):
    """What may hold code inside ``item``: a namespace's values, a class's, a function's code, a code's constants."""
    if isinstance(item, dict):
        return list(item.values())
    if isinstance(item, type):
        return [dict(vars(item))] if getattr(item, "__module__", None) in names else []
    if isinstance(item, types.CodeType):
        return [c for c in item.co_consts if isinstance(c, types.CodeType)]
    if isinstance(item, types.FunctionType):
        return [item.__code__]
    return _wrapped(item)


def _wrapped(item):
    """[the Python function inside ``item``] for a method or a tf.function, else []."""
    try:  # any other object may answer getattr in its own way
        inner = getattr(item, "__func__", None) or getattr(item, "python_function", None)
    except Exception:
        return []
    return [inner] if isinstance(inner, types.FunctionType) else []


def _holds(code, file, line):
    """Whether the code object ``code`` was compiled from ``file`` and spans ``line``."""
    if code.co_filename != file or code.co_firstlineno > line:
        return False
    return line <= max((number for _, _, number in code.co_lines() if number is not None), default=0)


def _edited_code(function, pairs):
    """The code of ``function`` with each OLD of ``pairs`` replaced by its NEW; None if an OLD is not once in it."""
    source = edited_source(function, pairs)
    if source is None:
        return None
    code = function.__code__
    free = code.co_freevars
    if free == ("__class__",):  # a method that calls super(): compiled inside a class, as it was written
        wrapper, indent = "class _Fixed:\n", "    "
    elif free:
        wrapper = "def _fixed():\n" + "".join(f"    {name} = None\n" for name in free)
        indent = "    "
    else:
        wrapper, indent = "", ""
    body = textwrap.indent(source, indent)
    padding = "\n" * max(code.co_firstlineno - 1 - wrapper.count("\n"), 0)
    try:
        module = compile(padding + wrapper + body, code.co_filename, "exec")
    except SyntaxError:
        return None
    found = _code_named(module, code.co_name)
    return found if found is not None and found.co_freevars == free else None


def _code_named(code, name):
    """The code object called ``name`` among the constants of ``code``, searched depth first."""
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            if constant.co_name == name:
                return constant
            found = _code_named(constant, name)
            if found is not None:
                return found
    return None


@contextlib.contextmanager
def _swapped(function, code):
    """``function`` runs ``code`` inside the ``with``; the names a fix uses are there; all put back after."""
    import keras
    import tensorflow as tf

    import workbook

    names = {"workbook": workbook, "keras": keras, "ops": keras.ops, "tf": tf, "np": np}  # what a hint's code uses
    added = [name for name in names if name not in function.__globals__]
    original = function.__code__
    try:
        function.__globals__.update({name: names[name] for name in added})
        function.__code__ = code
        yield
    finally:
        function.__code__ = original
        for name in added:
            function.__globals__.pop(name, None)


def _run(followed, gradients=True):
    """(float outputs as arrays, per source whether its gradient has an entry that is not 0); None if it fails.

    With ``gradients=False`` the run is forward only, and no source is said to get a gradient.
    """
    import tensorflow as tf

    eager = tf.config.functions_run_eagerly()
    try:
        # Eagerly, so that a tf.function of yours runs the fixed code, not its old trace.
        tf.config.run_functions_eagerly(True)
        outputs, gradients = _outputs_and_gradients(followed, gradients)
    except Exception:  # the fix does not run on this code: it is not the fix
        return None
    finally:
        tf.config.run_functions_eagerly(eager)
    values = [np.asarray(t) for t in tf.nest.flatten(outputs) if tf.is_tensor(t) and t.dtype.is_floating]
    flows = [g is not None and bool(tf.reduce_any(tf.convert_to_tensor(g) != 0)) for g in gradients]
    return values, flows


def _outputs_and_gradients(followed, wanted=True):
    """The outputs of one run of ``followed`` on its example, and the gradient of their sum for each source.

    With ``wanted`` False: the outputs of a run without a tape, and no gradient (None) for each source.
    """
    import tensorflow as tf

    from workbook.finder.measure.cut import sum_of_float_outputs

    inputs = [tensor for _, tensor in followed.inputs]
    variables = [tf_variable(v) for v in followed.variables]
    with kept_random_state(), tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch([t for t in inputs if t.dtype.is_floating] + variables if wanted else [])
        outputs = followed.call(*followed.arguments)
        scalar = sum_of_float_outputs(outputs)
    if not wanted:  # nothing watched, nothing recorded: the same run, without its backward pass
        return outputs, [None] * len(inputs + variables)
    try:
        gradients = tape.gradient(scalar, inputs + variables, unconnected_gradients=tf.UnconnectedGradients.NONE)
    except (LookupError, tf.errors.OpError):  # an op with no gradient registered is still on the way: none arrives
        gradients = [None] * len(inputs + variables)
    return outputs, gradients


def _change(before, after):
    """How far the outputs moved: the largest difference relative to the largest value (at least 1); inf if reshaped."""
    if len(before) != len(after) or any(old.shape != new.shape for old, new in zip(before, after, strict=True)):
        return float("inf")
    change = 0.0
    for old, new in zip(before, after, strict=True):
        if old.size:
            scale = max(float(np.max(np.abs(old))), 1.0)
            change = max(change, float(np.max(np.abs(old.astype("float64") - new))) / scale)
    return change
