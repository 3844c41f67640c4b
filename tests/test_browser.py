"""End to end: the workbook in a real JupyterLab, in headless Chromium, as a student uses it.

Executing a notebook with nbclient proves its code runs; only a browser shows
that the explorer redraws when a slider moves and that the live gradient plot
is replaced in place rather than appended. Each test opens one notebook (with
its parameters turned down, copied into a temporary folder), drives the page
through JupyterLab's own menus, fails on any error output, and saves a
screenshot of every state it checks under build/screenshots/.

Every notebook runs whole once, in tests/test_notebooks.py. Here a kernel runs only
what needs a live one, so 02, 03 and 04 end at the cell under test (the explorer,
the error with its culprit, the first live figure); 00 runs whole, since what Run All
does to its folded answer is the point. How every executed notebook's figures look in
JupyterLab is tests/test_executed_in_lab.py, without running them again.

A browser is required: with none on the machine the tests fail and say how to
get one (see tests/browser_session.py); WORKBOOK_SKIP_BROWSER=1 skips them on
purpose.
"""

import contextlib
import io
import pathlib
import re

import nbformat
import pytest
from browser_session import (
    CHROMIUM_ARGS,
    SKIP_VARIABLE,
    BrowserUnavailable,
    JupyterLab,
    NotebookTab,
    descendants,
    described,
    find_browser,
    outliving,
    port_in_use,
    skip_requested,
    stop_processes,
)
from notebook_runner import EXPECTED_ERRORS, NOTEBOOKS, error_outputs, reduced_notebook

# The timeouts raise inside the test (method="signal"),
# so the session's teardown still stops JupyterLab, its kernels and the browser.
# One JupyterLab serves every test here: they stay in one worker process.
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]

ALL_NOTEBOOKS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
START, ZOO, LAB = "00_start_here.ipynb", "02_surrogate_zoo.ipynb", "04_autoencoder_lab.ipynb"

# Knobs set otherwise than notebook_runner does, per notebook. The live plot is redrawn at
# 04's own default pace (checked below against its parameters cell): the test sees the
# frames a student sees, fewer than one per step on any machine.
BROWSER_PARAMETERS = {LAB: {"refresh_seconds": 0.5}}

FINDING = "03_finding_gradient_killers.ipynb"
#: The last cell each notebook needs a live kernel for; the cells after it are not run here.
LIVE_THROUGH = {
    ZOO: lambda cell: "workbook.explore_surrogates(" in cell.source,
    FINDING: lambda cell: "raises-exception" in cell.metadata.get("tags", []),
    LAB: lambda cell: "workbook.GradientNormMonitor(" in cell.source,
}

#: A students' version, every exercise unanswered: Run All must go on to its end.
STUDENTS_VERSION = NOTEBOOKS.parent / "course" / "release" / "01_forward_and_backward" / "01_forward_and_backward.ipynb"
STUDENTS = "students_01_forward_and_backward.ipynb"

VIEWPORT = {"width": 1280, "height": 1000}
NO_GRADIENT_RGB = (0xD5, 0x5E, 0x00)  # Okabe and Ito's vermillion, the colour of the no-gradient marker


# -- fixtures ------------------------------------------------------------------


def browser_notebook(path):
    """`path` with its parameters turned down, plus this module's own overrides."""
    notebook = reduced_notebook(path)
    extra = BROWSER_PARAMETERS.get(path.name, {})
    cells = nbformat.read(path, as_version=4).cells
    defaults = next(c.source for c in cells if "parameters" in c.metadata.get("tags", []))
    for name, value in extra.items():
        assert re.search(rf"^{name} = {value!r}\b", defaults, re.M), f"{path.name}'s default {name} is not {value!r}"
    if extra:
        injected = next(c for c in notebook.cells if "injected-parameters" in c.metadata.get("tags", []))
        injected.source += "".join(f"\n{name} = {value!r}" for name, value in extra.items())
    if path.name in LIVE_THROUGH:
        last = next(i for i, cell in enumerate(notebook.cells) if LIVE_THROUGH[path.name](cell))
        notebook.cells = notebook.cells[: last + 1]
    return notebook


@pytest.fixture(scope="session")  # at most once per worker process
def browser_path():
    if skip_requested():
        pytest.skip(f"{SKIP_VARIABLE}=1 is set: the end-to-end browser test is skipped on purpose")
    try:
        return find_browser()
    except BrowserUnavailable as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="session")  # at most once per worker process
def session(browser_path, tmp_path_factory):
    """A JupyterLab serving the reduced notebooks and a headless Chromium; neither outlives the test run."""
    from playwright.sync_api import sync_playwright

    folder = tmp_path_factory.mktemp("browser-notebooks")
    for path in ALL_NOTEBOOKS:
        nbformat.write(browser_notebook(path), folder / path.name)
    nbformat.write(reduced_notebook(STUDENTS_VERSION), folder / STUDENTS)
    already_running = {p.pid for p in descendants()}
    started = []
    lab = JupyterLab(folder)
    try:
        with lab, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=browser_path, args=CHROMIUM_ARGS)
            try:
                yield lab, browser, {}  # the page the tests share, once one has loaded JupyterLab
            finally:
                lab.remember_children()
                started = [p for p in descendants() if p.pid not in already_running]
                with contextlib.suppress(Exception):
                    browser.close()
    finally:
        # Both context managers have exited; nothing they started may still run once it has had
        # time to end (Playwright's driver is told to stop and may still be on its way out).
        candidates, outlived = [*set(started) | set(lab.family)], []
        try:
            outlived = described(outliving(candidates))
        finally:  # even if the test's timeout fires while it waits
            stop_processes(candidates)
        port_open = lab.port is not None and port_in_use(lab.port)
        assert not outlived, f"processes outlived the test (now killed): {outlived}"
        assert not port_open, f"port {lab.port} still answers after JupyterLab was stopped"


@contextlib.contextmanager
def opened(session, name):
    """Notebook `name` open alone in JupyterLab; on failure a screenshot; always its kernel shut down.

    JupyterLab is loaded once, in a page the tests share: each opens its notebook in place,
    after the one before is closed. A test that fails closes the page, and the next loads a new one.
    """
    lab, browser, shared = session
    page = shared.get("page") or browser.new_context(viewport=VIEWPORT).new_page()
    shared["page"] = page
    tab = NotebookTab(page, lab, name)
    try:
        yield tab.open()
    except BaseException:
        with contextlib.suppress(Exception):
            tab.screenshot(f"FAILED-{name.removesuffix('.ipynb')}")
        shared.pop("page", None)
        with contextlib.suppress(Exception):  # the session's teardown closes the browser anyway
            page.context.close()
        raise
    finally:
        lab.remember_children()
        lab.shutdown_kernels()


def run_everything(tab, timeout, on_tick=None):
    """Run all cells through the menu; fail on any error output, in the page or in the saved file."""
    expected = EXPECTED_ERRORS.get(pathlib.PurePosixPath(tab.relative_path).name)
    tab.run_all()
    seconds = tab.wait_until_all_run(timeout=timeout, on_tick=on_tick, expected=expected)
    tab.save()
    saved = nbformat.read(tab.lab.root / tab.relative_path, as_version=4)
    errors = error_outputs(saved, expected)
    assert not errors, f"{tab.relative_path} raised: " + "; ".join(errors)
    unrun = [i for i, c in enumerate(saved.cells) if c.cell_type == "code" and not c.execution_count]
    assert not unrun, f"{tab.relative_path}: cells {unrun} have no execution count after Run All"
    print(f"{tab.relative_path}: all cells ran in {seconds:.0f} s")
    return saved


def png_pixels(png):
    from PIL import Image

    return Image.open(io.BytesIO(png)).convert("RGB")


def changed_fraction(before_png, after_png):
    """Share of pixels that differ between two screenshots (1.0 if their sizes differ)."""
    before, after = png_pixels(before_png), png_pixels(after_png)
    if before.size != after.size:
        return 1.0
    from PIL import ImageChops

    difference = ImageChops.difference(before, after).convert("L").point(lambda v: 255 if v > 16 else 0)
    return difference.histogram()[255] / (before.size[0] * before.size[1])


def pixels_near(png, colour, tolerance=40):
    """How many pixels of `png` are within `tolerance` (per channel) of `colour`."""
    import numpy as np

    pixels = np.asarray(png_pixels(png), dtype=np.int16)
    return int(np.all(np.abs(pixels - np.array(colour)) <= tolerance, axis=-1).sum())


# -- 00: the table of contents ---------------------------------------------------


@pytest.mark.timeout(180, method="signal")  # includes starting JupyterLab and Chromium
def test_start_here_shows_the_table_of_contents(session):
    lectures = {p.name for p in ALL_NOTEBOOKS if re.match(r"0[1-4]_", p.name)}
    assert len(lectures) == 4, f"expected notebooks 01 to 04, found {sorted(lectures)}"
    with opened(session, START) as tab:
        table = (
            tab.panel.locator(".jp-MarkdownCell .jp-RenderedMarkdown table")
            .filter(has=tab.page.locator("a[href*='.ipynb']"))
            .first
        )
        table.wait_for(timeout=30_000)
        tab.screenshot("00_table_of_contents", locator=table)
        in_table = rendered_links(table)
        missing = lectures - {target for _, target in in_table}
        assert not missing, f"the table of contents in {START} does not link to {sorted(missing)}: {in_table}"
        assert all(text for text, _ in in_table), f"a link in the table of contents has no text: {in_table}"
        everywhere = {target for _, target in rendered_links(tab.panel.locator(".jp-RenderedMarkdown"))}

        # Following a link opens that notebook in JupyterLab, as when a student clicks it.
        first = sorted(lectures)[0]
        table.locator(f"a[href*='{first}']").first.click()
        tab.current_tab.filter(has_text=first).wait_for(timeout=60_000)
        tab.panel.locator(".jp-MarkdownCell .jp-RenderedMarkdown h1").first.wait_for(timeout=60_000)
        tab.screenshot("00_link_opens_notebook")

        unlisted = {p.name for p in ALL_NOTEBOOKS} - {START} - everywhere
        assert not unlisted, f"{START} shows no link to {sorted(unlisted)}"
        unknown = {t for t in everywhere if t.endswith(".ipynb")} - {p.name for p in ALL_NOTEBOOKS}
        assert not unknown, f"{START} links to notebooks that do not exist: {sorted(unknown)}"


@pytest.mark.timeout(180, method="signal")
def test_start_here_keeps_its_worked_answer_folded_after_run_all(session):
    """Running a cell opens an output JupyterLab had collapsed: the answer folds itself, in its own output."""
    with opened(session, START) as tab:
        saved = run_everything(tab, timeout=150_000)
        # As saved after Run All: JupyterLab has opened the outputs it had collapsed, or not;
        # either way what the answer measured may only be shown inside a closed <details>.
        answer = next(c for c in saved.cells if "A worked answer" in c.source)
        collapsed = answer.metadata.get("jupyter", {}).get("outputs_hidden", False)
        shown = [o for o in answer.outputs if not o.get("data", {}).get("text/html", "").startswith("<details>")]
        assert collapsed or not shown, f"the worked answer is open after Run All: {shown}"
        html = "".join(o.get("data", {}).get("text/html", "") for o in answer.outputs)
        assert "cast to int32 and back" in html, "the worked answer shows nothing of what it measured"
        summary = tab.panel.get_by_text("The measured answer (click to open)")
        summary.scroll_into_view_if_needed()
        measured = tab.panel.locator(".jp-OutputArea-output details pre").filter(has_text="tf.floor")
        assert measured.count() == 1 and not measured.is_visible(), "the answer is open on the page"
        tab.screenshot("00_answer_folded_after_run_all")
        summary.click()
        measured.wait_for(state="visible", timeout=30_000)  # one click opens it, as the markdown says


def rendered_links(locator):
    """(text, file name) of every link inside `locator`, as JupyterLab rendered them."""
    links = locator.locator("a[href]").evaluate_all(
        "links => links.map(a => [a.textContent.trim(), a.getAttribute('href')])"
    )
    # JupyterLab turns a relative link into /files/NAME?_xsrf=...; keep the file name.
    return [(text, re.sub(r"[?#].*$", "", href).rsplit("/", 1)[-1]) for text, href in links]


# -- 02: the surrogate explorer redraws when a slider moves ----------------------


@pytest.mark.timeout(180, method="signal")
def test_surrogate_explorer_redraws_when_a_slider_moves(session):
    with opened(session, ZOO) as tab:
        run_everything(tab, timeout=300)
        explorer = tab.panel.locator(".workbook-explorer").first
        explorer.scroll_into_view_if_needed()
        plot = explorer.locator("img.workbook-explorer-plot, .workbook-explorer-plot img").first
        plot.wait_for(timeout=30_000)

        # The entry shown first may have no parameter: pick the first entry that has a slider.
        dropdown = explorer.locator("select").first
        options = dropdown.locator("option").evaluate_all("options => options.map(o => o.value)")
        sliders = explorer.locator(".widget-slider")
        for option in options:
            if sliders.count():
                break
            if option == dropdown.input_value():
                continue
            source = plot.get_attribute("src")
            dropdown.select_option(option)
            wait_for_new_src(tab, plot, source)
        assert sliders.count(), f"no entry of the explorer has a slider; options: {options}"
        wait_until_drawn(tab, plot)

        readout = sliders.first.locator(".widget-readout")
        value_before, src_before = readout.inner_text(), plot.get_attribute("src")
        plot_before = plot.screenshot()
        tab.screenshot("02_explorer_before", locator=explorer)

        handle = sliders.first.locator(".noUi-handle").first
        track = sliders.first.locator(".noUi-target").first
        box, track_box = handle.bounding_box(), track.bounding_box()
        handle_x, handle_y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        # Drag towards whichever end is further away, by a third of the track.
        room_right = track_box["x"] + track_box["width"] - handle_x
        distance = track_box["width"] / 3 * (1 if room_right > track_box["width"] / 2 else -1)
        tab.page.mouse.move(handle_x, handle_y)
        tab.page.mouse.down()
        tab.page.mouse.move(handle_x + distance, handle_y, steps=10)
        tab.page.mouse.up()

        wait_for_new_src(tab, plot, src_before)
        wait_until_drawn(tab, plot)
        value_after = readout.inner_text()
        plot_after = plot.screenshot()
        tab.screenshot("02_explorer_after", locator=explorer)
        assert value_after != value_before, f"the slider did not move (readout {value_before!r})"
        status = explorer.locator(".widget-html").last.inner_text()
        assert "Could not draw" not in status, status
        # under the plot, words: the entry, its parameters' values as the sliders set them, its source
        name, value = dropdown.input_value(), readout.inner_text()
        assert "<" not in status and status.startswith(f"{name} with ") and f"= {value}" in status, status
        share = changed_fraction(plot_before, plot_after)
        assert share > 0.001, (
            f"moving the slider from {value_before} to {value_after} changed only {share:.3%} of the plot"
        )
        assert explorer.locator("img").count() == 1, "the explorer should hold one plot, replaced in place"
        print(f"explorer: slider {value_before} -> {value_after}, {share:.2%} of the plot's pixels changed")


def wait_for_new_src(tab, image, old_src, timeout=60_000):
    tab.page.wait_for_function(
        "([img, old]) => img.getAttribute('src') && img.getAttribute('src') !== old",
        arg=[image.element_handle(), old_src],
        timeout=timeout,
    )


def wait_until_drawn(tab, image, timeout=30_000):
    tab.page.wait_for_function(
        "img => img.complete && img.naturalWidth > 0", arg=image.element_handle(), timeout=timeout
    )


# -- 04: the live gradient-norm figure is replaced in place ----------------------

# Runs in the page before Run All: for every cell, counts the images put into its
# outputs (new <img> or a new src) and the most images its outputs held at once.
_WATCH_IMAGES = """(panel) => {
    const cells = () => Array.from(panel.querySelectorAll('.jp-Notebook .jp-Cell'));
    const seen = window.workbookImages = {};
    const note = (node) => {
        const cell = node.closest && node.closest('.jp-Cell');
        if (!cell) return;
        const index = cells().indexOf(cell);
        const entry = seen[index] = seen[index] || {shown: 0, most: 0, monitor: false};
        entry.shown += 1;
    };
    const observer = new MutationObserver(records => {
        for (const record of records) {
            if (record.type === 'attributes' && record.target.tagName === 'IMG') note(record.target);
            for (const node of record.addedNodes || []) {
                if (node.nodeType !== 1) continue;
                for (const img of node.tagName === 'IMG' ? [node] : node.querySelectorAll('img')) note(img);
            }
        }
        cells().forEach((cell, index) => {
            const entry = seen[index];
            if (!entry) return;
            const area = cell.querySelector('.jp-OutputArea');
            entry.most = Math.max(entry.most, area ? area.querySelectorAll('img').length : 0);
            entry.monitor = entry.monitor || !!cell.querySelector('.workbook-gradient-monitor');
        });
    });
    observer.observe(panel, {subtree: true, childList: true, attributes: true, attributeFilter: ['src']});
}"""


@pytest.mark.timeout(240, method="signal")
def test_live_gradient_plot_updates_in_place(session):
    with opened(session, LAB) as tab:
        tab.panel.evaluate(_WATCH_IMAGES)
        live_shots = []

        def during_training():
            images = tab.page.evaluate("() => window.workbookImages")
            for index, entry in images.items():
                if entry["monitor"] and entry["shown"] >= 2 and not live_shots:
                    cell = tab.panel.locator(".jp-Notebook .jp-Cell").nth(int(index))
                    with contextlib.suppress(Exception):  # training may end under our feet
                        live_shots.append(tab.screenshot("04_live_during_training", locator=cell))

        run_everything(tab, timeout=200, on_tick=during_training)
        images = tab.page.evaluate("() => window.workbookImages")
        monitored = sorted((int(i), e) for i, e in images.items() if e["monitor"])
        assert monitored, f"no cell shows a .workbook-gradient-monitor caption; images seen: {images}"
        index, entry = monitored[0]  # the first training cell: the integer-cast bottleneck
        cell = tab.panel.locator(".jp-Notebook .jp-Cell").nth(index)
        replacements = entry["shown"] - 1
        assert replacements >= 2, (
            f"the live figure of cell {index} was drawn {entry['shown']} times; expected the 'waiting' frame, "
            f"at least one frame during training, and the last one"
        )
        assert entry["most"] == 1, (
            f"cell {index} held up to {entry['most']} images at once: the live figure was appended, "
            f"not replaced in place"
        )
        outputs = cell.locator(".jp-OutputArea")
        assert outputs.locator("img").count() == 1

        caption = cell.locator(".workbook-gradient-monitor").first
        caption.scroll_into_view_if_needed()
        assert caption.is_visible(), "the gradient-monitor caption is not visible"
        text = caption.inner_text()
        assert re.search(r"encoder[^;]*: no gradient", text), f"the caption does not mark the dead encoder: {text!r}"
        assert re.search(r"encoder: no gradient \(cut by Cast at cell (In\[)?\d+\]?, line 5", text), (
            f"the caption does not name the op that cut the encoder's gradient: {text!r}"
        )
        figure = outputs.locator("img").first
        figure.scroll_into_view_if_needed()
        red = pixels_near(figure.screenshot(), NO_GRADIENT_RGB)
        tab.screenshot("04_dead_encoder_marker", locator=cell)
        tab.screenshot("04_live_figure", around=[figure, caption])
        tab.screenshot("04_figure_names_the_op", locator=figure)
        assert red > 200, f"the live figure shows only {red} pixels of the red no-gradient marker"
        print(
            f"live figure: cell {index}, replaced {replacements} times in place; "
            f"{red} red marker pixels; caption: {text}"
        )


# -- 03: the error, and under it the op and the line that cut the gradient ----------------


@pytest.mark.timeout(600, method="signal")
def test_the_no_gradients_error_shows_its_culprit_under_it(session):
    with opened(session, FINDING) as tab:
        run_everything(tab, timeout=540)
        cell = (
            tab.panel.locator(".jp-Notebook .jp-CodeCell")
            .filter(has_text="No gradients provided for any variable")
            .filter(has_text="The op that cut the gradient")
            .first
        )
        cell.scroll_into_view_if_needed()
        text = cell.inner_text()
        error_at = text.index("No gradients provided for any variable")
        culprit_at = text.index("The op that cut the gradient")
        assert error_at < culprit_at and "Cast" in text[culprit_at:], text[-2000:]
        tab.page.set_viewport_size(
            {**VIEWPORT, "height": max(VIEWPORT["height"], int(cell.bounding_box()["height"]) + 300)}
        )
        cell.scroll_into_view_if_needed()
        tab.screenshot("03_error_with_culprit", locator=cell)
        tab.page.set_viewport_size(VIEWPORT)


# -- a students' version: an unanswered exercise does not stop Run All ------------------------


@pytest.mark.timeout(600, method="signal")
def test_run_all_goes_on_past_the_unanswered_exercises_of_a_students_version(session):
    with opened(session, STUDENTS) as tab:
        tab.run_all()
        # Run All sends every cell at once; the kernel is idle once it has run them, or stopped at an error
        tab.wait_until_idle(timeout=540, settle=5.0)
        tab.save()
    saved = nbformat.read(session[0].root / STUDENTS, as_version=4)
    code = [(i, c) for i, c in enumerate(saved.cells) if c.cell_type == "code"]
    unrun = [i for i, c in code if not c.execution_count]
    assert not unrun, f"Run All stopped: cells {unrun} did not run"
    raised = [i for i, c in code if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert raised, "the unanswered exercises raised nothing"
    untagged = [i for i in raised if "raises-exception" not in saved.cells[i].metadata.get("tags", [])]
    assert not untagged, f"cells {untagged} raised without the tag that lets Run All go on"
    print(f"{STUDENTS}: all {len(code)} code cells ran; the exercise cells {raised} raised, as unanswered")
