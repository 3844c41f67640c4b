"""workbook.core.internals: each TensorFlow or Keras internal it relies on still behaves as relied on,
and each of its context managers puts back exactly what it found (after an exception, nested).

A test that fails here names the internal and the versions installed: a new TensorFlow or
Keras changed something workbook/core/internals.py reaches into.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from workbook.core import internals

VERSIONS = f"TensorFlow {tf.__version__} / Keras {keras.__version__}"


def changed(internal, what):
    pytest.fail(f"{internal} no longer behaves as workbook/core/internals.py relies on with {VERSIONS}: {what}")


def small_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def data(n=12):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 3)).astype("float32"), rng.normal(size=(n, 1)).astype("float32")


class Boom(Exception):
    pass


# -- pins: each internal, as relied on --------------------------------------------------------


def test_train_step_hands_its_gradients_to_the_optimizer_apply_found_on_the_instance():
    model, (x, y) = small_model(), data()
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x)))
    expected = tape.gradient(loss, model.trainable_variables)
    handed = []
    real_apply = model.optimizer.apply

    def apply(grads, trainable_variables=None, *args, **kwargs):
        handed.append([np.array(g) for g in grads])
        return real_apply(grads, trainable_variables, *args, **kwargs)

    with internals.instance_attribute(model.optimizer, "apply", apply):
        model.train_step((x, y))
    if len(handed) != 1:
        changed(
            "optimizer.apply looked up on the instance by train_step", f"it was called {len(handed)} times, not once"
        )
    for got, want in zip(handed[0], expected, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


def test_make_train_function_builds_from_the_train_step_found_on_the_instance():
    model, (x, y) = small_model(), data()
    traced = []
    class_step = model.train_step

    def step(batch):
        traced.append(True)  # runs while TensorFlow traces the built function
        return class_step(batch)

    built = internals.train_function_from(model, step)

    def call(*args, **kwargs):
        swap.disarm()
        return built(*args, **kwargs)

    swap = internals.TrainFunctionSwap(model, call)
    arm = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: swap.arm())
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[arm])
    if not traced:
        changed("model.make_train_function(force=True)", "it did not build from the train_step set on the model")


def test_fit_looks_up_train_function_again_for_every_batch():
    model, (x, y) = small_model(), data(12)
    ran = []

    def call(*args, **kwargs):
        replaced = swap.replaced
        swap.disarm()
        ran.append(True)
        return replaced(*args, **kwargs)

    swap = internals.TrainFunctionSwap(model, call)
    arm = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: swap.arm())
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[arm])
    if len(ran) != 3:
        changed("model.train_function, looked up by fit for every batch", f"3 batches ran {len(ran)} armed calls")
    assert swap.state is internals.Swap.UNPATCHED


def test_gradient_tape_gradient_is_a_method_on_the_class_that_every_tape_calls():
    x = tf.constant([1.0, 2.0, 3.0])
    with internals.recorded_tape_gradients() as calls:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(x**2)
        gradient = tape.gradient(y, x)
    if len(calls) != 1 or calls[0].target is not y:
        changed("tf.GradientTape.gradient", f"replacing it on the class recorded {len(calls)} calls, not this one")
    np.testing.assert_allclose(gradient.numpy(), [2.0, 4.0, 6.0])  # d/dx sum(x^2) = 2x
    np.testing.assert_allclose(calls[0].gradients.numpy(), [2.0, 4.0, 6.0])


class WithWeight(keras.layers.Layer):
    """A layer whose weight is a plain attribute (Dense keeps its kernel behind a property)."""

    def build(self, input_shape):
        self.extra = self.add_weight(shape=(2,), name="extra")
        self.bias = self.add_weight(shape=(2,), name="bias")


def test_keras_keeps_a_layers_attributes_in_its_instance_dict():
    layer = WithWeight()
    layer.build((None, 3))
    attributes = internals.layer_attributes(layer)
    if attributes.get("extra") is not layer.extra:
        changed("vars(layer)", "an attribute set on a layer is not in its instance __dict__")
    attributes["extra"] = tf.constant(1.0)  # written past Keras's __setattr__, read back as is
    if not isinstance(layer.extra, tf.Tensor) or isinstance(layer.extra, tf.Variable):
        changed("vars(layer)", "a value written into the instance __dict__ is not what the attribute returns")


def test_a_grappler_option_set_to_none_has_no_setting_again():
    name = "layout_optimizer"
    before = tf.config.optimizer.get_experimental_options()
    try:
        tf.config.optimizer.set_experimental_options({name: False})
        if tf.config.optimizer.get_experimental_options().get(name) is not False:
            changed("tf.config.optimizer.set_experimental_options", f"{name}=False is not read back")
        tf.config.optimizer.set_experimental_options({name: None})
        if name in tf.config.optimizer.get_experimental_options():
            changed("tf.config.optimizer.set_experimental_options", f"{name}=None left a setting")
    finally:
        tf.config.optimizer.set_experimental_options({name: before.get(name)})


def traced_graph(function, *arguments):
    return tf.function(function).get_concrete_function(*arguments).graph


def ops_of(graph):
    return [op.type for op in graph.get_operations()]


def test_graph_get_function_finds_a_called_function_by_name():
    inner = tf.function(tf.sin)
    graph = traced_graph(lambda x: inner(x) * 2.0, tf.constant(1.0))
    calls = [op for op in graph.get_operations() if op.type in {"PartitionedCall", "StatefulPartitionedCall"}]
    assert calls, f"no call op in {ops_of(graph)}"
    name = calls[0].get_attr("f").name
    function = graph._get_function(name)
    if function is None:
        changed("FuncGraph._get_function", f"it returns None for the called function {name!r}")
    if "Sin" not in ops_of(internals.function_body(graph, name)):
        changed("FuncGraph._get_function(...).graph", "the body of the called function has no Sin op")
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph

    if "Sin" not in ops_of(function_def_to_graph(function.definition)):
        changed("function_def_to_graph", "the body rebuilt from the definition has no Sin op")
    assert internals.function_body(graph, "no_such_function") is None


@pytest.mark.parametrize(
    ("function", "op_types", "part", "inner"),
    [
        (lambda x: tf.while_loop(lambda v: v < 10.0, lambda v: tf.sin(v) + v + 1.0, [x]), {"While", "StatelessWhile"},
         "body", "Sin"),
        (lambda x: tf.cond(x > 0.0, lambda: tf.sin(x), lambda: tf.cos(x)), {"If", "StatelessIf"}, "then", "Sin"),
        (lambda x: tf.cond(x > 0.0, lambda: tf.sin(x), lambda: tf.cos(x)), {"If", "StatelessIf"}, "else", "Cos"),
    ],
)  # fmt: skip
def test_a_control_flow_op_keeps_its_body_graphs(function, op_types, part, inner):
    graph = traced_graph(function, tf.constant(1.0))
    ops = [op for op in graph.get_operations() if op.type in op_types]
    assert ops, f"no {op_types} op in {ops_of(graph)}"
    found = internals.control_flow_graph(ops[0], part)
    bodies = found if isinstance(found, list) else [found]
    if found is None or not any(inner in ops_of(body) for body in bodies):
        attribute = internals.CONTROL_FLOW_GRAPHS[part]
        changed(f"{ops[0].type} op's {attribute}", f"it is {found!r}, not the traced body with its {inner} op")


def test_a_case_op_names_its_branches_in_the_function_library():
    graph = traced_graph(
        lambda x: tf.switch_case(tf.cast(x, tf.int32), [lambda: tf.sin(x), lambda: tf.cos(x)]), tf.constant(1.0)
    )
    ops = [op for op in graph.get_operations() if op.type in {"Case", "StatelessCase"}]
    assert ops, f"no Case op in {ops_of(graph)}"
    bodies = [internals.function_body(graph, branch.name) for branch in ops[0].get_attr("branches")]
    if [body is not None and {"Sin", "Cos"} & set(ops_of(body)) for body in bodies] != [{"Sin"}, {"Cos"}]:
        changed("a Case op's branches attribute and FuncGraph._get_function", "its two branches are not found")


def test_custom_gradient_marks_its_op_with_gradient_op_type():
    @tf.custom_gradient
    def straight_through_round(x):
        return tf.round(x), lambda upstream: upstream

    graph = traced_graph(straight_through_round, tf.constant([0.4, 1.6]))
    marked = [op for op in graph.get_operations() if internals.custom_gradient_type(op)]
    if not marked:
        changed("the _gradient_op_type attribute set by tf.custom_gradient", f"no op carries it in {ops_of(graph)}")
    if not callable(internals.gradient_function(marked[0])):
        changed("the gradient registered under _gradient_op_type", "no gradient function is found for it")
    assert not any(internals.custom_gradient_type(op) for op in graph.get_operations() if op.type == "Round")


def test_get_gradient_function_a_function_none_or_lookup_error():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant([1.0, 2.0])
        square, number, length = tf.square(x), tf.strings.to_number(["3"]), tf.strings.length(["ab"])
        upstream = tf.constant([1.0, 1.0])
        function = internals.gradient_function(square.op)
        if not callable(function):
            changed("ops.get_gradient_function", f"it returns {function!r} for Square")
        gradient = tf.nest.flatten(function(square.op, upstream))[0]
        with tf.compat.v1.Session(graph=graph) as session:
            np.testing.assert_allclose(session.run(gradient), [2.0, 4.0])  # d/dx x^2 = 2x
        if internals.gradient_function(number.op) is not None:
            changed("ops.get_gradient_function", "StringToNumber, registered as not differentiable, is not None")
        with pytest.raises(LookupError):
            internals.gradient_function(length.op)  # StringLength: no registration at all


# -- every context manager puts back exactly what it found ------------------------------------


def test_instance_attribute_puts_back_an_absent_and_an_own_attribute():
    optimizer = keras.optimizers.SGD(0.1)
    class_apply = type(optimizer).apply
    assert "apply" not in vars(optimizer)
    with internals.instance_attribute(optimizer, "apply", "outer"):
        assert optimizer.apply == "outer"
        with pytest.raises(Boom), internals.instance_attribute(optimizer, "apply", "inner"):
            assert optimizer.apply == "inner"
            raise Boom
        assert vars(optimizer)["apply"] == "outer"
    assert "apply" not in vars(optimizer)
    assert optimizer.apply.__func__ is class_apply
    with pytest.raises(Boom), internals.instance_attribute(optimizer, "apply", "once"):
        raise Boom
    assert "apply" not in vars(optimizer)


def test_train_function_from_leaves_train_function_and_train_step_as_they_were():
    model = small_model()
    before = model.train_function
    internals.train_function_from(model, model.train_step)
    assert model.train_function is before and "train_step" not in vars(model)

    class RaisingModel:
        train_function = "keras's own"

        def train_step(self, data):
            return data

        def make_train_function(self, force=False):
            self.train_function = "half made"
            raise Boom

    raising = RaisingModel()
    with pytest.raises(Boom):
        internals.train_function_from(raising, lambda data: None)
    assert raising.train_function == "keras's own" and "train_step" not in vars(raising)


def test_train_function_swap_puts_back_what_it_replaced():
    model = small_model()
    before = model.train_function
    swap = internals.TrainFunctionSwap(model, call="monitored")
    assert swap.state is internals.Swap.UNPATCHED
    swap.arm()
    swap.arm()  # armed twice: still puts back Keras's, not itself
    assert model.train_function == "monitored" and swap.state is internals.Swap.ARMED
    swap.disarm()
    assert model.train_function is before and swap.state is internals.Swap.UNPATCHED
    swap.arm()
    model.train_function = "made anew by Keras"
    swap.disarm()  # what replaced the call meanwhile stays
    assert model.train_function == "made anew by Keras" and swap.state is internals.Swap.UNPATCHED


def test_recorded_tape_gradients_puts_the_method_back_after_an_error_and_nested():
    original = tf.GradientTape.gradient
    x = tf.constant(3.0)
    with internals.recorded_tape_gradients() as outer:
        with pytest.raises(Boom), internals.recorded_tape_gradients() as inner:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = x * x
            tape.gradient(y, x)
            raise Boom
        assert tf.GradientTape.gradient is not original
    assert tf.GradientTape.gradient is original
    assert len(inner) == 1 and len(outer) == 1  # the inner recorder calls the outer one
    assert float(inner[0].gradients) == pytest.approx(6.0)  # d/dx x^2 at 3


def test_kept_layer_attributes_puts_back_added_rebound_and_deleted_attributes():
    layer = WithWeight()
    layer.build((None, 3))
    kernel, before = layer.extra, dict(vars(layer))
    with internals.kept_layer_attributes([layer]):
        layer.added = 1
        with pytest.raises(Boom), internals.kept_layer_attributes([layer]):
            vars(layer)["extra"] = tf.zeros((2,))
            del vars(layer)["bias"]
            raise Boom
        assert vars(layer)["added"] == 1 and vars(layer)["extra"] is kernel and "bias" in vars(layer)
    after = vars(layer)
    assert after.keys() == before.keys()
    assert all(after[name] is value for name, value in before.items())


@pytest.fixture
def grappler_settings():
    """Two passes with known settings before the test (one explicit, one none), put back after."""
    names = ("layout_optimizer", "remapping", "debug_stripper")
    kept = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options({"layout_optimizer": None, "remapping": True, "debug_stripper": None})
    yield names
    tf.config.optimizer.set_experimental_options({name: kept.get(name) for name in names})


def test_grappler_passes_off_puts_back_each_setting_and_no_setting(grappler_settings):
    before = tf.config.optimizer.get_experimental_options()
    assert "layout_optimizer" not in before and before["remapping"] is True
    with internals.grappler_passes_off(["layout_optimizer", "remapping"]):
        now = tf.config.optimizer.get_experimental_options()
        assert now["layout_optimizer"] is False and now["remapping"] is False
        with pytest.raises(Boom), internals.grappler_passes_off(["debug_stripper"]):
            assert tf.config.optimizer.get_experimental_options()["debug_stripper"] is False
            raise Boom
        assert tf.config.optimizer.get_experimental_options() == now
    assert tf.config.optimizer.get_experimental_options() == before
