"""Every executed notebook as JupyterLab shows it: every figure there, and its text as large as the page's.

The notebooks are not run again here: JupyterLab opens the copies tests/test_notebooks.py
executed earlier in the same `make test` (taken by their execution key, as the book takes
them; one whose copy is missing or stale is executed first), one after another in one page:
JupyterLab is loaded once. The assignment is shown as its
solution version; its students' version draws with the same code. What needs a live kernel, the
explorer's slider, the live figure and the error in place, is in tests/test_browser.py.

For each figure the page shows, the text as shown is the smallest text the PNG records
(``workbook.core.figures.SMALLEST_TEXT_KEY``, in its own pixels) times the ratio of its
shown width to its own: it must be at least the size of the page's body text, measured in
the page, to the half pixel (matplotlib's default 10 pt at 100 dpi is 13.9 px). A figure
drawn by a notebook's own pyplot code records nothing; it is drawn at matplotlib's default
sizes and must be shown at its own size. Screenshots: build/screenshots/lab_<notebook>_figure_<n>.png.
"""

import base64
import contextlib
import importlib.util
import io
import pathlib
import shutil

import pytest
from browser_session import (
    CHROMIUM_ARGS,
    SCREENSHOTS,
    SKIP_VARIABLE,
    BrowserUnavailable,
    JupyterLab,
    NotebookTab,
    find_browser,
    skip_requested,
)
from notebook_runner import NEWEST_END

if not NEWEST_END:  # the oldest end has no browser: JupyterLab is driven at the newest end only
    pytest.skip("the executed notebooks are opened in JupyterLab at the newest end", allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("build_book", ROOT / "scripts" / "build_book.py")
build_book = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_book)

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
VIEWPORT = {"width": 1280, "height": 1000}
#: How far below the body text a figure's text may come out from rounding (10 pt at 100 dpi is 13.9 px).
ROUNDING_PX = 0.5

pytestmark = pytest.mark.xdist_group("browser")


@pytest.fixture(scope="module")
def lab_and_browser(tmp_path_factory):
    """A JupyterLab serving this run's executed notebooks, and a headless Chromium."""
    if skip_requested():
        pytest.skip(f"{SKIP_VARIABLE}=1 is set: the browser test is skipped on purpose")
    try:
        browser_path = find_browser()
    except BrowserUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    from playwright.sync_api import sync_playwright

    # This run's executed copies, taken by their key as the book takes them (one missing or stale is executed).
    chapters = [{"name": path.stem, "shown": path} for path in NOTEBOOKS]
    out = ROOT / "build" / "lab-view"
    executed, _ran = build_book.execute_all(chapters, reduced=True, reuse=build_book.TEST_RUN_EXECUTED, out=out)
    folder = tmp_path_factory.mktemp("executed-notebooks")
    for path in NOTEBOOKS:
        shutil.copy(out / "executed" / "reduced" / path.name, folder / path.name)
    with JupyterLab(folder) as lab, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path, args=CHROMIUM_ARGS)
        try:
            # One page for every notebook: JupyterLab is loaded once, each notebook opened in place.
            page = browser.new_context(viewport=VIEWPORT).new_page()
            yield lab, page, {name: notebook for name, (notebook, _seconds) in executed.items()}
        finally:
            lab.shutdown_kernels()
            with contextlib.suppress(Exception):
                browser.close()


def png_of(source):
    """(smallest text in px or None, natural width) of a data: URL holding a PNG."""
    from PIL import Image

    from workbook.core.figures import SMALLEST_TEXT_KEY

    image = Image.open(io.BytesIO(base64.b64decode(source.split(",", 1)[1])))
    recorded = image.info.get(SMALLEST_TEXT_KEY)
    return (float(recorded) if recorded else None), image.size[0]


def image_outputs(notebook):
    return sum("image/png" in output.get("data", {}) for cell in notebook.cells for output in cell.get("outputs", []))


@pytest.mark.browser
@pytest.mark.notebook
@pytest.mark.timeout(600, method="signal")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_figure_is_shown_with_text_as_large_as_the_page(lab_and_browser, path):
    lab, page, executed = lab_and_browser
    name = path.name
    try:
        tab = NotebookTab(page, lab, name).open()
        body = tab.panel.locator(".jp-RenderedMarkdown p").first.evaluate(
            "p => parseFloat(getComputedStyle(p).fontSize)"
        )
        images = tab.panel.locator(".jp-OutputArea-output img")
        assert images.count() == image_outputs(executed[path.stem]), (
            f"{name}: the page shows {images.count()} figures, the executed notebook holds "
            f"{image_outputs(executed[path.stem])}"
        )
        too_small = []
        for number in range(images.count()):
            image = images.nth(number)
            image.scroll_into_view_if_needed()
            tab.page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle())
            shown, height = image.evaluate("i => [i.getBoundingClientRect().width, i.getBoundingClientRect().height]")
            smallest, natural = png_of(image.get_attribute("src"))
            tab.page.set_viewport_size({**VIEWPORT, "height": max(VIEWPORT["height"], int(height) + 300)})
            image.scroll_into_view_if_needed()
            tab.screenshot(f"lab_{path.stem}_figure_{number + 1}", locator=image)
            tab.page.set_viewport_size(VIEWPORT)
            scale = shown / natural
            if smallest is None:  # pyplot's own figure, at matplotlib's default sizes: shown at its own size
                if scale < 0.99:
                    too_small.append(f"figure {number + 1} (pyplot's) shown at {scale:.2f} of its size")
            elif smallest * scale < body - ROUNDING_PX:
                too_small.append(
                    f"figure {number + 1}: smallest text {smallest:.1f} px x {scale:.2f} = {smallest * scale:.1f} px"
                )
        assert not too_small, (
            f"{name}: text smaller than the page's {body:.0f} px body text: {too_small} "
            f"(screenshots in {SCREENSHOTS}/lab_{path.stem}_figure_*.png)"
        )
    finally:
        lab.shutdown_kernels()


def test_a_figure_holds_its_recorded_text_size_in_a_data_url():
    """The reading above, against a PNG made here with a known smallest text (10 pt at 72 dpi is 10 px)."""
    from workbook.core.figures import figure_png, new_figure

    figure = new_figure(figsize=(3, 2), dpi=72)
    figure.add_subplot().set_title("ten points", fontsize=10)
    source = "data:image/png;base64," + base64.b64encode(figure_png(figure)).decode()
    assert png_of(source) == (10.0, 216)


#: Notebook 03's gradient reports, read where a student reads them: JupyterLab at 1280 px with the
#: file browser open beside the notebook, and at a phone's 390 px.
FINDER = next(path for path in NOTEBOOKS if path.stem.startswith("03_"))

# For each report on the page: [table's right edge, output area's right edge, the area's scroll
# width and client width, findings, full-width fix lines].
_REPORT_FIT = """report => {
    const area = report.closest('.jp-OutputArea-output');
    const table = report.querySelector('table');
    const right = table ? table.getBoundingClientRect().right : report.getBoundingClientRect().right;
    return [right, area.getBoundingClientRect().right, area.scrollWidth, area.clientWidth,
            report.querySelectorAll('tr.culprit, tr.break').length,
            report.querySelectorAll('tr.culprit-fix > td[colspan], tr.break-fix > td[colspan]').length];
}"""


def report_outputs(notebook):
    return sum(
        "workbook-gradient-report" in output.get("data", {}).get("text/html", "")
        for cell in notebook.cells
        for output in cell.get("outputs", [])
    )


@pytest.mark.browser
@pytest.mark.notebook
@pytest.mark.timeout(600, method="signal")
@pytest.mark.parametrize("width", [1280, 390])
def test_every_gradient_report_is_read_whole_beside_the_file_browser_and_on_a_phone(lab_and_browser, width):
    lab, page, executed = lab_and_browser
    try:
        tab = NotebookTab(page, lab, FINDER.name).open()  # at 1280 px: a phone's layout hides the kernel's status
        page.set_viewport_size({**VIEWPORT, "width": width})
        if width > 1000:  # the file browser open beside the notebook, as JupyterLab starts
            page.evaluate("() => window.jupyterapp.shell.activateById('filebrowser')")
            page.locator("#filebrowser").wait_for(state="visible")
        reports = tab.panel.locator(".workbook-gradient-report")
        assert reports.count() == report_outputs(executed[FINDER.stem]) > 0
        cut = []
        for number in range(reports.count()):
            report = reports.nth(number)
            report.scroll_into_view_if_needed()
            right, area_right, _scroll_width, _client_width, findings, fixes = report.evaluate(_REPORT_FIT)
            if right > area_right + 1:  # its table, the fix lines with it, ends inside the output area
                cut.append(f"report {number + 1}: {right:.0f} px wide in an area ending at {area_right:.0f} px")
                tab.screenshot(f"lab_report_{width}px_{number + 1}", locator=report)
            assert fixes == findings, f"report {number + 1}: {findings} findings, {fixes} full-width fix lines"
        assert not cut, f"at {width} px: " + "; ".join(cut)
    finally:
        page.set_viewport_size(VIEWPORT)
        lab.shutdown_kernels()
