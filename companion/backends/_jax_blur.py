"""Chapter 13's blur on JAX, two ways that run on a CPU: a C++ handler called through the XLA
FFI from ``jax.jit``, and a Pallas kernel in interpret mode."""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from companion._cache import cache_root
from companion.backends._torch_blur import KERNELS, check_images, gaussian_weights

#: The handler's source (it includes ``separable_blur.cc``, the blur without a framework).
FFI_SOURCE = KERNELS / "xla_ffi_blur.cc"
#: The name XLA knows the handler by, in ``jax.ffi.register_ffi_target`` and ``ffi_call``.
FFI_TARGET = "white_box_blur"
#: A shared library, optimised for any CPU of its kind (no ``-march=native``), as chapter 13's.
FFI_FLAGS = ("-std=c++17", "-shared", "-fPIC", "-O2")


def build_ffi_blur() -> Path:
    """Compile ``xla_ffi_blur.cc`` against jaxlib's headers (``jax.ffi.include_dir()``) into
    the per-user cache, one folder per jaxlib, compiler and source; return the library.

    The compiler is ``$WHITE_BOX_TF_CXX``, else ``g++``, as for chapter 13's op. The library
    is written to a temporary name and renamed: a process never loads half a file.

    Raises:
        RuntimeError: If the compiler is missing or fails (its last lines of output).

    Taught in chapter 14, "Chapter 13's op on JAX".
    """
    import jax
    import jaxlib

    cxx = os.environ.get("WHITE_BOX_TF_CXX") or "g++"
    sources = FFI_SOURCE.read_bytes() + (KERNELS / "separable_blur.cc").read_bytes()
    key = hashlib.sha256(sources + " ".join((cxx, *FFI_FLAGS)).encode()).hexdigest()[:12]
    library = cache_root() / f"xla-ffi-{jaxlib.__version__}-{key}" / "xla_ffi_blur.so"
    if library.is_file():
        return library
    library.parent.mkdir(parents=True, exist_ok=True)
    partial = library.with_name(f"xla_ffi_blur.{os.getpid()}.tmp.so")
    command = [cxx, *FFI_FLAGS, "-isystem", jax.ffi.include_dir(), str(FFI_SOURCE)]
    try:
        done = subprocess.run([*command, "-o", str(partial)], capture_output=True, text=True)
    except OSError as error:
        raise RuntimeError(f"compiler: {cxx!r} cannot run ({error}); install g++") from error
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        raise RuntimeError(f"compiling {FFI_SOURCE.name} failed:\n{' '.join(command)}\n{tail}")
    os.replace(partial, library)
    return library


@cache
def register_ffi_blur() -> str:
    """Build and load the handler once per process and register it with XLA for the CPU
    (``jax.ffi.register_ffi_target(..., platform="cpu")``); returns ``FFI_TARGET``.

    Taught in chapter 14, "Chapter 13's op on JAX".
    """
    import jax

    handler = ctypes.cdll.LoadLibrary(str(build_ffi_blur())).WhiteBoxBlur
    jax.ffi.register_ffi_target(FFI_TARGET, jax.ffi.pycapsule(handler), platform="cpu")
    return FFI_TARGET


def _on_cpu(*arrays: np.ndarray) -> list[Any]:
    """The arrays on JAX's CPU device: ``jax.jit`` then compiles for the CPU, GPU or not."""
    import jax

    cpu = jax.devices("cpu")[0]
    return [jax.device_put(array, cpu) for array in arrays]


def ffi_blur(images: Any, ksize: int = 5) -> np.ndarray:
    """Blur NHWC float32 ``images`` as ``cv2.GaussianBlur(image, (ksize, ksize), 0)``, with the
    C++ handler called from ``jax.jit`` on the CPU through ``jax.ffi.ffi_call``.

    Args:
        images: A float32 array of shape (N, H, W, C).
        ksize: The kernel size, an odd int from 1 to 31.

    Returns:
        The blurred images, a NumPy array.

    Raises:
        TypeError: If ``ksize`` is not an int.
        ValueError: If ``ksize`` is not odd and from 1 to 31, or ``images`` is not rank 4.

    Taught in chapter 14, "Chapter 13's op on JAX".
    """
    import jax

    weights = gaussian_weights(ksize).astype("float32")  # JAX computes in float32
    array = check_images(images)
    target = register_ffi_blur()

    @jax.jit
    def blur(images, weights):
        result = jax.ShapeDtypeStruct(images.shape, images.dtype)
        return jax.ffi.ffi_call(target, result)(images, weights)

    return np.asarray(blur(*_on_cpu(array, weights)))


def _pallas_kernel(padded_ref: Any, out_ref: Any, *, weights: tuple[float, ...]) -> None:
    """Along each row, then along each column, of the images padded by ``len(weights) // 2``."""
    padded, (_, height, width, _) = padded_ref[...], out_ref.shape
    rows = sum(w * padded[:, :, j : j + width] for j, w in enumerate(weights))
    out_ref[...] = sum(w * rows[:, i : i + height] for i, w in enumerate(weights))


def pallas_blur(images: Any, ksize: int = 5) -> np.ndarray:
    """Blur NHWC float32 ``images`` as ``cv2.GaussianBlur(image, (ksize, ksize), 0)``, with a
    Pallas kernel run with ``interpret=True`` on the CPU (a compiled Pallas kernel needs a GPU
    or a TPU); the padding is ``jnp.pad``'s ``"reflect"``, OpenCV's BORDER_REFLECT_101.

    Args:
        images: A float32 array of shape (N, H, W, C), each side longer than ``ksize // 2``.
        ksize: The kernel size, an odd int from 1 to 31.

    Returns:
        The blurred images, a NumPy array (float32 sums, not double as the C++ handler's).

    Raises:
        TypeError: If ``ksize`` is not an int.
        ValueError: If ``ksize`` is not odd and from 1 to 31, or ``images`` is not rank 4.

    Taught in chapter 14, "Chapter 13's op on JAX".
    """
    import functools

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    weights = tuple(float(w) for w in gaussian_weights(ksize))
    array, half = check_images(images), ksize // 2
    kernel = functools.partial(_pallas_kernel, weights=weights)

    @jax.jit
    def blur(images):
        padded = jnp.pad(images, ((0, 0), (half, half), (half, half), (0, 0)), mode="reflect")
        result = jax.ShapeDtypeStruct(images.shape, images.dtype)
        return pl.pallas_call(kernel, out_shape=result, interpret=True)(padded)

    return np.asarray(blur(*_on_cpu(array)))
