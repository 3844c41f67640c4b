"""A fix on a line that runs once, when the model is made, checked on the model made again with it.

Introduced in 03_finding_gradient_killers.ipynb (the section "The fix, checked on your example").
The line that made a layer (``keras.layers.Resizing(...)`` in a functional model), or a line of a
layer's ``__init__`` or ``build()``, does not run when the model runs again: a fix there changes
nothing until the model is made again. So the model is made again the way Keras copies a model
(``keras.models.clone_model``, each layer from its config): with the layer the fix's NEW makes
in place of the one OLD made, or with every layer of the class whose code holds the line made
by that class with the fix applied. The weights are copied over by layer, and the copy is run
on your example under a ``GradientTape``, as :mod:`workbook.finder.advice.checked` runs a fix
of a line that runs again. What cannot be made again this way (a subclassed model without a
config, code that needs names of the function around it) is not checked, and the report says so.
"""

import inspect
import sys
import textwrap

import numpy as np

from workbook.core.code_origin import source_span, within


def runs_once(culprit):
    """Whether the culprit's line runs only when the model is made: it made a layer, or it is in build()/__init__."""
    return bool(culprit.file) and (bool(culprit.layer) or culprit.reason == "disconnected")


class Rebuilt:
    """Makes the target again with a fix applied to the line that made a layer or a layer's weights."""

    def __init__(self, target, example, loss, culprit):
        self.target, self.example, self.loss, self.culprit = target, example, loss, culprit

    def followed(self, pairs):
        """The :class:`~workbook.finder.trace.targets.Target` of the target made again with ``pairs``, or None."""
        from workbook.finder.trace.targets import prepare

        try:
            made = self._made_again(pairs)
            if made is None:
                return None
            followed = prepare(made, self.example, self.loss)  # builds a layer made again
            _copy_weights_of(self.target, made)
            return followed
        except Exception:  # the fix, or making the model again, fails here: it is not checked
            return None

    def _made_again(self, pairs):
        import keras

        replace = self._replacing_layer(pairs) if self.culprit.layer else self._replacing_class(pairs)
        if replace is None:
            return None
        if isinstance(self.target, keras.Model):
            made = keras.models.clone_model(self.target, clone_function=replace)
            _copy_weights(self.target, made)
            if getattr(self.target, "loss", None) is not None:
                made.compile(loss=self.target.loss)
            return made
        if isinstance(self.target, keras.layers.Layer):
            made = replace(self.target)
            return made if made is not self.target else None
        return None

    def _replacing_layer(self, pairs):
        """A clone function that makes the culprit's layer from NEW, where OLD is the call that made it; else None."""
        if len(pairs) != 1 or pairs[0][0] not in (self.culprit.code or ""):
            return None
        old, new = pairs[0]
        namespace = _namespace(self.culprit.file)
        layer = next((lay for lay in _layers(self.target) if lay.name == self.culprit.layer), None)
        made_by_old = _evaluated(old, namespace)
        if layer is None or type(made_by_old) is not type(layer):
            return None
        replacement = _evaluated(new, namespace)
        if replacement is None:
            return None
        return lambda each: replacement if each is layer else _same(each)

    def _replacing_class(self, pairs):
        """A clone function that makes each layer of the class whose code holds the line with that code fixed."""
        cls = next((type(lay) for lay in _layers(self.target) if _holds_line(type(lay), self.culprit)), None)
        fixed = _fixed_class(cls, pairs) if cls is not None else None
        if fixed is None:
            return None
        return lambda each: fixed.from_config(each.get_config()) if type(each) is cls else _same(each)


def _layers(target):
    from workbook.finder.trace.targets import all_layers

    return all_layers(target)


def _same(layer):
    """The layer made again from its config, as ``clone_model`` does."""
    return layer.__class__.from_config(layer.get_config())


def _copy_weights(original, made):
    """Each layer of the model ``made`` gets the weights of the layer of ``original`` of its name, where they agree."""
    for layer in made.layers:
        try:
            source = original.get_layer(layer.name)
        except ValueError:
            continue
        _copy_weights_of(source, layer)


def _copy_weights_of(source, layer):
    """``layer`` gets the weights of ``source`` when they have the same shapes, one by one."""
    old, new = source.get_weights(), layer.get_weights()
    if old and [w.shape for w in old] == [w.shape for w in new]:
        layer.set_weights(old)


def _namespace(file):
    """The names a line of ``file`` sees at module level (a notebook cell's: ``__main__``), and what a hint uses."""
    import keras
    import tensorflow as tf

    import workbook

    module = next((m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == file), None)
    module = module or sys.modules.get("__main__")
    return {**vars(module), "workbook": workbook, "keras": keras, "ops": keras.ops, "tf": tf, "np": np}


def _evaluated(expression, namespace):
    try:
        return eval(expression, dict(namespace))  # the hint's own code, or the student's call it replaces
    except Exception:
        return None


def edited_source(obj, pairs):
    """The source of a function or class, dedented, with each OLD of ``pairs`` replaced by its NEW in turn.

    None if the source cannot be read, or an OLD is not exactly once in it when its turn comes.
    """
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None
    for old, new in pairs:
        if source.count(old) != 1:
            return None
        source = source.replace(old, new)
    return source


def _holds_line(cls, culprit):
    """Whether the source of ``cls`` (a layer class of the user's) spans the culprit's line."""
    span = source_span(cls)
    return span is not None and within(span, culprit.file, culprit.line)


def _fixed_class(cls, pairs):
    """``cls`` defined again from its source with each OLD of ``pairs`` replaced by its NEW (once each); else None."""
    source = edited_source(cls, pairs)
    if source is None:
        return None
    namespace = _namespace(inspect.getsourcefile(cls))
    try:
        exec(compile(source, inspect.getsourcefile(cls), "exec"), namespace)
    except Exception:  # names of a function around the class, or a fix that does not run
        return None
    fixed = namespace.get(cls.__name__)
    return fixed if isinstance(fixed, type) and fixed is not cls else None
