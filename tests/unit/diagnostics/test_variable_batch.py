"""companion/diagnostics/_variable_batch.py: check_variable_batch."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from companion.diagnostics import (
    check_variable_batch,
)

X = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")


# ---------------------------------------------------------------- shapes


class StaticBatchFlatten(keras.layers.Layer):
    def call(self, inputs):
        return tf.reshape(inputs, (inputs.shape[0], -1))  # the static batch size: None when traced


class DynamicBatchFlatten(keras.layers.Layer):
    def call(self, inputs):
        return keras.ops.reshape(inputs, (-1, int(np.prod(inputs.shape[1:]))))


def test_check_variable_batch_flags_static_batch_size_and_passes_the_fix():
    sample = np.arange(24, dtype="float32").reshape(4, 2, 3)
    np.testing.assert_array_equal(StaticBatchFlatten()(sample), sample.reshape(4, 6))  # eager: fine
    problems = check_variable_batch(StaticBatchFlatten(), sample)
    assert len(problems) == 1 and problems[0].startswith("tracing with batch size None failed")
    assert check_variable_batch(DynamicBatchFlatten(), sample) == []


def test_check_variable_batch_bad_input():
    with pytest.raises(
        ValueError,
        match=r"sample_input: expected arrays with a batch of at least 2, "
        r"got ndarray of shape \(1, 3\)",
    ):
        check_variable_batch(keras.layers.Dense(2), np.ones((1, 3), "float32"))
    with pytest.raises(TypeError, match="layer: expected a callable"):
        check_variable_batch(None, X)


def test_check_variable_batch_names_a_sample_the_layer_cannot_take():
    dense = keras.layers.Dense(2)
    dense.build((None, 3))
    with pytest.raises(
        ValueError,
        match=r"^sample_input: expected an input .* accepts, got ndarray of shape \(4, 5\)",
    ):
        # before: reported as a tracing problem
        check_variable_batch(dense, np.ones((4, 5), "float32"))
    with pytest.raises(
        ValueError,
        match=r"^sample_input: expected an array, or a list, tuple or dict of arrays "
        r"of numbers, got dict {}",
    ):
        check_variable_batch(dense, {})
