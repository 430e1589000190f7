"""companion/diagnostics/_inputs.py: the arrays, tensors and variables every tool accepts."""

import keras
import numpy as np
import tensorflow as tf

from companion.diagnostics import (
    check_roundtrip,
    check_variable_batch,
    first_nonfinite,
    first_nonfinite_gradient,
)

X = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")


def test_tensors_and_keras_variables_pass_the_input_checks():
    dense, loss = keras.layers.Dense(2), keras.losses.MeanSquaredError()
    assert check_roundtrip(dense, keras.Variable(X), fresh_process=False).ok
    assert first_nonfinite(dense, tf.constant(X)) is None
    assert first_nonfinite_gradient(dense, keras.Variable(X), tf.zeros((4, 2)), loss=loss) is None
    assert check_variable_batch(dense, tf.constant(X)) == []
