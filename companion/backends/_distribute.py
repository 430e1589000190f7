"""The ``tf.distribute`` row: two replicas on one CPU against one device, on each backend."""

from __future__ import annotations

import keras
import numpy as np

from companion.backends._ddp import ddp_replicas
from companion.backends._probes import TF_ONLY, UNCHANGED
from companion.backends._runner import run_on_backend
from companion.backends._steps import step_data, step_model

_BACKEND = keras.backend.backend()
#: Two JAX devices on one CPU: XLA splits the host before JAX starts.
TWO_HOST_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


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
    (None when JAX runs with one device, and this must run in a fresh process)."""
    devices = keras.distribution.list_devices()
    if len(devices) < 2:
        return None
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices[:2]))
    try:
        return _fitted_weights()
    finally:
        keras.distribution.set_distribution(None)


def probe_distribute() -> str:
    """``fit`` on two replicas reaches the weights of one device within 1e-6 (float32 sums in
    another order): ``tf.distribute.MirroredStrategy``, or ``keras.distribution.DataParallel``
    on two JAX host devices, or ``DistributedDataParallel`` over two PyTorch processes (gloo)."""
    replicas = {"tensorflow": _tensorflow_replicas, "jax": _jax_replicas, "torch": ddp_replicas}[
        _BACKEND
    ]()
    if replicas is None:  # the devices cannot be split in this process: a fresh one can
        return run_on_backend(probe_distribute, _BACKEND, env=TWO_HOST_DEVICES)
    for two, one in zip(replicas, _fitted_weights()):
        gap = float(np.max(np.abs(two - one)))
        if not gap <= 1e-6:
            raise AssertionError(f"two replicas against one: max |difference| {gap:.3g}")
    return {
        "tensorflow": UNCHANGED,
        "jax": TF_ONLY + "keras.distribution.DataParallel",
        "torch": TF_ONLY + "torch DistributedDataParallel, gloo (Keras has no torch distribution)",
    }[_BACKEND]
