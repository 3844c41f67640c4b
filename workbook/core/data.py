"""MNIST for the workbook, with or without a network.

Introduced in 00_start_here.ipynb; every training notebook calls
:func:`load_mnist`.
"""

import contextlib
import os
import shutil
import stat
import tempfile
import threading
import urllib.error
import urllib.request
from importlib import resources

import numpy as np

from workbook.core.arguments import check_seed, is_whole_number, refuse

#: Where Keras downloads MNIST from (``keras.datasets.mnist.load_data``).
KERAS_MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
#: How long ``source="auto"`` waits for the download site before it takes the bundled digits.
PROBE_TIMEOUT_SECONDS = 3.0
#: How long ``source="auto"`` lets Keras's download run before it gives up on it.
DOWNLOAD_TIMEOUT_SECONDS = 20.0

BUNDLED_FILE = "mnist-9k.npz"
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
        ``"bundled"``: the 9,000 real digits shipped with the workbook, 8,000 train
        and 1,000 test (workbook/bundled/README.md). ``"auto"``: Keras's data if it
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
        refuse("source", source, f"one of {', '.join(map(repr, SOURCES))}")
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
    """The 9,000-digit subset shipped inside the package (provenance in its README)."""
    return str(resources.files("workbook").joinpath("bundled", BUNDLED_FILE))


def bundled_mnist():
    """The bundled digits as :func:`load_mnist` returns them, but all of them and in the file's own order.

    Introduced in 05_assignment_quantized_autoencoder.ipynb (its data cell hands out the test
    digits in this order).
    """
    (x_train, y_train), (x_test, y_test) = _load_bundled()
    return (_to_float(x_train), y_train.astype(np.int64)), (_to_float(x_test), y_test.astype(np.int64))


def _check_count(name, value):
    if value is None:
        return
    if not is_whole_number(value, low=1):
        refuse(name, value, "None (all images) or a whole number of at least 1")


def _to_float(images):
    """Images as float32 in [0, 1] with a channel axis: bytes are divided by 255, floats already are."""
    scaled = images.astype(np.float32) / 255.0 if images.dtype == np.uint8 else images.astype(np.float32)
    return scaled[..., np.newaxis]


def _read_npz(path, pairs):
    """Read the (images, labels) ``pairs`` of keys from an .npz, checked to be MNIST.

    Raises ValueError saying what the file holds when it is not: no pickles are loaded,
    and a path that is not a regular file (a FIFO would block) is never opened.
    """
    kind = _file_kind(path)
    if kind != "file":
        raise ValueError(f"{path} is a {kind}, not a regular file")
    keys = [key for pair in pairs for key in pair]
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in keys}
    except Exception as error:  # zipfile, OSError, pickle refusal, a missing key: all mean "not usable"
        raise ValueError(f"{path} is not a readable .npz file ({type(error).__name__}: {error})") from None
    for images, labels in pairs:
        problem = _images_problem(arrays[images]) or _labels_problem(arrays[labels], len(arrays[images]))
        if problem:
            raise ValueError(f"{path}: {problem.format(images=repr(images), labels=repr(labels))}")
    return arrays


def _file_kind(path):
    try:
        mode = os.stat(path).st_mode
    except OSError as error:  # a dangling link, a folder we may not enter
        return f"path that cannot be read ({error.strerror})"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISFIFO(mode):
        return "named pipe (FIFO)"
    if stat.S_ISDIR(mode):
        return "folder"
    return "special file"


def _images_problem(x):
    """What makes ``x`` not MNIST's images (None if nothing): bytes 0-255, or floats already in [0, 1]."""
    if x.ndim != 3 or x.shape[1:] != (28, 28):
        return f"array {{images}} has shape {x.shape}, expected (n, 28, 28)"
    if len(x) == 0:
        return "array {images} holds no images"
    if x.dtype == np.uint8:
        return None
    if x.dtype.kind != "f":
        return f"array {{images}} holds {x.dtype.name}; MNIST's pixels are uint8 (0-255) or floats in [0, 1]"
    if not np.isfinite(x).all():
        bad = int((~np.isfinite(x)).any(axis=(1, 2)).sum())
        return f"array {{images}} holds NaN or infinity in {bad:,} of its {len(x):,} images"
    if x.min() < 0 or x.max() > 1:
        return f"array {{images}} holds {x.dtype.name} values in [{x.min():g}, {x.max():g}]; floats must be in [0, 1]"
    return None


def _labels_problem(y, n_images):
    """What makes ``y`` not the labels of ``n_images`` digits (None if nothing)."""
    if y.ndim != 1 or y.dtype.kind not in "iu":
        return f"array {{labels}} has shape {y.shape} and dtype {y.dtype.name}; expected one integer label per image"
    if len(y) != n_images:
        return f"array {{labels}} holds {len(y):,} labels for the {n_images:,} images of {{images}}"
    outside = (y < 0) | (y > 9)
    if outside.any():
        return f"array {{labels}} holds {int(outside.sum()):,} labels outside 0-9 (e.g. {int(y[outside][0])})"
    return None


def _load_bundled():
    # Stored already split, with Keras's names: 8,000 train digits sorted by digit, 1,000 test digits.
    return _load_split(bundled_mnist_path())


def _load_keras():
    path = keras_mnist_cache_path()
    if os.path.lexists(path):  # a dangling link too: it is never replaced
        # Read it ourselves: Keras would replace a damaged file with a new download.
        try:
            return _load_split(path)
        except ValueError as error:
            raise ValueError(
                f"source='keras': Keras's cached MNIST is damaged ({error}). It was left untouched; "
                f"move it away yourself to let Keras download a fresh copy, or use source='bundled'."
            ) from None
    import keras

    try:
        return keras.datasets.mnist.load_data()
    except Exception as error:  # an OSError where the cache cannot be, Keras's bare Exception offline
        why = f"{type(error).__name__}: {error}".splitlines()[0][:300]
        raise ValueError(
            f"source='keras' must be a data set Keras can read or download, but Keras could not put MNIST in its "
            f"cache {path} ({why}). Check that KERAS_HOME (or ~/.keras) is a folder you can write to and that "
            f"{KERAS_MNIST_URL} can be reached, or use source='bundled' (9,000 digits shipped with the "
            "workbook) or source='auto' (the bundled digits whenever Keras's cannot be had)."
        ) from None


def _load_split(path):
    """(x_train, y_train), (x_test, y_test) of an .npz stored as Keras stores MNIST, checked."""
    arrays = _read_npz(path, [("x_train", "y_train"), ("x_test", "y_test")])
    return (arrays["x_train"], arrays["y_train"]), (arrays["x_test"], arrays["y_test"])


def _load_auto():
    """Return (arrays, one line saying which source was used and why)."""
    path = keras_mnist_cache_path()
    bundled = "MNIST: the bundled 9,000-digit subset (8,000 train / 1,000 test)"
    if os.path.lexists(path):  # a dangling link too: it is never replaced
        try:
            arrays = _load_split(path)
        except ValueError as error:
            # Never repair, move or delete it: it is the user's file.
            return (
                _load_bundled(),
                f"{bundled}, because Keras's cached file is damaged or not MNIST, and was left untouched: {error}.",
            )
        return arrays, f"MNIST: Keras's data set ({_counts(arrays)}) from its cache {path}."
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
    return arrays, f"MNIST: Keras's data set ({_counts(arrays)}), downloaded just now into its cache."


def _counts(arrays):
    """What the file holds, e.g. "60,000 train / 10,000 test images" (not what MNIST should hold)."""
    (_, y_train), (_, y_test) = arrays
    return f"{len(y_train):,} train / {len(y_test):,} test images"


def _download_to_cache(url, path):
    """Download Keras's MNIST into a temporary file beside ``path``, check it, then move it into place.

    An interrupted or damaged download never becomes ``path``: only a file that
    reads as MNIST is renamed to it, and an existing file is never replaced. Not Keras's
    ``get_file`` (``keras.datasets.mnist.load_data``): it downloads into ``path`` itself, with no
    timeout, and downloads again over a cached file whose hash differs.
    """
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=".mnist-download-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(handle, "wb") as target, urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_SECONDS) as response:
            shutil.copyfileobj(response, target)
        arrays = _load_split(partial)
        if not os.path.lexists(path):
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
    """Run ``function`` in a daemon thread; its result, or None if it failed or took too long.

    Not ``concurrent.futures``: its worker threads are joined when Python exits, so a download
    still stuck after the timeout would hold up the end of the kernel.
    """
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
        refuse(name, n, f"None (all images) or at most {available}, the images this source has")
    counts = np.bincount(labels, minlength=10)
    picked = [
        rng.choice(np.flatnonzero(labels == digit), size=count, replace=False)
        for digit, count in enumerate(_largest_remainder(counts, n))
    ]
    return rng.permutation(np.concatenate(picked))
