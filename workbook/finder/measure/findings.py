"""The measured dead ends in the report: confirmed, promoted from the notes, or named where the walk saw none.

Introduced in 03_finding_gradient_killers.ipynb (the section "Where the walk cannot see").
:mod:`workbook.finder.measure.cut` says where the gradient died on your example; the walk
says why an op can pass nothing. Where both name an op, the walk's finding stands. Where
the walk filed the op among the notes (a path that does not matter), the measurement shows
that it does: it becomes a finding. Where the walk saw a path (a ``where``, a softmax) or
none at all (a loop's trip count), the measured op is the finding, and the "disconnected"
or "tape measured None" finding of the same source goes: the measurement has shown the way.
A source the graph passes and the tape measured all zero is never left without a finding.
"""

from workbook.finder.advice.words import ALL_ZERO, MEASURED_DETAIL, REASONS
from workbook.finder.report import Finding, Measured, Rank, Static
from workbook.finder.trace.frames import user_frame
from workbook.finder.walk.layer_causes import made_inside

#: The walk's findings that only say "something is wrong with this source", replaced by a measured op.
VAGUE_REASONS = {"disconnected", "measured_none", "unexplained_cut"}


def settle_measured(findings, notes, cuts, sources, layers=()):
    """(findings, notes) with each measured cut in ``cuts`` made a finding; ``sources`` are the report's.

    ``layers`` are the target's: an op a layer made, with no line of yours, is named at the line that made the layer.
    """
    by_name = {layer.name: layer for layer in layers}
    findings, notes, covered = list(findings), list(notes), set()
    explained = {owner for f in findings if f.reason not in VAGUE_REASONS for owner in f.cuts}
    for cut in cuts:
        covered |= cut.sources
        # A source a finding of the walk already cuts: the walk names the op (inside a loop's body, too).
        explains = {sources[index].owner for index in cut.sources} <= explained
        found = None if explains else _settled(cut, findings, notes, sources, by_name)
        if found is not None:
            findings.append(found)
    findings = _without_vague(findings, {sources[index].owner for index in covered})
    return sorted(findings + _unexplained_zeros(findings, sources), key=Finding.sort_key), notes


def _unexplained_zeros(findings, sources):
    """A finding for each source the graph passes and the tape measured all zero, that no finding cuts yet.

    The measurement could not say where (a gradient function that raised on the way): the report
    still is not ``ok`` while the graph and the tape disagree.
    """
    explained = {owner for finding in findings for owner in finding.cuts}
    return [
        Finding(
            op_type="(tape)",
            op_name=status.name,
            reason="measured_zero",
            hint=REASONS["measured_zero"].hint,
            detail=ALL_ZERO.format(source=status.label),
            cuts=[status.owner],
            rank=Rank.TAPE,
        )
        for status in sources
        if status.static == Static.FLOWING and status.measured == Measured.ZERO and status.owner not in explained
    ]


def _without_vague(findings, owners):
    """``findings`` without those that only say something is wrong with ``owners``, now that a measured op says what."""
    return [f for f in findings if not (f.reason in VAGUE_REASONS and set(f.cuts) <= owners)]


def _settled(cut, findings, notes, sources, layers):
    """The new finding for ``cut`` (a note promoted, or one made from its op); None if a finding names it already."""
    owners = list(dict.fromkeys(sources[index].owner for index in sorted(cut.sources)))
    labels = ", ".join(dict.fromkeys(sources[index].label for index in sorted(cut.sources)))
    frame, layer = _frame(cut.op, layers)
    if any(_same_op(finding, cut.op, frame) for finding in findings):
        return None
    note = next((n for n in notes if _same_op(n, cut.op, frame)), None)
    if note is not None:
        notes.remove(note)
        note.cuts = owners
        note.detail += MEASURED_DETAIL["promoted"].format(sources=labels)
        return note
    return _measured_finding(cut, frame, layer, owners, labels)


def _measured_finding(cut, frame, layer, owners, labels):
    """The finding for a measured cut the walk did not name, at ``frame`` (made by ``layer``, if not None)."""
    reason = "integer_output" if cut.kind == "integer" else f"measured_{cut.kind}"
    finding = Finding.from_op(cut.op, reason, frame, cuts=owners)
    finding.layer = layer.name if layer is not None and frame[0] else None
    if cut.kind == "zero":  # zeros on the way (values, not an op that passes none): after the ops that cut
        finding.rank = Rank.TAPE
    finding.detail += MEASURED_DETAIL["where"].format(sources=labels)
    return finding


def _frame(op, layers):
    """((file, line, code), the layer that made ``op`` when your line is the one that made that layer, or None)."""
    frame = user_frame(op.traceback)
    if frame[0] is not None:
        return frame, None
    layer, frame = made_inside(op, layers)  # made inside a layer (or a keras.ops call) a model runs for you
    return frame, layer


def _same_op(finding, op, frame):
    """Whether ``finding`` names ``op``: by name, or by type and line (the measurement traced the code again)."""
    if finding.op_name == op.name:
        return True
    return finding.op_type == op.type and frame[0] is not None and (finding.file, finding.line) == frame[:2]
