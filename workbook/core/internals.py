"""Every use of a private or process-wide TensorFlow or Keras hook, in one place.

Used by the monitor (03, 04) and by :func:`workbook.find_gradient_breaks` (03); nothing
else in the package reaches into TensorFlow or Keras. Each entry says what it touches and
why no public API serves; tests/test_internals.py pins each one, so a new TensorFlow or
Keras that changes it fails there, by name, instead of deep inside a notebook. What is
changed for a while is changed by a context manager that puts back exactly what it found,
also when its body raises and when it is nested.
"""

import contextlib
from dataclasses import dataclass

# -- Keras: a model's train step, its optimizer, its train function -------------------------


@contextlib.contextmanager
def instance_attribute(owner, name, value):
    """Set ``owner.name = value`` on the object alone for a ``with``, then put back what was there.

    Used for ``model.train_step`` and ``optimizer.apply``: Keras offers no hook that sees the
    gradients a step hands its optimizer, but it looks both up on the instance at each call.
    """
    missing = object()
    own = vars(owner).get(name, missing)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if own is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, own)


def train_function_from(model, train_step):
    """Keras's own train function for ``model``, built around ``train_step`` instead of the model's.

    ``model.make_train_function(force=True)`` is the only way to have Keras wrap a step the
    way ``fit`` runs it (distribution, steps per execution); it reads ``model.train_step`` and
    writes ``model.train_function``, both put back here.
    """
    kept = model.train_function
    try:
        with instance_attribute(model, "train_step", train_step):
            model.make_train_function(force=True)
        return model.train_function
    finally:
        model.train_function = kept


def train_function(model):
    """The function ``fit`` calls for its next batch (its next ``steps_per_execution`` batches).

    Used by the monitor (04). Keras keeps it in ``model.train_function`` and ``fit`` looks it
    up again for every batch, after the callbacks' ``on_train_batch_begin``; no public hook runs
    a step of one's own in its place.
    """
    return model.train_function


def set_train_function(model, function):
    """Make ``function`` what ``fit`` calls for its next batch (see :func:`train_function`)."""
    model.train_function = function


# -- TensorFlow: what a user's own train_step differentiates --------------------------------


@dataclass
class GradientCall:
    """One call of ``tape.gradient``: its target, its sources, and what it returned."""

    target: object
    sources: object
    gradients: object


@contextlib.contextmanager
def recorded_tape_gradients():
    """Record every ``tf.GradientTape.gradient`` call made in the process during a ``with``.

    The only way to learn which loss an overridden ``train_step`` differentiates is to watch
    its ``tape.gradient`` call; TensorFlow has no hook for it, so the method is replaced on the
    class (for every thread) and put back on exit. Yields the list the calls are appended to.
    """
    import tensorflow as tf

    calls = []
    original = tf.GradientTape.gradient

    def recording(tape, target, sources, *args, **kwargs):
        gradients = original(tape, target, sources, *args, **kwargs)
        calls.append(GradientCall(target, sources, gradients))
        return gradients

    tf.GradientTape.gradient = recording
    try:
        yield calls
    finally:
        tf.GradientTape.gradient = original


# -- Keras: a layer's attributes, as stored ---------------------------------------------------


def layer_attributes(layer):
    """The attributes stored on ``layer`` itself (its instance ``__dict__``, written in place).

    Keras keeps a layer's attributes there and lists them nowhere public (its tracker is
    private); writing the dict directly puts a value back without Keras tracking it again.
    """
    return vars(layer)


def restore_layer_attributes(attributes):
    """Put every layer's attributes back as in ``attributes``, pairs of (layer, dict copied before)."""
    for layer, before in attributes:
        now = layer_attributes(layer)
        for name in [name for name in now if name not in before]:
            del now[name]
        for name, value in before.items():
            if name not in now or now[name] is not value:
                now[name] = value


@contextlib.contextmanager
def kept_layer_attributes(layers):
    """Yield (layer, attributes before) pairs; on exit every layer has exactly those attributes again."""
    attributes = [(layer, dict(layer_attributes(layer))) for layer in layers]
    try:
        yield attributes
    finally:
        restore_layer_attributes(attributes)


# -- TensorFlow: Grappler, for the whole process ----------------------------------------------


@contextlib.contextmanager
def grappler_passes_off(names):
    """Switch the Grappler passes ``names`` off for a ``with``, then put back each one's setting.

    A concrete function takes no optimizer options of its own: ``tf.config.optimizer`` sets
    them for the process. A pass that had no setting before gets none again (``None`` is
    TensorFlow's "no setting", which leaves the pass at its default).
    """
    import tensorflow as tf

    before = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options(dict.fromkeys(names, False))
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({name: before.get(name) for name in names})


# -- TensorFlow: which CPU kernels it runs ---------------------------------------------------


def onednn_kernels_on():
    """True where the TensorFlow loaded runs oneDNN's CPU kernels, as it decided when it loaded.

    TensorFlow decides from ``TF_ENABLE_ONEDNN_OPTS`` and the CPU (on by default only where it
    has AVX-512 VNNI or BF16, or AMX) and offers no public way to ask; ``IsMklEnabled`` is the
    function its own tests use. Loads TensorFlow.
    """
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


# -- TensorFlow: graphs, their functions, and gradient functions ------------------------------


def function_body(graph, name):
    """The graph of the function ``name`` in ``graph``'s own library, or None if it has none.

    A call op names its function; ``graph._get_function`` is the library's only accessor. A
    function loaded without its Python graph is rebuilt from its definition by TensorFlow's
    ``function_def_to_graph``, which is not exported either.
    """
    function = graph._get_function(name)
    if function is None:
        return None
    body = getattr(function, "graph", None)
    if body is None:
        from tensorflow.python.framework.function_def_to_graph import function_def_to_graph

        body = function_def_to_graph(function.definition)
    return body


#: The private attributes where TensorFlow keeps the body graphs of a traced control-flow op.
CONTROL_FLOW_GRAPHS = {"body": "_body_graph", "then": "_true_graph", "else": "_false_graph"}


def control_flow_graph(op, part):
    """The body graph ``op`` was traced with (``part`` one of CONTROL_FLOW_GRAPHS), or None.

    ``tf.while_loop`` and ``tf.cond`` keep their Python graphs on the op only (``tf.switch_case``
    keeps none); without one a body is rebuilt from the library (:func:`function_body`).
    """
    return getattr(op, CONTROL_FLOW_GRAPHS[part], None)


def custom_gradient_type(op):
    """The name ``tf.custom_gradient`` registered ``op``'s gradient under, or None.

    It is kept in the op's private attribute ``_gradient_op_type``; nothing public says
    whether an op's gradient is a custom one.
    """
    try:
        return op.get_attr("_gradient_op_type")
    except ValueError:
        return None


def gradient_function(op):
    """TensorFlow's registered gradient function of ``op``: None if registered as having none.

    Raises LookupError for an op type with no registration. The registry has no public
    accessor; ``tensorflow.python.framework.ops.get_gradient_function`` is what backprop uses.
    """
    from tensorflow.python.framework import ops as tf_ops

    return tf_ops.get_gradient_function(op)


# -- Keras, TensorFlow, NumPy, Python: the random state a run draws from ----------------------

#: The name Keras keeps its global SeedGenerator under in ``keras.src.backend.common.global_state``.
KERAS_GLOBAL_SEED_GENERATOR = "global_seed_generator"


def keras_global_seed_generator():
    """Keras's global SeedGenerator, or None while no unseeded ``keras.random`` call has made it.

    Every ``keras.random`` call without a seed (a Lambda's ``keras.random.normal``) draws from
    it and moves its state on; Keras exports no accessor for it.
    """
    from keras.src.backend.common import global_state

    return global_state.get_global_attribute(KERAS_GLOBAL_SEED_GENERATOR)


def _set_keras_global_seed_generator(generator):
    from keras.src.backend.common import global_state

    global_state.set_global_attribute(KERAS_GLOBAL_SEED_GENERATOR, generator)


def _tensorflow_generator_module():
    """Where ``tf.random.get_global_generator`` keeps its generator (None until first asked for)."""
    from tensorflow.python.ops import stateful_random_ops

    return stateful_random_ops


def _state_of(generator):
    """(generator, a copy of its state variable's value), or (None, None) for no generator."""
    return (None, None) if generator is None else (generator, generator.state.numpy())


@dataclass
class RandomState:
    """Every process-wide random state a call of a model can move on, as found."""

    python: object
    numpy: object
    keras: tuple  # (the global SeedGenerator or None, its state)
    tensorflow: tuple  # (tf.random's global Generator or None, its state)
    op_seeds: object  # the state of TensorFlow's eager op-seed counter, None before tf.random.set_seed


def _op_seeds():
    """TensorFlow's eager op-seed counter: a ``random.Random`` that ``tf.random.set_seed`` makes, else None.

    An unseeded eager ``tf.random.normal`` takes its op seed from it; no public API reads it.
    """
    from tensorflow.python.eager import context

    return getattr(context.context(), "_rng", None)


def random_state():
    """The :class:`RandomState` of the process now."""
    import random

    import numpy as np

    op_seeds = _op_seeds()
    return RandomState(
        python=random.getstate(),
        numpy=np.random.get_state(),
        keras=_state_of(keras_global_seed_generator()),
        tensorflow=_state_of(_tensorflow_generator_module().global_generator),
        op_seeds=None if op_seeds is None else op_seeds.getstate(),
    )


def restore_random_state(state):
    """Put back a :class:`RandomState`: a generator made since is dropped again, so it is made later as before."""
    import random

    import numpy as np

    random.setstate(state.python)
    np.random.set_state(state.numpy)
    generator, value = state.keras
    _set_keras_global_seed_generator(generator)
    if generator is not None:
        generator.state.assign(value)
    generator, value = state.tensorflow
    _tensorflow_generator_module().global_generator = generator
    if generator is not None:
        generator.reset(value)
    _restore_op_seeds(state.op_seeds)


def _restore_op_seeds(found):
    """Put the eager op-seed counter back, if it moved, and forget the kernels made since.

    TensorFlow caches an eager random kernel per op seed, with its own running state: an op
    seed handed out again would continue that kernel's draws instead of starting them, so the
    cache is cleared (as ``tf.random.set_seed`` does). Only when the counter moved: clearing
    also restarts a kernel of an op seed given by hand.
    """
    from tensorflow.python.eager import context

    op_seeds = _op_seeds()
    if found is None or op_seeds is None or op_seeds.getstate() == found:
        return
    op_seeds.setstate(found)
    context.context().clear_kernel_cache()


@contextlib.contextmanager
def kept_random_state():
    """Every random state of :func:`random_state` as found again on exit, also when the body raises.

    Used by :func:`workbook.find_gradient_breaks` (03), which runs the model once more: its run
    must not move on the draws of the student's training (04's monitor runs it mid-``fit``).
    """
    state = random_state()
    try:
        yield
    finally:
        restore_random_state(state)


#: The name Keras counts the layers (and operations) it has named under, per name, in its global state.
KERAS_NAME_COUNTS = "object_name_uids"


@contextlib.contextmanager
def kept_layer_names():
    """Keras's count of the names it gave (``dense``, ``dense_1``, ...) as found again on exit.

    Used by :func:`workbook.find_gradient_breaks` (03), which may make a model again to check a fix:
    the next layer the student makes is named as it would have been without the finder.
    """
    import collections

    from keras.src.backend.common import global_state

    counts = global_state.get_global_attribute(KERAS_NAME_COUNTS)
    kept = None if counts is None else dict(counts)
    try:
        yield
    finally:
        restored = None if kept is None else collections.defaultdict(int, kept)
        global_state.set_global_attribute(KERAS_NAME_COUNTS, restored)


# -- Python, Keras, tf.data: the warnings Python shows, Keras's traceback filter, a dataset's pipeline --


@contextlib.contextmanager
def shown_warnings(callback):
    """Call ``callback(message)`` after Python shows each warning, for a ``with``; the warning shown as before.

    Used by the missing-gradients extension (03). ``warnings.showwarning`` is the documented
    hook, but Python hands a replacement no ``source``, so tracemalloc's "Object allocated at"
    lines vanish; ``warnings._showwarnmsg`` gets the whole ``WarningMessage`` (Python's C
    ``warn`` calls it too) and is called only for warnings the filters let through.
    """
    import warnings

    original = warnings._showwarnmsg

    def showing(message):
        original(message)
        callback(message)

    warnings._showwarnmsg = showing
    try:
        yield
    finally:
        if warnings._showwarnmsg is showing:  # a hook put on top of this one keeps working
            warnings._showwarnmsg = original


#: The locals of the frame of Keras's traceback filter that hold the call it wraps: the function,
#: its positional and its keyword arguments.
KERAS_FILTERED_CALL_LOCALS = ("fn", "args", "kwargs")


def keras_traceback_filter_code():
    """The code object of the wrapper Keras's traceback filter puts around its calls, ``fit``'s included.

    Used by the missing-gradients extension (03). Keras drops its own frames from the
    traceback of an error (``fit``'s included) but the one of the wrapper that filters them,
    ``keras.src.utils.traceback_utils.filter_traceback``'s ``error_handler``, whose locals
    :data:`KERAS_FILTERED_CALL_LOCALS` are the call it wrapped: that is the only trace left of the
    model and data of a failed ``fit``. The wrapper is private; its code is the same for every call.
    """
    from keras.src.utils import traceback_utils

    return traceback_utils.filter_traceback(len).__code__


def dataset_variant(dataset):
    """The variant tensor of a ``tf.data.Dataset``: the only handle on its pipeline.

    Used by the missing-gradients extension (03), which serialises the pipeline with
    ``tf.raw_ops.DatasetToGraphV2`` to learn whether a new iterator reads the same data; the
    op takes this tensor, which TensorFlow keeps in the private ``dataset._variant_tensor``.
    """
    return dataset._variant_tensor
