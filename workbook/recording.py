"""Record each layer's gradient norm while ``model.fit`` runs: the recording half of the monitor.

Introduced in 04_autoencoder_lab.ipynb. This module draws and displays nothing
(no matplotlib, no IPython): :class:`~workbook.monitoring.GradientNormMonitor`
extends :class:`GradientNormRecorder` with the live figure.

How the monitor sees the real step's gradients, without a second backward
pass. Every ``train_step`` that follows Keras's guides -- the built-in one and
an overridden one alike -- hands its gradients to the model's optimizer through
``optimizer.apply(gradients, variables)`` (``apply_gradients`` calls it too).
In ``on_train_begin`` the monitor gives the optimizer an instance attribute
``apply`` that, while TensorFlow traces the step, adds up each layer's squared
gradients into a variable the monitor owns and then calls the real ``apply``.
It builds a train function with that in place (``make_train_function``, with
``train_step`` wrapped to count the steps it runs) and sets it as
``model.train_function``, which ``fit`` looks up for every batch.
``on_train_end`` takes all of it away again. The traced function is kept on
the monitor, so alternating monitored and plain fits does not retrace.

Two of those facts are Keras internals, not documented promises: that the
step goes through the model's ``optimizer.apply``, and that ``fit`` looks up
``model.train_function`` anew for every batch. tests/test_monitoring.py pins
both on the oldest and the newest Keras the workbook supports. Where the
first does not hold (a ``train_step`` that updates the weights without the
optimizer), the monitor says so once and falls back to the documented
surfaces: its ``train_step`` wrapper takes one extra ``GradientTape`` of
``model.compute_loss`` on the real batch of every call it records: one more
forward and backward pass on those batches (``make bench`` measured fit at
1.65x plain recording every batch, 1.04x every 10th, against 1.01x and 0.99x
on the supported path). Where the second does not hold, it says so once and
records nothing.

What a recorded step means:

* ``steps_per_execution=k``: ``fit`` runs k batches per call and the monitor
  only sees the last of them; it records that batch (its global index) when
  any of the k indices is a multiple of ``every``. The indices come from the
  monitor's own count of the steps run, not from the numbers ``fit`` passes
  to callbacks (those changed meaning between Keras versions).
* The last, smaller batch of an epoch is recorded like any other when its
  index is due. Its loss is a mean over fewer images, so its norm is noisier;
  its new shape also makes TensorFlow trace the step once more.
* A variable whose gradient is ``None`` (no path from the loss to it) counts
  as 0; a layer whose variables all have ``None`` gradients is marked
  "no gradient". A gradient that exists but is exactly 0 is not marked.
* With a loss-scaling (mixed precision) optimizer the norms are those of the
  scaled gradients.
"""

import warnings

import keras
import numpy as np

from .arguments import is_whole_number

#: Marker on every function the monitor installs, so leftovers can be found.
_MARK = "_workbook_gradient_monitor"


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
    """

    def __init__(self):
        self.layers = []
        self._steps = []
        self._rows = []

    def __len__(self):
        return len(self._steps)

    def __repr__(self):
        dead = self.dead_layers()
        return f"GradientNormHistory({len(self)} records of {len(self.layers)} layers" + (
            f"; no gradient: {', '.join(dead)})" if dead else ")"
        )

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


class GradientNormRecorder(keras.callbacks.Callback):
    """Record each layer's gradient norm during ``fit``; draws nothing.

    Introduced in 04_autoencoder_lab.ipynb, where students use
    :class:`~workbook.GradientNormMonitor`, this recorder with a live figure.
    Uses the training step's own gradients (see the module docstring for how),
    so it adds almost nothing to the cost of ``fit``.

    Parameters
    ----------
    every : int
        Record every `every`-th batch (counted over all fits).

    Attributes
    ----------
    history : GradientNormRecords
    """

    #: What ``history`` is made of; a subclass may give one that can also draw itself.
    history_type = GradientNormRecords

    def __init__(self, every=10):
        if not is_whole_number(every, low=1):
            raise ValueError(f"every={every!r} must be a whole number of at least 1, e.g. every=10.")
        super().__init__()
        self.every = int(every)
        self.history = self.history_type()
        self._traced = {}  # id(model) -> _Traced, the monitored step kept for the next fit
        self._active = None  # the _Traced in use while a fit runs
        self._next_step = 0  # global index of the next batch the monitor will see

    # -- Keras hooks ---------------------------------------------------------

    def on_train_begin(self, logs=None):
        model = self.model
        remove_leftovers(model)
        traced = self._traced.get(id(model))
        if traced is None or traced.model is not model or traced.original is not model.train_function:
            traced = _Traced(self, model)
            self._traced[id(model)] = traced
        traced.install()
        self._active = traced
        self.history._add_layers(traced.layer_names)

    def on_train_batch_begin(self, batch, logs=None):
        traced = self._active
        if traced is not None:
            traced.armed = True  # the next call of the train function belongs to this monitored fit
            traced.call_due = self._due(self._next_step, self._next_step + traced.steps_per_call() - 1)

    def on_train_batch_end(self, batch, logs=None):
        traced = self._active
        if traced is None:
            return
        if not traced.check_first_call():
            return
        ran = traced.take_steps_run()
        if ran < 1:
            return
        first, last = self._next_step, self._next_step + ran - 1
        self._next_step = last + 1
        if self._due(first, last) and traced.recorded:
            norms = np.sqrt(np.maximum(traced.squares.numpy(), 0.0))
            self.history._append(last, traced.layer_names, norms, {traced.layer_names[i] for i in traced.dead_columns})

    def on_train_end(self, logs=None):
        if self._active is not None:
            self._active.uninstall()
            self._active = None

    def _due(self, first, last):
        """Whether a record is due for a call that ran the global batches first..last."""
        return (last // self.every) * self.every >= first


class _Traced:
    """One model's monitored train function and the state it writes into."""

    def __init__(self, monitor, model):
        import tensorflow as tf

        self.monitor, self.model = monitor, model
        self.original = model.train_function
        self.layer_names, self.column_of = [], {}
        for layer in model.layers:
            if layer.trainable_variables:
                for variable in layer.trainable_variables:
                    self.column_of[id(variable)] = len(self.layer_names)
                self.layer_names.append(layer.name)
        # Plain tf.Variables set on this object, not the model, so the model never tracks or saves them.
        self.squares = tf.Variable(tf.zeros([len(self.layer_names)], tf.float32), trainable=False)
        self.steps_run = tf.Variable(0, dtype=tf.int64, trainable=False)  # train steps run by our functions
        self.steps_seen = 0
        self.dead_columns = set()
        self.hooked = False  # the optimizer hook saw this model's gradients while the step was traced
        self.called = False  # fit ran the train function the monitor installed
        self.checked = False  # both were checked after the first monitored call
        self.extra_tape = False  # the fallback: an extra GradientTape on the recorded calls
        self.recorded = False  # the last call that ran wrote the squares
        self.call_due = True  # the next call runs a batch whose record is due
        self.armed = False  # on_train_batch_begin of a monitored fit ran, its call has not yet
        self.optimizer = None
        self.functions = {}  # "plain" / "record" -> the train function traced for it

    def steps_per_call(self):
        return max(int(getattr(self.model, "steps_per_execution", 1) or 1), 1)

    def install(self):
        optimizer = self.model.optimizer
        self.optimizer = optimizer
        self.previous = optimizer.__dict__.get("apply")
        real_apply = optimizer.apply

        def apply(grads, trainable_variables=None, *args, **kwargs):
            grads = list(grads)
            if self.monitor._active is self and not self.extra_tape:
                variables = self.model.trainable_variables if trainable_variables is None else trainable_variables
                # Not strict: Keras itself does not check that a step's gradients and variables pair up.
                self._record(zip(grads, list(variables), strict=False))
            return real_apply(grads, trainable_variables, *args, **kwargs)

        setattr(apply, _MARK, True)
        optimizer.apply = apply
        if not self.functions:
            self.functions["record"] = self._make_function(extra_tape=False)

        def train_function(iterator):
            if self.armed and self.monitor._active is self:
                self.armed, self.called = False, True
                if self.extra_tape and not self.call_due:
                    function = self.functions["plain"]
                else:
                    function = self.functions["record"]
                self.recorded = function is self.functions["record"]
                return function(iterator)
            # A fit without this monitor: an earlier monitored fit raised before on_train_end.
            self.uninstall()
            self.monitor._active = None
            return self.original(iterator)

        setattr(train_function, _MARK, self.original)
        self.model.train_function = train_function

    def _make_function(self, extra_tape):
        """A train function from ``model.train_step``, wrapped to count its steps (and to take a tape).

        Nothing is traced here: TensorFlow traces the step on the function's first call.
        """
        model, train_step = self.model, self.model.train_step

        def counted_train_step(data):
            if extra_tape:
                self._record_with_a_tape(data)
            outputs = train_step(data)
            self.steps_run.assign_add(1)
            return outputs

        saved = model.train_function
        model.train_step = counted_train_step
        try:
            model.make_train_function(force=True)
            return model.train_function
        finally:
            del model.train_step
            model.train_function = saved

    def _record_with_a_tape(self, data):
        """The fallback: the real batch's loss, through ``compute_loss``, under one more tape."""
        import tensorflow as tf

        model = self.model
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        variables = model.trainable_variables
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight)
        self._record(zip(tape.gradient(loss, variables), variables, strict=True))

    def check_first_call(self):
        """After the first monitored call: are the two internals what the monitor expects?"""
        if self.checked:
            return True
        self.checked = True
        if not self.called:
            _say_once(
                f"GradientNormMonitor: Keras {keras.__version__}'s fit did not run the train function the "
                "monitor installed, so this fit records nothing. Please report it to the workbook."
            )
            self.uninstall()
            self.monitor._active = None
            return False
        if not self.hooked:
            _say_once(
                "GradientNormMonitor: this model's train_step does not pass its gradients to "
                "model.optimizer.apply, so the monitor takes one extra GradientTape of model.compute_loss "
                "on each recorded batch (about one more forward and backward pass on those batches), "
                "starting with the next batch."
            )
            self.extra_tape = True
            self.functions["plain"] = self._make_function(extra_tape=False)
            self.functions["record"] = self._make_function(extra_tape=True)
            self.recorded = False  # the first call's steps count, but its squares were never written
        return True

    def take_steps_run(self):
        """How many train steps ran since the last call of this method."""
        total = int(self.steps_run.numpy())
        ran, self.steps_seen = total - self.steps_seen, total
        return ran

    def uninstall(self):
        optimizer = self.optimizer
        if optimizer is not None and getattr(optimizer.__dict__.get("apply"), _MARK, False):
            del optimizer.apply
            if self.previous is not None:
                optimizer.apply = self.previous
        if getattr(self.model.train_function, _MARK, None) is self.original:
            self.model.train_function = self.original
        self.optimizer = None

    def _record(self, pairs):
        """Runs while TensorFlow traces the step: adds the per-layer sums of squares to the graph."""
        import tensorflow as tf

        parts = [[] for _ in self.layer_names]
        for gradient, variable in pairs:
            column = self.column_of.get(id(variable))
            if column is None:
                continue
            self.hooked = True
            if gradient is None:
                continue
            if isinstance(gradient, tf.IndexedSlices):
                gradient = tf.convert_to_tensor(gradient)
            parts[column].append(tf.reduce_sum(tf.square(tf.cast(gradient, tf.float32))))
        self.dead_columns = {i for i, part in enumerate(parts) if not part}
        if parts:
            self.squares.assign(tf.stack([tf.add_n(p) if p else tf.constant(0.0) for p in parts]))


def _say_once(message):
    """Warn with `message` the first time only (per process)."""
    if message not in _SAID:
        _SAID.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


_SAID = set()


def remove_leftovers(model):
    """Undo a monitor's patches that an interrupted ``fit`` left on `model`."""
    original = getattr(model.train_function, _MARK, None)
    if original is not None:
        model.train_function = original
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and getattr(optimizer.__dict__.get("apply"), _MARK, False):
        del optimizer.apply
