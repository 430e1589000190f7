import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from companion.layers import AdditiveGaussianNoise, CustomDense, ResidualBlock, fresh_initializer


def _inputs(shape=(5, 4), seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _copy_weights_into_keras_dense(layer, x, **dense_kwargs):
    """A keras.layers.Dense holding exactly `layer`'s weights."""
    reference = keras.layers.Dense(layer.units, **dense_kwargs)
    reference.build(x.shape)
    reference.set_weights(layer.get_weights())
    return reference


# ---------------------------------------------------------------- CustomDense vs Dense


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"use_bias": False}, {"activation": "relu"}, {"activation": "tanh", "use_bias": False}],
)
def test_custom_dense_equals_keras_dense_with_same_weights(kwargs):
    x = _inputs()
    layer = CustomDense(3, bias_initializer="random_normal", **kwargs)
    layer(x)
    reference = _copy_weights_into_keras_dense(layer, x, **kwargs)
    assert len(layer.weights) == (2 if kwargs.get("use_bias", True) else 1)
    np.testing.assert_allclose(layer(x), reference(x), rtol=0, atol=1e-6)


def test_custom_dense_works_on_rank3_inputs_like_dense():
    x = _inputs((2, 3, 4))
    layer = CustomDense(6, activation="sigmoid")
    out = layer(x)
    reference = _copy_weights_into_keras_dense(layer, x, activation="sigmoid")
    assert tuple(out.shape) == (2, 3, 6) == layer.compute_output_shape((2, 3, 4))
    np.testing.assert_allclose(out, reference(x), atol=1e-6)


def test_custom_dense_regularizer_loss_matches_keras_dense():
    x = _inputs()
    layer = CustomDense(
        3,
        kernel_regularizer=keras.regularizers.L2(0.01),
        bias_regularizer="l1",
        bias_initializer="random_normal",
    )
    layer(x)
    reference = _copy_weights_into_keras_dense(
        layer, x, kernel_regularizer=keras.regularizers.L2(0.01), bias_regularizer="l1"
    )
    kernel, bias = layer.get_weights()
    closed_form = 0.01 * np.sum(kernel**2) + 0.01 * np.sum(np.abs(bias))  # "l1" default is 0.01
    assert len(layer.losses) == 2
    np.testing.assert_allclose(sum(float(v) for v in layer.losses), closed_form, rtol=1e-5)
    np.testing.assert_allclose(
        sum(float(v) for v in layer.losses), sum(float(v) for v in reference.losses), rtol=1e-6
    )


def test_custom_dense_gradients_match_keras_dense():
    import tensorflow as tf

    x = _inputs()
    layer = CustomDense(3, activation="relu", bias_initializer="random_normal")
    layer(x)
    reference = _copy_weights_into_keras_dense(layer, x, activation="relu")
    grads = []
    for lay in (layer, reference):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(lay(x) ** 2)
        grads.append(tape.gradient(loss, lay.trainable_weights))
    for mine, theirs in zip(*grads):
        np.testing.assert_allclose(mine, theirs, atol=1e-5)


def test_custom_dense_weights_created_in_build_only():
    layer = CustomDense(3)
    assert layer.weights == [] and not layer.built
    layer(_inputs())
    assert layer.built
    assert [tuple(w.shape) for w in layer.weights] == [(4, 3), (3,)]


# ---------------------------------------------------------------- AdditiveGaussianNoise


def test_noise_is_identity_in_inference():
    x = _inputs((64, 8))
    noise = AdditiveGaussianNoise(0.7, seed=3)
    np.testing.assert_array_equal(noise(x), x)
    np.testing.assert_array_equal(noise(x, training=False), x)


def test_noise_has_the_right_statistics_in_training():
    x = np.full((400, 250), 2.0, "float32")
    stddev = 0.5
    out = np.asarray(AdditiveGaussianNoise(stddev, seed=1)(x, training=True))
    noise = out - x
    n = noise.size
    # 5-sigma bounds from the sampling distributions of the mean and of the std.
    assert abs(noise.mean()) < 5 * stddev / np.sqrt(n)
    assert abs(noise.std() - stddev) < 5 * stddev / np.sqrt(2 * n)
    assert (noise != 0).mean() > 0.999


def test_noise_is_seeded_and_advances():
    x = np.zeros((3, 4), "float32")
    a, b = AdditiveGaussianNoise(1.0, seed=7), AdditiveGaussianNoise(1.0, seed=7)
    first_a, first_b = a(x, training=True), b(x, training=True)
    np.testing.assert_array_equal(first_a, first_b)
    second_a = a(x, training=True)
    assert not np.array_equal(first_a, second_a)
    np.testing.assert_array_equal(second_a, b(x, training=True))
    assert not np.array_equal(first_a, AdditiveGaussianNoise(1.0, seed=8)(x, training=True))


def test_noise_layer_in_a_model_follows_fit_and_predict_modes():
    x = _inputs((16, 4))
    model = keras.Sequential([keras.Input((4,)), AdditiveGaussianNoise(1.0, seed=0)])
    np.testing.assert_array_equal(model.predict(x, verbose=0), x)
    assert not np.allclose(model(x, training=True), x)


# ---------------------------------------------------------------- ResidualBlock


def _relu(v):
    return np.maximum(v, 0.0)


@pytest.mark.parametrize("in_dim, units, hidden", [(4, 6, 8), (6, 6, 3)])
def test_residual_block_matches_manual_computation(in_dim, units, hidden):
    x = _inputs((5, in_dim))
    block = ResidualBlock(units, hidden_units=hidden)
    block.build(x.shape)
    rng = np.random.default_rng(1)
    block.set_weights([rng.normal(size=w.shape).astype("float32") for w in block.weights])
    out = np.asarray(block(x))

    w1, b1 = block.hidden.get_weights()
    w2, b2 = block.output_dense.get_weights()
    shortcut = x if in_dim == units else x @ block.projection.get_weights()[0]
    expected = _relu(x @ w1 + b1) @ w2 + b2 + shortcut
    assert (block.projection is None) == (in_dim == units)
    assert out.shape == (5, units) == tuple(block.compute_output_shape(x.shape))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_residual_block_weights_exist_after_build():
    block = ResidualBlock(6, hidden_units=8)
    assert block.weights == []
    block.build((None, 4))
    shapes = sorted(tuple(w.shape) for w in block.weights)
    assert shapes == sorted([(4, 8), (8,), (8, 6), (6,), (4, 6)])


def _same_up_to_reshape(a, b):
    return a.size == b.size and np.array_equal(np.sort(a.ravel()), np.sort(b.ravel()))


@pytest.mark.parametrize(
    "initializer",
    [
        "glorot_uniform",
        keras.initializers.GlorotUniform(),
        {"class_name": "HeNormal", "config": {}},
    ],
)
def test_residual_block_sublayers_start_from_different_kernels(initializer):
    """Keras 3: an unseeded initializer instance fixes its seed when created; sharing repeats it."""
    block = ResidualBlock(8, hidden_units=8, kernel_initializer=initializer)
    block.build((None, 4))  # hidden (4, 8), output (8, 8), projection (4, 8)
    kernels = [
        np.asarray(layer.kernel) for layer in (block.hidden, block.output_dense, block.projection)
    ]
    for i, first in enumerate(kernels):
        for second in kernels[i + 1 :]:
            assert not _same_up_to_reshape(first, second)
    # a second block draws other values again
    other = ResidualBlock(8, hidden_units=8, kernel_initializer=initializer)
    other.build((None, 4))
    assert not np.array_equal(np.asarray(other.hidden.kernel), kernels[0])


def _block_kernels(**kwargs):
    block = ResidualBlock(8, hidden_units=8, **kwargs)
    block.build((None, 8))  # hidden (8, 8), output (8, 8): same shapes, no projection
    return [np.asarray(block.hidden.kernel), np.asarray(block.output_dense.kernel)]


def test_residual_block_with_a_seeded_initializer_differs_per_sublayer_and_repeats():
    """A clone keeps an int seed: the sublayers need seeds of their own, derived from it."""
    hidden, output = _block_kernels(kernel_initializer=keras.initializers.GlorotUniform(seed=3))
    assert not np.array_equal(hidden, output)
    again = _block_kernels(kernel_initializer=keras.initializers.GlorotUniform(seed=3))
    np.testing.assert_array_equal(again[0], hidden)  # same seed, same block: reproducible
    np.testing.assert_array_equal(again[1], output)
    neighbour = _block_kernels(kernel_initializer=keras.initializers.GlorotUniform(seed=4))
    for kernel in neighbour:  # the next block's seed must not replay this block's kernels
        assert not any(np.array_equal(kernel, mine) for mine in (hidden, output))


def test_residual_block_with_a_seed_generator_initializer_differs_per_sublayer():
    """A clone would restart the generator and repeat its values; the shared generator advances."""
    initializer = keras.initializers.GlorotUniform(seed=keras.random.SeedGenerator(5))
    hidden, output = _block_kernels(kernel_initializer=initializer)
    assert not np.array_equal(hidden, output)


class _UnregisteredInit(keras.initializers.Initializer):
    def __init__(self, stddev=0.1, seed=None):
        self.stddev, self.seed = stddev, seed

    def __call__(self, shape, dtype=None):
        return keras.random.normal(shape, stddev=self.stddev, dtype=dtype, seed=self.seed)

    def get_config(self):
        return {"stddev": self.stddev, "seed": self.seed}


def test_residual_block_accepts_unregistered_initializer_classes_and_functions():
    hidden, output = _block_kernels(kernel_initializer=_UnregisteredInit(0.5, seed=1))
    assert not np.array_equal(hidden, output)
    assert 0.3 < hidden.std() < 0.7

    def constant_init(shape, dtype=None):
        return keras.ops.full(shape, 0.25, dtype=dtype)

    for kernel in _block_kernels(kernel_initializer=constant_init):
        np.testing.assert_array_equal(kernel, np.full((8, 8), 0.25, "float32"))


def test_fresh_initializer_returns_own_instances_and_checks_index():
    shared = keras.initializers.HeNormal()
    first, second = fresh_initializer(shared, 0), fresh_initializer(shared, 1)
    assert type(first) is type(second) is keras.initializers.HeNormal
    assert first is not shared and second is not shared
    assert not np.array_equal(np.asarray(first((4, 4))), np.asarray(second((4, 4))))
    seeded = keras.initializers.RandomNormal(stddev=2.0, seed=7)
    clone = fresh_initializer(seeded, 2)
    assert (
        clone.get_config()["stddev"] == 2.0
        and clone.get_config()["seed"] == (7 * 1_000_003 + 2) % 2**31
    )
    np.testing.assert_array_equal(fresh_initializer(seeded, 2)((3,)), clone((3,)))
    assert fresh_initializer(keras.initializers.Zeros()).get_config() == {}
    with pytest.raises(ValueError, match="index: expected an int >= 0"):
        fresh_initializer(shared, -1)
    with pytest.raises(TypeError, match="index: expected an int >= 0"):
        fresh_initializer(shared, 1.0)


# ---------------------------------------------------------------- serialization


LAYERS = {
    "dense": lambda: CustomDense(
        3,
        activation="relu",
        bias_initializer="random_normal",
        kernel_regularizer=keras.regularizers.L2(1e-3),
    ),
    "dense_no_bias": lambda: CustomDense(3, use_bias=False),
    "noise": lambda: AdditiveGaussianNoise(0.3, seed=5),
    "residual": lambda: ResidualBlock(6, hidden_units=5, activation="gelu"),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_get_config_is_json_and_from_config_recreates(name):
    layer = LAYERS[name]()
    config = layer.get_config()
    restored_config = json.loads(json.dumps(config))
    clone = type(layer).from_config(restored_config)
    assert clone.get_config() == config
    x = _inputs()
    layer(x)
    clone(x)
    if layer.weights:
        clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(clone(x), layer(x), atol=1e-6)


def test_registered_names_are_in_the_companion_package():
    for cls in (CustomDense, AdditiveGaussianNoise, ResidualBlock):
        assert keras.saving.get_registered_name(cls) == f"companion>{cls.__name__}"


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("units", [0, -3])
def test_non_positive_units_raise_value_error(units):
    with pytest.raises(ValueError, match="units: expected an int >= 1"):
        CustomDense(units)
    with pytest.raises(ValueError, match="units"):
        ResidualBlock(units)


@pytest.mark.parametrize("units", [2.0, "3", True, None])
def test_non_int_units_raise_type_error(units):
    with pytest.raises(TypeError, match="units: expected an int >= 1"):
        CustomDense(units)


def test_hidden_units_validated():
    with pytest.raises(ValueError, match="hidden_units"):
        ResidualBlock(4, hidden_units=0)


def test_unknown_activation_raises_value_error():
    with pytest.raises(ValueError, match="activation: .*'relux'"):
        CustomDense(3, activation="relux")
    with pytest.raises(ValueError, match="activation"):
        ResidualBlock(3, activation="nope")


def test_an_unregistered_activation_keeps_keras_cause_when_reloaded(tmp_path):
    # Chapter 4 shows this cause; the argument check must not hide it.
    def scaled_tanh(x):
        return 2.0 * keras.ops.tanh(x)

    model = keras.Sequential([keras.Input((4,)), CustomDense(3, activation=scaled_tanh)])
    model.save(tmp_path / "m.keras")
    with pytest.raises(TypeError) as caught:
        keras.saving.load_model(tmp_path / "m.keras")
    message = str(caught.value)
    assert "activation: expected None, a callable or a Keras activation name" in message
    assert "Could not locate function 'scaled_tanh'" in message


def test_changed_input_width_after_build_raises_clear_error():
    layer = CustomDense(3)
    layer(_inputs((2, 4)))
    with pytest.raises(ValueError, match="expected axis -1 of input shape to have value 4"):
        layer(_inputs((2, 5)))


def test_rank1_and_undefined_width_inputs_are_rejected():
    with pytest.raises(ValueError, match="min_ndim=2"):
        CustomDense(3)(np.ones(4, "float32"))
    with pytest.raises(ValueError, match="input_shape: expected a defined last dimension"):
        CustomDense(3).build((None, None))


@pytest.mark.parametrize(
    "stddev, error", [(-0.1, ValueError), ("0.1", TypeError), (None, TypeError)]
)
def test_bad_stddev_raises(stddev, error):
    with pytest.raises(error, match="stddev"):
        AdditiveGaussianNoise(stddev)


def test_bad_seed_raises_type_error():
    with pytest.raises(
        TypeError, match=r"^seed: expected an int >= 0 and <= 4294967295 or None, got float 1.5$"
    ):
        AdditiveGaussianNoise(0.1, seed=1.5)


# -------------------------------------------------------- issue 16: empty batches, flags, ranges


def _run(fn, x, how):
    """``fn(x)`` eagerly, in a tf.function or compiled with XLA."""
    if how == "eager":
        return fn(x)
    return tf.function(fn, jit_compile=how == "xla")(tf.constant(x))


@pytest.mark.parametrize("how", ["eager", "tf.function", "xla"])
@pytest.mark.parametrize("name", ["noise", "residual", "residual_projected", "dense"])
def test_an_empty_batch_gives_an_empty_batch(name, how):
    # Keras's ops.add took a (0, 4) operand for a bias: "Biases must be 1D: [0,4]".
    layer, width = {
        "noise": (AdditiveGaussianNoise(0.5, seed=1), 4),
        "residual": (ResidualBlock(4), 4),
        "residual_projected": (ResidualBlock(6), 6),
        "dense": (CustomDense(3), 3),
    }[name]
    x = np.zeros((0, 4), "float32")
    out = _run(
        lambda inputs: layer(inputs, training=True) if name == "noise" else layer(inputs), x, how
    )
    assert tuple(out.shape) == (0, width)


def test_an_empty_batch_passes_a_model_with_these_layers_in_predict_on_batch():
    model = keras.Sequential(
        [keras.Input((4,)), AdditiveGaussianNoise(0.1), ResidualBlock(4), CustomDense(2)]
    )
    assert model.predict_on_batch(np.zeros((0, 4), "float32")).shape == (0, 2)


@pytest.mark.parametrize("use_bias", ["False", None, 0, 1, [], np.array([True])])
def test_use_bias_must_be_a_bool(use_bias):
    # "False" used to keep the bias and None, 0, [] to drop it.
    with pytest.raises(TypeError, match=r"^use_bias: expected a bool, got "):
        CustomDense(3, use_bias=use_bias)


def test_use_bias_takes_numpy_bools_and_stores_a_python_bool():
    layer = CustomDense(3, use_bias=np.bool_(False))
    assert layer.use_bias is False and layer.get_config()["use_bias"] is False


@pytest.mark.parametrize("training", ["False", 0, 1, "yes"])
def test_noise_training_flag_must_be_a_bool_or_none(training):
    # The string "False" is true: the layer used to add noise for it.
    with pytest.raises(TypeError, match=r"^training: expected a bool or None, got "):
        AdditiveGaussianNoise(1.0)(np.zeros((2, 3), "float32"), training=training)


def test_noise_stddev_must_fit_in_the_layers_compute_dtype():
    with pytest.raises(
        ValueError,
        match=r"^stddev: expected a finite number >= 0 and <= 3.40282e\+38, got float 1e\+300$",
    ):
        AdditiveGaussianNoise(1e300)
    assert AdditiveGaussianNoise(1e5).stddev == 1e5  # float32 holds it
    with pytest.raises(
        ValueError,
        match=r"^stddev: expected a finite number >= 0 and <= 65504, got float 100000.0$",
    ):
        AdditiveGaussianNoise(1e5, dtype="mixed_float16")
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        with pytest.raises(ValueError, match=r"^stddev: .* <= 65504"):
            AdditiveGaussianNoise(1e5)
        layer = AdditiveGaussianNoise(1e3, seed=0)
        assert np.isfinite(np.asarray(layer(np.zeros((4, 4), "float32"), training=True))).all()
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_noise_seed_has_a_maximum_and_takes_it():
    assert AdditiveGaussianNoise(0.1, seed=2**32 - 1).seed == 2**32 - 1
    with pytest.raises(
        ValueError,
        match=r"^seed: expected an int >= 0 and <= 4294967295 or None, got int 4294967296$",
    ):
        AdditiveGaussianNoise(0.1, seed=2**32)


@pytest.mark.parametrize("layer", [CustomDense, ResidualBlock])
def test_units_have_a_maximum(layer):
    with pytest.raises(
        ValueError, match=r"^units: expected an int >= 1 and <= 1048576, got int 1000000000000$"
    ):
        layer(10**12)


@pytest.mark.parametrize("argument", ["kernel_initializer", "bias_initializer"])
@pytest.mark.parametrize(
    "value, error",
    [(None, TypeError), (3, TypeError), ("glorot_unicorn", ValueError), ({"a": 1}, ValueError)],
)
def test_bad_initializers_are_named(argument, value, error):
    # None used to pass: Keras then gives the bias a Glorot initializer.
    with pytest.raises(error, match=rf"^{argument}: expected an initializer \(.*\), got "):
        CustomDense(3, **{argument: value})


@pytest.mark.parametrize(
    "value, error", [(3, TypeError), ("l3", ValueError), ({}, ValueError), (True, TypeError)]
)
def test_bad_regularizers_and_activations_are_named(value, error):
    with pytest.raises(
        error, match=r"^kernel_regularizer: expected None or a regularizer \(.*\), got "
    ):
        ResidualBlock(3, kernel_regularizer=value)
    with pytest.raises(
        error, match=r"^activation: expected None, a callable or a Keras activation name .*, got "
    ):
        CustomDense(3, activation=value)


@pytest.mark.parametrize("initializer", [None, "glorot_uniform", 3])
def test_fresh_initializer_wants_an_initializer_or_a_callable(initializer):
    with pytest.raises(
        TypeError,
        match=r"^initializer: expected a keras.initializers.Initializer or a callable, got ",
    ):
        fresh_initializer(initializer)


# ---------------------------------------------------------------- a dtype policy per layer


@pytest.mark.parametrize("units", [4, 5])  # the shortcut: identity, projection
def test_residual_block_passes_its_own_dtype_policy_to_its_sublayers(units):
    block = ResidualBlock(units, hidden_units=6, dtype="mixed_float16")
    out = block(_inputs())
    sublayers = [block.hidden, block.output_dense] + ([block.projection] if units == 5 else [])
    assert [layer.dtype_policy.name for layer in sublayers] == ["mixed_float16"] * len(sublayers)
    assert out.dtype == "float16"
    assert {w.dtype for w in block.weights} == {"float32"}
    reloaded = ResidualBlock.from_config(block.get_config())
    assert reloaded.hidden.dtype_policy.name == "mixed_float16"
