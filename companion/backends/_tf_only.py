"""One probe per TensorFlow-only customisation: on TensorFlow it runs the original, elsewhere
the replacement; each checks the numbers and returns the table's cell for that backend."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from companion.backends._autodiff import gradient
from companion.backends._probes import TF_ONLY, UNCHANGED

_BACKEND = keras.backend.backend()


def _close(got: object, expected: object, bound: float, what: str) -> None:
    gap = float(np.max(np.abs(np.asarray(got, "float64") - np.asarray(expected, "float64"))))
    if not gap <= bound:
        raise AssertionError(f"{what}: max |difference| {gap:.3g} > {bound:g}")


def _cube_root(x: np.ndarray) -> np.ndarray:
    """A NumPy function no backend can trace: the one the py_function row calls."""
    return np.cbrt(x).astype("float32")


def probe_py_function() -> str:
    """A NumPy function inside compiled code: ``tf.py_function`` in a ``tf.function``, else
    ``jax.pure_callback`` in ``jax.jit``, else the plain call in eager PyTorch."""
    x = np.array([-8.0, 1.0, 27.0], "float32")
    if _BACKEND == "tensorflow":
        import tensorflow as tf

        graph = tf.function(lambda t: tf.py_function(_cube_root, [t], tf.float32))
        _close(graph(x), [-2, 1, 3], 1e-6, "tf.py_function")
        return UNCHANGED
    if _BACKEND == "jax":
        import jax

        shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
        jitted = jax.jit(lambda t: jax.pure_callback(_cube_root, shape, t))
        _close(jitted(x), [-2, 1, 3], 1e-6, "jax.pure_callback")
        return TF_ONLY + "jax.pure_callback"
    _close(_cube_root(ops.convert_to_numpy(ops.convert_to_tensor(x))), [-2, 1, 3], 1e-6, "eager")
    return TF_ONLY + "the Python function, called in eager code"


def probe_tf_custom_gradient() -> str:
    """A clipped gradient for x**2 (the upstream times 2x, clipped to [-1, 1]): with
    ``tf.custom_gradient``, ``jax.custom_vjp`` or ``torch.autograd.Function``."""
    x = np.array([-2.0, 0.25, 3.0], "float32")
    expected = np.clip(2 * x, -1, 1)
    if _BACKEND == "tensorflow":
        import tensorflow as tf

        @tf.custom_gradient
        def square(t):
            return t * t, lambda upstream: tf.clip_by_value(upstream * 2 * t, -1.0, 1.0)

        _close(gradient(square, x), expected, 1e-6, "tf.custom_gradient")
        return UNCHANGED
    if _BACKEND == "jax":
        import jax
        import jax.numpy as jnp

        square = jax.custom_vjp(lambda t: t * t)
        square.defvjp(
            lambda t: (t * t, t), lambda t, upstream: (jnp.clip(upstream * 2 * t, -1, 1),)
        )
        _close(gradient(square, x), expected, 1e-6, "jax.custom_vjp")
        return TF_ONLY + "keras.ops.custom_gradient or jax.custom_vjp"
    import torch

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(context, t):
            context.save_for_backward(t)
            return t * t

        @staticmethod
        def backward(context, upstream):
            (t,) = context.saved_tensors
            return torch.clamp(upstream * 2 * t, -1, 1)

    _close(gradient(Square.apply, x), expected, 1e-6, "torch.autograd.Function")
    return TF_ONLY + "keras.ops.custom_gradient or torch.autograd.Function"


def probe_compiled_op() -> str:
    """Chapter 13's compiled blur against ``cv2.GaussianBlur``: the TensorFlow op, a PyTorch C++
    extension; on JAX the replacement (Pallas, the XLA FFI) is argued, not run."""
    if _BACKEND == "jax":
        return TF_ONLY + "Pallas or the XLA FFI (argued: Pallas needs a GPU or a TPU)"
    import cv2

    images = np.random.default_rng(0).uniform(size=(2, 16, 16, 3)).astype("float32")
    reference = np.stack([cv2.GaussianBlur(image, (5, 5), 0) for image in images])
    if _BACKEND == "tensorflow":
        from companion.kernels import cpp_blur

        _close(cpp_blur(images, 5), reference, 1e-5, "cpp_blur")
        return UNCHANGED
    from companion.backends._torch_blur import torch_blur

    _close(torch_blur(images, 5), reference, 1e-5, "torch extension")
    return TF_ONLY + "a C++ extension (torch.utils.cpp_extension)"
