"""find_gradient_breaks on code it did not write: the public cases of tests/finder_corpus.py.

For each case the expected culprit (op type, reason, line) is read from the hand-written
marker next to the line, or the case is marked clean; the finder must agree, without an
exception, and a GradientTape run here independently must agree with the finder.
"""

import inspect
import pathlib
import re

import finder_corpus
import keras
import pytest
import tensorflow as tf

import workbook
from workbook.finder import diagnosis

SOURCE = pathlib.Path(finder_corpus.__file__).resolve()
expected = finder_corpus.culprit_marker
NUMBER = re.compile(r"\d+\.\d+")


def build(builder):
    built = builder()
    target, example = built[:2]
    return target, example, (built[2] if len(built) > 2 else {})


@pytest.mark.parametrize("builder", finder_corpus.CASES, ids=lambda b: b.__name__)
def test_each_case_names_its_public_source_and_one_answer(builder):
    """A web address to check the case against, and either a culprit marker or clean=True, never both."""
    assert builder.source.startswith("https://"), builder.source
    assert (expected(builder) is None) == builder.clean, "the culprit marker and clean=True disagree"


@pytest.mark.parametrize("builder", finder_corpus.CASES, ids=lambda b: b.__name__)
def test_the_finder_names_the_culprit_or_says_ok(builder):
    target, example, options = build(builder)
    report = workbook.find_gradient_breaks(target, example, **options)
    # The monitor's way in, told that a gradient starves: where it dies is measured in the first run. The same
    # report, but for its decimals (a case that draws new weights on every call moves its output by another amount).
    known = diagnosis.find_known_breaks(target, example, **options)
    assert re.sub(NUMBER, "#", str(known)) == re.sub(NUMBER, "#", str(report))
    answer = expected(builder)
    if answer is None:
        assert report.ok, str(report)
        assert all(s.static == "flowing" for s in report.sources), str(report)
        return
    op_type, reason, line = answer
    assert not report.ok, str(report)
    culprit = report.findings[0]
    assert (culprit.op_type, culprit.reason) == (op_type, reason), str(report)
    if line is not None:
        assert culprit.line == line and pathlib.Path(culprit.file).resolve() == SOURCE, str(report)
    assert culprit.hint


def tape_verdict(target, example, options):
    """Whether every trainable source gets a non-None gradient, measured here with a GradientTape."""
    parts = [tf.convert_to_tensor(p) for p in (example if isinstance(example, tuple) else (example,))]
    if isinstance(target, keras.Model):
        x, y = parts[:2]
        loss = options.get("loss")
        with tf.GradientTape() as tape:
            y_pred = target(x, training=True)
            value = loss(y, y_pred) if loss is not None else target.compute_loss(x=x, y=y, y_pred=y_pred)
        sources = target.trainable_variables
    else:
        sources = [p for p in parts if p.dtype.is_floating]
        if isinstance(target, keras.layers.Layer):
            if not target.built:
                target(*parts)  # build the weights first, as find_gradient_breaks does
            sources = [v.value for v in target.trainable_variables] + sources
        try:
            with tf.GradientTape() as tape:
                tape.watch(sources)
                value = target(*parts)
        except LookupError:  # a tf.function whose gradient cannot be built fails under a tape
            return False
        if not value.dtype.is_floating:
            return False
    try:
        gradients = tape.gradient(value, sources)
    except (LookupError, tf.errors.OpError):
        return False
    return bool(sources) and all(g is not None and bool(tf.reduce_any(tf.convert_to_tensor(g) != 0)) for g in gradients)


TAPE_CHECKED = [
    b
    for b in finder_corpus.CASES
    if "untraceable" not in inspect.getsource(b)
    and "train_step" not in inspect.getsource(b)
    and "rebinds" not in b.__name__
    and "built" not in b.__name__
    and b.__name__ != "integer_example"
]


@pytest.mark.parametrize("builder", TAPE_CHECKED, ids=lambda b: b.__name__)
def test_a_gradient_tape_agrees(builder):
    """The case's verdict, clean or not, is what TensorFlow's own tape measures (independent of the finder)."""
    target, example, options = build(builder)
    assert tape_verdict(target, example, options) == builder.clean
