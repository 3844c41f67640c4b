"""workbook.core.internals: each TensorFlow or Keras internal it relies on still behaves as relied on,
and each of its context managers puts back exactly what it found (after an exception, nested).

A test that fails here names the internal and the versions installed: a new TensorFlow or
Keras changed something workbook/core/internals.py reaches into.
"""

import random

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


def through_each_batch(model, call):
    """A callback after which ``fit`` runs each batch as ``call(keras_function, iterator)``, Keras's put back first."""

    def arm(batch, logs):
        keras_function = internals.train_function(model)

        def once(*args, **kwargs):
            internals.set_train_function(model, keras_function)
            return call(keras_function, *args, **kwargs)

        internals.set_train_function(model, once)

    return keras.callbacks.LambdaCallback(on_train_batch_begin=arm)


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
    arm = through_each_batch(model, lambda keras_function, *args, **kwargs: built(*args, **kwargs))
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[arm])
    if not traced:
        changed("model.make_train_function(force=True)", "it did not build from the train_step set on the model")


def test_fit_looks_up_train_function_again_for_every_batch():
    model, (x, y) = small_model(), data(12)
    ran = []

    def call(keras_function, *args, **kwargs):
        ran.append(keras_function)
        return keras_function(*args, **kwargs)

    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[through_each_batch(model, call)])
    if len(ran) != 3:
        changed("model.train_function, looked up by fit for every batch", f"3 batches ran {len(ran)} armed calls")
    assert internals.train_function(model) is ran[-1]  # Keras's own, put back by the last call


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


# -- the random state a run draws from: pins, and kept_random_state ---------------------------


@pytest.fixture
def global_generators():
    """Keras's and tf.random's global generators as found, put back after the test."""
    keras_generator = internals.keras_global_seed_generator()
    tensorflow_generator = internals._tensorflow_generator_module().global_generator
    yield
    internals._set_keras_global_seed_generator(keras_generator)
    internals._tensorflow_generator_module().global_generator = tensorflow_generator


def test_unseeded_keras_random_draws_from_the_global_seed_generator_and_moves_its_state(global_generators):
    keras.random.normal(())  # makes it if there is none
    generator = internals.keras_global_seed_generator()
    if not isinstance(generator, keras.random.SeedGenerator):
        changed("global_state's 'global_seed_generator'", f"it holds {generator!r}, not a SeedGenerator")
    before = generator.state.numpy()
    first = keras.random.normal((3,)).numpy()
    if np.array_equal(generator.state.numpy(), before):
        changed("the global SeedGenerator", "an unseeded keras.random.normal did not move its state")
    generator.state.assign(before)
    if not np.array_equal(keras.random.normal((3,)).numpy(), first):
        changed("the global SeedGenerator", "the same state gave another unseeded draw")
    internals._set_keras_global_seed_generator(None)
    keras.random.normal(())
    if internals.keras_global_seed_generator() in (None, generator):
        changed("global_state's 'global_seed_generator'", "an unseeded draw with none there did not make a new one")


def test_eager_op_seeds_come_from_the_counter_tf_random_set_seed_makes_and_kernels_run_on():
    tf.random.set_seed(3)
    counter = internals._op_seeds()
    if counter is None:
        changed("the eager context's _rng", "tf.random.set_seed made no op-seed counter")
    state = internals.random_state()
    first = tf.random.normal((3,)).numpy()
    if counter.getstate() == state.op_seeds:
        changed("the eager context's _rng", "an unseeded eager tf.random.normal took no op seed from it")
    counter.setstate(state.op_seeds)
    # The same op seed again runs its cached kernel on: why restoring the counter clears the cache.
    if np.array_equal(tf.random.normal((3,)).numpy(), first):
        changed("TensorFlow's eager kernel cache", "an op seed handed out again started its draws over")
    internals.restore_random_state(state)
    np.testing.assert_array_equal(tf.random.normal((3,)).numpy(), first)


def draws():
    """One draw from every generator kept_random_state keeps."""
    return [
        np.array([random.random()]),
        np.random.random(2),
        keras.random.normal((2,)).numpy(),
        tf.random.normal((2,)).numpy(),
        tf.random.get_global_generator().normal((2,)).numpy(),
    ]


def reseed(seed):
    """Every generator started over from ``seed``, without kept_random_state."""
    keras.random.normal(())  # makes Keras's global SeedGenerator now, not after the seeding
    keras.utils.set_random_seed(seed)  # Python, NumPy, TensorFlow's global seed (and, from Keras 3.9, Keras's)
    generator = internals.keras_global_seed_generator()
    if generator is not None:  # Keras 3.8 leaves it running where it was
        generator.state.assign(np.array([seed, 0], dtype=generator.state.dtype))
    tf.random.set_global_generator(tf.random.Generator.from_seed(seed))


def test_kept_random_state_puts_back_every_generator_after_an_error_and_nested(global_generators):
    reseed(7)
    expected = draws()
    reseed(7)
    with pytest.raises(Boom), internals.kept_random_state():
        draws()
        with internals.kept_random_state():
            inner = draws()
        for got, want in zip(draws(), inner, strict=True):  # the inner one put back what it found
            np.testing.assert_array_equal(got, want)
        raise Boom
    for got, want in zip(draws(), expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_kept_random_state_drops_a_global_generator_made_inside_it(global_generators):
    internals._set_keras_global_seed_generator(None)
    internals._tensorflow_generator_module().global_generator = None
    with internals.kept_random_state():
        keras.random.normal((2,))
        tf.random.get_global_generator().normal((2,))
        assert internals.keras_global_seed_generator() is not None
    assert internals.keras_global_seed_generator() is None
    assert internals._tensorflow_generator_module().global_generator is None


# -- a train function built around a step hands back what the step returns ---------------------


@pytest.mark.parametrize("steps_per_execution", [1, 3])
def test_a_built_train_function_returns_what_its_step_returns_the_batch_included(steps_per_execution):
    model, (x, y) = small_model(), data(12)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", steps_per_execution=steps_per_execution)
    class_step = model.train_step
    built = internals.train_function_from(model, lambda batch: (class_step(batch), batch))
    handed = []

    def call(keras_function, *args, **kwargs):
        logs, batch = built(*args, **kwargs)
        handed.append(batch)
        return logs

    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=[through_each_batch(model, call)])
    # One call per steps_per_execution batches; the batch handed back is the last of them.
    last_rows = [slice(start, start + 4) for start in range(0, 12, 4)][steps_per_execution - 1 :: steps_per_execution]
    if len(handed) != len(last_rows):
        changed("the train function make_train_function builds", f"{len(handed)} calls, not {len(last_rows)}")
    for (x_batch, y_batch), rows in zip(handed, last_rows, strict=True):
        np.testing.assert_array_equal(x_batch, x[rows])
        np.testing.assert_array_equal(y_batch, y[rows])


# -- the missing-gradients extension: Python's warning display, Keras's traceback filter, datasets --


def test_showwarnmsg_gets_every_shown_warning_whole_and_shown_warnings_passes_it_on_and_puts_back():
    import gc
    import tracemalloc
    import warnings

    original, noticed = warnings._showwarnmsg, []
    tracemalloc.start()
    try:
        with warnings.catch_warnings(record=True) as shown:  # what Python's own display is handed
            warnings.simplefilter("always")
            with internals.shown_warnings(noticed.append):
                with pytest.raises(Boom), internals.shown_warnings(noticed.append):
                    assert warnings._showwarnmsg is not original
                    raise Boom
                handle = open(__file__)  # noqa: SIM115 - left open on purpose: Python warns with its source
                del handle
                gc.collect()
                warnings.simplefilter("ignore", UserWarning)
                warnings.warn("filtered out: never shown, never noticed", UserWarning, stacklevel=1)
            assert warnings._showwarnmsg is original
        # An earlier test in the same process may leave garbage whose own ResourceWarning the
        # collection above shows too: every shown warning is noticed, and this file's is one of them.
        unclosed = [m for m in shown if issubclass(m.category, ResourceWarning) and __file__ in str(m.message)]
        texts = [warnings._formatwarnmsg(m) for m in unclosed]  # while tracemalloc still knows the source
    finally:
        tracemalloc.stop()
    if len(unclosed) != 1 or noticed != shown:
        changed("warnings._showwarnmsg", f"shown {shown}, noticed {noticed}: not every shown warning, once")
    if "Object allocated at" not in texts[0]:
        changed("warnings._showwarnmsg", "the WarningMessage it gets has no source: tracemalloc's lines are lost")


def failing_fit_traceback(model):
    x, y = data()
    try:
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    except ValueError as error:
        return error.__traceback__, x, y
    pytest.fail("a model with no gradient at all trained")


def test_a_failed_fit_leaves_the_frame_of_kerass_traceback_filter_with_the_call_it_wrapped():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1), keras.layers.Lambda(keras.ops.round)])
    model.compile(optimizer="sgd", loss="mse")
    tb, x, y = failing_fit_traceback(model)
    found = []
    while tb is not None:
        if tb.tb_frame.f_code is internals.keras_traceback_filter_code():
            found.append([tb.tb_frame.f_locals.get(name) for name in internals.KERAS_FILTERED_CALL_LOCALS])
        if tb.tb_frame.f_code.co_name == "fit":
            changed("keras traceback filtering", "fit's own frame is in the traceback: nothing to find")
        tb = tb.tb_next
    if len(found) != 1 or getattr(found[0][0], "__name__", None) != "fit":
        changed("keras.src.utils.traceback_utils.filter_traceback", f"its frames hold {found}, not one call of fit")
    function, args, kwargs = found[0]
    if not isinstance(kwargs, dict) or len(args) < 3 or args[0] is not model or args[1] is not x or args[2] is not y:
        changed("the locals of filter_traceback's error_handler", f"{args!r:.200}, {kwargs!r:.200}: not fit's call")


def test_the_variant_tensor_of_a_dataset_serialises_its_pipeline():
    dataset = tf.data.Dataset.range(10).batch(3)
    serialized = tf.raw_ops.DatasetToGraphV2(input_dataset=internals.dataset_variant(dataset), external_state_policy=2)
    ops = [node.op for node in tf.compat.v1.GraphDef.FromString(serialized.numpy()).node]
    if "RangeDataset" not in ops or not any(op.startswith("BatchDataset") for op in ops):
        changed("dataset._variant_tensor", f"the pipeline serialised from it has the ops {ops}")


def test_keras_counts_the_names_it_gives_in_its_global_state_and_kept_layer_names_puts_them_back():
    """The next automatic name is ``dense_{n}`` as if the layers made inside the block had never been."""
    keras.layers.Dense(1)  # the first is named plain "dense"; every later one is numbered
    base, _, number = keras.layers.Dense(1).name.rpartition("_")  # e.g. dense_4: what Keras counted so far
    following = f"{base}_{int(number) + 1}"
    with internals.kept_layer_names():
        inside = [keras.layers.Dense(1).name for _ in range(3)]
    assert inside[0] == following, changed("Keras's count of the names it gave", "the name counter")
    assert keras.layers.Dense(1).name == following  # the three made inside are not counted
    with pytest.raises(RuntimeError), internals.kept_layer_names():
        keras.layers.Dense(1)
        raise RuntimeError("a fix that fails while the model is made again")
    assert keras.layers.Dense(1).name == f"{base}_{int(number) + 2}"
