"""The ``tf.distribute`` row: two replicas on one CPU against one device, on each backend."""

from __future__ import annotations

import os

import keras
import numpy as np

from companion.backends._ddp import ddp_replicas
from companion.backends._probes import TF_ONLY, UNCHANGED
from companion.backends._runner import run_on_backend
from companion.backends._steps import step_data, step_model

_BACKEND = keras.backend.backend()
#: Two JAX devices on one CPU: XLA splits the host before JAX starts.
TWO_HOST_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
#: Set ("1") in the fresh process ``probe_distribute`` starts when this one cannot split its
#: devices: that process starts no other (one relaunch at most).
RELAUNCHED = "WHITE_BOX_TF_RELAUNCHED"


def _fitted_weights() -> list[np.ndarray]:
    x, y = step_data()
    model = step_model(custom_step=False)
    model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    return model.get_weights()


def _tensorflow_replicas() -> list[np.ndarray] | None:
    """The weights after ``fit`` under ``MirroredStrategy`` on two logical CPUs (None when
    TensorFlow already runs with one, and this must run in a fresh process)."""
    import tensorflow as tf

    from companion.devices import split_cpu

    try:
        split_cpu(2)
    except RuntimeError:
        return None
    with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
        return _fitted_weights()


def _jax_replicas() -> list[np.ndarray] | None:
    """The weights after ``fit`` under ``keras.distribution.DataParallel`` on two host devices
    (None when JAX runs with one, and this must run in a fresh process). The host's devices are
    ``list_devices("cpu")``: ``list_devices()`` lists the default platform, one GPU on a one-GPU
    runtime whatever ``TWO_HOST_DEVICES`` says."""
    devices = keras.distribution.list_devices("cpu")
    if len(devices) < 2:
        return None
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices[:2]))
    try:
        return _fitted_weights()
    finally:
        keras.distribution.set_distribution(None)


def _one_device_weights() -> list[np.ndarray]:
    """The weights after ``fit`` on one device: the host's first, where the replicas run. A GPU
    runtime's default device is its GPU, whose sums differ in the last bits."""
    if _BACKEND == "jax":
        cpu = keras.distribution.list_devices("cpu")[0]
    else:  # TensorFlow's first logical CPU (split_cpu's), gloo's CPU
        cpu = "/cpu:0" if _BACKEND == "tensorflow" else "cpu"
    with keras.device(cpu):
        return _fitted_weights()


def _relaunched() -> str:
    """``probe_distribute`` in a fresh process with ``TWO_HOST_DEVICES``; in such a process,
    a RuntimeError instead (it would start the next one, and that one the next)."""
    if os.environ.get(RELAUNCHED) == "1":
        raise RuntimeError(
            f"devices: expected two host devices in a process started with {TWO_HOST_DEVICES}, "
            f"got fewer (XLA_FLAGS={os.environ.get('XLA_FLAGS')!r})"
        )
    return run_on_backend(probe_distribute, _BACKEND, env={**TWO_HOST_DEVICES, RELAUNCHED: "1"})


def probe_distribute() -> str:
    """``fit`` on two replicas reaches the weights of one device within 1e-6 (float32 sums in
    another order): ``tf.distribute.MirroredStrategy``, or ``keras.distribution.DataParallel``
    on two JAX host devices, or ``DistributedDataParallel`` over two PyTorch processes (gloo)."""
    replicas = {"tensorflow": _tensorflow_replicas, "jax": _jax_replicas, "torch": ddp_replicas}[
        _BACKEND
    ]()
    if replicas is None:  # the devices cannot be split in this process: a fresh one can
        return _relaunched()
    for two, one in zip(replicas, _one_device_weights()):
        gap = float(np.max(np.abs(two - one)))
        if not gap <= 1e-6:
            raise AssertionError(f"two replicas against one: max |difference| {gap:.3g}")
    return {
        "tensorflow": UNCHANGED,
        "jax": TF_ONLY + "keras.distribution.DataParallel",
        "torch": TF_ONLY + "torch DistributedDataParallel, gloo (Keras has no torch distribution)",
    }[_BACKEND]
