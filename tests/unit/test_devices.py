"""``companion.devices`` on a CPU-only machine: the real devices (GPU memory growth, the CPU split
into replicas), the device views and the GPU stand-in.

The stand-in and ``split_cpu`` change the whole process, so each test of them runs in a fresh
Python process.
"""

import json

import numpy as np
import pytest
import tensorflow as tf
from helpers.small_models import dense

from companion import devices, notebook
from companion.devices import (
    STAND_IN_VARIABLE,
    enable_gpu_memory_growth,
    gpu_available,
    gpu_stand_in_active,
    missing_xla_kernel,
    simulated_cpu_only,
    simulated_gpu,
    split_cpu,
)
from companion.notebook import run_python


def test_this_machine_lists_no_gpu_and_no_stand_in_is_active():
    # the tests below assume a CPU-only machine: on a GPU they would not show the stand-in
    assert not tf.config.list_physical_devices("GPU")
    assert not gpu_available() and not gpu_stand_in_active()


@pytest.mark.parametrize(
    "name", ["gpu_available", "enable_gpu_memory_growth", "split_cpu", "MAX_CPU_DEVICES"]
)
def test_the_device_helpers_have_one_home_that_notebook_re_exports(name):
    # chapters and README import them from companion.notebook; they are defined here only
    assert getattr(notebook, name) is getattr(devices, name)
    assert name in devices.__all__ and name not in notebook.__all__


def test_memory_growth_skips_a_gpu_that_is_already_initialised(monkeypatch):
    def refuse(device, enable):
        raise RuntimeError("Physical devices cannot be modified after being initialized")

    gpu = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [gpu])
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", refuse)
    assert enable_gpu_memory_growth() == []


def test_simulated_cpu_only_hides_a_gpu_from_compile():
    model = dense(3, 2, activation="relu")
    with simulated_gpu():
        model.compile(optimizer="sgd", loss="mse")
        assert model.jit_compile is True
        with simulated_cpu_only():
            assert tf.config.list_physical_devices("GPU") == []
            model.compile(optimizer="sgd", loss="mse")
        assert tf.config.list_physical_devices("GPU")  # restored on exit
    assert model.jit_compile is False
    assert tf.config.list_physical_devices("GPU") == []


def test_a_simulated_gpu_block_is_not_the_stand_in():
    with simulated_gpu():
        assert tf.config.list_physical_devices("GPU")
        assert not gpu_stand_in_active()


def test_simulated_cpu_only_restores_the_device_list_after_an_error():
    listed = tf.config.list_physical_devices
    with pytest.raises(RuntimeError, match="boom"), simulated_cpu_only():
        raise RuntimeError("boom")
    assert tf.config.list_physical_devices is listed


STAND_IN_PROBE = """
import json
import keras, numpy as np, tensorflow as tf
from companion.devices import gpu_stand_in_active
from companion.notebook import setup
from companion.timing import default_device

info = setup(verbose=False)
again = setup(verbose=False)  # a second setup: the stand-in's GPU is not TensorFlow's to grow
x = np.ones((4, 3), "float32")
compiled = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
compiled.compile(optimizer="sgd", loss="mse")
never_compiled = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
never_compiled.predict(x, verbose=0)
print(json.dumps({
    "device": info["device"],
    "again": again["device"],
    "tf32": info["tf32"],
    "active": gpu_stand_in_active(),
    "physical_gpus": len(tf.config.list_physical_devices("GPU")),
    "logical_gpus": len(tf.config.list_logical_devices("GPU")),
    "default_device": default_device(),
    "compile_jit": compiled.jit_compile,
    "predict_jit": never_compiled.jit_compile,
    "remapping": tf.config.optimizer.get_experimental_options().get("remapping"),
}))
"""


@pytest.mark.parametrize("requested", [True, False], ids=["stand-in", "plain"])
def test_setup_starts_the_stand_in_only_when_the_environment_asks(requested):
    env = {STAND_IN_VARIABLE: "1" if requested else "0"}
    child = run_python(STAND_IN_PROBE, env=env, timeout=240)
    assert child.returncode == 0, child.stderr[-2000:]
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    assert seen.pop("tf32") is False
    assert seen.pop("again") == seen["device"]
    if requested:
        assert seen == {
            "device": "GPU stand-in",
            "active": True,
            "physical_gpus": 1,
            "logical_gpus": 0,  # the ops run on the CPU
            "default_device": "/CPU:0",
            "compile_jit": True,  # Keras's GPU choice, at compile time
            "predict_jit": True,  # and at predict time for a model never compiled
            "remapping": False,  # no oneDNN fusions, as on a GPU
        }
    else:
        assert seen == {
            "device": "CPU",
            "active": False,
            "physical_gpus": 0,
            "logical_gpus": 0,
            "default_device": "/CPU:0",
            "compile_jit": False,
            "predict_jit": False,
            "remapping": None,
        }


def test_missing_xla_kernel_reads_the_op_from_a_real_xla_error_and_a_gpu_one():
    blur = tf.function(lambda x: tf.py_function(np.negative, [x], tf.float32), jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        blur(tf.ones((2,)))
    assert missing_xla_kernel(raised.value) == "EagerPyFunc"
    on_a_gpu = str(raised.value).replace("XLA_CPU_JIT", "XLA_GPU_JIT")
    assert "XLA_GPU_JIT" in on_a_gpu
    assert missing_xla_kernel(on_a_gpu) == "EagerPyFunc"
    assert missing_xla_kernel(ValueError("shapes differ")) is None


def test_split_cpu_gives_mirrored_strategy_two_replicas_in_a_fresh_process():
    result = run_python(
        "import tensorflow as tf\n"
        "from companion.devices import split_cpu\n"
        "names = split_cpu(2)\n"
        "assert split_cpu(2) == names  # a second call with the same number is harmless\n"
        "strategy = tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1'])\n"
        "print(len(names), strategy.num_replicas_in_sync)\n"
        "try:\n"
        "    split_cpu(3)\n"
        "except RuntimeError as error:\n"
        "    print(str(error).split(';')[0])\n"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    first, second = result.stdout.splitlines()[-2:]
    assert first == "2 2"
    assert second == "devices: TensorFlow already runs with 2 CPU device(s) and cannot switch to 3"


def test_split_cpu_rejects_bad_counts():
    with pytest.raises(ValueError, match="^devices: expected an int >= 1"):
        split_cpu(0)
    with pytest.raises(TypeError, match="^devices: expected an int >= 1"):
        split_cpu(2.0)


def test_split_cpu_refuses_a_huge_count_before_asking_tensorflow():
    with pytest.raises(
        ValueError, match=r"^devices: expected an int >= 1 and <= 256, got int 1000000000000$"
    ):
        split_cpu(10**12)
