"""``companion.timing`` on the running backend: results fetched as NumPy, device strings."""

import time

import keras
import numpy as np
import pytest

from companion.timing import compare, default_device, fetch, time_call


def test_fetch_copies_every_backend_tensor_and_variable_to_numpy():
    variable = keras.Variable([1.0, 2.0])
    # On torch a Variable requires grad: ``.numpy()`` would fail, ``convert_to_numpy`` does not.
    fetched = fetch({"a": keras.ops.ones((2,)) * 3, "b": [variable, 7, "text"]})
    assert isinstance(fetched["a"], np.ndarray) and isinstance(fetched["b"][0], np.ndarray)
    np.testing.assert_array_equal(fetched["a"], [3.0, 3.0])
    np.testing.assert_array_equal(fetched["b"][0], [1.0, 2.0])
    assert fetched["b"][1:] == [7, "text"]


def test_a_keras_op_is_timed_on_the_default_device():
    x = keras.ops.ones((64, 64))
    results = []

    def step():
        results.append(keras.ops.matmul(x, x))
        return results[-1]

    timing = time_call(step, repeats=3, warmup=1, device=default_device())
    assert timing.device == default_device() and timing.repeats == 3 and len(results) == 4
    assert 0 < timing.best <= timing.median and np.isfinite(timing.median)


def test_the_default_device_is_spelled_for_the_running_backend():
    spelled = {"tensorflow": ("/CPU:0", "/GPU:0"), "jax": ("cpu:0", "gpu:0")}
    assert default_device() in spelled.get(keras.backend.backend(), ("cpu:0", "gpu:0"))


@pytest.mark.parametrize("device", ["/CPU:0", "cpu:0", "CPU", "/cpu:0"])
def test_one_cpu_device_string_serves_every_backend(device):
    timings = compare({"ones": lambda: keras.ops.ones((4,))}, repeats=2, device=device)
    assert timings["ones"].device == device and timings["ones"].repeats == 2


@pytest.mark.parametrize("device", ["/TPU:7", "/CPU:99"])
def test_a_device_the_backend_lacks_is_refused_naming_the_argument(device):
    with pytest.raises(
        ValueError, match=f"^device: expected one of the devices .*got str '{device}'$"
    ):
        time_call(abs, 1, device=device)
    with pytest.raises(
        ValueError, match="^device: expected a device string such as '/GPU:0', got str 'no such'$"
    ):
        time_call(abs, 1, device="no such")
    with pytest.raises(
        TypeError, match="^device: expected a device string such as '/CPU:0', got int 0$"
    ):
        time_call(abs, 1, device=0)


def test_a_sleep_lasts_at_least_its_nominal_time():
    timing = time_call(time.sleep, 0.002, repeats=3, warmup=0)
    assert timing.best >= 0.002
