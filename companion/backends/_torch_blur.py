"""Chapter 13's compiled blur as a PyTorch C++ extension, built once per torch version, cached."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from companion._cache import cache_root
from companion._checks import check_odd_int, describe

#: A separable blur over NHWC float32 images, OpenCV's BORDER_REFLECT_101 at the borders, the
#: sums in double: chapter 13's op, written against ``torch::Tensor`` instead of ``OpKernel``.
SOURCE = r"""
#include <torch/extension.h>

static int64_t reflect101(int64_t i, int64_t n) {
  if (n == 1) return 0;
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * n - 2 - i;
  return i;
}

torch::Tensor separable_blur(torch::Tensor images, torch::Tensor kernel) {
  TORCH_CHECK(images.dim() == 4 && images.scalar_type() == torch::kFloat32,
              "images: expected a float32 NHWC tensor");
  auto x = images.contiguous();
  auto k = kernel.to(torch::kFloat64).contiguous();
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  const int64_t K = k.size(0), r = K / 2;
  auto rows = torch::empty({N, H, W, C}, torch::kFloat64);
  auto out = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  double* t = rows.data_ptr<double>();
  float* o = out.data_ptr<float>();
  const double* w = k.data_ptr<double>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c = 0; c < W * C; ++c) {  // along each row
        double s = 0;
        for (int64_t j = 0; j < K; ++j)
          s += w[j] * in[((n * H + h) * W + reflect101(c / C + j - r, W)) * C + c % C];
        t[(n * H + h) * W * C + c] = s;
      }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c = 0; c < W * C; ++c) {  // then along each column
        double s = 0;
        for (int64_t j = 0; j < K; ++j)
          s += w[j] * t[(n * H + reflect101(h + j - r, H)) * W * C + c];
        o[(n * H + h) * W * C + c] = static_cast<float>(s);
      }
  return out;
}
"""


def build_folder() -> Path:
    """Where the extension is built: ``$WHITE_BOX_TF_CACHE`` (else the per-user cache that
    chapter 13's op uses), one folder per torch version and source.

    Taught in chapter 14, "Chapter 13's op as a PyTorch extension".
    """
    import torch

    key = hashlib.sha256(SOURCE.encode()).hexdigest()[:12]
    return cache_root() / f"torch-{torch.__version__}-{key}"


@cache
def load_torch_blur() -> Any:
    """The extension module (``separable_blur(images, kernel)``), built with
    ``torch.utils.cpp_extension.load_inline`` on first use (about 30 s), cached after.

    Taught in chapter 14, "Chapter 13's op as a PyTorch extension".
    """
    from torch.utils.cpp_extension import load_inline

    folder = build_folder()
    folder.mkdir(parents=True, exist_ok=True)
    return load_inline(
        name="white_box_blur",
        cpp_sources=[SOURCE],
        functions=["separable_blur"],
        build_directory=str(folder),
        extra_cflags=["-O2"],
    )


def torch_blur(images: Any, ksize: int = 5) -> np.ndarray:
    """Blur NHWC float32 ``images`` with a ``ksize`` Gaussian, as ``cv2.GaussianBlur(image,
    (ksize, ksize), 0)``, through the C++ extension.

    Args:
        images: A float32 array of shape (N, H, W, C).
        ksize: The kernel size, an odd int from 1 to 31.

    Returns:
        The blurred images, a NumPy array.

    Raises:
        TypeError: If ``ksize`` is not an int.
        ValueError: If ``ksize`` is not odd and from 1 to 31, or ``images`` is not rank 4.

    Taught in chapter 14, "Chapter 13's op as a PyTorch extension".
    """
    ksize = check_odd_int(ksize, "ksize", maximum=31)
    array = np.asarray(images)
    if array.ndim != 4 or not np.issubdtype(array.dtype, np.number):
        raise ValueError(f"images: expected a rank-4 NHWC array of numbers, got {describe(images)}")
    import cv2
    import torch

    array = np.ascontiguousarray(array, "float32")
    kernel = torch.from_numpy(cv2.getGaussianKernel(ksize, 0).ravel())
    return load_torch_blur().separable_blur(torch.from_numpy(array), kernel).numpy()
