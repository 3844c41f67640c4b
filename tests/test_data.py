"""load_mnist: shapes, ranges, stratification, and never touching the user's files."""

import hashlib
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from notebook_runner import FRESH_PYTHON_SECONDS, clean_environment

import workbook
from workbook.core import data

BUNDLED_SHA256 = "c6d6b565eaabd74975a6c1355f3034aa3e5c2836fc87ad5b2036362112d4d436"
# Published class counts of the 8,000 + 1,000 bundled digits (workbook/bundled/README.md).
TRAIN_CLASS_COUNTS = [801, 902, 793, 826, 784, 690, 811, 856, 755, 782]
TEST_CLASS_COUNTS = [98, 108, 91, 104, 111, 73, 110, 103, 102, 100]


@pytest.fixture
def keras_home(tmp_path, monkeypatch):
    """A KERAS_HOME of our own, so no test reads or writes the user's ~/.keras."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras-home"))
    return tmp_path / "keras-home"


def test_bundled_file_is_the_published_one():
    digest = hashlib.sha256(pathlib.Path(data.bundled_mnist_path()).read_bytes()).hexdigest()
    assert digest == BUNDLED_SHA256


def test_bundled_split_shapes_types_and_range():
    (x_train, y_train), (x_test, y_test) = workbook.load_mnist(source="bundled")
    assert x_train.shape == (8000, 28, 28, 1) and x_test.shape == (1000, 28, 28, 1)
    assert x_train.dtype == np.float32 and x_test.dtype == np.float32
    assert x_train.min() >= 0.0 and x_train.max() <= 1.0 and x_train.max() > 0.99
    assert np.issubdtype(y_train.dtype, np.integer) and set(np.unique(y_train)) == set(range(10))


def test_bundled_split_has_the_published_classes_and_is_disjoint():
    (x_train, y_train), (x_test, y_test) = workbook.load_mnist(source="bundled")
    assert np.bincount(y_train, minlength=10).tolist() == TRAIN_CLASS_COUNTS
    assert np.bincount(y_test, minlength=10).tolist() == TEST_CLASS_COUNTS
    # no image is in both halves (compare raw bytes of each image)
    train_keys = {image.tobytes() for image in x_train}
    assert not any(image.tobytes() in train_keys for image in x_test)


def test_the_split_does_not_depend_on_the_seed():
    (_, _), (x_test_a, _) = workbook.load_mnist(source="bundled", seed=0)
    (_, _), (x_test_b, _) = workbook.load_mnist(source="bundled", seed=7)
    assert {i.tobytes() for i in x_test_a} == {i.tobytes() for i in x_test_b}


def test_subsets_are_stratified_and_deterministic():
    (x_a, y_a), (xt_a, yt_a) = workbook.load_mnist(n_train=1000, n_test=100, source="bundled", seed=3)
    (x_b, y_b), _ = workbook.load_mnist(n_train=1000, n_test=100, source="bundled", seed=3)
    (x_c, _), _ = workbook.load_mnist(n_train=1000, n_test=100, source="bundled", seed=4)
    assert x_a.shape == (1000, 28, 28, 1) and xt_a.shape == (100, 28, 28, 1)
    np.testing.assert_array_equal(x_a, x_b)
    np.testing.assert_array_equal(y_a, y_b)
    assert not np.array_equal(x_a, x_c)
    expected = 1000 * np.array(TRAIN_CLASS_COUNTS) / sum(TRAIN_CLASS_COUNTS)
    assert np.all(np.abs(np.bincount(y_a, minlength=10) - expected) <= 1)
    assert len(set(y_a[:50].tolist())) > 5, "a subset must be shuffled, not sorted by digit"


def bundled_labels_by_image():
    """Each bundled image's label, read from the file itself (no two of its images are alike)."""
    with np.load(data.bundled_mnist_path()) as archive:
        images = [*archive["x_train"], *archive["x_test"]]
        labels = [*archive["y_train"], *archive["y_test"]]
    return {image.tobytes(): int(label) for image, label in zip(images, labels, strict=True)}


@pytest.mark.parametrize("n_train, n_test", [(None, None), (1000, 100)], ids=["whole split", "subsets"])
def test_every_image_keeps_the_label_the_file_gives_it(n_train, n_test):
    labels = bundled_labels_by_image()
    for x, y in workbook.load_mnist(n_train=n_train, n_test=n_test, source="bundled", seed=5):
        pixels = np.rint(x[..., 0] * 255).astype(np.uint8)  # back to the file's bytes
        assert [labels[image.tobytes()] for image in pixels] == y.tolist()


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"n_train": -1}, "n_train=-1"),
        ({"n_test": 0}, "n_test=0"),
        ({"n_train": 8001, "source": "bundled"}, "n_train=8001"),
        ({"n_test": 2.5}, "n_test=2.5"),
        ({"source": "internet"}, "source='internet'"),
        ({"seed": "zero"}, "seed='zero'"),
        ({"seed": -1}, "seed=-1"),
        ({"n_train": True}, "n_train=True"),
        ({"seed": False}, "seed=False"),
    ],
)
def test_bad_arguments_name_the_argument_and_the_value(kwargs, named):
    with pytest.raises(ValueError) as raised:
        workbook.load_mnist(**kwargs)
    assert named in str(raised.value)


def test_a_damaged_cache_is_reported_passed_over_and_left_untouched(keras_home, capsys, monkeypatch):
    cache = keras_home / "datasets" / "mnist.npz"
    cache.parent.mkdir(parents=True)
    garbage = b"PK\x03\x04 this is not really a zip archive" * 100
    cache.write_bytes(garbage)
    before = cache.stat().st_mtime_ns

    def no_network(*args, **kwargs):
        raise AssertionError("a damaged cache must not lead to a download")

    monkeypatch.setattr(data, "_site_reachable", no_network)
    monkeypatch.setattr(data, "_load_keras", no_network)
    (x_train, _), (x_test, _) = workbook.load_mnist()
    assert x_train.shape == (8000, 28, 28, 1) and x_test.shape == (1000, 28, 28, 1)
    said = capsys.readouterr().out
    assert "bundled" in said and "damaged" in said and str(cache) in said
    assert cache.read_bytes() == garbage and cache.stat().st_mtime_ns == before
    assert sorted(p.name for p in cache.parent.iterdir()) == ["mnist.npz"]


def test_source_keras_refuses_a_damaged_cache_without_touching_it(keras_home):
    cache = keras_home / "datasets" / "mnist.npz"
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"truncated")
    with pytest.raises(ValueError, match="left untouched"):
        workbook.load_mnist(source="keras")
    assert cache.read_bytes() == b"truncated"


def test_offline_auto_falls_back_to_bundled_and_says_why(keras_home, capsys, monkeypatch):
    monkeypatch.setattr(data, "KERAS_MNIST_URL", "http://127.0.0.1:9/mnist.npz")  # discard port: refused at once
    (x_train, _), _ = workbook.load_mnist()
    assert x_train.shape == (8000, 28, 28, 1)
    assert "cannot be reached" in capsys.readouterr().out


def test_an_intact_keras_cache_is_used(keras_home, capsys):
    cache = keras_home / "datasets" / "mnist.npz"
    cache.parent.mkdir(parents=True)
    rng = np.random.default_rng(0)
    fake = {
        "x_train": rng.integers(0, 256, (60, 28, 28), dtype=np.uint8),
        "y_train": np.repeat(np.arange(10, dtype=np.uint8), 6),
        "x_test": rng.integers(0, 256, (20, 28, 28), dtype=np.uint8),
        "y_test": np.repeat(np.arange(10, dtype=np.uint8), 2),
    }
    np.savez(cache, **fake)
    (x_train, y_train), (x_test, y_test) = workbook.load_mnist(seed=1)
    assert x_train.shape == (60, 28, 28, 1) and x_test.shape == (20, 28, 28, 1)
    assert f"from its cache {cache}" in capsys.readouterr().out
    # the cached images themselves, each once, scaled to [0, 1], each with its own label
    for x, y, images, labels in (
        (x_train, y_train, fake["x_train"], fake["y_train"]),
        (x_test, y_test, fake["x_test"], fake["y_test"]),
    ):
        assert x.min() >= 0.0 and x.max() <= 1.0
        cached = {image.tobytes(): int(label) for image, label in zip(images, labels, strict=True)}
        returned = [np.rint(image[..., 0] * 255).astype(np.uint8).tobytes() for image in x]
        assert sorted(returned) == sorted(cached)
        assert [cached[image] for image in returned] == y.tolist()


@pytest.fixture
def local_server(tmp_path):
    """A web server on localhost serving the files in a folder of our own."""
    import functools
    import http.server
    import threading

    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_broken_download_never_becomes_the_cache(keras_home, local_server, monkeypatch, capsys):
    folder, url = local_server
    (folder / "mnist.npz").write_bytes(b"PK\x03\x04 cut off in the middle")
    monkeypatch.setattr(data, "KERAS_MNIST_URL", f"{url}/mnist.npz")
    (x_train, _), _ = workbook.load_mnist()
    assert x_train.shape == (8000, 28, 28, 1) and "bundled" in capsys.readouterr().out
    datasets = keras_home / "datasets"
    assert not datasets.exists() or list(datasets.iterdir()) == [], "a damaged download was left behind"


def test_a_good_download_is_checked_then_moved_into_the_cache(keras_home, local_server, monkeypatch, capsys):
    folder, url = local_server
    rng = np.random.default_rng(0)
    np.savez(
        folder / "mnist.npz",
        x_train=rng.integers(0, 256, (30, 28, 28), dtype=np.uint8),
        y_train=np.arange(30, dtype=np.uint8) % 10,
        x_test=rng.integers(0, 256, (10, 28, 28), dtype=np.uint8),
        y_test=np.arange(10, dtype=np.uint8),
    )
    monkeypatch.setattr(data, "KERAS_MNIST_URL", f"{url}/mnist.npz")
    (x_train, _), _ = workbook.load_mnist()
    assert x_train.shape == (30, 28, 28, 1) and "downloaded" in capsys.readouterr().out
    assert [p.name for p in (keras_home / "datasets").iterdir()] == ["mnist.npz"]
    assert (keras_home / "datasets" / "mnist.npz").read_bytes() == (folder / "mnist.npz").read_bytes()


# --- a cache that is not MNIST --------------------------------------------------------


def mnist_like(seed=0):
    """A small file shaped as Keras saves MNIST: uint8 images (n, 28, 28), uint8 labels 0-9."""
    rng = np.random.default_rng(seed)
    return {
        "x_train": rng.integers(0, 256, (60, 28, 28), dtype=np.uint8),
        "y_train": np.repeat(np.arange(10, dtype=np.uint8), 6),
        "x_test": rng.integers(0, 256, (20, 28, 28), dtype=np.uint8),
        "y_test": np.repeat(np.arange(10, dtype=np.uint8), 2),
    }


def with_nan(arrays):
    images = arrays["x_train"] / 255.0
    images[7, 3, 3] = np.nan
    return {**arrays, "x_train": images}


def without(arrays, key):
    return {name: value for name, value in arrays.items() if name != key}


# what is wrong with the file -> what the one line (and source="keras"'s error) says
NOT_MNIST = {
    "uint16 images": (lambda a: {**a, "x_train": a["x_train"].astype(np.uint16) * 257}, "holds uint16"),
    "NaN images": (with_nan, "NaN or infinity in 1 of its 60 images"),
    "float images in 0-255": (lambda a: {**a, "x_test": a["x_test"] * 1.0}, "floats must be in [0, 1]"),
    "labels outside 0-9": (lambda a: {**a, "y_train": a["y_train"] + 1}, "6 labels outside 0-9 (e.g. 10)"),
    "negative labels": (lambda a: {**a, "y_test": a["y_test"].astype(np.int8) - 1}, "outside 0-9 (e.g. -1)"),
    "float labels": (lambda a: {**a, "y_test": a["y_test"] * 1.0}, "expected one integer label per image"),
    "empty arrays": (
        lambda a: {**a, "x_train": a["x_train"][:0], "y_train": a["y_train"][:0]},
        "'x_train' holds no images",
    ),
    "more labels than images": (
        lambda a: {**a, "y_train": np.append(a["y_train"], 3)},
        "'y_train' holds 61 labels for the 60 images of 'x_train'",
    ),
    "fewer labels than images": (
        lambda a: {**a, "y_test": a["y_test"][:-1]},
        "'y_test' holds 19 labels for the 20 images of 'x_test'",
    ),
    "images of another size": (lambda a: {**a, "x_test": np.zeros((20, 32, 32), np.uint8)}, "shape (20, 32, 32)"),
    "an array missing": (lambda a: without(a, "y_test"), "not a readable .npz file"),
    "pickled objects": (lambda a: {**a, "y_test": np.array([None] * 20, dtype=object)}, "not a readable .npz file"),
}


def refuse_the_network(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("a cache that is not MNIST must not lead to a download")

    monkeypatch.setattr(data, "_site_reachable", no_network)
    monkeypatch.setattr(data, "_download_to_cache", no_network)


def assert_bundled_with_one_line_and_file_untouched(cache, why, capsys, before):
    (x_train, _), (x_test, _) = workbook.load_mnist()
    assert x_train.shape == (8000, 28, 28, 1) and x_test.shape == (1000, 28, 28, 1)
    said = capsys.readouterr().out
    assert said.count("\n") == 1, said
    assert "bundled" in said and "left untouched" in said and str(cache) in said and why in said, said
    assert snapshot(cache) == before


def snapshot(cache):
    """Everything about the cache folder a load could change: names, bytes and times of modification."""
    return {
        path.name: (path.read_bytes() if path.is_file() else None, path.lstat().st_mtime_ns)
        for path in cache.parent.iterdir()
    }


@pytest.mark.parametrize("damage, why", list(NOT_MNIST.values()), ids=list(NOT_MNIST))
def test_a_cache_that_is_not_mnist_gets_the_bundled_digits_one_line_why_and_is_left_untouched(
    damage, why, keras_home, capsys, monkeypatch
):
    refuse_the_network(monkeypatch)
    cache = keras_home / "datasets" / "mnist.npz"
    cache.parent.mkdir(parents=True)
    np.savez(cache, **damage(mnist_like()))
    before = snapshot(cache)
    assert_bundled_with_one_line_and_file_untouched(cache, why, capsys, before)
    with pytest.raises(ValueError) as refused:
        workbook.load_mnist(source="keras")
    assert why in str(refused.value) and "left untouched" in str(refused.value)
    assert snapshot(cache) == before


def test_a_fifo_at_the_cache_path_is_never_opened(keras_home, capsys, monkeypatch):
    import os
    import threading

    refuse_the_network(monkeypatch)
    cache = keras_home / "datasets" / "mnist.npz"
    cache.parent.mkdir(parents=True)
    os.mkfifo(cache)
    before = snapshot(cache)
    results = []
    loading = threading.Thread(target=lambda: results.append(workbook.load_mnist()), daemon=True)
    loading.start()
    loading.join(120)
    if loading.is_alive():  # opened for reading: release it, so that the test run does not hang
        os.close(os.open(cache, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("load_mnist blocked on a FIFO at the cache path")
    assert results[0][0][0].shape == (8000, 28, 28, 1)
    said = capsys.readouterr().out
    assert "named pipe (FIFO), not a regular file" in said and "left untouched" in said
    assert snapshot(cache) == before
    with pytest.raises(ValueError, match=r"named pipe \(FIFO\)"):
        workbook.load_mnist(source="keras")


def test_a_folder_at_the_cache_path_is_reported_and_left_alone(keras_home, capsys, monkeypatch):
    refuse_the_network(monkeypatch)
    cache = keras_home / "datasets" / "mnist.npz"
    cache.mkdir(parents=True)
    (cache / "mine.txt").write_text("a student's note")
    (x_train, _), _ = workbook.load_mnist()
    assert x_train.shape == (8000, 28, 28, 1)
    assert "is a folder, not a regular file" in capsys.readouterr().out
    assert (cache / "mine.txt").read_text() == "a student's note"


def test_images_already_scaled_to_0_1_are_not_divided_by_255_again(keras_home, capsys):
    arrays = mnist_like(seed=2)
    cache = keras_home / "datasets" / "mnist.npz"
    cache.parent.mkdir(parents=True)
    np.savez(cache, **{**arrays, "x_train": arrays["x_train"] / 255.0, "x_test": arrays["x_test"] / 255.0})
    (x_train, y_train), (x_test, _) = workbook.load_mnist(seed=1)
    assert x_train.dtype == np.float32 and x_train.max() == pytest.approx(1.0) and x_test.max() == pytest.approx(1.0)
    # the same images as the bytes give, each once
    expected = sorted(image.tobytes() for image in arrays["x_train"])
    assert sorted(np.rint(image[..., 0] * 255).astype(np.uint8).tobytes() for image in x_train) == expected
    assert "from its cache" in capsys.readouterr().out


def test_the_message_says_how_many_images_the_cache_holds(keras_home, capsys):
    cache = keras_home / "datasets" / "mnist.npz"
    cache.parent.mkdir(parents=True)
    np.savez(cache, **mnist_like())
    workbook.load_mnist()
    said = capsys.readouterr().out
    assert "60 train / 20 test images" in said and "60,000" not in said


SOURCE_KERAS = """\
import workbook

try:
    workbook.load_mnist(source="keras")
except ValueError as error:
    print("ValueError:", error)
"""


@pytest.mark.parametrize("where", ["KERAS_HOME is a file", "offline"])
def test_source_keras_that_cannot_be_had_says_why_and_what_to_use_instead(tmp_path, where):
    # A fresh process: Keras reads KERAS_HOME when it is imported. Offline is a proxy on the
    # discard port, which refuses at once, as no network does.
    home = tmp_path / "keras-home"
    if where == "KERAS_HOME is a file":
        home.write_text("not a folder")
    environment = clean_environment(tmp_path) | {"KERAS_HOME": str(home), "TF_CPP_MIN_LOG_LEVEL": "3"}
    environment.update(https_proxy="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9")
    run = subprocess.run(
        [sys.executable, "-c", SOURCE_KERAS],
        env=environment,
        capture_output=True,
        text=True,
        timeout=FRESH_PYTHON_SECONDS,
    )
    said = run.stdout
    assert run.returncode == 0 and "ValueError: source='keras' must be" in said, (said, run.stderr[-2000:])
    assert ("NotADirectoryError" if where == "KERAS_HOME is a file" else "URL fetch failure") in said, said
    assert "source='bundled'" in said and "source='auto'" in said and str(home) in said
    if where == "KERAS_HOME is a file":
        assert home.read_text() == "not a folder"  # the user's file, untouched
