"""The words of the finder's advice: what its report says about each kind of break, op and cause.

Introduced in 03_finding_gradient_killers.ipynb. The hints by reason, op type and cause;
the sharper hints :mod:`workbook.finder.advice.culprit` chooses from the code around the op; why
each fix that :mod:`workbook.finder.advice.rewrites` writes in your own code works; and the notes
of the missing-gradients extension. The modules that choose a text fill it in with names
and code; :mod:`workbook.finder.report` holds the report's data classes and rendering.
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
    "measured_branch_not_taken": Reason(
        label="branch never taken",
        detail="on your example this {op} never picks the values the gradient would come back through",
        hint=(
            "A where() passes the gradient only to the values it picks, and on your example it picks the other "
            "branch everywhere. If that branch should be picked sometimes, check the condition (a threshold, a "
            "scale); if the gradient should reach it whichever value is picked, blend the two instead of picking: "
            "c * a + (1 - c) * b, with c made from the condition by a surrogate such as "
            "workbook.SURROGATES['step_sigmoid'](x - t)."
        ),
        op_hint=False,
    ),
    "measured_constant_softmax": Reason(
        label="softmax of one value",
        detail="a {op} over an axis of size 1 is 1 whatever its input, so its gradient is exactly 0",
        hint=(
            "A softmax over an axis of size 1 always gives 1. For one gate (on or off) use a sigmoid of the "
            "score; for a choice among several, give the axis one score per choice (softmax over axis=-1 of size > 1)."
        ),
        op_hint=False,
    ),
    "measured_control": Reason(
        label="only steers a loop or branch",
        detail=(
            "the value reaches the output only through this {op}'s trip count or condition: how many times a "
            "loop runs, or which branch runs, is a whole number or a choice, and carries no gradient"
        ),
        hint=(
            "A trip count or a branch choice has no gradient. Make the output a function of the value itself: run "
            "a fixed number of steps and weigh each step's result by a halting probability made from it (Adaptive "
            "Computation Time, with a ponder cost), or estimate the gradient of the discrete choice with notebook "
            "06's score-function estimator."
        ),
        op_hint=False,
    ),
    "measured_zero": Reason(
        label="passes exactly 0 here",
        detail="on your example this {op} receives a gradient but passes exactly 0 back",
        hint=(
            "On this example the op passes back nothing but zeros (saturated, clipped, every ReLU off, or a "
            "function flat where your values are). Check its input's values; if they sit where the op is flat by "
            "design, use a surrogate or a smooth stand-in there."
        ),
        op_hint=False,
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
            "If it need not learn, remove it or make it trainable=False, which keeps what the model computes; "
            "if it should, use its result on the way to the output (that changes the model)."
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
        hint=(
            "Do not create it, or create it with trainable=False: the model then computes what it computes now, "
            "and fit stops warning. Only if it was meant to learn, use it in call() (that changes the model)."
        ),
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
#: Appended to a finding where the GradientTape's backward pass, measured to every tensor, found the gradient dies.
MEASURED_DETAIL = {
    "where": (
        "; measured on your example: the gradient reaches this op's output, and nothing of it gets back to {sources}"
    ),
    "promoted": (
        "; measured on your example, this is where the gradient of {sources} dies: the other path carries nothing"
    ),
}
#: In place of each fix, in a report that keeps them back for an exercise (GradientReport.hiding_fixes).
FIX_HIDDEN = (
    "(kept back for this exercise: predict the fix from the op and the line, write it, then compare with "
    "print(report.fixes()))"
)
#: What the check of a fix on your example found (workbook.finder.advice.checked).
CHECKED = {
    "passed": " Checked on your example: the gradient now reaches {names}, and the output is unchanged.",
    "past": (
        " Checked on your example: the gradient now gets past this line, and the output is unchanged; the next "
        "row still cuts it, so fix that one too and run the finder again."
    ),
    "changed": (
        " Checked on your example: the gradient now reaches {names}; the output moves by up to {change} of its "
        "largest value, as this rewrite computes something a little different (check that it is what you mean)."
    ),
    "cut": "`{fix}` left the gradient cut",
    "output": "`{fix}` changed the output",
    "none_passed": (
        "No rewrite the finder knows passed a check on your example ({tried}), so none is offered as the fix. {hint}"
    ),
    "not_checked": (
        " Not checked on your example: this line runs once, when the model is made, and the finder could not make "
        "the model again with the fix; apply it, make the model again and run the finder."
    ),
}
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

# --- Advice read from the code around the op -------------------------------------------
# workbook.finder.advice.culprit picks one of these from what the op's value goes on to do, and
# workbook.finder.advice.rewrites writes the fix in your own code; the words are all here.

#: What starts an honest hint where nothing of the parameters reaches the output as a function: a hash, an id,
#: a sample's index. No gradient can exist there, and tests/test_finder_advice.py checks that what it names trains.
NO_GRADIENT = "No gradient can exist"
#: What starts an honest hint for a piecewise-constant function (a count, a search, a metric of hard labels):
#: its true gradient is 0 almost everywhere, as round's is, and a surrogate or a smooth stand-in is a choice.
ZERO_ALMOST_EVERYWHERE = "Zero almost everywhere"
#: The honest hints by kind: why no gradient is of use here, and what works instead.
NO_GRADIENT_CAN_EXIST = {
    "decoder": (
        "Zero almost everywhere: a CTC decoder (a beam or greedy search) picks whole sequences, so what it "
        "returns moves in jumps and its true gradient is 0 wherever it exists. Train on `workbook.losses.ctc` "
        "(CTC on the per-step logits, the last class the blank), and decode only to predict and to measure."
    ),
    "hash": (
        "No gradient can exist through a hash: its bucket is no function of the value that changes in any "
        "direction you could follow, it jumps when the value hashed changes at all. Hash in the data pipeline "
        "(dataset.map, before the model), and let the model learn from the hashed buckets' embeddings, or from "
        "the float value itself."
    ),
    "count": (
        "Zero almost everywhere: a count (CategoryEncoding, bincount) moves in whole steps, so its true gradient "
        "is 0 wherever it exists, as round's is, and any gradient here is one you choose. Count in the data "
        "pipeline if the counts need not learn; or pick the ids as one-hot rows with "
        "workbook.sample_latent(logits, 'categorical', 'straight_through') and sum the rows: the same count "
        "forward, with the straight-through's gradient."
    ),
    "jpeg": (
        "Zero almost everywhere: a JPEG round trip quantises, so its true gradient is 0 wherever it exists, and "
        "encode_jpeg makes bytes that no gradient follows. Apply the JPEG step in the data pipeline (as an "
        "augmentation of the inputs); or choose a gradient for it, the identity's around the whole round trip "
        "(BPDA): x + stop_gradient(jpeg(x) - x), with jpeg(x) the decoded image as floats."
    ),
    "ids": (
        "No gradient can exist through token ids made from a float: an Embedding looks rows up by id, and an "
        "id says which row, not how far to move. Make the ids in the data pipeline; or have the model output "
        "logits over the vocabulary, sample one-hot rows with workbook.sample_latent(logits, 'categorical', "
        "'gumbel_softmax_st') and look up by a product: ops.matmul(one_hot, embedding.embeddings)."
    ),
    "sample": (
        "No gradient can exist through a sampled index: the draw is a choice, and nothing of the logits "
        "reaches the index as a function you could differentiate; the gradient of the expected loss does "
        "exist, and notebook 06's estimators estimate it. Sample a one-hot instead: z, log_prob = "
        "workbook.sample_latent(logits, 'categorical', 'gumbel_softmax_st', tau=0.5) gives it a relaxed "
        "gradient ('straight_through' and 'score_function', which needs log_prob in the loss, are the others)."
    ),
    "sampled_value": (
        "No gradient can exist through a sampled value (a binomial or Poisson count): the draw is a choice, "
        "and nothing of the probabilities reaches the number drawn as a function you could differentiate, so "
        "a straight-through here is biased. The gradient of the expected loss does exist, and notebook 06's "
        "estimators estimate it: draw bits with z, log_prob = workbook.sample_latent(logits, 'bernoulli', "
        "'score_function') and put log_prob in the loss (unbiased), or 'gumbel_softmax' (biased, low variance); "
        "a count of n draws is the sum of n such bits."
    ),
}

#: argmax's ids go into an embedding lookup.
TOKENS_HINT = (
    "argmax picks discrete tokens, and their ids go into an embedding lookup: neither carries a "
    "gradient. Use a straight-through one-hot (notebook 06): soft = softmax(logits); one_hot = "
    "soft + stop_gradient(one_hot(argmax(logits)) - soft), and look up by a product instead of ids: "
    "ops.matmul(one_hot, embedding.embeddings). For sampled tokens: "
    "workbook.sample_latent(logits, 'categorical', 'gumbel_softmax_st')."
)
#: argmax's index is cast to a float and used as a number.
INDEX_AS_NUMBER_HINT = (
    "argmax's index is used as a number (a class map, a mask): use the expected index, with the hard "
    "index forward: soft_index = sum(softmax(x) * arange(classes), axis=-1); "
    "soft_index + stop_gradient(cast(argmax(x), float) - soft_index). For a one-hot instead: "
    "soft + stop_gradient(hard - soft) with soft = softmax(x)."
)
#: A rounded position is used to read (gather) from a signal.
GRID_HINT = (
    "These integers are positions to read from (a sampling grid), and a position made by rounding has "
    "no gradient: interpolate instead. With x0 = floor(x) and i0 = cast(x0, int32), read both "
    "neighbours and weigh them by (x0 + 1 - x) and (x - x0), computed from the float x: "
    "gather(v, i0) * (x0 + 1 - x) + gather(v, i0 + 1) * (x - x0) (in 2-D, the four corners, as a "
    "spatial transformer's bilinear sampler does)."
)
#: The integer goes on through bitwise ops ({names}) before it is a float again.
BITWISE_HINT = (
    "The integer goes on through {names} before it is a float again, so a straight-through on this "
    "op alone leaves the next one cut. Put the whole integer step inside one straight-through: "
    "x + stop_gradient(f(x) - x), where f(x) is everything from the cast to the cast back to float "
    "(shaped like x)."
)

#: Each metric: the words that name it (in a function's name or a keras.metrics call), its name,
#: the stand-in loss to train on (code that evaluates to a Keras loss) and that loss's formula.
METRICS = (
    (("boxiou", "bboxiou", "boxesiou", "giou"), "box IoU", "workbook.losses.box_iou",
     "1 - IoU of the corners, with the overlap min(x2) - max(x1) clipped at 0"),
    (("iou", "jaccard", "meaniou"), "IoU", "workbook.losses.soft_iou",
     "1 - sum(y_true * y_pred) / (sum(y_true) + sum(y_pred) - sum(y_true * y_pred)), on the probabilities"),
    (("dice",), "Dice", "workbook.losses.soft_dice",
     "1 - 2 * sum(y_true * y_pred) / (sum(y_true) + sum(y_pred)), on the probabilities"),
    (("f1", "fbeta", "fscore"), "F1", "workbook.losses.soft_dice",
     "1 - soft F1, 1 - 2 * sum(y_true * y_pred) / (sum(y_true) + sum(y_pred)), on the probabilities"),
    (("auc", "roc"), "AUC", "workbook.losses.pairwise_ranking",
     "the mean of softplus(-(score of a positive - score of a negative)) over the pairs AUC counts"),
    (("wer", "cer", "edit", "levenshtein"), "an edit distance (word or character error rate)", "workbook.losses.ctc",
     "CTC on the per-step logits, the last class the blank"),
    (("directional", "direction", "mda"), "directional accuracy", "workbook.losses.smooth_directional",
     "mse + mean(relu(-sign(true change) * predicted change)), growing with every move predicted the wrong way"),
    (("precision", "recall"), "precision or recall", None,
     "cross-entropy on the probabilities, whose minimum is the same prediction"),
    (("accuracy", "acc"), "an accuracy", None,
     "cross-entropy on the probabilities, whose minimum is the same prediction"),
)  # fmt: skip
#: Discrete metrics that count agreements of hard labels: piecewise constant, with a stand-in of their own.
HONEST_METRICS = (
    (("kappa", "qwk", "cohen"), "quadratic weighted kappa", "workbook.losses.soft_qwk",
     "1 - kappa with the confusion matrix made of the probabilities"),
)  # fmt: skip
#: A metric of METRICS used as a loss: {Name} is {name} capitalised.
METRIC_AS_LOSS_HINT = (
    "{Name} is a metric used as a loss: it counts hard decisions, so as a whole it has no useful gradient, "
    "and a straight-through on this one op would leave the next one cut. Train on `{loss}` ({formula}), "
    "its differentiable stand-in, and keep {name} as a metric (compile(metrics=...))."
)
#: A metric of HONEST_METRICS used as a loss.
HONEST_METRIC_HINT = (
    "Zero almost everywhere: {name} counts agreements of hard labels, which move in whole steps, so its true "
    "gradient is 0 wherever it exists, and a gradient for it is a choice. Train on `{loss}` ({formula}, lowest "
    "at the perfect prediction), a smooth stand-in, and keep {name} as a metric (compile(metrics=...)); a "
    "straight-through one-hot in place of each argmax is the other choice, with the exact value forward."
)
#: A tensor built once from a weight in build() (``line``, ``attribute = expression``), then the cause's hint.
BUILT_TENSOR_FIX = (
    "Replace `{line}` with `pass`, and replace `{attribute}` with `{expression}`: a tensor computed once from "
    "the weight is a constant to every call; computed in call(), from the weight, it passes the gradient back. {hint}"
)

# --- Fixes written in your own code (workbook.finder.advice.rewrites) ----------------------------

#: A replacement; its first code is OLD, as tests/test_finder_advice.py reads it.
REPLACE = "Replace `{old}` with `{new}`: {why}."
#: Two replacements, made together.
REPLACE_TWO = "Replace `{old}` with `{new}`, and replace `{second_old}` with `{second_new}`: {why}."
#: What a straight-through surrogate does, said of a rewrite.
STRAIGHT_THROUGH = "it keeps the forward value and passes the gradient through as 1 (straight-through)"
#: Why each rewrite keeps the forward value and lets the gradient through, by the rewrite's kind;
#: "step" ({name}: the call's name) and "same_shape" ({op}: the op's type) are to be filled in.
REWRITE_WHY = {
    "step": "{name} has no useful gradient; " + STRAIGHT_THROUGH,
    "grid": (
        "a position made by rounding has no gradient, so read both neighbours and weigh them by how near "
        "the position is (linear interpolation, what a spatial transformer's sampler does)"
    ),
    "cast": "the same whole numbers, as floats; " + STRAIGHT_THROUGH,
    "bitwise": (
        "the integer goes on through bitwise ops, so a straight-through on the cast alone would leave the next "
        "op cut; this one spans the whole integer step, from the cast to the cast back to float"
    ),
    "comparison": (
        "the same 0 or 1 forward, and backward the slope of a steep sigmoid of the difference, so the gradient "
        "reaches both sides of the comparison"
    ),
    "one_hot": "the same one-hot forward, and backward the softmax's gradient (a straight-through one-hot)",
    "whole_step": (
        "the value goes through an integer and back to a float on this line, so a straight-through on one op "
        "would leave the next cast cutting; this one spans the whole step, with the same values forward"
    ),
    "cast_index": (
        "the integer is used as an index, so the one_hot that takes it must pass the gradient too: the same "
        "one-hot forward, and backward the gradient of a softmax of the distance to each class"
    ),
    "lookup": (
        "ids carry no gradient, a product does: the same rows forward, chosen by a straight-through one-hot, "
        "and the gradient reaches both the scores and the table"
    ),
    "index": "the index is used as a number: the same index forward, and backward the gradient of the expected index",
    "shuffle": "a permutation of the first axis like shuffle's, and gather passes the gradient back",
    "area": "averaging each block is what an area resize by a whole factor does",
    "bincount": "the same sums of the weights per id, and the gradient reaches the weights",
    "same_shape": (
        "TensorFlow has no gradient for {op}; this keeps its output forward and passes the gradient "
        "back as if it were the identity, the usual estimate for an image adjustment (BPDA)"
    ),
    "sampling": (
        "a sampled index has no gradient; a one-hot sample from workbook.sample_latent (notebook 06) has a "
        "relaxed one (Gumbel-softmax, straight-through), so the one_hot of the index goes"
    ),
}

# --- The missing-gradients extension's notes (workbook.finder.missing_gradients) -----------
# {name} is the extension's name, which starts each line that says why it named no culprit.

#: Above the report, under the error or the cell's output.
REPORTED_ON = "The op that cut the gradient, found by workbook.find_gradient_breaks on {description}:"
#: What the report was found on: the first batch of a dataset, or the first rows of arrays.
FIRST_BATCH = "model {model!r} and the first batch ({rows} rows) of this call's dataset"
FIRST_ROWS = "model {model!r} and the first {rows} rows of this call's data"
#: Why the extension did not read a batch ({why_not}, one of the reasons below), and what to paste.
NOT_READ = "{name}: {why_not}. To name the op that cut the gradient, pass one batch: {call}"
GENERATOR = "the batches of this call come from a generator, which it does not read again (that would take your data)"
PIPELINE = (
    "the batches of this call come from a tf.data pipeline with a generator, a shuffle, random ops or a cache, "
    "which it does not read again (that would change what your training reads)"
)
NOT_TUPLES = "its batches are not (x, y) or (x, y, sample_weight) tuples"
ONLY_ARRAYS = (
    "it reads a batch only from NumPy arrays and tensors (alone, or in a dict, list or tuple of them), "
    "and this call was given {given}"
)
#: An optimizer step in a loop of your own: the model to pass, as your line names it.
OWN_LOOP = (
    "No variable got a gradient. To name the op that cut it, pass your model and one batch to "
    "the finder: workbook.find_gradient_breaks({model}, (x_batch, y_batch), loss=your_loss)."
)
#: When the finder itself fails, or is interrupted: the student's work goes on.
COULD_NOT_FOLLOW = "{name} could not follow the gradient of {description}: {error}"
NO_CULPRIT = "{name}: no culprit named, it failed: {error}"
INTERRUPTED = "{name}: interrupted while it looked for the op that cut the gradient; no culprit this time."
