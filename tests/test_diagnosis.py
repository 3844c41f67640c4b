"""find_gradient_breaks names the right op and line on a table of known culprits."""

import inspect
import pathlib

import finder_corpus
import gradient_killers
import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops
from notebook_runner import FRESH_PYTHON_SECONDS

import workbook
from workbook.core.gradients import value_and_gradient

EXAMPLE = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")
SOURCE = pathlib.Path(gradient_killers.__file__).resolve()


def expected_culprit(function):
    """(op type, reason, line) from the hand-written marker inside ``function``."""
    answer = finder_corpus.culprit_marker(function)
    assert answer is not None, f"{function.__name__} has no culprit marker"
    return answer


def round_a_sign_b_keep_c(a, b, c):
    return tf.round(a) + tf.sign(b) + c * 2.0


def test_each_input_is_cut_by_its_own_op():
    """Two inputs cut by two different ops, a third untouched: each finding names only its own input."""
    report = workbook.find_gradient_breaks(round_a_sign_b_keep_c, (EXAMPLE, EXAMPLE, EXAMPLE))
    assert [(f.op_type, f.reason, f.cuts) for f in report.findings] == [
        ("Round", "no_gradient", ["a (input)"]),
        ("Sign", "zero_gradient", ["b (input)"]),
    ], str(report)
    assert [s.static for s in report.sources] == ["cut", "cut", "flowing"]
    # independently: TensorFlow's tape gives None for a, zeros for b, twos for c
    a, b, c = (tf.constant(EXAMPLE) for _ in range(3))
    with tf.GradientTape() as tape:
        tape.watch([a, b, c])
        y = round_a_sign_b_keep_c(a, b, c)
    gradient_a, gradient_b, gradient_c = tape.gradient(y, [a, b, c])
    assert gradient_a is None and not np.any(gradient_b) and np.all(gradient_c.numpy() == 2.0)
    assert [s.measured for s in report.sources] == ["none", "zero", "flowing"]


@pytest.mark.parametrize("function", gradient_killers.CULPRITS, ids=lambda f: f.__name__)
def test_names_the_culprit_op_and_line(function):
    op_type, reason, line = expected_culprit(function)
    report = workbook.find_gradient_breaks(function, EXAMPLE)
    assert not report.ok, str(report)
    culprit = report.findings[0]
    assert (culprit.op_type, culprit.reason) == (op_type, reason), str(report)
    assert culprit.line == line and pathlib.Path(culprit.file).resolve() == SOURCE, str(report)
    assert culprit.code and culprit.code in inspect.getsource(function)
    assert culprit.hint


@pytest.mark.parametrize("function", gradient_killers.CLEAN, ids=lambda f: f.__name__)
def test_a_flowing_gradient_is_ok(function):
    report = workbook.find_gradient_breaks(function, EXAMPLE)
    assert report.ok, str(report)
    assert all(status.static == "flowing" and status.measured == "flowing" for status in report.sources), str(report)


TRACEABLE = [f for f in gradient_killers.CULPRITS + gradient_killers.CLEAN if "untraceable" not in inspect.getsource(f)]


@pytest.mark.parametrize("function", TRACEABLE, ids=lambda f: f.__name__)
def test_the_graph_agrees_with_a_gradient_tape(function):
    """The static verdict for the input matches tf.GradientTape run here, independently.

    (Untraceable functions are left out: eagerly, Python control flow on a value works.)
    """
    try:
        # a value that is not a float has no gradient: cast it, and the cast gives None
        _, gradient = value_and_gradient(lambda x: tf.cast(function(x), tf.float32), tf.constant(EXAMPLE))
        flowing = gradient is not None and bool(tf.reduce_any(gradient != 0))
    except LookupError:  # no gradient registered: the tape itself fails
        flowing = False
    report = workbook.find_gradient_breaks(function, EXAMPLE)
    assert report.ok == flowing, str(report)


def test_a_mask_or_condition_is_a_note_not_a_finding():
    report = workbook.find_gradient_breaks(gradient_killers.where_with_float_branches, EXAMPLE)
    assert report.ok and [note.op_type for note in report.notes] == ["Greater"]


def test_every_culprit_is_listed_in_path_order():
    report = workbook.find_gradient_breaks(gradient_killers.two_culprits_floor_first, EXAMPLE)
    assert [f.op_type for f in report.findings] == ["Floor", "Round"]


def bottleneck_model(bottleneck):
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(3, 3, padding="same", activation="relu", name="encoder"),
            keras.layers.Lambda(bottleneck, name="bottleneck"),
            keras.layers.Conv2D(1, 3, padding="same", activation="sigmoid", name="decoder"),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


def int_cast(z):
    return keras.ops.cast(keras.ops.cast(z * 4.0, "int32"), "float32") / 4.0  # culprit: Cast integer_output


def test_a_compiled_model_names_the_dead_layer_and_the_culprit_line():
    model = bottleneck_model(int_cast)
    x = np.random.default_rng(1).uniform(size=(4, 8, 8, 1)).astype("float32")
    before = [v.numpy().copy() for v in model.variables]
    report = workbook.find_gradient_breaks(model, (x, x))
    _, _, line = expected_culprit(int_cast)
    assert report.layers_without_gradient == ["encoder"]
    assert report.findings[0].op_type == "Cast" and report.findings[0].line == line
    assert report.findings[0].cuts == ["layer encoder"]
    # independent check: Keras's own training step leaves the encoder without gradients
    with tf.GradientTape() as tape:
        loss = keras.losses.mean_squared_error(x, model(x, training=True))
    gradients = tape.gradient(loss, model.trainable_variables)
    dead = {v.path.split("/")[-2] for v, g in zip(model.trainable_variables, gradients, strict=True) if g is None}
    assert dead == {"encoder"}
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.variables, strict=True)), "model changed"


def test_a_healthy_model_is_ok():
    model = bottleneck_model(lambda z: z * 1.0)
    x = np.random.default_rng(1).uniform(size=(4, 8, 8, 1)).astype("float32")
    report = workbook.find_gradient_breaks(model, (x, x))
    assert report.ok and report.layers_without_gradient == [], str(report)


def test_a_layer_is_a_target_too():
    layer = keras.layers.Lambda(lambda z: keras.ops.round(z))
    report = workbook.find_gradient_breaks(layer, EXAMPLE)
    assert report.findings[0].op_type == "Round"
    assert pathlib.Path(report.findings[0].file).resolve() == pathlib.Path(__file__).resolve()


def test_batch_norm_statistics_are_left_as_they_were():
    model = keras.Sequential([keras.Input((3,)), keras.layers.BatchNormalization(), keras.layers.Dense(1)])
    before = [v.numpy().copy() for v in model.variables]
    workbook.find_gradient_breaks(model, EXAMPLE * 10 + 5)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.variables, strict=True))


def test_the_report_reads_as_text_and_html():
    report = workbook.find_gradient_breaks(gradient_killers.cast_to_int, EXAMPLE)
    text, page = str(report), report._repr_html_()
    _, _, line = expected_culprit(gradient_killers.cast_to_int)
    assert "Cast" in text and f"gradient_killers.py:{line}" in text and "cast_int_ste" in text
    assert "class='culprit'" in page and "Cast" in page and "<table " in page


def test_bad_target_is_a_clear_error():
    with pytest.raises(ValueError, match="target=42"):
        workbook.find_gradient_breaks(42, EXAMPLE)
    with pytest.raises(ValueError, match="example"):
        workbook.find_gradient_breaks(gradient_killers.matmul, object())


@pytest.mark.parametrize(
    "function",
    [gradient_killers.floor_fixed_argmax_not, gradient_killers.argmax_fixed_floor_not],
    ids=lambda f: f.__name__,
)
def test_a_fix_in_place_is_never_reported(function):
    op_type, _, line = expected_culprit(function)
    report = workbook.find_gradient_breaks(function, EXAMPLE)
    assert [(f.op_type, f.line) for f in report.findings] == [(op_type, line)], str(report)


def test_an_integer_example_is_named_as_such():
    report = workbook.find_gradient_breaks(lambda x: x * x, np.array([3, 4]))
    assert [f.reason for f in report.findings] == ["integer_input"]
    assert "int64" in report.findings[0].detail


def test_an_index_next_to_a_float_input_is_only_a_note():
    report = workbook.find_gradient_breaks(lambda x, k: tf.gather(x, k, axis=1), (EXAMPLE, np.array([0, 2])))
    assert report.ok and [n.reason for n in report.notes] == ["integer_input"], str(report)


def test_a_wrong_example_gets_tensorflows_own_message_not_a_false_culprit():
    model = bottleneck_model(lambda z: z * 1.0)
    wrong = np.ones((2, 10), dtype="float32")
    with pytest.raises(ValueError, match="failed, before any gradient") as raised:
        workbook.find_gradient_breaks(model, (wrong, wrong))
    assert "shape" in str(raised.value).lower()


def test_a_gradient_function_that_raises_is_could_not_check_not_ok():
    report = workbook.find_gradient_breaks(gradient_killers.broken_custom_gradient, EXAMPLE)
    op_type, reason, line = expected_culprit(gradient_killers.broken_custom_gradient)
    assert not report.ok, str(report)
    assert (report.culprit.op_type, report.culprit.reason, report.culprit.line) == (op_type, reason, line)
    assert "this gradient function is broken" in report.culprit.detail
    assert "could not check" in str(report)
    # independently: the tape raises too, so "none" would be a lie
    with pytest.raises(ValueError, match="broken"):
        value_and_gradient(gradient_killers.broken_custom_gradient, tf.constant(EXAMPLE))
    assert [s.measured for s in report.sources] == ["error"]


class Remembering(keras.layers.Layer):
    """Stores the last output on self, as stateful layers in the wild do."""

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 2), name="kernel")

    def call(self, x):
        self.last = ops.matmul(x, self.kernel)
        return self.last


def test_layers_behave_as_before_after_the_finder():
    layer = Remembering()
    layer(EXAMPLE)
    before = layer.last
    report = workbook.find_gradient_breaks(layer, EXAMPLE)
    assert report.ok, str(report)
    assert layer.last is before  # not a graph tensor from the trace
    layer(EXAMPLE)  # eagerly and traced, the layer still works
    tf.function(lambda x: layer(x))(EXAMPLE)
    model = keras.Sequential([keras.Input((3,)), Remembering(), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    workbook.find_gradient_breaks(model, (EXAMPLE, EXAMPLE[:, :1]))
    assert np.isfinite(model.fit(EXAMPLE, EXAMPLE[:, :1], epochs=1, verbose=0).history["loss"][0])


def test_a_users_tf_function_keeps_its_gradient_after_the_finder():
    @tf.function
    def smooth(x):
        return tf.tanh(x) * 3.0

    workbook.find_gradient_breaks(lambda x: smooth(x) + 1.0, EXAMPLE)
    _, gradient = value_and_gradient(smooth, tf.constant(EXAMPLE))
    np.testing.assert_allclose(gradient, 3.0 * (1.0 - np.tanh(EXAMPLE) ** 2), rtol=1e-5)


class TwoUnused(keras.layers.Layer):
    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 2), name="kernel")
        self.spare = self.add_weight(shape=(2,), name="spare")
        self.other = self.add_weight(shape=(2,), name="other")

    def call(self, x):
        return ops.matmul(x, self.kernel)


def test_disconnected_weights_are_one_row_per_cause_and_layer():
    model = keras.Sequential([keras.Input((3,)), TwoUnused(), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    report = workbook.find_gradient_breaks(model, (EXAMPLE, EXAMPLE[:, :1]))
    layer = model.layers[0].name
    assert [(f.reason, f.cuts) for f in report.findings] == [("disconnected", [f"layer {layer}"])] * 2, str(report)
    assert {f.code for f in report.findings} == {
        'self.spare = self.add_weight(shape=(2,), name="spare")',
        'self.other = self.add_weight(shape=(2,), name="other")',
    }
    assert report.layers_without_gradient == []  # the kernel still learns


def test_a_model_without_a_loss_says_how_to_give_one():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="loss="):
        workbook.find_gradient_breaks(model, (EXAMPLE, EXAMPLE[:, :1]))
    with pytest.raises(ValueError, match="loss='mse'"):
        workbook.find_gradient_breaks(model, (EXAMPLE, EXAMPLE[:, :1]), loss="mse")
    report = workbook.find_gradient_breaks(model, (EXAMPLE, EXAMPLE[:, :1]), loss=keras.losses.mean_squared_error)
    assert report.ok and "the loss you passed" in report.description


def test_a_custom_train_step_is_followed_and_nothing_is_trained():
    broken, (x, y) = finder_corpus.rounding_train_step()
    report = workbook.find_gradient_breaks(broken, (x, y))
    assert report.culprit.op_type == "Round" and "train_step" in report.description, str(report)
    model, _ = finder_corpus.custom_train_step_from_the_guide()
    before = [v.numpy().copy() for v in model.variables]
    assert workbook.find_gradient_breaks(model, (x, y)).ok
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.variables, strict=True)), "it trained"
    assert tf.GradientTape.gradient.__name__ == "gradient"  # TensorFlow's own, put back
    model.fit(x, y, epochs=1, verbose=0)  # and fit still runs the user's step, which moves the weights
    moved = [not np.array_equal(a, v.numpy()) for a, v in zip(before, model.variables, strict=True)]
    assert any(moved[i] for i, v in enumerate(model.variables) if v.trainable)


class Quantizer(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def __call__(self, x):
        @tf.custom_gradient
        def straight_through_round(v):
            return tf.round(v), lambda upstream: upstream

        return straight_through_round(x) * 2.0


DIAGNOSE_IT_ELSEWHERE = """
import sys, numpy as np, tensorflow as tf, workbook
loaded = tf.saved_model.load(sys.argv[1])
x = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")
report = workbook.find_gradient_breaks(lambda x: loaded(x), x)
print("RESULT", report.ok, report.culprit and report.culprit.reason, [s.measured for s in report.sources])
"""


def test_a_saved_model_whose_custom_gradient_is_gone_is_could_not_check(tmp_path):
    """Saved without its custom gradient and loaded in a fresh process: never 'ok'.

    The loaded function still names its gradient, which no one registered there, and
    TensorFlow's tape raises a LookupError; the finder says "could not check".
    """
    import os
    import subprocess
    import sys

    path = str(tmp_path / "quantizer")
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)  # saved without it
    tf.saved_model.save(Quantizer(), path, options=options)
    done = subprocess.run(
        [sys.executable, "-c", DIAGNOSE_IT_ELSEWHERE, path],
        capture_output=True,
        text=True,
        timeout=FRESH_PYTHON_SECONDS,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "RESULT False gradient_error ['error']" in done.stdout, done.stdout + done.stderr[-2000:]


def test_a_layer_off_the_path_is_one_row_naming_all_its_weights():
    model, example = finder_corpus.head_off_the_path()
    report = workbook.find_gradient_breaks(model, example)
    assert len(report.findings) == 1 and report.findings[0].cuts == [f"layer {model.projection.name}"], str(report)
    assert all(v.path in report.findings[0].detail for v in model.projection.trainable_variables)


@pytest.mark.parametrize("mode", ["int", "one_hot", "multi_hot", "count"])
def test_a_discretization_after_a_dense_is_a_finding_never_ok(mode):
    """Every output mode of Discretization cuts the Dense before it; the tape measures None for it too."""
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(2, name="dense_before"),
            keras.layers.Discretization(bin_boundaries=[-0.5, 0.0, 0.5], output_mode=mode, name="bins"),
            keras.layers.Flatten(),
            keras.layers.Dense(1),
        ]
    )
    model.compile(loss="mse")
    x = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")
    try:
        model(x)
    except ValueError as error:  # Keras 3.8 gives these modes an output shape its next layer refuses
        pytest.skip(f"Keras {keras.__version__} cannot run Discretization(output_mode={mode!r}) here: {error}")
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=x, y=np.ones((4, 1), "float32"), y_pred=model(x))
    assert tape.gradient(loss, model.layers[0].kernel) is None
    report = workbook.find_gradient_breaks(model, (x, np.ones((4, 1), "float32")))
    assert not report.ok and "ok:" not in str(report), str(report)
    # Keras 3.8 casts the layer's input to an integer first, outside the layer's name scope (so only the
    # model is known, and the line named is the one that makes the model); later versions bucketize the
    # floats inside the layer.
    assert report.culprit.op_type in ("Bucketize", "Cast"), str(report)
    lines, start = inspect.getsourcelines(test_a_discretization_after_a_dense_is_a_finding_never_ok)
    if report.culprit.op_type == "Cast":
        made = start + next(i for i, text in enumerate(lines) if "model = keras.Sequential(" in text)
        assert report.culprit.where == f"test_diagnosis.py:{made} (layer {model.name})", str(report)
    else:  # Sequential calls the layer for you: the line named is the one that makes it (name="bins")
        made = start + next(i for i, text in enumerate(lines) if "keras.layers.Discretization(" in text)
        assert (report.culprit.line, report.culprit.layer) == (made, "bins"), str(report)
        assert report.culprit.where == f"test_diagnosis.py:{made} (layer bins)", str(report)
    assert report.layers_without_gradient == ["dense_before"]


def encoding_report(encoding):
    """The report for a Sequential model whose CategoryEncoding ``encoding`` follows a Dense (it casts to integers)."""
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(2, activation="sigmoid"), encoding, keras.layers.Dense(1)]
    )
    model.compile(loss="mse")
    report = workbook.find_gradient_breaks(model, (EXAMPLE, np.ones((4, 1), "float32")))
    assert report.culprit.op_type == "Cast" and report.culprit.layer == encoding.name, str(report)
    return report


def test_the_line_that_made_a_layer_is_the_one_whose_arguments_agree():
    """Two CategoryEncoding calls of yours with other arguments: each layer is named at its own line."""
    lines, start = inspect.getsourcelines(test_the_line_that_made_a_layer_is_the_one_whose_arguments_agree)
    made = [start + i for i, text in enumerate(lines) if text.lstrip().startswith(("few =", "many ="))]
    few = keras.layers.CategoryEncoding(num_tokens=5, output_mode="one_hot")
    many = keras.layers.CategoryEncoding(num_tokens=6, output_mode="count")
    assert [encoding_report(encoding).culprit.line for encoding in (few, many)] == made


def test_a_layer_two_lines_of_yours_could_have_made_keeps_inside_layer():
    """Two calls with the same arguments: which one made the layer cannot be told, so no line is named."""
    first = keras.layers.CategoryEncoding(num_tokens=7)
    second = keras.layers.CategoryEncoding(num_tokens=7)
    for encoding in (first, second):
        report = encoding_report(encoding)
        assert report.culprit.file is None and report.culprit.where == f"(inside layer {encoding.name})", str(report)


def test_an_op_that_makes_the_tape_raise_comes_first_and_cuts_every_source():
    """A Floor earlier on the way, an AdjustSaturation beside a skip: TensorFlow's tape raises LookupError for both
    inputs, so the AdjustSaturation is the culprit and no source is left flowing."""

    def floor_a_saturate_b(a, b):
        image = tf.reshape(tf.sigmoid(b), (-1, 1, 1, 3))
        return tf.floor(a) + b + tf.reshape(tf.image.adjust_saturation(image, 2.0), (-1, 3))

    a, b = tf.constant(EXAMPLE), tf.constant(EXAMPLE)
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        value = floor_a_saturate_b(a, b)
    with pytest.raises(LookupError):
        tape.gradient(value, [a, b])
    report = workbook.find_gradient_breaks(floor_a_saturate_b, (EXAMPLE, EXAMPLE))
    assert [f.op_type for f in report.findings] == ["AdjustSaturation", "Floor"], str(report)
    assert report.culprit.cuts == ["a (input)", "b (input)"] and "raises LookupError" in report.culprit.detail
    assert [s.static for s in report.sources] == ["cut", "cut"], str(report)


def test_behind_another_break_an_op_with_no_gradient_registered_does_not_raise():
    """round(adjust_saturation(x)) + x: the tape never asks AdjustSaturation for a gradient (Round passes none)."""

    def rounded_saturation(x):
        image = tf.reshape(tf.sigmoid(x), (-1, 1, 1, 3))
        return tf.round(tf.reshape(tf.image.adjust_saturation(image, 2.0), (-1, 3))) + x

    x = tf.constant(EXAMPLE)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = rounded_saturation(x)
    assert tape.gradient(value, x) is not None  # no LookupError: the skip connection's gradient arrives
    report = workbook.find_gradient_breaks(rounded_saturation, EXAMPLE)
    assert report.ok, str(report)
    assert {note.op_type for note in report.notes} >= {"Round", "AdjustSaturation"}, str(report)


def test_the_indices_of_a_sparse_tensor_are_not_culprits():
    """from_dense builds its indices with NotEqual and Where: they only say where the values are."""
    report = workbook.find_gradient_breaks(*finder_corpus.sparse_reduce_max_of_a_dense_tensor())
    assert [f.op_type for f in report.findings] == ["SparseReduceMax"], str(report)
    assert "NotEqual" in {note.op_type for note in report.notes}, str(report)


def test_a_py_function_that_goes_through_numpy_is_named_where_the_tape_gets_a_zero():
    """No model behind it: TensorFlow's tape gets a scalar 0 for x in place of a gradient; the finder names the op."""

    def doubled(x):
        return tf.py_function(lambda a: tf.constant(a.numpy() * 2.0), [x], tf.float32)

    x = tf.constant(EXAMPLE)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = doubled(x)
    assert tape.gradient(value, x).shape == ()  # a stand-in 0, not a gradient shaped like x
    report = workbook.find_gradient_breaks(doubled, EXAMPLE)
    assert [(f.op_type, f.reason) for f in report.findings] == [("EagerPyFunc", "untraceable")], str(report)
    assert report.culprit.code.startswith("return tf.py_function(") and ".numpy()" in report.culprit.detail


class StopsRecording(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            with tape.stop_recording():  # the line the finder must name
                loss = ops.mean((y - y_pred) ** 2)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
        return {"loss": loss}


def test_tape_stop_recording_is_found_with_its_line():
    inputs = keras.Input((3,))
    model = StopsRecording(inputs, keras.layers.Dense(1, name="head")(inputs))
    model.compile(optimizer="sgd")
    x, y = np.ones((4, 3), "float32"), np.ones((4, 1), "float32")
    report = workbook.find_gradient_breaks(model, (x, y))
    lines, start = inspect.getsourcelines(StopsRecording.train_step)
    line = start + next(i for i, text in enumerate(lines) if "stop_recording" in text)
    assert not report.ok
    assert (report.culprit.reason, report.culprit.line) == ("not_recorded", line), str(report)
    assert report.culprit.cuts == ["layer head"] and "stop_recording" in report.culprit.code


def test_a_python_if_on_a_tensor_names_the_comparison_that_picks_the_branch():
    @tf.function
    def branch(x):
        if tf.reduce_sum(x) > 0.0:  # the comparison the finder must name
            return tf.ones((2,))
        return tf.zeros((2,))

    x = tf.constant([[1.0, 2.0]])
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = tf.reduce_sum(branch(x))
    assert tape.gradient(value, x) is None
    report = workbook.find_gradient_breaks(branch, x)
    lines, start = inspect.getsourcelines(branch.python_function)
    line = start + next(i for i, text in enumerate(lines) if "reduce_sum(x) > 0.0" in text)
    culprit = report.culprit
    assert (culprit.op_type, culprit.reason, culprit.line) == ("Greater", "branch_condition", line), str(report)


def test_the_extra_run_of_a_py_function_prints_nothing_of_its_own(capsys):
    """The finder runs a py_function's body once more to see its gradient: what that run prints is not shown."""
    runs = []

    def noisy(a):
        runs.append(1)
        print("the body ran")
        return tf.constant(a.numpy() * 2.0)

    report = workbook.find_gradient_breaks(lambda x: tf.py_function(noisy, [x], tf.float32), EXAMPLE)
    assert report.culprit.op_type == "EagerPyFunc", str(report)
    printed = capsys.readouterr().out.count("the body ran")
    assert 1 <= printed < len(runs), (
        printed,
        len(runs),
    )  # the traced run printed as without the finder; the probe's ran silently


def rounded_model():
    """A functional model that rounds a Dense's output and casts it (keras.ops calls on a KerasTensor)."""
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(2, name="before_the_cast")(inputs)
    digits = ops.cast(ops.round(hidden), "int32")
    model = keras.Model(inputs, keras.layers.Dense(1)(ops.cast(digits, "float32")))
    model.compile(loss="mse")
    return model


def twin():
    """A model that :func:`twin_again` makes too: which of the two made a given one cannot be told."""
    inputs = keras.Input((3,))
    digits = ops.round(keras.layers.Dense(2, name="twin")(inputs))
    return keras.Model(inputs, keras.layers.Dense(1)(digits))


def twin_again():
    inputs = keras.Input((3,))
    digits = ops.round(keras.layers.Dense(2, name="twin")(inputs))
    return keras.Model(inputs, keras.layers.Dense(1)(digits))


def test_a_keras_ops_call_on_a_keras_tensor_is_named_at_its_line_or_not_at_all():
    """The op a functional model runs for ops.round(...) on a KerasTensor: Keras keeps no line of it. The finder names
    the call whose arguments agree and whose function made the model's layers; of two it cannot tell apart, none."""
    model = rounded_model()
    y = np.ones((4, 1), "float32")
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=EXAMPLE, y=y, y_pred=model(EXAMPLE))
    assert tape.gradient(loss, model.get_layer("before_the_cast").kernel) is None
    lines, start = inspect.getsourcelines(rounded_model)
    made = start + next(i for i, text in enumerate(lines) if "ops.round(" in text)
    culprit = workbook.find_gradient_breaks(model, (EXAMPLE, y)).culprit
    assert (culprit.op_type, culprit.line, culprit.layer) == ("Round", made, "round"), culprit
    assert culprit.where == f"test_diagnosis.py:{made} (layer round)"
    model = twin_again()
    model.compile(loss="mse")
    culprit = workbook.find_gradient_breaks(model, (EXAMPLE, y)).culprit
    assert culprit.op_type == "Round" and culprit.file is None and culprit.where.startswith("(inside layer "), culprit


class RoundEachStep(keras.layers.Layer):
    """The ``Rounder`` layer of keras-team/keras#5076 (its ``call`` is ``K.round(x)``), applied to each
    time step by TimeDistributed: Keras runs its ``call`` once per step, so TensorFlow makes one Round a step."""

    def call(self, x):
        return tf.round(x)  # culprit: Round, one per time step

    def compute_output_shape(self, input_shape):
        return input_shape


def rounded_in_a_loop(x):
    total = tf.zeros_like(x)
    for step in range(4):
        total = total + tf.round(x * step)  # the same line makes a Round each time round the loop
    return total


def test_a_line_that_makes_one_op_per_step_or_loop_is_one_row_counted():
    steps = 5
    inputs = keras.Input((steps, 3))
    frames = keras.layers.TimeDistributed(keras.layers.Dense(4))(inputs)
    frames = keras.layers.TimeDistributed(RoundEachStep())(frames)
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(frames)))
    x = np.random.default_rng(0).normal(size=(2, steps, 3)).astype("float32")
    with tf.GradientTape() as tape:  # the independent answer: the per-frame Dense gets no gradient
        loss = tf.reduce_sum(model(x))
    frame_kernel = model.layers[1].trainable_variables[0]
    assert tape.gradient(loss, frame_kernel) is None
    graph = tf.function(model).get_concrete_function(tf.TensorSpec(x.shape, tf.float32)).graph
    assert sum(op.type == "Round" for op in graph.get_operations()) == steps  # one op a step

    report = workbook.find_gradient_breaks(model, x)
    (finding,) = report.findings
    assert (finding.op_type, finding.times, finding.line) == (
        "Round",
        steps,
        RoundEachStep.call.__code__.co_firstlineno + 1,
    )
    assert f"Round \u00d7{steps}" in str(report) and f"{steps} op(s) cut the gradient" in str(report)

    loop = workbook.find_gradient_breaks(rounded_in_a_loop, EXAMPLE)
    assert [(f.op_type, f.times) for f in loop.findings] == [("Round", 4)], str(loop)


def pooled_by_area_first():
    inputs = keras.Input((8, 8, 1))
    features = keras.layers.Conv2D(2, 3, padding="same", name="first_conv")(inputs)
    pooled = keras.layers.Resizing(4, 4, interpolation="area")(features)  # the same call as in the second
    return keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(pooled)))


def pooled_by_area_second():
    inputs = keras.Input((8, 8, 1))
    features = keras.layers.Conv2D(3, 3, padding="same", name="second_conv")(inputs)
    pooled = keras.layers.Resizing(4, 4, interpolation="area")(features)  # the line the second model's cut is on
    return keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(pooled)))


@pytest.mark.parametrize("build", [pooled_by_area_first, pooled_by_area_second])
def test_of_two_lines_alike_that_could_have_made_a_layer_the_one_beside_the_models_other_layers_is_named(build):
    """Two cells (here two functions) that make the same layer alike: the line is the one in the code
    that makes the rest of this model; before, two such lines anywhere in your code left it unnamed."""
    model = build()
    x = np.random.default_rng(0).normal(size=(2, 8, 8, 1)).astype("float32")
    with tf.GradientTape() as tape:  # the independent answer: ResizeArea has no gradient registered
        loss = ops.sum(model(x))
    with pytest.raises(LookupError):
        tape.gradient(loss, model.layers[1].trainable_variables)
    culprit = workbook.find_gradient_breaks(model, x).culprit
    lines, first = inspect.getsourcelines(build)
    expected = first + next(i for i, text in enumerate(lines) if "Resizing(" in text)
    assert (culprit.op_type, culprit.line) == ("ResizeArea", expected), str(culprit)
