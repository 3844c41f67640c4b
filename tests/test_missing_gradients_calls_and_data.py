"""What the missing-gradients extension reads of a failed call, in-process: the call Keras's traceback
filter stands for, and whether a ``tf.data`` pipeline may be read once more.

The Keras and TensorFlow internals these stand on are pinned in tests/test_internals.py; the
extension as a student sees it runs in real kernels in tests/test_missing_gradients*.py.
"""

import inspect
import traceback

import keras
import numpy as np
import pytest
import tensorflow as tf

from workbook.finder.missing_gradients import dataset_reads_again_alike, filtered_keras_call


def test_the_failed_fit_is_found_in_its_traceback_with_its_model_and_data():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1), keras.layers.Lambda(keras.ops.round)])
    model.compile(optimizer="sgd", loss="mse")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(12, 3)).astype("float32"), rng.normal(size=(12, 1)).astype("float32")
    with pytest.raises(ValueError) as raised:
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    frames = [frame for frame, _ in traceback.walk_tb(raised.value.__traceback__)]
    found = [wrapped for wrapped in map(filtered_keras_call, frames) if wrapped is not None]
    assert len(found) == 1 and found[0][0].__name__ == "fit"
    function, args, kwargs = found[0]
    bound = inspect.signature(function).bind(*args, **kwargs).arguments
    assert bound["self"] is model and bound["x"] is x and bound["y"] is y and bound["batch_size"] == 4


def shuffled_dataset():
    return tf.data.Dataset.range(100).shuffle(100, seed=1)


DATASETS = {
    "tensor slices, mapped, batched, prefetched": (
        lambda: tf.data.Dataset.from_tensor_slices(np.arange(12.0)).map(lambda t: t * 2).batch(4).prefetch(2),
        True,
    ),
    "a repeated range": (lambda: tf.data.Dataset.range(10).repeat().batch(3), True),
    "a Python generator": (
        lambda: tf.data.Dataset.from_generator(lambda: iter(range(3)), output_signature=tf.TensorSpec((), tf.int32)),
        False,
    ),
    "a py_function in a map": (
        lambda: tf.data.Dataset.range(3).map(lambda t: tf.py_function(lambda v: v, [t], tf.int64)),
        False,
    ),
    "random ops in a map": (lambda: tf.data.Dataset.range(3).map(lambda t: tf.random.uniform(())), False),
    "a shuffle": (shuffled_dataset, False),
    "a random source": (lambda: tf.data.Dataset.random(seed=1).take(3), False),
    "a cache": (lambda: tf.data.Dataset.range(3).cache(), False),
}


@pytest.mark.parametrize("name", list(DATASETS))
def test_dataset_reads_again_alike_refuses_python_state_and_seeds(name):
    make, alike = DATASETS[name]
    assert dataset_reads_again_alike(make()) is alike


def test_a_new_iterator_of_a_shuffled_dataset_moves_the_next_pass():
    # Why a shuffle is refused: reading it once more changes the order of the user's next epoch.
    plain = shuffled_dataset()
    first, second = list(plain.as_numpy_iterator()), list(plain.as_numpy_iterator())
    read = shuffled_dataset()
    next(iter(read))
    assert first != second and list(read.as_numpy_iterator()) == second
