"""``companion.notebook``'s set-up: seeds, the runtime report, memory growth on a GPU runtime."""

import numpy as np
import pytest

from companion.devices import gpu_available
from companion.notebook import in_colab, setup


def tiny_fit_weights(seed):
    import keras

    setup(seed, verbose=False)
    x = np.random.normal(size=(64, 4)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    return model.get_weights()


def test_setup_makes_two_tiny_fits_identical():
    first, second = tiny_fit_weights(7), tiny_fit_weights(7)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_different_seeds_give_different_fits():
    first, second = tiny_fit_weights(1), tiny_fit_weights(2)
    assert any(not np.array_equal(a, b) for a, b in zip(first, second))


def test_setup_reports_runtime(capsys):
    info = setup(3)
    printed = capsys.readouterr().out
    assert info["tensorflow"] in printed and info["keras"] in printed
    assert info["device"] == ("GPU" if gpu_available() else "CPU")
    assert info["colab"] is in_colab() is False
    assert info["seed"] == 3


@pytest.mark.parametrize(
    "seed, error", [(-1, ValueError), (1.5, TypeError), ("1", TypeError), (True, TypeError)]
)
def test_setup_rejects_bad_seed(seed, error):
    with pytest.raises(error, match="seed"):
        setup(seed)


def test_setup_refuses_a_seed_above_32_bits_with_its_own_message():
    assert setup(2**32 - 1, verbose=False)["seed"] == 2**32 - 1
    with pytest.raises(
        ValueError, match=r"^seed: expected an int >= 0 and <= 4294967295, got int 1000000000000$"
    ):
        setup(10**12)


@pytest.mark.parametrize("verbose", ["no", 0, None])
def test_setup_verbose_is_a_bool(verbose, capsys):
    with pytest.raises(
        TypeError, match=rf"^verbose: expected a bool, got {type(verbose).__name__} "
    ):
        setup(0, verbose=verbose)
    assert capsys.readouterr().out == ""  # refused before anything was printed


def test_setup_turns_on_memory_growth_for_every_gpu(monkeypatch):
    import tensorflow as tf

    gpus = [
        tf.config.PhysicalDevice(name=f"/physical_device:GPU:{index}", device_type="GPU")
        for index in range(2)
    ]
    calls = []
    real_list = tf.config.list_physical_devices
    monkeypatch.setattr(
        tf.config,
        "list_physical_devices",
        lambda kind=None: gpus if kind == "GPU" else real_list(kind),
    )
    monkeypatch.setattr(
        tf.config.experimental,
        "set_memory_growth",
        lambda device, enable: calls.append((device.name, enable)),
    )
    info = setup(0, verbose=False)
    assert calls == [(g.name, True) for g in gpus]
    assert info["gpu_memory_growth"] == [g.name for g in gpus] and info["device"] == "GPU"
