"""Chapter 13's compiled blur as a PyTorch C++ extension, built once per torch version, cached,
and registered as the operator ``white_box::blur`` with its shape function and gradient."""

from __future__ import annotations

import hashlib
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from companion._cache import cache_root
from companion._checks import check_odd_int, describe

#: The folder of the C++ sources: ``separable_blur.cc`` holds the blur without a framework.
KERNELS = Path(__file__).resolve().parents[1] / "_kernels"

#: Chapter 13's op written against ``torch::Tensor`` instead of ``OpKernel``: the blur of
#: ``separable_blur.cc``, bound twice. ``separable_blur`` is a plain pybind11 function;
#: ``TORCH_LIBRARY`` registers the same code as the operator ``white_box::blur``, the analogue
#: of ``REGISTER_OP``: ``torch.compile`` and autograd see an operator, not a Python call.
SOURCE = r"""
#include <torch/extension.h>

#include "separable_blur.cc"

torch::Tensor separable_blur(torch::Tensor images, torch::Tensor kernel) {
  TORCH_CHECK(images.dim() == 4 && images.scalar_type() == torch::kFloat32,
              "images: expected a float32 NHWC tensor");
  TORCH_CHECK(kernel.dim() == 1 && kernel.size(0) % 2 == 1,
              "kernel: expected rank 1 with an odd length");
  auto x = images.contiguous();
  auto k = kernel.to(torch::kFloat64).contiguous();
  auto out = torch::empty_like(x);
  white_box::SeparableBlur(x.data_ptr<float>(), k.data_ptr<double>(), k.size(0), x.size(0),
                           x.size(1), x.size(2), x.size(3), out.data_ptr<float>());
  return out;
}

TORCH_LIBRARY(white_box, m) { m.def("blur(Tensor images, Tensor kernel) -> Tensor"); }

TORCH_LIBRARY_IMPL(white_box, CPU, m) { m.impl("blur", &separable_blur); }
"""


def build_folder() -> Path:
    """Where the extension is built: ``$WHITE_BOX_TF_CACHE`` (else the per-user cache that
    chapter 13's op uses), one folder per torch version, installation and source.

    Taught in chapter 14, "Chapter 13's op as a PyTorch extension".
    """
    import torch

    shared = (KERNELS / "separable_blur.cc").read_bytes()
    # torch's folder too: two environments with one torch version build against other headers
    # paths, and sharing a folder would make each rebuild the other's build
    where = str(Path(torch.__file__).parent).encode()
    key = hashlib.sha256(SOURCE.encode() + shared + where).hexdigest()[:12]
    return cache_root() / f"torch-{torch.__version__}-{key}"


def _blur_matrix(kernel: Any, n: int) -> Any:
    """The (n, n) matrix of the blur along one axis of length ``n``: row i holds the weights
    that output i gives to each input, reflected copies added to their sources."""
    import torch

    taps = torch.arange(n)[:, None] + torch.arange(kernel.shape[0])[None, :] - kernel.shape[0] // 2
    period = max(2 * n - 2, 1)  # BORDER_REFLECT_101 repeats every 2n - 2 pixels
    folded = taps % period
    source = torch.where(folded >= n, period - folded, folded)
    weights = kernel.to(torch.float64).expand(n, -1)
    return torch.zeros(n, n, dtype=torch.float64).scatter_add(1, source, weights)


def _setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.save_for_backward(inputs[1])


def _backward(ctx: Any, upstream: Any) -> tuple:
    """The images' gradient: the blur's adjoint, which chapter 13's ``GaussianBlurGrad``
    computes (A^T G B for the blur A X B^T of each image and channel); none for the kernel."""
    import torch

    (kernel,) = ctx.saved_tensors
    _, height, width, _ = upstream.shape
    rows, columns = _blur_matrix(kernel, height), _blur_matrix(kernel, width)
    adjoint = torch.einsum("hi,wj,nhwc->nijc", rows, columns, upstream.to(torch.float64))
    return adjoint.to(upstream.dtype), None


@cache
def load_torch_blur() -> Any:
    """The extension module (``separable_blur(images, kernel)``), built with
    ``torch.utils.cpp_extension.load_inline`` on first use (about 30 s), cached after. Loading
    it registers the operator ``torch.ops.white_box.blur``; this adds its shape function
    (``register_fake``, what ``REGISTER_OP``'s ``SetShapeFn`` does) and its gradient
    (``register_autograd``, what chapter 13's ``tf.RegisterGradient`` does).

    Taught in chapter 14, "Chapter 13's op as a PyTorch extension".
    """
    import torch
    from torch.utils.cpp_extension import load_inline

    folder = build_folder()
    folder.mkdir(parents=True, exist_ok=True)
    module = load_inline(
        name="white_box_blur",
        cpp_sources=[SOURCE],
        functions=["separable_blur"],
        build_directory=str(folder),
        extra_cflags=["-O2"],
        extra_include_paths=[str(KERNELS)],
    )
    torch.library.register_fake("white_box::blur")(
        lambda images, kernel: images.new_empty(images.shape)
    )
    torch.library.register_autograd("white_box::blur", _backward, setup_context=_setup_context)
    return module


def gaussian_weights(ksize: int = 5) -> np.ndarray:
    """OpenCV's 1-D Gaussian weights for ``ksize`` (sigma from the size), as float64.

    Raises:
        TypeError: If ``ksize`` is not an int.
        ValueError: If ``ksize`` is not odd and from 1 to 31.

    Taught in chapter 14, "Chapter 13's op as a PyTorch extension".
    """
    import cv2

    ksize = check_odd_int(ksize, "ksize", maximum=31)
    return cv2.getGaussianKernel(ksize, 0).ravel()


def check_images(images: Any) -> np.ndarray:
    """``images`` as a C-contiguous float32 array of rank 4 (NHWC); else ValueError."""
    array = np.asarray(images)
    if array.ndim != 4 or not np.issubdtype(array.dtype, np.number):
        raise ValueError(f"images: expected a rank-4 NHWC array of numbers, got {describe(images)}")
    return np.ascontiguousarray(array, "float32")


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
    weights = gaussian_weights(ksize)
    array = check_images(images)
    import torch

    blur = load_torch_blur().separable_blur
    return blur(torch.from_numpy(array), torch.from_numpy(weights)).numpy()


def blur_adjoint_reference(upstream: np.ndarray, ksize: int = 5) -> np.ndarray:
    """The blur's gradient for ``upstream`` (N, H, W, C), from OpenCV alone: the Jacobian's
    columns are ``cv2.GaussianBlur`` of each one-pixel image, and the gradient is J^T upstream.

    Taught in chapter 14, "Chapter 13's op as a PyTorch extension".
    """
    import cv2

    n, height, width, channels = upstream.shape
    basis = np.eye(height * width, dtype="float32").reshape(-1, height, width)
    jacobian = np.stack([cv2.GaussianBlur(e, (ksize, ksize), 0).ravel() for e in basis], 1)
    lines = upstream.astype("float64").reshape(n, height * width, channels)
    return np.einsum("ij,nic->njc", jacobian, lines).reshape(upstream.shape)


def compile_report(function: Any, images: np.ndarray) -> dict:
    """What ``torch.compile`` makes of ``function(t)``, ``t`` the images with
    ``requires_grad``: its graphs and graph breaks (``torch._dynamo.explain``) and whether the
    eager output still requires a gradient.

    Taught in chapter 14, "Chapter 13's op as a PyTorch extension".
    """
    import torch

    t = torch.tensor(images, requires_grad=True)
    with warnings.catch_warnings():  # dynamo warns where it breaks a graph: that is reported
        warnings.simplefilter("ignore", UserWarning)
        explained = torch._dynamo.explain(function)(t)
    return {
        "graphs": explained.graph_count,
        "graph_breaks": explained.graph_break_count,
        "requires_grad": bool(function(t).requires_grad),
    }


def probe_torch_op(images: np.ndarray, reference: np.ndarray) -> None:
    """Check the operator ``white_box::blur`` on ``images``: its values equal ``reference``
    (``cv2.GaussianBlur``'s) within 1e-5; ``torch.compile(fullgraph=True)`` takes a function
    that calls it in one graph, with no break; the compiled function's gradient equals
    ``blur_adjoint_reference`` within 1e-5. The pybind11 function of the same code breaks the
    graph and drops the gradient.

    Raises:
        AssertionError: If one of these fails.

    Taught in chapter 14, "Chapter 13's op as a PyTorch extension".
    """
    import torch

    module, kernel = load_torch_blur(), torch.from_numpy(gaussian_weights(5))
    upstream = np.random.default_rng(1).uniform(size=images.shape).astype("float32")
    weights = torch.from_numpy(upstream)

    def through(blur: Any) -> Any:
        return lambda t: (blur(2 * t, kernel) * weights).sum() / 2

    expected = {"graphs": 1, "graph_breaks": 0, "requires_grad": True}
    found = compile_report(through(torch.ops.white_box.blur), images)
    plain = compile_report(through(module.separable_blur), images)
    if found != expected or plain["graph_breaks"] < 1 or plain["requires_grad"]:
        raise AssertionError(f"torch.library op: {found}; pybind11 function: {plain}")
    t = torch.tensor(images, requires_grad=True)
    torch.compile(through(torch.ops.white_box.blur), fullgraph=True, backend="aot_eager")(
        t
    ).backward()
    gap = float(np.abs(t.grad.numpy() - blur_adjoint_reference(upstream)).max())
    blurred = torch.ops.white_box.blur(torch.from_numpy(images), kernel).numpy()
    value_gap = float(np.abs(blurred - reference).max())
    if not max(gap, value_gap) <= 1e-5:
        raise AssertionError(f"torch.library op against OpenCV: {value_gap:.3g}, {gap:.3g}")
