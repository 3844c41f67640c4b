"""JupyterLab in headless Chromium, for the end-to-end test (tests/test_browser.py).

Three pieces, each cleaned up in every case:

* :func:`find_browser` -- a Chromium or Chrome already on the machine, else
  Playwright's own download; if neither can be had it raises
  :class:`BrowserUnavailable` saying how to get one.
* :class:`JupyterLab` -- a server from this environment on a free localhost
  port, with a random token and throwaway settings, workspace, runtime,
  config and IPython directories, shut down (with its kernels) on exit.
* :class:`NotebookTab` -- one notebook opened in the browser: run all cells
  through the menu, wait for the kernel, read outputs, take screenshots.

``python tests/browser_session.py --check`` reports which browser the test
will use (``make test`` runs it first, so a missing browser fails in seconds).
"""

import contextlib
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import psutil

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCREENSHOTS = ROOT / "build" / "screenshots"

#: Set to 1 to skip the browser test on purpose (it is never skipped silently).
SKIP_VARIABLE = "WORKBOOK_SKIP_BROWSER"
#: Set to a Chromium or Chrome executable to use that one.
BROWSER_VARIABLE = "WORKBOOK_CHROMIUM"
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")

HOW_TO_GET_A_BROWSER = f"""\
The end-to-end test drives JupyterLab in a real Chromium, and none was found.
Get one in any of these ways, then run `make test` again:
  * Debian / Ubuntu:  sudo apt-get install chromium   (Ubuntu: chromium-browser)
  * macOS:            install Google Chrome, or `brew install --cask chromium`
  * anywhere with a network:  .venv/bin/python -m playwright install chromium
  * a browser elsewhere:  {BROWSER_VARIABLE}=/path/to/chromium make test
To run everything else without the browser test, on purpose:
  {SKIP_VARIABLE}=1 make test"""

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

# User settings for the throwaway JupyterLab: no news or update pop-ups over the notebook,
# and every cell kept in the page (JupyterLab 4 otherwise leaves far-off cells unrendered).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


class BrowserUnavailable(RuntimeError):
    """No Chromium or Chrome could be found or downloaded."""


def skip_requested():
    """True when the browser test is to be skipped on purpose."""
    return os.environ.get(SKIP_VARIABLE, "").strip().lower() in {"1", "true", "yes"}


def find_browser(download=True, download_timeout=300):
    """Path of a Chromium or Chrome to drive; raises BrowserUnavailable with how to get one."""
    chosen = os.environ.get(BROWSER_VARIABLE)
    if chosen:
        if shutil.which(chosen):
            return shutil.which(chosen)
        raise BrowserUnavailable(
            f"{BROWSER_VARIABLE}={chosen!r} is not an executable browser.\n" + HOW_TO_GET_A_BROWSER
        )
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    bundled = playwright_chromium()
    if bundled:
        return bundled
    if download:
        print(
            "No Chromium or Chrome on this machine; trying `python -m playwright install chromium`...",
            file=sys.stderr,
            flush=True,
        )
        try:
            subprocess.run(
                [sys.executable, "-m", "playwright", "install", "chromium"], timeout=download_timeout, check=False
            )
        except subprocess.TimeoutExpired:
            print(f"(gave up after {download_timeout} s)", file=sys.stderr)
        bundled = playwright_chromium()
        if bundled:
            return bundled
    raise BrowserUnavailable(HOW_TO_GET_A_BROWSER)


def playwright_chromium():
    """Playwright's own downloaded Chromium, if it is there."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    with sync_playwright() as playwright:
        path = playwright.chromium.executable_path
    return path if path and os.access(path, os.X_OK) else None


def free_port():
    """A TCP port on localhost that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_in_use(port):
    """True if something accepts connections on localhost:`port`."""
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def alive(process):
    """True if `process` (a psutil.Process) still runs and is not a zombie."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def outliving(processes, cap=20):
    """Those of ``processes`` still running once every one has ended or ``cap`` seconds have passed.

    A condition, not a schedule: what is about to end on its own (told to stop, not yet gone) is
    given the time to.
    """
    _, running = psutil.wait_procs([p for p in processes if alive(p)], timeout=cap)
    return [p for p in running if alive(p)]


def described(processes):
    """Each of ``processes`` that still runs, as its pid and command line (for a message)."""
    lines = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            lines.append(f"{process.pid}: {' '.join(process.cmdline())[:200]}")
    return lines


def stop_processes(processes, grace=10):
    """Terminate `processes` (psutil.Process), then kill what is left; returns those that were running."""
    running = [p for p in processes if alive(p)]
    for process in running:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, stubborn = psutil.wait_procs(running, timeout=grace)
    for process in stubborn:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(stubborn, timeout=grace)
    return running


def descendants():
    """Every live process started (directly or not) by this one."""
    return [p for p in psutil.Process().children(recursive=True) if alive(p)]


def _die_with_parent():
    """In the child, before exec: on Linux, end the server if the test process is killed outright.

    Its kernels then end too (they watch their parent), so not even `kill -9` of
    pytest leaves a server behind. Elsewhere this does nothing; teardown still
    stops everything in every ordinary case.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class JupyterLab:
    """A JupyterLab server for one test, serving `root`; use as a context manager.

    Everything it writes (settings, workspaces, runtime files, config, the
    IPython profile, the log) goes to a temporary directory that is removed
    afterwards; the user's own are never read or touched.
    """

    def __init__(self, root, startup_timeout=120):
        self.root = pathlib.Path(root)
        self.startup_timeout = startup_timeout
        self.port = None
        self.token = secrets.token_hex(24)
        self.process = None
        self.family = []  # the server and every process it started (kernels run in their own session)
        self._scratch = None

    # -- lifecycle -----------------------------------------------------------

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        self._scratch = tempfile.TemporaryDirectory(prefix="workbook-lab-")
        scratch = pathlib.Path(self._scratch.name)
        dirs = {name: scratch / name for name in ("settings", "workspaces", "runtime", "config", "data", "ipython")}
        for path in dirs.values():
            path.mkdir()
        for relative, values in LAB_SETTINGS.items():
            target = dirs["settings"] / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(values))
        env = dict(os.environ)
        env.update(
            {
                "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
                "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
                "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
                "JUPYTER_CONFIG_DIR": str(dirs["config"]),
                # The user's data directory may hold kernels or extensions of their own;
                # this environment's (lab extensions, the python3 kernel) are still found.
                "JUPYTER_DATA_DIR": str(dirs["data"]),
                "JUPYTER_PREFER_ENV_PATH": "1",
                "IPYTHONDIR": str(dirs["ipython"]),
                "TF_CPP_MIN_LOG_LEVEL": "2",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.pop("JUPYTER_PATH", None)
        env.pop("JUPYTER_TOKEN", None)
        self.log_path = scratch / "jupyterlab.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115  (open for the server's whole life; closed in stop())
        for _attempt in range(3):  # a port found free may be taken before the server binds it
            self.port = free_port()
            # `-m jupyterlab`, not `-m jupyter lab`: the latter runs whichever `jupyter-lab`
            # script it finds, which may belong to another environment.
            command = [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.root}",
                "--LabApp.news_url=",
                # window.jupyterapp: a page that has loaded JupyterLab once opens the next notebook
                # in place (NotebookTab.open), as its file browser does, without loading it again.
                "--LabApp.expose_app_in_browser=True",
                "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
            ]
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                command.append("--ServerApp.allow_root=True")  # CI containers run as root
            self.process = subprocess.Popen(
                command,
                env=env,
                cwd=self.root,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
            self.family = [psutil.Process(self.process.pid)]
            if self._wait_until_up():
                return
            self.stop_server()
            if "already in use" not in self.log_tail():
                break
        raise RuntimeError(
            f"JupyterLab did not start within {self.startup_timeout} s; its log ends:\n" + self.log_tail()
        )

    def _wait_until_up(self):
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.api_url("status"), timeout=5) as answer:
                    if answer.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        return False

    def stop_server(self):
        """Shut the server and its kernels down; kill whatever does not go."""
        if self.process is None:
            return
        self.remember_children()
        if self.process.poll() is None:
            with contextlib.suppress(Exception):  # asks the server to stop its kernels itself
                request = urllib.request.Request(self.api_url("shutdown"), method="POST")
                urllib.request.urlopen(request, timeout=10).close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=20)
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        stop_processes(self.family)
        self.process = None

    def stop(self):
        """Stop the server (see :meth:`stop_server`) and remove the temporary directories."""
        try:
            self.stop_server()
        finally:
            if getattr(self, "_log", None) is not None:
                self._log.close()
            if self._scratch is not None:
                self.saved_log = self.log_tail()
                self._scratch.cleanup()
                self._scratch = None

    def remember_children(self):
        """Note every process the server has started so far, so none outlives it."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.process.pid).children(recursive=True):
                if child not in self.family:
                    self.family.append(child)

    def shutdown_kernels(self):
        """Shut down every kernel of this server (through its REST API), so the next notebook has the CPU."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(Exception):
            with urllib.request.urlopen(self.api_url("kernels"), timeout=10) as answer:
                kernels = json.load(answer)
            for kernel in kernels:
                request = urllib.request.Request(self.api_url(f"kernels/{kernel['id']}"), method="DELETE")
                urllib.request.urlopen(request, timeout=30).close()

    # -- addresses -----------------------------------------------------------

    def api_url(self, endpoint):
        return f"http://127.0.0.1:{self.port}/api/{endpoint}?token={self.token}"

    def lab_url(self, relative_path):
        return f"http://127.0.0.1:{self.port}/lab/tree/{relative_path}?token={self.token}&reset"

    def log_tail(self, lines=60):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, AttributeError):
            return getattr(self, "saved_log", "")


# -- driving a notebook in the page ---------------------------------------------

# Runs in the page: for each cell, its prompt and the error outputs it shows. JupyterLab
# renders an error like stderr, so a traceback is told apart by its red ANSI header; the
# saved file (see NotebookTab.save) is the authoritative check.
_CELL_STATES = """(panel) => Array.from(panel.querySelectorAll('.jp-Notebook .jp-Cell')).map((cell, index) => ({
    index,
    code: cell.classList.contains('jp-CodeCell'),
    prompt: (cell.querySelector('.jp-InputArea-prompt') || {}).textContent || '',
    // a folded worked solution shows no execution count; the cells after it use what it defines
    folded: Boolean(cell.querySelector('.jp-InputPlaceholder')),
    errors: Array.from(cell.querySelectorAll(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'))
        .filter(node => node.querySelector('.ansi-red-fg')
                && /Traceback|Error|Exception/.test(node.innerText))
        .map(node => node.innerText.slice(0, 1500)),
}))"""

PROMPT_NUMBER = re.compile(r"\[\s*(\d+)\s*\]")


def _has_run(state):
    """A code cell shows an execution count, or is a folded worked solution (which shows none)."""
    return bool(PROMPT_NUMBER.search(state["prompt"])) or state["folded"]


class NotebookTab:
    """One notebook open in JupyterLab in a Playwright page (introduced by tests/test_browser.py)."""

    def __init__(self, page, lab, relative_path, screenshots=SCREENSHOTS):
        self.page, self.lab, self.relative_path = page, lab, relative_path
        self.screenshots = pathlib.Path(screenshots)
        # The notebook's own panel: JupyterLab may restore other tabs next to it.
        self.panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").first
        self.notebook = self.panel.locator(".jp-Notebook").first

    def open(self, timeout=120):
        """Show the notebook alone in front, and wait until its kernel is idle.

        A page that has not loaded this JupyterLab yet loads it at the notebook's address. One
        that has opens the notebook in place, as the file browser's double click does
        (``docmanager:open``), so JupyterLab is loaded once for many notebooks; the tabs before
        are disposed of, not closed through the menu, where one a test changed and did not save
        would ask whether to save it. Either way, the same checks follow.
        """
        if self.page.url.startswith(f"http://127.0.0.1:{self.lab.port}/lab"):
            self.page.evaluate(
                """async path => {
                    const app = window.jupyterapp;
                    for (const widget of Array.from(app.shell.widgets('main'))) {
                        widget.dispose();
                    }
                    await app.commands.execute('docmanager:open', {path});
                }""",
                self.relative_path,
            )
        else:
            self.page.goto(self.lab.lab_url(self.relative_path), wait_until="domcontentloaded")
        return self._shown(timeout)

    def _shown(self, timeout):
        name = pathlib.PurePosixPath(self.relative_path).name
        self.current_tab.filter(has_text=name).wait_for(timeout=timeout * 1000)
        self.panel.locator(".jp-Cell").first.wait_for(timeout=timeout * 1000)
        self.dismiss_dialogs()
        self.wait_until_idle(timeout=timeout)
        return self

    @property
    def current_tab(self):
        return self.page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current")

    def dismiss_dialogs(self):
        """Accept a kernel-choice or similar dialog if one is open (the default is the right answer)."""
        dialog = self.page.locator(".jp-Dialog")
        if dialog.count():
            dialog.locator(".jp-mod-accept").first.click()

    def kernel_status(self):
        indicator = self.panel.locator(".jp-Notebook-ExecutionIndicator")
        if indicator.count() == 0:
            return None
        return indicator.first.get_attribute("data-status")

    def wait_until_idle(self, timeout=120, settle=1.0):
        """Wait until the kernel reports idle for `settle` seconds in a row."""
        deadline = time.monotonic() + timeout
        idle_since = None
        while time.monotonic() < deadline:
            status = self.kernel_status()
            if status == "idle":
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since >= settle:
                    return
            else:
                idle_since = None
            self.page.wait_for_timeout(200)
        raise TimeoutError(
            f"{self.relative_path}: kernel not idle after {timeout} s "
            f"(status {self.kernel_status()!r}); cells: {self.progress()}"
        )

    def run_all(self, attempts=3):
        """Run > Run All Cells, through the menu bar as a student would.

        Returns once some cell has started; a click that a page still settling
        swallowed is repeated (a second Run All would restart nothing: the
        first cell cannot have run yet).
        """
        for attempt in range(attempts):
            self.notebook.click(position={"x": 5, "y": 5})
            self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
            self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                if any(s["code"] and "[" in s["prompt"] and s["prompt"].strip() != "[ ]:" for s in self.cell_states()):
                    return
                self.page.wait_for_timeout(250)
            self.screenshot(f"run-all-not-started-{attempt}")
        raise TimeoutError(
            f"{self.relative_path}: Run All Cells did not start any cell "
            f"(screenshots run-all-not-started-*.png in {self.screenshots})"
        )

    def cell_states(self):
        return self.panel.evaluate(_CELL_STATES)

    def progress(self):
        states = [s for s in self.cell_states() if s["code"]]
        done = sum(_has_run(s) for s in states)
        return f"{done} of {len(states)} code cells run"

    def wait_until_all_run(self, timeout=300, on_tick=None, expected=None):
        """Wait until every code cell shows an execution count and the kernel is idle.

        Returns the seconds it took; stops early (AssertionError) at the first error output
        other than ``expected`` (ename, words), which the saved notebook's check then allows
        only in a cell tagged ``raises-exception``.
        """
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            states = [s for s in self.cell_states() if s["code"]]
            errors = [e for e in self.errors(states) if not (expected and expected[1] in e)]
            if errors:
                raise AssertionError(f"{self.relative_path}: error output:\n" + "\n".join(errors))
            if on_tick is not None:
                on_tick()
            if states and all(_has_run(s) for s in states) and self.kernel_status() == "idle":
                self.wait_until_idle(timeout=max(5, deadline - time.monotonic()))
                return time.monotonic() - started
            self.page.wait_for_timeout(500)
        raise TimeoutError(f"{self.relative_path}: not finished after {timeout} s; {self.progress()}")

    def errors(self, states=None):
        """Error outputs shown in the page, as 'cell N: text'."""
        states = states if states is not None else self.cell_states()
        return [f"cell {s['index']}: {text}" for s in states for text in s["errors"]]

    def save(self):
        """Save the notebook (Ctrl+S) and wait until JupyterLab says it is saved."""
        self.notebook.click(position={"x": 5, "y": 5})
        self.page.keyboard.press("Control+s")
        self.page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current.jp-mod-dirty").wait_for(
            state="detached", timeout=30_000
        )

    def screenshot(self, name, locator=None, around=()):
        """Save a PNG under build/screenshots and return its path.

        Of the whole page; or of one element (`locator`); or of the smallest
        box around several elements (`around`, a list of locators).
        """
        self.screenshots.mkdir(parents=True, exist_ok=True)
        path = self.screenshots / f"{name}.png"
        if locator is not None:
            locator.scroll_into_view_if_needed()
            locator.screenshot(path=path)
        elif around:
            around[0].scroll_into_view_if_needed()
            boxes = [item.bounding_box() for item in around]
            left, top = min(b["x"] for b in boxes), min(b["y"] for b in boxes)
            right = max(b["x"] + b["width"] for b in boxes)
            bottom = max(b["y"] + b["height"] for b in boxes)
            margin = 6
            self.page.screenshot(
                path=path,
                clip={
                    "x": max(left - margin, 0),
                    "y": max(top - margin, 0),
                    "width": right - left + 2 * margin,
                    "height": bottom - top + 2 * margin,
                },
            )
        else:
            self.page.screenshot(path=path)
        return path


def check():
    """Print the browser the test will use, or how to get one (exit status 1)."""
    if skip_requested():
        print(f"{SKIP_VARIABLE} is set: the end-to-end browser test will be SKIPPED on purpose.")
        return 0
    try:
        path = find_browser()
    except BrowserUnavailable as error:
        print(f"\n*** No browser for the end-to-end test ***\n{error}\n", file=sys.stderr)
        return 1
    print(f"Browser for the end-to-end test: {path}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--check"]:
        sys.exit("usage: python tests/browser_session.py --check")
    sys.exit(check())
