"""Quantised layers and quantisers (notebook 07), each against an independent answer: the papers'
formulas written out in NumPy, TensorFlow's own convolution, and a count of bits by hand."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import workbook
from workbook.quantisation.checks import expected_learned_step

RNG = np.random.default_rng(0)


def tape_gradients(layer, x, variables, upstream):
    x = tf.constant(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = layer(x)
        projected = tf.reduce_sum(y * upstream)
    return y.numpy(), tape.gradient(projected, x), [tape.gradient(projected, v) for v in variables]


# --- each layer's forward and gradient against the formula ---------------------------------


def test_a_binarised_dense_layer_backpropagates_the_clipped_straight_through_to_its_inputs_and_kernel():
    layer = workbook.QuantDense(5, kernel_quantizer="sign_clipped_ste", input_quantizer="sign_clipped_ste")
    layer.build((None, 6))
    kernel = RNG.uniform(-1.6, 1.6, (6, 5)).astype("float32")
    layer.kernel.assign(kernel)
    x = RNG.uniform(-2, 2, (4, 6)).astype("float32")
    upstream = RNG.normal(size=(4, 5)).astype("float32")
    y, d_x, (d_kernel, d_bias) = tape_gradients(layer, x, [layer.kernel, layer.bias], upstream)
    np.testing.assert_allclose(y, np.sign(x) @ np.sign(kernel), atol=1e-5)
    np.testing.assert_allclose(d_kernel, (np.sign(x).T @ upstream) * (np.abs(kernel) <= 1), atol=1e-5)
    np.testing.assert_allclose(d_x, (upstream @ np.sign(kernel).T) * (np.abs(x) <= 1), atol=1e-5)
    np.testing.assert_allclose(d_bias, upstream.sum(axis=0), atol=1e-5)


def test_a_binarised_convolution_matches_tensorflows_convolution_of_the_signs_and_its_gradient():
    layer = workbook.QuantConv2D(3, 3, kernel_quantizer="sign_clipped_ste", input_quantizer="sign_ste", padding="same")
    layer.build((None, 7, 7, 2))
    kernel = RNG.uniform(-1.5, 1.5, (3, 3, 2, 3)).astype("float32")
    layer.kernel.assign(kernel)
    x = RNG.normal(size=(2, 7, 7, 2)).astype("float32")
    upstream = RNG.normal(size=(2, 7, 7, 3)).astype("float32")
    y, d_x, (d_kernel,) = tape_gradients(layer, x, [layer.kernel], upstream)
    # independently: TensorFlow's convolution of the signs, differentiated with respect to its own kernel and input
    signed_x, signed_kernel = tf.constant(np.sign(x)), tf.constant(np.sign(kernel))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([signed_x, signed_kernel])
        reference = tf.nn.conv2d(signed_x, signed_kernel, 1, "SAME")
        projected = tf.reduce_sum(reference * upstream)
    np.testing.assert_allclose(y, reference, atol=1e-5)
    np.testing.assert_allclose(d_kernel, tape.gradient(projected, signed_kernel) * (np.abs(kernel) <= 1), atol=1e-4)
    np.testing.assert_allclose(d_x, tape.gradient(projected, signed_x), atol=1e-4)  # sign_ste: 1 everywhere


@pytest.mark.parametrize("bits", [1, 2, 4])
@pytest.mark.parametrize(
    "straight_through, window",
    [
        ("identity", lambda x: np.ones_like(x)),
        ("relu", lambda x: (x > 0).astype(x.dtype)),
        ("clipped_relu", lambda x: ((x >= 0) & (x <= 1)).astype(x.dtype)),
    ],
)
def test_k_bit_activations_forward_the_staircase_and_backpropagate_yin_et_als_straight_through(
    bits, straight_through, window
):
    quantiser = workbook.ActivationQuantizer(bits, straight_through)
    x = np.linspace(-0.7, 1.7, 97).astype("float32")
    x = x[np.abs(x * (2**bits - 1) % 1 - 0.5) > 1e-3]  # no ties, where rounding half to even decides
    upstream = RNG.normal(size=x.shape).astype("float32")
    y, d_x, _ = tape_gradients(quantiser, x, [], upstream)
    levels = 2**bits - 1
    np.testing.assert_allclose(y, np.round(np.clip(x, 0, 1) * levels) / levels, atol=1e-6)
    np.testing.assert_allclose(d_x, upstream * window(x), atol=1e-6)


def lsq_weights_by_formula(v, step, bits, scale, upstream):
    """Esser et al.'s forward and gradients for signed weights, written out."""
    q_negative, q_positive = 2 ** (bits - 1), 2 ** (bits - 1) - 1
    ratio = v / step
    inside = (ratio >= -q_negative) & (ratio <= q_positive)
    d_step = np.where(inside, np.round(ratio) - ratio, np.where(ratio < -q_negative, -q_negative, q_positive))
    return (
        np.round(np.clip(ratio, -q_negative, q_positive)) * step,
        upstream * inside,
        scale * np.sum(upstream * d_step),
    )


@pytest.mark.parametrize("gradient_scale", [True, False])
@pytest.mark.parametrize("bits", [2, 3])
def test_a_learned_step_on_weights_has_the_papers_gradients(bits, gradient_scale):
    quantiser = workbook.LearnedStepQuantizer(bits, role="weights", initial_step=0.3, gradient_scale=gradient_scale)
    v = RNG.uniform(-1.5, 1.2, (8, 6))
    v = np.where(np.abs((v / 0.3) % 1 - 0.5) < 1e-3, v + 0.01, v).astype("float32")
    quantiser.build(v.shape)
    upstream = RNG.normal(size=v.shape).astype("float32")
    y, d_v, (d_step,) = tape_gradients(quantiser, v, [quantiser.step], upstream)
    scale = 1 / np.sqrt(v.size * (2 ** (bits - 1) - 1)) if gradient_scale else 1.0
    forward, expected_v, expected_step = lsq_weights_by_formula(v, 0.3, bits, scale, upstream)
    np.testing.assert_allclose(y, forward, atol=1e-5)
    np.testing.assert_allclose(d_v, expected_v, atol=1e-5)
    assert float(d_step) == pytest.approx(expected_step, rel=1e-4)


def test_a_learned_step_on_activations_scales_by_the_features_of_one_example():
    quantiser = workbook.LearnedStepQuantizer(2, initial_step=0.25)
    v = RNG.uniform(-0.3, 1.0, (16, 12)).astype("float32")
    quantiser(v)  # builds from the batch's shape: N is 12 features, not 16 x 12 numbers
    upstream = RNG.normal(size=v.shape).astype("float32")
    y, d_v, (d_step,) = tape_gradients(quantiser, v, [quantiser.step], upstream)
    forward, expected_v, expected_step = expected_learned_step(v, 0.25, 2, 1 / np.sqrt(12 * 3), upstream)
    np.testing.assert_allclose(y, forward, atol=1e-5)
    np.testing.assert_allclose(d_v, expected_v, atol=1e-5)
    assert float(d_step) == pytest.approx(expected_step, rel=1e-4)


def test_a_quantised_layer_starts_its_learned_step_where_the_paper_does():
    layer = workbook.QuantDense(7, kernel_quantizer=workbook.LearnedStepQuantizer(3, role="weights"))
    layer.build((None, 9))
    expected = 2 * np.mean(np.abs(layer.kernel.numpy())) / np.sqrt(3)
    assert float(layer.kernel_quantizer.step.numpy()) == pytest.approx(expected, rel=1e-5)


def test_the_weight_clip_keeps_latent_weights_in_range_through_training():
    model = keras.Sequential(
        [
            keras.Input((4,)),
            workbook.QuantDense(3, kernel_quantizer="sign_clipped_ste", kernel_constraint=workbook.WeightClip(0.5)),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(10.0), loss="mse")
    model.fit(RNG.normal(size=(32, 4)), RNG.normal(size=(32, 3)) * 10, epochs=2, verbose=0)
    kernel = model.layers[0].kernel.numpy()
    assert np.abs(kernel).max() == pytest.approx(0.5) and np.all(np.abs(kernel) <= 0.5)


# --- saving, loading and a quantiser of one's own (bad arguments: tests/test_bad_inputs.py) ----------------


def every_quantiser_model():
    return keras.Sequential(
        [
            keras.Input((6, 6, 1)),
            workbook.QuantConv2D(
                4,
                3,
                kernel_quantizer="sign_clipped_ste",
                input_quantizer=workbook.SURROGATES["sign_swish"].with_params(beta=3.0),
            ),
            keras.layers.Flatten(),
            workbook.QuantDense(
                5,
                kernel_quantizer=workbook.LearnedStepQuantizer(3, role="weights", gradient_scale=False),
                input_quantizer=workbook.ActivationQuantizer(2, "relu"),
                kernel_constraint=workbook.WeightClip(0.8),
            ),
            workbook.QuantDense(2, input_quantizer=workbook.LearnedStepQuantizer(2, initial_step=0.4)),
        ]
    )


def test_every_quantiser_saves_and_loads_in_safe_mode_and_backpropagates_the_same(tmp_path):
    model = every_quantiser_model()
    x = tf.constant(RNG.normal(size=(3, 6, 6, 1)).astype("float32"))
    model.save(tmp_path / "quantised.keras")
    loaded = keras.saving.load_model(tmp_path / "quantised.keras", safe_mode=True)
    gradients = []
    for m in (model, loaded):
        with tf.GradientTape() as tape:
            y = m(x)
        gradients.append([g.numpy() for g in tape.gradient(y, m.trainable_weights)])
        np.testing.assert_allclose(y, model(x), atol=1e-6)
    for saved, back in zip(*gradients, strict=True):
        np.testing.assert_allclose(back, saved, atol=1e-6)
    dense = loaded.layers[2]
    assert dense.kernel_quantizer.gradient_scale is False and dense.kernel_constraint.clip_value == pytest.approx(0.8)
    assert loaded.layers[0].input_quantizer.params == {"beta": 3.0}


def test_a_quantiser_of_your_own_trains_but_says_why_it_cannot_be_saved(tmp_path):
    model = keras.Sequential([keras.Input((3,)), workbook.QuantDense(2, kernel_quantizer=keras.ops.sign)])
    assert model(np.ones((1, 3), "float32")).shape == (1, 2)
    with pytest.raises(NotImplementedError, match="kernel_quantizer is your own function 'sign'"):
        model.save(tmp_path / "own.keras")


# --- the summary, the flips, the exercise's check -------------------------------------------


def test_the_memory_summary_counts_bits_per_layer_as_by_hand():
    model = every_quantiser_model()
    summary = workbook.memory_summary(model)
    # by hand: conv kernel 3*3*1*4 = 36 at 1 bit + 4 biases; dense kernel 64*5 = 320 at 3 bits + 5 biases and one step;
    # the last dense layer is float: 5*2 + 2 weights and its input quantiser's step
    assert [(row.name, row.quantised, row.bits, row.floats) for row in summary.layers] == [
        (model.layers[0].name, 36, 1, 4),
        (model.layers[2].name, 320, 3, 6),
        (model.layers[3].name, 0, None, 13),
    ]
    assert summary.stored_bytes == (36 + 320 * 3 + (4 + 6 + 13) * 32) / 8
    assert summary.ratio == pytest.approx((36 + 320 + 23) * 32 / (36 + 960 + 23 * 32))
    assert "times smaller" in str(summary)


def test_sign_flips_are_counted_against_the_kernels_before_and_after_each_epoch():
    model = workbook.quantised_mlp(hidden=(16, 16), kernel_quantizer="sign_clipped_ste", seed=0)
    (x, y), _ = workbook.load_mnist(n_train=128, n_test=10, source="bundled", seed=0)
    before = model.get_layer("dense_1").kernel.numpy()
    flips = workbook.KernelSignFlips()
    model.optimizer.learning_rate.assign(0.05)  # large steps, so that signs flip
    model.fit(x, y, epochs=1, batch_size=32, verbose=0, callbacks=[flips])
    after = model.get_layer("dense_1").kernel.numpy()
    assert flips.flips[0] == [pytest.approx(np.mean(np.sign(before) != np.sign(after)))]
    assert flips.flips[0][0] > 0 and 0 < flips.largest_step[0] <= 0.05 * 1.01 * 4  # Adam's step is at most about lr


def lsq_answer(v, step, bits, scale):
    step = step * scale + tf.stop_gradient(step - step * scale)
    ratio = tf.clip_by_value(v / step, 0.0, 2.0**bits - 1)
    return (ratio + tf.stop_gradient(tf.round(ratio) - ratio)) * step


def test_the_exercise_check_passes_lsq_and_says_what_is_wrong_otherwise(capsys):
    assert workbook.check_learned_step(lsq_answer, bits=(1, 2, 5), seed=3)

    def unscaled(v, step, bits, scale):
        return lsq_answer(v, step, bits, 1.0)

    def plain_round(v, step, bits, scale):
        return tf.round(tf.clip_by_value(v / step, 0.0, 2.0**bits - 1)) * step

    def not_written(v, step, bits, scale):
        raise NotImplementedError()

    for answer, said in [
        (unscaled, "LSQ's unscaled one: multiply it by scale"),
        (plain_round, "should be 1 where 0 <= v/step <= Q_P"),
        (not_written, "not written yet"),
    ]:
        capsys.readouterr()
        assert workbook.check_learned_step(answer) is False
        assert said in capsys.readouterr().out


def test_without_the_gradient_scale_the_step_moves_sqrt_n_q_p_times_faster():
    (x, y), _ = workbook.load_mnist(n_train=64, n_test=10, source="bundled", seed=0)
    ratios = []
    for scaled in (True, False):
        quantizer = workbook.LearnedStepQuantizer(2, role="weights", gradient_scale=scaled)
        model = workbook.quantised_mlp(hidden=(32, 16), kernel_quantizer=quantizer, seed=5)
        ratios.append(workbook.step_gradient_ratios(model, x, y)["dense_1"])
    assert ratios[1] / ratios[0] == pytest.approx(np.sqrt(32 * 16 * 1), rel=1e-3)
