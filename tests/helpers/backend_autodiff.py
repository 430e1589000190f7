"""The gradient of ``sum(fn(x))`` with the running Keras backend's own autodiff, for the portable
tests (``tests/portable/``): ``tf.GradientTape``, ``jax.grad`` or ``torch.autograd``.

TensorFlow, JAX and torch are imported inside the function: the portable tests import this
file under every backend, also where TensorFlow is not installed.
"""

import keras
import numpy as np


def gradient_of_sum(fn, x):
    """``d sum(fn(x)) / dx`` at ``x`` (an array), as a NumPy array."""
    backend = keras.backend.backend()
    x = keras.ops.convert_to_tensor(x)
    if backend == "jax":
        import jax

        return np.asarray(jax.grad(lambda v: keras.ops.sum(fn(v)))(x))
    if backend == "torch":
        x = x.detach().clone().requires_grad_(True)
        keras.ops.sum(fn(x)).backward()
        return x.grad.cpu().numpy()
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch(x)
        total = tf.reduce_sum(fn(x))
    return tape.gradient(total, x).numpy()


def float64_exists():
    """False on JAX without ``jax_enable_x64``: there, float64 inputs become float32."""
    return keras.backend.standardize_dtype(keras.ops.ones((), "float64").dtype) == "float64"
