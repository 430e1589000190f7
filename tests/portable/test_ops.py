"""``companion.ops`` on the running backend: values against NumPy in float64, finite values and
gradients at x = ±1000, the double-``where`` and ``where``-not-multiply tricks, and the checks."""

import keras
import numpy as np
import pytest
from helpers.backend_autodiff import float64_exists, gradient_of_sum
from keras import ops

from companion.ops import logsumexp, masked_mean, mish, softplus, swish

#: float32 rounding: a few units in the last place of values near 1 (2**-23 ≈ 1.2e-7 each).
F32 = 1e-6
EXTREME = np.array([-1000.0, -50.0, -1.0, 0.0, 1.0, 50.0, 1000.0])


def as_numpy(x):
    return ops.convert_to_numpy(x)


@pytest.fixture(params=["float32", "float64"])
def dtype(request):
    if request.param == "float64" and not float64_exists():
        pytest.skip("float64 does not exist on JAX without jax_enable_x64 (it becomes float32)")
    return request.param


def sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))  # overflow-free, and exact for tiny values


def test_softplus_is_finite_with_the_sigmoid_gradient_at_extremes(dtype):
    x = EXTREME.astype(dtype)
    expected = np.logaddexp(0.0, EXTREME)
    tolerance = F32 if dtype == "float32" else 1e-12
    value = as_numpy(softplus(x))
    assert value.dtype == dtype and np.all(np.isfinite(value))
    np.testing.assert_allclose(value, expected, rtol=tolerance, atol=tolerance)
    gradient = gradient_of_sum(softplus, x)
    assert np.all(np.isfinite(gradient)) and gradient[3] == 0.5  # the double where: not 0 or 1
    np.testing.assert_allclose(gradient, sigmoid(EXTREME), rtol=tolerance, atol=tolerance)


def test_swish_and_mish_equal_their_formulas_with_finite_gradients(dtype):
    x = EXTREME.astype(dtype)
    tolerance = F32 if dtype == "float32" else 1e-12
    tiny = np.finfo(dtype).tiny  # swish(-50, beta=2) ≈ -2e-42: a subnormal a backend may flush
    for beta in (1.0, 2.0):
        np.testing.assert_allclose(
            as_numpy(swish(x, beta)), EXTREME * sigmoid(beta * EXTREME), rtol=tolerance, atol=tiny
        )
    mish_reference = EXTREME * np.tanh(np.logaddexp(0.0, EXTREME))
    np.testing.assert_allclose(as_numpy(mish(x)), mish_reference, rtol=tolerance, atol=tolerance)
    for fn in (swish, mish):
        assert np.all(np.isfinite(gradient_of_sum(fn, x)))


def test_swish_takes_a_keras_weight_as_beta():
    beta = keras.Variable(0.5)
    x = np.array([-2.0, 0.0, 2.0], "float32")
    np.testing.assert_allclose(as_numpy(swish(x, beta)), x * sigmoid(0.5 * x), rtol=F32)
    with pytest.raises(ValueError, match="^beta: expected a finite scalar tensor"):
        swish(x, keras.Variable(float("nan")))
    with pytest.raises(ValueError, match=r"^beta: expected a scalar \(rank 0\), got shape \(2,\)"):
        swish(x, keras.Variable([1.0, 2.0]))
    with pytest.raises(TypeError, match="^beta: expected a floating-point scalar tensor"):
        swish(x, ops.convert_to_tensor(1))


def test_logsumexp_shifts_by_the_max_and_its_gradient_is_the_softmax(dtype):
    x = np.array([[1000.0, 1000.0, 0.0], [-1000.0, -1000.5, -2000.0]], dtype)
    m = x.max(axis=1, keepdims=True)
    expected = (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))[:, 0]
    np.testing.assert_allclose(as_numpy(logsumexp(x, axis=1)), expected, rtol=F32)
    softmax = np.exp(x - m) / np.exp(x - m).sum(axis=1, keepdims=True)
    gradient = gradient_of_sum(lambda v: logsumexp(v, axis=1), x)
    np.testing.assert_allclose(gradient, softmax, rtol=F32, atol=F32)
    assert as_numpy(logsumexp(x, axis=[0, 1], keepdims=True)).shape == (1, 1)
    assert as_numpy(logsumexp(np.full((2, 3), -np.inf, dtype), axis=1)).tolist() == [-np.inf] * 2


def test_masked_mean_keeps_nan_padding_out_of_value_and_gradient():
    x = np.array([[1.0, 2.0, np.nan], [np.inf, 5.0, 6.0]], "float32")
    mask = np.array([[True, True, False], [False, False, False]])
    assert as_numpy(masked_mean(x, mask, axis=1)).tolist() == [1.5, 0.0]  # empty row: 0, not NaN
    gradient = gradient_of_sum(lambda v: masked_mean(v, mask, axis=1), x)
    assert gradient.tolist() == [[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]
    row_mask = np.array([True, False, True])  # broadcast over the rows
    assert as_numpy(masked_mean(np.ones((2, 3), "float32"), row_mask)).tolist() == 1.0


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: softplus(np.array([1, 2])), TypeError, "^x: expected a floating-point tensor"),
        (lambda: logsumexp(np.ones(3, "float32"), axis=1), ValueError, r"^axis: expected values"),
        (
            lambda: masked_mean(np.ones(3, "float32"), np.ones(3)),
            TypeError,
            r"^mask: expected a boolean tensor .* got dtype float",
        ),
        (
            lambda: masked_mean(np.ones(3, "float32"), np.ones((2, 3), bool)),
            ValueError,
            r"^mask: expected a boolean tensor broadcastable to x's shape \(3,\) \(at most rank",
        ),
        (
            lambda: masked_mean(np.ones(3, "float32"), np.ones(2, bool)),
            ValueError,
            r"^mask: expected a boolean tensor broadcastable to x's shape \(3,\), got shape \(2,\)",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
