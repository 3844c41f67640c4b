"""What the assignment's hidden tests record, for a verdict taken outside the student's kernel.

Introduced in 05_assignment_quantized_autoencoder.ipynb (its hidden tests) and
course/README.md. A graded notebook runs the student's answer cells and the check cells
in one kernel, so nothing that kernel concludes can be trusted. The hidden tests only
**record**: the student's functions evaluated (values and gradients) on inputs the
grader chose at grading time and wrote into the kernel's folder (``grading_probe.npz``),
the answers as plain strings, the trained model's weights. The verdict is taken by
:mod:`workbook.course.verdicts`, run by the grader's own Python in isolated mode, from those
files alone (course/README.md says how).

Outside grading (the instructor's version run as a notebook), there is no probe: the
first recording makes one in a temporary folder, and :func:`judge_here` takes the same
verdicts in the kernel, with the answer key it finds in the course folder.
"""

import atexit
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from workbook.lab import assignment_spec as spec

__all__ = [
    "record_function",
    "record_answers",
    "record_model",
    "judge_here",
    "write_probe",
    "run_verdicts",
    "verdict_peak_memory",
    "find_answer_key",
    "cell_timeout",
    "PROBE_FILE",
    "ARTIFACTS_FOLDER",
    "ANSWER_KEY",
]

#: The answer key's file, in the course folder (never in the workbook a student installs).
ANSWER_KEY = "answer_key_05.py"

#: What the grader writes into the kernel's working folder before the notebook runs,
#: and where the hidden tests leave what they record (both relative to that folder).
PROBE_FILE = "grading_probe.npz"
ARTIFACTS_FOLDER = "grading_artifacts"

# The shapes of the grader's inputs, and which it probes: the spec's, which the verdicts read too.
N_POINTS, CODE_SHAPE, N_IMAGES, PROBED = spec.N_POINTS, spec.CODE_SHAPE, spec.N_IMAGES, spec.PROBED


def write_probe(path, seed=None):
    """Write the grader's inputs for one submission to ``path`` (a seed of its own if None).

    Introduced in course/README.md; :class:`workbook.course.autograde.GuardedExecute` writes one
    into each submission's folder, from a fresh random seed, before the notebook runs.
    """
    rng = np.random.default_rng(secrets.randbits(64) if seed is None else seed)

    def away_from_ties(low, high, n):
        values = np.empty(0)
        while len(values) < n:
            drawn = rng.uniform(low, high, 2 * n)
            keep = np.all(np.abs(drawn[:, None] - np.array(spec.TIES)[None, :]) > spec.TIE_MARGIN, axis=1)
            values = np.concatenate([values, drawn[keep]])
        return values[:n].astype("float32")

    far = rng.uniform(1.0, 4.0, 200)  # 10 to 10,000, below 0 or above 1
    np.savez(
        path,
        x=away_from_ties(-1.0, 2.0, N_POINTS),
        code=away_from_ties(-0.5, 1.5, int(np.prod(CODE_SHAPE))).reshape(CODE_SHAPE),
        far=(np.where(rng.random(200) < 0.5, -1, 1) * 10**far).astype("float32"),
        rank3=away_from_ties(-1.0, 2.0, 3 * 4 * 5).reshape(3, 4, 5),
        rank0=away_from_ties(-1.0, 2.0, 1).reshape(()),
        float64=away_from_ties(-1.0, 2.0, 400).astype("float64"),
        images=rng.uniform(0.0, 1.0, (N_IMAGES, 28, 28, 1)).astype("float32"),
        model_seed=np.array(int(rng.integers(0, 2**31 - 1))),
    )


_here = {}


def _folder():
    """Where the probe is and the recordings go: the kernel's folder while grading, else a temporary one."""
    if os.path.exists(PROBE_FILE):
        return "."
    if "folder" not in _here:  # outside grading: a probe of this kernel's own, beside no notebook
        _here["folder"] = tempfile.mkdtemp(prefix="workbook-grading-")
        atexit.register(shutil.rmtree, _here["folder"], True)
        write_probe(os.path.join(_here["folder"], PROBE_FILE))
    return _here["folder"]


def _probe():
    """The grader's inputs (made once per kernel when the notebook runs outside grading)."""
    with np.load(os.path.join(_folder(), PROBE_FILE), allow_pickle=False) as stored:
        return {name: stored[name] for name in stored.files}


def _save(grade_id, arrays=None, answers=None):
    folder = os.path.join(_folder(), ARTIFACTS_FOLDER)
    os.makedirs(folder, exist_ok=True)
    if arrays is not None:
        np.savez(os.path.join(folder, f"{grade_id}.npz"), **arrays)
    if answers is not None:
        with open(os.path.join(folder, f"{grade_id}.json"), "w") as file:
            json.dump(answers, file)


def _value_and_gradient(fn, x):
    from workbook.core.gradients import value_and_gradient

    value, gradient = value_and_gradient(fn, x)
    gradient = np.full(np.shape(x), np.nan, "float32") if gradient is None else np.asarray(gradient, "float32")
    return np.asarray(value, "float32"), gradient


def record_function(grade_id, fn):
    """Record ``fn``'s values and gradients on the grader's inputs, alone and inside the autoencoder.

    Introduced in 05_assignment_quantized_autoencoder.ipynb (its hidden tests): parts (a)
    and (b). What ``fn`` raises is recorded as its answer; a missing gradient as NaN.
    """
    import keras
    import tensorflow as tf

    from workbook.lab.models import autoencoder

    probe = _probe()
    try:
        arrays = {}
        for name in PROBED:
            arrays[f"{name}_value"], arrays[f"{name}_gradient"] = _value_and_gradient(fn, tf.constant(probe[name]))
        model = autoencoder(bottleneck=fn, seed=int(probe["model_seed"]))
        images = tf.constant(probe["images"])
        with tf.GradientTape() as tape:
            loss = keras.ops.mean((model(images, training=True) - images) ** 2)
        gradients = tape.gradient(loss, model.trainable_variables)
        for index, (variable, gradient) in enumerate(zip(model.trainable_variables, gradients, strict=True)):
            value = np.full(variable.shape, np.nan, "float32") if gradient is None else np.asarray(gradient)
            arrays[f"model_gradient_{index}"] = value.astype("float32")
    except Exception as error:  # the student's function: its failure is what is recorded
        _save(grade_id, answers={"error": f"{type(error).__name__}: {error}"[:500]})
        return
    _save(grade_id, arrays=arrays)


def record_answers(grade_id, **answers):
    """Record written answers (strings) for the verdict.

    Introduced in 05_assignment_quantized_autoencoder.ipynb (its hidden tests): part (b).
    """
    _save(grade_id, answers={name: value if isinstance(value, str) else repr(value) for name, value in answers.items()})


def record_model(grade_id, model):
    """Record a trained model's weights, in order, for the verdict.

    Introduced in 05_assignment_quantized_autoencoder.ipynb (its hidden tests): part (c).
    """
    try:
        weights = {f"weight_{i}": np.asarray(weight, "float32") for i, weight in enumerate(model.get_weights())}
    except Exception as error:
        _save(grade_id, answers={"error": f"could not read the model's weights: {type(error).__name__}: {error}"})
        return
    _save(grade_id, arrays=weights)


def judge_here(grade_id, training_seconds=None):
    """Outside grading: take the verdict on what was recorded, here, and assert it passed.

    Introduced in 05_assignment_quantized_autoencoder.ipynb (its hidden tests), so that the
    instructor's version checks itself when it runs as a notebook, with the answer key of the
    course folder (:func:`find_answer_key`). While nbgrader grades, this does nothing: the
    grader takes the verdict itself, outside this kernel.
    """
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        return
    import importlib.util

    from workbook.course.verdicts import judge

    path = find_answer_key()
    loader = importlib.util.spec_from_file_location("workbook_answer_key", path)
    key = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(key)
    folder = _folder()
    verdicts = judge(
        os.path.join(folder, PROBE_FILE), os.path.join(folder, ARTIFACTS_FOLDER), key.KEY, training_seconds, [grade_id]
    )
    passed, message = verdicts[grade_id]
    print(message)
    assert passed, message


def find_answer_key(start="."):
    """The answer key's path: in the course folder beside or above ``start`` (a notebook's folder).

    Introduced in course/README.md. Found from ``notebooks/`` (the course folder is
    ``../course``) and from ``course/source/<assignment>/`` alike.
    """
    folder = os.path.abspath(start)
    for parent in [folder, *_parents(folder)]:
        for candidate in (os.path.join(parent, ANSWER_KEY), os.path.join(parent, "course", ANSWER_KEY)):
            if os.path.isfile(candidate):
                return candidate
    raise FileNotFoundError(
        f"The answer key course/{ANSWER_KEY} is not in the course folder beside or above {folder}: the "
        f"instructor's version of the assignment takes its verdicts with it. Run the notebook from the "
        f"repository's notebooks/ folder (or course/source/), where the course folder is found."
    )


def _parents(folder):
    while os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
        yield folder


def run_verdicts(answer_key, probe, artifacts, training_seconds=None, grade_ids=None, timeout=600):
    """{grade_id: (passed, message)} from ``python -I ANSWER_KEY --serve``, in a clean environment.

    Introduced in course/README.md. The process is this Python in isolated mode (no
    import path from the environment or the working folder, no user site-packages),
    started in an empty folder with an environment of its own. It is started once per
    answer key and judges one submission after another (each from its own files alone),
    so a grader that grades several submissions starts TensorFlow for the verdicts once;
    it ends with the grader, or when its input ends. ``passed`` is None for a part the
    grader could not judge; a judgement that fails as a whole raises RuntimeError, and the
    next starts a new process.
    """
    request = {
        "probe": os.path.abspath(probe),
        "artifacts": os.path.abspath(artifacts),
        "training_seconds": None if training_seconds is None else float(training_seconds),
        "grade_ids": list(grade_ids or spec.JUDGED),
    }
    path = os.path.abspath(answer_key)
    process = _VERDICT_PROCESSES.get(path)
    if process is None or not process.alive():
        if not _VERDICT_PROCESSES:
            atexit.register(_end_verdict_processes)
        process = _VERDICT_PROCESSES[path] = _VerdictProcess(path)
    try:
        reply = process.ask(request, timeout)
    except RuntimeError:
        _VERDICT_PROCESSES.pop(path).end()
        raise
    return {grade_id: tuple(verdict) for grade_id, verdict in reply.items()}


_VERDICT_PROCESSES = {}  # answer key's path -> its _VerdictProcess, in this grader

#: The memory the verdict process may take for its data (RLIMIT_DATA: its heap, anonymous
#: mappings and threads' stacks, not its libraries): about 0.4 GiB on two cores for TensorFlow,
#: the references and part (c)'s held-out digits, and a few MiB more per core for TensorFlow's
#: threads. A recording that got past every size check still cannot take the grader's memory.
MAX_VERDICT_DATA_BYTES = 4 * 2**30


def _limit_verdict_memory():
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (MAX_VERDICT_DATA_BYTES, MAX_VERDICT_DATA_BYTES))


def verdict_peak_memory(answer_key):
    """The most memory (bytes, resident) the verdict process of ``answer_key`` has held; None if none runs here."""
    process = _VERDICT_PROCESSES.get(os.path.abspath(answer_key))
    try:
        with open(f"/proc/{process.process.pid}/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except (AttributeError, OSError, StopIteration, ValueError):
        return None


def _end_verdict_processes():
    while _VERDICT_PROCESSES:
        _VERDICT_PROCESSES.popitem()[1].end()


class _VerdictProcess:
    """``python -I ANSWER_KEY --serve``: one request (a JSON line) in, its verdicts (a JSON line) out."""

    def __init__(self, answer_key):
        self.folder = tempfile.mkdtemp(prefix="workbook-verdicts-")
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": self.folder,
            "KERAS_HOME": os.path.join(self.folder, "keras"),
            "MPLCONFIGDIR": os.path.join(self.folder, "matplotlib"),
            "TF_CPP_MIN_LOG_LEVEL": "3",
            "TF_ENABLE_ONEDNN_OPTS": "0",
            "CUDA_VISIBLE_DEVICES": "",
            "LANG": "C.UTF-8",
        }
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115 (kept open for the process; end() closes it)
        self.process = subprocess.Popen(
            [sys.executable, "-I", answer_key, "--serve"],
            cwd=self.folder,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
            preexec_fn=_limit_verdict_memory,  # noqa: PLW1509 (one call, no lock taken, before exec)
        )

    def alive(self):
        return self.process.poll() is None

    def ask(self, request, timeout):
        """The verdicts the process replies to ``request``; RuntimeError if it fails or takes over ``timeout`` s."""
        import concurrent.futures

        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except OSError:
            pass  # it has ended: its reply is empty, and its error output says why
        with concurrent.futures.ThreadPoolExecutor(1) as reader:
            line = reader.submit(self.process.stdout.readline)
            try:
                reply = json.loads(line.result(timeout=timeout) or "null")
            except concurrent.futures.TimeoutError:
                self.process.kill()
                raise RuntimeError(f"the verdict process gave no verdict in {timeout} s") from None
            except ValueError:
                reply = None  # not a reply: the process is replaced, as one that failed
        if not isinstance(reply, dict) or "verdicts" not in reply:
            why = reply.get("failed") if isinstance(reply, dict) else None
            raise RuntimeError(f"the verdict process failed ({self.process.poll()}):\n{why or self._error_output()}")
        return reply["verdicts"]

    def _error_output(self):
        self.errors.seek(0)
        return self.errors.read()[-3000:].decode(errors="replace")

    def end(self):
        """Close its input (it ends when its current judgement does); stop it after a minute."""
        try:
            self.process.stdin.close()
            self.process.wait(60)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self.errors.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def cell_timeout(cell):
    """Seconds nbgrader may spend on one cell of a submission (``Execute.timeout_func``).

    Introduced in course/README.md. Part (c)'s training cell may take the assignment's
    budget plus a minute for building the model; every other cell takes seconds in the
    reference solution and gets two minutes, so an endless loop costs at most that and
    the rest of the notebook is still graded.
    """
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "") if cell is not None else ""
    if grade_id in spec.TRAINING_CELLS:
        return spec.TIME_BUDGET_SECONDS + 60
    return 120
