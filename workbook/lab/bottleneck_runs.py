"""Train the lab's autoencoder with several bottlenecks and measure each: no drawing here.

Introduced in 04_autoencoder_lab.ipynb, where :func:`workbook.compare_bottlenecks`
(in :mod:`workbook.lab.compare`) trains with :func:`train_bottlenecks` and then draws
the results side by side.
"""

import warnings
from dataclasses import dataclass, field

import numpy as np

from workbook.core.arguments import check_count, check_images, check_seed, refuse


@dataclass
class BottleneckRun:
    """One trained variant of :func:`workbook.compare_bottlenecks`.

    Attributes
    ----------
    label : str
    model : keras.Model
    history : dict
        Keras's ``History.history``: ``{"loss": [...], "val_loss": [...]}``, one value per epoch.
    gradients : GradientNormHistory
        What the gradient-norm monitor recorded.
    test_mse : float
        Mean squared reconstruction error on ``x_test`` after training.
    warnings : list of str
        What Keras warned while this variant trained (e.g. "Gradients do not exist for
        variables [...]"), kept here instead of printed in the middle of the figures.
    codes_used, perplexity : int and float, or None
        For a bottleneck with a codebook (``workbook.VectorQuantizer``): how many of its codes
        the test images use, and the perplexity of their frequencies (06_beyond_straight_through.ipynb).
    n_codes : int or None
        The codebook's size.
    flips : numpy.ndarray or None
        With ``flip_images``: the share of the bottleneck's codes for those images that changed
        at each training step (:class:`workbook.monitor.flips.CodeFlipRatio`); None without.
    """

    label: str
    model: object = field(repr=False)
    history: dict
    gradients: object
    test_mse: float
    warnings: list = field(default_factory=list)
    codes_used: object = None
    perplexity: object = None
    n_codes: object = None
    flips: object = None


def codebook_usage(model, x):
    """(codes used, perplexity, n_codes) of ``model``'s codebook bottleneck on images ``x``; Nones without one."""
    import keras

    layer = model.get_layer("bottleneck")
    if not hasattr(layer, "usage"):
        return None, None, None
    inputs = keras.Model(model.inputs[0], layer.input).predict(x, batch_size=256, verbose=0)
    return (*layer.usage(inputs), layer.n_codes)


def check_arguments(bottlenecks, epochs, batch_size, every, x_train, x_test, seed=0):
    """Refuse what :func:`workbook.compare_bottlenecks` cannot train, before anything is loaded.

    Returns ``(x_train, x_test)`` as float32 arrays (None when they are to be loaded).
    """
    owner = "compare_bottlenecks"
    if not isinstance(bottlenecks, dict) or not bottlenecks:
        allowed = "a non-empty dict of label -> bottleneck, e.g. {'identity': None, 'cast_int_ste': 'cast_int_ste'}"
        refuse("bottlenecks", bottlenecks, allowed, owner)
    for name, value in (("epochs", epochs), ("batch_size", batch_size), ("every", every)):
        check_count(name, value, owner=owner)
    if (x_train is None) != (x_test is None):
        missing, given = ("x_test", "x_train") if x_test is None else ("x_train", "x_test")
        allowed = f"images too when {given} is given. Give both x_train and x_test, or neither (then they are loaded)"
        refuse(missing, None, allowed, owner)
    check_seed(seed, owner=owner)
    from workbook.lab.models import bottleneck_layer

    for label, bottleneck in bottlenecks.items():
        try:
            bottleneck_layer(bottleneck)  # every variant before the first one trains
        except ValueError as error:
            raise ValueError(f"compare_bottlenecks: the bottleneck for {label!r}: {error}") from None
    if x_train is None:
        return None, None
    return check_images("x_train", x_train, owner), check_images("x_test", x_test, owner)


def train_bottlenecks(
    bottlenecks, x_train, x_test, epochs, batch_size, seed, every, new_monitor=None, flip_images=None, **options
):
    """Train one autoencoder per bottleneck on the same data and seed, and measure each.

    Introduced in 04_autoencoder_lab.ipynb through :func:`workbook.compare_bottlenecks`,
    whose parameters these are; it loads the images and shows what this returns.

    Parameters
    ----------
    new_monitor : callable, optional
        Makes the callback that records each variant's gradient norms, called as
        ``new_monitor(every=every, **options)`` (default
        :class:`workbook.monitor.recording.GradientNormRecorder`).
    flip_images : numpy.ndarray, optional
        Images whose bottleneck codes are compared from one training step to the next
        (:class:`workbook.monitor.flips.CodeFlipRatio`); None records nothing.

    Returns
    -------
    dict
        ``{label: BottleneckRun}``, in the order given.
    """
    x_train, x_test = check_arguments(bottlenecks, epochs, batch_size, every, x_train, x_test, seed)

    import keras

    from workbook.lab.models import autoencoder

    if new_monitor is None:
        from workbook.monitor.recording import GradientNormRecorder as new_monitor

    runs = {}
    for label, bottleneck in bottlenecks.items():
        keras.utils.set_random_seed(seed)  # the same shuffling for every variant
        model = autoencoder(bottleneck, seed=seed)
        monitor = new_monitor(every=every, **options)
        callbacks = [monitor]
        if flip_images is not None:
            from workbook.monitor.flips import CodeFlipRatio

            callbacks.append(CodeFlipRatio(flip_images))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fitted = model.fit(
                x_train,
                x_train,
                epochs=epochs,
                batch_size=batch_size,
                validation_data=(x_test, x_test),
                callbacks=callbacks,
                verbose=0,
            )
        reconstruction = model.predict(x_test, batch_size=256, verbose=0)
        runs[label] = BottleneckRun(
            str(label),
            model,
            dict(fitted.history),
            monitor.history,
            float(np.mean((reconstruction - x_test) ** 2)),
            sorted({str(warning.message) for warning in caught}),
            *codebook_usage(model, x_test),
            flips=callbacks[-1].ratios if flip_images is not None else None,
        )
    return runs


def gradient_norms(model, x):
    """The L2 norm of the loss's gradient for each trainable variable, None where there is none.

    Introduced in 04_autoencoder_lab.ipynb: one batch ``x``, the model's own loss against
    ``x`` itself (an autoencoder), no weights changed. Returns ``{variable path: float or None}``.
    """
    import tensorflow as tf

    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=x, y=x, y_pred=model(x, training=True))
    gradients = tape.gradient(loss, model.trainable_variables)
    return {
        variable.path: None if gradient is None else float(tf.norm(gradient))
        for variable, gradient in zip(model.trainable_variables, gradients, strict=True)
    }


def example_loss_spread(model, x, draws=4):
    """How much each image's loss varies between images, and between draws of its code.

    Introduced in 06_beyond_straight_through.ipynb. ``model`` has a sampling bottleneck
    (``workbook.DiscreteBottleneck``, which draws a hard code at test time): each image is
    reconstructed ``draws`` times. Returns ``(between, within)``: the variance over images of
    their mean loss, and the mean over images of the variance between their draws. A
    score function's advantage ``loss - baseline`` with one baseline for all images is
    mostly ``between``; only ``within`` says which code was better for that image.
    """
    losses = np.stack(
        [np.mean((np.asarray(model(x, training=False)) - x) ** 2, axis=tuple(range(1, x.ndim))) for _ in range(draws)]
    )
    return float(losses.mean(axis=0).var(ddof=1)), float(losses.var(axis=0, ddof=1).mean())


def per_image_errors(model, x, latent="sample", batch_size=256):
    """Each image's mean squared reconstruction error, decoded from a sampled or the most likely code.

    Introduced in 06_beyond_straight_through.ipynb. The model is called directly
    (``model(x, training=False)``), never through ``predict``: a compiled predict function
    keeps the latent it was first traced with, so switching a bottleneck's ``test_latent``
    after a ``predict`` would change nothing.

    Parameters
    ----------
    model : keras.Model
        An autoencoder, e.g. a :class:`~workbook.lab.bottleneck_runs.BottleneckRun`'s model.
    x : numpy.ndarray
        Images shaped (n, 28, 28, 1).
    latent : {"sample", "mode"}
        ``"sample"`` draws a new hard code for every image (what the decoder was trained on);
        ``"mode"`` decodes the most likely code of a ``workbook.DiscreteBottleneck``. The
        bottleneck's own ``test_latent`` is put back afterwards. A model without a sampled
        bottleneck gives the same errors either way.
    batch_size : int

    Returns
    -------
    numpy.ndarray
        Shape (n,).
    """
    if latent not in ("sample", "mode"):
        refuse("latent", latent, "'sample' (a hard random code) or 'mode' (the most likely code)", "per_image_errors")
    check_count("batch_size", batch_size, owner="per_image_errors")
    layer = next((layer for layer in model.layers if hasattr(layer, "test_latent")), None)
    kept = None if layer is None else layer.test_latent
    if layer is not None:
        layer.test_latent = latent
    try:
        outputs = [np.asarray(model(x[i : i + batch_size], training=False)) for i in range(0, len(x), batch_size)]
    finally:
        if layer is not None:
            layer.test_latent = kept
    return np.mean((np.concatenate(outputs) - x) ** 2, axis=tuple(range(1, np.ndim(x))))


def clearly_better(errors, other_errors):
    """True if per-image ``errors`` are below ``other_errors`` by more than 3 standard errors.

    Introduced in 06_beyond_straight_through.ipynb. Both are errors on the same images (as
    :func:`per_image_errors` returns them), so the standard error is that of their paired
    differences; a comparison inside that noise is not called either way.
    """
    difference = np.asarray(errors, dtype=float) - np.asarray(other_errors, dtype=float)
    if difference.ndim != 1 or len(difference) < 2:
        if np.ndim(errors) != 1 or len(errors) < 2:
            allowed = "a 1-D array of per-image errors of at least 2 images, as per_image_errors returns"
            refuse("errors", errors, allowed, "clearly_better")
        allowed = f"a 1-D array of per-image errors of the same {len(errors)} images as errors"
        refuse("other_errors", other_errors, allowed, "clearly_better")
    return bool(difference.mean() + 3 * difference.std(ddof=1) / np.sqrt(len(difference)) < 0)
