"""The finder's advice fixes the code: on public cases kept apart from the ones the hints were written for.

For each case of tests/finder_fix_corpus.py a plain GradientTape (not the finder) first
confirms that the broken code gets no gradient and that the fixed code, the hint's fix
applied as written, does. The finder must then name the marked culprit (a hit), and its
hint must carry the words of that fix (a fixed hit). At least 90% of the hits must be fixed.
"""

import inspect
import pathlib
import re

import finder_fix_corpus
import keras
import pytest
import tensorflow as tf

import workbook

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = pathlib.Path(finder_fix_corpus.__file__).resolve()
#: The files the hints were written against: no case here may come from a page they cite.
EARLIER = ("finder_corpus.py", "gradient_killers.py", "test_hints.py", "test_diagnosis.py", "test_finder_corpus.py")
MARKER = re.compile(r"#\s*culprit:\s*(\S+)\s+(\S+)")  # a shared marker's words are overridden by Case.culprit
GOAL = 0.9


def expected(marked):
    """(op type, reason, line) of the ``# culprit:`` marker in the source of ``marked`` (a function or class)."""
    lines, start = inspect.getsourcelines(marked)
    for offset, text in enumerate(lines):
        match = MARKER.search(text)
        if match:
            return match.group(1), match.group(2), start + offset
    raise AssertionError(f"{marked.__name__} has no culprit marker")


def flows(target, example):
    """Whether every trainable source gets a non-zero gradient, measured with a plain GradientTape."""
    parts = [tf.convert_to_tensor(p) for p in (example if isinstance(example, tuple) else (example,))]
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


def finder_verdict(builder):
    """(hit, fixed, report): the finder named the marked culprit; its hint names the case's fix."""
    built = builder()
    report = workbook.find_gradient_breaks(built.broken, built.example, **built.options)
    op_type, reason, line = expected(built.marked or builder)
    op_type, reason = built.culprit or (op_type, reason)
    culprit = report.culprit
    hit = (
        culprit is not None
        and (culprit.op_type, culprit.reason) == (op_type, reason)
        and culprit.line == line
        and pathlib.Path(culprit.file).resolve() == SOURCE
    )
    return hit, hit and built.words in culprit.hint, report


def test_no_case_comes_from_a_page_the_earlier_cases_cite():
    earlier = "\n".join((HERE / name).read_text() for name in EARLIER)
    sources = [builder.source for builder in finder_fix_corpus.CASES]
    assert all(source.startswith("https://") for source in sources)
    assert [source for source in sources if source in earlier] == []
    assert not any("finder_fix_corpus" in (HERE / name).read_text() for name in EARLIER)


@pytest.mark.parametrize("builder", finder_fix_corpus.CASES, ids=lambda b: b.__name__)
def test_a_gradient_tape_confirms_the_break_and_the_fix(builder):
    built = builder()
    assert not flows(built.broken, built.example), "the broken code should get no gradient"
    assert flows(built.fixed, built.example), "the fixed code should get a gradient"


@pytest.mark.parametrize("builder", finder_fix_corpus.CASES, ids=lambda b: b.__name__)
def test_the_finder_names_the_culprit_and_its_fix(builder):
    hit, fixed, report = finder_verdict(builder)
    assert hit, str(report)
    assert fixed, f"the hint does not name {builder().words!r}:\n{report}"


def test_at_least_nine_in_ten_hits_are_fixed_by_their_hint():
    verdicts = [finder_verdict(builder)[:2] for builder in finder_fix_corpus.CASES]
    hits = sum(hit for hit, _ in verdicts)
    fixed = sum(fixed for _, fixed in verdicts)
    print(f"{len(verdicts)} cases, {hits} hits, {fixed} fixed by their hint ({fixed / max(hits, 1):.0%})")
    assert hits >= GOAL * len(verdicts)
    assert fixed >= GOAL * hits
