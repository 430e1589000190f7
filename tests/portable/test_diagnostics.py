"""``companion.diagnostics`` on the running backend: one training step's gradients by the
backend's own autodiff (``GradientTape``, ``jax.grad`` in a stateless scope, ``torch.autograd``)
against the analytic ones, the first non-finite layer and gradient, and a ``.keras`` round trip
loaded in a fresh process that runs the same backend."""

import keras
import numpy as np
import pytest

from companion.diagnostics import (
    check_roundtrip,
    first_nonfinite,
    first_nonfinite_gradient,
    gradient_norms,
)
from companion.layers import CustomDense

X, Y = np.ones((1, 2), "float32"), np.zeros((1, 1), "float32")


def test_gradient_norms_are_the_analytic_ones_regularization_included():
    # loss = (k1 + k2 + b)**2 + 0.5 * (k1**2 + k2**2) at k = 1, b = 0: d/dk = 2*2 + 1, d/db = 4.
    dense = keras.layers.Dense(
        1, kernel_initializer="ones", kernel_regularizer=keras.regularizers.L2(0.5), name="d"
    )
    norms = gradient_norms(dense, X, Y, loss=keras.losses.MeanSquaredError())
    assert list(norms) == ["d/bias", "d/kernel"]  # backpropagation order: output side first
    assert norms["d/bias"] == 4.0
    assert norms["d/kernel"] == pytest.approx(5 * np.sqrt(2), rel=1e-7)  # float32 rounding


def test_a_variable_the_loss_does_not_reach_has_no_gradient_norm():
    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1, name="used")(inputs))
    unused = model.add_weight(shape=(3,), name="unused")
    norms = gradient_norms(model, X, Y, loss=keras.losses.MeanSquaredError())
    assert norms[unused.path] is None
    assert norms["used/bias"] is not None and norms["used/bias"] > 0


def test_the_first_nonfinite_gradient_is_named_where_the_forward_pass_is_finite():
    def sqrt_of_zero(y, p):
        return keras.ops.sum(keras.ops.sqrt(keras.ops.abs(p - p)))

    dense = keras.layers.Dense(1, name="d")
    assert first_nonfinite_gradient(dense, X, Y, loss=sqrt_of_zero) == "d/bias"
    assert first_nonfinite_gradient(dense, X, Y, loss=keras.losses.MeanSquaredError()) is None


def test_the_first_layer_that_produces_nan_is_named():
    model = keras.Sequential(
        [
            keras.Input((2,)),
            keras.layers.Dense(2, kernel_initializer="ones", bias_initializer="ones", name="a"),
            keras.layers.Lambda(lambda t: keras.ops.log(-t), name="log_of_negative"),
            keras.layers.Dense(1, name="b"),
        ]
    )
    assert first_nonfinite(model, X) == "log_of_negative"
    assert first_nonfinite(model, -3 * X) is None  # log of 5: finite


def test_a_keras_file_reloads_in_a_fresh_process_on_the_same_backend():
    layer = CustomDense(3)
    report = check_roundtrip(layer, np.ones((2, 4), "float32"), fresh_process=True)
    assert report.ok, str(report)
