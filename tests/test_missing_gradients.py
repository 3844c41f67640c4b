"""The missing-gradients extension in a real kernel: the error as always, and under it the culprit.

A scratch notebook is run by scripts/notebook_runner.py (nbclient, and a kernel of its own with
a clean environment). Each cell's outputs are compared with what a student must see: the original
error first and whole, then the finder's report naming the op and the line of the cell; nothing
added where the gradient flows, nor for other errors, nor once the extension is unloaded.
"""

import re
import warnings

import nbformat
import notebook_runner
import pytest
from IPython.core.interactiveshell import InteractiveShell

from workbook.finder import missing_gradients

SETUP = """\
import warnings


def hooks():
    shell = get_ipython()
    return shell.custom_exceptions, shell.CustomTB, shell.events.callbacks["post_run_cell"][:], warnings._showwarnmsg


before = hooks()
%load_ext workbook.finder.missing_gradients
import workbook

workbook.setup(seed=0)
import keras
import numpy as np
from keras import ops

x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
y = np.ones((64, 1), "float32")
"""
ALL_CUT = """\
def rounded(t):
    return ops.round(t)

cut = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1), keras.layers.Lambda(rounded)])
cut.compile(optimizer="sgd", loss="mse")
cut.fit(x, y, batch_size=16, epochs=epochs, verbose=0)
"""
PARTLY_CUT = """\
def rounded_middle(t):
    return ops.round(t)

partly = keras.Sequential(
    [keras.Input((3,)), keras.layers.Dense(2), keras.layers.Lambda(rounded_middle), keras.layers.Dense(1)]
)
partly.compile(optimizer="sgd", loss="mse")
history = partly.fit(x, y, batch_size=16, epochs=epochs, verbose=0)
print("trained for", len(history.history["loss"]), "epoch")
"""
HEALTHY = """\
healthy = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
healthy.compile(optimizer="sgd", loss="mse")
healthy.fit(x, y, batch_size=16, epochs=epochs, verbose=0)
healthy.train_on_batch(x[:8], y[:8]);
"""
OTHER_ERROR = 'raise ValueError("a mistake that has nothing to do with gradients")'
UNLOADED = """\
%unload_ext workbook.finder.missing_gradients
cut.fit(x, y, batch_size=16, epochs=epochs, verbose=0)
"""
TRAIN_ON_BATCH = """\
%load_ext workbook.finder.missing_gradients
cut.train_on_batch(x[:8], y[:8])
"""
OWN_LOOP = """\
import tensorflow as tf

optimizer = keras.optimizers.SGD()
with tf.GradientTape() as tape:
    loss = ops.mean((cut(x) - y) ** 2)
optimizer.apply_gradients(zip(tape.gradient(loss, cut.trainable_variables), cut.trainable_variables))
"""

# Load, reload (what %autoreload 2 runs when the file changes), unload, load: the extension
# keeps what it must put back on the shell, so a reload cannot lose it.
RELOADED = """\
from IPython.extensions.autoreload import superreload

import workbook.finder.missing_gradients as extension

superreload(extension)
cut.fit(x, y, batch_size=16, epochs=epochs, verbose=0)
"""
UNLOADED_AFTER_RELOAD = """\
%unload_ext workbook.finder.missing_gradients
print("as before loading:", hooks() == before)
cut.fit(x, y, batch_size=16, epochs=epochs, verbose=0)
"""
LOADED_AGAIN = """\
%load_ext workbook.finder.missing_gradients
%reload_ext workbook.finder.missing_gradients
cut.fit(x, y, batch_size=16, epochs=epochs, verbose=0)
"""

# The kernels are started once for the module's tests, which stay in one worker.
pytestmark = [pytest.mark.kernel, pytest.mark.xdist_group("missing-gradients notebook")]


@pytest.fixture(scope="session")  # at most once per worker process
def cells(tmp_path_factory):
    """The executed cells of the scratch notebook, by name."""
    names = ["parameters", "injected parameters", "setup", "all_cut", "partly_cut", "healthy", "other_error"]
    names += ["unloaded", "train_on_batch", "own_loop", "reloaded", "unloaded after reload", "loaded again"]
    sources = ["epochs = 1", SETUP, ALL_CUT, PARTLY_CUT, HEALTHY, OTHER_ERROR, UNLOADED, TRAIN_ON_BATCH, OWN_LOOP]
    sources += [RELOADED, UNLOADED_AFTER_RELOAD, LOADED_AGAIN]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in sources])
    notebook.cells[0].metadata["tags"] = ["parameters"]
    path = tmp_path_factory.mktemp("scratch") / "missing_gradients.ipynb"
    nbformat.write(notebook, path)
    executed, _ = notebook_runner.execute(path)
    return dict(zip(names, executed.cells, strict=True))


def kinds(cell):
    """The kinds of a cell's outputs in order; Jupyter joins writes to one stream that come together."""
    found = []
    for output in cell.outputs:
        kind = output["output_type"] if output["output_type"] != "stream" else output["name"]
        if not (found and kind == found[-1] and kind in ("stdout", "stderr")):
            found.append(kind)
    return found


def stream_text(cell, position):
    """The text of the `position`-th run of one stream (consecutive writes joined, as kinds() counts them)."""
    runs = []
    for output in cell.outputs:
        kind = output["output_type"] if output["output_type"] != "stream" else output["name"]
        if runs and kind == runs[-1][0] and kind in ("stdout", "stderr"):
            runs[-1][1] += output.get("text", "")
        else:
            runs.append([kind, output.get("text", "")])
    return runs[position][1]


def report_text(cell):
    return "".join(o["data"]["text/plain"] for o in cell.outputs if o["output_type"] == "display_data")


@pytest.mark.notebook
def test_the_error_comes_first_and_whole_then_the_culprit_with_its_cell_line(cells):
    cell = cells["all_cut"]
    assert kinds(cell) == ["error", "stdout", "display_data"], cell.outputs
    error = cell.outputs[0]
    assert error["ename"] == "ValueError" and "No gradients provided for any variable" in error["evalue"]
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in error["traceback"]]  # without the colours
    assert any("cut.fit(" in line for line in lines)  # the student's own line, as without the extension
    assert "the first 16 rows of this call's data" in stream_text(cell, 1)
    report = report_text(cell)
    assert "Round" in report and "return ops.round(t)" in report, report
    assert f"cell In[{cell.execution_count}], line 2" in report, report
    assert "Round" in cell.outputs[2]["data"]["text/html"]


@pytest.mark.notebook
def test_a_warning_keeps_its_place_and_the_culprit_follows_the_cells_output(cells):
    cell = cells["partly_cut"]
    # The warning (stderr) and the cell's print (stdout) reach Jupyter on two streams, whose order
    # between them the kernel does not fix (each is sent when its buffer is flushed); everything
    # the cell wrote comes before the note, and the note stays straight above its report.
    found = kinds(cell)  # consecutive writes to one stream joined, however many messages they came in
    assert found[-2:] == ["stdout", "display_data"] and set(found[:-2]) <= {"stdout", "stderr"}, cell.outputs
    runs = [(kind, stream_text(cell, position)) for position, kind in enumerate(found[:-1])]
    note = "The op that cut the gradient, found by workbook.find_gradient_breaks on model 'sequential_1'"
    before, _, rest = runs[-1][1].partition(note)
    assert rest.count("\n") == 1 and rest.endswith("\n"), runs  # the note, one line, straight above its report
    written = {"stdout": before, "stderr": ""}
    for kind, text in runs[:-1]:
        written[kind] += text
    assert written["stdout"] == "trained for 1 epoch\n", written
    assert "Gradients do not exist for variables" in written["stderr"]
    report = report_text(cell)
    assert "Round" in report and f"cell In[{cell.execution_count}], line 2" in report and "dense_1" in report, report


@pytest.mark.notebook
def test_nothing_changes_where_the_gradient_flows_or_the_error_is_another(cells):
    assert cells["setup"].outputs == [] and cells["healthy"].outputs == []
    assert kinds(cells["other_error"]) == ["error"]
    assert cells["other_error"].outputs[0]["evalue"] == "a mistake that has nothing to do with gradients"


@pytest.mark.notebook
def test_unloading_puts_back_the_plain_error(cells):
    assert kinds(cells["unloaded"]) == ["error"]
    assert "No gradients provided" in cells["unloaded"].outputs[0]["evalue"]


@pytest.mark.notebook
def test_train_on_batch_is_explained_with_its_own_batch(cells):
    cell = cells["train_on_batch"]
    assert kinds(cell) == ["error", "stdout", "display_data"], cell.outputs
    assert "the first 8 rows of this call's data" in stream_text(cell, 1)
    assert f"cell In[{cells['all_cut'].execution_count}], line 2" in report_text(cell)


@pytest.mark.notebook
def test_an_optimizer_step_of_your_own_gets_the_model_to_pass_to_the_finder(cells):
    cell = cells["own_loop"]
    assert kinds(cell) == ["error", "stdout"], cell.outputs
    assert "workbook.find_gradient_breaks(cut, (x_batch, y_batch), loss=your_loss)" in stream_text(cell, 1)


@pytest.mark.notebook
def test_after_a_reload_of_the_module_unloading_still_puts_everything_back(cells):
    for name in ("reloaded", "loaded again"):  # the culprit once, under the error, not twice
        assert kinds(cells[name]) == ["error", "stdout", "display_data"], cells[name].outputs
        assert "Round" in report_text(cells[name])
    unloaded = cells["unloaded after reload"]
    assert kinds(unloaded) == ["stdout", "error"], unloaded.outputs  # the plain error, no help
    assert stream_text(unloaded, 0) == "as before loading: True\n"


def test_loading_changes_nothing_until_a_gradient_is_missing_and_unloading_puts_everything_back():
    shell = InteractiveShell.instance()

    def hooks():
        return (
            shell.custom_exceptions,
            shell.CustomTB,
            warnings._showwarnmsg,
            warnings.showwarning,
            shell.events.callbacks["post_run_cell"][:],
        )

    before = hooks()
    missing_gradients.load_ipython_extension(shell)
    try:
        assert ValueError in shell.custom_exceptions and warnings._showwarnmsg is not before[2]
        assert warnings.showwarning is before[3]  # Python's documented hook stays the user's
        result = shell.run_cell("1 + 1")
        assert result.success and result.result == 2
    finally:
        missing_gradients.unload_ipython_extension(shell)
    assert hooks() == before


FROZEN_FIT = """\
import keras
import numpy as np

keras.utils.set_random_seed(0)
frozen = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1), keras.layers.Lambda(keras.ops.round)])
frozen.compile(optimizer="sgd", loss="mse")
frozen.fit(np.ones((8, 3), "float32"), np.ones((8, 1), "float32"), batch_size=4, verbose=0)
"""


@pytest.mark.parametrize(
    ("failure", "line"),
    [
        (RuntimeError("the finder broke"), "could not follow the gradient of model"),
        (KeyboardInterrupt(), missing_gradients.INTERRUPTED),
    ],
)
def test_a_finder_that_fails_or_is_interrupted_costs_one_line_and_the_extension_stays(
    monkeypatch, capsys, failure, line
):
    from workbook.finder import diagnosis

    def failing(*args, **kwargs):
        raise failure

    shell = InteractiveShell.instance()
    monkeypatch.setattr(diagnosis, "find_known_breaks", failing)  # the finder, told that a gradient is missing
    missing_gradients.load_ipython_extension(shell)
    try:
        assert not shell.run_cell(FROZEN_FIT).success
        handler = shell.CustomTB
        assert not shell.run_cell("frozen.fit(np.ones((8, 3)), np.ones((8, 1)), verbose=0)").success
        assert shell.CustomTB == handler and ValueError in shell.custom_exceptions  # still registered
    finally:
        missing_gradients.unload_ipython_extension(shell)
    shown = capsys.readouterr()
    assert "Custom TB Handler failed" not in shown.out + shown.err
    assert shown.out.count("Traceback (most recent call last)") == 2  # each error shown, and nothing more
    ours = [text for text in shown.out.splitlines() if text.startswith(missing_gradients.NAME)]
    assert len(ours) == 2 and all(line in text for text in ours), ours


def test_unloading_leaves_an_error_handler_set_after_it_in_place():
    # Another tool's set_custom_exc after the extension's: unloading the extension must not
    # silently take that tool's handler away (and the tool's own unload puts back the rest).
    shell = InteractiveShell.instance()
    before = (shell.custom_exceptions, shell.CustomTB)

    def theirs(shell, etype, value, tb, tb_offset=None):
        return None

    missing_gradients.load_ipython_extension(shell)
    try:
        shell.set_custom_exc((KeyError,), theirs)
        handler = shell.CustomTB
    finally:
        missing_gradients.unload_ipython_extension(shell)
    assert shell.custom_exceptions == (KeyError,) and shell.CustomTB is handler
    shell.custom_exceptions, shell.CustomTB = before
