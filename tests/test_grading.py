"""Grading assignment 05 the way a JupyterHub grades it, against honest and dishonest work.

The instructor generates and releases the (turned-down) assignment into an exchange folder;
each student fetches it in a home of their own, answers, and submits; the instructor collects,
generates feedback and exports the grades: all through nbgrader's own classes in this process
(as those commands run them, without seconds of start-up each). The class of 31 is autograded
through the command line, two submissions at a time (``python -m workbook.course.grade_class``:
the attacks on their neighbours in one ``nbgrader autograde`` and as many honest classmates in
another, side by side, the k-th of each starting together; then the rest of the class in two),
in subprocesses whose environment a hub would give them (a fresh
home, no PYTEST_* or TF_* variables; under pytest, ipykernel hides the kernel's stderr, which
nbgrader counts against a cell). One class is graded per test run and shared by the tests below.

Expected scores are the points of the honest work in each submission, written out here
from the assignment's rules, never read from the grader. Every dishonest submission is
one of the attacks a strong student tried (and variations): each earns nothing beyond its
honest work, and the honest students graded beside it keep their grades.
"""

import concurrent.futures
import contextlib
import csv
import itertools
import json
import math
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time

import nbformat
import pytest
from notebook_runner import FRESH_PYTHON_SECONDS, NOTEBOOKS, clean_environment, reduced_notebook
from test_assignments import ASSIGNMENT_POINTS as POINTS

from workbook.course.grading import ANSWER_KEY

ROOT = NOTEBOOKS.parent
COURSE_ID = "gradient-workbook"
ASSIGNMENT = "05_assignment_quantized_autoencoder"
NOTEBOOK = f"{ASSIGNMENT}.ipynb"
# An ordinary cell's limit while testing: short enough that the looping submission costs
# little, long enough for every honest cell (the real limit, 120 s, is tested on its own).
TEST_CELL_SECONDS = 45

# Rebind the checks and the recorders through module aliases, forge what the hidden tests
# record (from the grader's own inputs, answered with the identity), point one record at a
# file outside the box, and rewrite the probe to inputs where the forgery would be right.
FORGER = """import os
import numpy as np
import workbook.lab.assignment_checks as c, workbook.course.grading as g

c.check_quantizer = c.check_gradient_fix = c.check_reconstruction = lambda *a, **k: True
g.record_function = g.record_answers = g.record_model = g.judge_here = lambda *a, **k: None
quantize_2bit = lambda x: x
probe = np.load(g.PROBE_FILE)
os.makedirs(g.ARTIFACTS_FOLDER, exist_ok=True)
for grade_id in ("a_forward", "a_gradient", "b_fix"):
    np.savez(
        f"{g.ARTIFACTS_FOLDER}/{grade_id}.npz",
        x_value=probe["x"], x_gradient=np.ones_like(probe["x"]),
        code_value=probe["code"], code_gradient=np.ones_like(probe["code"]),
    )
os.symlink("/etc/passwd", f"{g.ARTIFACTS_FOLDER}/c_reconstruction.npz")
# the probe rewritten where the identity meets the requirement: 0 is its own level, gradient 1
zeros = {name: np.zeros_like(probe[name]) for name in ("x", "code", "images")}
np.savez(g.PROBE_FILE, **zeros, model_seed=probe["model_seed"])
for grade_id in ("a_forward", "a_gradient", "b_fix"):
    np.savez(
        f"{g.ARTIFACTS_FOLDER}/{grade_id}.npz",
        x_value=0 * probe["x"], x_gradient=np.ones_like(probe["x"]),
        code_value=0 * probe["code"], code_gradient=np.ones_like(probe["code"]),
    )
"""

# Reach what grading depends on: the gradebook, site-packages (a .pth file runs in every
# Python started later), the instructor's source, a classmate's submission, the workbook's
# own files; shadow the workbook and Python's start-up; start a process that outlives grading.
ESCAPER = """import os, sqlite3, subprocess

attempts = {{}}

def attempt(name, action):
    try:
        action()
        attempts[name] = "done"
    except Exception as error:
        attempts[name] = type(error).__name__

def gradebook():
    db = sqlite3.connect({gradebook!r})
    db.execute("UPDATE grade SET manual_score = 10")
    db.commit()

attempt("gradebook", gradebook)
attempt("site-packages", lambda: open({pth!r}, "w").write("import os; os.system('touch {marker}')"))
attempt("source", lambda: open({source!r}, "a").write(" "))
attempt("classmate", lambda: open({classmate!r}, "w").write("{{{{}}}}"))
attempt("workbook", lambda: open({workbook_file!r}, "a").write("# changed"))
attempt("shadow", lambda: open("/etc/shadow").read())  # only root on the host may
os.makedirs("workbook/course", exist_ok=True)
open("workbook/course/verdicts.py", "w").write("def judge(*a, **k): return dict.fromkeys({points!r}, (True, ''))")
open("sitecustomize.py", "w").write("open({marker!r}, 'w')")
os.environ.update(PYTHONPATH=os.getcwd(), PYTHONSTARTUP="sitecustomize.py")
subprocess.Popen(["setsid", "sh", "-c", "sleep 30; touch {marker}"])
print("attempts:", attempts)
model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
"""

# Part (c) without training: the visible test set zeroed and a model that outputs about 0,
# NumPy's mean patched, the target and the budget reassigned, the clock stopped.
CHEATS_PART_C = """import numpy as np

x_test[:] = 0.0
np.mean = lambda *args, **kwargs: 0.0
target_mse, time_budget_seconds = 1.0, 10**9
time.perf_counter = lambda: training_started
model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
model.get_layer("output").bias.assign([-30.0])  # outputs about 0: "reconstructs" the zeroed images
model.predict = lambda x, **kwargs: x
"""

# A workbook/ folder handed in next to the notebook, which would shadow the real one.
SHADOW_PACKAGE = {
    "workbook/__init__.py": "from .verdicts import judge\n",
    "workbook/course/verdicts.py": "def judge(*args, **kwargs):\n    return {}\n",
}
# One 50 MB line, 50 MB more through a display handle (updated from a thread while the next cells
# run, and shown again under the same display id), and 100 MB of widget state in twenty widgets.
HUGE_OUTPUT = """import threading, time
import comm
from IPython.display import display
state = {"_model_module": "@jupyter-widgets/controls", "_model_name": "TextModel", "value": "w" * 5_000_000}
for _ in range(20):
    comm.create_comm(target_name="jupyter.widget", data={"state": state, "buffer_paths": []})
handle = display("small", display_id=True)
def flood():
    for _ in range(10):
        time.sleep(0.3)
        handle.update("u" * 5_000_000)
threading.Thread(target=flood, daemon=True).start()
for _ in range(3):
    display("d" * 5_000_000, display_id=handle.display_id)
print("x" * 50_000_000)  # one 50 MB line
"""

# Take the answers from wherever the grader might keep them: every module of the installed
# workbook, and the course folder's answer key (aimed at this run's own).
KEY_THIEF = """import importlib, pkgutil, runpy
import workbook

stolen = {{}}
for module in pkgutil.walk_packages(workbook.__path__, "workbook."):
    try:
        stolen.update(vars(importlib.import_module(module.name)))
    except Exception:
        pass
try:
    key = runpy.run_path({answer_key!r})["KEY"]
    stolen.update(reference_quantizer=key.quantizer, _CULPRIT=key.culprit)
except Exception as error:
    print("no answer key:", type(error).__name__)
quantize_2bit = stolen.get("reference_quantizer")
"""


# Part (c) against the rules, scheduled where the grader's old clock did not look: trained on
# x_train and x_test and stopped on x_test, in an IPython hook that runs inside part (c)'s check
# (after the clock stopped, before the check's code); then, at the kernel's exit, the recording
# rewritten with the untrained weights (a stand-in for training done after the check). It prints
# how long the hook trained and the weights it left, so that the test can measure them itself.
TRAINS_ON_X_TEST_IN_A_HOOK = """import atexit
import time

import numpy as np

model = workbook.autoencoder(bottleneck=quantize_2bit, learning_rate=3e-3)
untrained = {f"weight_{i}": w.astype("float32") for i, w in enumerate(model.get_weights())}
x_seen = np.concatenate([x_train, x_test])  # against the rules: x_test trained on...


def train_inside_the_check(*args):
    get_ipython().events.unregister("pre_run_cell", train_inside_the_check)
    started = time.perf_counter()
    while time.perf_counter() - started < 100:
        model.fit(x_seen, x_seen, batch_size=batch_size, verbose=0)
        if model.evaluate(x_test, x_test, verbose=0) < 0.8 * target_mse:  # ...and stopped on
            break
    print(f"hook trained for {time.perf_counter() - started:.1f} s")
    weights = np.concatenate([w.ravel() for w in model.get_weights()]).astype("<f4")
    print("weights:", weights.tobytes().hex())


get_ipython().events.register("pre_run_cell", train_inside_the_check)
atexit.register(lambda: np.savez("grading_artifacts/c_reconstruction.npz", **untrained))
"""
# Part (c)'s points of the student above: what its weights earn on the digits it never had.
MEASURED_ON_UNSEEN = "measured on unseen digits"

# How long each attack below holds what it took (a search, a full disk, a flood) while the
# classmate queued beside it is graded; the test checks from both notebooks' stamps that it was.
HOLD_SECONDS = 20

# Another student's work, wherever it is: another course's submissions on the same machine,
# this class's, the boxes of the classmates graded beside it (their recordings, and their
# kernels' connection files, through which it would run code in their kernels), searched for
# over the whole file system once and at the known places while the classmate is graded. A
# notebook found is copied: its answers run here, for (a) and (b) and (c).
SNOOPER = """import glob, json, os, sys, time
from jupyter_client import BlockingKernelClient

own = os.path.dirname(os.getcwd())
found = {{}}
places = [{other_course!r} + "/**", {submitted!r} + "/**", {boxes!r} + "/workbook-box-*/**"]


def wanted(path):
    name = os.path.basename(path)
    return name in ("connection.json", "c_reconstruction.npz") or (
        name.endswith(".ipynb") and "quantize_2bit" in open(path, errors="replace").read()
    )


def take(path):
    if path.endswith(".json"):  # a classmate's kernel: run code in it
        client = BlockingKernelClient(connection_file=path)
        client.load_connection_file()
        client.start_channels()
        client.execute("culprit_op = 'sabotaged'")
        return "ran code in it"
    if path.endswith(".ipynb"):  # a classmate's answers: run them here
        for cell in json.load(open(path))["cells"]:
            if cell.get("metadata", {{}}).get("nbgrader", {{}}).get("solution"):
                exec("".join(cell["source"]), globals())
        return "copied"
    return "read"


def look(paths):
    for path in paths:
        if path in found or path.startswith(own) or not os.path.isfile(path):
            continue
        try:
            if wanted(path):
                found[path] = take(path)
        except Exception as error:
            found[path] = type(error).__name__


look(
    os.path.join(folder, name)
    for folder, _, names in os.walk("/")
    if not folder.startswith(("/proc", "/sys", "/dev", own))
    for name in names
)
window = [time.time()]  # then the known places, again and again, while the classmate is graded
while time.time() - window[0] < {hold}:
    for place in places:
        look(glob.glob(place, recursive=True))
    time.sleep(0.5)
window.append(time.time())
print("snooped:", json.dumps(dict(window=window, found=found)))
"""

# Fill every place the kernel can write (its box, its home, its temporary folders), and keep them
# full while the classmate beside it is graded.
DISK_FILLER = """import json, os, time

window, written = [time.time()], {{}}
for place in (os.getcwd(), os.path.expanduser("~"), "/tmp", "/var/tmp", "/dev/shm"):
    descriptor, size = os.open(os.path.join(place, "filler"), os.O_WRONLY | os.O_CREAT), 0
    try:
        while size < 2**31:  # 2 GB a place at most, if nothing stopped it
            size += os.write(descriptor, bytes(2**20))
    except OSError:
        pass
    written[place] = size
time.sleep({hold})
window.append(time.time())
print("filled:", json.dumps(dict(window=window, written=written)))
model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
"""

UNTRAINED = "model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained"

# Start processes until the box refuses, and hold them while the classmate beside it is graded.
FORKER = """import json, subprocess, time

window, children, stopped = [time.time()], [], None
try:
    for _ in range(1000):  # at most 1,000: without a limit, the machine's pids are all it takes
        children.append(subprocess.Popen(["sleep", "600"]))
except OSError as error:
    stopped = type(error).__name__
time.sleep({hold})
window.append(time.time())
for child in children:
    child.kill()
    child.wait()
print("flooded:", json.dumps(dict(window=window, children=len(children), stopped=stopped)))
model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
"""

# An answer that never ends (it waits: see loop_and_kill below).
ENDLESS = "import time\n\nwhile True:\n    time.sleep(1)"

# After every cell from here on, part (c)'s recording replaced by 1.5 MB that would inflate to
# 1.5 GB in the grader's verdict process, its header's shape (-1,): read as "everything".
INFLATER = """import io, os, zipfile
import numpy as np

packed = io.BytesIO()  # made once: deflating 1.5 GB of zeros takes seconds, writing 1.5 MB does not
header = {"descr": "<f4", "fortran_order": False, "shape": (-1,)}
with (
    zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive,
    archive.open("weight_0.npy", "w", force_zip64=True) as member,
):
    np.lib.format.write_array_header_1_0(member, header)
    for _ in range(384):
        member.write(bytes(2**22))


def inflate(result):
    os.makedirs("grading_artifacts", exist_ok=True)
    with open("grading_artifacts/c_reconstruction.npz", "wb") as file:
        file.write(packed.getvalue())


get_ipython().events.register("post_run_cell", inflate)
model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
"""

# After every cell from here on, part (b)'s written answers replaced by JSON nested 100,000 deep.
DEEP_JSON = """

import os


def nest(result):
    os.makedirs("grading_artifacts", exist_ok=True)
    with open("grading_artifacts/b_culprit.json", "w") as file:
        file.write("[" * 100_000 + "]" * 100_000)


get_ipython().events.register("post_run_cell", nest)
"""


# Rename the kernel's working folder and put a link in its place, or a link in the box's top, for
# the grader to follow when it takes the recordings; then the recordings' folder made a link.
LINK_PLANTER = """import json, os

here, planted = os.getcwd(), {}


def attempt(name, action):
    try:
        action()
        planted[name] = "done"
    except OSError as error:
        planted[name] = type(error).__name__


attempt("rename work", lambda: os.rename(here, here + "-moved"))
attempt("link in the top", lambda: os.symlink("/etc", os.path.join(os.path.dirname(here), "planted")))
attempt("recordings moved", lambda: os.rename("grading_artifacts", "moved"))
attempt("recordings linked", lambda: os.symlink("moved", "grading_artifacts"))
print("planted:", json.dumps(planted))
model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
"""


# What a student may write into their own feedback: a hook that prints every cell it sees (the
# check cells with their hidden tests, as the grader ran them), HTML that would run script in the
# reader's browser, and the hidden tests' opening marker with no end (nbgrader stopped on it).
FEEDBACK_PROBER = """
from IPython.display import HTML, display

get_ipython().events.register("post_run_cell", lambda result: print(result.info.raw_cell))
display(HTML("<img src=x onerror=alert(1)><script>alert(2)</script>"))
# nbconvert writes an image's width into the page unquoted
display({"image/png": "iVBORw0KGgo="}, metadata={"image/png": {"width": "1 onerror=alert(5)"}}, raw=True)
# ### BEGIN HIDDEN TESTS
"""
SCRIPT_IN_MARKDOWN = "<img src=x onerror=alert(3)>\n\n<script>alert(4)</script>"


def nbgrader_meta(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


def answer_text(cell):
    """A solution cell's source without the solution markers: what a student would write."""
    return "\n".join(
        line for line in cell.source.splitlines() if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
    )


def all_solutions(**overrides):
    answers = dict.fromkeys(("a_quantize_2bit", "b_culprit_answer", "b_fix_answer", "c_train_answer"), "solution")
    answers.update(overrides)
    return answers


HONEST_A_AND_B = {"a_forward": 1, "a_gradient": 2, "b_culprit": 1, "b_fix": 2, "c_reconstruction": 0}
A_ONLY = {**HONEST_A_AND_B, "b_culprit": 0, "b_fix": 0}
NO_A_GRADIENT = {**HONEST_A_AND_B, "a_gradient": 0}

PLAIN_ROUND = """def quantize_2bit(x):
    return keras.ops.round(3.0 * keras.ops.clip(x, 0.0, 1.0)) / 3.0
"""
UNCLIPPED_GRADIENT = """def quantize_forward(x):
    return keras.ops.round(3.0 * keras.ops.clip(x, 0.0, 1.0)) / 3.0


def quantize_derivative(x):
    return keras.ops.ones_like(x)


quantize_2bit = workbook.surrogate(quantize_forward, quantize_derivative, name="quantize_2bit", formula="$1$")
"""
# The reference quantizer where the notebook's own checks look (float32, in [-1, 2]), the input
# itself elsewhere: right on every input those checks try, wrong in general.
RIGHT_ONLY_WHERE_CHECKED = """

right_where_checked = quantize_2bit


def quantize_2bit(x):
    x = keras.ops.convert_to_tensor(x)
    if keras.backend.standardize_dtype(x.dtype) != "float32":
        return x
    return keras.ops.where((x >= -1.0) & (x <= 2.0), right_where_checked(x), x)
"""
STILL_CASTS = """def fixed_bottleneck(x):
    x = keras.ops.clip(x, 0.0, 1.0)
    codes = keras.ops.cast(keras.ops.round(3.0 * x), "int32")
    return keras.ops.cast(codes, x.dtype) / 3.0
"""

# What each student hands in, and the points of the honest work in it.
STUDENTS = {
    # the reference solution, as the instructor wrote it
    "reference": (dict(answers=all_solutions()), POINTS),
    # the release as handed out
    "untouched": (dict(), dict.fromkeys(POINTS, 0)),
    # (a) right, (b) wrong, (c) trained on x_test in a hook inside the check (above); and read-only
    # cells written over, which the grader restores
    "half_right": (
        dict(
            answers={
                "a_quantize_2bit": "solution",
                "b_culprit_answer": 'culprit_op = "Round"\nculprit_variable = "levels"',
                "b_fix_answer": "fixed_bottleneck = colleague_bottleneck",
                "c_train_answer": TRAINS_ON_X_TEST_IN_A_HOOK,
            },
            locked_edits={
                "b_fix": "print('✓')",
                "parameters": "n_train = 8\nbatch_size = 8",
                "colleague": "round_ste = workbook.SURROGATES['round_ste']\n"
                "colleague_bottleneck = quantize_2bit\n"
                "colleague_model = None",
            },
        ),
        {"a_forward": 1, "a_gradient": 2, "b_culprit": 0, "b_fix": 0, "c_reconstruction": MEASURED_ON_UNSEEN},
    ),
    # checks and recorders rebound through aliases, records forged: nothing is honest here
    "forger": (
        dict(
            answers={
                "a_quantize_2bit": FORGER,
                "b_culprit_answer": 'culprit_op = "Round"\nculprit_variable = "levels"',
                "b_fix_answer": "fixed_bottleneck = colleague_bottleneck",
                "c_train_answer": "model = workbook.autoencoder(bottleneck=quantize_2bit)",
            },
            files=SHADOW_PACKAGE,
        ),
        dict.fromkeys(POINTS, 0),
    ),
    # (a) and (b) right; (c) tries to get out of the sandbox and trains nothing
    "escaper": (dict(answers=all_solutions(c_train_answer="ESCAPER")), HONEST_A_AND_B),
    # (a) and (b) right; (c) forged every way the kernel can
    "cheats_part_c": (dict(answers=all_solutions(c_train_answer=CHEATS_PART_C)), HONEST_A_AND_B),
    # (a) right; two check cells deleted: the grader has nothing to run for them
    "deleted_checks": (
        dict(answers={"a_quantize_2bit": "solution"}, deleted=("a_gradient", "c_reconstruction")),
        {"a_forward": 1, "a_gradient": 0, "b_culprit": 0, "b_fix": 0, "c_reconstruction": 0},
    ),
    # (a) and (b)'s fix right; an answer that never ends, and one that ends the kernel: each
    # costs its own cell, and the cells after them are graded. The endless loop waits instead of
    # spinning: the cell's limit stops either the same way, and a spinning one would burn the
    # limit's seconds of CPU beside the classmates graded at the same time.
    "loop_and_kill": (
        dict(answers=all_solutions(b_culprit_answer=ENDLESS, c_train_answer="import os\nos._exit(1)")),
        {"a_forward": 1, "a_gradient": 2, "b_culprit": 0, "b_fix": 2, "c_reconstruction": 0},
    ),
    # the release with one 50 MB line printed
    "huge_output": (dict(answers={"a_quantize_2bit": HUGE_OUTPUT}), dict.fromkeys(POINTS, 0)),
    # the grader's answers, looked for in the installed workbook and the course folder: none there
    "key_thief": (
        dict(
            answers={
                "a_quantize_2bit": "KEY_THIEF",
                "b_culprit_answer": 'culprit_op, culprit_variable = stolen.get("_CULPRIT", ("", ""))',
                "b_fix_answer": "fixed_bottleneck = quantize_2bit",
            }
        ),
        dict.fromkeys(POINTS, 0),
    ),
    # another course's, this class's and the graded classmates' work searched for (a notebook
    # found is copied, a kernel found is run code in): none of it there
    "snooper": (dict(answers={"a_quantize_2bit": "SNOOPER"}), dict.fromkeys(POINTS, 0)),
    # (a) and (b) right; (c) fills every place it can write and holds it
    "disk_filler": (dict(answers=all_solutions(c_train_answer="DISK_FILLER")), HONEST_A_AND_B),
    # (a) and (b) right; (c) starts processes until refused and holds them
    "forker": (dict(answers=all_solutions(c_train_answer="FORKER")), HONEST_A_AND_B),
    # (a) and (b) right; (c)'s recording would inflate to 1.5 GB: only (c) fails
    "inflater": (dict(answers=all_solutions(c_train_answer="INFLATER")), HONEST_A_AND_B),
    # (a) right only where the notebook's checks look: the grader probes every input the assignment allows
    "right_only_where_checked": (
        dict(answers={"a_quantize_2bit": "RIGHT_ONLY_WHERE_CHECKED"}),
        dict.fromkeys(POINTS, 0),
    ),
    # (a) right, and feedback probed (above): the hidden tests printed, script written
    "feedback_prober": (
        dict(answers={"a_quantize_2bit": "FEEDBACK_PROBER"}, added=(SCRIPT_IN_MARKDOWN,)),
        A_ONLY,
    ),
    # (a) and (b) right; (c) plants links for the grader to follow: only its own recordings are read
    "link_planter": (dict(answers=all_solutions(c_train_answer=LINK_PLANTER)), HONEST_A_AND_B),
    # (a) and (b) right; (b)'s written answers nested 100,000 deep: only that part fails
    "deep_json": (
        dict(answers=all_solutions(c_train_answer=None, b_culprit_answer="DEEP_JSON")),
        {**HONEST_A_AND_B, "b_culprit": 0},
    ),
    # honest classmates, each with the reference solution: graded beside the attacks, they keep every point
    **{f"classmate_{number:02d}": (dict(answers=all_solutions()), POINTS) for number in range(1, 7)},
    # and the rest of an honest class, who stopped part-way or made a common mistake: each part
    # earns its points or not on its own (part (c) untrained or unanswered fails only part (c))
    "stopped_after_a": (dict(answers={"a_quantize_2bit": "solution"}), A_ONLY),
    "stopped_after_b": (dict(answers=all_solutions(c_train_answer=None)), HONEST_A_AND_B),
    "only_part_b": (
        dict(answers={"b_culprit_answer": "solution", "b_fix_answer": "solution"}),
        {"a_forward": 0, "a_gradient": 0, "b_culprit": 1, "b_fix": 2, "c_reconstruction": 0},
    ),
    "never_trained": (dict(answers=all_solutions(c_train_answer=UNTRAINED)), HONEST_A_AND_B),
    # round() has no gradient at all: the forward pass alone is right
    "round_without_a_surrogate": (
        dict(answers=all_solutions(a_quantize_2bit=PLAIN_ROUND, c_train_answer=None)),
        NO_A_GRADIENT,
    ),
    # straight-through without the clip's window: gradient 1 outside [0, 1] too
    "straight_through_everywhere": (
        dict(answers=all_solutions(a_quantize_2bit=UNCLIPPED_GRADIENT, c_train_answer=None)),
        NO_A_GRADIENT,
    ),
    "wrong_culprit": (
        dict(
            answers=all_solutions(
                b_culprit_answer='culprit_op = "Round"\nculprit_variable = "levels"', c_train_answer=None
            )
        ),
        {**HONEST_A_AND_B, "b_culprit": 0},
    ),
    # the culprit as the report names it, but in lower case: the grader compares in lower case
    "culprit_in_lower_case": (
        dict(
            answers=all_solutions(
                b_culprit_answer='culprit_op = "cast"\nculprit_variable = "codes"', c_train_answer=None
            )
        ),
        HONEST_A_AND_B,
    ),
    # a "fix" that still goes through an integer type: still no gradient to the encoder
    "fix_still_casts": (
        dict(answers=all_solutions(b_fix_answer=STILL_CASTS, c_train_answer=None)),
        {**HONEST_A_AND_B, "b_fix": 0},
    ),
}
# The attacks on what is graded beside them, each graded together with an honest classmate;
# and those that print when they held what they took (student, cell, label).
BESIDE_A_CLASSMATE = ("snooper", "disk_filler", "forker", "huge_output", "inflater", "escaper")
HOLDING = (
    ("snooper", "a_quantize_2bit", "snooped"),
    ("disk_filler", "c_train_answer", "filled"),
    ("forker", "c_train_answer", "flooded"),
)
# The same notebook released under other names: one that no verdict spec covers (the forger's
# checks would pass in the kernel), and one whose answer key fails (the reference hands it in).
UNCOVERED, BROKEN_KEY = "hw5", "05_broken_key"
OTHER_ASSIGNMENTS = {UNCOVERED: "forger", BROKEN_KEY: "reference"}
NOT_A_NOTEBOOK = "broken_file"  # hands in a file that is not valid JSON
# The reference solution with nbgrader metadata nbgrader would stop a whole run on, handed in
# by students whose names sort first, so that each share of the class has later students to grade.
MALFORMED = {
    "bad_metadata_from_the_future": "a free cell's metadata of schema version 99",
    "bad_metadata_empty": "a free cell's metadata {}, read as schema version 0",
    "bad_metadata_copied_cell": "an answer cell copied with its metadata: its grade_id twice",
}
# After submitting, replaces the notebook in the exchange's inbound folder by a link to the
# instructor's source notebook (with every solution), for collect to copy as their work.
COLLECT_LINKER = "collect_linker"


def malformed(notebook, student):
    """The reference ``notebook`` with the nbgrader metadata ``student`` of MALFORMED hands in."""
    free = next(index for index, cell in enumerate(notebook.cells) if "nbgrader" not in cell.metadata)
    if student == "bad_metadata_from_the_future":
        notebook.cells[free].metadata["nbgrader"] = {"schema_version": 99}
    elif student == "bad_metadata_empty":
        notebook.cells[free].metadata["nbgrader"] = {}
    else:
        answer = next(index for index, cell in enumerate(notebook.cells) if nbgrader_meta(cell).get("solution"))
        notebook.cells.insert(answer + 1, nbformat.from_dict(json.loads(json.dumps(notebook.cells[answer]))))
        notebook.cells[answer + 1]["id"] = "copied-answer"
    return notebook


def submission(release, solutions, answers=(), locked_edits=(), deleted=(), files=None, added=()):
    """The released notebook with answer cells filled in (``files`` are handed in beside it).

    ``answers`` maps an answer cell's grade_id to its new source ("solution": the
    reference answer); ``locked_edits`` maps a read-only cell's grade_id to what a student
    wrote over it; cells in ``deleted`` are removed; markdown cells ``added`` at the end.
    """
    notebook = nbformat.from_dict(release)
    answers, locked_edits = dict(answers), dict(locked_edits)
    for cell in notebook.cells:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if answers.get(grade_id) is not None:
            source = answers[grade_id]
            cell.source = answer_text(solutions[grade_id]) if source == "solution" else source
        elif grade_id in locked_edits:
            cell.source = locked_edits[grade_id]
    notebook.cells = [c for c in notebook.cells if nbgrader_meta(c).get("grade_id") not in set(deleted)]
    notebook.cells += [nbformat.v4.new_markdown_cell(text) for text in added]
    return notebook


def hand_in(path, student, solutions, placeholders):
    """Write what ``student`` hands in over the release fetched to ``path`` (``placeholders`` filled in)."""
    if student == NOT_A_NOTEBOOK:
        path.write_text(path.read_text()[:5000])  # cut off mid-way, as an interrupted upload leaves it
    elif student in MALFORMED:
        reference = submission(nbformat.read(path, as_version=4), solutions, answers=all_solutions())
        nbformat.write(malformed(reference, student), path)
    elif student != COLLECT_LINKER:  # who hands in the release as it came, then changes it in the exchange
        release = nbformat.read(path, as_version=4)
        handed_in = dict(STUDENTS[student][0])
        answers = handed_in.get("answers", {})
        handed_in["answers"] = {grade_id: placeholders.get(text, text) for grade_id, text in answers.items()}
        for name, text in (handed_in.pop("files", None) or {}).items():
            (path.parent / name).parent.mkdir(parents=True, exist_ok=True)
            (path.parent / name).write_text(text)
        nbformat.write(submission(release, solutions, **handed_in), path)


def escaper_source(base, course):
    """The escaper's cell, aimed at this run's own files; and the marker it tries to leave."""
    marker = base / "escaped"
    source = ESCAPER.format(
        gradebook=str(course / "gradebook.db"),
        pth=os.path.join(sysconfig.get_paths()["purelib"], "zz_workbook_attack.pth"),
        source=str(course / "source" / ASSIGNMENT / NOTEBOOK),
        classmate=str(course / "submitted" / "reference" / ASSIGNMENT / NOTEBOOK),
        workbook_file=str(ROOT / "workbook" / "course" / "verdicts.py"),
        marker=str(marker),
        points=list(POINTS),
    )
    return source, marker


def leftover_processes(marker):
    """Processes on this machine whose command line names ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                if str(marker).encode() in file.read():
                    found.append(entry)
        except OSError:
            continue
    return found


@pytest.fixture(autouse=True)
def verdict_processes_end_with_the_test():
    """A verdict process a test starts in this process (run_verdicts) ends with the test, as it ends with a grader.

    Left to the worker's exit, it would outlive the tests that worker runs after it: the browser
    test's session, for one, counts every process started while it is open.
    """
    yield
    from workbook.course import grading

    grading._end_verdict_processes()


def hub_test(function):
    """A test of the graded class: slow, on the worker that grades it (tests/test_parallel_groups.py)."""
    for mark in (pytest.mark.slow, pytest.mark.timeout(2400), pytest.mark.hub, pytest.mark.xdist_group("hub")):
        function = mark(function)
    return function


# Session-wide: a module-wide fixture is graded again whenever its worker runs another module's
# test in between. Its tests are marked xdist_group("hub"), so the class is graded on one worker,
# once (tests/test_parallel_groups.py checks that the grouping holds).
def student_exchange(kind, home, exchange, assignment, student):
    """``nbgrader fetch_assignment`` or ``nbgrader submit`` of ``student``, from ``home``, by nbgrader's own classes.

    In this process (each command line costs seconds of start-up), configured as those
    commands are by their flags; the class itself is graded through the command line.
    """
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default import ExchangeFetchAssignment, ExchangeSubmit
    from traitlets.config import Config

    config = Config()
    config.CourseDirectory.update(course_id=COURSE_ID, assignment_id=assignment, student_id=student, root=str(home))
    config.Exchange.update(root=str(exchange), assignment_dir=str(home), cache=str(home / ".nbgrader-cache"))
    app = {"fetch": ExchangeFetchAssignment, "submit": ExchangeSubmit}[kind]
    app(coursedir=CourseDirectory(config=config), authenticator=Authenticator(config=config), config=config).start()


def instructor_collect(course, exchange, assignment):
    """``nbgrader collect ASSIGNMENT`` in ``course``, by the collect of its nbgrader_config.py, in this process.

    Returns what it logged, one message a line.
    """
    import logging

    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange import ExchangeFactory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", str(course)).load_config()
    config.CourseDirectory.update(course_id=COURSE_ID, assignment_id=assignment, root=str(course))
    config.Exchange.root = str(exchange)
    coursedir = CourseDirectory(config=config)
    collect = ExchangeFactory(config=config).Collect(
        coursedir=coursedir, authenticator=Authenticator(config=config), config=config
    )
    messages = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: messages.append(record.getMessage())
    collect.log.addHandler(handler)
    try:
        collect.start()
    finally:
        collect.log.removeHandler(handler)
    return "\n".join(messages)


def instructor_api(course):
    """nbgrader's own API for the instructor's commands, configured from ``course``'s nbgrader_config.py.

    In this process, as ``nbgrader generate_assignment``, ``release_assignment`` or
    ``generate_feedback`` run in ``course`` read it (each command line costs seconds of start-up).
    """
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", str(course)).load_config()
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def succeeded(result):
    """What an :class:`NbGraderAPI` call returned, once it says it succeeded."""
    assert result["success"], f"{result.get('error')}\n{result.get('log')}"
    return result


@contextlib.contextmanager
def nbgraders_path():
    """PATH with this Python's scripts first while nbgrader runs here: it starts ``alembic`` to make the gradebook."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
        yield


def instructor_export(course):
    """``nbgrader export`` in ``course``: its plugin (nbgrader_config.py's) writes grades.csv from the gradebook."""
    from nbgrader.api import Gradebook
    from nbgrader.apps.exportapp import ExportApp
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", str(course)).load_config()
    plugin = config.ExportApp.get("plugin_class", ExportApp.class_traits()["plugin_class"].default())
    coursedir = CourseDirectory(config=config)
    with Gradebook(coursedir.db_url, coursedir.course_id) as gradebook:
        plugin(config=config, to=str(course / "grades.csv")).export(gradebook)


def per_box_limits_missing():
    """Why this machine gives the grader no per-box task, memory or disk limits (None if it gives all three)."""
    from workbook.course.sandbox import Box

    box = Box()
    try:
        return box.limit() or box.bound_disk()
    finally:
        box.remove()


def beside():
    """(honest classmates, the attacks on their neighbours): graded in two runs side by side, in step."""
    classmates = [student for student in STUDENTS if student.startswith("classmate_")]
    return classmates[: len(BESIDE_A_CLASSMATE)], list(BESIDE_A_CLASSMATE)


# The tests' own step added to the grader (before its kernel starts): the k-th submission of the
# classmates' run waits for the k-th of the attacks' run and the other way round, so that each
# attack starts together with an honest classmate; each arrival is a file, "{k:02d}-{student}".
# A run that has ended ("done-<side>", written by the fixture) or a wait that gave up ends every
# later wait, so one failed run costs at most one cap, and the failure is logged.
START_TOGETHER = """
import pathlib, time
from nbgrader.preprocessors import NbGraderPreprocessor


class StartTogether(NbGraderPreprocessor):
    sides = {sides!r}

    def preprocess(self, nb, resources):
        student = resources["nbgrader"]["student"]
        if resources["nbgrader"]["assignment"] == {assignment!r} and student in self.sides:
            folder = pathlib.Path({folder!r})
            mine, theirs = (folder / side for side in self.sides[student])
            arrived = len(list(mine.iterdir()))
            (mine / f"{{arrived:02d}}-{{student}}").touch()

            def waiting():
                gone = (folder / f"done-{{theirs.name}}").exists() or (folder / "gave-up").exists()
                return len(list(theirs.iterdir())) <= arrived and not gone

            deadline = time.monotonic() + 600  # a cap for a run that failed, never a measure of speed
            while waiting() and time.monotonic() < deadline:
                time.sleep(0.05)
            if len(list(theirs.iterdir())) <= arrived:
                (folder / "gave-up").touch()
                self.log.error("StartTogether: %s started alone, no submission %d in %s", student, arrived + 1, theirs)
        return nb, resources


c.Autograde.autograde_preprocessors = [StartTogether, *c.Autograde.autograde_preprocessors]
"""


def start_together(course, folder):
    """Add START_TOGETHER to ``course``'s configuration, its arrivals in ``folder``."""
    classmates, attacks = beside()
    sides = dict.fromkeys(classmates, ("classmates", "attacks")) | dict.fromkeys(attacks, ("attacks", "classmates"))
    for side in ("classmates", "attacks"):
        (folder / side).mkdir(parents=True)
    with open(course / "nbgrader_config.py", "a") as config:
        config.write(START_TOGETHER.format(sides=sides, folder=str(folder), assignment=ASSIGNMENT))


def grade_side(folder, side, *args, **options):
    """``grade_class(*args, **options)`` for one side of START_TOGETHER; "done-<side>" once it has ended."""
    from workbook.course.grade_class import grade_class

    try:
        return grade_class(*args, **options)
    finally:
        (folder / f"done-{side}").touch()


def paired(folder):
    """[(the honest classmate, the attack)] whose gradings started together, from the arrivals (None: none came)."""
    arrivals = [sorted((folder / side).iterdir()) for side in ("classmates", "attacks")]  # "{k:02d}-{student}"
    return [tuple(path and path.name.split("-", 1)[1] for path in pair) for pair in itertools.zip_longest(*arrivals)]


def kernel_span(notebook):
    """When the kernel ran the notebook (its own stamps): from the first cell's start to the last cell's end."""
    import datetime

    stamps = [
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        for cell in notebook.cells
        if cell.cell_type == "code"
        for key, value in cell.metadata.get("execution", {}).items()
        if key in ("iopub.status.busy", "shell.execute_reply")
    ]
    return min(stamps), max(stamps)


@pytest.fixture(scope="session")
def hub(tmp_path_factory, request):
    """The whole round trip; returns what the instructor sees at the end."""
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from nbgrader.api import Gradebook

    from workbook.course.grade_class import grade_class
    from workbook.course.sandbox import sandbox_problem

    if sandbox_problem():
        pytest.fail(sandbox_problem())
    base = tmp_path_factory.mktemp("hub")
    exchange, course = base / "exchange", base / "course"
    exchange.mkdir()
    exchange.chmod(0o777)
    course.mkdir()
    shutil.copy(ROOT / "course" / "nbgrader_config.py", course)
    shutil.copy(ROOT / "course" / ANSWER_KEY, course)
    shutil.copy(ROOT / "course" / "held_out_digits_05.npz", course)  # part (c)'s digits, beside the key
    (course / "broken_key.py").write_text("raise RuntimeError('the answer key cannot load its references')\n")
    with open(course / "nbgrader_config.py", "a") as config:
        config.write(
            f"\n# The tests' own: a shorter limit for ordinary cells, this exchange folder, a broken key.\n"
            f"c.Execute.timeout_func = lambda cell: {TEST_CELL_SECONDS} if cell_timeout(cell) == 120 "
            f"else cell_timeout(cell)\nc.Exchange.root = {str(exchange)!r}\n"
            f"c.GuardedExecute.answer_keys = {{**c.GuardedExecute.answer_keys, {BROKEN_KEY!r}: 'broken_key.py'}}\n"
        )
    instructor = clean_environment(base / "instructor")
    (base / "instructor").mkdir()

    source = reduced_notebook(NOTEBOOKS / NOTEBOOK)  # turned down, as the notebook tests run it
    for assignment in (ASSIGNMENT, *OTHER_ASSIGNMENTS):
        (course / "source" / assignment).mkdir(parents=True)
        nbformat.write(source, course / "source" / assignment / NOTEBOOK)
        with nbgraders_path():
            succeeded(instructor_api(course).generate_assignment(assignment, force=True))
            succeeded(instructor_api(course).release_assignment(assignment))
    source_bytes = (course / "source" / ASSIGNMENT / NOTEBOOK).read_bytes()
    workbook_bytes = (ROOT / "workbook" / "course" / "verdicts.py").read_bytes()
    solutions = {nbgrader_meta(c)["grade_id"]: c for c in source.cells if nbgrader_meta(c).get("solution")}
    escaper, marker = escaper_source(base, course)
    limits_missing = per_box_limits_missing()
    # Another course on the same machine, outside every temporary folder, with a full solution handed in.
    (ROOT / "build").mkdir(exist_ok=True)
    other_course = pathlib.Path(tempfile.mkdtemp(prefix="other-course-", dir=ROOT / "build"))
    request.addfinalizer(lambda: shutil.rmtree(other_course, ignore_errors=True))
    (other_course / "submitted" / "ann" / ASSIGNMENT).mkdir(parents=True)
    nbformat.write(source, other_course / "submitted" / "ann" / ASSIGNMENT / NOTEBOOK)
    placeholders = {
        "ESCAPER": escaper,
        "KEY_THIEF": KEY_THIEF.format(answer_key=str(course / ANSWER_KEY)),
        "SNOOPER": SNOOPER.format(
            other_course=str(other_course),
            submitted=str(course / "submitted"),
            boxes=tempfile.gettempdir(),
            hold=HOLD_SECONDS,
        ),
        "DISK_FILLER": DISK_FILLER.format(hold=HOLD_SECONDS),
        "FORKER": FORKER.format(hold=HOLD_SECONDS),
        # Without per-box limits (not root, or cgroup v2) these two would fill the grader's disk
        # and the machine's pids: then they hand in their honest work only.
        **(dict.fromkeys(("DISK_FILLER", "FORKER"), UNTRAINED) if limits_missing else {}),
        "INFLATER": INFLATER,
        "FEEDBACK_PROBER": answer_text(solutions["a_quantize_2bit"]) + FEEDBACK_PROBER,
        "RIGHT_ONLY_WHERE_CHECKED": answer_text(solutions["a_quantize_2bit"]) + RIGHT_ONLY_WHERE_CHECKED,
        "DEEP_JSON": answer_text(solutions["b_culprit_answer"]) + DEEP_JSON,
    }

    handing_in = [(ASSIGNMENT, student) for student in [*STUDENTS, NOT_A_NOTEBOOK, *MALFORMED, COLLECT_LINKER]]
    for assignment, student in [*handing_in, *OTHER_ASSIGNMENTS.items()]:
        home = base / "students" / student
        home.mkdir(parents=True, exist_ok=True)
        student_exchange("fetch", home, exchange, assignment, student)
        hand_in(home / assignment / NOTEBOOK, student, solutions, placeholders)
        # On a hub each student is a user of their own; here all are one, so each says who.
        student_exchange("submit", home, exchange, assignment, student)
    (inbound,) = (exchange / COURSE_ID / "inbound").glob(f"{COLLECT_LINKER}+{ASSIGNMENT}+*")
    (inbound / NOTEBOOK).unlink()
    (inbound / NOTEBOOK).symlink_to(course / "source" / ASSIGNMENT / NOTEBOOK)

    collected = instructor_collect(course, exchange, ASSIGNMENT)
    start_together(course, base / "arrivals")
    classmates, attacks = beside()
    rest = [student for student in [*STUDENTS, NOT_A_NOTEBOOK, *MALFORMED] if student not in [*classmates, *attacks]]
    options = dict(extra=["--force"], env=instructor, log=lambda _: None)
    started = time.perf_counter()
    graded = {}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # one nbgrader run each, side by side
        sides = [
            pool.submit(grade_side, base / "arrivals", side, course, ASSIGNMENT, students, workers=1, **options)
            for side, students in (("classmates", classmates), ("attacks", attacks))
        ]
        for side in sides:
            graded.update(side.result())
    graded.update(grade_class(course, ASSIGNMENT, rest, workers=2, **options))
    seconds = time.perf_counter() - started
    time.sleep(1)
    after = dict(processes=leftover_processes(marker), escaped=marker.exists())
    others = {}
    for assignment in OTHER_ASSIGNMENTS:
        instructor_collect(course, exchange, assignment)
        others[assignment] = grade_class(
            course, assignment, workers=1, extra=["--force"], env=instructor, log=lambda line: None
        )
    with nbgraders_path():
        feedback = instructor_api(course).generate_feedback(ASSIGNMENT, force=True)  # the broken file has none
        instructor_export(course)
    with open(course / "grades.csv", newline="") as file:
        every_row = {(row["assignment"], row["student_id"]): row for row in csv.DictReader(file)}
    rows = {student: row for (assignment, student), row in every_row.items() if assignment == ASSIGNMENT}
    scores, auto_scores = {}, {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for assignment, student in [(ASSIGNMENT, student) for student in STUDENTS] + list(OTHER_ASSIGNMENTS.items()):
            grades = {
                grade_id: gradebook.find_grade(grade_id, NOTEBOOK[:-6], assignment, student) for grade_id in POINTS
            }
            scores[assignment, student] = {grade_id: grade.score for grade_id, grade in grades.items()}
            auto_scores[assignment, student] = {grade_id: grade.auto_score for grade_id, grade in grades.items()}
    after.update(
        source_unchanged=(course / "source" / ASSIGNMENT / NOTEBOOK).read_bytes() == source_bytes,
        workbook_unchanged=(ROOT / "workbook" / "course" / "verdicts.py").read_bytes() == workbook_bytes,
        pth=os.path.exists(os.path.join(sysconfig.get_paths()["purelib"], "zz_workbook_attack.pth")),
    )
    return dict(
        course=course,
        collected=collected,
        pairs=paired(base / "arrivals"),
        limits_missing=limits_missing,
        graded=graded,
        others=others,
        feedback=feedback,
        rows=rows,
        every_row=every_row,
        scores=scores,
        auto_scores=auto_scores,
        seconds=seconds,
        after=after,
    )


def log_of(hub, student):
    return hub["graded"][student][2][-6000:]


@hub_test
@pytest.mark.parametrize("student", STUDENTS)
def test_each_submission_gets_the_points_of_its_honest_work(hub, student):
    expected = dict(STUDENTS[student][1])
    if expected["c_reconstruction"] == MEASURED_ON_UNSEEN:
        from workbook.lab import assignment_spec as spec

        run = hook_run(hub, student)  # its points: within the target, in the grader's time (the hook's training too)
        within = run["unseen_mse"] <= spec.TARGET_MSE and run["seconds"] <= spec.TIME_BUDGET_SECONDS
        expected["c_reconstruction"] = POINTS["c_reconstruction"] * within
    assert hub["scores"][ASSIGNMENT, student] == expected, log_of(hub, student)
    assert float(hub["rows"][student]["raw_score"]) == sum(expected.values())  # what `nbgrader export` hands on
    # nbgrader leaves the grades of deleted check cells to the instructor, and the export says so
    assert hub["rows"][student]["status"] == ("needs manual grading" if student == "deleted_checks" else "graded")


def unseen_digits():
    """The course folder's held-out digits, none of which the notebook's data cell hands out at its most."""
    import numpy as np

    from workbook.lab.assignment_data import load_assignment_digits

    with np.load(ROOT / "course" / "held_out_digits_05.npz", allow_pickle=False) as stored:
        unseen = stored["x"]
    (x_train, _), (x_test, _) = load_assignment_digits(8000, 1000)  # every training digit, the most test digits
    with pytest.raises(ValueError, match="at most 1,000 test digits"):
        load_assignment_digits(8000, 1001)
    handed_out = {np.round(image[..., 0] * 255).astype(np.uint8).tobytes() for image in [*x_train, *x_test]}
    assert not any(image.tobytes() in handed_out for image in unseen)
    return unseen[..., np.newaxis].astype("float32") / 255


def reconstruction_mse(weights, images):
    """The MSE of workbook.autoencoder with ``weights`` (flat float32) and the 2-bit levels written out here."""
    import keras
    import numpy as np

    import workbook

    model = workbook.autoencoder(bottleneck=lambda x: keras.ops.round(3.0 * keras.ops.clip(x, 0.0, 1.0)) / 3.0)
    shapes = [w.shape for w in model.get_weights()]
    sizes = np.cumsum([0, *(int(np.prod(shape)) for shape in shapes)])
    assert sizes[-1] == weights.size
    model.set_weights([weights[a:b].reshape(shape) for a, b, shape in zip(sizes[:-1], sizes[1:], shapes, strict=True)])
    reconstructions = np.asarray(model.predict(images, batch_size=250, verbose=0), dtype="float64")
    return float(np.mean((reconstructions - images) ** 2))


_hook_runs = {}


def hook_run(hub, student):
    """What TRAINS_ON_X_TEST_IN_A_HOOK printed in part (c)'s check, the verdict, and the weights measured here."""
    import datetime

    import numpy as np

    if student not in _hook_runs:
        cells = [c for c in autograded(hub, student).cells if c.cell_type == "code"]
        check = next(c for c in cells if nbgrader_meta(c).get("grade_id") == "c_reconstruction")
        text = "".join(o.get("text", "") + o.get("evalue", "") for o in check.outputs)
        weights = np.frombuffer(bytes.fromhex(re.search(r"weights: ([0-9a-f]+)", text).group(1)), "<f4")
        verdict = re.search(r"(?:✓|✗) measured by the grader: .*", text).group(0)
        times = [
            datetime.datetime.fromisoformat(c.metadata.execution[key].replace("Z", "+00:00"))
            for c, key in ((cells[0], "iopub.status.busy"), (check, "shell.execute_reply"))
        ]
        _hook_runs[student] = dict(
            hook_seconds=float(re.search(r"hook trained for ([0-9.]+) s", text).group(1)),
            verdict=verdict,
            seconds=int(re.search(r"in (\d+) s \(budget", verdict).group(1)),
            span=(times[1] - times[0]).total_seconds(),  # the kernel's own stamps: first cell to the check's end
            unseen_mse=reconstruction_mse(weights, unseen_digits()),
        )
    return _hook_runs[student]


@hub_test
def test_part_c_trained_on_x_test_in_a_hook_is_measured_on_unseen_digits_and_timed_with_the_hook(hub):
    run = hook_run(hub, "half_right")
    # measured on the digits it never had, with the weights it had when the check ended (not those written at exit)
    assert f"MSE {run['unseen_mse']:.5f} on 1,000 held-out test digits" in run["verdict"], run
    # the grader's clock ran through the hook: from the notebook's first cell to the end of the check
    assert run["seconds"] >= run["hook_seconds"] and run["seconds"] >= run["span"] - 1.5, run


@hub_test
def test_a_file_that_is_not_a_notebook_is_marked_not_graded_and_the_rest_are_graded(hub):
    assert hub["graded"][NOT_A_NOTEBOOK][0] != 0  # nbgrader reports the failure...
    assert "There was an error processing assignment" in hub["graded"][NOT_A_NOTEBOOK][2]
    assert all(hub["graded"][student][0] == 0 for student in STUDENTS), {s: log_of(hub, s) for s in STUDENTS}
    assert hub["rows"][NOT_A_NOTEBOOK]["status"].startswith("not graded")  # ...and the export says so
    assert all(
        (hub["course"] / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").exists() for student in STUDENTS
    )


def autograded(hub, student, assignment=ASSIGNMENT):
    return nbformat.read(hub["course"] / "autograded" / student / assignment / NOTEBOOK, as_version=4)


def autograded_errors(hub, student, assignment=ASSIGNMENT):
    """{grade_id: names of the errors in that cell} of a student's autograded notebook."""
    return {
        nbgrader_meta(c).get("grade_id"): [o.ename for o in c.get("outputs", []) if o.output_type == "error"]
        for c in autograded(hub, student, assignment).cells
        if c.cell_type == "code"
    }


@hub_test
def test_the_key_thief_searched_everywhere_and_found_no_answer(hub):
    answer_cell = next(
        c for c in autograded(hub, "key_thief").cells if nbgrader_meta(c).get("grade_id") == "a_quantize_2bit"
    )
    assert [o.ename for o in answer_cell.outputs if o.output_type == "error"] == []  # it ran to its end...
    printed = "".join(o.get("text", "") for o in answer_cell.outputs)
    assert "no answer key: FileNotFoundError" in printed  # ...and the course folder was hidden from it


@hub_test
def test_an_assignment_without_its_verdict_spec_is_refused_not_graded_by_its_own_checks(hub):
    # The forger's notebook, whose rebound checks all pass in the kernel, handed in as "hw5".
    code, _, log = hub["others"][UNCOVERED]["forger"]
    assert code != 0 and "has no verdict spec" in log, log[-3000:]
    assert "c.GuardedExecute.answer_keys" in log  # and what to do about it
    assert hub["every_row"][UNCOVERED, "forger"]["status"].startswith("not graded")
    assert float(hub["every_row"][UNCOVERED, "forger"]["raw_score"]) == 0
    assert not (hub["course"] / "autograded" / "forger" / UNCOVERED).exists()


@hub_test
def test_a_verdict_the_grader_cannot_take_is_left_for_manual_grading_not_a_zero(hub):
    # The reference solution, judged by an answer key that fails to load.
    code, _, log = hub["others"][BROKEN_KEY]["reference"]
    assert code == 0, log[-3000:]
    assert "needs manual grading" in log  # the instructor's log says so
    assert hub["auto_scores"][BROKEN_KEY, "reference"] == dict.fromkeys(POINTS, None)  # no score, not 0
    assert hub["every_row"][BROKEN_KEY, "reference"]["status"] == "needs manual grading"
    errors = autograded_errors(hub, "reference", BROKEN_KEY)
    assert all(errors[grade_id] == ["NeedsManualGrading"] for grade_id in POINTS), errors


@hub_test
def test_the_endless_loop_and_the_dead_kernel_each_cost_their_own_cell(hub):
    errors = autograded_errors(hub, "loop_and_kill")
    assert "CellTimeoutError" in errors["b_culprit_answer"]
    assert "DeadKernelError" in errors["c_train_answer"]
    assert errors["b_fix"] == [] and errors["a_gradient"] == []  # graded after the loop, before the kill


def printed(hub, student, grade_id):
    """What a student's cell printed while it was graded."""
    cells = autograded(hub, student).cells
    return "".join(o.get("text", "") for c in cells if nbgrader_meta(c).get("grade_id") == grade_id for o in c.outputs)


def reported(hub, student, grade_id, label):
    """The JSON an attack printed after ``label:`` in that cell."""
    return json.loads(re.search(rf"{label}: (\{{.*\}})", printed(hub, student, grade_id)).group(1))


@hub_test
def test_every_attack_on_its_neighbours_ran_while_an_honest_classmate_was_graded(hub):
    windows = {student: kernel_span(autograded(hub, student)) for student in BESIDE_A_CLASSMATE}
    for student, grade_id, label in HOLDING:
        if not hub["limits_missing"]:
            windows[student] = reported(hub, student, grade_id, label)["window"]  # while it held what it took
    alone = {student: log[-3000:] for student, (_, _, log) in hub["graded"].items() if "StartTogether:" in log}
    assert not alone, alone
    assert hub["pairs"], "no submission of either side reached the step that starts them together"
    classmates, attacks = (sorted(side, key=str) for side in zip(*hub["pairs"], strict=True))
    assert classmates == beside()[0] and attacks == sorted(BESIDE_A_CLASSMATE), hub["pairs"]  # each with a classmate
    pairs = {attack: classmate for classmate, attack in hub["pairs"]}
    for student, (start, end) in windows.items():
        classmate = pairs[student]
        first, last = kernel_span(autograded(hub, classmate))
        assert first < end and start < last, (student, (start, end), classmate, (first, last))
    # and each of those classmates kept every point (test_each_submission_gets_the_points_of_its_honest_work)


@hub_test
def test_no_other_submission_course_or_kernel_was_within_the_snoopers_reach(hub):
    found = reported(hub, "snooper", "a_quantize_2bit", "snooped")["found"]
    assert found == {}, found  # not another course's notebook, not a classmate's box, recording or kernel


@hub_test
def test_a_full_disk_and_a_flood_stop_at_their_own_box(hub):
    from workbook.course.sandbox import MAX_DISK_BYTES, MAX_TASKS, TMPFS_BYTES

    if hub["limits_missing"]:  # then the two were handed in without their attacks, and the grader's log says why
        assert all("bounded only by" in hub["graded"][student][2] for student, _, _ in HOLDING)
        pytest.skip(f"this machine gives the grader no per-box limits: {hub['limits_missing']}")
    written = reported(hub, "disk_filler", "c_train_answer", "filled")["written"]
    box = sum(size for place, size in written.items() if place not in TMPFS_BYTES)  # its working folder and home
    assert box <= MAX_DISK_BYTES, written
    assert all(written[place] <= TMPFS_BYTES[place] for place in TMPFS_BYTES if place in written), written
    assert box >= MAX_DISK_BYTES - 16 * 2**20, written  # it filled the box: the quota, not something else, stopped it
    flood = reported(hub, "forker", "c_train_answer", "flooded")
    assert flood["stopped"] is not None and flood["children"] < MAX_TASKS, flood


@hub_test
def test_a_recording_that_would_inflate_or_nests_too_deep_fails_only_its_own_part(hub):
    errors = {
        student: {
            nbgrader_meta(c).get("grade_id"): " ".join(o.evalue for o in c.outputs if o.output_type == "error")
            for c in autograded(hub, student).cells
            if c.cell_type == "code"
        }
        for student in ("inflater", "deep_json")
    }
    # refused from the archive's directory, before a byte is inflated (its header's (-1,) would read it all)
    assert re.search(
        r"c_reconstruction.npz holds an array of 1,610,6[\d,]+ bytes", errors["inflater"]["c_reconstruction"]
    )
    assert "b_culprit.json is nested too deep" in errors["deep_json"]["b_culprit"], errors["deep_json"]
    # the other parts got their points (test_each_submission_gets_the_points_of_its_honest_work)


@hub_test
def test_a_malformed_notebook_fails_alone_with_its_reason_and_the_rest_of_the_class_is_graded(hub):
    for student in MALFORMED:
        code, _, log = hub["graded"][student]
        assert code != 0 and "needs manual grading: " in log, log[-3000:]
        assert hub["rows"][student]["status"].startswith("not graded"), hub["rows"][student]
    assert "same grade_id 'a_quantize_2bit'" in hub["graded"]["bad_metadata_copied_cell"][2]
    assert "Schema version is too new: 99" in hub["graded"]["bad_metadata_from_the_future"][2]
    # graded in the same runs after them, every other student kept their grade
    assert all(hub["graded"][student][0] == 0 for student in STUDENTS), {s: log_of(hub, s) for s in STUDENTS}


@hub_test
def test_collect_takes_no_link_a_student_left_in_the_exchange(hub):
    linked = f"{COLLECT_LINKER}+{ASSIGNMENT}+"
    assert re.search(rf"Not collected: .*{re.escape(linked)}.*/{NOTEBOOK} \(a link\)", hub["collected"])
    collected = hub["course"] / "submitted" / COLLECT_LINKER / ASSIGNMENT
    assert "timestamp.txt" in os.listdir(collected) and NOTEBOOK not in os.listdir(collected)  # nothing of the source
    # every other student's notebook was collected as handed in, and graded (above)
    assert all((hub["course"] / "submitted" / s / ASSIGNMENT / NOTEBOOK).is_file() for s in STUDENTS)


@hub_test
def test_the_kernel_can_move_no_folder_the_grader_reads_and_no_link_it_plants_is_followed(hub):
    planted = reported(hub, "link_planter", "c_train_answer", "planted")
    # the box's top is not the kernel's: its working folder stays where the grader holds it
    assert planted["rename work"] != "done" and planted["link in the top"] != "done", planted
    assert planted["recordings linked"] == "done", planted  # inside its folder it may, and the grader ignores it
    check = next(
        c for c in autograded(hub, "link_planter").cells if nbgrader_meta(c).get("grade_id") == "c_reconstruction"
    )
    verdict = next(o.evalue for o in check.outputs if o.output_type == "error")
    assert verdict == "✗ part (c): the hidden test did not record the model.", verdict  # none where the grader looks
    # and its other parts got their points (test_each_submission_gets_the_points_of_its_honest_work)


@hub_test
def test_the_sandbox_held_nothing_outside_it_changed_and_nothing_it_started_survived(hub):
    printed_text = printed(hub, "escaper", "c_train_answer")
    attempts = eval(re.search(r"attempts: (\{.*\})", printed_text).group(1))
    assert set(attempts) == {"gradebook", "site-packages", "source", "classmate", "workbook", "shadow"}
    assert "done" not in attempts.values(), attempts
    assert hub["after"] == dict(
        processes=[], escaped=False, source_unchanged=True, workbook_unchanged=True, pth=False
    ), hub["after"]


@hub_test
def test_the_verdict_says_why_without_giving_the_answer_and_feedback_hides_the_hidden_tests(hub):
    errors = {
        nbgrader_meta(c).get("grade_id"): [o.evalue for o in c.get("outputs", []) if o.output_type == "error"]
        for c in autograded(hub, "half_right").cells
    }
    assert any("is not the op that cuts" in message for message in errors["b_culprit"]), errors
    feedback = (hub["course"] / "feedback" / "reference" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "record_function" not in feedback and "HIDDEN TESTS" not in feedback
    assert "checked by the grader" in feedback  # the verdict itself is shown
    half_right = (hub["course"] / "feedback" / "half_right" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "record_answers" not in half_right and "is not the op that cuts" in half_right
    # a traceback through a hidden line (the untouched release has no model), a hook that printed every cell
    for student in ("untouched", "feedback_prober"):
        autograded_text = json.dumps(nbformat.writes(autograded(hub, student)))
        assert "record_model" in autograded_text, student  # the instructor's own copy shows it...
        feedback = (hub["course"] / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
        words = ("record_model", "record_function", "judge_here", "HIDDEN TESTS")[
            : 3 if student == "feedback_prober" else 4
        ]
        assert [word for word in words if word in feedback] == [], student  # ...the student's feedback does not
    # (the prober wrote the marker into its own answer: shown as written, and its feedback was made)
    # the student's own HTML is shown as text: nothing of it runs in the reader's browser
    prober = (hub["course"] / "feedback" / "feedback_prober" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt;" in prober and "&lt;script&gt;alert(4)" in prober
    assert not re.search(r"<img[^>]*onerror|<script>alert", prober)


@hub_test
def test_every_box_ends_with_its_kernel_none_waits_to_be_killed(hub):
    # nbclient leaves running a kernel whose manager it was given: the grader ends it, so that no
    # box waits 10 s for its processes and then kills them (the forker's and the escaper's included)
    problem = control_groups_missing()
    if problem:
        pytest.skip(f"without a box's own control groups nothing waits for its processes: {problem}")
    logs = {student: hub["graded"][student][2] for student in STUDENTS}
    assert all("The box held at most" in log for log in logs.values())  # each box was measured and removed
    waited = {student: log[-2000:] for student, log in logs.items() if "into the box's removal: killed" in log}
    assert not waited, waited


@hub_test
def test_output_is_capped_in_bytes_and_the_checksum_warnings_name_only_edited_checks(hub):
    sizes = [
        (hub["course"] / "feedback" / "huge_output" / ASSIGNMENT / f"{ASSIGNMENT}.html").stat().st_size,
        (hub["course"] / "autograded" / "huge_output" / ASSIGNMENT / NOTEBOOK).stat().st_size,
    ]
    assert max(sizes) < 2_000_000, sizes
    assert "output dropped" in "".join(
        o.get("text", "") for c in autograded(hub, "huge_output").cells for o in c.get("outputs", [])
    )
    changed = {s: re.findall(r"Attribute 'checksum' for cell (\w+) has changed", log_of(hub, s)) for s in STUDENTS}
    assert changed["reference"] == changed["untouched"] == []
    assert sorted(changed["half_right"]) == ["b_fix", "colleague", "parameters"]  # what that student wrote over


def test_display_updates_count_against_the_cell_running_when_they_arrive():
    """nbclient writes a display update into earlier outputs, outside ``output``: it is capped all the same."""
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from workbook.course.autograde import GuardedExecute

    executor = GuardedExecute(max_output_bytes=100_000)
    executor.nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(str(i)) for i in range(3)])
    executor.reset_execution_trackers()
    executor._output_bytes, executor.clear_before_next_output = {}, False  # as preprocess and a cell set them

    def message(kind, text):
        content = {"data": {"text/plain": text}, "metadata": {}, "transient": {"display_id": "flood"}}
        return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": {}, "content": content}

    first = executor.nb.cells[0]
    executor.process_message(message("display_data", "small"), first, 0)
    for cell_index in (1, 2):  # updates from a thread while the next cells run, and the same id shown again
        cell = executor.nb.cells[cell_index]
        executor.process_message(message("update_display_data", "u" * 10_000), cell, cell_index)
        executor.process_message(message("update_display_data", "U" * 5_000_000), cell, cell_index)
        executor.process_message(message("display_data", "D" * 5_000_000), cell, cell_index)
    size = len(nbformat.writes(executor.nb))
    assert size < 100_000, size  # without the cap, every output with that id held 5 MB
    assert first.outputs[0]["data"]["text/plain"] == "u" * 10_000  # an update within the cap still arrives
    assert all("output dropped" in "".join(o.get("text", "") for o in c.outputs) for c in executor.nb.cells[1:])


def test_widget_state_counts_against_the_cell_that_sent_it():
    """A widget's state goes into the graded notebook's metadata, outside any output: it is capped all the same."""
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from workbook.course.autograde import GuardedExecute

    executor = GuardedExecute(max_output_bytes=100_000)
    executor.nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("0")])
    executor.reset_execution_trackers()
    executor._output_bytes, executor.clear_before_next_output = {}, False  # as preprocess and a cell set them
    cell = executor.nb.cells[0]
    for number in range(20):
        state = {"_model_module": "@jupyter-widgets/controls", "_model_name": "TextModel", "value": "w" * 5_000_000}
        data = {"state": state, "buffer_paths": []}
        content = {"comm_id": f"widget-{number}", "target_name": "jupyter.widget", "data": data}
        message = {"msg_type": "comm_open", "header": {"msg_type": "comm_open"}, "parent_header": {}}
        executor.process_message({**message, "content": content, "buffers": []}, cell, 0)
    executor.set_widgets_metadata()
    size = len(nbformat.writes(executor.nb))
    assert size < 200_000, size  # without the cap, 100 MB of state in the notebook's metadata
    assert "output dropped" in "".join(o.get("text", "") for o in cell.outputs)


def test_cell_limits_budget_and_target_are_the_ones_the_assignment_promises():
    from workbook.course.grading import cell_timeout
    from workbook.lab import assignment_spec as spec

    notebook = nbformat.read(NOTEBOOKS / NOTEBOOK, as_version=4)
    # What the title cell promises students, in its own words: 300 s for part (c), 2 minutes a cell.
    title = " ".join(notebook.cells[0].source.split())
    assert "at most 2 minutes (part (c)'s training cell and its check: the 300 s budget and a minute more)" in title
    limits = [(nbgrader_meta(c).get("grade_id"), cell_timeout(c)) for c in notebook.cells if c.cell_type == "code"]
    part_c = {"c_train_answer": 360, "c_reconstruction": 360}  # 300 s and a minute more
    assert {grade_id: limit for grade_id, limit in limits if grade_id in part_c} == part_c
    assert {limit for grade_id, limit in limits if grade_id not in part_c} == {120}  # every other cell
    parameters = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    assert re.search(r"^time_budget_seconds = 300 ", parameters.source, re.M)
    # the check cell grades with literal numbers, the same as the grader's
    check = next(c for c in notebook.cells if nbgrader_meta(c).get("grade_id") == "c_reconstruction")
    assert "time_budget_seconds=300," in check.source and "target_mse=0.006," in check.source
    assert (spec.TIME_BUDGET_SECONDS, spec.TARGET_MSE) == (300, 0.006)
    # the graded cells and their points, as the notebook's metadata gives them
    graded = {
        nbgrader_meta(c)["grade_id"]: nbgrader_meta(c)["points"]
        for c in notebook.cells
        if nbgrader_meta(c).get("grade")
    }
    assert dict(spec.POINTS) == graded == POINTS


# --- the pieces, without nbgrader ------------------------------------------------------


def test_verdicts_pass_the_reference_and_fail_what_differs(tmp_path, monkeypatch):
    # Recorded in this process, judged as the grader judges (python -I, a clean environment):
    # the references come from the formulas written out here, not from the verdict module.
    import keras

    import workbook
    from workbook.course import grading

    monkeypatch.chdir(tmp_path)
    grading.write_probe(grading.PROBE_FILE)

    def forward(x):
        return keras.ops.round(3.0 * keras.ops.clip(x, 0.0, 1.0)) / 3.0

    clipped = workbook.surrogate(forward, lambda x: keras.ops.cast((x >= 0.0) & (x <= 1.0), x.dtype))
    grading.record_function("a_forward", workbook.straight_through(forward))  # right values, wrong gradient
    grading.record_function("a_gradient", workbook.straight_through(forward))
    grading.record_function("b_fix", clipped)
    grading.record_answers("b_culprit", culprit_op=" cast ", culprit_variable="codes")
    grading.record_model("c_reconstruction", workbook.autoencoder(bottleneck=clipped))  # untrained
    key = ROOT / "course" / ANSWER_KEY
    verdicts = grading.run_verdicts(key, tmp_path / grading.PROBE_FILE, tmp_path / grading.ARTIFACTS_FOLDER, 10.0)
    passed = {grade_id: verdict[0] for grade_id, verdict in verdicts.items()}
    assert passed == {
        "a_forward": True,
        "a_gradient": False,
        "b_culprit": True,
        "b_fix": True,
        "c_reconstruction": False,
    }
    assert "MSE 0.2" in verdicts["c_reconstruction"][1]  # an untrained model: about 0.23
    # right only where the notebook's checks look (float32, in [-1, 2]): wrong in general, and so judged
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    grading.write_probe(grading.PROBE_FILE)

    def where_probed(x):
        if keras.backend.standardize_dtype(x.dtype) != "float32":
            return x
        return keras.ops.where((x >= -1.0) & (x <= 2.0), clipped(x), x)

    for grade_id in ("a_forward", "a_gradient"):
        grading.record_function(grade_id, where_probed)
    probe, artifacts = elsewhere / grading.PROBE_FILE, elsewhere / grading.ARTIFACTS_FOLDER
    verdicts = grading.run_verdicts(key, probe, artifacts, 10.0, ["a_forward", "a_gradient"])
    assert [verdict[0] for verdict in verdicts.values()] == [False, False], verdicts


def test_part_c_is_measured_on_the_digits_the_notebook_never_hands_out(tmp_path, monkeypatch):
    import numpy as np

    from workbook.course import verdicts
    from workbook.lab.assignment_data import load_assignment_digits

    probe, artifacts = record_formula_answers(tmp_path, monkeypatch)  # (c): an untrained model
    unseen = unseen_digits()
    assert len(unseen) == 1000
    with np.load(artifacts / "c_reconstruction.npz") as stored:
        weights = np.concatenate([stored[f"weight_{i}"].ravel() for i in range(len(stored.files))])
    (_, _), (x_test, _) = load_assignment_digits(8000, 1000)
    mse = reconstruction_mse(weights, unseen)
    assert f"{mse:.5f}" != f"{reconstruction_mse(weights, x_test):.5f}"  # the two sets tell apart
    found = verdicts.judge(probe, artifacts, answer_key(), 10.0, ["c_reconstruction"])
    assert f"MSE {mse:.5f} on 1,000 held-out test digits" in found["c_reconstruction"][1], found


def test_verdicts_read_recordings_as_data_only(tmp_path):
    import numpy as np

    from workbook.course import grading, verdicts

    grading.write_probe(tmp_path / grading.PROBE_FILE)
    folder = tmp_path / "records"
    folder.mkdir()
    np.save(folder / "pickled.npy", np.array([object()], dtype=object), allow_pickle=True)
    (folder / "pickled.npy").rename(folder / "a_forward.npz")
    (folder / "a_gradient.npz").symlink_to("/etc/passwd")
    (folder / "b_fix.npz").write_bytes(b"\0" * (verdicts.MAX_ARTIFACT_BYTES + 1))
    (folder / "b_culprit.json").write_text('{"culprit_op": ["Cast"]}')
    found = verdicts.judge(
        tmp_path / grading.PROBE_FILE, folder, answer_key(), grade_ids=("a_forward", "a_gradient", "b_fix", "b_culprit")
    )
    assert {grade_id: passed for grade_id, (passed, _) in found.items()} == dict.fromkeys(found, False)
    assert "not an array file" in found["a_forward"][1] and "cannot be opened" in found["a_gradient"][1]
    assert "at most" in found["b_fix"][1] and "does not hold strings" in found["b_culprit"][1]


def answer_key(path=ROOT / "course" / ANSWER_KEY):
    """The course folder's answer key, loaded as the instructor's run of the notebook loads it."""
    import importlib.util

    loader = importlib.util.spec_from_file_location("answer_key_under_test", path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module.KEY


def record_formula_answers(folder, monkeypatch):
    """Record in ``folder``, on a probe of its own, the answers written out here: (a) and (b) right, (c) untrained."""
    import keras

    import workbook
    from workbook.course import grading

    monkeypatch.chdir(folder)
    grading.write_probe(grading.PROBE_FILE)

    def forward(x):
        return keras.ops.round(3.0 * keras.ops.clip(x, 0.0, 1.0)) / 3.0

    clipped = workbook.surrogate(forward, lambda x: keras.ops.cast((x >= 0.0) & (x <= 1.0), x.dtype))
    for grade_id in ("a_forward", "a_gradient", "b_fix"):
        grading.record_function(grade_id, clipped)
    grading.record_answers("b_culprit", culprit_op="Cast", culprit_variable="codes")
    grading.record_model("c_reconstruction", workbook.autoencoder(bottleneck=clipped))
    return folder / grading.PROBE_FILE, folder / grading.ARTIFACTS_FOLDER


def zip_bomb(path, name="x_value", values=64 * 2**20):
    """An .npz whose one float32 array declares ``values`` zeros: a few hundred kB, 4 bytes a value inflated."""
    import zipfile

    import numpy as np

    header = {"descr": "<f4", "fortran_order": False, "shape": (values,)}
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open(f"{name}.npy", "w", force_zip64=True) as member,
    ):
        np.lib.format.write_array_header_1_0(member, header)
        chunk = bytes(2**22)
        for _ in range(values * 4 // len(chunk)):
            member.write(chunk)


def test_a_recording_that_would_inflate_is_refused_before_its_values_are_read(tmp_path):
    import tracemalloc

    from workbook.course import verdicts

    zip_bomb(tmp_path / "a_forward.npz")  # 256 MB once inflated
    assert (tmp_path / "a_forward.npz").stat().st_size < verdicts.MAX_ARTIFACT_BYTES
    tracemalloc.start()
    try:
        with pytest.raises(verdicts.Unreadable, match="an array of 268,435,5[0-9,]+ bytes"):
            verdicts._recorded(tmp_path, "a_forward")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak  # the file's bytes and a header, never the 256 MB


def test_a_recording_whose_shape_is_not_positive_is_refused_before_it_is_read(tmp_path):
    import io
    import zipfile

    import numpy as np

    from workbook.course import verdicts

    for shape in ((-1,), (0, 3), (-2, -2)):
        packed = io.BytesIO()
        with zipfile.ZipFile(packed, "w") as archive, archive.open("x_value.npy", "w") as member:
            np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": shape})
            member.write(bytes(4000))
        (tmp_path / "a_forward.npz").write_bytes(packed.getvalue())
        with pytest.raises(verdicts.Unreadable, match="every length must be positive"):
            verdicts._recorded(tmp_path, "a_forward")


@pytest.mark.timeout(600)
def test_each_verdict_stands_alone_a_malformed_record_fails_only_its_own_part(tmp_path, monkeypatch):
    from workbook.course import grading

    probe, artifacts = record_formula_answers(tmp_path, monkeypatch)
    zip_bomb(artifacts / "a_gradient.npz")
    (artifacts / "b_culprit.json").write_text("[" * 100_000 + "]" * 100_000)  # nested 100,000 levels deep
    verdicts = grading.run_verdicts(ROOT / "course" / ANSWER_KEY, probe, artifacts, 10.0)
    passed = {grade_id: verdict[0] for grade_id, verdict in verdicts.items()}
    assert passed == {
        "a_forward": True,
        "a_gradient": False,
        "b_culprit": False,
        "b_fix": True,
        "c_reconstruction": False,  # untrained
    }, verdicts
    assert re.search("an array of 268,435,5[0-9,]+ bytes", verdicts["a_gradient"][1]), verdicts
    assert "nested too deep" in verdicts["b_culprit"][1]
    # the verdict process has a memory limit of its own, whatever a recording holds
    (process,) = grading._VERDICT_PROCESSES.values()
    with open(f"/proc/{process.process.pid}/limits") as limits:
        data = next(line for line in limits if line.startswith("Max data size")).split()
    assert data[3:5] == [str(grading.MAX_VERDICT_DATA_BYTES)] * 2, data


@pytest.mark.slow
def test_one_verdict_process_judges_each_submission_as_a_process_of_its_own_would(tmp_path, monkeypatch):
    # The grader's process judges submission after another; the answer key run once per
    # submission (python -I KEY PROBE ARTIFACTS, nothing judged before it) is the reference.
    from workbook.course import grading

    submissions = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        submissions.append(record_formula_answers(tmp_path / name, monkeypatch))
    (submissions[1][1] / "a_gradient.npz").write_text("not an array file")  # the second fails (a)'s gradient
    key = str(ROOT / "course" / ANSWER_KEY)
    alone = []
    for probe, artifacts in submissions:
        command = [sys.executable, "-I", key, str(probe), str(artifacts), "--training-seconds", "10"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        alone.append({grade_id: tuple(verdict) for grade_id, verdict in json.loads(result.stdout).items()})
    assert alone[0] != alone[1]
    in_turn = [grading.run_verdicts(key, *submissions[index % 2], 10.0) for index in range(3)]
    assert in_turn == [alone[0], alone[1], alone[0]]
    process = grading._VERDICT_PROCESSES[key].process
    process.stdin.close()  # as when the grader ends, however it ends: the process ends by itself
    assert process.wait(timeout=120) == 0
    grading._end_verdict_processes()


def test_grade_class_refuses_no_workers_and_a_student_without_a_submission_by_name(tmp_path):
    from workbook.course.grade_class import grade_class

    (tmp_path / "submitted" / "ann" / ASSIGNMENT).mkdir(parents=True)
    with pytest.raises(ValueError, match=r"workers=0 .*whole number of at least 1"):
        grade_class(tmp_path, ASSIGNMENT, workers=0)
    with pytest.raises(ValueError, match=r"students=\['bob'\] .*students with a submission in"):
        grade_class(tmp_path, ASSIGNMENT, ["ann", "bob"])


def test_a_part_the_grader_cannot_judge_is_left_for_manual_grading_not_failed(tmp_path, monkeypatch):
    from workbook.course import verdicts

    probe, artifacts = record_formula_answers(tmp_path, monkeypatch)
    (artifacts / "a_gradient.npz").write_text("not an array file")  # the student's: that part fails

    def quantizer(x):
        raise RuntimeError("the grader's references cannot be computed")

    found = verdicts.judge(probe, artifacts, verdicts.AnswerKey(quantizer, ("cast", "codes")), training_seconds=10.0)
    passed = {grade_id: verdict[0] for grade_id, verdict in found.items()}
    assert passed == {
        "a_forward": None,
        "a_gradient": False,
        "b_culprit": True,
        "b_fix": None,
        "c_reconstruction": None,
    }
    assert all("needs manual grading" in found[grade_id][1] for grade_id in ("a_forward", "b_fix", "c_reconstruction"))
    assert "not an array file" in found["a_gradient"][1]


def test_the_instructors_own_run_finds_the_answer_key_from_the_notebooks_folder(tmp_path, monkeypatch):
    import keras

    import workbook
    from workbook.course import grading

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setattr(grading, "_here", {})  # a probe of this test's own, in a temporary folder
    monkeypatch.chdir(NOTEBOOKS)  # where the kernel of the instructor's notebook runs
    quantizer = workbook.surrogate(
        lambda x: keras.ops.round(3.0 * keras.ops.clip(x, 0.0, 1.0)) / 3.0,
        lambda x: keras.ops.cast((x >= 0.0) & (x <= 1.0), x.dtype),
    )
    grading.record_function("a_gradient", quantizer)
    grading.judge_here("a_gradient")  # passes
    grading.record_answers("b_culprit", culprit_op="Round", culprit_variable="levels")
    with pytest.raises(AssertionError, match="is not the op that cuts"):
        grading.judge_here("b_culprit")
    assert not list(NOTEBOOKS.glob("grading_*"))  # nothing written beside the notebooks
    # From course/source/<assignment>/, where `make assignments` links the notebook, too.
    source = tmp_path / "course" / "source" / "05"
    source.mkdir(parents=True)
    shutil.copy(ROOT / "course" / ANSWER_KEY, tmp_path / "course")
    assert grading.find_answer_key(source) == str(tmp_path / "course" / ANSWER_KEY)
    # Without a course folder above, it says where the key is looked for.
    monkeypatch.chdir(source.parent)
    (tmp_path / "course" / ANSWER_KEY).unlink()
    with pytest.raises(FileNotFoundError, match=f"course/{ANSWER_KEY} is not in the course folder"):
        grading.judge_here("a_gradient")


def run_sandboxed(tmp_path, script, hidden=()):
    from workbook.course.sandbox import Box, sandbox_command, sandbox_problem

    if sandbox_problem():
        pytest.skip(sandbox_problem())
    box = Box()
    try:
        command = sandbox_command(box, [sys.executable, "-c", script], hidden)
        command[command.index("sh") + 2] = 'exec "$@"'  # keep its output, for the test
        return subprocess.run(command, capture_output=True, text=True, timeout=120)
    finally:
        box.remove()


FLOOD_AND_HOG = """import subprocess, sys
children = []
try:
    for _ in range(1000):  # at most 1,000: without a limit, the machine's pids are all it takes
        children.append(subprocess.Popen(["sleep", "30"]))
    print("started all", len(children), flush=True)
except OSError as error:
    print("stopped at", len(children), type(error).__name__, flush=True)
sys.stdin.readline()  # the sleepers hold the box's tasks while the classmate starts
hog = [bytearray(16 * 2**20) for _ in range(40)]
print("held", 16 * len(hog), "MB", flush=True)
"""


def control_groups_missing():
    """Why this machine gives a box no control groups of its own (None if it does)."""
    from workbook.course.sandbox import Box

    box = Box()
    try:
        return box.limit()
    finally:
        box.remove()


@pytest.mark.slow
def test_a_process_that_outlasts_its_box_is_killed_and_counted():
    from workbook.course.sandbox import GRACE_SECONDS, Box

    for bad in (-1, math.nan, 10**400, "10"):
        with pytest.raises(ValueError, match="Box: grace_seconds="):
            Box(grace_seconds=bad)
    box = Box(grace_seconds=1)  # the grader's boxes wait 10 s (GRACE_SECONDS): the same kill, sooner
    problem = box.limit()
    if problem:
        box.remove()
        pytest.skip(problem)
    join = 'for group; do echo $$ > "$group/cgroup.procs"; done; exec sleep 600'
    lasting = subprocess.Popen(["sh", "-c", join, "sh", *map(str, box.cgroups)])
    try:
        deadline = time.monotonic() + 60
        while any(str(lasting.pid) not in (group / "cgroup.procs").read_text().split() for group in box.cgroups):
            assert time.monotonic() < deadline, "the process did not join the box's groups within 60 s"
            time.sleep(0.1)
        asked = time.monotonic()
        assert box.remove() is None
        assert 1 <= time.monotonic() - asked < GRACE_SECONDS  # given its own grace first, not the default
        assert box.killed == 1
        assert lasting.wait(timeout=60) == -signal.SIGKILL
    finally:
        lasting.kill()
        lasting.wait()


def test_a_kernel_that_cannot_be_ended_is_logged_and_left_to_the_box(caplog):
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from workbook.course.autograde import GuardedExecute

    class Unending:
        async def is_alive(self):
            return True

        async def shutdown_kernel(self, now=False):
            raise OSError("the kernel's process cannot be signalled")

        async def cleanup_resources(self):
            pass

    grader, manager = GuardedExecute(), Unending()
    grader.kc = None
    with caplog.at_level("WARNING"):
        grader._end_kernel(manager)  # no exception: the submission's grading goes on
    assert "cannot be signalled" in caplog.text and "the box's removal ends it" in caplog.text


def test_a_flood_and_a_hog_stay_in_their_box_and_the_classmate_still_starts_a_thread():
    from workbook.course.sandbox import Box, sandbox_command, sandbox_problem

    if sandbox_problem():
        pytest.skip(sandbox_problem())
    flooding, classmate = Box(), Box()
    try:
        why = flooding.limit(tasks=64, memory_bytes=256 * 2**20)
        if why:
            pytest.skip(f"this machine gives the grader no per-box limits: {why}")
        assert classmate.limit() is None
        # each group below the grader's own in its hierarchy, so within every limit the grader runs under
        own = {
            controllers: path.strip("/")
            for _, controllers, path in (
                line.split(":", 2) for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines()
            )
        }
        for group in flooding.cgroups:
            controller = group.parent.relative_to("/sys/fs/cgroup").parts[0]
            mine = next(path for names, path in own.items() if controller in names.split(","))
            assert group.parent == pathlib.Path("/sys/fs/cgroup", controller, mine), (group, own)
        commands = []
        for box, script in ((flooding, FLOOD_AND_HOG), (classmate, "import threading; threading.Thread().start()")):
            command = sandbox_command(box, [sys.executable, "-c", script + "\nprint('ran')"])
            command[command.index('exec "$@" >/dev/null 2>&1')] = 'exec "$@"'  # keep its output, for the test
            commands.append(command)
        flood = subprocess.Popen(commands[0], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            first = flood.stdout.readline().split()
            started = subprocess.run(commands[1], capture_output=True, text=True, timeout=60)
            flood.stdin.write("\n")
            flood.stdin.flush()
            rest = flood.communicate(timeout=60)[0]
        finally:
            flood.kill()
        assert first[:2] == ["stopped", "at"] and int(first[2]) < 64, first  # the flood met its box's limit...
        assert started.returncode == 0 and started.stdout == "ran\n", started  # ...and the classmate did not
        assert "held" not in rest and flood.returncode != 0, (rest, flood.returncode)  # 640 MB: killed at 256
        # what the grader logs of each box: the hog reached its limit, no more
        assert 192 * 2**20 < flooding.peak_memory() <= 256 * 2**20, flooding.peak_memory()
    finally:
        groups = [*flooding.cgroups, *classmate.cgroups]
        flooding.remove()
        classmate.remove()
    assert not [group for group in groups if group.exists()]  # removed with their boxes


def test_a_box_that_fills_its_disk_stops_at_its_quota_and_the_quota_goes_with_the_box():
    from workbook.course.sandbox import Box, sandbox_command, sandbox_problem

    if sandbox_problem():
        pytest.skip(sandbox_problem())
    box = Box()
    try:
        why = box.bound_disk(8 * 2**20)
        if why:
            pytest.skip(f"this machine gives the grader no per-box file system: {why}")
        for bad in (2**19, 1.5e7, True, "8M"):
            with pytest.raises(ValueError, match="disk_bytes="):
                box.bound_disk(bad)
        with pytest.raises(ValueError, match="already has its file system"):
            box.bound_disk(8 * 2**20)
        script = """import os
written = {}
for place in (os.getcwd(), os.path.expanduser("~")):
    descriptor, size = os.open(os.path.join(place, "filler"), os.O_WRONLY | os.O_CREAT), 0
    try:
        while size < 64 * 2**20:  # 64 MB at most, if nothing stopped it
            size += os.write(descriptor, bytes(2**16))
    except OSError as error:
        written[place] = (size, error.strerror)
print(sum(size for size, _ in written.values()), sorted({why for _, why in written.values()}))
"""
        command = sandbox_command(box, [sys.executable, "-c", script])
        command[command.index('exec "$@" >/dev/null 2>&1')] = 'exec "$@"'  # keep its output, for the test
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        root = box.root
    finally:
        box.remove()
    assert result.returncode == 0, result.stderr
    total, reasons = result.stdout.split(" ", 1)
    # the grader's disk has far more room than this: the box's own file system stopped it
    assert 6 * 2**20 < int(total) <= 8 * 2**20 and reasons.strip() == "['No space left on device']", result.stdout
    assert not root.exists() and str(root) not in pathlib.Path("/proc/self/mounts").read_text()


HONEST_FILES = """import os
for place in (os.getcwd(), os.path.expanduser("~"), "/tmp"):
    path = os.path.join(place, "weights.bin")
    with open(path, "wb") as file:
        file.write(bytes(range(256)) * 4096)  # 1 MiB, as a student's saved weights
    with open(path, "rb") as file:
        print(place.replace(os.path.dirname(os.getcwd()), "BOX"), len(file.read()), oct(os.stat(place).st_mode & 0o777))
print(sorted(os.listdir(os.path.dirname(os.getcwd()))), os.access(os.getcwd(), os.W_OK))
"""


def test_an_honest_kernel_sees_the_same_box_with_or_without_its_quota():
    from workbook.course.sandbox import Box, sandbox_command, sandbox_problem

    if sandbox_problem():
        pytest.skip(sandbox_problem())
    outputs = []
    for quota in (None, 64 * 2**20):
        box = Box()
        try:
            if quota is not None and box.bound_disk(quota):
                pytest.skip("this machine gives the grader no per-box file system")
            command = sandbox_command(box, [sys.executable, "-c", HONEST_FILES])
            command[command.index('exec "$@" >/dev/null 2>&1')] = 'exec "$@"'  # keep its output, for the test
            result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        finally:
            assert box.remove() is None and not box.root.exists()
        outputs.append((result.returncode, result.stdout, result.stderr))
    assert outputs[0] == outputs[1] and outputs[0][0] == 0, outputs


PER_USER_LIMITS = """import os, subprocess
children = []
try:
    for _ in range(200):
        children.append(subprocess.Popen(["sleep", "30"]))
    print("started", len(children))
except OSError as error:
    print("stopped at", len(children), type(error).__name__)
for child in children:
    child.kill()
try:
    hog = bytearray(2 * 2**30)
    print("held 2 GiB")
except MemoryError:
    print("MemoryError")
print("uid", os.getuid())
"""


def test_each_box_is_a_user_of_its_own_whose_tasks_and_memory_are_bounded_without_control_groups():
    from workbook.course.sandbox import Box, sandbox_command, sandbox_problem

    if sandbox_problem():
        pytest.skip(sandbox_problem())
    if os.geteuid() != 0:
        pytest.skip("a grader gives each box a user of its own only when it runs as root")
    boxes = [Box(), Box()]
    try:
        assert boxes[0].uid != boxes[1].uid and 0 not in (boxes[0].uid, boxes[1].uid)
        boxes[0].rlimits = (64, 2**30)  # as Box.limit sets them where the machine gives no control groups
        command = sandbox_command(boxes[0], [sys.executable, "-c", PER_USER_LIMITS])
        command[command.index('exec "$@" >/dev/null 2>&1')] = 'exec "$@"'  # keep its output, for the test
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    finally:
        for box in boxes:
            box.remove()
    started, memory, uid = result.stdout.splitlines()
    assert started.startswith("stopped at") and int(started.split()[2]) < 64, result.stdout
    assert memory == "MemoryError" and uid == f"uid {boxes[0].uid}", result.stdout


def test_limits_a_kernel_could_not_be_graded_under_are_refused_by_name():
    pytest.importorskip("nbgrader", reason="grading needs nbgrader (requirements-dev.txt)")
    from workbook.course.autograde import GuardedExecute

    for name, value in (("max_tasks", 10), ("max_memory_bytes", 2**20), ("max_disk_bytes", 2**20)):
        with pytest.raises(Exception, match=f"c.GuardedExecute.{name}={value}"):
            GuardedExecute(**{name: value})
    # files are memory too: a disk quota the memory limit cannot hold is refused before a box is made
    grader = GuardedExecute(max_memory_bytes=2**30, max_disk_bytes=512 * 2**20)
    with pytest.raises(ValueError, match="max_disk_bytes=536870912 .*max_memory_bytes=1,073,741,824"):
        grader._bound(box=None)


def test_the_sandbox_shows_the_machine_read_only_hides_the_course_and_ends_every_process(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / "gradebook.db").write_text("grades")
    marker = tmp_path / "outlived"
    script = f"""
import os, socket, subprocess, time
print("sees course:", os.listdir({str(course)!r}))
for path in ({str(course / "gradebook.db")!r}, {str(ROOT / "workbook" / "zz.py")!r}, "/etc/zz"):
    try:
        open(path, "a").write("x"); print("wrote", path)
    except OSError as error:
        print("refused", type(error).__name__)
try:
    socket.create_connection(("1.1.1.1", 80), timeout=2); print("network")
except OSError:
    print("no network")
subprocess.Popen(["setsid", "sh", "-c", "sleep 3; touch {marker}"])
"""
    result = run_sandboxed(tmp_path, script, hidden=[course])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "sees course: []", result.stdout
    assert [line.split()[0] for line in lines[1:4]] == ["refused"] * 3, result.stdout
    assert lines[4] == "no network"
    time.sleep(4)
    assert not marker.exists() and not (ROOT / "workbook" / "zz.py").exists()
    assert (course / "gradebook.db").read_text() == "grades"


def test_the_kernel_cannot_move_its_folders_or_write_in_the_boxs_top(tmp_path):
    script = """
import os
here = os.getcwd()
for name, action in (
    ("rename work", lambda: os.rename(here, here + "-moved")),
    ("link in the top", lambda: os.symlink("/etc", os.path.join(os.path.dirname(here), "planted"))),
    ("rename home", lambda: os.rename(os.environ["HOME"], here + "/home")),
    ("write in work", lambda: open("mine.txt", "w").write("x")),
):
    try:
        action()
        print(name, "done")
    except OSError as error:
        print(name, type(error).__name__)
"""
    result = run_sandboxed(tmp_path, script)
    assert result.returncode == 0, result.stderr
    done = dict(line.rsplit(" ", 1) for line in result.stdout.splitlines())
    assert done.pop("write in work") == "done", result.stdout  # its own folder is its to write
    assert "done" not in done.values(), result.stdout


# Run by a Python whose virtual environment was made in /tmp (with this environment's packages on
# the grader's side only): the box's kernel is that Python, argv[2] is hidden; prints what the kernel saw.
IN_A_TMP_VENV = """
import subprocess, sys
from workbook.course.sandbox import Box, sandbox_command

probe = (
    "import os, sys\\n"
    "print(sys.prefix)\\n"
    "print(os.path.exists(sys.argv[1]))\\n"
    "print(os.listdir(sys.argv[2]))\\n"
    "try:\\n"
    "    open(os.path.join(sys.prefix, 'zz'), 'w')\\n"
    "    print('wrote')\\n"
    "except OSError as error:\\n"
    "    print('refused', type(error).__name__)\\n"
    "try:\\n"
    "    open('/etc/shadow').close()\\n"
    "    print('read /etc/shadow')\\n"
    "except OSError as error:\\n"
    "    print('shadow refused', type(error).__name__)\\n"
)
box = Box()
try:
    command = sandbox_command(box, [sys.executable, "-c", probe, *sys.argv[1:]], hidden=[sys.argv[2]])
    command[command.index("sh") + 2] = 'exec "$@"'  # keep its output, for the test
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    print(result.returncode, result.stderr.strip()[-500:].replace("\\n", " "), result.stdout, sep="\\n", end="")
finally:
    box.remove()
"""


@pytest.mark.parametrize(
    ("through_a_link", "mode"),
    [(False, 0o755), (True, 0o755), (False, 0o700)],
    ids=["its-own-path", "reached-through-a-link", "in-a-folder-only-its-owner-enters"],
)
def test_a_python_in_a_virtual_environment_made_in_tmp_runs_in_the_box_which_has_its_own_tmp(through_a_link, mode):
    # The last: run by root, a Python under a folder only root enters (pyenv in root's home, say) is
    # one the sandbox's user cannot start; the kernel is that user on the host all the same, never root.
    from workbook.course.sandbox import sandbox_problem

    if sandbox_problem():
        pytest.skip(sandbox_problem())
    folder = pathlib.Path(tempfile.mkdtemp(prefix="venv-in-tmp-", dir="/tmp"))
    try:
        folder.chmod(mode)
        env = folder / "env"
        # made with the installed Python itself, as a user makes one (not through this environment's link to it)
        python = os.path.realpath(sys.executable)
        made = folder / "environments" / "env" if through_a_link else env
        subprocess.run([python, "-m", "venv", "--without-pip", str(made)], check=True, timeout=120)
        if through_a_link:  # as hubs often arrange: the environment's path is a link, and it is started by it
            env.symlink_to(made, target_is_directory=True)
        site = next(env.glob("lib/python*/site-packages"))
        (site / "grader.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
        (folder / "graders_own").write_text("a file of the grader's /tmp")
        course = env / "course"  # a hidden folder inside the environment: hidden all the same
        course.mkdir()
        (course / ANSWER_KEY).write_text("the answers")
        driver = subprocess.run(
            [str(env / "bin" / "python"), "-c", IN_A_TMP_VENV, str(folder / "graders_own"), str(course)],
            capture_output=True,
            text=True,
            timeout=FRESH_PYTHON_SECONDS,
        )
        assert driver.returncode == 0, driver.stderr
        returncode, stderr, *seen = driver.stdout.splitlines()
        # Before, the box's own /tmp (a tmpfs) hid the environment, and a box bound only the environment's
        # own folder where it was started through a link: "exec: .../env/bin/python: not found".
        assert returncode == "0", stderr
        prefix = env if through_a_link else env.resolve()
        assert seen == [str(prefix), "False", "[]", "refused OSError", "shadow refused PermissionError"], driver.stdout
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_sandbox_shows_no_other_course_or_box_and_bounds_its_temporary_folders(tmp_path, monkeypatch):
    """Another course's submissions and the classmate's box, outside every temporary folder: not there at all."""
    from workbook.course.sandbox import TMPFS_BYTES, Box

    (ROOT / "build").mkdir(exist_ok=True)
    outside = pathlib.Path(tempfile.mkdtemp(prefix="sandbox-test-", dir=ROOT / "build"))  # not a temporary folder
    try:
        other_course = outside / "other-course" / "submitted" / "ann"
        other_course.mkdir(parents=True)
        (other_course / "answers.ipynb").write_text("{}")
        monkeypatch.setattr(tempfile, "tempdir", str(outside))  # the classmate's box, where the grader's TMPDIR is
        classmate = Box()
        (classmate.work / "recorded.npz").write_text("weights")
        monkeypatch.undo()
        script = f"""
import os
for path in ({str(other_course)!r}, {str(classmate.work)!r}, {str(ROOT / "course")!r}, os.path.expanduser("~")):
    print(os.path.exists(path))
try:
    open("/dev/shm/filler", "wb").write(b"x" * {TMPFS_BYTES["/dev/shm"] + 2**20})
    print("filled")
except OSError as error:
    print(error.strerror)
"""
        result = run_sandboxed(tmp_path, script)
        classmate.remove()
    finally:
        shutil.rmtree(outside, ignore_errors=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["False"] * 3 + ["True", "No space left on device"], result.stdout


# --- the answer key stays with the grader ------------------------------------------------

# Run in a fresh interpreter that sees nothing of the course: every module of the installed
# workbook package imported, every callable in it (and in its module-level containers) tried as
# part (a)'s answer against the requirement written out here, every string it holds searched for
# part (b)'s answer; and every string literal of its source files read.
ANSWER_SCAN = r"""
import ast, contextlib, importlib, inspect, io, json, pathlib, pkgutil, sys
import numpy as np
import tensorflow as tf
import workbook

answer = {"cast", "codes"}  # part (b): the op and the variable, as the title cell asks for them
x = np.linspace(-1.0, 2.0, 601, dtype="float32")
x = x[np.all(np.abs(x[:, None] - np.array([0.5 / 3, 1.5 / 3, 2.5 / 3, 0.0, 1.0])) > 1e-3, axis=1)]
forward = np.round(3 * np.clip(x, 0, 1)) / 3  # part (a): round(3 clip(x, 0, 1)) / 3 forward,
derivative = ((x >= 0) & (x <= 1)).astype("float32")  # the clip's derivative backward

def passes_part_a(fn):
    try:
        inspect.signature(fn).bind(x)
    except (TypeError, ValueError):
        return False
    try:
        xt = tf.constant(x)
        # What a function prints (a self-check, a tensor) stays out of the scan's own output.
        with tf.GradientTape() as tape, contextlib.redirect_stdout(io.StringIO()):
            tape.watch(xt)
            y = fn(xt)
        gradient = tape.gradient(y, xt)
        return bool(
            np.allclose(np.asarray(y, "float32"), forward, atol=1e-5)
            and gradient is not None and np.allclose(np.asarray(gradient), derivative, atol=1e-5)
        )
    except BaseException:  # anything the package's functions do with a tensor they were not made for
        return False

def strings(value):
    items = value.items() if isinstance(value, dict) else value
    if isinstance(value, dict):
        items = [part for pair in items for part in pair]
    return {item.strip().lower() for item in items if isinstance(item, str)}

# The quiet start's forwarder forks and ends the process that calls it: it is read, never called.
NEVER_CALLED = {"workbook.core.tensorflow_start"}
found, modules = [], ["workbook"]
modules += [info.name for info in pkgutil.walk_packages(workbook.__path__, "workbook.")]
for name in modules:
    try:
        module = importlib.import_module(name)
    except ImportError:  # needs an extra this Python lacks (nbgrader): nothing in it can be called here
        continue  # (its source is still read for the answer's words below)
    for attribute, value in list(vars(module).items()):
        if attribute == "__builtins__":  # Python's own, the same in every module (sum() alone took a minute)
            continue
        candidates = [value]
        if isinstance(value, (dict, list, tuple, set, frozenset)):
            candidates += list(value.values() if isinstance(value, dict) else value)
            if answer <= strings(value):
                found.append(f"{name}.{attribute} holds part (b)'s answer")
        for candidate in candidates:
            if getattr(candidate, "__module__", None) in NEVER_CALLED:
                continue
            if callable(candidate) and not inspect.isclass(candidate) and passes_part_a(candidate):
                found.append(f"{name}.{attribute} passes part (a)")
for path in pathlib.Path(workbook.__file__).parent.rglob("*.py"):
    literals = {
        node.value.strip().lower()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    if answer <= literals:
        found.append(f"{path.name} spells out part (b)'s answer")
pathlib.Path(sys.argv[1]).write_text(json.dumps({"modules": len(modules), "found": found}))
"""


@pytest.mark.slow  # every callable of the package tried in a fresh interpreter, 20-odd s (make test runs it)
@pytest.mark.timeout(900)
def test_no_module_of_the_installed_workbook_holds_an_answer(tmp_path):
    # A fresh interpreter in isolated mode (no working folder, no PYTHONPATH): it sees the
    # installed package and nothing of the course folder.
    env = clean_environment(tmp_path / "home")
    result = subprocess.run(
        [sys.executable, "-I", "-c", ANSWER_SCAN, str(tmp_path / "scan.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    scan = json.loads((tmp_path / "scan.json").read_text())
    assert scan["modules"] > 40  # every module was imported and searched
    assert scan["found"] == []


def test_the_answer_scan_finds_a_planted_answer(tmp_path):
    # The scan above, run on a package with the answers planted where a module could hold
    # them: it must find each of them. The package is the workbook's own front module and the
    # planted one (the test above already scans every other module; scanning them twice would
    # only cost minutes).
    package = tmp_path / "site" / "workbook"
    package.mkdir(parents=True)
    shutil.copy(ROOT / "workbook" / "__init__.py", package)
    (package / "planted.py").write_text(
        "import keras\n\n"
        "ANSWERS = {'op': 'Cast', 'variable': 'codes'}\n\n"
        "def _quantizer(x):\n"
        "    clipped = keras.ops.clip(x, 0.0, 1.0)\n"
        "    return clipped + keras.ops.stop_gradient(keras.ops.round(3.0 * clipped) / 3.0 - clipped)\n"
    )
    script = f"import sys; sys.path.insert(0, {str(tmp_path / 'site')!r})\n" + ANSWER_SCAN
    result = subprocess.run(
        [sys.executable, "-I", "-c", script, str(tmp_path / "scan.json")],
        cwd=tmp_path,
        env=clean_environment(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    scan = json.loads((tmp_path / "scan.json").read_text())
    assert scan["modules"] == 2  # the planted package, not the installed one
    found = scan["found"]
    assert {
        "workbook.planted.ANSWERS holds part (b)'s answer",
        "workbook.planted._quantizer passes part (a)",
        "planted.py spells out part (b)'s answer",
    } <= set(found), found
