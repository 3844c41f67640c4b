"""The feedback a student is sent: their work and the grader's verdicts, never the hidden tests.

Introduced in course/README.md (in place of nbgrader's ``ClearHiddenTests`` among
``GenerateFeedback``'s steps, course/nbgrader_config.py); needs nbgrader. nbgrader's own step
takes the hidden tests out of each check cell's source, but not out of what the cells
printed: a traceback through a check shows the hidden line it failed on, and a hook the
student registered can print every cell it saw. It also stops the student's whole feedback
on a "BEGIN HIDDEN TESTS" the student wrote without its end. This step:

- takes the hidden tests out of the check cells (``grade`` cells, whose source the grader
  restored from the instructor's), and leaves the student's own cells as they wrote them;
- replaces every line of every output that shows a line of the hidden tests (colours
  ignored) with a notice;
- keeps what the student wrote from running in the reader's browser: markdown cells and
  HTML outputs are cleaned (nbconvert's ``clean_html``: no script, no event handler), and
  JavaScript outputs are dropped.
"""

from nbconvert.filters import clean_html, strip_ansi
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade, is_solution

__all__ = ["FeedbackWithoutHiddenTests"]

BEGIN, END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
HIDDEN_LINE = "[a line of the hidden tests]"
# Lines of the hidden tests too short or too common to say anything (a bracket, "else:") are not looked for.
_SHORTEST = 8


def _is_check(cell):
    # A submission's metadata may be anything: nbgrader's tests read it only where it is a mapping.
    return isinstance(cell.metadata.get("nbgrader"), dict) and bool(is_grade(cell)) and not is_solution(cell)


def _split(source):
    """(the source without its hidden regions, the lines of those regions); an unended region runs to the end."""
    kept, hidden, inside = [], [], False
    for line in source.split("\n"):
        if BEGIN in line:
            inside = True
        elif END in line:
            inside = False
        elif inside:
            hidden.append(line)
        else:
            kept.append(line)
    return "\n".join(kept), hidden


class FeedbackWithoutHiddenTests(NbGraderPreprocessor):
    """Hidden tests out of the check cells and out of every output; the student's HTML made inert."""

    def preprocess(self, nb, resources):
        hidden = _take_out_hidden_tests(nb.cells)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source = clean_html(cell.source)
            elif cell.cell_type == "code":
                cell.outputs = [output for output in cell.get("outputs", []) if _cleaned(output, hidden)]
        nb.metadata.pop("celltoolbar", None)
        return nb, resources


def _take_out_hidden_tests(cells):
    """Take the hidden regions out of the check cells of ``cells``; the lines they held (the markers too)."""
    hidden = {BEGIN, END}
    for cell in cells:
        if _is_check(cell) and cell.cell_type == "code":
            cell.source, lines = _split(cell.source)
            hidden |= {line.strip() for line in lines if len(line.strip()) >= _SHORTEST}
    return hidden


def _shows_hidden(line, hidden):
    """True if ``line`` (colours aside) holds a line of the hidden tests, or a long enough piece of one.

    Colours are taken out by nbconvert's ``strip_ansi``, the reading of escape codes that renders the feedback.
    """
    plain = strip_ansi(line)
    piece = plain.strip(" \t^~|-<>0123456789")  # a traceback's frame marks and line numbers
    return any(h in plain or (len(piece) >= _SHORTEST and piece in h) for h in hidden)


def _scrubbed(text, hidden):
    return "\n".join(HIDDEN_LINE if _shows_hidden(line, hidden) else line for line in text.split("\n"))


_SCRIPT = ("javascript", "application/vnd.jupyter.widget", "image/svg+xml")  # an SVG may hold script too


def _cleaned(output, hidden):
    """Clean ``output`` in place: no hidden-test line, its HTML inert; False if nothing of it is left to show."""
    for field in ("text", "evalue"):
        if field in output:
            output[field] = _scrubbed("".join(output[field]), hidden)
    if "traceback" in output:
        output["traceback"] = [_scrubbed(line, hidden) for line in output["traceback"]]
    if "metadata" in output:  # nbconvert writes an image's width and height into the page unquoted
        output["metadata"] = _sizes_only(output["metadata"])
    if "data" in output:
        output["data"] = _cleaned_data(output["data"], hidden)
        return bool(output["data"])
    return True


def _sizes_only(metadata):
    """A display's metadata with nothing but whole-number widths and heights of its images."""
    kept = {}
    for kind, value in metadata.items():
        if isinstance(value, dict):
            sizes = {k: v for k, v in value.items() if k in ("width", "height") and type(v) is int and 0 < v < 10**5}
            if sizes:
                kept[kind] = sizes
    return kept


def _cleaned_data(data, hidden):
    """A display's {kind: value} without script, hidden-test lines or live HTML."""
    cleaned = {}
    for kind, value in data.items():
        if any(part in kind for part in _SCRIPT):
            continue
        if isinstance(value, list):
            value = "".join(map(str, value))
        if isinstance(value, str):
            value = _scrubbed(value, hidden)
            value = clean_html(value) if kind in ("text/html", "text/markdown") else value
        cleaned[kind] = value
    return cleaned
