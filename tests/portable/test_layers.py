"""``companion.layers`` on the running backend: build, fit, a ``.keras`` round trip loaded in a
fresh process (``check_roundtrip``, which gives the child the same backend), and the seeded noise
layer over the whole seed range ``check_seed`` allows."""

import keras
import numpy as np
import pytest

from companion.diagnostics import check_roundtrip
from companion.layers import AdditiveGaussianNoise, CustomDense, ResidualBlock, fresh_initializer


def as_numpy(x):
    return keras.ops.convert_to_numpy(x)


def small_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((4,)),
            CustomDense(8, activation="relu"),
            AdditiveGaussianNoise(0.1, seed=3),
            ResidualBlock(6, hidden_units=5),
            CustomDense(1),
        ]
    )


def test_the_layers_build_fit_and_reload_in_a_fresh_process():
    model = small_model()
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    history = model.fit(x, x[:, :1], epochs=2, batch_size=8, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    report = check_roundtrip(model, x[:4], fresh_process=True)
    assert report.ok, str(report)


# check_seed allows 0 to 2**32 - 1; PyTorch keeps seed state in int32, where 2**31 and above
# failed ("value cannot be converted to type int32 without overflow").
@pytest.mark.parametrize("seed", [0, 2**31 - 1, 2**31, 2**32 - 1])
def test_the_noise_layer_takes_every_seed_and_repeats_its_noise(seed):
    x = np.zeros((4, 5), "float32")
    first = as_numpy(AdditiveGaussianNoise(1.0, seed=seed)(x, training=True))
    again = as_numpy(AdditiveGaussianNoise(1.0, seed=seed)(x, training=True))
    assert np.all(np.isfinite(first)) and np.array_equal(first, again)
    assert not np.array_equal(first, x)
    assert np.array_equal(as_numpy(AdditiveGaussianNoise(1.0, seed=seed)(x)), x)  # inference
    assert AdditiveGaussianNoise(1.0, seed=seed).get_config()["seed"] == seed


def test_seeds_from_two_to_the_31_give_noise_of_their_own():
    x = np.zeros((4, 5), "float32")
    draws = [as_numpy(AdditiveGaussianNoise(1.0, seed=s)(x, training=True)) for s in (1, 2**31 + 1)]
    assert not np.array_equal(draws[0], draws[1])


def test_custom_dense_computes_x_times_kernel_plus_bias():
    layer = CustomDense(2, kernel_initializer="ones", bias_initializer="ones")
    x = np.array([[1.0, 2.0, 3.0]], "float32")
    assert as_numpy(layer(x)).tolist() == [[7.0, 7.0]]


def test_fresh_initializer_gives_each_sublayer_its_own_repeatable_kernel():
    seeded = keras.initializers.GlorotUniform(seed=5)
    first, second = fresh_initializer(seeded, 0), fresh_initializer(seeded, 1)
    assert not np.array_equal(as_numpy(first((3, 3))), as_numpy(second((3, 3))))
    assert np.array_equal(as_numpy(first((3, 3))), as_numpy(fresh_initializer(seeded, 0)((3, 3))))
