#!/usr/bin/env bash
# The oldest end of the supported range, tested: what `make test-oldest` (and so `make test`) runs.
#
# .venv-oldest holds the workbook's dependencies at the floors in constraints-oldest.txt
# (TensorFlow 2.18, Keras 3.8, NumPy 1.26, matplotlib 3.8, ipywidgets 7.7.1) on Python 3.10,
# built once and rebuilt only when constraints-oldest.txt, pyproject.toml or this script
# change, like .venv. With the workbook uninstalled it is also a Colab-like runtime: first
# tests/test_colab_install.py runs a notebook whose own Setup cell installs the workbook from
# this checkout; then the unit tests and every notebook run there. Left out: the browser test
# (JupyterLab and ipywidgets 8 stay covered in .venv), nbgrader's autograding, and the
# import contracts (import-linter, a development tool, checks the source the same way anywhere).
#
#   OLDEST_PYTHON=/path/to/python3.10   the Python to build it with (default: pyenv's 3.10, or python3.10)
#   WORKBOOK_SKIP_OLDEST=1              skip it on purpose (and say so)
#   WORKERS=N                           test processes side by side (default: one per core)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-oldest
STAMP=$VENV/.installed
say() { printf '\n=== oldest end: %s\n' "$*"; }

if [ "${WORKBOOK_SKIP_OLDEST:-}" = 1 ]; then
  say "SKIPPED on purpose (WORKBOOK_SKIP_OLDEST=1): TensorFlow 2.18 / Keras 3.8 / ipywidgets 7.7.1 were NOT tested, nor the notebooks' students' versions."
  exit 0
fi
started=$SECONDS

find_python() {
  if [ -n "${OLDEST_PYTHON:-}" ]; then echo "$OLDEST_PYTHON"; return; fi
  local prefix
  if command -v pyenv >/dev/null 2>&1 && prefix=$(pyenv prefix 3.10 2>/dev/null) && [ -x "$prefix/bin/python" ]; then
    echo "$prefix/bin/python"; return
  fi
  if command -v python3.10 >/dev/null 2>&1 && python3.10 -c "import venv" 2>/dev/null; then
    command -v python3.10; return
  fi
  command -v python3
}

up_to_date() {
  [ -f "$STAMP" ] && [ "$STAMP" -nt constraints-oldest.txt ] && [ "$STAMP" -nt pyproject.toml ] \
    && [ "$STAMP" -nt "$0" ] && [ -x "$VENV/bin/python" ]
}

if ! up_to_date; then
  python=$(find_python)
  version=$("$python" -c 'import platform; print(platform.python_version())')
  case $version in
    3.10.*) say "building $VENV with Python $version" ;;
    *) say "no Python 3.10 on this machine (OLDEST_PYTHON, pyenv, python3.10): building $VENV with Python $version instead, so the oldest Python is NOT tested here" ;;
  esac
  # Is the package index reachable? Without it nothing can be installed: skip, loudly.
  probe=$(mktemp -d)
  if ! "$python" -m pip download --quiet --no-deps --timeout 20 --retries 1 -d "$probe" "keras==3.8.0" >"$probe/log" 2>&1; then
    rm -rf "$probe"
    say "SKIPPED: the package index cannot be reached to build $VENV, so TensorFlow 2.18 / Keras 3.8 / ipywidgets 7.7.1 were NOT tested, nor the notebooks' students' versions. Run \`make test-oldest\` where it can be reached."
    exit 0
  fi
  rm -rf "$probe" "$VENV"
  "$python" -m venv "$VENV"
  log=$VENV/install.log
  if ! { "$VENV/bin/python" -m pip install --upgrade pip \
         && "$VENV/bin/python" -m pip install -c constraints-oldest.txt -e . \
              "pytest>=9.0,<9.2" "pytest-timeout~=2.4" "pytest-xdist~=3.8" "nbclient~=0.10" "nbformat~=5.10" ipykernel packaging; } >"$log" 2>&1; then
    tail -n 30 "$log"
    say "FAILED to install the oldest end (the whole log is in $log)"
    exit 1
  fi
  touch "$STAMP"
  say "installed in $((SECONDS - started)) s"
else
  say "$VENV is up to date ($("$VENV/bin/python" -c 'import platform; print("Python", platform.python_version())'))"
fi
"$VENV/bin/python" -c 'import importlib.metadata as m
print("   ", ", ".join(f"{n} {m.version(n)}" for n in ("tensorflow-cpu", "keras", "numpy", "matplotlib", "ipywidgets")))' \
  2>/dev/null || true

# The tests read it (scripts/notebook_runner.py's NEWEST_END): this end keeps nothing for the book,
# which the newest end builds at the same time, and executes the students' versions of the notebooks that have one.
export WORKBOOK_TEST_END=oldest
# 1. Colab-like: no workbook installed, the notebook's own Setup cell installs it.
"$VENV/bin/python" -m pip uninstall --yes --quiet gradient-workbook >/dev/null 2>&1 || true
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_colab_install.py
# 2. Everything else at the oldest end, with the workbook installed as `make lab` does
#    (the book is built at the newest end only: its Sphinx needs Python 3.11).
"$VENV/bin/python" -m pip install --quiet --no-deps -e . >"$VENV/reinstall.log" 2>&1 \
  || { cat "$VENV/reinstall.log"; exit 1; }
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -n "${WORKERS:-auto}" --dist loadgroup \
  --ignore=tests/test_browser.py --ignore=tests/test_assignments.py --ignore=tests/test_colab_install.py \
  --ignore=tests/test_rendered_book.py --ignore=tests/test_module_layers.py
say "done in $((SECONDS - started)) s"
