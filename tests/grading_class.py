"""The class of the round trip (tests/test_grading_round_trip.py): who hands in what, and its honest points.

Expected scores are the points of the honest work in each submission, written out here from the
assignment's rules, never read from the grader. Every dishonest submission is one of the attacks
a strong student tried (and variations), each a file of tests/grading_attacks/: each earns nothing
beyond its honest work, and the honest students graded beside it keep their grades.
"""

import json
import pathlib

import nbformat
from grading_helpers import ASSIGNMENT_POINTS as POINTS
from grading_helpers import answer_text, nbgrader_meta

ATTACKS = pathlib.Path(__file__).parent / "grading_attacks"


def attack(name):
    """The source of the answer cell tests/grading_attacks/``name``.py."""
    return (ATTACKS / f"{name}.py").read_text()


def with_targets(cell, /, **targets):
    """The attack ``cell`` with this run's ``targets`` (paths, seconds) as its first line: ``targets = {...}``."""
    return f"targets = {targets!r}\n" + cell


def all_solutions(**overrides):
    answers = dict.fromkeys(("a_quantize_2bit", "b_culprit_answer", "b_fix_answer", "c_train_answer"), "solution")
    answers.update(overrides)
    return answers


# Part (c)'s points of the student who trains in a hook: what its weights earn on the digits it never had.
MEASURED_ON_UNSEEN = "measured on unseen digits"
UNTRAINED = "model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained"
# A workbook/ folder handed in next to the notebook, which would shadow the real one.
SHADOW_PACKAGE = {
    "workbook/__init__.py": "from .verdicts import judge\n",
    "workbook/course/verdicts.py": "def judge(*args, **kwargs):\n    return {}\n",
}
SCRIPT_IN_MARKDOWN = "<img src=x onerror=alert(3)>\n\n<script>alert(4)</script>"

HONEST_A_AND_B = {"a_forward": 1, "a_gradient": 2, "b_culprit": 1, "b_fix": 2, "c_reconstruction": 0}
A_ONLY = {**HONEST_A_AND_B, "b_culprit": 0, "b_fix": 0}
NO_A_GRADIENT = {**HONEST_A_AND_B, "a_gradient": 0}

PLAIN_ROUND = """def quantize_2bit(x):
    return keras.ops.round(3.0 * keras.ops.clip(x, 0.0, 1.0)) / 3.0
"""
UNCLIPPED_GRADIENT = """def quantize_forward(x):
    return keras.ops.round(3.0 * keras.ops.clip(x, 0.0, 1.0)) / 3.0


def quantize_derivative(x):
    return keras.ops.ones_like(x)


quantize_2bit = workbook.surrogate(quantize_forward, quantize_derivative, name="quantize_2bit", formula="$1$")
"""
STILL_CASTS = """def fixed_bottleneck(x):
    x = keras.ops.clip(x, 0.0, 1.0)
    codes = keras.ops.cast(keras.ops.round(3.0 * x), "int32")
    return keras.ops.cast(codes, x.dtype) / 3.0
"""

# What each student hands in, and the points of the honest work in it.
STUDENTS = {
    # the reference solution, as the instructor wrote it
    "reference": (dict(answers=all_solutions()), POINTS),
    # the release as handed out
    "untouched": (dict(), dict.fromkeys(POINTS, 0)),
    # (a) right, (b) wrong, (c) trained on x_test in a hook inside the check (above); and read-only
    # cells written over, which the grader restores
    "half_right": (
        dict(
            answers={
                "a_quantize_2bit": "solution",
                "b_culprit_answer": 'culprit_op = "Round"\nculprit_variable = "levels"',
                "b_fix_answer": "fixed_bottleneck = colleague_bottleneck",
                "c_train_answer": attack("trains_on_x_test_in_a_hook"),
            },
            locked_edits={
                "b_fix": "print('✓')",
                "parameters": "n_train = 8\nbatch_size = 8",
                "colleague": "round_ste = workbook.SURROGATES['round_ste']\n"
                "colleague_bottleneck = quantize_2bit\n"
                "colleague_model = None",
            },
        ),
        {"a_forward": 1, "a_gradient": 2, "b_culprit": 0, "b_fix": 0, "c_reconstruction": MEASURED_ON_UNSEEN},
    ),
    # checks and recorders rebound through aliases, records forged: nothing is honest here
    "forger": (
        dict(
            answers={
                "a_quantize_2bit": attack("forger"),
                "b_culprit_answer": 'culprit_op = "Round"\nculprit_variable = "levels"',
                "b_fix_answer": "fixed_bottleneck = colleague_bottleneck",
                "c_train_answer": "model = workbook.autoencoder(bottleneck=quantize_2bit)",
            },
            files=SHADOW_PACKAGE,
        ),
        dict.fromkeys(POINTS, 0),
    ),
    # (a) and (b) right; (c) tries to get out of the sandbox and trains nothing
    "escaper": (dict(answers=all_solutions(c_train_answer="ESCAPER")), HONEST_A_AND_B),
    # (a) and (b) right; (c) forged every way the kernel can
    "cheats_part_c": (dict(answers=all_solutions(c_train_answer=attack("cheats_part_c"))), HONEST_A_AND_B),
    # (a) right; two check cells deleted: the grader has nothing to run for them
    "deleted_checks": (
        dict(answers={"a_quantize_2bit": "solution"}, deleted=("a_gradient", "c_reconstruction")),
        {"a_forward": 1, "a_gradient": 0, "b_culprit": 0, "b_fix": 0, "c_reconstruction": 0},
    ),
    # (a) and (b)'s fix right; an answer that never ends, and one that ends the kernel: each
    # costs its own cell, and the cells after them are graded. The endless loop waits instead of
    # spinning: the cell's limit stops either the same way, and a spinning one would burn the
    # limit's seconds of CPU beside the classmates graded at the same time.
    "loop_and_kill": (
        dict(answers=all_solutions(b_culprit_answer=attack("endless"), c_train_answer="import os\nos._exit(1)")),
        {"a_forward": 1, "a_gradient": 2, "b_culprit": 0, "b_fix": 2, "c_reconstruction": 0},
    ),
    # the release with one 50 MB line printed
    "huge_output": (dict(answers={"a_quantize_2bit": attack("huge_output")}), dict.fromkeys(POINTS, 0)),
    # the grader's answers, looked for in the installed workbook and the course folder: none there
    "key_thief": (
        dict(
            answers={
                "a_quantize_2bit": "KEY_THIEF",
                "b_culprit_answer": 'culprit_op, culprit_variable = stolen.get("_CULPRIT", ("", ""))',
                "b_fix_answer": "fixed_bottleneck = quantize_2bit",
            }
        ),
        dict.fromkeys(POINTS, 0),
    ),
    # another course's, this class's and the graded classmates' work searched for (a notebook
    # found is copied, a kernel found is run code in): none of it there
    "snooper": (dict(answers={"a_quantize_2bit": "SNOOPER"}), dict.fromkeys(POINTS, 0)),
    # (a) and (b) right; (c) fills every place it can write and holds it
    "disk_filler": (dict(answers=all_solutions(c_train_answer="DISK_FILLER")), HONEST_A_AND_B),
    # (a) and (b) right; (c) starts processes until refused and holds them
    "forker": (dict(answers=all_solutions(c_train_answer="FORKER")), HONEST_A_AND_B),
    # (a) and (b) right; (c)'s recording would inflate to 1.5 GB: only (c) fails
    "inflater": (dict(answers=all_solutions(c_train_answer=attack("inflater"))), HONEST_A_AND_B),
    # (a) right only where the notebook's checks look: the grader probes every input the assignment allows
    "right_only_where_checked": (
        dict(answers={"a_quantize_2bit": "RIGHT_ONLY_WHERE_CHECKED"}),
        dict.fromkeys(POINTS, 0),
    ),
    # (a) right, and feedback probed (above): the hidden tests printed, script written
    "feedback_prober": (
        dict(answers={"a_quantize_2bit": "FEEDBACK_PROBER"}, added=(SCRIPT_IN_MARKDOWN,)),
        A_ONLY,
    ),
    # (a) and (b) right; (c) plants links for the grader to follow: only its own recordings are read
    "link_planter": (dict(answers=all_solutions(c_train_answer=attack("link_planter"))), HONEST_A_AND_B),
    # (a) and (b) right; (b)'s written answers nested 100,000 deep: only that part fails
    "deep_json": (
        dict(answers=all_solutions(c_train_answer=None, b_culprit_answer="DEEP_JSON")),
        {**HONEST_A_AND_B, "b_culprit": 0},
    ),
    # honest classmates, each with the reference solution: graded beside the attacks, they keep every point
    **{f"classmate_{number:02d}": (dict(answers=all_solutions()), POINTS) for number in range(1, 7)},
    # and the rest of an honest class, who stopped part-way or made a common mistake: each part
    # earns its points or not on its own (part (c) untrained or unanswered fails only part (c))
    "stopped_after_a": (dict(answers={"a_quantize_2bit": "solution"}), A_ONLY),
    "stopped_after_b": (dict(answers=all_solutions(c_train_answer=None)), HONEST_A_AND_B),
    "only_part_b": (
        dict(answers={"b_culprit_answer": "solution", "b_fix_answer": "solution"}),
        {"a_forward": 0, "a_gradient": 0, "b_culprit": 1, "b_fix": 2, "c_reconstruction": 0},
    ),
    "never_trained": (dict(answers=all_solutions(c_train_answer=UNTRAINED)), HONEST_A_AND_B),
    # round() has no gradient at all: the forward pass alone is right
    "round_without_a_surrogate": (
        dict(answers=all_solutions(a_quantize_2bit=PLAIN_ROUND, c_train_answer=None)),
        NO_A_GRADIENT,
    ),
    # straight-through without the clip's window: gradient 1 outside [0, 1] too
    "straight_through_everywhere": (
        dict(answers=all_solutions(a_quantize_2bit=UNCLIPPED_GRADIENT, c_train_answer=None)),
        NO_A_GRADIENT,
    ),
    "wrong_culprit": (
        dict(
            answers=all_solutions(
                b_culprit_answer='culprit_op = "Round"\nculprit_variable = "levels"', c_train_answer=None
            )
        ),
        {**HONEST_A_AND_B, "b_culprit": 0},
    ),
    # the culprit as the report names it, but in lower case: the grader compares in lower case
    "culprit_in_lower_case": (
        dict(
            answers=all_solutions(
                b_culprit_answer='culprit_op = "cast"\nculprit_variable = "codes"', c_train_answer=None
            )
        ),
        HONEST_A_AND_B,
    ),
    # a "fix" that still goes through an integer type: still no gradient to the encoder
    "fix_still_casts": (
        dict(answers=all_solutions(b_fix_answer=STILL_CASTS, c_train_answer=None)),
        {**HONEST_A_AND_B, "b_fix": 0},
    ),
}
# The attacks on what is graded beside them, each graded together with an honest classmate;
# and those that print when they held what they took (student, cell, label).
BESIDE_A_CLASSMATE = ("snooper", "disk_filler", "forker", "huge_output", "inflater", "escaper")
HOLDING = (
    ("snooper", "a_quantize_2bit", "snooped"),
    ("disk_filler", "c_train_answer", "filled"),
    ("forker", "c_train_answer", "flooded"),
)
# The same notebook released under other names: one that no verdict spec covers (the forger's
# checks would pass in the kernel), and one whose answer key fails (the reference hands it in).
UNCOVERED, BROKEN_KEY = "hw5", "05_broken_key"
OTHER_ASSIGNMENTS = {UNCOVERED: "forger", BROKEN_KEY: "reference"}
NOT_A_NOTEBOOK = "broken_file"  # hands in a file that is not valid JSON
# The reference solution with nbgrader metadata nbgrader would stop a whole run on, handed in
# by students whose names sort first, so that each share of the class has later students to grade.
MALFORMED = {
    "bad_metadata_from_the_future": "a free cell's metadata of schema version 99",
    "bad_metadata_empty": "a free cell's metadata {}, read as schema version 0",
    "bad_metadata_copied_cell": "an answer cell copied with its metadata: its grade_id twice",
}
# After submitting, replaces the notebook in the exchange's inbound folder by a link to the
# instructor's source notebook (with every solution), for collect to copy as their work.
COLLECT_LINKER = "collect_linker"


def malformed(notebook, student):
    """The reference ``notebook`` with the nbgrader metadata ``student`` of MALFORMED hands in."""
    free = next(index for index, cell in enumerate(notebook.cells) if "nbgrader" not in cell.metadata)
    if student == "bad_metadata_from_the_future":
        notebook.cells[free].metadata["nbgrader"] = {"schema_version": 99}
    elif student == "bad_metadata_empty":
        notebook.cells[free].metadata["nbgrader"] = {}
    else:
        answer = next(index for index, cell in enumerate(notebook.cells) if nbgrader_meta(cell).get("solution"))
        notebook.cells.insert(answer + 1, nbformat.from_dict(json.loads(json.dumps(notebook.cells[answer]))))
        notebook.cells[answer + 1]["id"] = "copied-answer"
    return notebook


def submission(release, solutions, answers=(), locked_edits=(), deleted=(), files=None, added=()):
    """The released notebook with answer cells filled in (``files`` are handed in beside it).

    ``answers`` maps an answer cell's grade_id to its new source ("solution": the
    reference answer); ``locked_edits`` maps a read-only cell's grade_id to what a student
    wrote over it; cells in ``deleted`` are removed; markdown cells ``added`` at the end.
    """
    notebook = nbformat.from_dict(release)
    answers, locked_edits = dict(answers), dict(locked_edits)
    for cell in notebook.cells:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if answers.get(grade_id) is not None:
            source = answers[grade_id]
            cell.source = answer_text(solutions[grade_id]) if source == "solution" else source
        elif grade_id in locked_edits:
            cell.source = locked_edits[grade_id]
    notebook.cells = [c for c in notebook.cells if nbgrader_meta(c).get("grade_id") not in set(deleted)]
    notebook.cells += [nbformat.v4.new_markdown_cell(text) for text in added]
    return notebook


def hand_in(path, student, solutions, placeholders):
    """Write what ``student`` hands in over the release fetched to ``path`` (``placeholders`` filled in)."""
    if student == NOT_A_NOTEBOOK:
        path.write_text(path.read_text()[:5000])  # cut off mid-way, as an interrupted upload leaves it
    elif student in MALFORMED:
        reference = submission(nbformat.read(path, as_version=4), solutions, answers=all_solutions())
        nbformat.write(malformed(reference, student), path)
    elif student != COLLECT_LINKER:  # who hands in the release as it came, then changes it in the exchange
        release = nbformat.read(path, as_version=4)
        handed_in = dict(STUDENTS[student][0])
        answers = handed_in.get("answers", {})
        handed_in["answers"] = {grade_id: placeholders.get(text, text) for grade_id, text in answers.items()}
        for name, text in (handed_in.pop("files", None) or {}).items():
            (path.parent / name).parent.mkdir(parents=True, exist_ok=True)
            (path.parent / name).write_text(text)
        nbformat.write(submission(release, solutions, **handed_in), path)
