"""Chapter 14's children on a GPU runtime, shown on a CPU: each pins what ``setup()`` pins
(TF32 off, GPU memory taken as needed) and says which device it ran on; JAX and PyTorch with
their device lists patched to one GPU; the ``tf.distribute`` row's JAX probe on a one-GPU
runtime (host devices, one relaunch at most); a backend that is not installed, in one line.

The children run the same on every backend this file runs under (``make test``,
``make test-colab``, ``make test-backends``).
"""

import importlib.util

import keras
import pytest

from companion._backend import BACKEND_NAMES, BACKENDS
from companion.backends import BACKEND_ENV, EXPECTED, run_on_backend
from companion.backends._distribute import TWO_HOST_DEVICES
from companion.devices import PINNED, STAND_IN_VARIABLE, runtime_line

BACKEND = keras.backend.backend()
INSTALLED = [b for b in BACKENDS if importlib.util.find_spec(b) is not None]
MISSING = [b for b in BACKENDS if b not in INSTALLED]
DEVICES = ("CPU", "GPU", "GPU stand-in")


def pins_seen():
    """In a child: whether TF32 is on for float32, and JAX's preallocation setting."""
    import os

    import keras

    seen = {"preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")}
    running = keras.backend.backend()
    if running == "jax":
        import jax

        seen["tf32"] = jax.config.jax_default_matmul_precision not in ("highest", "float32")
    elif running == "torch":
        import torch

        seen["tf32"] = torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32
    else:
        import tensorflow as tf

        seen["tf32"] = tf.config.experimental.tensor_float_32_execution_enabled()
    return seen


@pytest.mark.parametrize("backend", INSTALLED)
def test_every_child_turns_tf32_off_keeps_gpu_memory_free_and_says_where_it_ran(backend, capsys):
    # JAX's matmuls and PyTorch's cuDNN convolutions default to TF32 on an A100 or L4; JAX
    # takes 75% of the GPU's memory at its first array unless told not to
    env = {STAND_IN_VARIABLE: "1"}  # as under make test-colab
    seen = run_on_backend(pins_seen, backend, env=env, verbose=True)
    assert seen == {"tf32": False, "preallocate": "false" if backend == "jax" else None}
    assert BACKEND_ENV["jax"]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    said = capsys.readouterr().out.splitlines()
    name = BACKEND_NAMES[backend]
    lines = {f"{name} child {runtime_line({'backend': backend, 'device': d})}" for d in DEVICES}
    assert len(said) == 1 and said[0] in lines, said
    if backend != "torch":  # PyTorch's Keras makes no choice by device: no stand-in there
        assert said[0].endswith("under the GPU stand-in (Keras chooses as on a GPU)"), said


def pinned_on_one_gpu():
    """In a child: ``pin_runtime`` with the backend's device list patched to one GPU and its
    TF32 flags at their defaults."""
    import os
    import types

    import keras

    from companion.devices import pin_runtime, runtime_line

    if keras.backend.backend() == "jax":
        import jax

        host = jax.devices("cpu")
        gpu = types.SimpleNamespace(platform="gpu", id=0)
        jax.devices = lambda backend=None: host if backend == "cpu" else [gpu]
        jax.config.update("jax_default_matmul_precision", None)  # TF32 on an A100
        del os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"]
        before = jax.config.jax_default_matmul_precision
        info = pin_runtime()
        after = jax.config.jax_default_matmul_precision
    else:
        import torch

        torch.cuda.device_count = lambda: 1
        torch.backends.cudnn.allow_tf32 = True  # PyTorch's default
        before = torch.backends.cudnn.allow_tf32
        info = pin_runtime()
        after = torch.backends.cudnn.allow_tf32
    return {
        "device": info["device"],
        "tf32": info["tf32"],
        "precision": [before, after],
        "preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
        "line": runtime_line(info),
    }


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_on_one_gpu_a_child_pins_full_float32_and_says_so(backend):
    if backend not in INSTALLED:
        pytest.skip(f"{backend} is not installed here")
    found = run_on_backend(pinned_on_one_gpu, backend)
    assert found["device"] == "GPU" and found["tf32"] is False
    if backend == "jax":
        assert found["precision"] == [None, "highest"] and found["preallocate"] == "false"
        assert found["line"] == "ran on the GPU: " + PINNED["jax"]
    else:
        assert found["precision"] == [True, False]
        assert found["line"].startswith("ran on the GPU: TF32 off for matmuls and cuDNN")


def relaunches_on_one_gpu():
    """In a JAX child whose host is one device: ``probe_distribute`` with Keras's device list
    patched to one GPU, and its fresh process run in this one (with its environment), so that
    the relaunch sees what the first process saw. Returns the relaunches and the error."""
    import os

    import keras

    from companion.backends import _distribute

    listed = keras.distribution.list_devices
    keras.distribution.list_devices = lambda t=None: ["gpu:0"] if t in (None, "gpu") else listed(t)
    launched = []

    def in_this_process(function, backend, env=None, **kwargs):
        launched.append(sorted(env or {}))
        os.environ.update(env or {})  # too late for XLA_FLAGS: JAX has started
        return function()

    _distribute.run_on_backend = in_this_process
    try:
        return {"launched": launched, "cell": _distribute.probe_distribute(), "error": None}
    except RuntimeError as error:
        return {"launched": launched, "error": f"{type(error).__name__}: {error}"}


def test_the_jax_distribute_probe_relaunches_once_at_most_on_one_gpu():
    if "jax" not in INSTALLED:
        pytest.skip("jax is not installed here")
    found = run_on_backend(relaunches_on_one_gpu, "jax")
    assert found["launched"] == [["WHITE_BOX_TF_RELAUNCHED", "XLA_FLAGS"]], len(found["launched"])
    assert found["error"].startswith("RuntimeError: devices: expected two host devices")


def distribute_under_the_stand_in():
    """In a JAX child under the GPU stand-in: Keras's device list, and the distribute row."""
    import keras

    from companion.backends._distribute import probe_distribute

    return {"listed": keras.distribution.list_devices(), "cell": probe_distribute()}


def test_the_jax_distribute_probe_runs_on_host_devices_under_the_stand_in(capsys):
    if "jax" not in INSTALLED:
        pytest.skip("jax is not installed here")
    env = {STAND_IN_VARIABLE: "1", **TWO_HOST_DEVICES}
    found = run_on_backend(distribute_under_the_stand_in, "jax", env=env, verbose=True)
    assert found == {"listed": ["gpu:0"], "cell": EXPECTED["tf.distribute"]["jax"]}
    assert "under the GPU stand-in" in capsys.readouterr().out


def test_a_backend_that_is_not_installed_is_named_in_one_line(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "torch" else find_spec(name, *a),
    )
    with pytest.raises(ModuleNotFoundError) as raised:
        run_on_backend(pins_seen, "torch")
    message = str(raised.value)
    assert message.startswith("backend: PyTorch is not installed in this Python (")
    assert message.endswith("); install it with: pip install torch") and "\n" not in message


@pytest.mark.skipif(not MISSING, reason="every backend is installed in this Python")
def test_each_backend_missing_here_is_named_in_one_line():
    for backend in MISSING:  # TensorFlow under make test-backends
        with pytest.raises(ModuleNotFoundError, match=rf"pip install {backend}$") as raised:
            run_on_backend(pins_seen, backend)
        assert "\n" not in str(raised.value) and raised.value.name == backend
