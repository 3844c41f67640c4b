"""What :func:`workbook.find_gradient_breaks` differentiates, and how it leaves the target as it was.

Introduced in 03_finding_gradient_killers.ipynb. A function is followed as it is; a
layer on its input; a model on ``(x, y)`` through the loss ``fit`` differentiates (an
overridden ``train_step``, ``compute_loss``, the compiled loss, or a loss passed in).
"""

import contextlib
import inspect
from dataclasses import dataclass

from workbook.core import internals
from workbook.core.arguments import refuse


@dataclass
class Target:
    """What :func:`workbook.find_gradient_breaks` follows, made ready to trace.

    ``call(*arguments)`` computes the output followed; ``inputs`` are the (name, tensor)
    pairs whose gradient is reported (none for a model with weights: what matters there
    is its weights); ``variables`` the trainable variables, with the name of the layer
    of each in ``layer_of`` (by id); ``description`` says in words what is followed.
    """

    call: object
    inputs: list
    variables: list
    layer_of: dict
    description: str
    arguments: list


def prepare(target, example, loss=None):
    """The :class:`Target` to trace for a function, layer or model, and its example."""
    import keras

    parts = _example_parts(example)
    is_model = isinstance(target, keras.Model)
    call, description, inputs = _what_to_follow(target, example, parts, loss)
    if isinstance(target, keras.layers.Layer) and not target.built:
        target(inputs[0][1])  # build the weights eagerly, outside the traced function
    variables, layer_of = _trainable_variables(target)
    if is_model and target.trainable_variables:
        # For a whole model what matters is its weights: an input that is cut
        # (a preprocessing step, the targets y) stops nothing from training.
        inputs = [(None, tensor) for _, tensor in inputs]
    call, inputs = _one_tensor_per_argument(call, inputs)
    arguments = [tensor for _, tensor in inputs]
    inputs = [(name, tensor) for name, tensor in inputs if name is not None]
    return Target(call, inputs, variables, layer_of, description, arguments)


def _example_parts(example):
    """The example as a list of parts: one per item of a tuple or list, else one.

    Each part is a tensor, or a dict, list or tuple of them (the inputs of a model with
    several inputs: ``({"a": x_a, "b": x_b}, y)`` or ``([x_a, x_b], y)``), nested as deep as given.
    """
    if isinstance(example, (tuple, list)):
        return [_as_structure(part, f"example[{i}]") for i, part in enumerate(example)]
    return [_as_structure(example, "example")]


def _one_tensor_per_argument(call, inputs):
    """(call, inputs) with each dict, list or tuple of tensors made one argument per tensor (what is traced)."""
    structures = [tensor for _, tensor in inputs]
    inputs = [(name, leaf) for name, structure in inputs for name, leaf in _named_leaves(name, structure)]
    if any(not _is_tensor(structure) for structure in structures):
        call = _Packed(call, structures)
    return call, inputs


def _as_structure(value, name):
    """``value`` with each array made a tensor, its dicts, lists and tuples of arrays kept as they are."""
    if isinstance(value, dict) and value:
        return {key: _as_structure(item, f"{name}[{key!r}]") for key, item in value.items()}
    if isinstance(value, (tuple, list)) and value and all(_is_structured(item) for item in value):
        return type(value)(_as_structure(item, f"{name}[{i}]") for i, item in enumerate(value))
    return _as_tensor(value, name)


def _is_structured(value):
    """An array, a tensor, or a dict of them: an item of a list of inputs (a list of numbers is one array)."""
    return isinstance(value, dict) or (hasattr(value, "shape") and hasattr(value, "dtype"))


def _is_tensor(value):
    return not isinstance(value, (dict, tuple, list))


def _named_leaves(name, structure):
    """(name, tensor) of each tensor in ``structure``, in ``tf.nest`` order: ``x['a']``, ``x[0]``."""
    if _is_tensor(structure):
        return [(name, structure)]
    items = sorted(structure.items()) if isinstance(structure, dict) else enumerate(structure)
    return [leaf for key, item in items for leaf in _named_leaves(None if name is None else f"{name}[{key!r}]", item)]


class _Packed:
    """A call of structured arguments, made a call of their tensors one by one (what is traced)."""

    def __init__(self, call, structures):
        self.call, self.structures = call, structures
        self.__name__ = getattr(call, "__name__", type(call).__name__)

    def __call__(self, *tensors):
        import tensorflow as tf

        return self.call(*tf.nest.pack_sequence_as(self.structures, list(tensors)))

    def __getattr__(self, name):  # what the call records as it runs (a train_step's missing gradients)
        if name == "call":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.call, name)


def _what_to_follow(target, example, parts, loss):
    """(call, description, named inputs): a model's loss, a layer's output, or a function's output."""
    import keras

    # (x,) is a batch without targets, as fit hands it to a train_step of your own (a GAN's images).
    as_fit_gives = len(parts) in (2, 3) or (len(parts) == 1 and isinstance(example, tuple) and _own_step(target))
    if isinstance(target, keras.Model) and _follows_loss(target, loss) and as_fit_gives:
        call, description = _model_loss(target, loss)
        return call, description, list(zip(["x", "y", "sample_weight"], parts, strict=False))  # sample_weight optional
    if isinstance(target, keras.layers.Layer):
        call, description = _layer_output(target, example, parts)
        return call, description, [("inputs", parts[0])]
    description = f"the output of {getattr(target, '__name__', repr(target))}"
    return target, description, list(zip(_argument_names(target, len(parts)), parts, strict=True))


def _own_step(model):
    import keras

    return isinstance(model, keras.Model) and type(model).train_step is not keras.Model.train_step


def _follows_loss(model, loss):
    """Whether a model is followed through a loss: one passed in, its own train_step or compute_loss, or compiled."""
    import keras

    custom_step = type(model).train_step is not keras.Model.train_step
    custom_loss = type(model).compute_loss is not keras.Model.compute_loss
    return loss is not None or custom_step or custom_loss or getattr(model, "loss", None) is not None


def _model_loss(model, loss):
    """(call of (x, y[, sample_weight]), description) for the loss that ``fit`` differentiates."""
    import keras

    if loss is not None:

        def call(x, y, *weights):
            return loss(y, model(x, training=True))

        return call, f"the loss you passed, on model {model.name!r} and (x, y)"
    if type(model).train_step is not keras.Model.train_step:
        return _train_step_loss(model), f"the loss that {type(model).__name__}.train_step differentiates, on (x, y)"
    # compute_loss took a `training` argument in Keras 3.3; an override may not have it.
    training = {"training": True} if "training" in inspect.signature(model.compute_loss).parameters else {}

    def call(x, y, *weights):
        y_pred = model(x, training=True)
        weight = weights[0] if weights else None
        return model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=weight, **training)

    return call, f"the loss of model {model.name!r} on (x, y)"


def _layer_output(layer, example, parts):
    """(call of one input, description) for a layer, or a model followed without a loss."""
    if len(parts) != 1:
        allowed = (
            f"one input, not {len(parts)} arrays: a layer or a model without a loss takes one. "
            "For a model, compile it with loss=..., or pass find_gradient_breaks(model, (x, y), loss=fn)"
        )
        refuse("example", example, allowed, "find_gradient_breaks")

    def call(x):
        return layer(x, training=True)

    return call, f"the output of {type(layer).__name__} {layer.name!r}"


def _trainable_variables(target):
    """The target's trainable variables, each once, and the name of the layer of each (by id)."""
    import keras

    variables, layer_of = [], {}
    if isinstance(target, keras.layers.Layer):
        for layer in getattr(target, "layers", None) or [target]:
            for variable in layer.trainable_variables:
                if id(variable) not in layer_of:
                    variables.append(variable)
                    layer_of[id(variable)] = layer.name
    return variables, layer_of


def _train_step_loss(model):
    """A function of (x, y[, sample_weight]) returning the loss the model's own train_step differentiates.

    The step runs as written, except that the optimizer applies nothing: the target of
    the step's ``tape.gradient`` call is recorded and returned.
    """
    import keras
    import tensorflow as tf

    def call(*parts):
        with internals.recorded_tape_gradients() as recorded, contextlib.ExitStack() as applies_nothing:
            for optimizer in optimizers(model):  # model.optimizer, and any a train_step keeps for itself
                applies_nothing.enter_context(internals.instance_attribute(optimizer, "apply", lambda *a, **k: None))
            try:
                model.train_step(keras.utils.pack_x_y_sample_weight(*parts))  # as fit hands a batch: x alone, no (x,)
            finally:
                if recorded:
                    # What your own tape returned: None where it did not record the way (stop_recording).
                    last = recorded[-1]
                    call.missing = [
                        source.path
                        for source, gradient in zip(
                            tf.nest.flatten(last.sources), tf.nest.flatten(last.gradients), strict=False
                        )
                        if gradient is None and hasattr(source, "path")
                    ]
        if not recorded:
            raise ValueError(
                f"{type(model).__name__}.train_step never called tape.gradient, so there is no loss to follow; "
                "pass find_gradient_breaks(model, (x, y), loss=fn) instead."
            )
        return recorded[-1].target

    call.missing = []
    call.step = type(model).train_step
    return call


def _argument_names(function, count):
    """The names of a function's first ``count`` parameters (``argument 0``... if unknown)."""
    try:
        names = [p.name for p in inspect.signature(function).parameters.values()][:count]
    except (TypeError, ValueError):
        names = []
    return names + [f"argument {i}" for i in range(len(names), count)]


def _as_tensor(value, name):
    import tensorflow as tf

    try:
        return tf.convert_to_tensor(value)
    except (TypeError, ValueError) as error:
        why = str(error).splitlines()[0][:120].rstrip(".") if str(error) else type(error).__name__
    # Refused outside the except block, so the student sees one error, not TensorFlow's under it.
    refuse(name, value, f"an array or tensor, which TensorFlow can convert ({why})", "find_gradient_breaks")


def stateful_variables(target):
    """Every variable a call or a train_step could change: weights, statistics, metrics, optimizer."""
    import keras

    if not isinstance(target, keras.layers.Layer):
        return []
    found = list(target.variables) + [v for metric in getattr(target, "metrics", []) for v in metric.variables]
    found += [v for optimizer in optimizers(target) for v in optimizer.variables]
    return list({id(v): v for v in found}.values())


def optimizers(model):
    """``model.optimizer`` and every optimizer the model holds in an attribute of its own.

    A train_step written for two networks (a GAN's ``self.d_optimizer`` and ``self.g_optimizer``)
    keeps its optimizers where Keras does not track them: the finder's runs of the step must
    neither apply them nor leave them changed.
    """
    import keras

    found = [getattr(model, "optimizer", None)]
    for value in internals.layer_attributes(model).values():
        if isinstance(value, dict):
            value = list(value.values())
        found += list(value) if isinstance(value, (list, tuple)) else [value]
    chosen = [o for o in found if isinstance(o, keras.optimizers.Optimizer)]
    return list({id(o): o for o in chosen}.values())


def all_layers(target):
    """The target and every layer inside it, found through their attributes."""
    import keras

    if not isinstance(target, keras.layers.Layer):
        return []
    seen, stack = {}, [target]
    while stack:
        layer = stack.pop()
        if id(layer) in seen:
            continue
        seen[id(layer)] = layer
        for value in internals.layer_attributes(layer).values():
            values = value if isinstance(value, (list, tuple)) else [value]
            stack.extend(v for v in values if isinstance(v, keras.layers.Layer))
    return list(seen.values())


def changed_attributes(attributes):
    """(layer, attribute name, value before, value now) for each attribute a call rebound."""
    changed = []
    for layer, before in attributes:
        for name, value in internals.layer_attributes(layer).items():
            if name in before and before[name] is not value:
                changed.append((layer, name, before[name], value))
    return changed
