"""The small MNIST autoencoder whose bottleneck the lab swaps out.

Introduced in 04_autoencoder_lab.ipynb.
"""

from workbook.core.arguments import check_seed, is_number, refuse, shown

#: The options :func:`autoencoder` understands, with their defaults.
DEFAULT_OPTIONS = {"learning_rate": 1e-3, "seed": 0}

#: Shape of one image, and of what the bottleneck sees (after the 2x2 pooling).
IMAGE_SHAPE = (28, 28, 1)
BOTTLENECK_SHAPE = (14, 14, 10)

ACCEPTED_BOTTLENECKS = (
    "None (identity), a name from workbook.SURROGATES (e.g. 'cast_int_ste'), "
    "a surrogate object (e.g. workbook.SURROGATES['cast_int_ste'].with_params(scale=4)), "
    "a function of one tensor (wrapped in a Lambda layer), or a Keras layer instance "
    "(e.g. workbook.DiscreteBottleneck('bernoulli', 'gumbel_softmax') or workbook.VectorQuantizer())"
)


def autoencoder(bottleneck=None, **options):
    """Build and compile (adam, mse) the lab's autoencoder around a `bottleneck`.

    Introduced in 04_autoencoder_lab.ipynb. Adam's slots are made here, before any
    training (``optimizer.build``): left to Keras, they would be made while TensorFlow
    traces the first training step, which it would then trace again. So a model's first
    ``fit`` traces its step once, not twice, and trains exactly as it would have (see
    tests/test_models.py). The layers are ``encoder``
    (Conv2D 10 5x5 relu), ``pool`` (2x2 max), ``bottleneck``, ``upsample``,
    ``decoder`` (Conv2DTranspose 4 5x5 relu) and ``output``
    (Conv2DTranspose 1 3x3 sigmoid).

    Parameters
    ----------
    bottleneck : None, str, surrogate, callable or keras.layers.Layer
        What sits between encoder and decoder. None is the identity; a name
        from ``workbook.SURROGATES`` or a surrogate object becomes a
        ``workbook.surrogates.layer.Surrogate`` layer (it saves and loads in safe mode);
        a plain function is wrapped in a ``Lambda`` layer (which does not);
        a layer instance is used as it is. A layer with an
        ``encoder_activation`` attribute (``workbook.DiscreteBottleneck``, whose
        inputs are logits) gets an encoder with that activation; one that
        ``needs_example_losses`` (the score-function estimator) makes the model a
        ``workbook.ScoreFunctionAutoencoder`` (06_beyond_straight_through.ipynb).
    **options
        ``learning_rate`` (default 1e-3) for Adam, and ``seed`` (default 0)
        for the initial weights: the same seed gives the same model.

    Returns
    -------
    keras.Model
    """
    unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
    if unknown:
        refuse("option", unknown[0], f"one of {', '.join(map(repr, DEFAULT_OPTIONS))}", "autoencoder")
    settings = {**DEFAULT_OPTIONS, **options}
    learning_rate, seed = settings["learning_rate"], settings["seed"]
    if not is_number(learning_rate, low=0, include_low=False):
        refuse("learning_rate", learning_rate, "a positive number, e.g. learning_rate=1e-3")
    check_seed(seed)

    import keras

    middle = bottleneck_layer(bottleneck)

    def initializer(offset):
        # One seed per layer, so the weights depend on `seed` and nothing else.
        return keras.initializers.GlorotUniform(seed=int(seed) * 10 + offset)

    model_class = keras.Sequential
    if getattr(middle, "needs_example_losses", False):
        from workbook.estimators.layers import ScoreFunctionAutoencoder as model_class
    model = model_class(
        [
            keras.Input(shape=IMAGE_SHAPE, name="image"),
            keras.layers.Conv2D(
                10,
                5,
                padding="same",
                activation=getattr(middle, "encoder_activation", "relu"),
                kernel_initializer=initializer(1),
                name="encoder",
            ),
            keras.layers.MaxPooling2D(name="pool"),
            middle,
            keras.layers.UpSampling2D(name="upsample"),
            keras.layers.Conv2DTranspose(
                4, 5, padding="same", activation="relu", kernel_initializer=initializer(2), name="decoder"
            ),
            keras.layers.Conv2DTranspose(
                1, 3, padding="same", activation="sigmoid", kernel_initializer=initializer(3), name="output"
            ),
        ],
        name="autoencoder",
    )
    _check_floating_output(bottleneck, middle.output.dtype)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=float(learning_rate)), loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def bottleneck_layer(bottleneck):
    """The Keras layer :func:`autoencoder` puts in the middle for `bottleneck`.

    Introduced in 04_autoencoder_lab.ipynb; see :func:`autoencoder` for what
    is accepted. Raises ValueError for anything else.
    """
    import keras

    if bottleneck is None:
        return keras.layers.Identity(name="bottleneck")
    if isinstance(bottleneck, keras.layers.Layer):
        return bottleneck
    if isinstance(bottleneck, type):
        refuse("bottleneck", bottleneck, f"an instance or a name, not a class. Accepted: {ACCEPTED_BOTTLENECKS}")
    if isinstance(bottleneck, str):
        from workbook.surrogates.catalogue import SURROGATES

        if bottleneck not in SURROGATES:
            allowed = f"a name in workbook.SURROGATES, one of: {', '.join(sorted(SURROGATES))}"
            refuse("bottleneck", bottleneck, f"{allowed}. Accepted: {ACCEPTED_BOTTLENECKS}")
        return _surrogate_layer(bottleneck)
    if _is_surrogate(bottleneck):
        return _surrogate_layer(bottleneck)
    if callable(bottleneck):
        _check_bottleneck_function(bottleneck)
        # Without an explicit shape Keras calls the function on a symbolic
        # tensor to infer it, which fails for some student functions.
        return keras.layers.Lambda(bottleneck, output_shape=BOTTLENECK_SHAPE, name="bottleneck")
    allowed = (
        f"an accepted kind of bottleneck, not of type {type(bottleneck).__name__}. Accepted: {ACCEPTED_BOTTLENECKS}"
    )
    refuse("bottleneck", bottleneck, allowed)


def _check_bottleneck_function(bottleneck):
    """Refuse, at build time, a function that does not return a tensor shaped like its input.

    It is called once on zeros shaped like two codes; a function that raises there is let
    through, so that ``fit`` shows its own error (an unfinished exercise, say).
    """
    import keras

    probe = keras.ops.zeros((2, *BOTTLENECK_SHAPE))
    try:
        result = bottleneck(probe)
    except Exception:
        return
    shape = getattr(result, "shape", None)
    if shape is None or tuple(shape) != tuple(probe.shape):
        got = "None (is a `return` missing?)" if result is None else shown(result)
        allowed = (
            f"a function returning a tensor shaped like its input: on an input of shape {tuple(probe.shape)} "
            f"(two codes) it returned {got}. The decoder after it expects {BOTTLENECK_SHAPE} per image"
        )
        refuse("bottleneck", bottleneck, allowed)
    if getattr(result, "dtype", None) is not None:
        _check_floating_output(bottleneck, result.dtype)


def _check_floating_output(bottleneck, dtype):
    """Refuse a bottleneck whose output is not floating point: the decoder's convolutions take floats.

    Returning integers is the course's central mistake (04_autoencoder_lab.ipynb): the cast
    itself is what stops the gradient, so the refusal says where to read why.
    """
    import keras

    name = keras.backend.standardize_dtype(dtype)
    if "float" not in name:  # float16, bfloat16 (mixed precision), float32 and float64 decode
        allowed = (
            f"a bottleneck whose output is floating point, but it returned {name}: the decoder after it takes "
            "floats; cast back to float32 (and see notebook 04 for why the gradient then stops)"
        )
        refuse("bottleneck", bottleneck, allowed)


def _is_surrogate(candidate):
    return all(hasattr(candidate, name) for name in ("forward", "derivative", "with_params", "params"))


def _surrogate_layer(surrogate):
    from workbook.surrogates.layer import Surrogate

    return Surrogate(surrogate, name="bottleneck")
