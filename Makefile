# The whole set-up is two commands:
#   make lab    install (first time only) and open the workbook in JupyterLab
#   make test   install (first time only) and run every test and notebook, at the newest
#               end of the supported range (.venv) and at its oldest (.venv-oldest)
#   make test-fast   the quick loop while working: the unit tests only, at the newest end
# Packages are installed into .venv in this folder, again only when a
# requirements file is newer than the last install.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8888
# Test processes side by side (pytest-xdist): every test is independent of the others, and
# `auto` is one per core. WORKERS=1 runs them one after another.
WORKERS ?= auto
export WORKERS
# What make test-fast leaves out: notebook runs, real kernels, nbgrader's round trip, the browser,
# and training for epochs.
FAST   := not notebook and not kernel and not hub and not browser and not slow

.PHONY: lab test test-fast test-oldest lint format bench book assignments clean-venv help

help:
	@echo "make lab     open the workbook in JupyterLab (installs into .venv the first time)"
	@echo "make test    run the unit tests, execute every notebook, and drive JupyterLab in a headless browser;"
	@echo "             and, beside them at a lower priority, make test-oldest"
	@echo "make test-fast  the unit tests only (no notebooks, nbgrader round trip, browser or oldest end)"
	@echo "make test-oldest  the unit tests and every notebook again at the oldest supported versions"
	@echo "             (constraints-oldest.txt, Python 3.10), and the Colab install, in .venv-oldest"
	@echo "make lint    ruff (lint, import order, complexity, formatting), import-linter (settings in pyproject.toml)"
	@echo "             and xenon (no function of the package above complexity 10, boolean operators counted); CI runs it"
	@echo "make format  let ruff fix what it can and format the code and notebooks"
	@echo "make bench   measure overheads and notebook budgets into benchmarks/results.md"
	@echo "make assignments  write the student versions (nbgrader) into course/release/"
	@echo "make book    the notebooks executed at their classroom defaults, as a static site in build/book/html"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: requirements.txt pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt requirements-book.txt
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $@

$(VENV)/.installed-book: $(VENV)/.installed requirements-book.txt
	$(BIN)/python -m pip install --quiet -r requirements-book.txt
	touch $@

# Containers and CI often run as root, which JupyterLab refuses without --allow-root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: $(VENV)/.installed
	$(BIN)/python -m jupyterlab --port=$(PORT) $(ALLOW_ROOT) notebooks/00_start_here.ipynb

# First, in seconds: is there a browser for the end-to-end test (tests/test_browser.py)?
# It looks for a Chromium or Chrome, then tries Playwright's own download, and if
# neither works stops here and says how to get one. WORKBOOK_SKIP_BROWSER=1 skips
# that test on purpose; WORKBOOK_CHROMIUM=/path/to/chromium picks the browser.
#
# The oldest end (what make test-oldest runs) runs side by side with the newest, at a lower priority
# (nice), so that it takes the cores the newest end leaves idle (it still needs memory of its
# own: a TensorFlow process per worker); its output is kept in build/test-oldest.log and shown
# when both ends are done (Ctrl-C stops both). The book's tests and
# JupyterLab's view of the executed notebooks open the notebooks that the first pytest
# executed, so they come after it.
test: $(VENV)/.installed-dev
	$(BIN)/python tests/browser_session.py --check
	@mkdir -p build; \
	nice -n 10 bash scripts/test_oldest_end.sh >build/test-oldest.log 2>&1 & oldest=$$!; \
	end_tree() { for child in $$(pgrep -P "$$1" 2>/dev/null); do end_tree "$$child"; done; kill "$$1" 2>/dev/null; }; \
	trap 'echo "=== stopped: the oldest end too"; end_tree $$oldest; exit 130' INT TERM; \
	echo "=== oldest end: started beside the newest end; its output follows when it ends (build/test-oldest.log)"; \
	status=0; \
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup --ignore=tests/test_rendered_book.py \
		--ignore=tests/test_executed_in_lab.py || status=$$?; \
	if [ $$status = 0 ]; then \
		$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup tests/test_rendered_book.py \
			tests/test_executed_in_lab.py || status=$$?; \
	fi; \
	echo "=== newest end: done; waiting for the oldest end"; \
	wait $$oldest || { [ $$status != 0 ] || status=1; }; \
	trap - INT TERM; \
	cat build/test-oldest.log; \
	exit $$status

# The loop to run while working; make test stays the full gate CI runs.
test-fast: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup -m "$(FAST)"

# The oldest end of the supported range, in its own venv (built once, like .venv); skipped
# with a message, never silently, where the package index cannot be reached to build it.
test-oldest:
	bash scripts/test_oldest_end.sh

# The same checks CI runs before the tests: lint rules, import order, complexity limits (ruff and xenon),
# and formatting, over the package, tests, scripts, benchmarks and notebooks.
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/xenon --max-absolute B workbook

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/run.py

# The instructor's source is notebooks/ itself; nbgrader's generate_assignment writes the
# student versions (no solutions, no hidden tests) into course/release/. See course/README.md.
assignments: $(VENV)/.installed-dev
	$(BIN)/python scripts/make_assignments.py

# The book: every notebook executed at its classroom defaults (two at a time, and only those
# that changed since the last build), rendered by Sphinx with MyST-NB into build/book/html.
# BOOK_FLAGS=--reduced uses the test suite's turned-down parameters instead.
book: $(VENV)/.installed-book
	$(BIN)/python scripts/build_book.py $(BOOK_FLAGS)

clean-venv:
	rm -rf $(VENV) .venv-oldest
