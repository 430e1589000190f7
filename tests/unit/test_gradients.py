import keras
import numpy as np
import pytest
import tensorflow as tf

from companion.gradients import (
    ClippedIdentity,
    clipped_identity,
    default_delta,
    gradient_error,
    gradient_penalty,
    log1p_exp,
    safe_norm,
    value_and_gradient,
)

# Points inside, outside and exactly on the default bounds [-1, 1].
POINTS = np.array([-3.0, -1.0, -0.999, -0.25, 0.0, 0.6, 1.0, 1.001, 5.0], np.float32)


def value_and_grad(fn, x, upstream=None):
    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
        target = y if upstream is None else y * upstream
    return y.numpy(), tape.gradient(target, x).numpy()


def closed_form_grad(x, low, high, leak):
    """1 inside the closed range [low, high] (bounds included, as tf.clip_by_value).

    ``leak`` outside.
    """
    return np.where((x >= low) & (x <= high), 1.0, leak)


# --- clipped_identity -------------------------------------------------------------------


@pytest.mark.parametrize("leak", [0.01, 0.3])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize("tensor_bounds", [False, True], ids=["python-bounds", "tensor-bounds"])
def test_clipped_identity_value_and_gradient(leak, graph, tensor_bounds):
    low, high = (-1.0, 1.0)
    bounds = (tf.constant(low), tf.constant(high)) if tensor_bounds else (low, high)

    def fn(x):
        return clipped_identity(x, *bounds, leak=leak)

    if graph:
        fn = tf.function(fn)
    y, grad = value_and_grad(fn, POINTS)
    np.testing.assert_array_equal(y, tf.clip_by_value(POINTS, low, high).numpy())
    np.testing.assert_allclose(grad, closed_form_grad(POINTS, low, high, leak), rtol=1e-7)


def test_clipped_identity_scales_the_upstream_gradient():
    upstream = np.linspace(-2.0, 3.0, POINTS.size).astype(np.float32)
    _, grad = value_and_grad(lambda x: clipped_identity(x, -0.5, 2.0, leak=0.1), POINTS, upstream)
    np.testing.assert_allclose(grad, upstream * closed_form_grad(POINTS, -0.5, 2.0, 0.1), rtol=1e-6)


def test_clipped_identity_with_zero_leak_has_clip_by_value_gradient():
    # Independent reference: TF's own gradient of clip_by_value, bounds included.
    _, ours = value_and_grad(lambda x: clipped_identity(x, leak=0.0), POINTS)
    _, builtin = value_and_grad(lambda x: tf.clip_by_value(x, -1.0, 1.0), POINTS)
    np.testing.assert_array_equal(ours, builtin)


def test_clipped_identity_tensor_bounds_in_tf_function_with_signature():
    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.float64)] + [tf.TensorSpec([], tf.float64)] * 2
    )
    def fn(x, low, high):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = clipped_identity(x, low, high, leak=0.5)
        return y, tape.gradient(y, x)

    x = POINTS.astype(np.float64)
    for low, high in [(-1.0, 1.0), (0.0, 2.0)]:
        y, grad = fn(x, tf.constant(low, tf.float64), tf.constant(high, tf.float64))
        np.testing.assert_array_equal(y.numpy(), np.clip(x, low, high))
        np.testing.assert_array_equal(grad.numpy(), closed_form_grad(x, low, high, 0.5))
        assert y.dtype == tf.float64


def test_clipped_identity_broadcasts_tensor_bounds():
    x = np.array([[-2.0, 0.5], [2.0, 0.5]], np.float32)
    high = tf.constant([[1.0], [0.25]])
    y, grad = value_and_grad(lambda t: clipped_identity(t, -1.0, high, leak=0.0), x)
    np.testing.assert_array_equal(y, np.clip(x, -1.0, [[1.0], [0.25]]))
    np.testing.assert_array_equal(grad, [[0.0, 1.0], [0.0, 0.0]])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"clip_min": 1.0, "clip_max": 1.0}, ValueError, "clip_min"),
        ({"clip_min": 2.0, "clip_max": -2.0}, ValueError, "clip_min"),
        ({"leak": -0.1}, ValueError, "leak"),
        ({"leak": float("nan")}, ValueError, "leak"),
        ({"leak": "0.1"}, TypeError, "leak"),
        ({"clip_min": "low"}, TypeError, "clip_min"),
        ({"clip_max": None}, TypeError, "clip_max"),
    ],
)
def test_clipped_identity_rejects_bad_parameters(kwargs, error, match):
    with pytest.raises(error, match=match):
        clipped_identity(POINTS, **kwargs)


def test_clipped_identity_rejects_integer_input():
    with pytest.raises(TypeError, match="x: expected a floating-point tensor.*got dtype int32"):
        clipped_identity(tf.constant([1, 2, 3]))


def test_clipped_identity_keeps_python_float_bounds_at_float64_precision():
    # tf.cast(0.1, tf.float64) would go through float32 and clip to 0.10000000149...
    y = clipped_identity(np.array([0.5, -0.5]), -0.3, 0.1).numpy()
    assert y.tolist() == [0.1, -0.3]


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize(
    "make_bound",
    [
        lambda: tf.Variable(0.5, dtype=tf.float64),  # same dtype as x: once read inside the op
        lambda: tf.Variable(0.5, dtype=tf.float32),  # cast needed
        lambda: keras.Variable(0.5, dtype="float64"),  # a Keras weight
    ],
    ids=["tf-float64", "tf-float32", "keras"],
)
def test_clipped_identity_reads_variable_bounds_as_constants(graph, make_bound):
    # A variable bound used to be read inside the custom-gradient op when its dtype matched
    # x's, and TensorFlow then refused grad without a `variables` keyword (TypeError).
    bound = make_bound()
    x = tf.constant([-0.5, 0.25, 2.0], tf.float64)

    def fn(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = clipped_identity(x, -1.0, bound, leak=0.1)
        dx, dbound = tape.gradient(y, [x, bound])
        return y, dx, dbound

    y, dx, dbound = (tf.function(fn) if graph else fn)(x)
    np.testing.assert_array_equal(y.numpy(), [-0.5, 0.25, 0.5])
    np.testing.assert_array_equal(dx.numpy(), [1.0, 1.0, 0.1])
    assert dbound is None  # documented: the bounds are constants of the op


# --- ClippedIdentity layer --------------------------------------------------------------


def test_layer_matches_function_and_round_trips(tmp_path):
    layer = ClippedIdentity(-0.5, 0.75, leak=0.2, name="clip")
    x = POINTS.reshape(3, 3)
    _, grad = value_and_grad(layer, x)
    np.testing.assert_allclose(grad, closed_form_grad(x, -0.5, 0.75, 0.2), rtol=1e-6)

    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(layer(inputs)))
    path = tmp_path / "clip.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)
    restored = loaded.get_layer("clip")
    assert isinstance(restored, ClippedIdentity)
    assert (restored.clip_min, restored.clip_max, restored.leak) == (-0.5, 0.75, 0.2)


def test_layer_rejects_bad_parameters():
    with pytest.raises(ValueError, match="clip_min"):
        ClippedIdentity(1.0, 0.0)
    with pytest.raises(TypeError, match="clip_max: expected a finite number"):
        ClippedIdentity(0.0, tf.constant(1.0))
    with pytest.raises(ValueError, match="leak"):
        ClippedIdentity(leak=-1.0)


def test_leaky_clip_lets_a_saturated_layer_train():
    # Every hidden unit starts saturated (bias 4 > clip_max 1): a hard clip passes zero
    # gradient to the first Dense, the leaky clip does not.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 3)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32)

    def first_kernel_change(leak):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((3,))
        hidden = keras.layers.Dense(
            8, bias_initializer=keras.initializers.Constant(4.0), name="hidden"
        )
        model = keras.Model(
            inputs, keras.layers.Dense(1)(ClippedIdentity(leak=leak)(hidden(inputs)))
        )
        model.compile(keras.optimizers.Adam(0.01), "mse")
        before = hidden.kernel.numpy().copy()
        model.fit(x, y, epochs=2, batch_size=32, verbose=0)
        return np.max(np.abs(hidden.kernel.numpy() - before))

    assert first_kernel_change(0.0) == 0.0
    assert first_kernel_change(0.01) > 1e-3


# --- gradient_error ---------------------------------------------------------------------


@pytest.mark.parametrize("fn", [tf.sin, tf.exp, tf.tanh], ids=["sin", "exp", "tanh"])
def test_gradient_error_is_tiny_for_builtins_in_float64(fn):
    assert gradient_error(fn, np.linspace(-2.0, 2.0, 7)) < 1e-8


def test_gradient_error_handles_non_elementwise_functions():
    x = np.random.default_rng(1).normal(size=(2, 3))
    assert gradient_error(lambda t: tf.linalg.matmul(t, t, transpose_b=True), x) < 1e-8
    assert gradient_error(lambda t: tf.reduce_sum(t**3), x) < 1e-8


def test_gradient_error_float32_is_noisier_but_bounded():
    error = gradient_error(tf.sin, np.linspace(-2.0, 2.0, 7).astype(np.float32))
    assert 1e-9 < error < 1e-3


def test_gradient_error_catches_a_wrong_custom_gradient():
    @tf.custom_gradient
    def sin_with_wrong_gradient(x):
        return tf.sin(x), lambda upstream: upstream * tf.sin(x)  # should be cos

    x = np.linspace(-2.0, 2.0, 7)
    expected = np.max(np.abs(np.sin(x) - np.cos(x)))  # closed form of the mistake
    assert gradient_error(sin_with_wrong_gradient, x) == pytest.approx(expected, rel=1e-6)


def test_gradient_error_is_nan_when_autodiff_is_nan():
    assert np.isnan(gradient_error(lambda t: tf.norm(t, axis=-1), np.zeros((1, 3))))


def test_default_delta_is_power_of_two_near_cube_root_of_eps():
    assert default_delta(tf.float64) == 2.0**-17
    assert default_delta("float32") == 2.0**-8
    assert default_delta(np.float16) == 2.0**-3
    with pytest.raises(TypeError, match="dtype"):
        default_delta(tf.int32)


@pytest.mark.parametrize(
    ("fn", "x", "kwargs", "error", "match"),
    [
        ("not callable", np.ones(3), {}, TypeError, "fn: expected a callable"),
        (
            tf.sin,
            np.arange(3, dtype=np.int64),
            {},
            TypeError,
            "x: expected float16, .* got dtype int64",
        ),
        (tf.sin, tf.constant([1, 2]), {}, TypeError, "x: expected float16"),
        (tf.sin, np.zeros(0), {}, ValueError, "x: expected at least one element"),
        (tf.sin, np.ones(3), {"delta": 0.0}, ValueError, "delta"),
        (tf.sin, np.ones(3), {"delta": float("inf")}, ValueError, "delta"),
    ],
)
def test_gradient_error_rejects_bad_input(fn, x, kwargs, error, match):
    with pytest.raises(error, match=match):
        gradient_error(fn, x, **kwargs)


# --- numerical fixes --------------------------------------------------------------------


def test_safe_norm_gradient_is_finite_at_zero_where_builtin_is_nan():
    x = np.array([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]])
    y, grad = value_and_grad(safe_norm, x)
    _, builtin_grad = value_and_grad(lambda t: tf.norm(t, axis=-1), x)
    assert np.isnan(builtin_grad[0]).all()
    np.testing.assert_array_equal(grad[0], [0.0, 0.0, 0.0])
    np.testing.assert_allclose(grad[1], [0.6, 0.8, 0.0], rtol=1e-12)
    np.testing.assert_allclose(y, [0.0, 5.0], rtol=1e-12)


@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_safe_norm_matches_builtin_away_from_zero(axis):
    x = np.random.default_rng(2).normal(size=(2, 3, 4))
    y, grad = value_and_grad(lambda t: safe_norm(t, axis=axis), x)
    ref_y, ref_grad = value_and_grad(lambda t: tf.norm(t, axis=axis), x)
    np.testing.assert_allclose(y, ref_y, rtol=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-12)
    assert gradient_error(lambda t: safe_norm(t, axis=axis), x[:1]) < 1e-8


def test_safe_norm_rejects_bad_input():
    with pytest.raises(TypeError, match="axis: expected an int"):
        safe_norm(np.ones((2, 2)), axis=1.0)
    with pytest.raises(ValueError, match=r"axis: expected an int in \[-2, 2\)"):
        safe_norm(np.ones((2, 2)), axis=2)
    with pytest.raises(ValueError, match="x: expected a tensor of rank >= 1"):
        safe_norm(3.0)
    with pytest.raises(TypeError, match="x: expected a floating-point"):
        safe_norm(np.ones((2, 2), np.int32))


def test_log1p_exp_is_finite_where_naive_formula_is_not():
    x = np.array([-200.0, -100.0, 0.0, 100.0, 200.0], np.float32)
    y, grad = value_and_grad(log1p_exp, x)
    _, naive_grad = value_and_grad(lambda t: tf.math.log(1.0 + tf.exp(t)), x)
    assert np.isnan(naive_grad[-2:]).all()
    assert np.isfinite(y).all() and np.isfinite(grad).all()
    np.testing.assert_allclose(y, tf.nn.softplus(x).numpy(), rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(grad, tf.sigmoid(x).numpy(), rtol=1e-6, atol=1e-30)
    assert grad[2] == 0.5  # sigmoid(0); autodiff through max/abs gives 1 here


def test_log1p_exp_matches_builtin_and_finite_differences():
    x = np.linspace(-30.0, 30.0, 13)
    y, grad = value_and_grad(log1p_exp, x)
    ref_y, ref_grad = value_and_grad(tf.nn.softplus, x)
    np.testing.assert_allclose(y, ref_y, rtol=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-12)
    assert gradient_error(log1p_exp, x) < 1e-8
    assert gradient_error(log1p_exp, np.array([0.0])) < 1e-8


def test_log1p_exp_rejects_integer_input():
    with pytest.raises(TypeError, match="x: expected a floating-point tensor"):
        log1p_exp([1, 2])


def test_value_and_gradient_against_closed_forms_and_none_for_flat_ops():
    from companion.gradients import value_and_gradient

    x = np.linspace(-2.0, 2.0, 9)
    value, gradient = value_and_gradient(tf.sin, x)
    np.testing.assert_allclose(value, np.sin(x), rtol=1e-15)
    np.testing.assert_allclose(gradient, np.cos(x), rtol=1e-15)
    assert value.dtype == np.float64
    assert value_and_gradient(tf.round, x)[1] is None
    with pytest.raises(TypeError, match="^x: expected a floating-point tensor"):
        value_and_gradient(tf.sin, np.arange(3))
    with pytest.raises(TypeError, match="^fn: expected a callable"):
        value_and_gradient(None, x)


# --- issue 16: bounds and parameters checked against x's dtype, messages name them ---


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize(
    "make",
    [np.array, tf.constant, lambda v: keras.Variable(v, dtype="float32")],
    ids=["numpy", "tensor", "keras.Variable"],
)
def test_array_bounds_must_be_below_each_other_element_wise(make, graph):
    # Used to be accepted: tf.clip_by_value then returns clip_max where clip_min > clip_max.
    clip_min, clip_max = make([0.0, 2.0, -1.0]), make([1.0, 1.0, 1.0])
    x = tf.constant([0.5, 0.5, 0.5])
    fn = tf.function(clipped_identity) if graph else clipped_identity
    error = (ValueError, tf.errors.InvalidArgumentError) if graph else ValueError
    with pytest.raises(error, match=r"clip_min: expected values below clip_max.* element-wise"):
        fn(x, clip_min, clip_max)


@pytest.mark.parametrize(
    "bound, error, match",
    [
        (
            np.array([np.nan, 0.0, 0.0]),
            ValueError,
            r"^clip_min: expected finite values that float32 holds, got ",
        ),
        (
            np.array([-1e300, 0.0, 0.0]),
            ValueError,
            r"^clip_min: expected finite values that float32 holds, got ",
        ),
        (
            -1e300,
            ValueError,
            r"^clip_min: expected a finite number >= -3.40282e\+38 and <= 3.40282e\+38, got ",
        ),
        (
            np.ones((2, 2)),
            ValueError,
            r"^clip_min: expected a number or a tensor broadcasting to x's shape \(2, 3\)",
        ),
        (
            np.ones((4, 2, 3)),
            ValueError,
            r"^clip_min: expected a number or a tensor broadcasting to x's shape",
        ),
        (
            np.array(["a", "b", "c"]),
            TypeError,
            r"^clip_min: expected a number or a real-valued tensor, got dtype",
        ),
        ([0.0, 0.0, 0.0], TypeError, r"^clip_min: expected a finite number or a tensor, got list "),
    ],
)
def test_bad_bounds_are_named(bound, error, match):
    with pytest.raises(error, match=match):
        clipped_identity(np.zeros((2, 3), "float32"), bound, 1e30)


def test_leak_must_fit_in_x_dtype():
    x = tf.constant([2.0])
    with pytest.raises(
        ValueError,
        match=r"^leak: expected a finite number >= 0 and <= 3.40282e\+38, got float 1e\+300$",
    ):
        clipped_identity(x, leak=1e300)
    assert clipped_identity(tf.constant([2.0], tf.float64), leak=1e300).numpy().tolist() == [1.0]
    with pytest.raises(ValueError, match=r"^leak: .*<= 65504"):
        clipped_identity(tf.constant([2.0], tf.float16), leak=1e5)


def test_layer_parameters_must_fit_in_its_compute_dtype():
    with pytest.raises(
        ValueError,
        match=r"^clip_max: expected a finite number >= -3.40282e\+38 and <= 3.40282e\+38",
    ):
        ClippedIdentity(0.0, 1e300)
    with pytest.raises(
        ValueError, match=r"^leak: expected a finite number >= 0 and <= 65504, got float 100000.0$"
    ):
        ClippedIdentity(leak=1e5, dtype="mixed_float16")


@pytest.mark.parametrize("inputs", [None, "abc", {}, [None], np.array([1, 2])])
def test_layer_call_names_its_inputs(inputs):
    # Keras used to rewrite the message ("Exception encountered when calling ...") or refuse
    # the value itself ("Only input tensors may be passed as positional arguments").
    with pytest.raises(TypeError, match=r"^inputs: expected a floating-point tensor"):
        ClippedIdentity()(inputs)


@pytest.mark.parametrize("dtype", [None, 1, "3", "", "int32", tf.int32, np.int64, object()])
def test_default_delta_names_a_bad_dtype(dtype):
    # tf.as_dtype(1) is float32 (an enum value) and tf.as_dtype(None) raised TF's own TypeError.
    with pytest.raises(
        TypeError,
        match=r"^dtype: expected float16, float32 or float64 \(a name, NumPy or TensorFlow"
        r" dtype\), got ",
    ):
        default_delta(dtype)


@pytest.mark.parametrize("x", [None, "abc", {"a": 1}, [None], [[1.0], [1.0, 2.0]]])
def test_gradient_error_and_value_and_gradient_name_a_bad_x(x):
    with pytest.raises(TypeError, match=r"^x: expected float16, float32 or float64 values, got "):
        gradient_error(tf.sin, x)
    with pytest.raises(TypeError, match=r"^x: expected a floating-point tensor"):
        value_and_gradient(tf.sin, x)


def test_gradient_error_delta_must_fit_in_x_dtype():
    with pytest.raises(
        ValueError, match=r"^delta: expected a finite number > 0 and <= 3.40282e\+38"
    ):
        gradient_error(tf.sin, np.ones(3, "float32"), delta=1e300)
    with pytest.raises(TypeError, match=r"^fn: expected a callable taking one tensor, got int 3$"):
        gradient_error(3, np.ones(3))


# --- gradient_penalty (issue 20: nested tapes) ------------------------------------------


def _tanh_critic(weights):
    return lambda x: tf.reduce_sum(tf.tanh(tf.matmul(x, weights)), axis=1)


def test_gradient_penalty_of_a_linear_critic_is_the_closed_form():
    # A linear critic has the same gradient w everywhere: penalty (||w|| - 1)**2.
    rng = np.random.default_rng(0)
    w = rng.normal(size=(2, 3))
    real, fake = rng.normal(size=(5, 2, 3)), rng.normal(size=(5, 2, 3))

    def critic(x):
        return tf.reduce_sum(x * w, axis=[1, 2])

    expected = (np.linalg.norm(w) - 1.0) ** 2
    for alpha in [None, 0.0, 1.0, rng.uniform(size=5)]:
        assert float(gradient_penalty(critic, real, fake, alpha)) == pytest.approx(expected)


def test_gradient_penalty_of_a_quadratic_critic_against_numpy():
    # critic(x) = sum(x**2): gradient 2 x_hat, so the penalty is mean((2 ||x_hat|| - 1)**2).
    rng = np.random.default_rng(1)
    real, fake, alpha = rng.normal(size=(6, 4)), rng.normal(size=(6, 4)), rng.uniform(size=6)
    x_hat = alpha[:, None] * real + (1 - alpha[:, None]) * fake
    expected = np.mean((2 * np.linalg.norm(x_hat, axis=1) - 1) ** 2)
    penalty = gradient_penalty(lambda x: tf.reduce_sum(x**2, axis=1), real, fake, alpha)
    assert penalty.dtype == tf.float64
    assert float(penalty) == pytest.approx(expected, rel=1e-12)


def test_gradient_penalty_weight_gradient_matches_finite_differences():
    # The gradient of a gradient (the nested tape) against central differences in float64.
    rng = np.random.default_rng(2)
    real, fake, alpha = rng.normal(size=(5, 3)), rng.normal(size=(5, 3)), rng.uniform(size=5)
    weights = rng.normal(size=(3, 4))
    error = gradient_error(lambda w: gradient_penalty(_tanh_critic(w), real, fake, alpha), weights)
    assert error < 1e-8


def test_gradient_penalty_gives_zero_not_nan_where_the_critic_is_flat():
    # A ReLU critic that is dead at every x_hat: gradient 0, penalty 1, weight gradient 0.
    real = np.abs(np.random.default_rng(3).normal(size=(4, 3)))
    weights = tf.Variable(-np.ones((3, 2)))
    with tf.GradientTape() as tape:
        penalty = gradient_penalty(
            lambda x: tf.reduce_sum(tf.nn.relu(x @ weights), axis=1), real, real, 0.5
        )
    assert float(penalty) == 1.0
    np.testing.assert_array_equal(tape.gradient(penalty, weights), np.zeros((3, 2)))


def test_gradient_penalty_seed_repeats_and_graph_equals_eager():
    rng = np.random.default_rng(4)
    real, fake = rng.normal(size=(8, 3)), rng.normal(size=(8, 3))
    critic = _tanh_critic(tf.constant(rng.normal(size=(3, 2))))
    first = gradient_penalty(critic, real, fake, seed=7)
    assert float(first) == float(gradient_penalty(critic, real, fake, seed=7))
    assert float(first) != float(gradient_penalty(critic, real, fake, seed=8))
    graph = tf.function(lambda r, f: gradient_penalty(critic, r, f, seed=7))
    assert float(graph(real, fake)) == pytest.approx(float(first), rel=1e-12)
    unknown_batch = tf.function(
        lambda r, f: gradient_penalty(critic, r, f, tf.fill(tf.shape(r)[:1], 0.5)),
        input_signature=[tf.TensorSpec([None, 3], tf.float64)] * 2,
    )
    expected = gradient_penalty(critic, real, fake, 0.5)
    assert float(unknown_batch(real, fake)) == pytest.approx(float(expected), rel=1e-12)


def test_gradient_penalty_trains_a_keras_critic_towards_unit_gradient_norm():
    keras.utils.set_random_seed(0)
    critic = keras.Sequential(
        [keras.Input((2,)), keras.layers.Dense(16, "tanh"), keras.layers.Dense(1)]
    )
    real = np.random.default_rng(5).normal(size=(64, 2)).astype("float32")
    fake = real + 3.0
    optimizer = keras.optimizers.Adam(0.01)

    def penalty():
        return gradient_penalty(critic, real, fake, seed=0)

    before = float(penalty())
    for _ in range(50):
        with tf.GradientTape() as tape:
            loss = penalty()
        grads = tape.gradient(loss, critic.trainable_variables)
        # The output bias shifts every score equally: the input gradient, and so the
        # penalty, does not depend on it.
        assert [g is None for g in grads] == [False, False, False, True]
        grads, variables = grads[:3], critic.trainable_variables[:3]
        optimizer.apply_gradients(zip(grads, variables))
    assert float(penalty()) < 0.1 * before


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"critic": None}, TypeError, r"^critic: expected a callable"),
        ({"real": 1.0, "fake": 1.0}, ValueError, r"^real: expected a tensor of rank >= 1"),
        (
            {"real": np.zeros((0, 2)), "fake": np.zeros((0, 2))},
            ValueError,
            r"^real: expected at least one example",
        ),
        ({"real": np.ones((4, 2), "int32")}, TypeError, r"^real: expected a floating-point"),
        ({"fake": np.ones((4, 3))}, ValueError, r"^fake: expected real's shape \(4, 2\)"),
        ({"fake": np.ones((4, 2), "float32")}, TypeError, r"^fake: expected dtype float64"),
        ({"alpha": 1.5}, ValueError, r"^alpha: expected a finite number >= 0 and <= 1"),
        ({"alpha": np.full(3, 0.5)}, ValueError, r"^alpha: expected None, .* got shape \(3,\)"),
        ({"alpha": np.array([0.5, 0.5, 0.5, 2.0])}, ValueError, r"^alpha: expected None, "),
        ({"alpha": np.ones(4, "int64")}, TypeError, r"^alpha: .* got dtype int64"),
        ({"seed": -1}, ValueError, r"^seed: expected an int >= 0"),
        ({"seed": 1.5}, TypeError, r"^seed: expected an int"),
        (
            {"critic": lambda x: tf.zeros(tf.shape(x)[:1], x.dtype)},
            ValueError,
            r"^critic: expected a score that depends on its input",
        ),
    ],
)
def test_gradient_penalty_rejects_bad_input(kwargs, error, match):
    arguments = {
        "critic": lambda x: tf.reduce_sum(x, axis=1),
        "real": np.ones((4, 2)),
        "fake": np.zeros((4, 2)),
        **kwargs,
    }
    with pytest.raises(error, match=match):
        gradient_penalty(**arguments)


@pytest.mark.parametrize(
    ("clip_min", "clip_max", "named"),
    [(-1.0, -5.0, "clip_max"), (0.0, -1.0, "clip_max"), (5.0, 1.0, "clip_min")],
)
def test_bounds_in_the_wrong_order_name_the_bound_out_of_place(clip_min, clip_max, named):
    # Used to name clip_min whatever was wrong: clip_max=-5 beside the default clip_min too.
    for make in (
        lambda: clipped_identity(tf.ones(2), clip_min=clip_min, clip_max=clip_max),
        lambda: ClippedIdentity(clip_min=clip_min, clip_max=clip_max),
    ):
        with pytest.raises(ValueError, match=rf"^{named}: expected values (above|below) "):
            make()
