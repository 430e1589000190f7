"""The Gaussian blur as a compiled C++ TensorFlow op: load, gradient, Keras layer.

Beyond the four paths of chapters 2-5: ``_kernels/blur_op.cc`` (shipped inside the package)
defines the ops ``GaussianBlur`` and ``GaussianBlurGrad`` (its adjoint) with CPU kernels, and
``companion._kernels`` beside it builds them (``build_blur_op``: compiler, flags, a cache keyed
by TensorFlow, compiler, flags and source, manifests; its names are re-exported here).
``load_blur_op`` loads the library (``tf.load_op_library``) and registers the gradient;
``cpp_blur`` and the ``CppGaussianBlur`` layer use it and compute what ``cv2.GaussianBlur`` and
``companion.pyfunc.native_blur`` compute.

``python -m companion.kernels`` builds the library ahead of time and prints where it is.

Backends: TensorFlow only (on JAX use the XLA FFI or Pallas; on PyTorch use a torch.library op).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import keras

from companion._backend import require_tensorflow

require_tensorflow(
    "companion.kernels",
    {
        "jax": "a C++ function through the XLA FFI (jax.ffi), or Pallas (interpret=True on a CPU)",
        "torch": "a C++ operator registered with torch.library (TORCH_LIBRARY, register_autograd)",
    },
)


import tensorflow as tf  # noqa: E402

from companion._checks import check_odd_int, check_real, float_tensor  # noqa: E402
from companion._kernels import (  # noqa: E402
    BUILD_FLAGS,
    LIBRARY,
    MANIFEST,
    SOURCE,
    BuildError,
    build_blur_op,
    build_command,
    build_key,
    cache_root,
    compiler,
    main,
    source_section,
    tensorflow_flags,
)
from companion.pyfunc import MAX_KSIZE, GaussianBlur, gaussian_kernel  # noqa: E402

__all__ = [
    # the build system, defined in the private companion._kernels
    "BUILD_FLAGS",
    "LIBRARY",
    "MANIFEST",
    "SOURCE",
    "BuildError",
    "build_blur_op",
    "build_command",
    "build_key",
    "cache_root",
    "compiler",
    "main",
    "source_section",
    "tensorflow_flags",
    # the op, its gradient and its layer, defined here
    "OP_NAMES",
    "CppGaussianBlur",
    "cpp_blur",
    "load_blur_op",
]

#: Op names registered by the library (and the gradient registered for each).
OP_NAMES = ("GaussianBlur", "GaussianBlurGrad")


@functools.cache
def load_blur_op() -> Any:
    """Build (if needed) and load the op library once per process; register its gradients.

    Returns:
        The module ``tf.load_op_library`` returns, with the generated Python wrappers
        ``gaussian_blur(images, kernel)`` and ``gaussian_blur_grad(upstream, kernel)``.

    Raises:
        BuildError: As ``build_blur_op``, or if TensorFlow cannot load the library (not cached: a
            later call tries again).

    Example:
        >>> op = load_blur_op()
        >>> op.gaussian_blur(tf.ones([1, 4, 4, 1]), tf.constant([0.25, 0.5, 0.25])).shape
        TensorShape([1, 4, 4, 1])

    Taught in chapter 13, "load_blur_op and cpp_blur: the tested version".
    """
    library = build_blur_op()
    try:
        module = tf.load_op_library(str(library))
    except tf.errors.NotFoundError as error:  # intact as built, yet unloadable: not a library
        raise BuildError(
            f"{library}: TensorFlow cannot load it ({error.message.strip()[:300]}); delete "
            f"{library.parent} to rebuild it, or check the compiler"
        ) from None
    if not hasattr(module, "gaussian_blur_grad"):  # TensorFlow kept the ops registered first
        raise BuildError(
            f"{library}: its ops {OP_NAMES} are already registered in this process by another "
            "library (a hand-built blur_op.so?); load only one, e.g. in a fresh process"
        )
    _register_gradients(module)
    return module


def _register_gradients(module: Any) -> None:
    """The gradient of each op is the other op: the blur and its adjoint transpose each
    other."""
    adjoint = {
        "GaussianBlur": module.gaussian_blur_grad,
        "GaussianBlurGrad": module.gaussian_blur,
    }
    for name, transpose in adjoint.items():

        def gradient(
            op: tf.Operation, upstream: tf.Tensor, transpose: Any = transpose
        ) -> list[Any]:
            # no gradient for the kernel weights
            return [transpose(upstream, op.inputs[1]), None]

        try:
            tf.RegisterGradient(name)(gradient)
        except KeyError:  # registered already (the module was imported twice)
            pass


#: The image dtypes ``cpp_blur`` takes -> the dtype the op computes in. The op's kernels are
#: float32/float64; half-precision images are blurred in float32 (see ``cpp_blur``).
_COMPUTE_DTYPES = {
    tf.float16: tf.float32,
    tf.bfloat16: tf.float32,
    tf.float32: tf.float32,
    tf.float64: tf.float64,
}


@functools.lru_cache(maxsize=64)
def _weights(ksize: int, sigma: float) -> Any:
    """``gaussian_kernel(ksize, sigma)``, computed once per (ksize, sigma) and read-only."""
    weights = gaussian_kernel(ksize, sigma)
    weights.flags.writeable = False
    return weights


@functools.lru_cache(maxsize=64)
def _eager_weights(ksize: int, sigma: float, dtype: tf.DType) -> tf.Tensor:
    """The weights as an eager constant in host memory, built once per (ksize, sigma, dtype)."""
    with tf.device("/CPU:0"):  # where the op's kernels run: no copy per call
        return tf.constant(_weights(ksize, sigma), dtype)


def _kernel_tensor(ksize: int, sigma: float, dtype: tf.DType) -> tf.Tensor:
    """The op's ``kernel`` input. Eager constants are cached; a graph (``tf.function``,
    ``tf.data``) gets a constant of its own, since a tensor from one graph cannot enter another."""
    if tf.executing_eagerly():
        return _eager_weights(ksize, sigma, dtype)
    return tf.constant(_weights(ksize, sigma), dtype)


def _check_images(dtype: tf.DType, shape: tf.TensorShape, name: str, ksize: int) -> None:
    """The project's error, naming ``name``, unless images of ``dtype`` and ``shape`` can be blurred
    with ``ksize`` (unknown dimensions pass: the op checks them when it runs)."""
    if dtype not in _COMPUTE_DTYPES:
        raise TypeError(
            f"{name}: expected dtype float16, bfloat16, float32 or float64 (cast other images "
            f"first), got dtype {dtype.name}"
        )
    if shape.rank not in (3, 4):
        raise ValueError(f"{name}: expected rank 3 (H, W, C) or 4 (N, H, W, C), got shape {shape}")
    if any(d is not None and d <= ksize // 2 for d in tuple(shape)[-3:-1]):
        raise ValueError(
            f"{name}: expected height and width > ksize // 2 = {ksize // 2} for reflect "
            f"padding, got shape {shape}"
        )


def _images_tensor(images: Any, name: str, ksize: int) -> tf.Tensor:
    """``images`` as a tensor, checked by ``_check_images``."""
    tensor = float_tensor(images, name)
    _check_images(tensor.dtype, tensor.shape, name, ksize)
    return tensor


def cpp_blur(images: Any, ksize: int = 5, sigma: float = 0.0) -> tf.Tensor:
    """Gaussian blur with the compiled ``GaussianBlur`` op, equal to ``cv2.GaussianBlur``.

    Same kernel (``companion.pyfunc.gaussian_kernel``, passed to the op as a tensor) and border
    (``BORDER_REFLECT_101``) as OpenCV and ``native_blur``. Works eagerly, in ``tf.function``,
    in ``tf.data`` and in Keras layers (also under the ``mixed_float16`` policy), on the CPU;
    differentiable (the gradient is the ``GaussianBlurGrad`` op). The first call in a process
    loads the library (``load_blur_op``), compiling it if this TensorFlow has no cached build
    yet. Each call does little Python work: the kernel weights are computed once per
    ``(ksize, sigma)`` and, when executing eagerly, kept as a tensor.

    ``float16`` and ``bfloat16`` images are cast to ``float32``, blurred and cast back, rather
    than blurred by half-precision kernels: the sums of ``ksize**2`` products then round once,
    at the end, instead of at every step (float16 keeps 11 bits, bfloat16 8), a CPU computes
    half-precision arithmetic in float32 anyway, and the casts' gradient is automatic.

    Args:
        images: Float tensor or array ``(H, W, C)`` or a batch ``(N, H, W, C)``, dtype
            float16, bfloat16, float32 or float64; height and width must exceed ``ksize // 2``.
        ksize: Kernel size, a positive odd int.
        sigma: Standard deviation, >= 0 (0 = OpenCV's rule).

    Returns:
        The blurred tensor, same shape and dtype as ``images``.

    Raises:
        TypeError: If ``images`` is not a float tensor or array of those dtypes, or ``ksize`` /
            ``sigma`` have the wrong type.
        ValueError: If the rank is not 3 or 4, the image is smaller than ``ksize // 2 + 1``
            pixels, or ``ksize`` / ``sigma`` are out of range.
        BuildError: If the op library cannot be built.

    Example:
        >>> import numpy as np
        >>> cpp_blur(np.ones((1, 8, 8, 3), np.float32)).shape
        TensorShape([1, 8, 8, 3])
        >>> cpp_blur(np.ones((8, 8, 3), np.float16)).dtype
        tf.float16

    Taught in chapter 13, "load_blur_op and cpp_blur: the tested version".
    """
    ksize = check_odd_int(ksize, "ksize", maximum=MAX_KSIZE)
    sigma = check_real(sigma, "sigma", minimum=0)  # 0 selects OpenCV's rule
    images = _images_tensor(images, "images", ksize)
    dtype, rank = images.dtype, images.shape.rank
    compute_dtype = _COMPUTE_DTYPES[dtype]
    half = compute_dtype != dtype
    batch = images if rank == 4 else tf.expand_dims(images, 0)
    if half:
        batch = tf.cast(batch, compute_dtype)
    blurred = load_blur_op().gaussian_blur(batch, _kernel_tensor(ksize, sigma, compute_dtype))
    if half:
        blurred = tf.cast(blurred, dtype)
    return blurred if rank == 4 else tf.squeeze(blurred, 0)


@keras.saving.register_keras_serializable(package="companion")
class CppGaussianBlur(GaussianBlur):
    """Keras layer that blurs NHWC images with the compiled op (``cpp_blur``; no weights).

    ``companion.pyfunc.GaussianBlur`` with another blur: same arguments, checks and config.
    Saves to ``.keras`` like any registered layer (loading imports ``companion.kernels``, which
    loads the library). A SavedModel exported from a model with this layer contains the
    ``GaussianBlur`` op: the process that serves it must call ``load_blur_op()`` (or
    ``tf.load_op_library`` on the library) before loading it, and TFLite cannot run it.

    The layer sets ``supports_jit = False``: the op has no XLA kernel, and ``compile()``'s
    default ``jit_compile="auto"`` turns XLA on whenever a GPU is visible unless some layer
    says so; ``fit`` would then fail (``No registered 'GaussianBlur' OpKernel for XLA_GPU_JIT
    devices``). Under ``mixed_float16`` it blurs float16 inputs in float32 (see ``cpp_blur``).

    Args:
        ksize: Kernel size, a positive odd int.
        sigma: Standard deviation, >= 0 (0 = OpenCV's rule).
        **kwargs: Base layer arguments (``name``, ``dtype``, ...).

    Raises:
        TypeError, ValueError: As ``cpp_blur``, at construction for ``ksize`` / ``sigma``
            and at call time for the images (named ``inputs``).

    Example:
        >>> import numpy as np
        >>> layer = CppGaussianBlur(ksize=3)
        >>> layer(np.ones((2, 8, 8, 3), np.float32)).shape, layer.supports_jit
        (TensorShape([2, 8, 8, 3]), False)

    Taught in chapter 13, "load_blur_op and cpp_blur: the tested version".
    """

    def __init__(self, ksize: int = 5, sigma: float = 0.0, **kwargs: Any) -> None:
        super().__init__(ksize, sigma, **kwargs)
        self.supports_jit = False  # keeps model.compile()'s jit_compile="auto" off XLA

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """Check ``inputs`` before Keras converts them (its errors would not name them)."""
        if isinstance(inputs, keras.KerasTensor):  # a functional model's symbolic input
            _check_images(
                tf.as_dtype(inputs.dtype), tf.TensorShape(inputs.shape), "inputs", self.ksize
            )
        else:
            inputs = _images_tensor(inputs, "inputs", self.ksize)
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return cpp_blur(inputs, self.ksize, self.sigma)


if __name__ == "__main__":
    sys.exit(main())
