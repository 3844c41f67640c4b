"""Write the saved models that tests/test_saved_models.py loads (workbook 0.1.0 format).

Run once, at the oldest end of the supported range, so that every supported Keras can
read them:  .venv-oldest/bin/python scripts/make_saved_models.py
The files are committed; rerunning it replaces them, so only do that on purpose
(for a new format version), never to make a failing test pass. ``--quantised`` writes only the
quantised model of 07_quantisation_aware_training.ipynb (quantised.keras, expected_quantised.npz).
"""

import pathlib

import numpy as np

import workbook
from workbook.layers import Surrogate

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "saved_models"


def catalog_model(keras):
    """Every catalog surrogate side by side, with non-default parameters where it has any."""
    inputs = keras.Input(shape=(7,), name="x")
    outputs = []
    for key, entry in sorted(workbook.SURROGATES.items()):
        params = {name: value * 1.5 + 0.25 for name, value in entry.params.items() if isinstance(value, float)}
        outputs.append(Surrogate(key, name=key, **params)(inputs))
    return keras.Model(inputs, keras.layers.Concatenate(name="all")(outputs), name="catalog")


def quantised_model(keras):
    """Every quantiser of notebook 07 in one model: a binarised convolution, k-bit and learned-step quantisers."""
    keras.utils.set_random_seed(4)
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            workbook.QuantConv2D(
                3,
                3,
                kernel_quantizer="sign_clipped_ste",
                input_quantizer="sign_ste",
                kernel_constraint=workbook.WeightClip(1.0),
                name="binary_conv",
            ),
            keras.layers.BatchNormalization(name="batch_norm"),
            keras.layers.Flatten(),
            workbook.QuantDense(
                6,
                kernel_quantizer=workbook.LearnedStepQuantizer(3, role="weights"),
                input_quantizer=workbook.ActivationQuantizer(2, "relu"),
                name="learned_step",
            ),
            workbook.QuantDense(4, input_quantizer=workbook.LearnedStepQuantizer(2, initial_step=0.3), name="logits"),
        ],
        name="quantised",
    )


def write_quantised(keras, tf, rng):
    """quantised.keras with its inputs, outputs and gradients for every trainable weight, in expected_quantised.npz."""
    model = quantised_model(keras)
    x = tf.constant(rng.normal(size=(4, 8, 8, 1)).astype("float32"))
    with tf.GradientTape() as tape:
        y = model(x)
    gradients = tape.gradient(y, model.trainable_weights)
    expected = {"x": x.numpy(), "y": y.numpy()}
    expected |= {f"d/{index}": gradient.numpy() for index, gradient in enumerate(gradients)}  # trainable weights' order
    model.save(OUT / "quantised.keras")
    np.savez_compressed(OUT / "expected_quantised.npz", **expected)


def main():
    workbook.setup(seed=0)
    import keras
    import tensorflow as tf

    OUT.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    expected = {}

    x = np.concatenate([np.linspace(-2.3, 2.3, 7)[None], rng.uniform(-3, 3, (5, 7))]).astype("float32")
    model = catalog_model(keras)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = model(xt)
    expected["catalog/x"], expected["catalog/y"] = x, y.numpy()
    expected["catalog/dy_dx"] = tape.gradient(y, xt).numpy()
    model.save(OUT / "catalog.keras")

    images = rng.uniform(0, 1, (3, 28, 28, 1)).astype("float32")
    bottlenecks = {
        "cast_int": Surrogate("cast_int_ste", scale=4.0, name="bottleneck"),
        "bernoulli_mode": workbook.DiscreteBottleneck("bernoulli", "straight_through", test_latent="mode"),
        "score_function_mode": workbook.DiscreteBottleneck("bernoulli", "score_function", test_latent="mode"),
        "vector_quantizer": workbook.VectorQuantizer(n_codes=8, seed=1),
    }
    for name, bottleneck in bottlenecks.items():
        model = workbook.autoencoder(bottleneck, seed=3)
        expected[f"{name}/x"], expected[f"{name}/y"] = images, model.predict(images, verbose=0)
        model.save(OUT / f"autoencoder_{name}.keras")
    np.savez_compressed(OUT / "expected.npz", **expected)
    write_quantised(keras, tf, np.random.default_rng(7))
    print(f"wrote {len(list(OUT.glob('*.keras')))} models with Keras {keras.__version__}")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--quantised"]:
        workbook.setup(seed=0)
        import keras
        import tensorflow as tf

        write_quantised(keras, tf, np.random.default_rng(7))
    else:
        main()
