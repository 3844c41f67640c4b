"""Record each layer's gradient norm while ``model.fit`` runs: the recording half of the monitor.

Introduced in 04_autoencoder_lab.ipynb. This module draws and displays nothing
(no matplotlib, no IPython): :class:`~workbook.monitor.monitoring.GradientNormMonitor`
extends :class:`GradientNormRecorder` with the live figure.

How the monitor sees the real step's gradients, without a second backward
pass. Every ``train_step`` that follows Keras's guides -- the built-in one and
an overridden one alike -- hands its gradients to the model's optimizer through
``optimizer.apply(gradients, variables)`` (``apply_gradients`` calls it too).
For each model the monitor builds one more train function with
``make_train_function``, from ``train_step`` wrapped so that, while TensorFlow
traces it, ``optimizer.apply`` adds up each layer's squared gradients into a
variable before it updates the weights; the wrapper also counts the steps run.
That function is kept with the model's own (Keras's) train function, so every
monitor, a new one per ``fit`` included, uses the same traced step and nothing
is traced again until the model is compiled again. Measured as in
benchmarks/monitor_overhead.py (``make bench``), 15 interleaved rounds: one
epoch of 63 batches with a new monitor per ``fit`` took 1.04x the CPU time of a
plain ``fit``, one monitor kept across fits 1.01x; a monitor that traced its own
step for each ``fit`` had cost 1.57x on the same machine.

What is patched, and for how long, so that nothing is left behind whatever
happens (an exception, a KeyboardInterrupt):

* ``optimizer.apply`` only while TensorFlow traces the step, in a
  ``try``/``finally``;
* ``model.train_step`` only while ``make_train_function`` builds the function,
  in a ``try``/``finally``;
* ``model.train_function`` only from the monitor's ``on_train_batch_begin`` to
  the first line of the call ``fit`` makes next, which puts back what was there
  before running the step. Only a KeyboardInterrupt in between (in the
  ``on_train_batch_begin`` of a callback listed after the monitor) can leave it;
  it then puts itself back when it is next called, or at the next monitored
  ``fit``.

Three Keras internals, not documented promises, hold this up, and
tests/test_monitoring.py pins each on the oldest and the newest Keras the
workbook supports: the built-in step goes through ``optimizer.apply``;
``make_train_function(force=True)`` builds from the ``train_step`` found on the
model at that moment; ``fit`` looks up ``model.train_function`` for every batch,
after ``on_train_batch_begin``. The step is kept as an attribute of Keras's
train function (a plain Python function at both ends of the range); where one
takes no attributes, each ``fit`` makes and traces its own, and the test that
counts traces fails.

When the monitor records nothing, it says why once (in the live figure's caption
where there is one, else in a RuntimeWarning) and training goes on exactly as
without it:

* a ``train_step`` that never passes its gradients to ``model.optimizer.apply``
  (it updates the weights itself): the first batch shows it, and from the
  second on ``fit`` runs Keras's own train function;
* a ``fit`` that did not call the function the monitor set for a batch.

What a recorded step means:

* ``steps_per_execution=k``: ``fit`` runs k batches per call and the monitor
  only sees the last of them; it records that batch (its global index) when
  any of the k indices is a multiple of ``every``. The indices come from the
  count of the steps run, not from the numbers ``fit`` passes to callbacks
  (those changed meaning between Keras versions).
* The last, smaller batch of an epoch is recorded like any other when its
  index is due. Its loss is a mean over fewer images, so its norm is noisier;
  its new shape also makes TensorFlow trace the step once more.
* A variable whose gradient is ``None`` (no path from the loss to it) counts
  as 0; a layer whose variables all have ``None`` gradients is marked
  "no gradient". A gradient that exists but is exactly 0 is not marked.
* With a loss-scaling (mixed precision) optimizer the norms are those of the
  scaled gradients.
* Two monitors in one ``fit`` read the same step: both record every batch
  their own ``every`` asks for, and each gets the batch to name a cut from (it is let
  go when the last of them is done with it).

Which op cut it. With ``find_cuts`` (the monitor's default), the first time a
layer's gradient is recorded as None or exactly 0, :func:`workbook.find_gradient_breaks` runs once for it
(told that a gradient starves, it measures where it dies in the run that measures them all),
after that step and outside the traced function, on the model and the batch that
step trained on, and keeps the op and the line it names in ``history.cut_by``. The
monitored step hands that batch out with its logs, as values, so nothing is read
from ``fit``'s data a second time (a generator would hand out other rows, or run
out); the finder puts back every random state it moves, so training goes on drawing
exactly what it would have drawn without it. A record where every layer has a gradient
runs none of this: it only compares the norms just read with 0.
"""

import contextlib
import enum
import warnings
import weakref

import keras
import numpy as np

from workbook.core import internals
from workbook.core.arguments import is_whole_number, refuse
from workbook.monitor.train_function_swap import TrainFunctionSwap

#: Attribute of Keras's train function that keeps the monitored step made for it.
_STEP = "_workbook_monitored_step"


class GradientNormRecords:
    """What a :class:`GradientNormRecorder` recorded.

    Introduced in 04_autoencoder_lab.ipynb.

    Attributes
    ----------
    steps : numpy.ndarray of int
        Global batch index of each record (0 is the first batch of the first fit).
    layers : list of str
        Layer names, in network order.
    norms : numpy.ndarray of float, shape (len(steps), len(layers))
        L2 norm of each layer's gradient (NaN where a layer was not trained).
    no_gradient : numpy.ndarray of bool, same shape
        True where every variable of the layer had no gradient at all.
    not_recorded : str or None
        Why the last ``fit`` recorded nothing (or stopped recording), None if it recorded.
    cut_by : dict of str to Finding or str
        For each layer whose gradient was ever None or exactly 0: the
        :class:`~workbook.finder.diagnosis.Finding` that cut it, as
        :func:`workbook.find_gradient_breaks` named it, or a sentence saying why
        no op was named.
    """

    def __init__(self):
        self.layers = []
        self.not_recorded = None
        self.cut_by = {}
        self._steps = []
        self._rows = []

    def __len__(self):
        return len(self._steps)

    def __repr__(self):
        dead, zero = self._with_cuts(self.dead_layers()), self._with_cuts(self.zero_layers())
        notes = [f"no gradient: {', '.join(dead)}"] if dead else []
        notes += [f"gradient exactly 0: {', '.join(zero)}"] if zero else []
        notes += [f"not recorded: {self.not_recorded}"] if self.not_recorded else []
        return (
            f"{type(self).__name__}({len(self)} records of {len(self.layers)} layers{''.join('; ' + n for n in notes)})"
        )

    def _with_cuts(self, names):
        return [f"{name} ({self.cut_text(name)})" if name in self.cut_by else name for name in names]

    def cut_text(self, name, code=True):
        """What cut layer `name`'s gradient, in words: "cut by Round at cell 3, line 4: `tf.round(z)`"."""
        found = self.cut_by.get(name)
        if found is None or isinstance(found, str):
            return found or "no op named yet"
        text = f"cut by {found.op_type} at {found.where}"
        return f"{text}: `{found.code.strip()}`" if code and found.code else text

    @property
    def steps(self):
        return np.asarray(self._steps, dtype=np.int64)

    @property
    def norms(self):
        return self._table(0, np.nan, float)

    @property
    def no_gradient(self):
        return self._table(1, False, bool)

    def dead_layers(self):
        """Names of the layers that had no gradient at the last record."""
        if not self._rows:
            return []
        return [name for name, (_, dead) in self._rows[-1].items() if dead]

    def zero_layers(self):
        """Names of the layers whose gradient was exactly 0 (not None) at the last record."""
        if not self._rows:
            return []
        return [name for name, (norm, dead) in self._rows[-1].items() if norm == 0 and not dead]

    def _add_layers(self, names):
        for name in names:
            if name not in self.layers:
                self.layers.append(name)

    def _append(self, step, names, norms, dead):
        self._steps.append(int(step))
        self._rows.append({name: (float(norm), bool(name in dead)) for name, norm in zip(names, norms, strict=True)})

    def _table(self, index, missing, dtype):
        table = np.full((len(self._rows), len(self.layers)), missing, dtype=dtype)
        for i, row in enumerate(self._rows):
            for j, name in enumerate(self.layers):
                if name in row:
                    table[i, j] = row[name][index]
        return table


_BYPASSED = (
    "GradientNormMonitor records nothing for this model: its train_step never passes its gradients "
    "to model.optimizer.apply(gradients, variables), where the monitor reads them. Training runs as "
    "without the monitor. To monitor it, update the weights in train_step with "
    "self.optimizer.apply(gradients, self.trainable_variables), as Keras's guide to customizing fit does."
)


def _not_called():
    return (
        f"GradientNormMonitor stopped recording: Keras {keras.__version__}'s fit did not call the train "
        "function the monitor set for the batch (a callback listed after the monitor may have replaced "
        "model.train_function). Training runs as without the monitor."
    )


class GradientNormRecorder(keras.callbacks.Callback):
    """Record each layer's gradient norm during ``fit``; draws nothing.

    Introduced in 04_autoencoder_lab.ipynb, where students use
    :class:`~workbook.GradientNormMonitor`, this recorder with a live figure.
    Uses the training step's own gradients (see :mod:`workbook.monitor.recording` for
    how), so it adds almost nothing to the cost of ``fit``, a new recorder per
    ``fit`` included: the traced step is kept with the model.

    Parameters
    ----------
    every : int
        Record every `every`-th batch (counted over all fits).
    find_cuts : bool
        When a layer's gradient is first recorded as None or exactly 0, name the
        op and the line that cut it (``history.cut_by``); see :mod:`workbook.monitor.recording`.
        Off by default here; on in :class:`~workbook.GradientNormMonitor`.

    Attributes
    ----------
    history : GradientNormRecords
    """

    #: What ``history`` is made of; a subclass may give one that can also draw itself.
    history_type = GradientNormRecords

    def __init__(self, every=10, find_cuts=False):
        owner = type(self).__name__
        if not is_whole_number(every, low=1):
            refuse("every", every, "a whole number of at least 1, e.g. every=10", owner)
        if not isinstance(find_cuts, (bool, np.bool_)):
            refuse("find_cuts", find_cuts, "True (name the op that cut a gradient) or False", owner)
        super().__init__()
        self.every = int(every)
        self.find_cuts = bool(find_cuts)
        self.history = self.history_type()
        self._step = None  # the model's _MonitoredStep while this monitor records a fit, else None
        self._steps_read = 0  # the step's count of steps run when this monitor last read it
        self._calls_armed = None  # the step's count of calls when this monitor armed it for a batch
        self._next_step = 0  # global index of the next batch the monitor will see
        self._said = set()  # what this monitor has already said

    # -- Keras hooks ---------------------------------------------------------

    def on_train_begin(self, logs=None):
        step = _MonitoredStep.of(self.model)
        self.history._add_layers(step.layer_names)
        self.history.not_recorded = None
        if step.state is StepState.BYPASSES:
            self._stop(_BYPASSED)
        else:
            self._step, self._steps_read = step, step.steps_run()
            step.join(self)

    def on_train_batch_begin(self, batch, logs=None):
        if self._step is not None:
            self._calls_armed = self._step.arm()

    def on_train_batch_end(self, batch, logs=None):
        step = self._step
        if step is None:
            return
        try:
            self._read_step(step)
        finally:
            step.done_with_batch(self)  # read or not: the last monitor to be done lets the batch go

    def _read_step(self, step):
        """Record what the step's last call measured, if a record is due (and find the cut once)."""
        if step.calls == self._calls_armed:
            step.disarm()
            self._stop(_not_called())
            return
        if step.state is StepState.BYPASSES:
            self._stop(_BYPASSED)
            return
        total = step.steps_run()
        first, last = self._next_step, self._next_step + total - self._steps_read - 1
        self._steps_read = total
        if last < first:
            return
        self._next_step = last + 1
        if self._due(first, last):
            norms = step.norms()
            self.history._append(last, step.layer_names, norms, step.dead_layers)
            if self.find_cuts and (step.dead_layers or not norms.all()):
                self._find_cuts()

    def on_train_end(self, logs=None):
        if self._step is not None:
            self._step.disarm()
            self._step.leave(self)
            self._step.batch = None  # every batch's end has run: whatever a failed fit left, it goes now
            self._step = None

    def _find_cuts(self):
        """The finder, once, for the layers of the last record whose gradient is None or 0 and not yet explained."""
        history = self.history
        stuck = [name for name in history.dead_layers() + history.zero_layers() if name not in history.cut_by]
        if stuck:
            history.cut_by.update(self._explain(stuck, self._step.batch))

    def _explain(self, stuck, batch):
        """``{layer: Finding, or why no op is named}`` for the stuck layers, from one run of the finder on `batch`."""
        from workbook.finder import diagnosis

        try:
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(batch)
            example = tuple(part for part in (x, y, sample_weight) if part is not None)
            report = diagnosis.find_known_breaks(self.model, example)
        except Exception as error:  # training goes on; the records say why no op is named
            text = f"{type(error).__name__}: {error}".splitlines()[0][:200]
            return dict.fromkeys(stuck, f"no op named: the finder failed ({text})")
        explained = {}
        for name in stuck:
            # An op that cuts it; not a zero measured on the way (a ReLU at its kink, zeros in), where no
            # op cuts it in the graph and the gradient is 0 for these values.
            mine = [f for f in report.findings if f"layer {name}" in f.cuts and f.reason != "measured_zero"]
            explained[name] = mine[0] if mine else "no op cuts it: its gradient is 0 for these values"
        return explained

    def _due(self, first, last):
        """Whether a record is due for a call that ran the global batches first..last."""
        return (last // self.every) * self.every >= first

    def _stop(self, reason):
        """Record nothing more in this fit, and say why (once per monitor)."""
        if self._step is not None:
            self._step.leave(self)
        self._step = None
        self.history.not_recorded = reason
        if reason not in self._said:
            self._said.add(reason)
            self._say(reason)

    def _say(self, reason):
        """How the recorder speaks: a warning. A monitor with a live figure writes it there."""
        warnings.warn(reason, RuntimeWarning, stacklevel=2)


class StepState(enum.Enum):
    """What a model's monitored step has shown about its ``train_step``."""

    NOT_RUN = "not run yet: its first call traces it and shows whether the optimizer gets the gradients"
    RECORDS = "hands its gradients to model.optimizer.apply, which records their norms"
    BYPASSES = "never hands its gradients to model.optimizer.apply: nothing to record"


class _MonitoredStep:
    """One model's monitored train function, kept with Keras's own, and what it writes into."""

    @classmethod
    def of(cls, model):
        """The monitored step kept with `model`'s train function (made now if there is none)."""
        step = getattr(internals.train_function(model), _STEP, None)
        if step is not None and internals.train_function(model) is step.call:
            step.disarm()  # armed for a batch that never ran (see the module docstring)
        keras_function = internals.train_function(model)
        step = getattr(keras_function, _STEP, None)
        if step is None or step.model is not model:
            step = cls(model)
            with contextlib.suppress(AttributeError):  # a function that takes no attributes: made anew each fit
                setattr(keras_function, _STEP, step)
        return step

    def __init__(self, model):
        import tensorflow as tf

        self.model = model
        self.layer_names, self.column_of = [], {}
        for layer in model.layers:
            if layer.trainable_variables:
                for variable in layer.trainable_variables:
                    self.column_of[id(variable)] = len(self.layer_names)
                self.layer_names.append(layer.name)
        # Plain tf.Variables held here, not by the model, so the model never tracks or saves them.
        self.squares = tf.Variable(tf.zeros([len(self.layer_names)], tf.float32), trainable=False)
        self.counter = tf.Variable(0, dtype=tf.int64, trainable=False)  # train steps run by this function
        self.dead_layers = set()
        self.state = StepState.NOT_RUN
        self.reached_optimizer = False  # set while tracing: the optimizer got this model's gradients
        self.calls = 0
        self.batch = None  # the batch the last call trained on (its last, with steps_per_execution)
        # The monitors of the current fit, and those done with the batch: every monitor of a fit
        # reads the batch (two monitors on one fit included) before it is let go.
        self.readers, self.done = weakref.WeakSet(), weakref.WeakSet()
        self.readers_since = None  # the count of calls when the readers joined: a fit's monitors join before it runs

        def call(iterator):
            """Installed as ``model.train_function`` for one batch: puts back what it replaced, then runs."""
            self.disarm()
            self.calls += 1
            self.batch, self.done = None, weakref.WeakSet()  # a step that raises keeps no earlier batch
            outputs, self.batch = self.function(iterator)
            if self.state is StepState.NOT_RUN:
                self.state = StepState.RECORDS if self.reached_optimizer else StepState.BYPASSES
            return outputs

        setattr(call, _STEP, self)
        self.call = call
        self.swap = TrainFunctionSwap(model, call)  # call in model.train_function for one batch
        self.function = self._make_function()

    def _make_function(self):
        """A train function from ``model.train_step``, wrapped to record and to count its steps.

        Nothing is traced here: TensorFlow traces the step on the function's first call.
        """
        model, train_step = self.model, self.model.train_step

        def monitored_train_step(data):
            with self._recording_apply(model.optimizer):
                outputs = train_step(data)
            self.counter.assign_add(1)
            # The batch goes out with the logs (``call`` takes it off): the finder then runs on the
            # very rows this step trained on, and nothing reads the student's data twice.
            return outputs, data

        return internals.train_function_from(model, monitored_train_step)

    @contextlib.contextmanager
    def _recording_apply(self, optimizer):
        """While the step is traced: ``optimizer.apply`` first writes the gradients' squared norms."""
        if optimizer is None:
            yield
            return
        real_apply = optimizer.apply

        def apply(grads, trainable_variables=None, *args, **kwargs):
            grads = list(grads)
            variables = self.model.trainable_variables if trainable_variables is None else trainable_variables
            # Not strict: Keras itself does not check that a step's gradients and variables pair up.
            self._record(zip(grads, list(variables), strict=False))
            return real_apply(grads, trainable_variables, *args, **kwargs)

        with internals.instance_attribute(optimizer, "apply", apply):
            yield

    def _record(self, pairs):
        """Runs while TensorFlow traces the step: adds the per-layer sums of squares to the graph."""
        import tensorflow as tf

        parts = [[] for _ in self.layer_names]
        for gradient, variable in pairs:
            column = self.column_of.get(id(variable))
            if column is None:
                continue
            self.reached_optimizer = True
            if gradient is not None:
                parts[column].append(_sum_of_squares(gradient))
        self.dead_layers = {self.layer_names[i] for i, part in enumerate(parts) if not part}
        if parts:
            self.squares.assign(tf.stack([tf.add_n(p) if p else tf.constant(0.0) for p in parts]))

    def join(self, monitor):
        """`monitor` reads this step's batches in the fit about to run (those of an earlier fit that failed go)."""
        if self.readers_since != self.calls:
            self.readers, self.readers_since = weakref.WeakSet(), self.calls
        self.readers.add(monitor)

    def leave(self, monitor):
        """`monitor` reads no more batches; the batch goes once the monitors left are done with it."""
        self.readers.discard(monitor)
        self.done_with_batch(monitor)

    def done_with_batch(self, monitor):
        """`monitor` has read the batch; when every reader has, it goes (no batch is kept on the model)."""
        self.done.add(monitor)
        if all(reader in self.done for reader in self.readers):
            self.batch = None

    def arm(self):
        """Make ``model.train_function`` this step for the next call; returns the count of calls so far."""
        self.swap.arm()
        return self.calls

    def disarm(self):
        """Put back what :meth:`arm` replaced, if it is still in place."""
        self.swap.disarm()

    def steps_run(self):
        return int(self.counter.numpy())

    def norms(self):
        return np.sqrt(np.maximum(self.squares.numpy(), 0.0))


def _sum_of_squares(gradient):
    """The sum of a gradient's squared entries in float32 (a sparse IndexedSlices made dense first)."""
    import tensorflow as tf

    if isinstance(gradient, tf.IndexedSlices):
        gradient = tf.convert_to_tensor(gradient)
    return tf.reduce_sum(tf.square(tf.cast(gradient, tf.float32)))
