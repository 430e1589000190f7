"""companion/diagnostics/_gradients.py: gradient_norms and first_nonfinite_gradient."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from companion.diagnostics import (
    first_nonfinite,
    first_nonfinite_gradient,
    gradient_norms,
)

X = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")


def _norm_model():
    """Forward pass finite at x = 0, gradient not: d sqrt(s)/ds is infinite at s = 0."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    h = keras.layers.Dense(3, name="dense", kernel_initializer="ones")(inputs)
    norm = keras.layers.Lambda(
        lambda t: keras.ops.sqrt(keras.ops.sum(t * t, axis=-1, keepdims=True)), name="norm"
    )(h)
    return keras.Model(inputs, keras.layers.Dense(1, name="head")(norm))


def test_first_nonfinite_gradient_names_the_variable_and_matches_the_tape():
    model, x, y = _norm_model(), np.zeros((2, 3), "float32"), np.ones((2, 1), "float32")
    loss = keras.losses.MeanSquaredError()
    assert first_nonfinite(model, x) is None  # the forward pass is finite
    with tf.GradientTape() as tape:
        value = loss(y, model(x, training=True))
    reference = {
        v.path: np.isfinite(g.numpy()).all()
        for v, g in zip(model.trainable_variables, tape.gradient(value, model.trainable_variables))
    }
    found = first_nonfinite_gradient(model, x, y, loss=loss)
    assert found == "dense/bias" and not reference[found]
    assert reference["head/kernel"] and reference["head/bias"]
    assert first_nonfinite_gradient(model, np.ones((2, 3), "float32"), y, loss=loss) is None


def test_gradient_norms_equal_the_tape_in_backprop_order():
    model, x, y = _norm_model(), np.ones((2, 3), "float32"), np.zeros((2, 1), "float32")
    loss = keras.losses.MeanSquaredError()
    norms = gradient_norms(model, x, y, loss=loss)
    with tf.GradientTape() as tape:
        value = loss(y, model(x, training=True))
    gradients = tape.gradient(value, model.trainable_variables)
    expected = {
        v.path: float(np.linalg.norm(g.numpy().astype(np.float64)))
        for v, g in zip(model.trainable_variables, gradients)
    }
    assert (
        list(norms)
        == list(expected)[::-1]
        == ["head/bias", "head/kernel", "dense/bias", "dense/kernel"]
    )
    for path, norm in norms.items():
        assert norm == pytest.approx(expected[path], rel=1e-6)


def test_gradient_helpers_bad_input():
    with pytest.raises(TypeError, match="loss: expected a callable"):
        gradient_norms(keras.layers.Dense(1), X, X, loss="mse")
    with pytest.raises(TypeError, match="model: expected a Keras layer or model"):
        first_nonfinite_gradient(None, X, X, loss=keras.losses.MeanSquaredError())


def test_gradient_helpers_refuse_targets_they_cannot_blame_on_a_layer():
    dense, loss = keras.layers.Dense(2), keras.losses.MeanSquaredError()
    with pytest.raises(ValueError, match="^targets: expected finite values, got NaN or Inf"):
        first_nonfinite_gradient(dense, X, np.full((4, 2), np.nan, "float32"), loss=loss)
    with pytest.raises(
        ValueError,
        match=r"^targets: expected arrays with the batch size of the model's output \(4\)",
    ):
        gradient_norms(dense, X, np.zeros((3, 2), "float32"), loss=loss)


@pytest.mark.parametrize("function", [gradient_norms, first_nonfinite_gradient])
@pytest.mark.parametrize("shape", [(4,), (4, 1), (4, 1, 2), (4, 2, 2)])
def test_targets_the_loss_would_broadcast_are_refused(function, shape):
    # mse((4,), (4, 2)) broadcasts to (4, 4): finite gradients of another loss, no error
    dense, loss = keras.layers.Dense(2), keras.losses.MeanSquaredError()
    with pytest.raises(
        ValueError,
        match=r"^targets: expected arrays of the output's shape \(4, 2\) "
        r"\(integer class labels: \(4,\)\), got ndarray of shape \(4,",
    ):
        function(dense, X, np.zeros(shape, "float32"), loss=loss)


def test_targets_keras_pairs_without_broadcasting_are_accepted():
    dense = keras.layers.Dense(3, name="dense")
    labels = np.array([0, 2, 1, 0])
    sparse = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for targets in (labels, labels[:, None]):  # class labels, as fit takes them
        assert set(gradient_norms(dense, X, targets, loss=sparse)) == {"dense/bias", "dense/kernel"}
    column, mse = keras.layers.Dense(1, name="column"), keras.losses.MeanSquaredError()
    squeezed = gradient_norms(column, X, np.ones(4, "float32"), loss=mse)  # (4,) for (4, 1)
    assert squeezed == gradient_norms(column, X, np.ones((4, 1), "float32"), loss=mse)
