"""Gaussian blur four ways: OpenCV, OpenCV behind ``tf.py_function`` or ``tf.numpy_function``,
and pure TensorFlow.

Chapter 3 uses them to show what wrapping Python costs. ``cv2_blur`` is the Python function;
``py_function_blur`` and ``numpy_function_blur`` run it inside a TensorFlow graph (the first
hands it an ``EagerTensor``, the second a NumPy array) and restore the static shape that both
wrappers lose, with ``tf.ensure_shape`` (checked at run time, kept in exported graphs);
``native_blur`` and the ``GaussianBlur`` layer compute the same numbers with TensorFlow ops
only, so they are differentiable and can be saved, served from a fresh process and converted to
TFLite. All use OpenCV's kernel rule (``gaussian_kernel``) and its default border,
``BORDER_REFLECT_101`` (= ``tf.pad(mode="REFLECT")``).

Backends: TensorFlow only (on JAX use ``jax.pure_callback``; on PyTorch use plain eager Python).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from companion._backend import require_tensorflow

require_tensorflow(
    "companion.pyfunc",
    {
        "jax": (
            'jax.pure_callback(fn, jax.ShapeDtypeStruct(shape, dtype), x, vmap_method="sequential")'
        ),
        "torch": "the Python function itself on the tensors, in eager code",
    },
)

import tensorflow as tf  # noqa: E402

from companion._checks import check_odd_int, check_real, describe, float_tensor  # noqa: E402

#: OpenCV's fixed kernels for ``sigma <= 0`` and small odd sizes (numerators; divide by sum).
#: Sizes 3, 5 and 7 are binomial-like, 9 a rounded Gaussian (OpenCV 4.12 and 5.0 both have it).
#: Other sizes use the Gaussian formula.
SMALL_KERNELS = {
    1: (1,),
    3: (1, 2, 1),
    5: (1, 4, 6, 4, 1),
    7: (8, 28, 56, 72, 56, 28, 8),
    9: (4, 13, 30, 51, 60, 51, 30, 13, 4),
}
#: Image dtypes ``cv2_blur`` and ``py_function_blur`` accept (what OpenCV blurs).
OPENCV_DTYPES = (np.uint8, np.float32, np.float64)
#: The longest kernel (OpenCV's time grows with ksize squared on small images; 0.2 s at this size).
MAX_KSIZE = 2**15 - 1


def _check_ksize(ksize: object) -> int:
    """Return ``ksize`` as an int if it is an odd int in ``[1, MAX_KSIZE]`` (a kernel's length)."""
    return check_odd_int(ksize, "ksize", maximum=MAX_KSIZE)


def _check_sigma(sigma: object) -> float:
    """Return ``sigma`` as a float if it is a finite number >= 0 (0 selects OpenCV's rule)."""
    return check_real(sigma, "sigma", minimum=0)  # 0 selects OpenCV's rule


def _check_channels(shape: Any, name: str) -> None:
    """The project's error, naming ``name``, for images of rank 3 or 4 with no channel.

    TensorFlow's ops accept such images and return them empty; OpenCV fails with its own error.
    """
    if len(shape) >= 3 and shape[-1] == 0:
        raise ValueError(
            f"{name}: expected images (H, W, C) or (N, H, W, C) with at least 1 channel, "
            f"got shape {tuple(shape)}"
        )


def gaussian_kernel(ksize: int = 5, sigma: float = 0.0) -> np.ndarray:
    """The 1-D kernel OpenCV uses for ``GaussianBlur(img, (ksize, ksize), sigma)``.

    With ``sigma > 0`` it is ``exp(-x**2 / (2 * sigma**2))`` for ``x = -(ksize//2) ..
    ksize//2``, normalised to sum 1. With ``sigma == 0`` OpenCV uses fixed kernels for
    ``ksize <= 9`` (``[1, 4, 6, 4, 1] / 16`` for 5, see ``SMALL_KERNELS``) and otherwise
    the Gaussian with ``sigma = 0.3 * ((ksize - 1) / 2 - 1) + 0.8``.

    Args:
        ksize: Kernel length, a positive odd int up to ``MAX_KSIZE``.
        sigma: Standard deviation in pixels, >= 0; 0 selects OpenCV's rule above.

    Returns:
        ``float64`` array of shape ``(ksize,)`` summing to 1, equal to
        ``cv2.getGaussianKernel(ksize, sigma).ravel()``.

    Raises:
        TypeError: If ``ksize`` is not an int or ``sigma`` not a real number.
        ValueError: If ``ksize`` is even, < 1 or > ``MAX_KSIZE``, or ``sigma`` is negative or not
            finite.

    Example:
        >>> gaussian_kernel(5) * 16
        array([1., 4., 6., 4., 1.])

    Taught in chapter 3, "A native blur, built from TensorFlow ops".
    """
    ksize, sigma = _check_ksize(ksize), _check_sigma(sigma)
    if sigma == 0 and ksize in SMALL_KERNELS:
        weights = np.asarray(SMALL_KERNELS[ksize], np.float64)
    else:
        sigma = sigma or 0.3 * ((ksize - 1) * 0.5 - 1) + 0.8
        x = np.arange(ksize, dtype=np.float64) - (ksize - 1) / 2
        weights = np.exp(-0.5 * (x / sigma) ** 2)
    return weights / weights.sum()


def cv2_blur(images: np.ndarray, ksize: int = 5, sigma: float = 0.0) -> np.ndarray:
    """Blur one image or a batch with ``cv2.GaussianBlur`` (border ``BORDER_REFLECT_101``).

    Args:
        images: One NumPy image ``(H, W)`` or ``(H, W, C)``, or a batch ``(N, H, W, C)``; dtype
            ``uint8``, ``float32`` or ``float64`` (OpenCV rejects ``float16`` and ``int32``).
            A tensor is not accepted: call ``.numpy()`` on it first.
        ksize: Kernel size in both directions, a positive odd int.
        sigma: Standard deviation in both directions, >= 0 (0 = OpenCV's rule, see
            ``gaussian_kernel``).

    Returns:
        The blurred array, same shape and dtype as ``images``.

    Raises:
        TypeError: If ``images`` is not a NumPy array of a supported dtype, or ``ksize`` /
            ``sigma`` have the wrong type.
        ValueError: If ``images`` has rank other than 2, 3 or 4, or ``ksize`` / ``sigma``
            are out of range.

    Example:
        >>> cv2_blur(np.eye(5, dtype=np.float32)).shape
        (5, 5)

    Taught in chapter 3, "OpenCV inside tf.data, through tf.py_function".
    """
    import cv2

    ksize, sigma = _check_ksize(ksize), _check_sigma(sigma)
    if not isinstance(images, np.ndarray):
        raise TypeError(
            f"images: expected a NumPy array (call .numpy() on a tensor), got {describe(images)}"
        )
    if images.dtype not in OPENCV_DTYPES:
        raise TypeError(f"images: expected dtype uint8, float32 or float64, got {images.dtype}")
    if images.ndim not in (2, 3, 4):
        raise ValueError(
            f"images: expected rank 2, 3 or 4 (H, W[, C] or N, H, W, C), got shape {images.shape}"
        )
    _check_channels(images.shape, "images")
    if images.ndim == 4:
        return (
            np.stack([cv2_blur(image, ksize, sigma) for image in images])
            if len(images)
            else images.copy()
        )
    blurred = cv2.GaussianBlur(images, (ksize, ksize), sigma, borderType=cv2.BORDER_REFLECT_101)
    return blurred.reshape(images.shape)  # OpenCV drops a trailing channel axis of size 1


def _opencv_tensor(images: Any) -> tf.Tensor:
    """``images`` as a tensor that ``cv2_blur`` can take: dtype and rank checked."""
    try:
        images = tf.convert_to_tensor(images)
    except (TypeError, ValueError) as error:
        what = "a tensor or array of uint8, float32 or float64"
        raise TypeError(f"images: expected {what}, got {describe(images)}") from error
    if images.dtype.as_numpy_dtype not in OPENCV_DTYPES:
        raise TypeError(
            f"images: expected dtype uint8, float32 or float64, got {images.dtype.name}"
        )
    if images.shape.rank not in (2, 3, 4):
        raise ValueError(
            f"images: expected rank 2, 3 or 4 (H, W[, C] or N, H, W, C), got shape {images.shape}"
        )
    _check_channels(images.shape, "images")
    return images


def py_function_blur(images: Any, ksize: int = 5, sigma: float = 0.0) -> tf.Tensor:
    """Run ``cv2_blur`` as a TensorFlow op with ``tf.py_function``; keep the static shape.

    Works eagerly, in ``tf.data`` ``map`` and in ``tf.function``. The Python function
    receives an ``EagerTensor`` and calls ``.numpy()`` on it. The output shape is declared
    with ``tf.ensure_shape``, which is checked at run time and kept in exported graphs. The
    graph calls back into this Python process, so a model using it cannot be served from
    another process or converted to TFLite; use ``native_blur`` for that.

    Not differentiable: OpenCV runs outside TensorFlow's gradient tape, so the gradient with
    respect to ``images`` is ``None`` (the output passes through ``tf.stop_gradient``; a bare
    ``tf.py_function`` around OpenCV would report a silent scalar zero instead).

    Args:
        images: One image ``(H, W)`` or ``(H, W, C)``, or a batch ``(N, H, W, C)``; dtype
            ``uint8``, ``float32`` or ``float64``.
        ksize: Kernel size, a positive odd int.
        sigma: Standard deviation, >= 0 (0 = OpenCV's rule).

    Returns:
        The blurred tensor, same dtype and (static) shape as ``images``.

    Raises:
        TypeError: If the dtype is not supported or ``ksize`` / ``sigma`` have the wrong type.
        ValueError: If the rank is not 2, 3 or 4 or ``ksize`` / ``sigma`` are out of range.

    Example:
        >>> ds = tf.data.Dataset.from_tensor_slices(np.zeros((2, 8, 8, 3), np.float32))
        >>> ds.map(py_function_blur).element_spec.shape
        TensorShape([8, 8, 3])

    Taught in chapter 3, "OpenCV inside tf.data, through tf.py_function".
    """
    ksize, sigma = _check_ksize(ksize), _check_sigma(sigma)
    images = _opencv_tensor(images)
    blurred = tf.py_function(
        lambda x: cv2_blur(x.numpy(), ksize, sigma), inp=[images], Tout=images.dtype
    )
    return tf.ensure_shape(tf.stop_gradient(blurred), images.shape)  # the output shape is unknown


def numpy_function_blur(images: Any, ksize: int = 5, sigma: float = 0.0) -> tf.Tensor:
    """Run ``cv2_blur`` as a TensorFlow op with ``tf.numpy_function``; keep the static shape.

    Like ``py_function_blur``, but the Python function receives and returns NumPy arrays, so
    ``cv2_blur`` is called as it is. ``tf.numpy_function`` has no gradient (the gradient with
    respect to ``images`` is ``None``), which is no loss in a ``tf.data`` pipeline, where it
    belongs. It is tied to this Python process in the same way as ``py_function_blur``.

    Args:
        images: One image ``(H, W)`` or ``(H, W, C)``, or a batch ``(N, H, W, C)``; dtype
            ``uint8``, ``float32`` or ``float64``.
        ksize: Kernel size, a positive odd int.
        sigma: Standard deviation, >= 0 (0 = OpenCV's rule).

    Returns:
        The blurred tensor, same dtype and (static) shape as ``images``.

    Raises:
        TypeError: If the dtype is not supported or ``ksize`` / ``sigma`` have the wrong type.
        ValueError: If the rank is not 2, 3 or 4 or ``ksize`` / ``sigma`` are out of range.

    Example:
        >>> ds = tf.data.Dataset.from_tensor_slices(np.zeros((2, 8, 8, 3), np.float32))
        >>> ds.map(numpy_function_blur).element_spec.shape
        TensorShape([8, 8, 3])

    Taught in chapter 3, "OpenCV inside tf.data, through tf.py_function".
    """
    ksize, sigma = _check_ksize(ksize), _check_sigma(sigma)
    images = _opencv_tensor(images)
    blurred = tf.numpy_function(lambda x: cv2_blur(x, ksize, sigma), [images], images.dtype)
    return tf.ensure_shape(blurred, images.shape)  # the output shape is unknown


def _reflect(x: tf.Tensor, pad: int, axis: int) -> tf.Tensor:
    """``x`` with ``pad`` mirrored entries on both sides of ``axis`` (OpenCV's BORDER_REFLECT_101).

    Slices and reverses, as XLA lowers ``tf.pad(mode="REFLECT")`` anyway: XLA's mirror pad
    refuses a tensor with any empty axis, an empty batch included (a RET_CHECK failure).
    """
    before = (slice(None),) * axis
    left = tf.reverse(x[before + (slice(1, pad + 1),)], [axis])
    right = tf.reverse(x[before + (slice(-pad - 1, -1),)], [axis])
    return tf.concat([left, x, right], axis)


def _separable_blur(images: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """Reflect-pad NHWC ``images``, then blur along W and along H by shifted, weighted sums.

    Width and channels are merged into one axis first, so each image row is one contiguous
    vector and a shift by one pixel is a shift by ``C`` elements (this vectorises best).
    """
    pad = kernel.shape[0] // 2
    dynamic = tf.shape(images)
    batch, height, width, channels = (
        images.shape[i] if images.shape[i] is not None else dynamic[i] for i in range(4)
    )
    x = tf.reshape(_reflect(images, pad, 2), [batch, height, (width + 2 * pad) * channels])
    x = sum(kernel[j] * x[:, :, j * channels : (j + width) * channels] for j in range(2 * pad + 1))
    x = _reflect(x, pad, 1)
    x = sum(kernel[j] * x[:, j : j + height] for j in range(2 * pad + 1))
    return tf.reshape(x, [batch, height, width, channels])


# XLA fuses the padding and the shifted sums into a few loops: the fastest variant we
# measured on CPU (chapter 3 compares it with depthwise convolutions and unfused ops).
# Traced once per kernel size, dtype and input shape.
_separable_blur_xla = tf.function(_separable_blur, jit_compile=True)


def _float_images(images: Any, name: str, ksize: int) -> tf.Tensor:
    """``images`` as a float tensor of rank 3 or 4, big enough to reflect-pad for ``ksize``."""
    images = float_tensor(images, name)
    if images.shape.rank not in (3, 4):
        raise ValueError(
            f"{name}: expected rank 3 (H, W, C) or 4 (N, H, W, C), got shape {images.shape}"
        )
    _check_channels(images.shape, name)
    if any(d is not None and d <= ksize // 2 for d in images.shape[-3:-1]):
        raise ValueError(
            f"{name}: expected height and width > ksize // 2 = {ksize // 2} for reflect "
            f"padding, got shape {images.shape}"
        )
    return images


def native_blur(images: Any, ksize: int = 5, sigma: float = 0.0) -> tf.Tensor:
    """Gaussian blur in pure TensorFlow, equal to ``cv2.GaussianBlur`` including the borders.

    Two 1-D passes (along width, then height) with OpenCV's kernel (``gaussian_kernel``)
    after reflect padding (``BORDER_REFLECT_101``), as shifted weighted sums compiled with XLA.
    Differentiable, runs on CPU and GPU, and saves/exports/converts to TFLite like any
    TensorFlow op.

    Args:
        images: Float tensor or array ``(H, W, C)`` or a batch ``(N, H, W, C)``; height and
            width must exceed ``ksize // 2`` (reflect padding needs that many pixels). An
            empty batch gives an empty batch.
        ksize: Kernel size, a positive odd int.
        sigma: Standard deviation, >= 0 (0 = OpenCV's rule).

    Returns:
        The blurred tensor, same shape and dtype as ``images``.

    Raises:
        TypeError: If ``images`` is not floating point or ``ksize`` / ``sigma`` have the wrong type.
        ValueError: If the rank is not 3 or 4, the image is smaller than ``ksize // 2 + 1``
            pixels, or ``ksize`` / ``sigma`` are out of range.

    Example:
        >>> native_blur(np.ones((1, 8, 8, 3), np.float32)).shape
        TensorShape([1, 8, 8, 3])

    Taught in chapter 3, "A native blur, built from TensorFlow ops".
    """
    ksize, sigma = _check_ksize(ksize), _check_sigma(sigma)
    images = _float_images(images, "images", ksize)
    rank = images.shape.rank
    batch = images if rank == 4 else images[tf.newaxis]
    kernel = tf.constant(gaussian_kernel(ksize, sigma), dtype=images.dtype)
    blurred = _separable_blur_xla(batch, kernel)
    return blurred if rank == 4 else blurred[0]


@keras.saving.register_keras_serializable(package="companion")
class GaussianBlur(keras.layers.Layer):
    """Keras layer that blurs NHWC images with ``native_blur`` (no weights).

    Unlike a layer wrapping ``tf.py_function``, a model with this layer saves to ``.keras``,
    exports a SavedModel that serves from a fresh process, and converts to TFLite.

    Args:
        ksize: Kernel size, a positive odd int.
        sigma: Standard deviation, >= 0 (0 = OpenCV's rule).
        **kwargs: Base layer arguments (``name``, ``dtype``, ...).

    Raises:
        TypeError, ValueError: As ``native_blur``, at construction for ``ksize`` / ``sigma``
            and at call time for the images (named ``inputs``, checked before Keras sees them).

    Example:
        >>> layer = GaussianBlur(ksize=3)
        >>> layer(np.ones((2, 8, 8, 3), np.float32)).shape
        TensorShape([2, 8, 8, 3])

    Taught in chapter 3, "Inside a model".
    """

    def __init__(self, ksize: int = 5, sigma: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ksize = _check_ksize(ksize)
        self.sigma = _check_sigma(sigma)

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """Check ``inputs`` before Keras converts them (its errors would not name them)."""
        if not isinstance(inputs, keras.KerasTensor):  # a functional model's symbolic input passes
            inputs = _float_images(inputs, "inputs", self.ksize)
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return native_blur(inputs, self.ksize, self.sigma)

    def compute_output_shape(self, input_shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(ksize=self.ksize, sigma=self.sigma)
        return config
