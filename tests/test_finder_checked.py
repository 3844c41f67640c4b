"""The finder's advice is checked on your code before it is shown, and where the gradient dies is measured.

The answers here come from a plain GradientTape on code written out by hand, not from the finder.
The public cases of the measurement are in tests/finder_corpus.py (a where() never taken, a softmax
of one value, a loop's trip count); these tests pin what the check does to the student's code.
"""

import contextlib
import inspect
import re

import keras
import numpy as np
import tensorflow as tf
from keras import ops

import workbook

Z = np.array([[0.1, 0.4, 0.7, 1.0, 1.6]], dtype="float32")


def look_up(code, z):
    value = ops.matmul(code, ops.tile(ops.reshape(ops.linspace(0.0, 1.0, 4), (1, 4, 1)), (ops.shape(code)[0], 1, 1)))
    return ops.reshape(ops.sum(value, axis=-1), ops.shape(z))


def quantize(z):
    flat = ops.reshape(z, (ops.shape(z)[0], -1, 1))
    level = ops.cast(ops.clip(flat * 3.0, 0.0, 3.0), "int32")
    code = ops.one_hot(level[..., 0], 4)
    return look_up(code, z)


def quantize_cast_ste(z):
    """The cast's first rewrite alone, written out by hand: the level stays an index for one_hot."""
    flat = ops.reshape(z, (ops.shape(z)[0], -1, 1))
    level = workbook.SURROGATES["cast_int_ste"](ops.clip(flat * 3.0, 0.0, 3.0))
    code = ops.one_hot(level[..., 0], 4)
    return look_up(code, z)


def gradient_of(function, z):
    z = tf.constant(z)
    with tf.GradientTape() as tape:
        tape.watch(z)
        value = ops.sum(function(z))
    return tape.gradient(value, z)


def test_a_fix_that_leaves_the_gradient_cut_is_not_shown_and_the_next_one_is():
    assert gradient_of(quantize_cast_ste, Z) is None  # the first rewrite alone fixes nothing
    culprit = workbook.find_gradient_breaks(quantize, Z).culprit
    first = culprit.candidates[0]
    assert "cast_int_ste" in first and "one_hot" not in first.split(":")[0]
    assert culprit.checked is True
    assert culprit.hint.startswith(culprit.candidates[1])
    assert "Checked on your example: the gradient now reaches z (input)" in culprit.hint
    assert "replace `ops.one_hot(level[..., 0], 4)` with" in culprit.hint


def test_the_checked_fix_pasted_as_printed_trains_and_keeps_every_value():
    culprit = workbook.find_gradient_breaks(quantize, Z).culprit
    assert culprit.hint.startswith("Replace `")
    namespace = {"ops": ops, "workbook": workbook, "look_up": look_up}
    source = (
        "def fixed(z):\n"
        "    flat = ops.reshape(z, (ops.shape(z)[0], -1, 1))\n"
        '    level = ops.cast(ops.clip(flat * 3.0, 0.0, 3.0), "int32")\n'
        "    code = ops.one_hot(level[..., 0], 4)\n"
        "    return look_up(code, z)\n"
    )
    for old, new in re.findall(r"[Rr]eplace `([^`]+)` with `([^`]+)`", culprit.hint.split(": ")[0]):
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    exec(source, namespace)
    gradient = gradient_of(namespace["fixed"], Z)
    assert gradient is not None and np.any(gradient.numpy())
    np.testing.assert_allclose(ops.convert_to_numpy(namespace["fixed"](Z)), ops.convert_to_numpy(quantize(Z)))


def test_the_check_leaves_your_function_and_its_module_as_they_were():
    code, names = quantize.__code__, set(globals())
    workbook.find_gradient_breaks(quantize, Z)
    assert quantize.__code__ is code
    assert set(globals()) == names  # no name a fix uses (tf, np, keras) was left behind


def test_a_report_keeps_its_fixes_back_until_asked():
    report = workbook.find_gradient_breaks(quantize, Z)
    hidden = report.hiding_fixes()
    assert report.culprit.hint not in str(hidden) and report.culprit.hint not in hidden._repr_html_()
    assert "predict the fix" in str(hidden)
    assert report.culprit.hint in hidden.fixes()
    assert report.culprit.hint in str(report)  # the report itself is unchanged


def test_a_layer_whose_weight_gets_exactly_zero_is_never_ok():
    """A ReLU that is off on every row: the graph passes a gradient, the tape measures 0, the report says where."""
    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(3, activation="relu", kernel_initializer="ones", bias_initializer="zeros")
    rows = -np.abs(np.random.default_rng(0).normal(size=(4, 2))).astype("float32")  # all negative: every ReLU off
    with tf.GradientTape() as tape:
        value = ops.sum(layer(rows))
    assert not np.any(tape.gradient(value, layer.kernel.value).numpy())
    report = workbook.find_gradient_breaks(layer, rows)
    assert not report.ok
    assert report.culprit.op_type == "Relu" and report.culprit.reason == "measured_zero", str(report)


def noisy_quantize(z):
    print("quantizing")  # what the student's code prints
    return quantize(z)


def test_the_extra_runs_print_nothing_of_your_code(capsys):
    """The measurement and the check run the code again: what it prints then is not shown a second time."""
    report = workbook.find_gradient_breaks(noisy_quantize, Z)
    assert report.culprit.checked is not None  # the check ran (and ran the code again)
    assert capsys.readouterr().out.count("quantizing") == 1  # the one trace of the report, as before the check


# -- A fix on a line that runs once, when the model is made: checked on the model made again, or said not to be --

IMAGES = np.random.default_rng(2).uniform(size=(2, 8, 8, 1)).astype("float32")
TARGETS = np.ones((2, 1), "float32")


def area_resized(pooling):
    """A Dense, then a 2x downsampling made by ``pooling`` (a layer), then the loss: a model made once."""
    inputs = keras.Input((8, 8, 1))
    features = keras.layers.Dense(2)(inputs)
    pooled = pooling(features)
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(pooled)))
    model.compile(loss="mse")
    return model


def dense_gradient(model):
    """The gradient of the loss for the first Dense's kernel; None where there is none (or none is registered)."""
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=IMAGES, y=TARGETS, y_pred=model(IMAGES))
    try:
        return tape.gradient(loss, model.layers[1].kernel)
    except LookupError:
        return None


def next_name():
    """The number in the name Keras gives the next AveragePooling2D it names by itself."""
    name = keras.layers.AveragePooling2D((2, 2)).name
    return int(name.rsplit("_", 1)[1]) if name[-1].isdigit() and "_" in name else 0


def test_a_fix_of_the_line_that_made_a_layer_is_checked_on_the_model_made_again():
    # Made here, as a notebook cell makes a model: of the lines in the loaded code that could have made
    # the Resizing (the corpora have such lines too), the finder names the one beside the model's other layers.
    inputs = keras.Input((8, 8, 1))
    features = keras.layers.Dense(2)(inputs)
    pooled = keras.layers.Resizing(4, 4, interpolation="area")(features)
    broken = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(pooled)))
    broken.compile(loss="mse")
    assert dense_gradient(broken) is None  # ResizeArea has no gradient registered
    fixed = area_resized(keras.layers.AveragePooling2D((2, 2)))
    assert np.any(dense_gradient(fixed).numpy())  # the fix, made by hand: the Dense learns
    before = next_name()
    culprit = workbook.find_gradient_breaks(broken, (IMAGES, TARGETS)).culprit
    assert culprit.layer and culprit.hint.startswith('Replace `keras.layers.Resizing(4, 4, interpolation="area")`')
    lines, first = inspect.getsourcelines(test_a_fix_of_the_line_that_made_a_layer_is_checked_on_the_model_made_again)
    assert culprit.line == first + next(i for i, text in enumerate(lines) if text.startswith("    pooled ="))
    assert culprit.checked is True and "Checked on your example: the gradient now reaches" in culprit.hint
    # The model made again to check it named its own pooling layer: the student's next one is named as without it.
    assert next_name() == before + 1


def test_a_fix_in_build_is_checked_on_the_layer_made_again():
    class SparseDense(keras.layers.Layer):
        def build(self, input_shape):
            self.values = self.add_weight(shape=(3,), initializer="ones", name="values")
            self.kernel = tf.SparseTensor([[0, 0], [1, 1], [2, 0]], self.values, (3, 2))

        def call(self, inputs):
            return tf.transpose(tf.sparse.sparse_dense_matmul(self.kernel, inputs, adjoint_a=True, adjoint_b=True))

    rows = np.ones((2, 3), "float32")
    layer = SparseDense()
    layer(rows)  # built by a first call, as training builds it
    with tf.GradientTape() as tape:
        value = ops.sum(layer(rows))
    assert tape.gradient(value, layer.values.value) is None  # the kernel was made once, from the weight's value
    culprit = workbook.find_gradient_breaks(layer, rows).culprit
    assert culprit.reason == "disconnected" and culprit.code.startswith("self.kernel = tf.SparseTensor(")
    assert culprit.checked is True and "Checked on your example: the gradient now reaches" in culprit.hint


def test_a_fix_the_finder_cannot_make_again_says_it_was_not_checked():
    pattern = [[0, 0], [1, 1], [2, 0]]  # a name of this function: the class made again from its source has none

    class SparseDense(keras.layers.Layer):
        def build(self, input_shape):
            self.values = self.add_weight(shape=(3,), initializer="ones", name="values")
            self.kernel = tf.SparseTensor(pattern, self.values, (3, 2))

        def call(self, inputs):
            return tf.transpose(tf.sparse.sparse_dense_matmul(self.kernel, inputs, adjoint_a=True, adjoint_b=True))

    culprit = workbook.find_gradient_breaks(SparseDense(), np.ones((2, 3), "float32")).culprit
    assert culprit.reason == "disconnected" and culprit.hint.startswith("Replace `self.kernel = ")
    assert culprit.checked is not True and "Checked on your example" not in culprit.hint
    assert "Not checked on your example: this line runs once, when the model is made" in culprit.hint


def cast_to_int(z):
    return ops.cast(ops.cast(z, "int32"), "float32")


def floor_of_a_sigmoid(z):
    return ops.floor(ops.sigmoid(z))  # every value in (0, 1): all 0, and the ReLU after it is at its kink


def judged(builder, measure_again):
    """(the culprit's hint and whether it was checked, whether the shortcut judged a fix) for one case's finder run."""
    from workbook.finder.advice import checked

    original, taken = checked._past_as_measured, []

    def past_as_measured(*arguments):
        said = False if measure_again else original(*arguments)
        taken.append(said)
        return said

    checked._past_as_measured = past_as_measured
    try:
        keras.utils.set_random_seed(0)
        built = builder()
        culprit = workbook.find_gradient_breaks(built.broken, built.example, **built.options).culprit
    finally:
        checked._past_as_measured = original
    if culprit is None:
        return None, any(taken)
    # Each build names its layers afresh (dense_81, then dense_82): the names are not what is compared.
    return (re.sub(r"_\d+\b", "_N", culprit.hint), culprit.checked), any(taken)


def test_a_fix_that_keeps_every_value_is_judged_as_measuring_again_judges_it():
    """A fix that keeps the output where no gradient reached its line is "past" without a second measurement.

    The answer is the one measuring again on the fixed code gives: on every public case of the
    advice corpus where the shortcut is taken, and on notebook 04's cast and a floor of a sigmoid,
    where it must be (each sends the code to 0, so the ReLUs after it pass nothing back to the line).
    """
    import finder_fix_corpus

    with contextlib.suppress(ModuleNotFoundError):  # the second round of cases registers itself into CASES
        import finder_fix_corpus_deep  # noqa: F401

    def autoencoder_cast():
        (x, _), _ = workbook.load_mnist(n_train=64, n_test=100, source="bundled", seed=0)
        model = workbook.autoencoder(cast_to_int, seed=0)
        return finder_fix_corpus.Case(broken=model, example=(x, x))

    def floored_code():
        model = keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(3, name="encoder"),
                keras.layers.Lambda(floor_of_a_sigmoid),
                keras.layers.Dense(5, activation="relu"),
                keras.layers.Dense(4),
            ]
        )
        model.compile(loss="mse")
        x = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
        return finder_fix_corpus.Case(broken=model, example=(x, x))

    builders = [autoencoder_cast, floored_code, *finder_fix_corpus.CASES]
    shortcut = {builder: judged(builder, measure_again=False) for builder in builders}
    taken = [builder for builder, (_, took) in shortcut.items() if took]
    assert autoencoder_cast in taken and floored_code in taken
    assert "the next row still cuts it" in shortcut[autoencoder_cast][0][0]
    for builder in taken:
        assert shortcut[builder][0] == judged(builder, measure_again=True)[0], builder.__name__


def test_told_that_a_gradient_starves_the_finder_measures_where_it_dies_in_its_first_run(monkeypatch):
    """The monitor's and the extension's way in (``find_known_breaks``) traces the code once, for the same report.

    Notebook 04's cast sends the code to 0, so the ReLUs after it pass exactly 0: only measuring shows them.
    """
    from workbook.finder import diagnosis

    (x, _), _ = workbook.load_mnist(n_train=64, n_test=100, source="bundled", seed=0)
    model = workbook.autoencoder(cast_to_int, seed=0)
    plain = diagnosis.find_gradient_breaks(model, (x, x))
    assert [f.op_type for f in plain.findings if f.reason == "measured_zero"]

    def traced_again(*arguments):
        raise AssertionError("where the gradient dies was traced a second time")

    monkeypatch.setattr(diagnosis, "measured_cuts", traced_again)
    assert str(diagnosis.find_known_breaks(model, (x, x))) == str(plain)
