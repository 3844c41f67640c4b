"""Tests that share one expensive fixture stay on one worker when `make test` runs them side by side.

The hub's class, the kernels of test_stderr_kept.py and test_missing_gradients.py, and the
browser's JupyterLab are session fixtures: each worker that runs one of their tests builds
them again (the class alone takes minutes). Their tests are marked ``xdist_group``, and
``--dist loadgroup`` (the Makefile) sends a group to one worker. pytest 9.2 stopped letting
pytest-xdist 3.8 mark the group in a test's node id, and then every worker takes a share of
every group; requirements-dev.txt keeps pytest below 9.2 for that. This runs pytest as the
Makefile does on a few tests of two groups and reads which worker ran each.
"""

import os
import subprocess
import sys
import textwrap

import pytest
from notebook_runner import FRESH_PYTHON_SECONDS

TESTS = """
    import os
    import pytest

    def record(name):
        with open(os.environ["WORKERS_SEEN"], "a") as file:
            file.write(f"{name} {os.environ['PYTEST_XDIST_WORKER']}\\n")

    @pytest.mark.xdist_group("hub")
    @pytest.mark.parametrize("n", range(6))
    def test_hub(n):
        record(f"hub{n}")

    @pytest.mark.xdist_group("kernels")
    @pytest.mark.parametrize("n", range(6))
    def test_kernels(n):
        record(f"kernels{n}")

    @pytest.mark.parametrize("n", range(12))
    def test_free(n):
        record(f"free{n}")
"""


def test_a_group_runs_on_one_worker_and_every_test_runs_once(tmp_path):
    (tmp_path / "test_toy.py").write_text(textwrap.dedent(TESTS))
    seen = tmp_path / "seen.txt"
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    environment["WORKERS_SEEN"] = str(seen)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "."],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=FRESH_PYTHON_SECONDS,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    workers = {}
    for line in seen.read_text().splitlines():
        name, worker = line.split()
        workers.setdefault(name.rstrip("0123456789"), set()).add(worker)
    for group in ("hub", "kernels"):
        assert len(workers[group]) == 1, (
            f"the {group!r} group ran on workers {sorted(workers[group])}: `--dist loadgroup` does not group "
            f"with pytest {pytest.__version__} (see requirements-dev.txt)"
        )
    # Where the ungrouped tests go is the scheduler's choice (all may go to the worker that is free).
    assert len(seen.read_text().splitlines()) == 24, "not every test ran exactly once"
