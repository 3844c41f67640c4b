"""An IPython extension: when training finds no gradient, name the op and the line that cut it.

Introduced in 03_finding_gradient_killers.ipynb. Load it once, in the Setup cell::

    %load_ext workbook.finder.missing_gradients

From then on, when ``fit`` or ``train_on_batch`` raises "No gradients provided for any
variable", the notebook shows the error as always and, under it, the report of
:func:`workbook.find_gradient_breaks` run on the model and the first batch of the call
that failed. When Keras only warns that "Gradients do not exist for variables" (some
layers are cut, the rest train), the report follows at the end of the cell's output.
An optimizer step in a loop of your own gets a note naming the model to pass to the
finder. Nothing else changes: every other error and warning is shown as it is, and
batches where the gradient flows run no code of this extension.

It uses IPython's documented hooks only: ``set_custom_exc`` for the error, the
``post_run_cell`` event for the report after a warning, and Python's documented
``warnings.showwarning`` (called first, unchanged) to notice the warning.
``%unload_ext workbook.finder.missing_gradients`` puts all three back as they were.
"""

import ast
import inspect
import linecache
import sys
import warnings

NO_GRADIENTS = "No gradients provided for any variable"
SOME_MISSING = "Gradients do not exist for variables"
#: The Keras methods whose frame holds the model and the data of a training call.
TRAINING_CALLS = ("fit", "train_on_batch")
#: Rows of the data the finder is run on when fit was given whole arrays and no batch_size (fit's default).
DEFAULT_BATCH = 32

_ACTIVE = {}  # shell -> its MissingGradients, while loaded


def load_ipython_extension(shell):
    """Turn the extension on in ``shell`` (what ``%load_ext workbook.finder.missing_gradients`` calls)."""
    if shell not in _ACTIVE:
        _ACTIVE[shell] = MissingGradients(shell)
        _ACTIVE[shell].start()


def unload_ipython_extension(shell):
    """Turn it off and put back what it replaced (``%unload_ext workbook.finder.missing_gradients``)."""
    active = _ACTIVE.pop(shell, None)
    if active is not None:
        active.stop()


class MissingGradients:
    """The hooks of one shell: the error handler, the warning watcher, and the reports they wait to show."""

    def __init__(self, shell):
        self.shell = shell
        self.pending = []  # (model, example) found when Keras warned, shown after the cell
        self._previous = None

    def start(self):
        shell = self.shell
        self._previous = (shell.custom_exceptions, getattr(shell, "CustomTB", None), warnings.showwarning)
        others = tuple(e for e in shell.custom_exceptions if e is not ValueError)
        shell.set_custom_exc(others + (ValueError,), self.on_error)
        warnings.showwarning = self.on_warning
        shell.events.register("post_run_cell", self.after_cell)

    def stop(self):
        exceptions, handler, showwarning = self._previous
        self.shell.custom_exceptions, self.shell.CustomTB = exceptions, handler
        if warnings.showwarning == self.on_warning:
            warnings.showwarning = showwarning
        self.shell.events.unregister("post_run_cell", self.after_cell)

    def on_error(self, shell, etype, value, tb, tb_offset=None):
        """IPython's custom exception handler: the error first, exactly as IPython shows it, then the culprit."""
        exceptions, handler, _ = self._previous
        if handler is not None and not issubclass(etype, ValueError) and issubclass(etype, exceptions):
            return handler(etype, value, tb, tb_offset=tb_offset)
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        if NO_GRADIENTS in str(value):
            frames = _frames_of(tb)
            self._explain(_training_call(frames) or _training_call_in_source(frames) or _own_loop(frames))
        return None

    def on_warning(self, message, category, filename, lineno, file=None, line=None):
        """warnings.showwarning: show the warning as before, and remember a training call missing gradients."""
        self._previous[2](message, category, filename, lineno, file, line)
        if SOME_MISSING in str(message):
            found = _training_call(_frames_of_stack(sys._getframe(1)))
            if found is not None and found not in self.pending:
                self.pending.append(found)

    def after_cell(self, result=None):
        """post_run_cell: the reports for the warnings this cell raised, under its output."""
        pending, self.pending = self.pending, []
        for found in pending:
            self._explain(found)

    def _explain(self, found):
        from IPython.display import display

        if found is None:
            return
        if isinstance(found, str):
            print(found)
            return
        model, example, description = found
        from workbook.finder.diagnosis import find_gradient_breaks

        try:
            report = find_gradient_breaks(model, example)
        except Exception as error:  # the student's error above is what matters; say why there is no more
            print(f"workbook.finder.missing_gradients could not follow the gradient of {description}: {error}")
            return
        print(f"The op that cut the gradient, found by workbook.find_gradient_breaks on {description}:")
        display(report)


def _frames_of(tb):
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _frames_of_stack(frame):
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames[::-1]


def _training_call(frames):
    """(model, example, description) from the frame of a Keras fit / train_on_batch call, or None."""
    import keras

    for frame in frames:
        model = frame.f_locals.get("self")
        if frame.f_code.co_name in TRAINING_CALLS and isinstance(model, keras.Model):
            example = _first_batch(frame.f_code.co_name, frame.f_locals)
            if example is not None:
                rows = len(example[0])
                return model, example, f"model {model.name!r} and the first batch ({rows} rows) of this call"
    return None


def _training_call_in_source(frames):
    """(model, example, description) read from your line that called fit, when Keras hid its own frames.

    Keras filters its frames out of the traceback, so the arguments of fit are read from your
    code: the call ``something.fit(...)`` on the line that failed, whose receiver and arguments
    are names, attributes, constants and slices (nothing is called to get them).
    """
    own = [frame for frame in frames if _is_yours(frame.f_code.co_filename)]
    for frame in reversed(own):
        call = _call_on_line(frame.f_code.co_filename, frame.f_lineno)
        if call is not None:
            return _training_call_read(call, frame)
    return None


def _training_call_read(call, frame):
    """(model, example, description) of the training ``call`` in ``frame``, or None if it cannot be read."""
    import keras

    try:
        model = _value(call.func.value, frame)
        arguments = [_value(argument, frame) for argument in call.args]
        keywords = {k.arg: _value(k.value, frame) for k in call.keywords if k.arg}
    except ValueError:
        return None
    if not isinstance(model, keras.Model):
        return None
    bound = inspect.signature(getattr(model, call.func.attr)).bind_partial(*arguments, **keywords)
    example = _first_batch(call.func.attr, bound.arguments)
    if example is None:
        return None
    return model, example, f"model {model.name!r} and the first batch ({len(example[0])} rows) of this call"


def _is_yours(filename):
    """Your code: not a library's, or a cell of a terminal IPython (compiled as '<ipython-input-...>')."""
    from workbook.core.code_origin import is_library

    return not is_library(filename) or filename.startswith("<ipython-input")


def _call_on_line(filename, line):
    """The ``x.fit(...)`` / ``x.train_on_batch(...)`` call that spans ``line`` of a file or cell, or None."""
    source = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in TRAINING_CALLS
            and node.lineno <= line <= node.end_lineno
        ):
            return node
    return None


#: What an argument may be made of to be read back: nothing that calls code of yours.
PLAIN_NODES = (
    ast.Name,
    ast.Attribute,
    ast.Subscript,
    ast.Slice,
    ast.Tuple,
    ast.Constant,
    ast.Load,
    ast.UnaryOp,
    ast.USub,
)


def _value(node, frame):
    """The value of a plain expression (see PLAIN_NODES) in ``frame``; ValueError for anything else."""
    if not all(isinstance(part, PLAIN_NODES) for part in ast.walk(node)):
        raise ValueError("not a plain expression")
    code = compile(ast.Expression(node), "<argument>", "eval")
    return eval(code, frame.f_globals, frame.f_locals)  # names and slices only, checked above


def _first_batch(call, arguments):
    """(x, y[, sample_weight]) of the first batch a training call sees, or None if it cannot be had."""
    import numpy as np
    import tensorflow as tf

    x, y, weights = arguments.get("x"), arguments.get("y"), arguments.get("sample_weight")
    if isinstance(x, tf.data.Dataset):
        batch = next(iter(x))  # a new iterator: the one fit uses is left as it was
        return tuple(batch) if isinstance(batch, (tuple, list)) else None
    if not _arrays_to_slice(x, y):
        return None  # a generator (reading it would take your data), a dict of inputs, or no targets
    if call == "fit":
        rows = arguments.get("batch_size") or DEFAULT_BATCH
        x, y = x[:rows], y[:rows]
        weights = None if weights is None else weights[:rows]
    parts = [np.asarray(x), np.asarray(y)] + ([] if weights is None else [np.asarray(weights)])
    return tuple(parts)


def _arrays_to_slice(x, y):
    return x is not None and y is not None and not isinstance(x, dict) and hasattr(x, "shape")


def _own_loop(frames):
    """A note for an optimizer step in a loop of your own: the model to pass to the finder."""
    import keras

    for frame in reversed(frames):
        if not _is_yours(frame.f_code.co_filename):
            continue
        models = [name for name, value in frame.f_locals.items() if isinstance(value, keras.Model)]
        if models:
            return (
                f"No variable got a gradient. To name the op that cut it, pass your model and one batch to "
                f"the finder: workbook.find_gradient_breaks({models[0]}, (x_batch, y_batch), loss=your_loss)."
            )
        break
    return None
