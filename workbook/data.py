"""MNIST for the workbook, with or without a network.

Introduced in 00_start_here.ipynb; every training notebook calls
:func:`load_mnist`.
"""

import contextlib
import os
import shutil
import tempfile
import threading
import urllib.error
import urllib.request
from importlib import resources

import numpy as np

from .arguments import check_seed, is_whole_number

#: Where Keras downloads MNIST from (``keras.datasets.mnist.load_data``).
KERAS_MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
#: How long ``source="auto"`` waits for the download site before it takes the bundled digits.
PROBE_TIMEOUT_SECONDS = 3.0
#: How long ``source="auto"`` lets Keras's download run before it gives up on it.
DOWNLOAD_TIMEOUT_SECONDS = 20.0

BUNDLED_FILE = "mnist-10k.npz"
BUNDLED_TEST_FRACTION = 0.2
SOURCES = ("auto", "keras", "bundled")


def load_mnist(n_train=None, n_test=None, source="auto", seed=0):
    """Load MNIST as float32 images in [0, 1] shaped (n, 28, 28, 1) with integer labels.

    Introduced in 00_start_here.ipynb.

    Parameters
    ----------
    n_train, n_test : int or None
        Take a stratified, deterministic subset of this many images (None: all).
    source : {"auto", "keras", "bundled"}
        ``"keras"``: the full 60,000 / 10,000 through Keras's own cache and download.
        ``"bundled"``: the 10,000 real digits shipped with the workbook, split
        stratified into 8,000 train and 2,000 test. ``"auto"``: Keras's data if it
        is cached (and intact) or downloads quickly, otherwise the bundled digits;
        one line says which was used and why.
    seed : int
        Chooses the subset and the order of the images; the same seed gives the
        same arrays.

    Returns
    -------
    (x_train, y_train), (x_test, y_test)
    """
    if source not in SOURCES:
        raise ValueError(f"source={source!r} is not known; use one of {', '.join(map(repr, SOURCES))}.")
    _check_count("n_train", n_train)
    _check_count("n_test", n_test)
    check_seed(seed)

    if source == "bundled":
        (x_train, y_train), (x_test, y_test) = _load_bundled()
    elif source == "keras":
        (x_train, y_train), (x_test, y_test) = _load_keras()
    else:
        arrays, why = _load_auto()
        print(why)
        (x_train, y_train), (x_test, y_test) = arrays

    rng = np.random.default_rng(seed)
    train = _stratified_subset(y_train, n_train, "n_train", rng)
    test = _stratified_subset(y_test, n_test, "n_test", rng)
    return (_to_float(x_train[train]), y_train[train].astype(np.int64)), (
        _to_float(x_test[test]),
        y_test[test].astype(np.int64),
    )


def keras_mnist_cache_path():
    """The file ``keras.datasets.mnist.load_data()`` reads and writes."""
    keras_home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return os.path.join(keras_home, "datasets", "mnist.npz")


def bundled_mnist_path():
    """The 10,000-digit subset shipped inside the package (provenance in its README)."""
    return str(resources.files("workbook").joinpath("bundled", BUNDLED_FILE))


def _check_count(name, value):
    if value is None:
        return
    if not is_whole_number(value, low=1):
        raise ValueError(f"{name}={value!r} must be None (all images) or a whole number of at least 1.")


def _to_float(images):
    return (images.astype(np.float32) / 255.0)[..., np.newaxis]


def _read_npz(path, keys):
    """Read ``keys`` from an .npz without pickles; raise ValueError if it is not a valid MNIST file."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in keys}
    except Exception as error:  # zipfile, OSError, pickle refusal: all mean "not usable"
        raise ValueError(f"{path} is not a readable .npz file ({type(error).__name__}: {error})") from None
    for key, array in arrays.items():
        if key.startswith("x") and (array.ndim != 3 or array.shape[1:] != (28, 28)):
            raise ValueError(f"{path}: array {key!r} has shape {array.shape}, expected (n, 28, 28)")
    return arrays


def _load_bundled():
    arrays = _read_npz(bundled_mnist_path(), ("x", "y"))
    x, y = arrays["x"], arrays["y"]
    # The file is sorted by digit: a fixed seed makes the split the same for everyone,
    # whatever seed the caller uses to pick subsets.
    rng = np.random.default_rng(2013)
    test = np.zeros(len(y), dtype=bool)
    per_class = _largest_remainder(np.bincount(y, minlength=10), round(len(y) * BUNDLED_TEST_FRACTION))
    for digit, count in enumerate(per_class):
        members = np.flatnonzero(y == digit)
        test[rng.choice(members, size=count, replace=False)] = True
    return (x[~test], y[~test]), (x[test], y[test])


def _load_keras():
    path = keras_mnist_cache_path()
    if os.path.exists(path):
        # Read it ourselves: Keras would replace a damaged file with a new download.
        try:
            return _load_cached_keras(path)
        except ValueError as error:
            raise ValueError(
                f"source='keras': Keras's cached MNIST is damaged ({error}). It was left untouched; "
                f"move it away yourself to let Keras download a fresh copy, or use source='bundled'."
            ) from None
    import keras

    return keras.datasets.mnist.load_data()


def _load_cached_keras(path):
    arrays = _read_npz(path, ("x_train", "y_train", "x_test", "y_test"))
    return (arrays["x_train"], arrays["y_train"]), (arrays["x_test"], arrays["y_test"])


def _load_auto():
    """Return (arrays, one line saying which source was used and why)."""
    path = keras_mnist_cache_path()
    bundled = "MNIST: the bundled 10,000-digit subset (8,000 train / 2,000 test)"
    if os.path.exists(path):
        try:
            return _load_cached_keras(path), f"MNIST: Keras's full data set (60,000 / 10,000) from its cache {path}."
        except ValueError as error:
            # Never repair, move or delete it: it is the user's file.
            return (
                _load_bundled(),
                f"{bundled}, because Keras's cached file is damaged and was left untouched: {error}.",
            )
    if not _site_reachable(KERAS_MNIST_URL, PROBE_TIMEOUT_SECONDS):
        return (
            _load_bundled(),
            f"{bundled}, because Keras's copy is not cached and its download site cannot be reached.",
        )
    arrays = _run_with_timeout(lambda: _download_to_cache(KERAS_MNIST_URL, path), DOWNLOAD_TIMEOUT_SECONDS)
    if arrays is None:
        return (
            _load_bundled(),
            f"{bundled}, because downloading Keras's copy did not finish within {DOWNLOAD_TIMEOUT_SECONDS:.0f} s.",
        )
    return arrays, "MNIST: Keras's full data set (60,000 / 10,000), downloaded just now into its cache."


def _download_to_cache(url, path):
    """Download Keras's MNIST into a temporary file beside ``path``, check it, then move it into place.

    An interrupted or damaged download never becomes ``path``: only a file that
    reads as MNIST is renamed to it, and an existing file is never replaced.
    """
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=".mnist-download-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(handle, "wb") as target, urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_SECONDS) as response:
            shutil.copyfileobj(response, target)
        arrays = _load_cached_keras(partial)
        if not os.path.exists(path):
            os.replace(partial, path)
        return arrays
    finally:
        if os.path.exists(partial):  # our own temporary file, never the user's
            os.remove(partial)


def _site_reachable(url, timeout):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _run_with_timeout(function, timeout):
    """Run ``function`` in a daemon thread; its result, or None if it failed or took too long."""
    result = []

    def target():
        # Any failure (no network, a corrupt cache) means the same to the caller: no result.
        with contextlib.suppress(Exception):
            result.append(function())

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(timeout)
    return result[0] if result else None


def _largest_remainder(counts, total):
    """Split ``total`` across classes in proportion to ``counts`` (Hamilton's method)."""
    counts = np.asarray(counts, dtype=np.int64)
    exact = counts * total / counts.sum()
    share = np.floor(exact).astype(np.int64)
    leftover = total - share.sum()
    order = np.argsort(-(exact - share), kind="stable")
    share[order[:leftover]] += 1
    return np.minimum(share, counts)


def _stratified_subset(labels, n, name, rng):
    """Indices of a class-balanced random subset of size n (all of them if n is None), shuffled."""
    available = len(labels)
    if n is None:
        return rng.permutation(available)
    if n > available:
        raise ValueError(f"{name}={n} is more than the {available} images this source has; use at most {available}.")
    counts = np.bincount(labels, minlength=10)
    picked = [
        rng.choice(np.flatnonzero(labels == digit), size=count, replace=False)
        for digit, count in enumerate(_largest_remainder(counts, n))
    ]
    return rng.permutation(np.concatenate(picked))
