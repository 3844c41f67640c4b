"""Models with several inputs (and outputs): a dict, a list or a nested structure is an example like any other.

The finder, the monitor and the extension (its kernel cases are in
tests/test_missing_gradients_harmless.py) take the inputs as ``fit`` takes them. The model is
the multi-input, multi-output one of Keras's functional API guide ("Models with multiple
inputs and outputs": a ticket's title, body and tags), shrunk, with a cut on the tags' way;
every verdict is checked against a plain GradientTape.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import workbook

ROWS = 16


def rounding(t):
    return ops.round(t)


ROUND_LINE = rounding.__code__.co_firstlineno + 1


def ticket_model(structure="dict", outputs=1):
    """After keras.io's functional API guide: title, body and tags in; the tags go through a round."""
    keras.utils.set_random_seed(0)
    title, body, tags = (keras.Input((4,), name=name) for name in ("title", "body", "tags"))
    features = keras.layers.Concatenate()(
        [
            keras.layers.Dense(3, name="title_features")(title),
            keras.layers.Dense(3, name="body_features")(body),
            keras.layers.Lambda(rounding, name="cut")(keras.layers.Dense(3, name="tag_features")(tags)),
        ]
    )
    priority = keras.layers.Dense(1, name="priority")(features)
    department = keras.layers.Dense(2, name="department")(features)
    inputs = {
        "dict": {"title": title, "body": body, "tags": tags},
        "list": [title, body, tags],
        "nested": {"text": [title, body], "tags": tags},
    }[structure]
    model = keras.Model(inputs, {"priority": priority, "department": department} if outputs == 2 else priority)
    model.compile(optimizer="sgd", loss="mse")
    return model


def arrays(seed=0):
    rng = np.random.default_rng(seed)
    return {name: rng.normal(size=(ROWS, 4)).astype("float32") for name in ("title", "body", "tags")}


def x_as(structure, data):
    if structure == "dict":
        return data
    if structure == "list":
        return [data["title"], data["body"], data["tags"]]
    return {"text": [data["title"], data["body"]], "tags": data["tags"]}


def y_for(outputs):
    priority = np.ones((ROWS, 1), "float32")
    return {"priority": priority, "department": np.zeros((ROWS, 2), "float32")} if outputs == 2 else priority


def layers_the_tape_leaves_without_gradient(model, x, y):
    """The independent answer: a plain tape on the compiled loss, and the layers whose every gradient is None."""
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=True))
    gradients = tape.gradient(loss, model.trainable_variables)
    dead = {}
    for variable, gradient in zip(model.trainable_variables, gradients, strict=True):
        layer = variable.path.split("/")[0]
        dead[layer] = dead.get(layer, True) and gradient is None
    return sorted(name for name, none in dead.items() if none)


@pytest.mark.parametrize("outputs", [1, 2], ids=["one output", "a dict of two outputs"])
@pytest.mark.parametrize("structure", ["dict", "list", "nested"])
def test_the_finder_takes_several_inputs_as_fit_does_and_names_the_cut(structure, outputs):
    model = ticket_model(structure, outputs)
    x, y = x_as(structure, arrays()), y_for(outputs)
    model.fit(x, y, epochs=1, batch_size=ROWS, verbose=0)  # fit takes them so (the cut layer warns)
    before = [w.copy() for w in model.get_weights()]
    report = workbook.find_gradient_breaks(model, (x, y))
    assert layers_the_tape_leaves_without_gradient(model, x, y) == ["tag_features"]
    assert report.layers_without_gradient == ["tag_features"]
    culprit = report.findings[0]
    assert (culprit.op_type, culprit.file, culprit.line) == ("Round", __file__, ROUND_LINE)
    for weight, kept in zip(model.get_weights(), before, strict=True):
        np.testing.assert_array_equal(weight, kept)


def test_a_tuple_of_inputs_and_sample_weights_are_taken_too():
    model = ticket_model("list")
    data = arrays()
    report = workbook.find_gradient_breaks(
        model, ((data["title"], data["body"], data["tags"]), y_for(1), np.ones(ROWS, "float32"))
    )
    assert report.layers_without_gradient == ["tag_features"]


def test_a_function_of_a_dict_names_each_entry_as_its_argument():
    def scored(inputs):
        return ops.round(inputs["tags"]) + 2.0 * inputs["title"]

    data = arrays()
    report = workbook.find_gradient_breaks(scored, {"title": data["title"], "tags": data["tags"]})
    verdicts = {status.name: status.measured.name for status in report.sources}
    # The tape's answer: no gradient reaches the tags, 2 reaches the title.
    x_title, x_tags = tf.constant(data["title"]), tf.constant(data["tags"])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x_title, x_tags])
        value = ops.sum(scored({"title": x_title, "tags": x_tags}))
    assert tape.gradient(value, x_tags) is None and np.all(tape.gradient(value, x_title).numpy() == 2.0)
    assert verdicts == {"inputs['tags']": "NONE", "inputs['title']": "FLOWING"}, verdicts
    assert report.findings[0].op_type == "Round"


def test_a_list_of_numbers_is_still_one_array():
    def rounded(t):
        return ops.round(t)

    report = workbook.find_gradient_breaks(rounded, ([[0.4, 1.6], [2.2, 3.7]],))
    assert [status.name for status in report.sources] == ["t"]
    assert report.findings[0].op_type == "Round"


@pytest.mark.parametrize(
    "example",
    [({"title": np.array([np.nan] * 4, "float32")}, np.ones(1, "float32")), {}, ([], np.ones(2)), ({"a": {}}, 1.0)],
    ids=["NaN inside a dict", "an empty dict", "an empty list of inputs", "an empty dict inside"],
)
def test_a_structure_with_nothing_finite_to_trace_is_refused_naming_example(example):
    with pytest.raises(ValueError, match=r"^example=.* must be (finite|an input to trace)"):
        workbook.find_gradient_breaks(ticket_model("dict"), example)


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
def test_the_monitor_names_the_cut_of_a_model_fed_a_dataset_of_dicts_and_trains_as_without_it():
    data, y = arrays(), y_for(1)

    def run(callbacks):
        model = ticket_model("dict")
        dataset = tf.data.Dataset.from_tensor_slices((data, y)).batch(8)
        losses = model.fit(dataset, epochs=2, callbacks=callbacks, verbose=0).history["loss"]
        return losses, model.get_weights()

    plain_losses, plain_weights = run([])
    monitor = workbook.GradientNormMonitor(every=1, live=False)
    losses, weights = run([monitor])
    assert losses == plain_losses
    for weight, plain in zip(weights, plain_weights, strict=True):
        np.testing.assert_array_equal(weight, plain)
    found = monitor.history.cut_by["tag_features"]
    assert not isinstance(found, str), found
    assert (found.op_type, found.file, found.line) == ("Round", __file__, ROUND_LINE)
