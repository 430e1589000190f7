"""Global-norm clipping (companion._clipping, re-exported as
companion.training.clip_by_global_norm): the function itself and fit(clip_norm=...) at the edges
of float32."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers.small_models import (
    dense,
    max_difference,
    one_weight,
    shapes_dataset,
    two_input_classifier,
)
from helpers.training_helpers import (
    constant_data,
    crossentropy,
    fit_regression,
    mixed_float16,
    regression_data,
)

from companion.training import clip_by_global_norm, fit, make_train_step


def test_global_norm_clipping_bounds_the_update():
    data = shapes_dataset(32)
    model = two_input_classifier()
    before = model.get_weights()
    fit(
        model,
        data,
        optimizer=keras.optimizers.SGD(1.0),
        loss=crossentropy(),
        clip_norm=1e-3,
        progress=False,
    )
    update = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(before, model.get_weights())))
    assert update == pytest.approx(1e-3, rel=1e-4)  # SGD with rate 1 moves by the clipped gradient


@pytest.mark.parametrize("clip_norm", [1e300, 1e39, 1e-300, math.inf])
def test_a_clip_norm_float32_cannot_hold_is_refused(clip_norm):
    with pytest.raises(
        ValueError,
        match=r"^clip_norm: expected a finite number (> 0|>= 1.17549e-38)"
        r".* and <= 3.40282e\+38",
    ):
        fit_regression(dense(2, seed=0), regression_data(), clip_norm=clip_norm)
    with pytest.raises(ValueError, match=r"^clip_norm: expected"):
        make_train_step(
            dense(2, seed=0),
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.MeanSquaredError(),
            clip_norm=clip_norm,
        )


def test_the_largest_clip_norm_leaves_the_gradients_as_they_are():
    with mixed_float16():
        # Under loss scaling the limit used to be multiplied by the scale (2**15): 3e38 became inf,
        # every gradient NaN, and the loss-scale optimizer skipped every step. Kernel 1, input 0.5:
        # 1 -> 0.95.
        model = one_weight()
        fit(
            model,
            constant_data(0.5, steps=1),
            optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
            loss=keras.losses.MeanSquaredError(),
            clip_norm=3e38,
            progress=False,
        )
        assert float(model.layers[0].kernel.numpy()[0, 0]) == pytest.approx(0.95, abs=1e-7)


def test_a_clip_norm_above_the_gradient_norm_changes_nothing_even_near_the_float32_limit():
    # tf.clip_by_global_norm(g, 3e38) multiplies by 3e38 * (1 / 3e38), and float32 flushes that tiny
    # reciprocal to 0: the gradients used to be zeroed and the weights never moved.
    clipped, unclipped = dense(2, seed=0), dense(2, seed=0)
    assert fit_regression(clipped, regression_data(), clip_norm=3e38) == fit_regression(
        unclipped, regression_data()
    )
    assert (
        max_difference(clipped, unclipped) == 0.0
        and max_difference(clipped, dense(2, seed=0)) > 0.01
    )


def test_clip_by_global_norm_takes_what_a_tape_gives():

    embedding = tf.IndexedSlices(tf.constant([[3.0, 0.0]]), tf.constant([1]), tf.constant([4, 2]))
    dense = tf.constant([0.0, 4.0])
    clipped = clip_by_global_norm([embedding, None, dense], clip_norm=1.0)
    assert isinstance(clipped[0], tf.IndexedSlices) and clipped[1] is None
    np.testing.assert_allclose(clipped[0].values.numpy(), [[0.6, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(clipped[2].numpy(), [0.0, 0.8], rtol=1e-6)
    # Gradients of a loss scaled by 1024 are clipped as the unscaled ones are, and stay scaled.
    scaled = clip_by_global_norm([dense * 1024], clip_norm=1.0, loss_scale=1024.0)
    np.testing.assert_allclose(scaled[0].numpy(), [0.0, 1024.0], rtol=1e-6)
    assert clip_by_global_norm([None], clip_norm=1.0) == [None]


def test_clip_by_global_norm_keeps_each_dtype_and_takes_the_norm_in_float64_if_one_is():

    # float64 to float64's precision (a float32 norm would be off by about 1e-8)
    gradient = np.array([1.0, 2.0, 3.0]) / 7
    wide = clip_by_global_norm([tf.constant(gradient)], clip_norm=0.1)
    assert wide[0].dtype == tf.float64
    np.testing.assert_allclose(
        wide[0].numpy(), gradient * 0.1 / np.linalg.norm(gradient), rtol=1e-15
    )
    # float16, whose squares here (250000 in all) would overflow float16 to inf: in float32
    half = clip_by_global_norm([tf.constant([300.0, 400.0], tf.float16)], clip_norm=1.0)
    assert half[0].dtype == tf.float16
    np.testing.assert_allclose(half[0].numpy(), [0.6, 0.8], rtol=1e-3)
    # variables of two dtypes: one norm over both, each gradient in its own dtype
    mixed = clip_by_global_norm(
        [tf.constant([3.0]), tf.constant([4.0], tf.float64)], clip_norm=1.0, loss_scale=2.0
    )
    assert [g.dtype for g in mixed] == [tf.float32, tf.float64]
    np.testing.assert_allclose([float(mixed[0][0]), float(mixed[1][0])], [1.2, 1.6], rtol=1e-7)


def float64_regression(how):
    """A model that computes in float64 (by floatx or by its layers' dtype), data and a loss."""
    keras.utils.set_random_seed(0)
    dtype = None if how == "floatx" else "float64"
    model = keras.Sequential(
        [
            keras.Input((2,), dtype="float64"),
            keras.layers.Dense(4, activation="tanh", dtype=dtype),
            keras.layers.Dense(1, dtype=dtype),
        ]
    )
    x = np.random.default_rng(0).normal(size=(8, 2))
    data = tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True) * 10)).batch(8)
    return model, data, keras.losses.MeanSquaredError(dtype="float64")


def clipped_sgd_step(how, clip_norm, rate):
    """The weights one SGD step with ``tf.clip_by_global_norm`` (in float64) gives, and the
    gradient's norm: the reference for a float64 model's clipped step."""
    model, data, loss = float64_regression(how)
    ((x, y),) = data
    with tf.GradientTape() as tape:
        value = loss(y, model(x))
    gradients = tape.gradient(value, model.trainable_variables)
    assert all(g.dtype == tf.float64 for g in gradients)
    clipped, norm = tf.clip_by_global_norm(gradients, clip_norm)
    weights = [v.numpy() - rate * g.numpy() for v, g in zip(model.trainable_variables, clipped)]
    return weights, float(norm)


@pytest.mark.parametrize("how", ["floatx", "layer dtype"])
def test_clip_norm_clips_a_float64_model(how, request):
    # The norm of float64 gradients used to be divided by a float32 loss scale: TypeError.
    if how == "floatx":
        request.getfixturevalue("float64_floatx")
    expected, norm = clipped_sgd_step(how, clip_norm=0.01, rate=1.0)
    assert norm > 1.0  # the clip acts
    model, data, loss = float64_regression(how)
    fit(model, data, optimizer=keras.optimizers.SGD(1.0), loss=loss, clip_norm=0.01, progress=False)
    assert all(v.dtype == "float64" for v in model.trainable_variables)
    for variable, weights in zip(model.trainable_variables, expected):
        np.testing.assert_allclose(variable.numpy(), weights, rtol=1e-12, atol=1e-15)
    # and it trains: several epochs of clipped steps, the loss falling, every weight finite
    history = fit(
        model,
        data,
        optimizer=keras.optimizers.SGD(0.1),
        loss=loss,
        epochs=5,
        clip_norm=1.0,
        progress=False,
    )
    assert history["loss"][-1] < history["loss"][0]
    assert all(np.isfinite(v.numpy()).all() for v in model.trainable_variables)
