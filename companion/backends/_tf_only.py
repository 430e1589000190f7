"""One probe per TensorFlow-only customisation: on TensorFlow it runs the original, elsewhere
the replacement; each checks the numbers and returns the table's cell for that backend."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from companion.backends._autodiff import gradient
from companion.backends._probes import TF_ONLY, UNCHANGED

_BACKEND = keras.backend.backend()
#: The py_function row's JAX cell, after "TF-only → use ".
PURE_CALLBACK = "jax.pure_callback, in a jax.custom_vjp for its gradient"
#: The compiled-op row's cells after "TF-only → use ".
COMPILED_OP = {
    "jax": "a C++ handler through the XLA FFI, or Pallas (interpret=True on a CPU)",
    "torch": "a C++ op registered with torch.library (TORCH_LIBRARY, register_autograd)",
}


def _close(got: object, expected: object, bound: float, what: str) -> None:
    gap = float(np.max(np.abs(np.asarray(got, "float64") - np.asarray(expected, "float64"))))
    if not gap <= bound:
        raise AssertionError(f"{what}: max |difference| {gap:.3g} > {bound:g}")


def _cube_root(x: np.ndarray) -> np.ndarray:
    """A NumPy function no backend can trace: the one the py_function row calls."""
    return np.cbrt(x).astype("float32")


def probe_py_function() -> str:
    """A NumPy function inside compiled code: ``tf.py_function`` in a ``tf.function``, else
    ``jax.pure_callback`` in ``jax.jit``, else the plain call in eager PyTorch. On JAX the
    callback has no gradient (``jax.grad`` raises ValueError); ``jax.custom_vjp`` gives it
    d cbrt(x)/dx = 1 / (3 cbrt(x)^2), checked within 1e-6."""
    x = np.array([-8.0, 1.0, 27.0], "float32")
    if _BACKEND == "tensorflow":
        import tensorflow as tf

        graph = tf.function(lambda t: tf.py_function(_cube_root, [t], tf.float32))
        _close(graph(x), [-2, 1, 3], 1e-6, "tf.py_function")
        return UNCHANGED
    if _BACKEND == "jax":
        import jax

        shape = jax.ShapeDtypeStruct(x.shape, x.dtype)

        def callback(t):
            return jax.pure_callback(_cube_root, shape, t)

        _close(jax.jit(callback)(x), [-2, 1, 3], 1e-6, "jax.pure_callback")
        try:
            gradient(callback, x)
        except ValueError:  # "Pure callbacks do not support JVP"
            pass
        else:
            raise AssertionError("jax.pure_callback gave a gradient")
        cube_root = jax.custom_vjp(callback)
        cube_root.defvjp(lambda t: (callback(t), callback(t)), lambda y, up: (up / (3 * y * y),))
        _close(gradient(cube_root, x), [1 / 12, 1 / 3, 1 / 27], 1e-6, "jax.custom_vjp")
        return TF_ONLY + PURE_CALLBACK
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
    """Chapter 13's compiled blur against ``cv2.GaussianBlur`` within 1e-5, borders included: the
    TensorFlow op; on JAX a C++ handler through the XLA FFI and a Pallas kernel in interpret
    mode, on the CPU; on PyTorch the operator ``white_box::blur`` registered with
    ``torch.library``, whose gradient is checked as well (``probe_torch_op``)."""
    import cv2

    images = np.random.default_rng(0).uniform(size=(2, 16, 16, 3)).astype("float32")
    reference = np.stack([cv2.GaussianBlur(image, (5, 5), 0) for image in images])
    if _BACKEND == "tensorflow":
        from companion.kernels import cpp_blur

        _close(cpp_blur(images, 5), reference, 1e-5, "cpp_blur")
        return UNCHANGED
    if _BACKEND == "jax":
        from companion.backends._jax_blur import ffi_blur, pallas_blur

        _close(ffi_blur(images, 5), reference, 1e-5, "XLA FFI")
        _close(pallas_blur(images, 5), reference, 1e-5, "Pallas, interpret=True")
        return TF_ONLY + COMPILED_OP["jax"]
    from companion.backends._torch_blur import probe_torch_op, torch_blur

    _close(torch_blur(images, 5), reference, 1e-5, "torch extension")
    probe_torch_op(images, reference)
    return TF_ONLY + COMPILED_OP["torch"]
