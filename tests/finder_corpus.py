"""Gradient breaks and look-alikes from public sources, for testing find_gradient_breaks on real code.

Each case is a function decorated with ``@case(source)`` that builds a target and an
example (and optionally keyword arguments for the finder). The source names where the
code, or the mistake it shows, was published. A case that cuts the gradient marks
the line that creates the culprit with ``# culprit: OpType reason`` (or
``# culprit-noline: OpType reason`` when the culprit is the example itself, which has
no line); a case registered with ``clean=True`` lets the gradient through and must
report ok. The answers are written by hand, not computed.

The code is adapted to Keras 3 and TensorFlow 2 and shrunk to a few units, so that
each case runs in well under a second.
"""

import inspect
import re

import keras
import numpy as np
import tensorflow as tf
from keras import ops

CASES = []
RNG = np.random.default_rng(0)
X = RNG.normal(size=(4, 3)).astype("float32")
SEQUENCES = RNG.normal(size=(4, 5, 3)).astype("float32")
TARGETS = RNG.normal(size=(4, 1)).astype("float32")
LABELS = np.array([0, 2, 1, 2], dtype="int32")
IMAGES = np.random.default_rng(1).uniform(size=(4, 2, 2, 3)).astype("float32")  # RGB in [0, 1], 2x2 pixels

AUTODIFF = "https://www.tensorflow.org/guide/autodiff"
ADVANCED = "https://www.tensorflow.org/guide/advanced_autodiff"
RNN_GUIDE = "https://keras.io/guides/working_with_rnns/"
MARKER = re.compile(r"#\s*culprit(-noline)?:\s*(\S+)\s+(\S+)")
TRAIN_STEP_GUIDE = "https://keras.io/guides/custom_train_step_in_tensorflow/"


def culprit_marker(function):
    """(op type, reason, line or None) from the ``# culprit:`` marker inside ``function``, or None."""
    lines, start = inspect.getsourcelines(function)
    for offset, text in enumerate(lines):
        match = MARKER.search(text)
        if match:
            return match.group(2), match.group(3), None if match.group(1) else start + offset
    return None


def case(source, clean=False):
    """Register a case builder with the public source it comes from."""

    def register(builder):
        builder.source, builder.clean = source, clean
        CASES.append(builder)
        return builder

    return register


def sequence_model(*middle, recurrent=None):
    """Input (5 steps, 3 features) -> a recurrent layer -> ``middle`` layers -> Dense(1), compiled with mse."""
    model = keras.Sequential([keras.Input((5, 3)), recurrent or keras.layers.LSTM(4), *middle, keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model


class MinimalRNNCell(keras.layers.Layer):
    """The custom cell of keras.io "Working with RNNs"; ``output(h)`` makes each new state."""

    def __init__(self, units, output=None, **kwargs):
        super().__init__(**kwargs)
        self.units, self.state_size, self.make_output = units, units, output or (lambda h: h)

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(self.units, self.units), name="recurrent_kernel")

    def call(self, inputs, states):
        h = ops.matmul(inputs, self.kernel) + ops.matmul(states[0], self.recurrent_kernel)
        output = self.make_output(h)
        return output, [output]


# ---------------------------------------------------------------- culprits --


# keras-team/keras#11157: Lambda(K.argmax) after an LSTM, "An operation has `None` for gradient".
@case("https://github.com/keras-team/keras/issues/11157")
def argmax_lambda_after_lstm():
    def argmax_as_float(t):
        return ops.cast(ops.argmax(t, axis=-1), "float32")  # culprit: ArgMax integer_output

    middle = [
        keras.layers.Dense(3, activation="softmax"),
        keras.layers.Reshape((3, 1)),
        keras.layers.Lambda(argmax_as_float),
    ]
    return sequence_model(*middle, recurrent=keras.layers.LSTM(4)), (SEQUENCES, TARGETS)


# keras-team/keras#11157 (the same model, second half): the argmax result feeds an Embedding as an index.
@case("https://github.com/keras-team/keras/issues/11157")
def embedding_of_a_computed_index():
    def index_from(t):
        return ops.cast(ops.clip(t * 5.0, 0.0, 9.0), "int32")  # culprit: Cast integer_output

    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(2)(inputs)
    codes = keras.layers.Lambda(index_from)(hidden)
    embedded = keras.layers.Flatten()(keras.layers.Embedding(10, 2)(codes))
    model = keras.Model(inputs, keras.layers.Dense(1)(embedded))
    model.compile(optimizer="adam", loss="mse")
    return model, (X, TARGETS)


# tensorflow/tensorflow#15278: argmax followed by a cast, tf.gradients gives [None].
@case("https://github.com/tensorflow/tensorflow/issues/15278")
def argmax_then_cast():
    def use_cast(b):
        c = tf.argmax(b * 2.0, axis=-1)  # culprit: ArgMax integer_output
        return tf.cast(c, tf.float32)

    return use_cast, X


# tensorflow/tensorflow#14931: "Missing gradient for tf.argmax".
@case("https://github.com/tensorflow/tensorflow/issues/14931")
def argmax_plain():
    def choose(x):
        return tf.cast(tf.math.argmax(x, axis=1), tf.float32) * 0.5  # culprit: ArgMax integer_output

    return choose, X


# tensorflow/tensorflow#897: the gradient of tf.floor (now None).
@case("https://github.com/tensorflow/tensorflow/issues/897")
def floor_added_to_input():
    def out(vif):
        return tf.floor(vif) + 1.0  # culprit: Floor no_gradient

    return out, X


# tensorflow/tensorflow#8625: a threshold by floor inside the loss, "No gradients provided for any variable".
@case("https://github.com/tensorflow/tensorflow/issues/8625")
def floor_threshold_in_loss():
    def threshold_loss(y_true, y_prob):
        y_pred = tf.floor(y_prob + 0.5)  # culprit: Floor no_gradient
        return tf.reduce_mean(tf.abs(y_true - y_pred))

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="sgd", loss=threshold_loss)
    return model, (X, (TARGETS > 0).astype("float32"))


# keras-team/keras#12521: the error message names K.round among "common ops without gradient".
@case("https://github.com/keras-team/keras/issues/12521")
def round_in_custom_loss():
    def rounded_mse(y_true, y_pred):
        return ops.mean(ops.square(y_true - ops.round(y_pred)))  # culprit: Round no_gradient

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss=rounded_mse)
    return model, (X, TARGETS)


# The same message (keras-team/keras#12521) asked of a loss passed as loss= to an uncompiled model.
@case("https://github.com/keras-team/keras/issues/12521")
def round_in_passed_loss():
    def rounded_mae(y_true, y_pred):
        return ops.mean(ops.abs(y_true - ops.round(y_pred * 4.0)))  # culprit: Round no_gradient

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    return model, (X, TARGETS), {"loss": rounded_mae}


# TensorFlow's autodiff guide, "Did calculations outside of TensorFlow" (np.mean on a tensor).
@case(AUTODIFF)
def numpy_in_the_middle():
    def mean_of_squares(x):
        x2 = x**2
        return tf.reduce_mean(np.mean(x2, axis=0))  # culprit: NotImplementedError untraceable

    return mean_of_squares, X


# TensorFlow's autodiff guide, "Took gradients through an integer or string" (tf.constant(10)).
@case(AUTODIFF)
def integer_example():
    def square(x):
        return x * x

    return square, np.array([10])  # culprit-noline: (input) integer_input


# TensorFlow's autodiff guide, "Took gradients through a stateful object" (assign_add, then read).
@case(AUTODIFF)
def value_through_a_variable():
    holder = tf.Variable(tf.zeros((4, 3)))

    def through(x0):
        holder.assign_add(x0)  # culprit: (none) disconnected
        return holder**2

    return through, X


# TensorFlow's autodiff guide, "No gradient registered" (tf.image.adjust_contrast).
@case(AUTODIFF)
def adjust_contrast():
    def contrast(x):
        image = tf.reshape(x, (1, 2, 2, 3))
        return tf.image.adjust_contrast(image, 2.0)  # culprit: AdjustContrastv2 no_gradient_registered

    return contrast, X


# TensorFlow's autodiff guide, "Replaced a variable with a tensor" (x = x + 1 instead of assign_add),
# here in a Keras layer whose call rebinds its weight.
@case(AUTODIFF)
def layer_rebinds_its_weight():
    class Drifting(keras.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], 1), name="w")

        def call(self, x):
            self.w = self.w + 1.0  # culprit: (none) disconnected
            return ops.matmul(x, self.w)

    layer = Drifting()
    layer(X)
    return layer, X


# TensorFlow's autodiff guide: z = y * y does not depend on x; the gradient for x is None.
@case(AUTODIFF)
def output_ignores_an_input():
    def z(x, y):
        return y * y  # culprit: (none) disconnected

    return z, (X, X)


# TensorFlow's autodiff guide: integers and strings are not differentiable (a string round trip).
@case(AUTODIFF)
def string_round_trip():
    def through_text(x):
        text = tf.strings.as_string(x)  # culprit: AsString integer_output
        return tf.strings.to_number(text)

    return through_text, X


# TensorFlow's autodiff guide, "Control flow": only the branch taken gets a gradient; here the
# branch taken uses sign, whose gradient is zero.
@case(AUTODIFF)
def sign_inside_cond():
    def branchy(x):
        return tf.cond(
            tf.reduce_sum(x) > -100.0,
            lambda: tf.sign(x) * 2.0,  # culprit: Sign zero_gradient
            lambda: tf.zeros_like(x),
        )

    return branchy, X


# TensorFlow's advanced autodiff guide, "Stop gradient": tf.stop_gradient blocks the path on purpose.
@case(ADVANCED)
def stop_gradient_on_the_only_path():
    def stopped(x):
        frozen = tf.stop_gradient(x * 2.0)  # culprit: StopGradient stop_gradient
        return frozen + 1.0

    return stopped, X


# tensorflow/tensorflow#26557: tf.stop_gradient inside a Keras model, "An operation has `None` for gradient".
@case("https://github.com/tensorflow/tensorflow/issues/26557")
def stop_gradient_in_a_model():
    def frozen(t):
        return tf.stop_gradient(t)  # culprit: StopGradient stop_gradient

    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(2), keras.layers.Lambda(frozen), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    return model, (X, TARGETS)


# kevinzakka/spatial-transformer-network#19: sampling coordinates computed, floored and cast
# for tf.gather: no gradient reaches the coordinates.
@case("https://github.com/kevinzakka/spatial-transformer-network/issues/19")
def gather_at_computed_coordinates():
    def sample(x, image):
        coordinate = tf.floor(tf.clip_by_value((x[:, 0] + 1.0) * 2.0, 0.0, 2.0))
        index = tf.cast(coordinate, tf.int32)  # culprit: Cast integer_output
        return tf.gather(image, index, axis=1, batch_dims=1)

    return sample, (X, X)


# tensorflow/tensorflow#24216: tf.gather_nd with indices computed from floats; the indices get None.
@case("https://github.com/tensorflow/tensorflow/issues/24216")
def gather_nd_with_computed_indices():
    def pick(x, params):
        rows = tf.cast(tf.abs(x[:, :1]) * 1.5, tf.int32) % 4  # culprit: Cast integer_output
        return tf.gather_nd(params, rows)

    return pick, (X, X)


# PaddlePaddle/PaddleTest#2935 and teddykoker/torchsort#24: top-k indices carry no gradient.
@case("https://github.com/teddykoker/torchsort/issues/24")
def gather_by_top_k_indices():
    def best_values(scores, values):
        chosen = tf.math.top_k(scores, k=2).indices  # culprit: TopKV2 integer_output
        return tf.gather(values, chosen, axis=1, batch_dims=1)

    return best_values, (X, X)


# PaddlePaddle/PaddleTest#2935: a weight that reaches the loss only through top-k indices.
@case("https://github.com/PaddlePaddle/PaddleTest/pull/2935")
def weight_used_only_for_top_k():
    class Router(keras.layers.Layer):
        def build(self, input_shape):
            self.gate = keras.layers.Dense(3)
            self.gate.build(input_shape)

        def call(self, x):
            chosen = ops.top_k(self.gate(x), k=1)[1]  # culprit: TopKV2 integer_output
            return ops.take_along_axis(x, chosen, axis=1)

    return Router(), X


# keras-team/keras#12521 (answer): "does your code have any weights that were defined but left unused?"
@case("https://github.com/keras-team/keras/issues/12521")
def unused_weight_in_custom_layer():
    class GraphConvolution(keras.layers.Layer):
        def build(self, input_shape):
            self.a = self.add_weight(shape=(input_shape[-1], input_shape[-1]), name="a")
            self.w = self.add_weight(shape=(input_shape[-1], 2), name="w")  # culprit: (none) disconnected

        def call(self, x):
            return ops.matmul(x, self.a)

    layer = GraphConvolution()
    layer(X)
    return layer, X


# remigenet/TKAT#8: UserWarning "Gradients do not exist for variables ['sub_tkan_kernel']".
@case("https://github.com/remigenet/TKAT/issues/8")
def unused_sub_kernel_in_model():
    class SubLayer(keras.layers.Layer):
        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], 3), name="kernel")
            self.sub_kernel = self.add_weight(shape=(3, 3), name="sub_tkan_kernel")  # culprit: (none) disconnected

        def call(self, x):
            return ops.tanh(ops.matmul(x, self.kernel))

    model = keras.Sequential([keras.Input((3,)), SubLayer(), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model, (X, TARGETS)


# keras.io "Making new layers and models via subclassing": create weights in build, use them in
# call; here a tensor is computed from the weight once in build and reused.
@case("https://keras.io/guides/making_new_layers_and_models_via_subclassing/")
def tensor_computed_in_build():
    class Scaled(keras.layers.Layer):
        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], 2), name="kernel")
            self.doubled = self.kernel * 2.0  # culprit: (none) disconnected

        def call(self, x):
            return ops.matmul(x, self.doubled)

    layer = Scaled()
    layer.build(X.shape)
    return layer, X


# google-research/simclr#105: "Gradients do not exist" for a projection head that is not on the loss's path.
@case("https://github.com/google-research/simclr/issues/105")
def head_off_the_path():
    class TwoHeads(keras.Model):
        def __init__(self):
            super().__init__()
            self.encoder = keras.layers.Dense(4)
            self.projection = keras.layers.Dense(2)
            self.classifier = keras.layers.Dense(1)

        def call(self, x):
            features = self.encoder(x)
            self.projection(features)  # culprit: (none) disconnected
            return self.classifier(features)

    model = TwoHeads()
    model.compile(optimizer="adam", loss="mse")
    model(X)
    return model, (X, TARGETS)


# keras.io "Writing a custom train_step": a train_step that rounds the predictions before its loss.
@case(TRAIN_STEP_GUIDE)
def rounding_train_step():
    class CustomModel(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = ops.round(self(x, training=True))  # culprit: Round no_gradient
                loss = ops.mean(ops.square(y - y_pred))
            gradients = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
            return {"loss": loss}

    inputs = keras.Input((3,))
    model = CustomModel(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="adam")
    return model, (X, TARGETS)


# andreped/GradientAccumulator#24: a train_step override where part of the network gets no gradient.
@case("https://github.com/andreped/GradientAccumulator/issues/24")
def train_step_with_a_cast():
    class Accumulating(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                hits = tf.cast(y_pred > 0.0, tf.float32)  # culprit: Greater integer_output
                loss = tf.reduce_mean(tf.square(y - hits))
            gradients = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
            return {"loss": loss}

    inputs = keras.Input((3,))
    model = Accumulating(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd")
    return model, (X, TARGETS)


# keras.io Model training APIs, Model.compute_loss: override it and compile without loss=.
@case("https://keras.io/api/models/model_training_apis/")
def compute_loss_with_sign():
    class SignLoss(keras.Model):
        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            return ops.mean(ops.abs(y - ops.sign(y_pred)))  # culprit: Sign zero_gradient

    inputs = keras.Input((3,))
    model = SignLoss(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="adam")
    return model, (X, TARGETS)


# tensorflow/tensorflow#62174 and #19897: gradients through tf.map_fn; here the body floors.
@case("https://github.com/tensorflow/tensorflow/issues/62174")
def floor_inside_map_fn():
    def per_row(x):
        return tf.map_fn(lambda row: tf.floor(row) * 2.0, x)  # culprit: Floor no_gradient

    return per_row, X


# tensorflow/tensorflow#21985: "While loop no gradients provided for any variable".
@case("https://github.com/tensorflow/tensorflow/issues/21985")
def floor_inside_while_loop():
    def iterate(x):
        def body(i, h):
            return i + 1, tf.floor(h * 1.5)  # culprit: Floor no_gradient

        return tf.while_loop(lambda i, h: i < 3, body, (tf.constant(0), x))[1]

    return iterate, X


# TensorFlow's tf.function guide: a helper decorated with @tf.function is a call of its own graph.
@case("https://www.tensorflow.org/guide/function")
def round_inside_tf_function():
    @tf.function
    def quantize(t):
        return tf.round(t * 4.0) / 4.0  # culprit: Round no_gradient

    def model(x):
        return quantize(x * 2.0) + 1.0

    return model, X


# TensorFlow's tf.function guide: a tf.function calling another, the culprit two calls deep.
@case("https://www.tensorflow.org/guide/function")
def cast_two_functions_deep():
    @tf.function
    def levels(t):
        return tf.cast(t * 3.0, tf.int32)  # culprit: Cast integer_output

    @tf.function
    def quantize(t):
        return tf.cast(levels(t), tf.float32) / 3.0

    return quantize, X


# keras.io "Working with RNNs", a custom cell (MinimalRNNCell); here its state is rounded.
@case(RNN_GUIDE)
def rounding_rnn_cell():
    cell = MinimalRNNCell(4, output=lambda h: ops.round(h))  # culprit: Round no_gradient
    return sequence_model(recurrent=keras.layers.RNN(cell)), (SEQUENCES, TARGETS)


# tensorflow/tensorflow#43258: an LSTM model where no variable gets a gradient; here the cut is
# a one_hot of the predicted class before the loss.
@case("https://github.com/tensorflow/tensorflow/issues/43258")
def one_hot_of_prediction_after_lstm():
    def hard_class(t):
        return ops.one_hot(ops.argmax(t, axis=-1), 3)  # culprit: ArgMax integer_output

    model = keras.Sequential(
        [
            keras.Input((5, 3)),
            keras.layers.Bidirectional(keras.layers.LSTM(2)),
            keras.layers.Dense(3),
            keras.layers.Lambda(hard_class),
        ]
    )
    model.compile(optimizer="adam", loss="categorical_crossentropy")
    return model, (SEQUENCES, keras.utils.to_categorical(LABELS, 3))


# tf.numpy_function's documentation: "the function is not differentiable".
@case("https://www.tensorflow.org/api_docs/python/tf/numpy_function")
def numpy_function_in_a_layer():
    def doubled(t):
        return tf.numpy_function(lambda a: (a * 2.0).astype(np.float32), [t], tf.float32)  # culprit: PyFunc no_gradient

    return doubled, X


# tensorflow/tensorflow#8625 (comparison version): a mask from a comparison, cast and used as the output.
@case("https://github.com/tensorflow/tensorflow/issues/8625")
def comparison_mask_as_prediction():
    def predicted(x):
        positive = x > 0.5  # culprit: Greater integer_output
        return tf.cast(positive, tf.float32)

    return predicted, X


# Courbariaux et al. (2016), BinaryConnect/BNN (arXiv:1602.02830): binarising with sign, whose
# gradient is zero, is why they use a straight-through estimator.
@case("https://arxiv.org/abs/1602.02830")
def sign_binarisation():
    def binary_dense(x):
        weights = tf.constant(RNG.normal(size=(3, 2)).astype("float32"))
        return tf.matmul(tf.sign(x), weights)  # culprit: Sign zero_gradient

    return binary_dense, X


# apache/mxnet#717 and tensorflow/tensorflow#951: round, ceil and floor have no gradient.
@case("https://github.com/apache/mxnet/pull/717")
def ceil_of_scaled_input():
    def up(x):
        return tf.math.ceil(x * 3.0) / 3.0  # culprit: Ceil no_gradient

    return up, X


# TensorFlow's autodiff guide, "Took gradients through an integer": an int bitcast reinterprets bits.
@case(AUTODIFF)
def bitcast_to_int():
    def bits(x):
        return tf.cast(tf.bitcast(x, tf.int32), tf.float32) * 1e-9  # culprit: Bitcast integer_output

    return bits, X


# The tf.unique documentation; no gradient is registered for Unique, inside a tf.function too.
@case("https://www.tensorflow.org/api_docs/python/tf/unique")
def unique_inside_tf_function():
    @tf.function
    def distinct(x):
        values, _ = tf.unique(tf.reshape(x, [-1]))  # culprit: Unique no_gradient_registered
        return values * 2.0

    return distinct, X


# tensorflow/tensorflow#126083: adjust_saturation has no registered gradient; beside a skip connection
# the gradient has another way, yet tape.gradient (and fit) raise LookupError.
@case("https://github.com/tensorflow/tensorflow/issues/126083")
def saturation_beside_a_skip_connection():
    def saturated(t):
        image = ops.reshape(ops.sigmoid(t), (-1, 1, 1, 3))
        vivid = tf.image.adjust_saturation(image, 2.0)  # culprit: AdjustSaturation no_gradient_registered
        return t + ops.reshape(vivid, (-1, 3))

    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(3), keras.layers.Lambda(saturated), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    return model, (X, TARGETS)


# tensorflow/tensorflow#32964: tf.py_function differentiates only the TensorFlow ops of its function;
# here the function goes through .numpy(), inside a layer.
@case("https://github.com/tensorflow/tensorflow/issues/32964")
def py_function_through_numpy_in_a_layer():
    class Doubling(keras.layers.Layer):
        def call(self, x):
            def twice(a):
                return tf.constant(a.numpy() * 2.0)

            doubled = tf.py_function(twice, [x], tf.float32)  # culprit: EagerPyFunc untraceable
            doubled.set_shape(x.shape)
            return doubled

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3), Doubling(), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model, (X, TARGETS)


# tensorflow/tensorflow#36306: a variable used inside Dataset.reduce gets the gradient None.
@case("https://github.com/tensorflow/tensorflow/issues/36306")
def variable_inside_dataset_reduce():
    class Spread(keras.layers.Layer):
        def build(self, input_shape):
            self.u = self.add_weight(shape=(input_shape[-1],), name="u")

        def call(self, x):
            steps = tf.data.Dataset.range(3).map(lambda i: tf.cast(i, tf.float32))

            def spread(total, y):
                return total + (y - self.u) ** 2

            total = steps.reduce(tf.zeros_like(self.u), spread)  # culprit: ReduceDataset no_gradient
            return x * total

    return Spread(), X


# tensorflow/tensorflow#54214: tf.sparse.reduce_max defines no gradient; from_dense only builds the indices.
@case("https://github.com/tensorflow/tensorflow/issues/54214")
def sparse_reduce_max_of_a_dense_tensor():
    def row_max(x):
        sparse = tf.sparse.from_dense(tf.nn.relu(x))
        return tf.sparse.reduce_max(sparse, axis=1)  # culprit: SparseReduceMax no_gradient_registered

    return row_max, X


# keras-team/tf-keras#826: a Dense's output made integer inside a functional model for a categorical
# layer; here the cast is inside keras.layers.Hashing, which the model calls for you.
@case("https://github.com/keras-team/tf-keras/issues/826")
def hashing_a_dense_output():
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(3)(inputs)
    buckets = keras.layers.Hashing(num_bins=4)(hidden)  # culprit: Cast integer_output
    model = keras.Model(inputs, keras.layers.Dense(1)(ops.cast(buckets, "float32")))
    model.compile(optimizer="adam", loss="mse")
    return model, (X, TARGETS)


# The CategoryEncoding documentation: "It accepts integer values as inputs"; fed a Dense's output, it casts.
@case("https://keras.io/api/layers/preprocessing_layers/categorical/category_encoding/")
def category_encoding_of_a_dense_output():
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(3, activation="sigmoid"),
            keras.layers.CategoryEncoding(num_tokens=4, output_mode="multi_hot"),  # culprit: Cast integer_output
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    return model, (X, TARGETS)


# tensorflow/tensorflow#62145: an augmentation layer (RandomContrast) placed after a Conv2D in the model;
# here RandomSaturation, whose HSV round trip passes no gradient back to the convolution.
@case("https://github.com/tensorflow/tensorflow/issues/62145")
def random_saturation_after_a_convolution():
    model = keras.Sequential(
        [
            keras.Input((2, 2, 3)),
            keras.layers.Conv2D(3, 1, activation="sigmoid"),
            keras.layers.RandomSaturation(0.5),  # culprit: HSVToRGB no_gradient
            keras.layers.Flatten(),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    return model, (IMAGES, TARGETS)


# ------------------------------------------------------- clean look-alikes --


# tensorflow/tensorflow#43258: an LSTM model; the stock layer runs a while loop over the steps.
@case("https://github.com/tensorflow/tensorflow/issues/43258", clean=True)
def lstm_model():
    return sequence_model(recurrent=keras.layers.LSTM(4)), (SEQUENCES, TARGETS)


@case(RNN_GUIDE, clean=True)
def gru_model():
    return sequence_model(recurrent=keras.layers.GRU(4)), (SEQUENCES, TARGETS)


@case(RNN_GUIDE, clean=True)
def simple_rnn_model():
    return sequence_model(recurrent=keras.layers.SimpleRNN(4)), (SEQUENCES, TARGETS)


# tensorflow/tensorflow#1511: "No gradients provided" blamed on bidirectional_dynamic_rnn.
@case("https://github.com/tensorflow/tensorflow/issues/1511", clean=True)
def bidirectional_lstm_model():
    return sequence_model(recurrent=keras.layers.Bidirectional(keras.layers.LSTM(2))), (SEQUENCES, TARGETS)


@case(RNN_GUIDE, clean=True)
def stacked_lstm_returning_sequences():
    recurrent = keras.layers.LSTM(4, return_sequences=True)
    return sequence_model(keras.layers.LSTM(2), recurrent=recurrent), (SEQUENCES, TARGETS)


# keras.io "Working with RNNs": the MinimalRNNCell, as published.
@case(RNN_GUIDE, clean=True)
def minimal_rnn_cell():
    return sequence_model(recurrent=keras.layers.RNN(MinimalRNNCell(4))), (SEQUENCES, TARGETS)


# tensorflow/tensorflow#19897: propagate gradients through map_fn (they do, in TensorFlow 2).
@case("https://github.com/tensorflow/tensorflow/issues/19897", clean=True)
def map_fn_differentiable():
    def per_row(x):
        return tf.map_fn(lambda row: tf.tanh(row) * row, x)

    return per_row, X


# tensorflow/tensorflow#62174: map_fn over indices, reading a captured float tensor.
@case("https://github.com/tensorflow/tensorflow/issues/62174", clean=True)
def map_fn_over_indices():
    def per_learner(logits):
        return tf.map_fn(lambda i: tf.reduce_sum(logits[i] ** 2), tf.range(4), fn_output_signature=tf.float32)

    return per_learner, X


# tensorflow/tensorflow#21985: a differentiable tf.while_loop, weights read inside the body.
@case("https://github.com/tensorflow/tensorflow/issues/21985", clean=True)
def while_loop_reading_a_weight():
    class Unrolled(keras.layers.Layer):
        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], input_shape[-1]), name="kernel")

        def call(self, x):
            def body(i, h):
                return i + 1, tf.tanh(tf.matmul(h, self.kernel))

            return tf.while_loop(lambda i, h: i < 3, body, (tf.constant(0), x))[1]

    return Unrolled(), X


# The tf.scan documentation: a cumulative sum is differentiable.
@case("https://www.tensorflow.org/api_docs/python/tf/scan", clean=True)
def scan_cumulative():
    def running(x):
        return tf.scan(lambda total, row: total + row * row, x)

    return running, X


# TensorFlow's tf.function guide: a decorated helper called from the model.
@case("https://www.tensorflow.org/guide/function", clean=True)
def tf_function_helper():
    @tf.function
    def scaled_softplus(t):
        return tf.nn.softplus(t) * 2.0

    def model(x):
        return scaled_softplus(x) + x

    return model, X


# TensorFlow's tf.function guide: a layer whose call is a tf.function reading its weight.
@case("https://www.tensorflow.org/guide/function", clean=True)
def layer_with_tf_function_call():
    class Projection(keras.layers.Layer):
        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], 2), name="kernel")

        @tf.function
        def call(self, x):
            return tf.matmul(x, self.kernel)

    return Projection(), X


# TensorFlow's autodiff guide, "Control flow": each branch of tf.cond gets its own gradient.
@case(AUTODIFF, clean=True)
def cond_both_differentiable():
    def branchy(x):
        return tf.cond(tf.reduce_sum(x) > 0.0, lambda: x * 2.0, lambda: x**2)

    return branchy, X


@case("https://www.tensorflow.org/api_docs/python/tf/switch_case", clean=True)
def switch_case_differentiable():
    def pick(x):
        return tf.switch_case(tf.constant(1), [lambda: x * 2.0, lambda: tf.sin(x), lambda: x])

    return pick, X


# The tf.where documentation: a boolean condition selecting between float branches.
@case("https://www.tensorflow.org/api_docs/python/tf/where", clean=True)
def where_with_float_branches():
    def leaky(x):
        return tf.where(x > 0.0, x, 0.1 * x)

    return leaky, X


@case("https://www.tensorflow.org/api_docs/python/tf/boolean_mask", clean=True)
def boolean_mask_sum():
    def positive_sum(x):
        return tf.reduce_sum(tf.boolean_mask(x, x > 0.0))

    return positive_sum, X


# tensorflow/tensorflow#5342: gather_nd with data-given indices (the params get a gradient).
@case("https://github.com/tensorflow/tensorflow/issues/5342", clean=True)
def gather_nd_with_given_indices():
    def pick(params):
        return tf.gather_nd(params, [[0, 1], [2, 2], [3, 0]])

    return pick, X


# keras-team/keras#11157's Embedding, fed integer token ids from the data.
@case("https://github.com/keras-team/keras/issues/11157", clean=True)
def embedding_of_token_ids():
    model = keras.Sequential(
        [keras.Input((3,), dtype="int32"), keras.layers.Embedding(10, 2), keras.layers.Flatten(), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    return model, (np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9], [0, 1, 2]], dtype="int32"), TARGETS)


# keras.io Accuracy metrics: accuracy takes an argmax, in the metric only, never in the loss.
@case("https://keras.io/api/metrics/accuracy_metrics/", clean=True)
def argmax_only_in_a_metric():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"]
    )
    return model, (X, LABELS)


# The tf.sort documentation: sorting values is differentiable (a permutation).
@case("https://www.tensorflow.org/api_docs/python/tf/sort", clean=True)
def sorted_values():
    def smallest_two(x):
        return tf.sort(x, axis=-1)[:, :2]

    return smallest_two, X


# tensorflow/tfjs#1601: TensorFlow defines the gradient of top_k's values.
@case("https://github.com/tensorflow/tfjs/issues/1601", clean=True)
def top_k_values():
    def best(x):
        return tf.math.top_k(x, k=2).values

    return best, X


# tensorflow/tensorflow#26404: None gradients for BatchNormalization's moving statistics, which are not trainable.
@case("https://github.com/tensorflow/tensorflow/issues/26404", clean=True)
def batch_normalization_model():
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4), keras.layers.BatchNormalization(), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    return model, (X, TARGETS)


@case("https://keras.io/api/layers/regularization_layers/dropout/", clean=True)
def dropout_model():
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dropout(0.5), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    return model, (X, TARGETS)


# keras.io "Working with preprocessing layers": Rescaling and Normalization inside the model.
@case("https://keras.io/guides/preprocessing_layers/", clean=True)
def preprocessing_layers_in_the_model():
    normalization = keras.layers.Normalization()
    normalization.adapt(X)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Rescaling(0.5), normalization, keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model, (X, TARGETS)


# Bengio, Leonard and Courville (2013), arXiv:1308.3432: the straight-through estimator.
@case("https://arxiv.org/abs/1308.3432", clean=True)
def straight_through_round():
    def quantize(x):
        return x + tf.stop_gradient(tf.round(x) - x)

    return quantize, X


# TensorFlow's advanced autodiff guide, "Custom gradients": clip_gradients with tf.custom_gradient.
@case(ADVANCED, clean=True)
def custom_gradient_clip():
    @tf.custom_gradient
    def clip_gradients(y):
        def backward(dy):
            return tf.clip_by_norm(dy, 0.5)

        return y, backward

    def model(x):
        return clip_gradients(x * 2.0)

    return model, X


# The tf.py_function documentation: unlike numpy_function, it is differentiable.
@case("https://www.tensorflow.org/api_docs/python/tf/py_function", clean=True)
def py_function_differentiable():
    def doubled(x):
        return tf.py_function(lambda a: a * 2.0, [x], tf.float32)

    return doubled, X


# keras.io "Writing a custom train_step", the guide's CustomModel.
@case(TRAIN_STEP_GUIDE, clean=True)
def custom_train_step_from_the_guide():
    class CustomModel(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(y=y, y_pred=y_pred)
            gradients = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
            return {"loss": loss}

    inputs = keras.Input((3,))
    model = CustomModel(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="adam", loss="mse")
    return model, (X, TARGETS)


# keras.io Model.compute_loss: the loss put in the model, compiled without loss=.
@case("https://keras.io/api/models/model_training_apis/", clean=True)
def compute_loss_in_the_model():
    class OwnLoss(keras.Model):
        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            return ops.mean(ops.square(y - y_pred))

    inputs = keras.Input((3,))
    model = OwnLoss(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="adam")
    return model, (X, TARGETS)


# tensorflow/tensorflow#41528: an IQN layer built from tf.tile and friends (all differentiable).
@case("https://github.com/tensorflow/tensorflow/issues/41528", clean=True)
def tiled_quantile_embedding():
    def embed(x):
        taus = tf.tile(tf.reshape(tf.linspace(0.1, 0.9, 3), (1, 3)), [4, 1])
        return tf.cos(tf.tile(x, [1, 2]) * tf.concat([taus, taus], axis=1) * np.pi)

    return embed, X


# keras.io Probabilistic losses: categorical crossentropy with one_hot labels made from integers.
@case("https://keras.io/api/losses/probabilistic_losses/", clean=True)
def one_hot_of_the_labels():
    def loss(y_true, y_pred):
        return keras.losses.categorical_crossentropy(
            ops.one_hot(ops.cast(y_true, "int32"), 3), y_pred, from_logits=True
        )

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])
    model.compile(optimizer="adam", loss=loss)
    return model, (X, LABELS.astype("float32"))


# --- Paths that exist but carry nothing on the example: found by measuring, not by the walk ---


@case("https://github.com/tensorflow/tensorflow/issues/38349")
def where_branch_never_taken():
    # The tf.where(a > 15., a, ...) with a = 10: the branch holding a is never picked, so its
    # gradient is 0. Here a is a learned enhancer's output, and the other branch its equalised copy.
    class Equalizer(keras.layers.Layer):
        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], input_shape[-1]), name="kernel")

        def call(self, x):
            enhanced = ops.matmul(x, self.kernel)
            levels = ops.cast(ops.round(ops.clip(enhanced, 0.0, 1.0) * 8.0), "float32") / 8.0
            return ops.where(enhanced > 15.0, enhanced, levels)  # culprit: SelectV2 measured_branch_not_taken

    keras.utils.set_random_seed(0)
    return Equalizer(), X


@case("https://stats.stackexchange.com/questions/481881")
def softmax_over_one_unit():
    # The question's last layer, Dense(1, activation="softmax"), here under a squared error:
    # its output is 1 whatever its input, and Keras warns of it.
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1, activation="softmax")]
    )
    model.compile(loss="mse")  # culprit-noline: Softmax measured_constant_softmax
    return model, (X, (TARGETS > 0).astype("float32"))


@case("https://github.com/kpot/keras-transformer/issues/3")
def loop_trip_count_from_a_halting_unit():
    # A halting unit whose probability sets how many steps a loop runs. The answer: ACT learns
    # an attention over the number of steps, not the number itself, which has no gradient.
    class Halting(keras.layers.Layer):
        def build(self, input_shape):
            self.halt = self.add_weight(shape=(input_shape[-1], 1), name="halt")

        def call(self, x):
            steps = tf.cast(tf.math.ceil(tf.reduce_mean(tf.sigmoid(ops.matmul(x, self.halt))) * 4.0), tf.int32)
            loop = tf.while_loop(  # culprit: StatelessWhile measured_control
                lambda i, h: i < steps, lambda i, h: (i + 1, h * 0.9 + 1.0), (tf.constant(0), x)
            )
            return loop[1]

    keras.utils.set_random_seed(0)
    return Halting(), X


# --- The line of yours behind an op a model runs for you: a layer of your own, a keras.ops call on a KerasTensor ---


@case("https://github.com/keras-team/keras/issues/13502")
def stop_gradient_inside_a_layer_of_your_own():
    # The issue stops the gradient at a block with a Lambda layer; here the block is a layer written for it,
    # which a functional model calls for you.
    class ConvDropped(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.conv = keras.layers.Conv2D(2, 1)

        def call(self, x):
            return ops.stop_gradient(self.conv(x))  # culprit: StopGradient stop_gradient

    inputs = keras.Input((2, 2, 3))
    hidden = ConvDropped(name="conv_dropped")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(hidden)))
    model.compile(optimizer="adam", loss="mse")
    return model, (IMAGES, TARGETS)


@case("https://github.com/keras-team/keras/issues/20124")
def stop_gradient_on_a_keras_tensor():
    # The model, the stop on the other branch: ops.stop_gradient on a KerasTensor becomes an operation of
    # the model (no layer of yours, no line Keras keeps), and the Dense it follows gets no gradient.
    a = keras.Input(shape=(3,))
    b = keras.layers.Dense(4)(a)
    c = keras.layers.Dense(4)(b)
    d = ops.stop_gradient(c) + b  # culprit: StopGradient stop_gradient
    model = keras.Model(inputs=a, outputs=keras.layers.Dense(1)(d))
    model.compile(optimizer="adam", loss="mse")
    return model, (X, TARGETS)


@case("https://github.com/keras-team/keras/issues/20124", clean=True)
def stop_gradient_on_a_keras_tensor_beside_a_path():
    # The model as published: the first Dense still learns through the second.
    a = keras.Input(shape=(2,))
    b = keras.layers.Dense(4)(a)
    c = keras.layers.Dense(4)(b)
    d = ops.stop_gradient(b) + c
    model = keras.Model(inputs=a, outputs=d)
    model.compile(optimizer="adam", loss="mse")
    return model, (X[:, :2], np.ones((4, 4), "float32"))


@case("https://codemia.io/knowledge-hub/path/intermediate_layer_makes_tensorflow_optimizer_to_stop_working_1")
def argmax_on_a_keras_tensor():
    # The page's functional model (tf.argmax then tf.cast on the Dense's output), in keras.ops as Keras 3 needs.
    inputs = keras.Input(shape=(3,))
    x = keras.layers.Dense(8, activation="relu")(inputs)
    x = ops.argmax(x, axis=1)  # culprit: ArgMax integer_output
    outputs = ops.expand_dims(ops.cast(x, "float32"), -1)
    model = keras.Model(inputs, keras.layers.Dense(1)(outputs))
    model.compile(optimizer="adam", loss="mse")
    return model, (X, TARGETS)
