"""The finder runs a model's own train_step without changing an optimizer the step keeps for itself.

Keras's GAN guide (keras.io/examples/generative/dcgan_overriding_train_step) keeps its two optimizers
in attributes of the model (``self.d_optimizer``, ``self.g_optimizer``), where Keras does not track
them; the step applies them itself. The finder runs such a step several times (to trace it, to
measure where the gradient dies, to check each fix): none of those runs may apply them.
"""

import keras
import numpy as np
import tensorflow as tf

import workbook


class OwnOptimizer(keras.Model):
    """A step that applies an optimizer of its own, with a cast to integers cutting its first layer."""

    def __init__(self):
        super().__init__()
        self.first = keras.layers.Dense(4, name="first")
        self.second = keras.layers.Dense(1, name="second")
        self.own_optimizer = keras.optimizers.Adam(0.01)

    def call(self, x):
        codes = keras.ops.cast(keras.ops.cast(self.first(x) * 3.0, "int32"), "float32")
        return self.second(codes)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(self(x) - y))
        gradients = tape.gradient(loss, self.trainable_variables)
        pairs = [(g, v) for g, v in zip(gradients, self.trainable_variables, strict=True) if g is not None]
        self.own_optimizer.apply_gradients(pairs)
        return {"loss": loss}


def test_an_optimizer_the_step_keeps_for_itself_is_neither_applied_nor_changed():
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
    y = x[:, :1] * 2.0
    model = OwnOptimizer()
    model.compile()  # as the guide does: model.optimizer is Keras's default, never applied by the step
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)  # one step: the optimizer's slots exist
    before = [v.numpy().copy() for v in model.own_optimizer.variables + model.variables]
    assert int(model.own_optimizer.iterations.numpy()) == 1
    report = workbook.find_gradient_breaks(model, (x, y))
    after = [v.numpy() for v in model.own_optimizer.variables + model.variables]
    assert all(np.array_equal(b, a) for b, a in zip(before, after, strict=True))
    assert int(model.own_optimizer.iterations.numpy()) == 1
    assert report.findings and report.findings[0].op_type == "Cast"
