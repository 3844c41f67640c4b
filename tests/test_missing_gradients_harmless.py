"""The missing-gradients extension is as harmless as not loading it, in real kernels.

The same cells run in two kernels through scripts/notebook_runner.py: one whose first cell is
``%load_ext workbook.finder.missing_gradients``, one whose first cell is a comment. Cell by
cell, the extension's kernel must show what the plain one shows (stderr, errors with their
tracebacks, every stdout line: the losses, the weights, the rows a generator handed out),
and may add only its help after it: the culprit report, naming the model whose call failed,
or one line saying why there is none.
"""

import re

import notebook_runner
import pytest

FIRST = {
    "with": "%load_ext workbook.finder.missing_gradients",
    "without": "# the same cells without the extension",
}
SETUP = """\
import gc
import os
import signal
import traceback
import tracemalloc
import warnings

import workbook

workbook.setup(seed=0)
import keras
import numpy as np
import tensorflow as tf
from keras import ops

x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
y = np.ones((64, 1), "float32")
FINDER = os.path.join("workbook", "finder", "diagnosis.py")


def make(name, cut="all", rounding=ops.round):
    # cut="all": nothing trains and fit raises; cut="some": the first Dense gets no gradient and Keras warns.
    keras.utils.set_random_seed(0)  # each case starts from the same weights, whatever ran before
    layers = [keras.Input((3,)), keras.layers.Dense(2), keras.layers.Lambda(rounding)]
    model = keras.Sequential(layers + ([keras.layers.Dense(1)] if cut == "some" else []), name=name)
    model.compile(optimizer="sgd", loss="mse")
    return model


def trained(history, model):
    print("losses", history.history["loss"])
    print("weights", [w.tolist() for w in model.get_weights()])


class Source:
    # Batches of 16 rows of (x, y), counting the calls that start a pass and the rows handed out.
    def __init__(self):
        self.calls, self.rows = 0, 0

    def batches(self, passes=1):
        self.calls += 1
        for _ in range(passes):
            for start in range(0, len(x), 16):
                self.rows += 16
                yield x[start : start + 16], y[start : start + 16]

    def counts(self):
        print("generator calls", self.calls, "rows", self.rows)


class Batches(keras.utils.PyDataset):
    def __init__(self):
        super().__init__()
        self.read = []

    def __len__(self):
        return 4

    def __getitem__(self, index):
        self.read.append(index)
        return x[16 * index : 16 * index + 16], y[16 * index : 16 * index + 16]


def interrupting_round(t):
    # What Jupyter's stop button sends, arriving while the finder (and only the finder) traces this line.
    if any(frame.filename.endswith(FINDER) for frame in traceback.extract_stack()):
        signal.raise_signal(signal.SIGINT)
    return ops.round(t)


def dense(name, units):
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(units)], name=name)


def make_two(name, cut="all", by_name=True):
    # Two inputs, taken as a dict (by_name) or a list; cut="all": both go through the round.
    keras.utils.set_random_seed(0)
    a, b = keras.Input((3,), name="a"), keras.Input((3,), name="b")
    if cut == "all":
        output = keras.layers.Lambda(ops.round)(keras.layers.Dense(2)(keras.layers.Concatenate()([a, b])))
    else:
        rounded = keras.layers.Lambda(ops.round)(keras.layers.Dense(2)(a))
        output = keras.layers.Dense(1)(keras.layers.Concatenate()([rounded, b]))
    model = keras.Model({"a": a, "b": b} if by_name else [a, b], output, name=name)
    model.compile(optimizer="sgd", loss="mse")
    return model


first_model = make("first_model", cut="some")  # the first model in the namespace: never the one to name
"""
CELLS = {
    "partly cut on tensors": """\
partly = make("partly_tensors", cut="some")
trained(partly.fit(tf.constant(x), tf.constant(y), batch_size=16, epochs=2, verbose=0), partly)
""",
    "partly cut on a dataset": """\
partly = make("partly_dataset", cut="some")
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
trained(partly.fit(data, epochs=2, verbose=0), partly)
""",
    "keywords it cannot read": """\
frozen = make("frozen")
cb = keras.callbacks.History()
frozen.fit(x, y, callbacks=[cb], epochs=2 * 1, batch_size=16, verbose=0)
""",
    "data made on the line": """\
frozen = make("frozen_inline")
frozen.fit(np.ones((10, 3), "float32"), np.ones((10, 1), "float32"), batch_size=4, verbose=0)
""",
    "a model made on the line": """\
def make_frozen():
    return make("made")


make_frozen().fit(x, y, batch_size=8, verbose=0)
""",
    "lists from a model made on the line": "make_frozen().fit([x], [y], verbose=0)",
    "a PyDataset to a model made on the line": "make_frozen().fit(Batches(), verbose=0)",
    "several inputs as a dict": """\
frozen = make_two("frozen_dict")
frozen.fit({"a": x, "b": x}, y, batch_size=16, verbose=0)
""",
    "several inputs as a list": """\
frozen = make_two("frozen_list", by_name=False)
frozen.fit([x, x], y, batch_size=8, verbose=0)
""",
    "partly cut, several inputs from a dataset of dicts": """\
partly = make_two("partly_dicts", cut="some")
data = tf.data.Dataset.from_tensor_slices(({"a": x, "b": x}, y)).batch(16)
trained(partly.fit(data, epochs=2, verbose=0), partly)
""",
    "your own train_step: 8-bit fakes": """\
class EightBitFakes(keras.Model):
    # After keras.io's DCGAN (overriding train_step): the fakes are made 8-bit images first.
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        keras.utils.set_random_seed(0)
        self.generator, self.critic = dense("generator", 3), dense("critic", 1)

    def call(self, x):
        return self.critic(self.generator(x))

    def train_step(self, real):
        with tf.GradientTape() as tape:
            fake = tf.cast(tf.cast(127 * ops.tanh(self.generator(real)) + 128, "uint8"), "float32")
            loss = ops.mean(ops.softplus(-self.critic(fake)))
        variables = self.generator.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return {"loss": loss}


gan = EightBitFakes(name="gan")
gan.compile(optimizer="sgd")
gan.fit(x, batch_size=16, verbose=0)
""",
    "your own train_step: a branch under stop_gradient": """\
class MeanTeacher(keras.Model):
    # The student's own branch under stop_gradient by mistake: only the teacher's should be.
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        keras.utils.set_random_seed(0)
        self.student, self.teacher = dense("student", 1), dense("teacher", 1)

    def call(self, x):
        return self.student(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            student = ops.stop_gradient(self.student(x))
            loss = ops.mean((student - y) ** 2) + ops.mean((student - self.teacher(x)) ** 2)
        variables = self.student.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return {"loss": loss}


teacher = MeanTeacher(name="mean_teacher")
teacher.compile(optimizer="sgd")
teacher.fit(x, y, batch_size=16, verbose=0)
""",
    "your own train_step: the forward pass before the tape": """\
class EarlyForward(keras.Model):
    def train_step(self, data):
        x, y = data
        prediction = self(x, training=True)  # outside the tape: it records nothing
        with tf.GradientTape() as tape:
            loss = ops.mean((prediction - y) ** 2)
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
        return {"loss": loss}


keras.utils.set_random_seed(0)
inputs = keras.Input((3,))
early = EarlyForward(inputs, keras.layers.Dense(1)(inputs), name="early")
early.compile(optimizer="sgd")
early.fit(x, y, batch_size=16, verbose=0)
""",
    "an op with no registered gradient": """\
def saturated(t):
    # tensorflow/tensorflow#126083: adjust_saturation has no registered gradient; fit raises LookupError
    image = ops.reshape(ops.sigmoid(t), (-1, 1, 1, 3))
    return t + ops.reshape(tf.image.adjust_saturation(image, 2.0), (-1, 3))


keras.utils.set_random_seed(0)
vivid = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3), keras.layers.Lambda(saturated)], name="vivid")
vivid.compile(optimizer="sgd", loss="mse")
vivid.fit(x, x, batch_size=16, verbose=0)
""",
    "partly cut under a distribution strategy": """\
strategy = tf.distribute.MirroredStrategy(["/cpu:0"])  # Keras warns from the strategy's own thread
with strategy.scope():
    partly = make("partly_mirrored", cut="some")
trained(partly.fit(x, y, batch_size=16, epochs=2, verbose=0), partly)
""",
    "all cut under a distribution strategy": """\
with strategy.scope():
    frozen = make("frozen_mirrored")
frozen.fit(x, y, batch_size=16, verbose=0)
""",
    "Keras's words from a thread of your own": """\
import threading

words = "Gradients do not exist for variables ['kernel'] when minimizing the loss."
worker = threading.Thread(target=lambda: warnings.warn(words))
worker.start()
worker.join()
""",
    "a KeyError of your own": 'print("before")\n{"a": 1}["b"]',
    "dataset from a generator": """\
source = Source()
frozen = make("frozen_generator")
spec = tf.TensorSpec((None, 3), tf.float32), tf.TensorSpec((None, 1), tf.float32)
frozen.fit(tf.data.Dataset.from_generator(source.batches, output_signature=spec), verbose=0)
""",
    "dataset from a generator, counted": "source.counts()",
    "dataset over one shared generator": """\
shared = Source()
one_pass = shared.batches()
frozen = make("frozen_shared")
frozen.fit(tf.data.Dataset.from_generator(lambda: one_pass, output_signature=spec), verbose=0)
""",
    "dataset over one shared generator, counted": """\
shared.counts()
print("rows left for the next fit", 16 * len(list(one_pass)))
""",
    "partly cut on a dataset from a generator": """\
source = Source()
partly = make("partly_generator", cut="some")
data = tf.data.Dataset.from_generator(source.batches, output_signature=spec)
trained(partly.fit(data, epochs=2, verbose=0), partly)
source.counts()
""",
    "a PyDataset": """\
batches = Batches()
frozen = make("frozen_pydataset")
frozen.fit(batches, verbose=0)
""",
    "a PyDataset, counted": 'print("batches read", batches.read)',
    "a Python generator": """\
source = Source()
frozen = make("frozen_python_generator")
frozen.fit(source.batches(passes=2), steps_per_epoch=2, verbose=0)
""",
    "a Python generator, counted": "source.counts()",
    "a shuffled dataset": """\
frozen = make("frozen_shuffled")
shuffled = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64).batch(16)
frozen.fit(shuffled, verbose=0)
""",
    "a shuffled dataset, its next pass": 'print("next pass starts with", next(iter(shuffled))[0][0].numpy().tolist())',
    "a resource warning": """\
tracemalloc.start()
warnings.simplefilter("always", ResourceWarning)
handle = open(os.devnull)
del handle  # never closed: Python warns, with the line that opened it
gc.collect()
tracemalloc.stop()
""",
    "your own error with Keras's words": 'raise ValueError("No gradients provided for any variable.")',
    "a healthy fit": """\
healthy = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)], name="healthy")
healthy.compile(optimizer="sgd", loss="mse")
trained(healthy.fit(x, y, batch_size=16, epochs=2, verbose=0), healthy)
""",
    "interrupted after an error": """\
frozen = make("frozen_interrupted", rounding=interrupting_round)
frozen.fit(x, y, verbose=0)
""",
    "interrupted after a warning": """\
partly = make("partly_interrupted", cut="some", rounding=interrupting_round)
trained(partly.fit(x, y, batch_size=16, verbose=0), partly)
""",
    "the next error after an interrupt": """\
frozen = make("frozen_after_interrupt")
frozen.fit(x, y, batch_size=16, verbose=0)
""",
}
NAMES = ["first", "setup", *CELLS]

# The kernels are started once for the module's tests, which stay in one worker.
pytestmark = [pytest.mark.kernel, pytest.mark.xdist_group("missing-gradients pair")]


@pytest.fixture(scope="session")  # at most once per worker process
def kernels(tmp_path_factory):
    """The executed cells of each kernel ("with" and "without" the extension), by case name."""
    runs = {}
    for variant, first in FIRST.items():
        sources = [first, SETUP, *CELLS.values()]
        notebook = notebook_runner.execute_cells(sources, tmp_path_factory.mktemp("cwd"), timeout_per_cell=300)
        runs[variant] = dict(zip(NAMES, notebook.cells, strict=True))
    return runs


def shown(cell):
    """What a cell showed, by kind: the stdout and stderr text, the errors, the displays (colours and pids out)."""

    def plain(text):
        return re.sub(r"ipykernel_\d+", "ipykernel", re.sub(r"\x1b\[[0-9;]*m", "", text))

    found = {"stdout": "", "stderr": "", "errors": [], "displays": []}
    for output in cell.outputs:
        if output["output_type"] == "stream":
            found[output["name"]] += plain(output["text"])
        elif output["output_type"] == "error":
            found["errors"].append((output["ename"], output["evalue"], [plain(line) for line in output["traceback"]]))
        else:
            found["displays"].append(output["data"].get("text/plain", ""))
    return found


def help_of(kernels, name):
    """(the stdout lines the extension added, its displays) in cell ``name``, after checking it added nothing else."""
    plain, helped = shown(kernels["without"][name]), shown(kernels["with"][name])
    assert helped["stderr"] == plain["stderr"]
    assert helped["errors"] == plain["errors"]
    assert helped["stdout"].startswith(plain["stdout"]), (helped["stdout"], plain["stdout"])
    assert plain["displays"] == []
    return helped["stdout"][len(plain["stdout"]) :], helped["displays"]


def error_name(kernels, name):
    return [error[:2] for error in shown(kernels["without"][name])["errors"]]


NO_GRADIENTS = [("ValueError", "No gradients provided for any variable.")]
REPORTED_ON = "The op that cut the gradient, found by workbook.find_gradient_breaks on model {!r}"


@pytest.mark.parametrize("name", NAMES)
def test_every_cell_shows_what_it_shows_without_the_extension_and_only_adds_help(kernels, name):
    added, displays = help_of(kernels, name)
    if not added:
        assert displays == []
    unexpected = "Custom TB Handler failed" in added or "Traceback" in added or "Error in callback" in added
    assert not unexpected, added


@pytest.mark.parametrize("name", ["partly cut on tensors", "partly cut on a dataset"])
def test_a_partly_cut_model_trains_as_without_it_and_the_culprit_follows(kernels, name):
    plain = shown(kernels["without"][name])
    assert "Gradients do not exist for variables" in plain["stderr"] and plain["errors"] == []
    assert plain["stdout"].startswith("losses [")  # it trained: two epochs, losses and weights as without it
    added, displays = help_of(kernels, name)
    assert added.startswith(REPORTED_ON.format("partly_" + name.split()[-1])), added
    assert ("the first batch (16 rows) of this call's dataset" if "dataset" in name else "the first 16 rows") in added
    assert (
        len(displays) == 1
        and "Round" in displays[0]
        and "Layers whose variables get no gradient: dense" in (displays[0])
    )


@pytest.mark.parametrize(
    ("name", "model", "rows"),
    [
        ("keywords it cannot read", "frozen", 16),
        ("data made on the line", "frozen_inline", 4),
        ("a model made on the line", "made", 8),
        # A dict or list of arrays is data like any other: its first rows (not its number of keys).
        ("lists from a model made on the line", "made", 32),
        ("several inputs as a dict", "frozen_dict", 16),
        ("several inputs as a list", "frozen_list", 8),
    ],
)
def test_the_report_is_on_the_model_whose_fit_failed(kernels, name, model, rows):
    assert error_name(kernels, name) == NO_GRADIENTS
    added, displays = help_of(kernels, name)
    assert added.startswith(REPORTED_ON.format(model) + f" and the first {rows} rows of this call's data"), added
    assert len(displays) == 1 and "Round" in displays[0] and f"model {model!r}" in displays[0]
    assert "first_model" not in added + displays[0]


def test_data_it_cannot_read_gets_the_call_to_paste_naming_the_model_as_your_line_does(kernels):
    name = "a PyDataset to a model made on the line"
    assert error_name(kernels, name) == NO_GRADIENTS
    added, displays = help_of(kernels, name)
    assert displays == [] and len(added.splitlines()) == 1
    assert "come from a generator" in added
    assert added.rstrip().endswith(
        "workbook.find_gradient_breaks(model, (x_batch, y_batch)), with model the model `make_frozen()` returns"
    )


def test_a_partly_cut_model_fed_a_dataset_of_dicts_trains_as_without_it_and_the_culprit_follows(kernels):
    name = "partly cut, several inputs from a dataset of dicts"
    plain = shown(kernels["without"][name])
    assert "Gradients do not exist for variables" in plain["stderr"] and plain["stdout"].startswith("losses [")
    added, displays = help_of(kernels, name)
    assert added.startswith(
        REPORTED_ON.format("partly_dicts") + " and the first batch (16 rows) of this call's dataset"
    )
    assert len(displays) == 1 and "Round" in displays[0], displays


@pytest.mark.parametrize(
    ("name", "error", "model", "culprit"),
    [
        ("your own train_step: 8-bit fakes", NO_GRADIENTS, "gan", "tf.cast(127 * ops.tanh(self.generator(real))"),
        ("your own train_step: a branch under stop_gradient", NO_GRADIENTS, "mean_teacher", "ops.stop_gradient("),
        ("your own train_step: the forward pass before the tape", NO_GRADIENTS, "early", "tape did not record"),
        (
            "an op with no registered gradient",
            [("LookupError", "gradient registry has no entry for: AdjustSaturation")],
            "vivid",
            "tf.image.adjust_saturation(image, 2.0)",
        ),
    ],
)
def test_a_training_step_of_your_own_or_an_op_with_no_gradient_gets_its_culprit(kernels, name, error, model, culprit):
    # Keras keeps only your frames of a failed step: the last one is your train_step's, yet fit failed.
    assert error_name(kernels, name) == error
    added, displays = help_of(kernels, name)
    assert added.startswith(REPORTED_ON.format(model)), added
    assert len(displays) == 1 and culprit in displays[0], displays


def test_a_fit_under_a_distribution_strategy_gets_its_culprit(kernels):
    plain = shown(kernels["without"]["partly cut under a distribution strategy"])
    assert "Gradients do not exist for variables" in plain["stderr"] and plain["stdout"].startswith("losses [")
    for name, model in [
        ("partly cut under a distribution strategy", "partly_mirrored"),
        ("all cut under a distribution strategy", "frozen_mirrored"),
    ]:
        added, displays = help_of(kernels, name)
        assert added.startswith(REPORTED_ON.format(model) + " and the first 16 rows"), added
        assert len(displays) == 1 and "Round" in displays[0], displays


def test_a_warning_from_a_thread_where_no_fit_can_be_found_gets_one_line_saying_what_to_call(kernels):
    added, displays = help_of(kernels, "Keras's words from a thread of your own")
    assert displays == [] and len(added.splitlines()) == 1, added
    assert "Keras warned from another thread" in added and "no culprit this time" in added
    assert added.rstrip().endswith("workbook.find_gradient_breaks(model, (x_batch, y_batch))")


@pytest.mark.parametrize(
    ("name", "model", "words"),
    [
        ("dataset from a generator", "frozen", "tf.data pipeline with a generator"),
        ("dataset over one shared generator", "frozen", "tf.data pipeline with a generator"),
        ("a PyDataset", "frozen", "come from a generator"),
        ("a Python generator", "frozen", "come from a generator"),
        ("a shuffled dataset", "frozen", "a shuffle"),
    ],
)
def test_a_generator_is_never_read_again_and_the_call_to_paste_names_the_model(kernels, name, model, words):
    assert error_name(kernels, name) == NO_GRADIENTS
    added, displays = help_of(kernels, name)
    assert displays == [] and len(added.splitlines()) == 1 and words in added, added
    assert added.rstrip().endswith(f"workbook.find_gradient_breaks({model}, (x_batch, y_batch))"), added


@pytest.mark.parametrize(
    ("name", "counted"),
    [
        ("dataset from a generator, counted", "generator calls 0 rows 0\n"),
        ("dataset over one shared generator, counted", "generator calls 0 rows 0\nrows left for the next fit 64\n"),
        ("a PyDataset, counted", "batches read [0, 1]\n"),
        ("a Python generator, counted", "generator calls 1 rows 32\n"),
    ],
)
def test_the_data_drawn_is_what_fit_drew_without_it(kernels, name, counted):
    # Known answers: Keras fails while it traces the step, after a generator handed it what it
    # looks at (a PyDataset's or a Python generator's first two batches, none through tf.data);
    # the extension's kernel must print exactly what the plain one prints.
    assert help_of(kernels, name) == ("", [])
    assert shown(kernels["without"][name])["stdout"] == counted


def test_a_partly_cut_model_fed_by_a_generator_trains_as_without_it_and_reads_no_more(kernels):
    name = "partly cut on a dataset from a generator"
    added, displays = help_of(kernels, name)  # the losses, the weights and the counts as without it
    assert shown(kernels["without"][name])["stdout"].endswith("generator calls 2 rows 128\n")  # two epochs
    assert displays == [] and "come from a tf.data pipeline with a generator" in added
    assert added.rstrip().endswith("workbook.find_gradient_breaks(partly, (x_batch, y_batch))"), added


def test_a_shuffled_dataset_starts_its_next_pass_as_without_it(kernels):
    assert help_of(kernels, "a shuffled dataset, its next pass") == ("", [])


@pytest.mark.parametrize("name", ["interrupted after an error", "interrupted after a warning"])
def test_an_interrupted_report_says_so_in_one_line(kernels, name):
    added, displays = help_of(kernels, name)
    assert displays == [] and added.splitlines() == [
        "workbook.finder.missing_gradients: interrupted while it looked for the op that cut the gradient; "
        "no culprit this time."
    ]


def test_after_an_interrupt_the_next_error_still_gets_its_culprit(kernels):
    added, displays = help_of(kernels, "the next error after an interrupt")
    assert added.startswith(REPORTED_ON.format("frozen_after_interrupt")) and len(displays) == 1, added


def test_a_resource_warning_keeps_the_line_that_allocated_it(kernels):
    plain = shown(kernels["without"]["a resource warning"])
    assert "ResourceWarning: unclosed file" in plain["stderr"] and "Object allocated at" in plain["stderr"]
    assert help_of(kernels, "a resource warning") == ("", [])


@pytest.mark.parametrize(
    "name", ["your own error with Keras's words", "a KeyError of your own", "a healthy fit", "setup"]
)
def test_no_help_where_keras_raised_nothing(kernels, name):
    assert help_of(kernels, name) == ("", [])
