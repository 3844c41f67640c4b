"""What :func:`workbook.find_gradient_breaks` returns: findings, per-source verdicts, tables.

Introduced in 03_finding_gradient_killers.ipynb.
"""

import html
import os
import traceback
from dataclasses import dataclass, field

from workbook.core.code_origin import user_frame
from workbook.core.notebook_cells import cell_label
from workbook.finder.advice import advise


@dataclass(frozen=True)
class Reason:
    """Everything the report says about one kind of break.

    ``label`` fills the "why" column; ``hint`` says what to do about it (an op of a type
    in :data:`OP_HINTS` gets that sharper advice instead, unless ``op_hint`` is False);
    ``detail`` says what happened at an op, with ``{op}`` (its type), ``{dtypes}`` (of its
    outputs) and ``{message}`` (TensorFlow's error) filled in. Every fix a hint names is
    applied to an example of its op in tests/test_hints.py, which checks with a
    GradientTape that the gradient then flows.
    """

    label: str
    hint: str
    detail: str = ""
    op_hint: bool = True


#: Why each kind of break stops the gradient, and what to do about it, by the name a Finding's ``reason`` holds.
REASONS = {
    "integer_output": Reason(
        label="output is not a float",
        hint=(
            "An integer, boolean or string value carries no gradient. Keep the forward value and let "
            "backprop through with a straight-through surrogate: SURROGATES['cast_int_ste'] for a cast, "
            "or x + stop_gradient(hard(x) - x) for any hard(x) shaped like x. For one_hot(argmax(...)): "
            "soft + stop_gradient(hard - soft) with soft = softmax(logits)."
        ),
        detail="{op} returns {dtypes}",
    ),
    "no_gradient": Reason(
        label="no gradient defined",
        hint=(
            "TensorFlow defines no gradient through this op (or it returns None for this input). "
            "Backpropagate a surrogate: x + stop_gradient(f(x) - x) (straight-through), "
            "SURROGATES['round_ste'] / ['floor_ste'] for round/floor, or workbook.surrogate(f, derivative)."
        ),
        detail="TensorFlow's gradient of {op} is None for this input",
    ),
    "zero_gradient": Reason(
        label="gradient is zero",
        hint=(
            "The gradient exists but is zero almost everywhere (a step function). Backpropagate a "
            "surrogate instead, e.g. SURROGATES['sign_ste'] or ['sign_clipped_ste'] for sign, or "
            "x + stop_gradient(f(x) - x)."
        ),
        detail="TensorFlow's gradient of {op} is a constant zero",
    ),
    "stop_gradient": Reason(
        label="stop_gradient",
        hint=(
            "stop_gradient blocks backprop on purpose. Remove it, or use the straight-through form "
            "x + stop_gradient(f(x) - x) so that the gradient passes as identity."
        ),
        detail="gradient stopped on purpose",
        op_hint=False,
    ),
    "no_gradient_registered": Reason(
        label="no gradient registered",
        hint=(
            "TensorFlow has no gradient registered for this op (it raises LookupError inside "
            "tape.gradient). Rewrite it with differentiable ops, or wrap it in "
            "workbook.surrogate(forward, derivative)."
        ),
        detail="no gradient function is registered for {op}",
    ),
    "gradient_error": Reason(
        label="could not check",
        hint=(
            "TensorFlow's own gradient function for this op raised an error (its message is above), so "
            "whether the gradient passes could not be checked; tape.gradient fails or gets None the same "
            "way. Rewrite the step with differentiable ops, or wrap it in workbook.surrogate(forward, derivative)."
        ),
        detail="TensorFlow's gradient of {op} raised {message}",
        op_hint=False,
    ),
    "measured_none": Reason(
        label="tape measured None",
        hint=(
            "The graph has a path, but tf.GradientTape returned None for it on this example. Look for "
            "an op whose gradient TensorFlow decides at run time (a loaded model, a py_function)."
        ),
    ),
    "branch_condition": Reason(
        label="only picks a branch",
        hint=(
            "The output depends on this only through the condition of an if (tf.cond) inside tf.function: "
            "the comparison picks a branch, and a choice carries no gradient. Blend the branches with a steep "
            "sigmoid of the same comparison instead: for if a > b, w = keras.ops.sigmoid(10.0 * (a - b)) and "
            "w * then_value + (1 - w) * else_value."
        ),
        detail="{op} decides which branch of an if / tf.cond runs, and only that choice depends on it",
        op_hint=False,
    ),
    "not_recorded": Reason(
        label="tape did not record",
        hint=(
            "Inside `with tape.stop_recording():` the tape records nothing, so tape.gradient returns None for "
            "what is computed there. Compute the loss outside that block (keep stop_recording for values you "
            "will not differentiate, such as a metric)."
        ),
    ),
    "not_recorded_outside": Reason(
        label="tape did not record",
        hint=(
            "The tape you differentiate with did not record the way to the loss: compute the loss inside the "
            "`with tf.GradientTape() as tape:` block (and, with watch_accessed_variables=False, "
            "tape.watch the variables)."
        ),
    ),
    "unexplained_cut": Reason(
        label="cut, op not named",
        hint=(
            "The graph reaches this weight only through ops that pass no gradient, but none of them could be "
            "named: compare the GradientTape's verdicts below, and look at the ops between this layer and the output."
        ),
    ),
    "disconnected": Reason(
        label="output does not depend on it",
        hint=(
            "The output does not depend on this input or variable at all (or only on its shape). "
            "Use its result on the way to the output, or remove it (or make it trainable=False)."
        ),
    ),
    "integer_input": Reason(
        label="input is not a float",
        hint=(
            "Integers carry no gradient: pass a float array (e.g. x.astype('float32')) if you "
            "want a gradient with respect to this input."
        ),
    ),
    "untraceable": Reason(
        label="cannot be traced",
        hint=(
            "TensorFlow could not trace this code into a graph, so it cannot differentiate it: "
            "use keras.ops / tf ops instead of numpy or .numpy(), and tf.cond / keras.ops.where "
            "instead of Python if/while on tensor values."
        ),
    ),
}

SAMPLING_HINT = (
    "Sampling picks a discrete value at random: no gradient reaches the logits through the choice. "
    "Use one of notebook 06's estimators: z, log_prob = workbook.sample_latent(logits, 'categorical', "
    "'gumbel_softmax_st', tau=0.5) gives a one-hot sample with a relaxed gradient ('straight_through' "
    "and 'score_function', which needs log_prob in the loss, are the others)."
)
SECOND_DERIVATIVE = (
    "This op is the gradient of a resize, made by an inner tape.gradient (a gradient penalty, a Hessian): "
    "the second derivative is what is missing, because TensorFlow defines no gradient for this gradient op. "
)

#: Sharper advice for the ops students meet most; other ops get the hint for their reason.
OP_HINTS = {
    "Cast": (
        "A cast to an integer has no gradient. Keep the forward value and pass the gradient "
        "straight through: SURROGATES['cast_int_ste'](x), or x + stop_gradient(cast(cast(x, 'int32'), "
        "x.dtype) - x). (A float round or floor instead of the cast would not help: their "
        "gradients are None too.)"
    ),
    "ArgMax": (
        "argmax returns indices. For one_hot(argmax(...)) use a straight-through one-hot: "
        "soft + stop_gradient(hard - soft) with soft = softmax(logits), or softmax(logits / temperature) alone. "
        "For a choice that is sampled, see notebook 06's estimators (workbook.sample_latent)."
    ),
    "ArgMin": (
        "argmin returns indices: use a straight-through one-hot, soft + stop_gradient(hard - soft) "
        "with soft = softmax(-logits)."
    ),
    "TopKV2": (
        "top_k's indices are integers: take the gradient through its values (top_k(x).values), "
        "or weigh the candidates with a softmax instead of picking them."
    ),
    "Round": (
        "round has no gradient: use SURROGATES['round_ste'] (straight-through), or x + stop_gradient(round(x) - x)."
    ),
    "Floor": (
        "floor has no gradient: use SURROGATES['floor_ste'] or SURROGATES['floor_smooth'], "
        "or x + stop_gradient(floor(x) - x)."
    ),
    "Sign": "sign's gradient is 0 everywhere: use SURROGATES['sign_ste'], ['sign_clipped_ste'] or ['sign_swish'].",
    "Greater": (
        "A comparison makes a step: use SURROGATES['step_sigmoid'] / ['step_fast_sigmoid'] for (x > 0), "
        "SURROGATES['step_sigmoid'](x - t) for (x > t), or a sigmoid with a steep slope."
    ),
    "Less": (
        "A comparison makes a step: use SURROGATES['step_sigmoid'] / ['step_fast_sigmoid'] on (threshold - x), "
        "or a steep sigmoid."
    ),
    "Multinomial": SAMPLING_HINT,
    "StatelessMultinomial": SAMPLING_HINT,
    "RandomShuffle": (
        "tf.random.shuffle has no gradient for the values it moves. Shuffle the positions and gather: "
        "tf.gather(x, tf.random.shuffle(tf.range(tf.shape(x)[0]))) is the same kind of permutation of x's "
        "first axis, and gather passes the gradient back."
    ),
    "ResizeArea": (
        "Resizing with method='area' has no gradient registered. For a whole factor, "
        "tf.nn.avg_pool2d(x, factor, factor, 'VALID') (keras.layers.AveragePooling2D(factor)) gives the same "
        "values with a gradient; for other sizes use method='bilinear' with antialias=True."
    ),
    "ResizeNearestNeighborGrad": (
        SECOND_DERIVATIVE + "Upsample with ops whose gradient has a gradient: for a factor of 2, "
        "ops.repeat(ops.repeat(x, 2, axis=1), 2, axis=2) (what Keras 3's UpSampling2D does), "
        "or a Conv2DTranspose."
    ),
    "ResizeBilinearGrad": (
        SECOND_DERIVATIVE + "To halve the size, use keras.layers.AveragePooling2D(2) (the same values as a "
        "bilinear resize by 1/2); to double it, ops.repeat(ops.repeat(x, 2, axis=1), 2, axis=2) or a "
        "Conv2DTranspose; or resize the images before the tape records the penalty."
    ),
    "PyFunc": (
        "numpy_function leaves TensorFlow: rewrite it with keras.ops, or use tf.py_function (which has a "
        "gradient), or wrap it in workbook.surrogate."
    ),
}


@dataclass(frozen=True)
class Cause:
    """Why a variable or input is disconnected, when the finder can tell: what happened, and what to do."""

    detail: str
    hint: str


#: The causes of a "disconnected" finding that the finder recognises in a layer's code.
CAUSES = {
    "assign": Cause(
        detail=(
            "its value goes into a variable with assign/assign_add, "
            "and a variable keeps no record of where its value came from"
        ),
        hint=(
            "Compute with tensors (total = total + x) and assign only what you will not differentiate, "
            "like a running statistic."
        ),
    ),
    "rebound": Cause(
        detail=(
            "call() rebinds the weight's attribute to a tensor (self.w = self.w + ...): "
            "later calls use that tensor, a constant, instead of the weight"
        ),
        hint="Change the weight in place with self.w.assign(...), or keep the new value in a local variable.",
    ),
    "built_tensor": Cause(
        detail=(
            "a tensor computed from the weight once, in build() or __init__, is stored on the layer "
            "and used instead of the weight: it is a constant to every call"
        ),
        hint=(
            "Compute that tensor inside call(), from the weight, every time (a SparseTensor too: "
            "tf.SparseTensor(indices, self.values, shape) in call(), and sparse_dense_matmul passes the "
            "gradient to self.values)."
        ),
    ),
    "unused": Cause(
        detail="the weight is created with add_weight but call() never uses it",
        hint="Use it in call(), or do not create it (or create it with trainable=False).",
    ),
}


@dataclass
class Finding:
    """One op that cuts the gradient (or, in ``notes``, one whose cut does not matter).

    Introduced in 03_finding_gradient_killers.ipynb.
    """

    op_type: str
    op_name: str
    reason: str
    file: str = None
    line: int = None
    code: str = None
    hint: str = ""
    detail: str = ""
    cuts: list = field(default_factory=list)
    order: int = 0  # position along the path, for sorting
    layer: str = None  # the Keras layer whose code made the op, when no line of yours did

    @classmethod
    def from_op(cls, op, reason, frame, cuts=(), message="", order=0):
        known = REASONS[reason]
        dtypes = ", ".join(t.dtype.name for t in op.outputs) or "nothing"
        message = message.splitlines()[0][:300] if message else "an error"
        detail = known.detail.format(op=op.type, dtypes=dtypes, message=message)
        file, line, code = frame
        hint = advise(op, OP_HINTS.get(op.type, known.hint)) if known.op_hint else known.hint
        return cls(op.type, op.name, reason, file, line, code, hint, detail, list(cuts), order)

    @classmethod
    def disconnected(cls, status, frame, cause="", detail="", hint=""):
        """An input or variable the output does not depend on; ``cause`` says why, if known."""
        file, line, code = frame
        if cause and not detail:
            detail, hint = CAUSES[cause].detail, CAUSES[cause].hint
        return cls(
            "(none)",
            status.name,
            "disconnected",
            file,
            line,
            code,
            hint or REASONS["disconnected"].hint,
            detail or f"the output does not depend on {status.label}",
            [status.owner],
            order=10**8,
        )

    @classmethod
    def not_float(cls, status, dtype):
        return cls(
            "(input)",
            status.name,
            "integer_input",
            None,
            None,
            None,
            REASONS["integer_input"].hint,
            f"{status.label} is {dtype}",
            [status.label],
            order=10**8,
        )

    @property
    def where(self):
        if not self.file:
            if self.reason == "integer_input":
                return "(the example you passed)"
            return f"(inside layer {self.layer})" if self.layer else "(inside Keras/TensorFlow)"
        cell = cell_label(self.file)
        if cell is not None:
            return f"cell {cell}, line {self.line}"
        return f"{os.path.basename(self.file)}:{self.line}"


def untraceable_finding(error, tb, cuts=()):
    """A Finding for code TensorFlow could not trace, pointing at the user's line that failed."""
    frames = traceback.extract_tb(tb)
    file, line, code = user_frame(frames)
    message = f"{type(error).__name__}: {error}".splitlines()[0][:300]
    why = "Python code on a tensor's value"
    text = str(error)
    if "numpy" in text or "NumPy" in text or "__array__" in text:
        why = "numpy on a tensor: the value leaves TensorFlow, and gradients cannot follow it"
    elif "bool" in text or "iterat" in text or "OperatorNotAllowed" in type(error).__name__:
        why = "Python control flow on a tensor's value: TensorFlow sees only the branch that ran"
    return Finding(
        type(error).__name__,
        "(tracing)",
        "untraceable",
        file,
        line,
        code,
        REASONS["untraceable"].hint,
        f"{why} ({message})",
        list(cuts),
    )


@dataclass
class SourceStatus:
    """One input or trainable variable: does the gradient reach it?"""

    key: tuple
    name: str
    kind: str
    layer: str = None
    static: str = "unknown"  # flowing, cut, disconnected, untraceable
    measured: str = "unknown"  # flowing, zero, none

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

    @property
    def ok(self):
        """True when every input and variable gets a gradient through the traced graph."""
        return not self.findings

    @property
    def culprit(self):
        return self.findings[0] if self.findings else None

    def _rows(self, findings):
        return [
            (str(i + 1), f.op_type, REASONS[f.reason].label, f.where, f.code or "", ", ".join(f.cuts))
            for i, f in enumerate(findings)
        ]

    def __str__(self):
        lines = [f"Gradient report for {self.description}:"]
        if self.ok:
            lines.append("  ok: the gradient reaches every input and trainable variable.")
        else:
            lines.append(f"  {len(self.findings)} op(s) cut the gradient (culprit first):")
            lines += _text_table(("#", "op", "why", "where", "code", "cuts the gradient of"), self._rows(self.findings))
            lines.append(f"  Why: {self.findings[0].detail}")
            lines.append(f"  How to fix the culprit: {self.findings[0].hint}")
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
        escape = html.escape
        parts = [f"<div class='workbook-gradient-report'><p><b>Gradient report</b> for {escape(self.description)}: "]
        if self.ok:
            parts.append(
                "<span style='color:#1a7f37'><b>ok</b> — the gradient reaches every input and trainable variable."
                "</span></p>"
            )
        else:
            parts.append(
                f"<span style='color:#b42318'><b>{len(self.findings)} op(s) cut the gradient</b></span>, "
                "culprit first.</p>"
            )
            parts.append(
                "<table><thead><tr>"
                + "".join(
                    f"<th>{h}</th>"
                    for h in ("#", "op", "why", "where", "code", "cuts the gradient of", "details and how to fix")
                )
                + "</tr></thead><tbody>"
            )
            for i, (row, finding) in enumerate(zip(self._rows(self.findings), self.findings, strict=True)):
                style = " style='background:#fde2e1;font-weight:bold'" if i == 0 else ""
                cells = [escape(c) for c in row[:4]] + [
                    f"<code>{escape(row[4])}</code>",
                    escape(row[5]),
                    f"{escape(finding.detail)}.<br>{escape(finding.hint)}",
                ]
                parts.append(
                    f"<tr class='{'culprit' if i == 0 else 'break'}'{style}>"
                    + "".join(f"<td style='text-align:left'>{c}</td>" for c in cells)
                    + "</tr>"
                )
            parts.append("</tbody></table>")
        if self.layers_without_gradient:
            dead = escape(", ".join(self.layers_without_gradient))
            parts.append(f"<p>Layers whose variables get no gradient: <b>{dead}</b></p>")
        if self.notes:
            parts.append(
                "<p>Notes (blocked paths that do not matter):</p><ul>"
                + "".join(f"<li>{escape(n.op_type)} at {escape(n.where)}: {escape(n.detail)}</li>" for n in self.notes)
                + "</ul>"
            )
        parts.append(
            "<details><summary>Per input and variable: static vs measured</summary>"
            "<table><tr><th>source</th><th>graph</th><th>GradientTape</th></tr>"
        )
        parts += [f"<tr><td>{escape(s.label)}</td><td>{s.static}</td><td>{s.measured}</td></tr>" for s in self.sources]
        parts.append("</table></details>")
        parts += [f"<p style='color:#9a6700'>Disagreement: {escape(d)}</p>" for d in self.disagreements]
        return "".join(parts) + "</div>"


def _text_table(header, rows, limit=60):
    rows = [tuple(c if len(c) <= limit else c[: limit - 1] + "…" for c in row) for row in rows]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    fmt = "    " + "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows]
