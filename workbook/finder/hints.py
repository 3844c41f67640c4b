"""What the finder's report says about each kind of break, op and cause: the advice text.

Introduced in 03_finding_gradient_killers.ipynb. :mod:`workbook.finder.report` holds
the report's data classes and rendering; :mod:`workbook.finder.advice` sharpens a hint
from the code around the op.
"""

from dataclasses import dataclass


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
        SECOND_DERIVATIVE + "Upsample with `keras.layers.UpSampling2D(2)` (the same nearest-neighbour values for a "
        "factor of 2, made by ops.repeat, whose gradient has a gradient), or a Conv2DTranspose."
    ),
    "ResizeBilinearGrad": (
        SECOND_DERIVATIVE + "To halve the size, use `keras.layers.AveragePooling2D(2)` (the same values as a "
        "bilinear resize by 1/2). To double it, no Keras layer gives the bilinear values with a second derivative "
        "(UpSampling2D(interpolation='bilinear') is this same resize): a Conv2DTranspose(channels, 4, strides=2, "
        "padding='same') learns an upsampling that has one, or resize the images before the tape records the penalty."
    ),
    "EagerPyFunc": (
        "The Python function inside tf.py_function leaves TensorFlow (.numpy(), np.*), so its tape "
        "records nothing and no gradient comes back. Compute it with tf / keras.ops on the tensor it "
        "receives, or give it a gradient with workbook.surrogate(forward, derivative)."
    ),
    "ReduceDataset": (
        "Dataset.reduce runs a tf.data pipeline, which passes no gradient to the values and variables its "
        "functions use. Inside a model, compute over a tensor instead: keras.ops.sum (or tf.foldl / tf.scan "
        "for another running value)."
    ),
    "SparseReduceMax": (
        "tf.sparse.reduce_max has no gradient: reduce a dense tensor instead, with the missing entries "
        "at -inf: tf.reduce_max(tf.where(mask, x, -inf), axis)."
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

# --- What happened, for the report's detail column -------------------------------------
# Filled in with str.format; each names what it is appended to or said of.

#: Appended to the detail of an op with no gradient registered that the gradient reaches.
RAISES_DETAIL = (
    ": tape.gradient raises LookupError as soon as the gradient reaches it, so fit stops there "
    "and no input or weight gets a gradient, even where another path would pass one"
)
#: The detail of a tf.py_function whose Python function leaves TensorFlow.
PY_FUNCTION_DETAIL = (
    "the Python function inside tf.py_function computes with NumPy (.numpy(), np.*): the tape that "
    "runs it records no way back, so TensorFlow gives this input a scalar 0 in place of its gradient"
)
#: Appended to a tf.py_function's detail when the tape's gradient fails behind it.
TAPE_FAILED_BEHIND = "; the gradient ops behind it then fail on that 0, and tf.GradientTape raised {failure}"
#: Your own train_step's tape.gradient returned None for some variables.
YOUR_TAPE_NONE = (
    "tape.gradient in {step} returned None for {names}: the tape did not record the way from them to the loss"
)
#: The graph cuts some sources and no op alone explains it.
UNEXPLAINED_CUT = "the graph reaches {sources} only through ops that pass no gradient"
#: What the graph says of a source and what the tape measured, when they disagree.
ALL_ZERO = (
    "{source}: the graph passes a gradient, but on this example it is all zero "
    "(every value on the way is 0, or every ReLU is off, e.g. after a cast that sends everything to 0)"
)
DISAGREEMENT = "{source}: the graph says {static}, the GradientTape measured {measured}"
#: A source the output does not depend on, at the line that uses it.
UNUSED_SOURCE = (
    "the output does not depend on {source}: it is used on this line, but nothing computed from it reaches the output"
)
#: Appended to the detail of an op that cuts a source by making an index of it.
ONLY_AN_INDEX = "; only an index made from it reaches the output, and an index carries no gradient"
#: Your own tape.gradient raised LookupError: no gradient registered for the op.
TAPE_UNREGISTERED = "your code's tape.gradient raised {message}: no gradient function is registered for {op}"
#: Why code could not be traced, from the error tracing raised.
UNTRACEABLE_WHY = {
    "numpy": "numpy on a tensor: the value leaves TensorFlow, and gradients cannot follow it",
    "control_flow": "Python control flow on a tensor's value: TensorFlow sees only the branch that ran",
    "other": "Python code on a tensor's value",
}
