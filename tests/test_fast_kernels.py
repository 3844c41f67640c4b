"""setup() asks for oneDNN's fast CPU kernels before TensorFlow loads, and the student's own setting wins.

TensorFlow turns them on by itself only on x86 CPUs with AVX-512 VNNI or BF16, or AMX; on the
others it leaves them off unless TF_ENABLE_ONEDNN_OPTS=1. Whether a run uses them is read here
from what TensorFlow itself writes when they are on ("oneDNN custom operations are on", with
quiet=False so that its log is written), an answer independent of the report's accessor. Each
case is a fresh interpreter, since TensorFlow reads the variable once, when it loads. The first two
pin workbook.core.internals.onednn_kernels_on (TensorFlow's private IsMklEnabled) at each end.
"""

import json
import platform
import subprocess
import sys

import pytest
from notebook_runner import FRESH_PYTHON_SECONDS, clean_environment

pytestmark = pytest.mark.skipif(
    (platform.system(), platform.machine()) not in {("Linux", "x86_64"), ("Windows", "AMD64")},
    reason="setup() asks for oneDNN's kernels on x86-64 Linux and Windows only",
)

ONEDNN_LINE = "oneDNN custom operations are on"


def run(tmp_path, script, **variables):
    """(what the script printed as JSON, its stderr) in a fresh interpreter as a student's kernel starts."""
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=clean_environment(tmp_path) | variables,
        timeout=FRESH_PYTHON_SECONDS,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


SETUP = (
    "import json, os, workbook\n"
    "report = workbook.setup(seed=0, quiet=False)\n"
    "print(json.dumps([os.environ.get('TF_ENABLE_ONEDNN_OPTS'), report['cpu kernels']]))\n"
)


def test_setup_asks_for_onednns_kernels_and_reports_them(tmp_path):
    (variable, kernels), stderr = run(tmp_path, SETUP)
    assert variable == "1"
    assert ONEDNN_LINE in stderr and kernels == "oneDNN", stderr[-2000:]


def test_the_students_own_setting_wins(tmp_path):
    (variable, kernels), stderr = run(tmp_path, SETUP, TF_ENABLE_ONEDNN_OPTS="0")
    assert variable == "0"
    assert ONEDNN_LINE not in stderr and kernels == "TensorFlow's own (oneDNN off)", stderr[-2000:]


def test_a_tensorflow_loaded_before_setup_is_not_asked_again(tmp_path):
    # TensorFlow read the variable when it loaded: setting it afterwards would only mislead a
    # subprocess, and the report says what the loaded TensorFlow does.
    script = "import tensorflow\n" + SETUP
    (variable, kernels), stderr = run(tmp_path, script)
    assert variable is None
    assert kernels == ("oneDNN" if ONEDNN_LINE in stderr else "TensorFlow's own (oneDNN off)"), stderr[-2000:]
