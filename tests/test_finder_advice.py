"""The finder's advice fixes the code: its first suggestion, applied as printed, on public cases.

The cases (tests/finder_fix_corpus.py and tests/finder_fix_corpus_deep.py) are kept apart
from the ones the hints were first written against. For each, a plain GradientTape (not
the finder) first confirms that the broken code gets no gradient. The finder must then
name the marked culprit (a hit), and the hint's first suggestion, read from the printed
hint the way a student reads it, must fix the code (a fixed hit). The first code span
of the hint (between backticks) is that suggestion, in one of three forms:

- ``Replace `OLD` with `NEW```, possibly followed by ", and replace `OLD2` with `NEW2`": each
  OLD appears once in the code of the marked function or class (when its turn comes); the
  test replaces it by NEW in the case's file, runs the edited file, builds the
  case again from the same seed, and asks a GradientTape whether the gradient now reaches
  every trainable variable and float input, and whether the forward value (the output, or
  the model's loss) is the broken code's within the case's ``tolerance``;
- any other code, such as "Train on `workbook.losses.soft_iou`" or "Use
  `keras.layers.UpSampling2D(2)` instead": the test evaluates it and hands it to the case's
  ``rebuild``, then asks the same two questions; for a stand-in loss the question of
  intent is whether the loss is lowest at the ``perfect`` prediction;
- a hint that begins "No gradient can exist" (nothing of the parameters reaches the output as a
  function: a hash, an id, a sample's index) or "Zero almost everywhere" (a piecewise-constant
  step, whose surrogate is a choice) is honest. It must name what works instead (the case's
  ``words``, when it has no ``rebuild``), and that stand-in (the case's ``fixed``) must train.

A hint with no code, or whose code cannot be applied, fixes nothing; a replacement must also
say that the finder checked it on the case's own example before showing it (a line that runs
once, when the model is made, on the model made again with it). At least 90% of
the cases must be hits, and at least 90% of the hits fixed.
"""

import inspect
import pathlib
import re
import sys

import finder_fix_corpus
import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import workbook

try:  # the second round of public cases registers itself into finder_fix_corpus.CASES
    import finder_fix_corpus_deep  # noqa: F401
except ModuleNotFoundError:
    finder_fix_corpus_deep = None

HERE = pathlib.Path(__file__).resolve().parent
CORPORA = {HERE / "finder_fix_corpus.py", HERE / "finder_fix_corpus_deep.py"}
#: The files the hints were written against: no case here may come from a page they cite.
EARLIER = (
    "finder_corpus.py",
    "gradient_killers.py",
    "test_hints.py",
    "test_diagnosis.py",
    "test_finder_corpus.py",
)
MARKER = re.compile(r"#\s*culprit:\s*(\S+)\s+(\S+)")  # a shared marker's words are overridden by Case.culprit
CODE = re.compile(r"`([^`]+)`")
REPLACE = re.compile(r"[Rr]eplace `([^`]+)` with `([^`]+)`")
#: An honest hint: no gradient can exist (a hash, an id, a sample's index), or the true one is 0 almost everywhere.
HONEST = ("No gradient can exist", "Zero almost everywhere")
SEED = 7
CASES = finder_fix_corpus.CASES


def expected(marked):
    """(op type, reason, line) of the ``# culprit:`` marker in the source of ``marked`` (a function or class)."""
    lines, start = inspect.getsourcelines(marked)
    for offset, text in enumerate(lines):
        match = MARKER.search(text)
        if match:
            return match.group(1), match.group(2), start + offset
    raise AssertionError(f"{marked.__name__} has no culprit marker")


def build(builder):
    """The case, built from one seed, so that an edited copy starts from the same weights."""
    keras.utils.set_random_seed(SEED)
    return builder()


def flows(target, example):
    """Whether every trainable source gets a non-zero gradient, measured with a plain GradientTape."""
    parts = _parts(example)
    try:
        if isinstance(target, keras.Model) and type(target).train_step is not keras.Model.train_step:
            return _train_step_flows(target, parts)
        if isinstance(target, keras.Model):
            x, y = parts
            sources = target.trainable_variables
            with tf.GradientTape() as tape:
                value = target.compute_loss(x=x, y=y, y_pred=target(x, training=True))
        else:
            if isinstance(target, keras.layers.Layer) and not target.built:
                target(*parts)
            layer_variables = target.trainable_variables if isinstance(target, keras.layers.Layer) else []
            sources = [v.value for v in layer_variables] + [p for p in parts if p.dtype.is_floating]
            with tf.GradientTape() as tape:
                tape.watch(sources)
                value = tf.reduce_sum(tf.cast(target(*parts), tf.float32))
        gradients = tape.gradient(value, sources)
    except (LookupError, ValueError):  # no gradient registered; a numpy value in a traced loss
        return False
    return all(g is not None and bool(tf.reduce_any(tf.convert_to_tensor(g) != 0)) for g in gradients)


def _parts(example):
    return [tf.convert_to_tensor(p) for p in (example if isinstance(example, tuple) else (example,))]


def _train_step_flows(model, parts):
    """A custom train_step runs under tf.function (as fit runs it) and changes every kernel.

    A WGAN critic's last bias cancels out of its loss, so only kernels are asked to move.
    """
    kernels = [v for v in model.trainable_variables if v.path.endswith("kernel")]
    before = [v.numpy().copy() for v in kernels]
    try:
        tf.function(model.train_step)(tuple(parts))
    except Exception as error:  # the LookupError arrives wrapped by autograph
        assert "gradient registry has no entry" in str(error), error
        return False
    return all(bool((v.numpy() != b).any()) for v, b in zip(kernels, before, strict=True))


def forward(target, example):
    """What the code computes: a function's or layer's output, a compiled model's loss; None for a train_step."""
    parts = _parts(example)
    if isinstance(target, keras.Model) and type(target).train_step is not keras.Model.train_step:
        return None
    if isinstance(target, keras.Model):
        x, y = parts
        return target.compute_loss(x=x, y=y, y_pred=target(x)).numpy()
    return tf.convert_to_tensor(target(*parts)).numpy()


def first_suggestion(hint):
    """("replace", [(old, new), ...]) or ("use", code), or None: the hint's first code, read as a student reads it.

    Replacements that follow one another (", and replace `C` with `D`") are one suggestion.
    """
    first = CODE.search(hint)
    if first is None:
        return None
    pairs, end = [], max(first.start() - len("Replace "), 0)
    for replace in REPLACE.finditer(hint, end):
        if hint[end : replace.start()] != ("" if not pairs else ", and "):
            break
        pairs.append((replace.group(1), replace.group(2)))
        end = replace.end()
    if pairs:
        return "replace", pairs
    return "use", first.group(1)


def edited(builder, marked, pairs):
    """The case built again from its file, each ``old`` replaced by its ``new`` in ``marked``'s code.

    This is the edit a student makes: the edited file runs where ``workbook``, ``keras``, ``ops``, ``tf`` and ``np`` are
    imported, as a student who pastes the hint's code adds the import it needs.
    """
    module = sys.modules[builder.__module__]
    text = pathlib.Path(module.__file__).read_text().splitlines(keepends=True)
    lines, start = inspect.getsourcelines(marked)
    span = "".join(text[start - 1 : start - 1 + len(lines)])
    for old, new in pairs:
        if span.count(old) != 1:
            return None  # the hint names code that is not (once) in the user's code: nothing to apply
        span = span.replace(old, new)
    text[start - 1 : start - 1 + len(lines)] = [span]
    namespace = {**_namespace(), "__name__": f"{module.__name__}_edited", "__file__": module.__file__}
    exec(compile("".join(text), module.__file__, "exec"), namespace)
    return build(namespace[builder.__name__]).broken


def _namespace():
    return {"workbook": workbook, "keras": keras, "ops": ops, "tf": tf, "np": np}


def applied(builder, built, hint):
    """(fixed target, intent holds) after applying the hint's first suggestion; (None, reason) if it cannot be."""
    suggestion = first_suggestion(hint)
    if suggestion is None:
        return None, "the hint has no code to apply"
    if suggestion[0] == "replace":
        fixed = edited(builder, built.marked or builder, suggestion[1])
        if fixed is None:
            return None, f"one of {suggestion[1]!r} is not once in the case's code"
        return fixed, _same_forward(built, fixed)
    if built.rebuild is None:
        return None, f"the case cannot use {suggestion[1]!r}"
    try:
        value = eval(suggestion[1], _namespace())  # the hint's own code, as printed
    except Exception as error:
        return None, f"{suggestion[1]!r} does not run: {error!r}"
    keras.utils.set_random_seed(SEED)
    fixed = built.rebuild(value)
    if built.perfect is not None:
        return fixed, _lowest_at_perfect(value, built)
    return fixed, _same_forward(built, fixed)


def _same_forward(built, fixed):
    if built.tolerance is None:
        return True
    before, after = forward(built.broken, built.example), forward(fixed, built.example)
    if before is None:
        return True
    return before.shape == after.shape and np.allclose(before, after, rtol=built.tolerance, atol=built.tolerance)


def _lowest_at_perfect(loss, built):
    """A stand-in loss means what the metric meant when no prediction scores better than the perfect one."""
    x, y = _parts(built.example)
    loss = keras.losses.get(loss) if isinstance(loss, str) else loss
    at_perfect = float(ops.mean(loss(y, tf.convert_to_tensor(built.perfect))))
    at_prediction = float(ops.mean(loss(y, built.broken(x))))
    return at_perfect <= at_prediction + built.tolerance


def finder_verdict(builder):
    """(hit, fixed, why): the finder named the marked culprit; its first suggestion, applied, fixes the code."""
    built = build(builder)
    report = workbook.find_gradient_breaks(built.broken, built.example, **built.options)
    op_type, reason, line = expected(built.marked or builder)
    op_type, reason = built.culprit or (op_type, reason)
    culprit = report.culprit
    hit = (
        culprit is not None
        and (culprit.op_type, culprit.reason) == (op_type, reason)
        and culprit.line == line
        and pathlib.Path(culprit.file).resolve() in CORPORA
    )
    if not hit:
        return False, False, str(report)
    if culprit.hint.startswith(HONEST) and built.rebuild is None:
        fixed = bool(built.words) and built.words in culprit.hint and flows(built.fixed, built.example)
        return True, fixed, f"the honest hint names {built.words!r} and its stand-in trains:\n{culprit.hint}"
    target, intent = applied(builder, built, culprit.hint)
    if target is None:
        return True, False, f"{intent}:\n{culprit.hint}"
    # Also a fix of the line that made a layer, or of build(), which runs once: checked on the model made again.
    if first_suggestion(culprit.hint)[0] == "replace" and culprit.checked is not True:
        return True, False, f"a fix in the case's own code, shown without the check on its example:\n{culprit.hint}"
    fixed = flows(target, built.example) and intent is True
    return True, fixed, f"flows {flows(target, built.example)}, means the same {intent}:\n{culprit.hint}"


def test_no_case_comes_from_a_page_the_earlier_cases_cite():
    earlier = "\n".join((HERE / name).read_text() for name in EARLIER)
    sources = [builder.source for builder in CASES]
    assert all(source.startswith("https://") for source in sources)
    assert [source for source in sources if source in earlier] == []
    assert not any("finder_fix_corpus" in (HERE / name).read_text() for name in EARLIER)


@pytest.mark.parametrize("builder", CASES, ids=lambda b: b.__name__)
def test_a_gradient_tape_confirms_the_break(builder):
    built = build(builder)
    assert not flows(built.broken, built.example), "the broken code should get no gradient"
    if built.fixed is not None:
        assert flows(built.fixed, built.example), "the stand-in should get a gradient"


@pytest.mark.parametrize("builder", CASES, ids=lambda b: b.__name__)
def test_the_finder_names_the_culprit_and_its_first_suggestion_fixes_it(builder):
    hit, fixed, why = finder_verdict(builder)
    assert hit, why
    assert fixed, why


def test_the_first_suggestion_is_read_as_a_student_reads_it():
    assert first_suggestion("Replace `ops.round(h)` with `h + ops.stop_gradient(ops.round(h) - h)`.") == (
        "replace",
        [("ops.round(h)", "h + ops.stop_gradient(ops.round(h) - h)")],
    )
    assert first_suggestion("Replace `a = f(b)` with `g = f`, and replace `a` with `g(b)`. Replace `c` with `d`.") == (
        "replace",
        [("a = f(b)", "g = f"), ("a", "g(b)")],
    )
    assert first_suggestion("Train on `workbook.losses.soft_iou`; replace `a` with `b` later.") == (
        "use",
        "workbook.losses.soft_iou",
    )
    assert first_suggestion("Rewrite it with differentiable ops.") is None


def test_the_corpus_holds_at_least_sixty_public_cases():
    """Every case is a hit fixed by its first suggestion (checked one by one above), over enough cases to mean it."""
    assert len(CASES) >= 60, len(CASES)
