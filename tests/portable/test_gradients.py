"""``companion.gradients``' custom-gradient ops on the running backend, through
``keras.ops.custom_gradient`` with the portable ``grad(*args, upstream=None)``: forward values
and the gradients each op states, at the points where plain autodiff goes wrong."""

import keras
import numpy as np
import pytest
from helpers.backend_autodiff import float64_exists, gradient_of_sum
from keras import ops

from companion.gradients import (
    ClippedIdentity,
    clipped_identity,
    default_delta,
    log1p_exp,
    safe_norm,
)

F32 = 1e-6  # float32 rounding of values near 1


def as_numpy(x):
    return ops.convert_to_numpy(x)


def test_clipped_identity_clips_forward_and_leaks_gradient_where_it_clipped():
    x = np.array([-2.0, -1.0, 0.5, 1.0, 2.0], "float32")
    assert as_numpy(clipped_identity(x, leak=0.25)).tolist() == [-1.0, -1.0, 0.5, 1.0, 1.0]
    gradient = gradient_of_sum(lambda v: clipped_identity(v, leak=0.25), x)
    assert gradient.tolist() == [0.25, 1.0, 1.0, 1.0, 0.25]  # factor 1 at exactly a bound
    zero_leak = gradient_of_sum(lambda v: clipped_identity(v, leak=0.0), x)
    assert zero_leak.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]  # the plain clip's gradient


def test_clipped_identity_takes_tensor_and_variable_bounds_as_constants():
    x = np.array([-2.0, 0.5, 2.0], "float32")
    low = np.array([-1.0, 0.0, 0.0], "float32")
    high = keras.Variable([1.0, 0.25, 1.5])
    assert as_numpy(clipped_identity(x, low, high)).tolist() == [-1.0, 0.25, 1.5]
    gradient = gradient_of_sum(lambda v: clipped_identity(v, low, high, leak=0.5), x)
    assert gradient.tolist() == [0.5, 0.5, 0.5]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"clip_min": 2.0, "clip_max": 1.0}, r"^clip_min: expected values below clip_max"),
        ({"clip_min": np.zeros((2, 3))}, r"^clip_min: expected a number or a tensor broadcasting"),
        ({"clip_max": 1e300}, r"^clip_max: expected a finite number"),
        ({"leak": -1.0}, r"^leak: expected a finite number >= 0"),
    ],
)
def test_clipped_identity_refuses_bad_bounds_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        clipped_identity(np.zeros(3, "float32"), **kwargs)


def test_the_clipped_identity_layer_trains_in_fit_and_leaks_gradient():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), ClippedIdentity(-0.5, 0.5, leak=0.1)])
    model.add(keras.layers.Dense(1))
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    history = model.fit(x, x.sum(axis=1, keepdims=True), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    layer = ClippedIdentity(0.0, 1.0)
    assert as_numpy(layer(np.array([[-1.0, 0.5, 3.0]], "float32"))).tolist() == [[0.0, 0.5, 1.0]]
    assert ClippedIdentity.from_config(layer.get_config()).get_config() == layer.get_config()


def test_safe_norm_equals_the_norm_with_a_zero_gradient_at_the_zero_vector():
    x = np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0]], "float32")
    assert as_numpy(safe_norm(x)).tolist() == [5.0, 0.0]
    gradient = gradient_of_sum(safe_norm, x)
    np.testing.assert_allclose(gradient, [[0.6, 0.8, 0.0], [0.0, 0.0, 0.0]], rtol=F32)
    assert np.all(np.isfinite(gradient))  # plain autodiff: NaN on the second row
    assert as_numpy(safe_norm(x, axis=0)).tolist() == [3.0, 4.0, 0.0]


def test_log1p_exp_is_stable_with_the_sigmoid_gradient_everywhere():
    x = np.array([-1000.0, 0.0, 100.0, 1000.0], "float32")
    np.testing.assert_allclose(as_numpy(log1p_exp(x)), np.logaddexp(0.0, x), rtol=F32)
    gradient = gradient_of_sum(log1p_exp, x)
    assert gradient.tolist() == [0.0, 0.5, 1.0, 1.0]  # 0.5 at the kink, not autodiff's 1


@pytest.mark.parametrize("dtype, exponent", [("float16", -3), ("float32", -8), ("float64", -17)])
def test_default_delta_is_the_power_of_two_near_the_cube_root_of_eps(dtype, exponent):
    assert default_delta(dtype) == default_delta(np.dtype(dtype)) == 2.0**exponent
    with pytest.raises(TypeError, match="^dtype: expected float16, float32 or float64"):
        default_delta("int32")


def test_float64_inputs_keep_their_dtype_and_precision():
    if not float64_exists():
        pytest.skip("float64 does not exist on JAX without jax_enable_x64 (it becomes float32)")
    x = np.array([0.1, 2.0], "float64")
    assert keras.backend.standardize_dtype(clipped_identity(x, 0.0, 1.0).dtype) == "float64"
    assert as_numpy(clipped_identity(x, 0.0, 1.0)).tolist() == [0.1, 1.0]  # 0.1 not rounded
