"""What :func:`workbook.find_gradient_breaks` returns: findings, per-source verdicts, tables.

Introduced in 03_finding_gradient_killers.ipynb.
"""

import dataclasses
import enum
import html
import os
import traceback
from dataclasses import dataclass, field

from workbook.core.notebook_cells import cell_label
from workbook.finder.advice.culprit import advise_all, advise_untraceable
from workbook.finder.advice.words import CAUSES, FIX_HIDDEN, OP_HINTS, REASONS, UNTRACEABLE_WHY
from workbook.finder.trace.frames import user_frame


class Rank(enum.IntEnum):
    """Where a finding sorts in a report, before its position along the path (``Finding.order``)."""

    YOUR_TAPE = 0  # your own train_step's tape recorded nothing: the first thing to fix
    RAISES = 1  # an op that makes tape.gradient (and so fit) raise: nothing trains until it is fixed
    PATH = 2  # an op on the way from a source to the output, sorted by its position
    SOURCE = 3  # an input or variable itself: disconnected, or not a float
    TAPE = 4  # the graph passes a gradient that the GradientTape did not measure


@dataclass(kw_only=True)
class Finding:
    """One op that cuts the gradient (or, in ``notes``, one whose cut does not matter).

    Introduced in 03_finding_gradient_killers.ipynb.
    """

    op_type: str
    op_name: str
    reason: str
    file: str | None = None
    line: int | None = None
    code: str | None = None
    hint: str = ""
    detail: str = ""
    cuts: list = field(default_factory=list)
    order: int = 0  # position along the path, among findings of the same rank
    rank: Rank = Rank.PATH
    layer: str | None = None  # the Keras layer whose code made the op, when no line of yours made the op itself
    candidates: list = field(default_factory=list)  # the fixes to check on your example, ``hint`` the first
    fallback: str = ""  # the advice in words, shown when no candidate passes the check
    checked: bool | None = None  # whether ``hint`` passed a check on your example (None: not checked)
    times: int = 1  # how many ops alike the line made (a loop, a layer run once per time step): one row for all

    def sort_key(self):
        """Culprit first: by :class:`Rank`, then by position along the path."""
        return self.rank, self.order

    @classmethod
    def from_op(cls, op, reason, frame, cuts=(), message="", order=0):
        known = REASONS[reason]
        dtypes = ", ".join(t.dtype.name for t in op.outputs) or "nothing"
        message = message.splitlines()[0][:300] if message else "an error"
        file, line, code = frame
        general = OP_HINTS.get(op.type, known.hint) if known.op_hint else known.hint
        candidates = advise_all(op, general, code) if known.op_hint else [general]
        return cls(
            op_type=op.type,
            op_name=op.name,
            reason=reason,
            file=file,
            line=line,
            code=code,
            hint=candidates[0],
            candidates=candidates,
            fallback=general,
            detail=known.detail.format(op=op.type, dtypes=dtypes, message=message),
            cuts=list(cuts),
            order=order,
        )

    @classmethod
    def disconnected(cls, status, frame, cause="", detail="", hint=""):
        """An input or variable the output does not depend on; ``cause`` says why, if known."""
        file, line, code = frame
        if cause and not detail:
            detail, hint = CAUSES[cause].detail, CAUSES[cause].hint
        return cls(
            op_type="(none)",
            op_name=status.name,
            reason="disconnected",
            file=file,
            line=line,
            code=code,
            hint=hint or REASONS["disconnected"].hint,
            detail=detail or f"the output does not depend on {status.label}",
            cuts=[status.owner],
            rank=Rank.SOURCE,
        )

    @classmethod
    def not_float(cls, status, dtype):
        return cls(
            op_type="(input)",
            op_name=status.name,
            reason="integer_input",
            hint=REASONS["integer_input"].hint,
            detail=f"{status.label} is {dtype}",
            cuts=[status.label],
            rank=Rank.SOURCE,
        )

    @property
    def where(self):
        if not self.file:
            if self.reason == "integer_input":
                return "(the example you passed)"
            return f"(inside layer {self.layer})" if self.layer else "(inside Keras/TensorFlow)"
        cell = cell_label(self.file)
        place = f"cell {cell}, line {self.line}" if cell is not None else f"{os.path.basename(self.file)}:{self.line}"
        # A line found for a layer that a model calls for you: the line that makes the layer.
        return f"{place} (layer {self.layer})" if self.layer else place


def _op_shown(finding):
    """The op column: "Round", or "Round ×5" for a row that stands for five ops alike."""
    return finding.op_type if finding.times == 1 else f"{finding.op_type} \u00d7{finding.times}"


def untraceable_finding(error, tb, cuts=()):
    """A Finding for code TensorFlow could not trace, pointing at the user's line that failed."""
    frames = traceback.extract_tb(tb)
    file, line, code = user_frame(frames)
    message = f"{type(error).__name__}: {error}".splitlines()[0][:300]
    why = UNTRACEABLE_WHY["other"]
    text = str(error)
    if "numpy" in text or "NumPy" in text or "__array__" in text:
        why = UNTRACEABLE_WHY["numpy"]
    elif "bool" in text or "iterat" in text or "OperatorNotAllowed" in type(error).__name__:
        why = UNTRACEABLE_WHY["control_flow"]
    return Finding(
        op_type=type(error).__name__,
        op_name="(tracing)",
        reason="untraceable",
        file=file,
        line=line,
        code=code,
        hint=advise_untraceable(REASONS["untraceable"].hint, code),
        detail=f"{why} ({message})",
        cuts=list(cuts),
    )


class Static(str, enum.Enum):
    """What the traced graph says of one input or variable (``SourceStatus.static``)."""

    UNKNOWN = "unknown"  # not walked yet
    FLOWING = "flowing"  # a path from it to the output passes a gradient
    CUT = "cut"  # every path from it goes through an op that passes none
    DISCONNECTED = "disconnected"  # no path from it to the output at all
    NOT_A_FLOAT = "not a float"  # an input of an integer or boolean dtype: it has no gradient
    UNTRACEABLE = "untraceable"  # the target could not be traced into a graph

    # Shown as its word wherever it is printed (the report's text and tables, a list of verdicts),
    # as the plain strings it replaces were; and equal to them.
    __str__, __repr__, __format__ = str.__str__, str.__repr__, str.__format__


class Measured(str, enum.Enum):
    """What ``tf.GradientTape`` measured for one input or variable on the example (``SourceStatus.measured``)."""

    UNKNOWN = "unknown"  # not measured yet
    NOT_MEASURED = "not measured"  # no measurement: the call failed, or gave no float output
    FLOWING = "flowing"  # a gradient with an entry that is not 0
    ZERO = "zero"  # a gradient, all 0 on this example
    NONE = "none"  # no gradient: the tape returned None
    ERROR = "error"  # building the gradient raised

    __str__, __repr__, __format__ = str.__str__, str.__repr__, str.__format__


@dataclass
class SourceStatus:
    """One input or trainable variable: does the gradient reach it?"""

    key: tuple
    name: str
    kind: str
    layer: str = None
    static: Static = Static.UNKNOWN
    measured: Measured = Measured.UNKNOWN

    @property
    def label(self):
        return self.name if self.kind == "variable" else f"{self.name} (input)"

    @property
    def owner(self):
        """What a student calls it: the layer for a variable, the argument for an input."""
        if self.kind == "variable" and self.layer:
            return f"layer {self.layer}"
        return self.label


@dataclass
class GradientReport:
    """The result of :func:`workbook.find_gradient_breaks`.

    Introduced in 03_finding_gradient_killers.ipynb.
    """

    findings: list
    notes: list
    sources: list
    description: str = ""
    disagreements: list = field(default_factory=list)
    layers_without_gradient: list = field(default_factory=list)
    fixes_hidden: bool = False  # each fix kept back until asked (:meth:`fixes`), for an exercise

    def hiding_fixes(self):
        """This report with every fix kept back until you ask for it with :meth:`fixes`.

        For an exercise (03's two hidden culprits, 05's part (b)): predict the fix from the op
        and the line, write it, then compare.
        """
        return dataclasses.replace(self, fixes_hidden=True)

    def fixes(self):
        """Each finding's fix, numbered as in the table (the text a report hiding its fixes keeps back)."""
        return "\n".join(f"{i}. {f.op_type} at {f.where}: {f.hint}" for i, f in enumerate(self.findings, 1))

    def _shown(self, finding):
        """``finding`` as the report shows it: its hint kept back if the fixes are hidden."""
        return dataclasses.replace(finding, hint=FIX_HIDDEN) if self.fixes_hidden else finding

    @property
    def ok(self):
        """True when every input and variable gets a gradient through the traced graph."""
        return not self.findings

    @property
    def culprit(self):
        return self.findings[0] if self.findings else None

    def _count(self):
        """How many ops cut the gradient: a row stands for as many as its line made alike."""
        return sum(f.times for f in self.findings)

    def _rows(self, findings):
        return [
            (str(i + 1), _op_shown(f), REASONS[f.reason].label, f.where, f.code or "", ", ".join(f.cuts))
            for i, f in enumerate(findings)
        ]

    def __str__(self):
        lines = [f"Gradient report for {self.description}:"]
        if self.ok:
            lines.append("  ok: the gradient reaches every input and trainable variable.")
        else:
            lines.append(f"  {self._count()} op(s) cut the gradient (culprit first):")
            lines += _text_table(("#", "op", "why", "where", "code", "cuts the gradient of"), self._rows(self.findings))
            lines.append(f"  Why: {self.findings[0].detail}")
            lines.append(f"  How to fix the culprit: {self._shown(self.findings[0]).hint}")
        if self.layers_without_gradient:
            lines.append(f"  Layers whose variables get no gradient: {', '.join(self.layers_without_gradient)}")
        if self.notes:
            lines.append("  Notes (blocked paths that do not matter, the gradient arrives another way):")
            lines += [f"    {n.op_type} at {n.where}: {n.detail}" for n in self.notes]
        measured = ", ".join(f"{s.label}: {s.measured}" for s in self.sources)
        lines.append(f"  Measured with a GradientTape: {measured}")
        lines += [f"  Disagreement: {d}" for d in self.disagreements]
        return "\n".join(lines)

    def _repr_pretty_(self, printer, cycle):
        """IPython's plain-text display (a console, a text-only frontend): the whole report."""
        printer.text(str(self))

    def __repr__(self):
        return f"<GradientReport ok={self.ok} findings={[(f.op_type, f.reason, f.where) for f in self.findings]}>"

    def _repr_html_(self):
        parts = [_fill(_HTML_TITLE, description=self.description)]
        if self.ok:
            parts.append(_HTML_OK)
        else:
            parts.append(_fill(_HTML_CUT, count=self._count()))
            rows = zip(self._rows(self.findings), self.findings, strict=True)
            parts += [_finding_html(i, row, self._shown(finding)) for i, (row, finding) in enumerate(rows)]
            parts.append(_HTML_FINDINGS_END)
        if self.layers_without_gradient:
            parts.append(_fill(_HTML_DEAD_LAYERS, layers=", ".join(self.layers_without_gradient)))
        if self.notes:
            notes = (_fill(_HTML_NOTE, op=n.op_type, where=n.where, detail=n.detail) for n in self.notes)
            parts.append(_HTML_NOTES.format(notes="".join(notes)))
        parts.append(_HTML_SOURCES_START)
        parts += [_fill(_HTML_SOURCE, label=s.label, static=s.static, measured=s.measured) for s in self.sources]
        parts.append(_HTML_SOURCES_END)
        parts += [_fill(_HTML_DISAGREEMENT, text=d) for d in self.disagreements]
        return "".join(parts) + "</div>"


# The HTML report, one template per block; _fill escapes every value put into one.
# A table as wide as its output area and no wider: long names and code wrap anywhere.
_TABLE_STYLE = "width:100%;table-layout:fixed;border-collapse:collapse"
_CELL_STYLE = "text-align:left;vertical-align:top;white-space:normal;overflow-wrap:anywhere;word-break:break-word"
#: The columns' shares of the table's width, 100% in all (fixed: the table never grows past its output area).
_COLUMNS = "".join(f"<col style='width:{share}'>" for share in ("6%", "13%", "16%", "21%", "25%", "19%"))
_HTML_TITLE = "<div class='workbook-gradient-report' style='width:100%'><p><b>Gradient report</b> for {description}: "
_HTML_OK = "<span style='color:#1a7f37'><b>ok</b> — the gradient reaches every input and trainable variable.</span></p>"
_HTML_CUT = (
    "<span style='color:#b42318'><b>{count} op(s) cut the gradient</b></span>, culprit first.</p>"
    f"<table style='{_TABLE_STYLE}'><colgroup>{_COLUMNS}</colgroup>"
    "<thead><tr><th>#</th><th>op</th><th>why</th><th>where</th><th>code</th>"
    "<th>cuts the gradient of</th></tr></thead><tbody>"
)
_HTML_ROW_START = {
    "culprit": "<tr class='culprit' style='background:#fde2e1;font-weight:bold'>",
    "break": "<tr class='break'>",
}
_HTML_FINDING_CELLS = "".join(
    f"<td style='{_CELL_STYLE}'>{cell}</td>"
    for cell in ("{number}", "{op}", "{why}", "{where}", "<code style='white-space:pre-wrap'>{code}</code>", "{cuts}")
)
# Details and the fix on a line of their own under their row, the table's whole width: read at
# any width, never cut off at the right of a narrow output area.
_HTML_FIX_ROW = (
    "<tr class='{kind}-fix'{background}><td colspan='6' style='{cell_style};padding-left:2em'>"
    "{detail}.<br><b>How to fix:</b> {hint}</td></tr>"
)
_HTML_FINDINGS_END = "</tbody></table>"
_HTML_DEAD_LAYERS = "<p>Layers whose variables get no gradient: <b>{layers}</b></p>"
_HTML_NOTES = "<p>Notes (blocked paths that do not matter):</p><ul>{notes}</ul>"
_HTML_NOTE = "<li>{op} at {where}: {detail}</li>"
_HTML_SOURCES_START = (
    "<details><summary>Per input and variable: static vs measured</summary>"
    f"<table style='{_TABLE_STYLE}'><tr><th>source</th><th>graph</th><th>GradientTape</th></tr>"
)
_HTML_SOURCE = f"<tr><td style='{_CELL_STYLE}'>{{label}}</td><td>{{static}}</td><td>{{measured}}</td></tr>"
_HTML_SOURCES_END = "</table></details>"
_HTML_DISAGREEMENT = "<p style='color:#9a6700'>Disagreement: {text}</p>"


def _fill(template, **values):
    """``template`` with every value escaped for HTML."""
    return template.format(**{key: html.escape(str(value)) for key, value in values.items()})


def _finding_html(index, row, finding):
    """One finding: its row, then its details and fix on a full-width line; the first is the culprit."""
    columns = dict(zip(("number", "op", "why", "where", "code", "cuts"), row, strict=True))
    kind = "culprit" if index == 0 else "break"
    cells = _fill(_HTML_FINDING_CELLS, **columns)
    background = " style='background:#fde2e1'" if index == 0 else ""
    fix = _HTML_FIX_ROW.format(
        kind=kind,
        background=background,
        cell_style=_CELL_STYLE,
        detail=html.escape(str(finding.detail)),
        hint=html.escape(str(finding.hint)),
    )
    return _HTML_ROW_START[kind] + cells + "</tr>" + fix


def _text_table(header, rows, limit=60):
    rows = [tuple(c if len(c) <= limit else c[: limit - 1] + "…" for c in row) for row in rows]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    fmt = "    " + "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows]
