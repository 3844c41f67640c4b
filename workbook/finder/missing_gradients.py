"""An IPython extension: when training finds no gradient, name the op and the line that cut it.

Introduced in 03_finding_gradient_killers.ipynb. Load it once, in the Setup cell::

    %load_ext workbook.finder.missing_gradients

From then on, when ``fit`` or ``train_on_batch`` raises "No gradients provided for any
variable" (from Keras's step or your own ``train_step``), or TensorFlow's LookupError for an
op with no registered gradient, the notebook shows the error as always and, under it, the report of
:func:`workbook.find_gradient_breaks` run on the model and the first batch of the call
that failed. When Keras only warns that "Gradients do not exist for variables" (some
layers are cut, the rest train), the report follows at the end of the cell's output.
An optimizer step in a loop of your own gets a note naming the model to pass to the
finder.

It is as harmless as not loading it: every error and warning is shown as without it, and
the report is worked out after the error is shown or after the cell, never while Keras
traces the step. It reads a batch again only where that changes nothing (NumPy arrays,
tensors, dicts and lists of them for a model with several inputs, a ``tf.data`` pipeline
without a generator, a shuffle, random ops or a cache);
for any other data it says which call to paste. It calls none of your code, and when it
fails or is interrupted it says so in one line and stays loaded.

It uses IPython's ``set_custom_exc`` for the error, the ``post_run_cell`` event for the
report after a warning, and :func:`workbook.core.internals.shown_warnings` to notice the
warning. ``%unload_ext workbook.finder.missing_gradients`` puts all three back as they were.
"""

import ast
import contextlib
import inspect
import linecache
import sys
import threading
from dataclasses import dataclass

from workbook.finder.advice import words as hints

NO_GRADIENTS = "No gradients provided for any variable"
#: The errors a training call raises when a gradient is missing: Keras's ValueError (no variable got
#: one), TensorFlow's LookupError (an op on the way has no registered gradient).
HANDLED = (ValueError, LookupError)
SOME_MISSING = "Gradients do not exist for variables"
#: The Keras methods whose frame holds the model and the data of a training call.
TRAINING_CALLS = ("fit", "train_on_batch")
#: The arguments of a training call that say what its first batch is.
DATA_ARGUMENTS = ("x", "y", "sample_weight", "batch_size")
#: Rows of the data the finder is run on when fit was given whole arrays and no batch_size (fit's default).
DEFAULT_BATCH = 32
#: What the extension's own lines start with, so that they are not taken for Keras's.
NAME = "workbook.finder.missing_gradients"
INTERRUPTED = hints.INTERRUPTED.format(name=NAME)
#: The one line for a warning from a thread where no training call can be found.
OTHER_THREAD = (
    f"{NAME}: a gradient is missing, as Keras warned from another thread (a distribution strategy's, say); "
    "the call that trained cannot be found from there, so no culprit this time. To name the op that cut "
    "the gradient, pass one batch: "
    "workbook.find_gradient_breaks(model, (x_batch, y_batch))"
)

#: The shell's attribute holding its MissingGradients while loaded. On the shell, not in this
#: module: a reload of the module (``%autoreload 2`` runs IPython's superreload) makes its
#: globals anew, and ``%unload_ext`` must still find what it has to put back.
ACTIVE = "_workbook_missing_gradients"


def load_ipython_extension(shell):
    """Turn the extension on in ``shell`` (what ``%load_ext workbook.finder.missing_gradients`` calls)."""
    if getattr(shell, ACTIVE, None) is None:
        active = MissingGradients(shell)
        setattr(shell, ACTIVE, active)
        active.start()


def unload_ipython_extension(shell):
    """Turn it off and put back what it replaced (``%unload_ext workbook.finder.missing_gradients``)."""
    active = getattr(shell, ACTIVE, None)
    if active is not None:
        setattr(shell, ACTIVE, None)
        active.stop()


@dataclass
class TrainingCall:
    """A Keras ``fit`` or ``train_on_batch`` call: its model, its data arguments as given, and your line."""

    method: str
    model: object
    arguments: dict
    caller: tuple = None  # (file, line) of your code that made the call, if known


class MissingGradients:
    """The hooks of one shell: the error handler, the warning watcher, and the reports they wait to show."""

    def __init__(self, shell):
        self.shell = shell
        self.pending = []  # TrainingCalls Keras warned about, explained after the cell
        self._previous = None
        self._hooks = None  # the warning hook while started
        self._installed = None  # IPython's handler made from ours, to know it is still in place
        self._after_cell = None  # the post_run_cell callback as registered

    def start(self):
        from workbook.core.internals import shown_warnings

        shell = self.shell
        self._previous = (shell.custom_exceptions, getattr(shell, "CustomTB", None))
        others = tuple(e for e in shell.custom_exceptions if e not in HANDLED)
        shell.set_custom_exc(others + HANDLED, self.on_error)
        self._installed = shell.CustomTB
        self._hooks = contextlib.ExitStack()
        self._hooks.enter_context(shown_warnings(self.on_warning))
        # The very callable registered is the one unregistered: a reload of this module makes
        # ``self.after_cell`` another function, which IPython would not find.
        self._after_cell = self.after_cell
        shell.events.register("post_run_cell", self._after_cell)

    def stop(self):
        exceptions, handler = self._previous
        if getattr(self.shell, "CustomTB", None) is self._installed:  # a handler set after ours stays
            self.shell.custom_exceptions, self.shell.CustomTB = exceptions, handler
        hooks, self._hooks = self._hooks, None
        hooks.close()
        self.shell.events.unregister("post_run_cell", self._after_cell)

    def on_error(self, shell, etype, value, tb, tb_offset=None):
        """IPython's custom exception handler: the error first, exactly as without it, then the culprit."""
        exceptions, handler = self._previous
        if handler is not None and issubclass(etype, exceptions):
            handler(etype, value, tb, tb_offset=tb_offset)
        else:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        self._safely(lambda: self._explain_error(value, tb))

    def on_warning(self, message):
        """After Python shows a warning: note the training call missing gradients (its data is read after the cell).

        This runs while Keras traces the training step, so it only keeps references, and never raises.
        """
        with contextlib.suppress(Exception):
            if self._hooks is not None and SOME_MISSING in str(message.message):
                # A distribution strategy traces the step on a thread of its own, where fit is not
                # on the stack: the thread that called fit waits in it meanwhile.
                call = _training_call_of(_stack_positions(sys._getframe(1))) or _training_call_on_another_thread()
                if call is None and threading.current_thread() is not threading.main_thread():
                    call = OTHER_THREAD  # said after the cell, in one line
                if call is not None and all(_model_of(call) is not _model_of(noted) for noted in self.pending):
                    self.pending.append(call)

    def after_cell(self, result=None):
        """post_run_cell: the reports for the warnings this cell raised, under its output."""
        pending, self.pending = self.pending, []
        if pending:
            self._safely(lambda: [_say(call) if call is OTHER_THREAD else self._explain(call) for call in pending])

    def _safely(self, report):
        """Run ``report``; if it fails or is interrupted, one line says so and the student's work goes on."""
        try:
            report()
        except KeyboardInterrupt:
            _say(INTERRUPTED)
        except Exception as error:
            _say(hints.NO_CULPRIT.format(name=NAME, error=_one_line(error)))

    def _explain_error(self, value, tb):
        positions = _traceback_positions(tb)
        if not positions or not _is_missing_gradient(value):
            return  # another error
        call = _training_call_of(positions)
        if call is not None:  # fit's step, your own train_step included (Keras keeps only your frames of it)
            self._explain(call)
        elif not _is_yours(positions[-1][0].f_code.co_filename):  # your own raise with Keras's words: not ours
            _say(_own_loop_note(positions))

    def _explain(self, call):
        from IPython.display import display

        from workbook.finder.diagnosis import find_known_breaks

        example, why_not = _first_batch_of(call)
        if example is None:
            _say(hints.NOT_READ.format(name=NAME, why_not=why_not, call=_call_to_paste(call)))
            return
        description = _description(call, example)
        try:
            report = find_known_breaks(call.model, example)  # the error says a gradient is missing
        except Exception as error:  # the student's error above is what matters; say why there is no more
            _say(hints.COULD_NOT_FOLLOW.format(name=NAME, description=description, error=_one_line(error)))
            return
        _say(hints.REPORTED_ON.format(description=description))
        display(report)  # at once: nothing is written between the note and its report


def _model_of(call):
    return getattr(call, "model", call)


def _training_call_on_another_thread():
    """The Keras training call that another thread of this process waits in, if one does."""
    here = threading.get_ident()
    for ident, frame in sys._current_frames().items():
        call = None if ident == here else _training_call_of(_stack_positions(frame))
        if call is not None:
            return call
    return None


def _is_missing_gradient(error):
    """Keras's "No gradients provided", or TensorFlow's LookupError for an op with no registered gradient."""
    from workbook.finder.trace.tracing import UNREGISTERED

    text = str(error)
    return NO_GRADIENTS in text if isinstance(error, ValueError) else bool(UNREGISTERED.search(text))


def _say(text):
    """Print one of the extension's lines after all that the cell wrote so far.

    Both streams are sent first, stdout then stderr as the kernel itself sends them, so that a
    warning still waiting on stderr is shown before the help, never between a note and its report.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a stream that cannot flush keeps its text
            stream.flush()
    print(text)


def _one_line(error):
    try:
        text = f"{type(error).__name__}: {error}"
    except Exception:  # an error whose message itself fails: its name is enough
        text = type(error).__name__
    return (text.splitlines() or [""])[0][:300]


# -- which call failed: from the frames, never by evaluating your code --------------------------


def _traceback_positions(tb):
    """(frame, line) of each entry of a traceback, outermost first."""
    positions = []
    while tb is not None:
        positions.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return positions


def _stack_positions(frame):
    """(frame, line) of ``frame`` and its callers, outermost first."""
    return [(frame, frame.f_lineno) for frame in _frames_of_stack(frame)]


def _frames_of_stack(frame):
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames[::-1]


def _training_call_of(positions):
    """The innermost Keras training call among ``positions`` ((frame, line), outermost first), or None."""
    import keras

    for index in range(len(positions) - 1, -1, -1):
        found = _call_in_frame(positions[index][0], keras)
        if found is not None:
            yours = [(frame.f_code.co_filename, line) for frame, line in positions[:index] if _is_yours_frame(frame)]
            return TrainingCall(*found, caller=yours[-1] if yours else None)
    return None


def _call_in_frame(frame, keras):
    """(method, model, data arguments) if ``frame`` runs a Keras fit / train_on_batch, or Keras's filter around one."""
    if frame.f_code.co_name in TRAINING_CALLS:  # the method's own frame (on the stack, or not filtered out)
        model, local = frame.f_locals.get("self"), frame.f_locals
        arguments = {name: local.get(name) for name in DATA_ARGUMENTS}
        return (frame.f_code.co_name, model, arguments) if isinstance(model, keras.Model) else None
    wrapped = filtered_keras_call(frame)
    if wrapped is None or getattr(wrapped[0], "__name__", None) not in TRAINING_CALLS:
        return None
    function, args, kwargs = wrapped
    if not args or not isinstance(args[0], keras.Model):
        return None
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except TypeError:
        return None
    return function.__name__, args[0], {name: bound.arguments.get(name) for name in DATA_ARGUMENTS}


def filtered_keras_call(frame):
    """``(function, args, kwargs)`` when ``frame`` is Keras's traceback filter around that call, else None.

    Keras leaves no frame of its own in the traceback of a failed ``fit`` but that of the
    wrapper that filters them (:func:`workbook.core.internals.keras_traceback_filter_code`),
    whose locals hold the call it wrapped.
    """
    from workbook.core import internals

    if frame.f_code is not internals.keras_traceback_filter_code():
        return None
    function, args, kwargs = (frame.f_locals.get(name) for name in internals.KERAS_FILTERED_CALL_LOCALS)
    return function, tuple(args or ()), dict(kwargs or {})


def _is_yours_frame(frame):
    return _is_yours(frame.f_code.co_filename)


def _is_yours(filename):
    """Your code: not a library's, or a cell of a terminal IPython (compiled as '<ipython-input-...>')."""
    from workbook.core.code_origin import is_library

    return not is_library(filename) or filename.startswith("<ipython-input")


# -- the batch: read again only where that changes nothing --------------------------------------


def _first_batch_of(call):
    """(example, None) with the first batch of ``call`` as (x, y[, sample_weight]), or (None, why not)."""
    import tensorflow as tf

    x, y, weights = (call.arguments.get(name) for name in DATA_ARGUMENTS[:3])
    if isinstance(x, tf.data.Dataset):
        return _first_batch_of_dataset(x)
    # Without y, (x,): the batch as fit hands it to the step (a train_step of your own reads it so).
    parts = [x, y, weights][: 1 if y is None and weights is None else 2 if weights is None else 3]
    if not all(_is_arrays(part) for part in parts):
        return None, _why_not_read(x, y)
    return tuple(_first_rows(part, _rows_read(call)) for part in parts), None


def _rows_read(call):
    """How many rows the call's first batch has: fit's batch_size (32 if not given); train_on_batch's all."""
    if call.method != "fit":
        return None
    rows = call.arguments.get("batch_size")
    return rows if _is_count(rows) else DEFAULT_BATCH


def _first_rows(value, rows):
    """The first ``rows`` rows (all if None) of an array, or of each array of a dict, list or tuple."""
    import numpy as np

    if isinstance(value, dict):
        return {key: _first_rows(item, rows) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return tuple(_first_rows(item, rows) for item in value)  # fit hands a list of inputs on as a tuple
    return np.asarray(value if rows is None else value[:rows])


def _is_count(value):
    from workbook.core.arguments import is_whole_number

    return is_whole_number(value, low=1)


def _first_batch_of_dataset(dataset):
    if not dataset_reads_again_alike(dataset):
        return None, hints.PIPELINE
    batch = next(iter(dataset), None)  # a new iterator: the ones fit uses are left as they were
    if not isinstance(batch, (tuple, list)) or len(batch) not in (2, 3):
        return None, hints.NOT_TUPLES
    return tuple(batch), None


#: Dataset ops whose next iterator draws other data than the last one did: a shuffle or a random
#: source advances its seed for each new iterator, and a cache is being filled by the first.
DRAWING_DATASET_OPS = ("Shuffle", "Random", "Sampling", "SeedGenerator", "Cache")


def dataset_reads_again_alike(dataset):
    """Whether a new iterator of the ``tf.data.Dataset`` reads the same data and changes nothing.

    ``tf.raw_ops.DatasetToGraphV2`` with the policy FAIL (2) refuses a pipeline with state
    outside it (a Python generator, a ``py_function``, a random op in a map, a variable); a
    shuffle serialises but reshuffles for each iterator, so :data:`DRAWING_DATASET_OPS` are
    refused by name.
    """
    import tensorflow as tf

    from workbook.core.internals import dataset_variant

    try:
        serialized = tf.raw_ops.DatasetToGraphV2(input_dataset=dataset_variant(dataset), external_state_policy=2)
    except tf.errors.FailedPreconditionError:
        return False
    graph = tf.compat.v1.GraphDef.FromString(serialized.numpy())
    ops = [node.op for node in graph.node]
    ops += [node.op for function in graph.library.function for node in function.node_def]
    return not any(word in op for op in ops for word in DRAWING_DATASET_OPS)


def _is_arrays(value):
    """An array or tensor with values, or a dict, list or tuple of them (a model's several inputs)."""
    if isinstance(value, dict):
        return bool(value) and all(_is_arrays(item) for item in value.values())
    if isinstance(value, (tuple, list)):
        return bool(value) and all(_is_arrays(item) for item in value)
    return _is_array(value)


def _is_array(value):
    """A NumPy array or a tensor with values: slicing and reading it runs no code of yours and changes nothing."""
    import numpy as np
    import tensorflow as tf

    return isinstance(value, np.ndarray) or (isinstance(value, tf.Tensor) and not tf.is_symbolic_tensor(value))


def _why_not_read(x, y):
    import keras

    if isinstance(x, keras.utils.PyDataset) or hasattr(type(x), "__next__"):
        return hints.GENERATOR
    given = type(x).__name__ if y is None or _is_arrays(x) else f"{type(x).__name__} and {type(y).__name__}"
    return hints.ONLY_ARRAYS.format(given=given)


def _description(call, example):
    import tensorflow as tf

    rows = len(tf.nest.flatten(example[0])[0])  # the rows of x, of its first array if it has several
    if isinstance(call.arguments.get("x"), _dataset_type()):
        return hints.FIRST_BATCH.format(model=call.model.name, rows=rows)
    # Not "the first batch": fit shuffles arrays, so its first batch is other rows.
    return hints.FIRST_ROWS.format(model=call.model.name, rows=rows)


def _dataset_type():
    import tensorflow as tf

    return tf.data.Dataset


# -- what to paste: the model as your line names it ---------------------------------------------


def _call_to_paste(call):
    """``workbook.find_gradient_breaks(<model>, (x_batch, y_batch))`` with the model named as your line names it."""
    receivers = [] if call.caller is None else _receivers(*call.caller, names=(call.method,))
    if len(receivers) != 1:
        name, which = "model", f"your model {call.model.name!r}"
    elif any(isinstance(node, ast.Call) for node in ast.walk(receivers[0])):
        name, which = "model", f"the model `{ast.unparse(receivers[0])}` returns"
    else:
        return f"workbook.find_gradient_breaks({ast.unparse(receivers[0])}, (x_batch, y_batch))"
    return f"workbook.find_gradient_breaks({name}, (x_batch, y_batch)), with {name} {which}"


def _receivers(filename, line, names):
    """The distinct expressions ``e`` of ``e.name`` (``name`` in ``names``) in the statement at ``line`` of a file.

    Only read, never evaluated: they name the model as your code does.
    """
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return []
    spanning = [
        node for node in ast.walk(tree) if isinstance(node, ast.stmt) and node.lineno <= line <= node.end_lineno
    ]
    if not spanning:
        return []
    innermost = min(spanning, key=lambda node: node.end_lineno - node.lineno)
    found = {}
    for node in _own_expressions(innermost):
        if isinstance(node, ast.Attribute) and node.attr in names:
            found.setdefault(ast.unparse(node.value), node.value)
    return list(found.values())


def _own_expressions(statement):
    """The expression nodes of ``statement`` itself, not of the statements in its body."""
    body = (ast.stmt, ast.excepthandler, ast.match_case)
    todo = [child for child in ast.iter_child_nodes(statement) if not isinstance(child, body)]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _own_loop_note(positions):
    """A note for an optimizer step in a loop of your own: the model to pass to the finder, if your line names one."""
    yours = [(frame.f_code.co_filename, line) for frame, line in positions if _is_yours_frame(frame)]
    receivers = _receivers(*yours[-1], names=("trainable_variables", "trainable_weights")) if yours else []
    plain = [r for r in receivers if not any(isinstance(node, ast.Call) for node in ast.walk(r))]
    name = ast.unparse(plain[0]) if len(receivers) == 1 and plain else "model"
    return hints.OWN_LOOP.format(model=name)
