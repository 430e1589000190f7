"""What the training tests share: a loss, small regression data and a ``fit`` around it, a
dataset of one constant input per batch, and the ``mixed_float16`` policy for a block."""

import contextlib

import keras
import numpy as np
import tensorflow as tf

from companion.training import fit


def crossentropy(**kwargs):
    return keras.losses.SparseCategoricalCrossentropy(**kwargs)


def constant_data(value, steps, targets=None):
    targets = (
        np.zeros((steps, 1), "float32")
        if targets is None
        else np.array(targets, "float32").reshape(-1, 1)
    )
    return tf.data.Dataset.from_tensor_slices(
        (np.full((steps, 1), value, "float32"), targets)
    ).batch(1)


def regression_data(n=8, batch=4, targets=None):
    x = np.random.default_rng(0).normal(size=(n, 2)).astype("float32")
    y = (
        np.ones((n, 1), "float32")
        if targets is None
        else np.asarray(targets, "float32").reshape(n, 1)
    )
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def fit_regression(model, data, **kwargs):
    kwargs = {
        "optimizer": keras.optimizers.SGD(0.1),
        "loss": keras.losses.MeanSquaredError(),
        "progress": False,
    } | kwargs
    return fit(model, data, **kwargs)


@contextlib.contextmanager
def mixed_float16():
    """The dtype policy ``mixed_float16`` within the block (float16 compute, float32 variables)."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)
