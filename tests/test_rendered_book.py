"""The book (`make book`): every output of every notebook on its page, and a site that works.

The site is built once for this module by scripts/build_book.py with the test suite's
turned-down parameters, taking the notebooks tests/test_notebooks.py executed in the same
run where nothing changed since (only the assignment's student version, which that test
does not run, is executed here). Each check compares the pages with an independent
answer: the executed notebooks themselves, the repository's files, or what a browser
shows. The browser test opens every page in headless Chromium and keeps a screenshot of
each under build/screenshots/book_*.png.
"""

import base64
import contextlib
import functools
import http.server
import importlib.util
import itertools
import pathlib
import re
import sys
import threading
import urllib.parse

import nbformat
import numpy as np
import pytest
from notebook_runner import REDUCED_PARAMETERS

if sys.version_info < (3, 11):
    pytest.skip("the book is built with Sphinx 9, which needs Python 3.11 or newer", allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("build_book", ROOT / "scripts" / "build_book.py")
build_book = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_book)

OUT = ROOT / "build" / "book-test"
CHAPTERS = build_book.chapters()
NAMES = [chapter["name"] for chapter in CHAPTERS]
PAGE_IDS = ["index", *NAMES]

# Building (about a minute when the notebooks come from the test run) is charged to the first test.
# One worker builds the site and runs every check of it (JupyterLab's view runs beside it).
pytestmark = [pytest.mark.notebook, pytest.mark.timeout(900), pytest.mark.xdist_group("book")]


@pytest.fixture(scope="module")
def site():
    return build_book.build(reduced=True, reuse=build_book.TEST_RUN_EXECUTED, out=OUT)


def executed(chapter):
    """The executed notebook the page was made from (the build's own copy, before any change for the page)."""
    path = OUT / "executed" / "reduced" / chapter["shown"].name
    return nbformat.read(path, as_version=4)


def page(site, name):
    from bs4 import BeautifulSoup

    return BeautifulSoup((site["html"] / f"{name}.html").read_text(), "html.parser")


def words(text):
    return re.sub(r"\s+", " ", re.sub(r"\x1b\[[0-9;]*m", "", text)).strip()


def code_cells(notebook):
    return [
        c for c in notebook.cells if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])
    ]


def chapter(name):
    return next(c for c in CHAPTERS if c["name"] == name)


# -- what is on the pages ---------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_printed_result_table_and_figure_is_on_the_page(site, name):
    notebook, html = executed(chapter(name)), page(site, name)
    cells = html.select("div.cell")
    shown = words(" ".join(cell.get_text(" ") for cell in cells))
    images, missing = 0, []
    for cell in code_cells(notebook):
        for output in cell.outputs:
            data = output.get("data", {})
            if output.output_type == "stream" and output.name == "stdout":
                texts = output.text.splitlines()
            elif "image/png" in data or "application/vnd.jupyter.widget-view+json" in data:
                images += 1
                continue
            elif "text/html" in data:
                from bs4 import BeautifulSoup

                texts = [BeautifulSoup(data["text/html"], "html.parser").get_text(" ")]
            elif "text/markdown" in data:
                texts = [re.sub(r"[|*`-]+", " ", data["text/markdown"])]
            elif "text/plain" in data and output.output_type == "execute_result":
                texts = data["text/plain"].splitlines()
            else:
                continue
            missing += [line for line in map(words, texts) if line and line not in shown]
    assert not missing, f"{name}: printed results missing from the page: {missing[:5]}"
    on_page = sum(len(cell.select("div.cell_output img")) for cell in cells)
    assert on_page == images, f"{name}: the notebook shows {images} figures, its page {on_page}"
    print(f"{name}: {images} figures and every printed line on the page")


def test_the_live_gradient_norm_figure_is_its_last_frame(site):
    lab = next(c for c in CHAPTERS if "autoencoder_lab" in c["name"])
    notebook, html = executed(lab), page(site, lab["name"])
    # How many records the first monitor made, as the notebook prints them after training.
    printed = " ".join(o.get("text", "") for cell in notebook.cells for o in cell.get("outputs", []))
    records = int(re.search(r"GradientNormHistory\((\d+) records", printed).group(1))
    caption = html.select_one(".workbook-gradient-monitor")
    assert caption is not None, "the page shows no live gradient-norm caption"
    step = int(re.search(r"at step (\d+)", caption.get_text()).group(1))
    last = REDUCED_PARAMETERS["every"] * (records - 1)
    assert step == last, f"the live figure shows step {step}; its last record is step {last}"
    figure = caption.find_previous("img")
    assert "Gradient norms at step" in figure["alt"], figure["alt"]
    final_png = next(
        o["data"]["image/png"]
        for c in notebook.cells
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {}) and "Gradient norms" in o["data"].get("text/plain", "")
    )
    assert (site["html"] / figure["src"]).read_bytes() == base64.b64decode(final_png)


def test_the_explorer_is_its_picture_with_a_note_that_it_is_interactive(site):
    zoo = next(c for c in CHAPTERS if "surrogate_zoo" in c["name"])
    notebook, html = executed(zoo), page(site, zoo["name"])
    state = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    image = next(m for m in state.values() if m["model_name"] == "ImageModel")
    note = html.find(string=re.compile("interactive explorer as it first appears"))
    assert note is not None, "no note that the explorer is interactive in JupyterLab"
    picture = note.find_previous("img")
    assert picture["alt"].startswith("Picture of the interactive explorer")
    assert (site["html"] / picture["src"]).read_bytes() == base64.b64decode(image["buffers"][0]["data"])
    text = str(html)
    assert "widget-view+json" not in text and "html-manager" not in text and "require.js" not in text


@pytest.mark.parametrize("name", NAMES)
def test_folded_cells_stay_folded(site, name):
    source = nbformat.read(chapter(name)["shown"], as_version=4)
    folded = [c for c in source.cells if c.metadata.get("jupyter", {}).get("source_hidden")]
    html = page(site, name)
    closed = [d for d in html.select("div.cell details.hide") if not d.has_attr("open")]
    for cell in folded:
        first = words(cell.source.splitlines()[0])
        assert any(first in words(d.get_text()) for d in closed), f"{name}: {first!r} is not folded on the page"
    print(f"{name}: {len(folded)} folded cells, folded on the page")


def test_the_assignment_is_the_student_version(site):
    graded = [c for c in CHAPTERS if c["graded"]]
    assert graded, "no graded assignment among the chapters"
    for assignment in graded:
        text = page(site, assignment["name"]).get_text("\n")
        instructor = nbformat.read(build_book.NOTEBOOKS / assignment["shown"].name, as_version=4)
        solutions = []
        for cell in instructor.cells:
            solutions += re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.DOTALL)
        lines = {line.strip() for block in solutions for line in block.splitlines() if len(line.strip()) > 20}
        student = nbformat.read(assignment["shown"], as_version=4)
        lines -= {line.strip() for cell in student.cells for line in cell.source.splitlines()}
        assert lines, "the instructor's solutions have no line of their own to look for"
        leaked = [line for line in lines if line in text]
        assert not leaked, f"{assignment['name']}: the page shows the solution: {leaked[:3]}"
        assert "raise NotImplementedError()" in text and "BEGIN HIDDEN TESTS" not in text
        assert "as students receive it" in text


# -- links, buttons, downloads -------------------------------------------------------


def repository_path(url):
    """The repository file a GitHub, Colab or Binder link opens, or None for any other link."""
    for prefix in (build_book.GITHUB, build_book.COLAB, build_book.BINDER):
        if url.startswith(prefix):
            return urllib.parse.unquote(url[len(prefix) :].split("#")[0])
    return None


@pytest.mark.parametrize("name", NAMES)
def test_each_chapter_opens_the_students_version_in_colab_binder_and_download(site, name):
    html, student = page(site, name), chapter(name)["student"]
    expected = student.relative_to(ROOT).as_posix()
    for kind in ("colab", "binder"):
        links = html.select(f"a.book-{kind}")
        assert len(links) == 1, f"{name}: expected one {kind} button, found {len(links)}"
        assert repository_path(links[0]["href"]) == expected, links[0]["href"]
    if (build_book.RELEASE / name).exists():
        assert expected.startswith("course/release/"), f"{name}: the buttons open {expected}, with solutions"
    download = html.select_one("a.download[href$='.ipynb']")
    assert download is not None, f"{name}: no download link"
    assert (site["html"] / download["href"]).read_bytes() == student.read_bytes()
    landing = page(site, "index")
    row = landing.select_one(f"table a[href='{name}.html']").find_parent("tr")
    assert {repository_path(a["href"]) for a in row.select("a[href^='https://']")} == {expected}
    assert (site["html"] / row.select_one("a.download")["href"]).read_bytes() == student.read_bytes()


def test_the_landing_page_says_what_each_chapter_teaches_and_how_long_it_takes(site):
    landing = page(site, "index")
    rows = landing.select("table tbody tr")
    assert [row.select_one("a")["href"] for row in rows] == [f"{name}.html" for name in NAMES]
    for chapter_row, row in zip(CHAPTERS, rows, strict=True):
        cells = [words(td.get_text(" ")) for td in row.select("td")]
        assert chapter_row["title"] in cells[1]
        if chapter_row["time"]:
            assert re.match(r"About (\d+ minutes|an hour|\d+ hours)", cells[2]), cells


def resolves(html, name, href):
    """True if a link within the site leads to a file that exists, and to an anchor on it that does."""
    path, _, anchor = href.partition("#")
    file = (html / path) if path else html / f"{name}.html"
    if not file.is_file():
        return False
    return not anchor or file.suffix != ".html" or f'id="{anchor}"' in file.read_text()


@pytest.mark.parametrize("name", PAGE_IDS)
def test_no_link_is_broken(site, name):
    html, broken = page(site, name), []
    for link in html.select("a[href]"):
        href = link["href"]
        target = repository_path(href)
        if target is not None:
            if not (ROOT / target).exists():
                broken.append(href)
        elif not re.match(r"^[a-z]+:", href) and not resolves(site["html"], name, href):
            broken.append(href)
    for image in html.select("img[src]"):
        if not (site["html"] / image["src"]).is_file():
            broken.append(image["src"])
    assert not broken, f"{name}: broken links or images: {broken}"


# -- accessibility -------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_figure_has_alt_text_that_says_what_it_shows(site, name):
    """Alt text says what is drawn (the figure's own words, carried in its PNG) before the point it makes."""
    from PIL import Image

    html = page(site, name)
    figures = [img for cell in html.select("div.cell_output") for img in cell.select("img")]
    alts = [img.get("alt", "") for img in figures]
    uninformative = [alt for alt in alts if len(alt.split()) < 8 or "<" in alt or "object" in alt]
    assert not uninformative, f"{name}: alt text that says nothing: {uninformative}"
    assert len(set(alts)) == len(alts), f"{name}: two figures share one alt text"
    for img in figures:
        with Image.open(site["html"] / img["src"]) as png:
            drawn = png.text.get("Description", "")
        drawn, alt = " ".join(drawn.split()), " ".join(img["alt"].split())  # an attribute's line breaks are spaces
        assert drawn in alt, f"{name}: the alt text {alt!r} does not say what is drawn: {drawn!r}"


# Colour-vision deficiencies simulated at full severity (Machado, Oliveira and Fernandes 2009,
# as colorspacious implements them), and the least distance in CAM02-UCS that two plotted
# colours must keep under each: the Okabe-Ito palette, made for colour-blind readers, keeps
# 11.0 or more under all three; matplotlib's tab10 falls to 1.6 (orange and green, protanopia).
DEFICIENCIES = ("deuteranomaly", "protanomaly", "tritanomaly")
LEAST_DISTANCE = 10.0
# Shades closer than this for normal vision are one colour drawn lighter (a fill, an edge's blend).
SAME_COLOUR = 10.0
OKABE_ITO = ["#e69f00", "#56b4e9", "#009e73", "#f0e442", "#0072b2", "#d55e00", "#cc79a7", "#000000"]
TAB10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def rgb(hexes):
    return np.array([[int(h[k : k + 2], 16) for k in (1, 3, 5)] for h in hexes]) / 255.0


def hex_of(colour):
    return "#" + "".join(f"{round(channel * 255):02x}" for channel in colour)


def plotted_colours(png, least_pixels=60):
    """The colours a figure's curves, bars and markers are drawn in (greys left out), one per colour.

    Each exact RGB value of at least `least_pixels` pixels counts; shades of one colour
    (closer than SAME_COLOUR for normal vision, or the colour seen through on white) count once,
    as their most saturated shade.
    """
    from colorspacious import cspace_convert
    from PIL import Image

    pixels = np.asarray(Image.open(png).convert("RGB")).reshape(-1, 3).astype(int)
    saturated = pixels[(pixels.max(axis=1) - pixels.min(axis=1)) > 40]
    colours, counts = np.unique(saturated, axis=0, return_counts=True)
    colours, counts = colours[counts >= least_pixels] / 255.0, counts[counts >= least_pixels]
    ucs = cspace_convert(colours, "sRGB1", "CAM02-UCS")
    kept = []
    for index in np.argsort(-(colours.max(axis=1) - colours.min(axis=1))):  # the purest shade of each first
        if not any(
            np.linalg.norm(ucs[index] - ucs[other]) < SAME_COLOUR or on_white(colours[index], colours[other])
            for other in kept
        ):
            kept.append(index)
    return colours[kept]


def on_white(shade, colour, tolerance=0.03):
    """True if `shade` is `colour` drawn partly transparent on white or on a grey (a fill, an edge's
    anti-aliasing, a curve drawn over a grey grid or dashed line): shade = opacity * colour + a grey."""
    system = np.column_stack([colour, np.ones(3)])  # unknowns: the opacity, and (1 - opacity) * the grey's level
    (opacity, grey), *_ = np.linalg.lstsq(system, shade, rcond=None)
    fits = np.abs(system @ [opacity, grey] - shade).max() < tolerance
    return bool(fits and 0 < opacity <= 1 + tolerance and -tolerance <= grey <= 1 - opacity + tolerance)


def closest_pair(colours, deficiency):
    """(distance, i, j): the two colours closest in CAM02-UCS as a reader with `deficiency` sees them."""
    from colorspacious import cspace_convert

    seen = cspace_convert(colours, {"name": "sRGB1+CVD", "cvd_type": deficiency, "severity": 100}, "sRGB1")
    ucs = cspace_convert(np.clip(seen, 0, 1), "sRGB1", "CAM02-UCS")
    pairs = itertools.combinations(range(len(colours)), 2)
    return min(((float(np.linalg.norm(ucs[i] - ucs[j])), i, j) for i, j in pairs), default=(np.inf, 0, 0))


def merging_colours(png):
    """Every (deficiency, colour, colour, distance) of a figure whose colours come closer than LEAST_DISTANCE."""
    colours, found = plotted_colours(png), []
    for deficiency in DEFICIENCIES if len(colours) > 1 else ():
        distance, i, j = closest_pair(colours, deficiency)
        if distance < LEAST_DISTANCE:
            found.append((deficiency, hex_of(colours[i]), hex_of(colours[j]), round(distance, 1)))
    return found


@pytest.mark.parametrize("name", NAMES)
def test_plotted_colours_stay_apart_for_colour_blind_readers(site, name):
    figures = page(site, name).select("div.cell_output img")
    failures = {img["src"]: found for img in figures if (found := merging_colours(site["html"] / img["src"]))}
    assert not failures, f"{name}: colours that merge for colour-blind readers: {failures}"
    print(f"{name}: the colours of {len(figures)} figures stay apart under {', '.join(DEFICIENCIES)}")


def test_the_colour_check_passes_a_palette_for_colour_blind_readers_and_fails_tab10():
    assert all(closest_pair(rgb(OKABE_ITO), d)[0] >= LEAST_DISTANCE for d in DEFICIENCIES)
    assert closest_pair(rgb(TAB10), "protanomaly")[0] < LEAST_DISTANCE
    # Red against green: apart for tritanopes, merged for deuteranopes.
    red_green = rgb(["#d62728", "#2ca02c"])
    assert closest_pair(red_green, "deuteranomaly")[0] < LEAST_DISTANCE <= closest_pair(red_green, "tritanomaly")[0]


def test_the_colours_of_a_figure_are_found(tmp_path):
    # Two thick curves and a lighter fill of the first on white, with grey grid lines and text.
    from matplotlib.figure import Figure

    figure = Figure(figsize=(4, 3), dpi=90)
    ax = figure.subplots()
    x = np.linspace(0, 1, 200)
    ax.fill_between(x, 0, x, color="#0072b2", alpha=0.3)  # far from the curve's own colour, but its shade
    ax.plot(x, x, color="#0072b2", lw=3)
    ax.plot(x, 1 - x, color="#d55e00", lw=3)
    ax.grid(True)
    ax.set_title("two curves")
    figure.savefig(tmp_path / "figure.png")
    assert sorted(map(hex_of, plotted_colours(tmp_path / "figure.png"))) == ["#0072b2", "#d55e00"]


# -- in a browser ----------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def served(folder):
    """The site at http://127.0.0.1:PORT/, as a static host serves it (search fetches the pages)."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.browser
@pytest.mark.timeout(600, method="signal")
def test_every_page_works_in_a_browser(site):
    from browser_session import CHROMIUM_ARGS, SCREENSHOTS, find_browser, skip_requested
    from playwright.sync_api import sync_playwright

    if skip_requested():
        pytest.skip("WORKBOOK_SKIP_BROWSER=1 is set: the browser test is skipped on purpose")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with served(site["html"]) as address, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_browser(), args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            problems = []
            tab.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
            tab.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            tab.on("requestfailed", lambda r: problems.append(f"failed: {r.url}"))
            tab.on("response", lambda r: r.status >= 400 and problems.append(f"{r.status}: {r.url}"))
            for name in PAGE_IDS:
                check_page(tab, address, name, SCREENSHOTS)
            search(tab, address, SCREENSHOTS)
            assert not problems, "\n".join(problems)
        finally:
            browser.close()


def check_page(tab, address, name, screenshots):
    """Open one page: every image loads and shows; Tab reaches every heading and every fold."""
    tab.goto(f"{address}{name}.html")
    tab.wait_for_load_state("load")
    tab.screenshot(path=screenshots / f"book_{name}.png")
    images = tab.locator("article img")
    for number in range(images.count()):
        image = images.nth(number)
        image.scroll_into_view_if_needed()
        width, height, natural = image.evaluate("i => [i.getBoundingClientRect().width, i.height, i.naturalWidth]")
        assert natural > 0 and width > 50 and height > 10, f"{name}: image {number} is not shown ({width}x{height})"
        assert image.is_visible(), f"{name}: image {number} is hidden"
    # every table of the text and every gradient report fits the text's column, beside the page's contents
    wide = tab.evaluate(_WIDER_THAN_THEIR_BOX, True)
    assert not wide, f"{name}: at 1280 px these scroll sideways in their box: {wide}"
    reachable = tab.evaluate(_KEYBOARD_TARGETS)
    tab.evaluate("() => { window.scrollTo(0, 0); document.activeElement && document.activeElement.blur(); }")
    focused, pressed = set(), 0
    # Enough presses to pass every element that takes the focus (links, copy buttons, folds), twice.
    stops = tab.evaluate("() => document.querySelectorAll('a[href], button, summary, input, [tabindex]').length")
    while pressed < 2 * stops + 100 and not set(reachable) <= focused:
        for _ in range(20):
            tab.keyboard.press("Tab")
        pressed += 20
        focused = set(tab.evaluate("() => [...window.bookFocused]"))
    missed = sorted(set(reachable) - focused, key=int)
    assert not missed, f"{name}: Tab never reaches {[reachable[m] for m in missed[:5]]}"
    if name != "index":
        fold = tab.locator("article details.hide summary").first
        if fold.count():
            fold.focus()
            tab.keyboard.press("Enter")
            assert fold.locator("xpath=..").evaluate("d => d.open"), f"{name}: Enter does not open a folded cell"
            tab.wait_for_timeout(500)  # the theme fades the opened code in
            tab.screenshot(path=screenshots / f"book_{name}_fold_opened.png")


# The tables of the text whose box is narrower than they are (they scroll sideways in it), and the
# gradient reports with anything past their box's right edge, each as [what, its width, its box's width].
_WIDER_THAN_THEIR_BOX = """withTables => {
    const beyond = (inner, box) => Math.max(...[...inner.querySelectorAll('*')]
        .map(e => e.getBoundingClientRect().right)) > box.getBoundingClientRect().right + 1;
    return [
        ...(withTables ? [...document.querySelectorAll('article table')] : [])
            .map(t => [t, t.closest('.pst-scrollable-table-container')])
            .filter(([, box]) => box && box.scrollWidth > box.clientWidth + 1),
        ...[...document.querySelectorAll('article .workbook-gradient-report')]
            .map(r => [r, r.closest('.output')]).filter(([r, box]) => box && beyond(r, box)),
    ].map(([inner, box]) => [inner.textContent.trim().slice(0, 40), inner.scrollWidth, box.clientWidth]);
}"""


# Marks every heading's permalink and every fold's toggle on the page, and notes each that gets the
# keyboard's focus (window.bookFocused); returns mark -> description.
_KEYBOARD_TARGETS = """() => {
    // a fold inside a closed fold (a folded answer's own details) is reached once the outer one opens
    const targets = [...document.querySelectorAll('article :is(h1, h2, h3) > a.headerlink, article details > summary')]
        .filter(node => !node.parentElement.parentElement.closest('details:not([open])'));
    const found = {};
    window.bookFocused = new Set();
    document.addEventListener('focusin', event => {
        const mark = event.target.dataset && event.target.dataset.bookTarget;
        if (mark) window.bookFocused.add(mark);
    });
    targets.forEach((node, index) => {
        node.dataset.bookTarget = String(index);
        found[index] = node.tagName + ' ' + (node.closest('h1, h2, h3, details').textContent || '').trim().slice(0, 60);
    });
    return found;
}"""


def search(tab, address, screenshots):
    """Sphinx's search finds the finder, and its results link to the chapter that teaches it."""
    tab.goto(f"{address}search.html?q=find_gradient_breaks")
    results = tab.locator("#search-results li a")
    results.first.wait_for(timeout=30_000)
    tab.screenshot(path=screenshots / "book_search.png")
    found = {pathlib.PurePosixPath(urllib.parse.urlparse(h).path).name for h in results.evaluate_all(_HREFS)}
    finder = next(name for name in NAMES if "gradient_killers" in name)
    assert f"{finder}.html" in found, f"searching for find_gradient_breaks found {sorted(found)}"


_HREFS = "links => links.map(a => a.href)"


#: A phone's screen, in CSS pixels, and the least text height a figure may show there: inline,
#: or once a tap has opened it at full size.
PHONE = {"width": 390, "height": 844}
LEAST_TEXT_INLINE, LEAST_TEXT_OPENED = 8.0, 10.0


@pytest.mark.browser
@pytest.mark.timeout(600, method="signal")
def test_every_chapter_reads_on_a_phone(site):
    """At 390 x 844 no page is wider than the screen, and every figure's text reads, inline or a tap away."""
    from browser_session import CHROMIUM_ARGS, find_browser, skip_requested
    from playwright.sync_api import sync_playwright

    if skip_requested():
        pytest.skip("WORKBOOK_SKIP_BROWSER=1 is set: the browser test is skipped on purpose")
    unreadable = []
    with served(site["html"]) as address, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_browser(), args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page(viewport=PHONE, is_mobile=True, has_touch=True)
            for name in PAGE_IDS:
                tab.goto(f"{address}{name}.html")
                tab.wait_for_load_state("load")
                # (a mobile browser widens window.innerWidth to the page; the screen is the root's clientWidth)
                widths = tab.evaluate(_PAGE_AND_SCREEN)
                assert widths[0] <= widths[1], f"{name}: the page is {widths[0]} px wide on a {widths[1]} px screen"
                unreadable += [f"{name}: {problem}" for problem in _figure_text_problems(tab, site["html"])]
                wide = tab.evaluate(_WIDER_THAN_THEIR_BOX, False)  # a table of the text may scroll on a phone
                unreadable += [f"{name}: a gradient report scrolls sideways: {box}" for box in wide]
        finally:
            browser.close()
    assert not unreadable, "\n".join(unreadable)


_PAGE_AND_SCREEN = "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"


def _figure_text_problems(tab, html):
    """Each figure whose smallest text is below LEAST_TEXT_INLINE as shown, or that a tap does not open.

    A figure drawn by pyplot records no text size (nan): it only has to open at full size.
    """
    from PIL import Image

    from workbook.core.figures import SMALLEST_TEXT_KEY

    found = []
    shown = tab.locator("article img[src*='_images/']").evaluate_all(
        """images => images.map(i => [i.getAttribute('src'), i.getBoundingClientRect().width, i.naturalWidth,
            i.parentElement.matches('a.book-enlarge') ? i.parentElement.getAttribute('href') : null])"""
    )
    for source, width, natural, link in shown:
        with Image.open(html / source) as png:
            smallest = float(png.text.get(SMALLEST_TEXT_KEY, "nan"))  # nan: drawn by pyplot, size unknown
        inline = smallest * width / natural
        if link != source:
            found.append(f"{source}: no tap opens it at full size")
        elif inline < LEAST_TEXT_INLINE:  # shown larger on a phone (book.css), it reads where it is
            found.append(f"{source}: text {inline:.1f} px as shown ({width:.0f} of its {natural} px)")
        elif smallest < LEAST_TEXT_OPENED:
            found.append(f"{source}: text {smallest:.1f} px even at full size")
    return found
