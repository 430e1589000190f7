import keras
import numpy as np
import pytest
import tensorflow as tf

from companion.introspection import traced_ops
from companion.ops import logsumexp, masked_mean, mish, softplus, swish

DTYPES = [tf.float32, tf.float64]
EXTREMES = [-1000.0, -100.0, -20.0, -1.0, 0.0, 1.0, 20.0, 100.0, 1000.0]


def value_and_grad(fn, x):
    """fn(x) and d(sum fn(x))/dx, both as NumPy."""
    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return y.numpy(), tape.gradient(y, x).numpy()


def grid(dtype, low=-12.0, high=12.0, n=241):
    return tf.constant(np.linspace(low, high, n), dtype)


def np_sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))  # accurate in both tails


# --- swish ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_swish_equals_tf_nn_silu_bitwise_and_gradients_close(dtype):
    x = grid(dtype)
    ours, our_grad = value_and_grad(swish, x)
    ref, ref_grad = value_and_grad(tf.nn.silu, x)
    np.testing.assert_array_equal(ours, ref)
    tol = 2e-7 if dtype == tf.float32 else 1e-15
    np.testing.assert_allclose(our_grad, ref_grad, rtol=0, atol=tol)


@pytest.mark.parametrize("beta", [0.1, 0.5, 2, 10.0, -1.5])
def test_swish_beta_against_closed_form(beta):
    x = grid(tf.float64)
    y, dy = value_and_grad(lambda t: swish(t, beta), x)
    xn = x.numpy()
    s = np_sigmoid(beta * xn)
    np.testing.assert_allclose(y, xn * s, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dy, s + beta * xn * s * (1 - s), rtol=1e-12, atol=1e-14)


def test_swish_trainable_beta_gradient_against_closed_form():
    x = grid(tf.float32, -4.0, 4.0, 9)
    beta = tf.Variable(1.5)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(swish(x, beta))
    xn = x.numpy().astype(np.float64)
    s = np_sigmoid(1.5 * xn)
    np.testing.assert_allclose(
        float(tape.gradient(y, beta)), np.sum(xn**2 * s * (1 - s)), rtol=1e-5
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_swish_finite_at_extremes(dtype):
    y, dy = value_and_grad(lambda t: swish(t, 2.0), tf.constant(EXTREMES, dtype))
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(dy))
    np.testing.assert_allclose(y[[0, -1]], [0.0, 1000.0])
    np.testing.assert_allclose(dy[[0, -1]], [0.0, 1.0])


# --- softplus ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_softplus_matches_tf_nn_softplus(dtype):
    x = tf.concat([grid(dtype, -60.0, 60.0, 481), tf.constant(EXTREMES, dtype)], 0)
    y, dy = value_and_grad(softplus, x)
    ref, ref_grad = value_and_grad(tf.nn.softplus, x)
    rtol = 1e-6 if dtype == tf.float32 else 1e-14
    np.testing.assert_allclose(y, ref, rtol=rtol, atol=0)
    np.testing.assert_allclose(dy, ref_grad, rtol=rtol, atol=1e-30)


def test_softplus_against_numpy_logaddexp_and_sigmoid():
    x = grid(tf.float64, -40.0, 40.0, 161)
    y, dy = value_and_grad(softplus, x)
    np.testing.assert_allclose(y, np.logaddexp(0.0, x.numpy()), rtol=1e-14)
    np.testing.assert_allclose(dy, np_sigmoid(x.numpy()), rtol=1e-13)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softplus_finite_at_extremes_and_exact_gradient_at_zero(dtype):
    y, dy = value_and_grad(softplus, tf.constant(EXTREMES, dtype))
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(dy))
    np.testing.assert_allclose(y[[0, 4, -1]], [0.0, np.log(2.0), 1000.0], rtol=1e-7)
    np.testing.assert_allclose(dy[[0, 4, -1]], [0.0, 0.5, 1.0], rtol=1e-7, atol=0)


def test_naive_softplus_is_what_the_stable_form_fixes():
    # The reference failure: log(1 + exp(x)) overflows to inf with a NaN gradient.
    y, dy = value_and_grad(lambda t: tf.math.log(1 + tf.exp(t)), tf.constant([1000.0]))
    assert np.isinf(y[0]) and np.isnan(dy[0])


# --- mish ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_mish_matches_keras_and_closed_form(dtype):
    x = grid(dtype)
    y, dy = value_and_grad(mish, x)
    ref = keras.activations.mish(x).numpy()
    xn = x.numpy().astype(np.float64)
    sp = np.logaddexp(0.0, xn)
    closed = xn * np.tanh(sp)
    closed_grad = np.tanh(sp) + xn * (1 - np.tanh(sp) ** 2) * np_sigmoid(xn)
    # float32: tanh's gradient 1 - tanh^2 rounds to 0 near x = 8, losing ~3e-6 there.
    rtol, atol = (2e-6, 1e-5) if dtype == tf.float32 else (1e-12, 1e-14)
    np.testing.assert_allclose(y, ref, rtol=rtol, atol=atol)
    np.testing.assert_allclose(y, closed, rtol=rtol, atol=atol)
    np.testing.assert_allclose(dy, closed_grad, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mish_finite_at_extremes_and_gradient_at_zero(dtype):
    y, dy = value_and_grad(mish, tf.constant(EXTREMES, dtype))
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(dy))
    np.testing.assert_allclose(dy[4], 0.6, rtol=1e-6)  # tanh(log 2) = 3/5
    np.testing.assert_allclose(y[[0, -1]], [0.0, 1000.0])


# --- logsumexp -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "axis,keepdims", [(None, False), (0, False), (1, True), (-1, False), ((0, 2), False)]
)
def test_logsumexp_matches_reduce_logsumexp_and_numpy(axis, keepdims):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(scale=30.0, size=(3, 4, 5)))
    y, dy = value_and_grad(lambda t: logsumexp(t, axis=axis, keepdims=keepdims), x)
    ref, ref_grad = value_and_grad(
        lambda t: tf.reduce_logsumexp(t, axis=axis, keepdims=keepdims), x
    )
    np_axis = tuple(axis) if isinstance(axis, tuple) else axis
    xn = x.numpy()
    m = xn.max(axis=np_axis, keepdims=True)
    numpy_ref = np.log(np.exp(xn - m).sum(axis=np_axis, keepdims=True)) + m
    if not keepdims:
        numpy_ref = (
            numpy_ref.squeeze(axis=np_axis) if np_axis is not None else numpy_ref.reshape(())
        )
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-13)
    np.testing.assert_allclose(y, numpy_ref, rtol=1e-13)
    np.testing.assert_allclose(dy, ref_grad, rtol=1e-12, atol=1e-15)


def test_logsumexp_gradient_is_softmax():
    x = tf.constant([[1.0, 2.0, 3.0], [1000.0, 1000.0, -1000.0]])
    _, dy = value_and_grad(lambda t: logsumexp(t, axis=1), x)
    np.testing.assert_allclose(dy, tf.nn.softmax(x, axis=1).numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_logsumexp_finite_at_extremes(dtype):
    x = tf.constant([[1000.0, 1000.0], [-1000.0, -1000.0]], dtype)
    y, dy = value_and_grad(lambda t: logsumexp(t, axis=1), x)
    np.testing.assert_allclose(y, [1000.0 + np.log(2.0), -1000.0 + np.log(2.0)], rtol=1e-7)
    np.testing.assert_allclose(dy, np.full((2, 2), 0.5))
    naive = tf.math.log(tf.reduce_sum(tf.exp(x), axis=1)).numpy()
    assert np.isposinf(naive[0]) and np.isneginf(naive[1])  # exp(±1000) overflows even in float64


def test_logsumexp_all_neg_inf_slice_like_tf():
    x = tf.constant([[-np.inf, -np.inf], [0.0, -np.inf]])
    np.testing.assert_array_equal(
        logsumexp(x, axis=1).numpy(), tf.reduce_logsumexp(x, axis=1).numpy()
    )


# --- masked_mean ---------------------------------------------------------------------


@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (1, True), (-1, False)])
def test_masked_mean_matches_numpy_masked_array(axis, keepdims):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 6))
    mask = rng.random((4, 6)) > 0.4
    mask[:, 0] = True  # no empty slices here; numpy gives masked (not 0) for those
    mask[0, :] = True
    ours = masked_mean(tf.constant(x), tf.constant(mask), axis=axis, keepdims=keepdims).numpy()
    ref = np.ma.masked_array(x, mask=~mask).mean(axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(ours, np.ma.getdata(ref), rtol=1e-13)


def test_masked_mean_empty_slice_is_zero_and_padding_nan_does_not_leak():
    x = tf.constant([[1.0, 2.0, np.nan], [np.inf, np.nan, 5.0]])
    mask = tf.constant([[True, True, False], [False, False, False]])
    y, dy = value_and_grad(lambda t: masked_mean(t, mask, axis=1), x)
    np.testing.assert_array_equal(y, [1.5, 0.0])
    np.testing.assert_array_equal(dy, [[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]])


def test_masked_mean_broadcasts_mask_over_features():
    x = tf.reshape(tf.range(12, dtype=tf.float32), (2, 3, 2))
    mask = tf.constant([[[True], [True], [False]], [[True], [False], [False]]])  # (2, 3, 1)
    y = masked_mean(x, mask, axis=1).numpy()
    np.testing.assert_allclose(y, [[1.0, 2.0], [6.0, 7.0]])


# --- graph mode ----------------------------------------------------------------------


def test_every_op_works_inside_tf_function_and_lowers_to_plain_tf_ops():
    x = tf.constant(np.linspace(-30, 30, 13), tf.float32)
    mask = x > 0
    cases = [
        (swish, (x,)),
        (lambda t: swish(t, 2.0), (x,)),
        (softplus, (x,)),
        (mish, (x,)),
        (lambda t: logsumexp(t, axis=0), (x,)),
        (lambda t, m: masked_mean(t, m), (x, mask)),
    ]
    for fn, args in cases:
        graph_fn = tf.function(fn)
        # Grappler may fuse ops in graph mode (e.g. x * sigmoid(x)): equal to a few ulps, not bits.
        np.testing.assert_allclose(
            graph_fn(*args).numpy(), fn(*args).numpy(), rtol=1e-6, atol=1e-30
        )
        ops = traced_ops(graph_fn, *args)
        assert not {"EagerPyFunc", "PyFunc"} & set(ops), ops
    assert traced_ops(swish, tf.TensorSpec([None], tf.float32)) == [
        "Const",
        "Mul",
        "Sigmoid",
        "Mul",
    ]


def test_gradient_inside_tf_function_matches_eager():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float64)])
    def grad_fn(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            y = mish(t)
        return tape.gradient(y, t)

    x = tf.constant(EXTREMES, tf.float64)
    np.testing.assert_allclose(
        grad_fn(x).numpy(), value_and_grad(mish, x)[1], rtol=1e-13, atol=1e-300
    )


# --- bad input -----------------------------------------------------------------------


@pytest.mark.parametrize("fn", [swish, softplus, mish, logsumexp])
def test_integer_x_raises_type_error_naming_x(fn):
    with pytest.raises(TypeError, match=r"^x: expected a floating-point tensor.*int32"):
        fn(tf.constant([1, 2, 3]))


def test_unconvertible_or_string_x_raises_type_error():
    with pytest.raises(TypeError, match=r"^x: expected a floating-point tensor, got object"):
        swish(object())
    with pytest.raises(TypeError, match=r"^x: expected a floating-point tensor.*got dtype string"):
        swish("abc")


@pytest.mark.parametrize("beta", ["1.0", None, True, [1.0]])
def test_swish_bad_beta_type(beta):
    with pytest.raises(
        TypeError, match=r"^beta: expected a finite number or a float scalar tensor"
    ):
        swish(tf.constant([1.0]), beta)


def test_swish_bad_beta_values():
    with pytest.raises(ValueError, match=r"^beta: expected a finite number, got float nan"):
        swish(tf.constant([1.0]), float("nan"))
    with pytest.raises(ValueError, match=r"^beta: expected a scalar"):
        swish(tf.constant([1.0]), tf.constant([1.0, 2.0]))
    with pytest.raises(
        TypeError, match=r"^beta: expected a floating-point scalar tensor, got dtype int32"
    ):
        swish(tf.constant([1.0]), tf.constant(1))


def test_bad_axis_and_keepdims():
    x = tf.zeros((2, 3))
    with pytest.raises(ValueError, match=r"^axis: expected values in \[-2, 2\)"):
        logsumexp(x, axis=2)
    with pytest.raises(TypeError, match=r"^axis: expected None, an int"):
        logsumexp(x, axis=1.0)
    with pytest.raises(TypeError, match=r"^keepdims: expected a bool"):
        logsumexp(x, axis=1, keepdims=1)


def test_masked_mean_bad_mask():
    x = tf.zeros((2, 3))
    with pytest.raises(
        TypeError,
        match=r"^mask: expected a boolean tensor .*\(use e.g. mask > 0\), got dtype float32",
    ):
        masked_mean(x, tf.ones((2, 3)))
    with pytest.raises(
        ValueError, match=r"^mask: expected a boolean tensor broadcastable to x's shape \(2, 3\)"
    ):
        masked_mean(x, tf.ones((2, 4), tf.bool))
    with pytest.raises(
        ValueError, match=r"^mask: expected .* \(at most rank 2\), got shape \(1, 2, 3\)"
    ):
        masked_mean(x, tf.ones((1, 2, 3), tf.bool))
    with pytest.raises(TypeError, match=r"^x: expected a floating-point tensor"):
        masked_mean(tf.zeros((2, 3), tf.int32), tf.ones((2, 3), tf.bool))


class _LearnableSwish(keras.layers.Layer):
    """Chapter 2's exercise: swish with a trainable beta created by ``add_weight``."""

    def build(self, input_shape):
        self.beta = self.add_weight(shape=(), initializer="ones", name="beta")

    def call(self, inputs):
        return swish(inputs, self.beta)


def test_swish_accepts_a_keras_weight_as_beta_and_trains_it_in_fit():
    layer = _LearnableSwish()
    layer.build((None, 1))
    assert isinstance(layer.beta, keras.Variable) and not isinstance(layer.beta, tf.Variable)
    x = np.linspace(-3, 3, 64, dtype="float32")[:, None]
    np.testing.assert_allclose(layer(x), tf.nn.silu(x), rtol=1e-6)
    model = keras.Sequential([keras.Input((1,)), layer])
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    model.fit(x, np.maximum(x, 0.0), epochs=3, batch_size=16, verbose=0)  # ReLU target: beta grows
    assert float(layer.beta.numpy()) > 1.05


def test_swish_with_a_keras_weight_inside_tf_function_has_a_gradient():
    beta = keras.Variable(2.0, name="beta")
    x = tf.constant([-1.0, 0.5, 2.0])

    @tf.function
    def gradient():
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(swish(x, beta))
        return tape.gradient(y, beta.value)

    s = 1 / (1 + np.exp(-2.0 * x.numpy()))
    np.testing.assert_allclose(float(gradient()), np.sum(x.numpy() ** 2 * s * (1 - s)), rtol=1e-5)


# --- issue 16: bad axes and masks get the project's message ----------------------------


@pytest.mark.parametrize(
    "fn", [logsumexp, lambda x, axis: masked_mean(x, x > 0, axis)], ids=["logsumexp", "masked_mean"]
)
@pytest.mark.parametrize(
    "axis, error",
    [
        ("", TypeError),
        ("01", TypeError),
        ([], ValueError),
        ((), ValueError),
        ({0: 1}, TypeError),
        ([1, -1], ValueError),
    ],
)
def test_axis_must_be_an_int_or_a_non_empty_list_of_distinct_axes(fn, axis, error):
    # A str is a Sequence (iterated one character at a time), [] would reduce nothing (and
    # logsumexp's squeeze then dropped every axis of size 1), [1, -1] names one axis twice.
    with pytest.raises(
        error, match=r"^axis: expected None, an int or a non-empty list of distinct ints"
    ):
        fn(tf.ones((1, 3)), axis=axis)


@pytest.mark.parametrize("mask", [None, {}, {"a": 1}, object(), [None], "abc"])
def test_masked_mean_mask_that_is_no_tensor_is_named(mask):
    with pytest.raises(TypeError, match=r"^mask: expected a boolean tensor .*, got "):
        masked_mean(tf.ones((2, 3)), mask)


def test_masked_mean_takes_a_keras_variable_mask_in_tf_function():
    mask = keras.Variable([[True, False, True]], dtype="bool", trainable=False)
    x = tf.constant([[1.0, 5.0, 3.0], [2.0, 7.0, 4.0]])
    np.testing.assert_allclose(tf.function(masked_mean)(x, mask, axis=1), [2.0, 3.0])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_nonfinite_beta_tensor_is_refused_with_the_projects_error(bad):
    # Used to be accepted: a NaN beta tensor gave NaN outputs and no error.
    for beta in (tf.constant(bad), keras.Variable(bad)):
        with pytest.raises(ValueError, match=r"^beta: expected a finite scalar tensor, got "):
            swish(tf.ones(3), beta=beta)


def test_a_beta_variable_still_trains_inside_a_tf_function():
    beta, x = tf.Variable(1.5, dtype=tf.float64), np.array([1.0, -2.0, 0.5, 3.0])
    with tf.GradientTape() as tape:
        y = tf.function(lambda x: swish(x, beta=beta))(tf.constant(x))
    # d/dbeta of sum(x * sigmoid(beta * x)) is sum(x**2 * s * (1 - s)), s = sigmoid(beta * x)
    s = np_sigmoid(1.5 * x)
    np.testing.assert_allclose(tape.gradient(y, beta), np.sum(x**2 * s * (1 - s)), rtol=1e-10)
