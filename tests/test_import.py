"""`import workbook` has no side effects and costs little."""

import subprocess
import sys

from notebook_runner import FRESH_PYTHON_SECONDS


def run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=FRESH_PYTHON_SECONDS)


def test_import_has_no_side_effects():
    probe = run(
        "import os, sys, random, numpy as np\n"
        "env = dict(os.environ); state = random.getstate(); np_state = np.random.get_state()[1].copy()\n"
        "import matplotlib; rc = dict(matplotlib.rcParams)\n"
        "import workbook\n"
        "assert random.getstate() == state, 'random was seeded'\n"
        "assert (np.random.get_state()[1] == np_state).all(), 'numpy was seeded'\n"
        "assert dict(os.environ) == env, 'environment changed'\n"
        "assert dict(matplotlib.rcParams) == rc, 'rcParams changed'\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported eagerly'\n"
        "print('clean')\n"
    )
    assert probe.returncode == 0 and "clean" in probe.stdout, probe.stderr[-2000:]
    assert probe.stderr.strip() == "", f"import printed to stderr: {probe.stderr[-500:]}"
