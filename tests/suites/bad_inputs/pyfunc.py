"""Bad inputs for ``companion.pyfunc``: the blurs (their private ksize/sigma checks are exercised
through ``gaussian_kernel``, the blurs and the layer)."""

import numpy as np
from helpers.badinput import Array, Case, Kind, Real

from companion.pyfunc import (
    GaussianBlur,
    cv2_blur,
    gaussian_kernel,
    native_blur,
    numpy_function_blur,
    py_function_blur,
)

KSIZE = Kind(
    "an odd int in [1, 2**15 - 1]",
    lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v < 2**15 and v % 2 == 1,
    extra_bad=(4, 2**15 + 1),
)
SIGMA = Real(0)
IMAGES = np.ones((2, 8, 8, 3), "float32")
OPENCV = Kind(
    "a NumPy array of uint8, float32 or float64, rank 2 to 4",
    lambda v: (
        isinstance(v, np.ndarray)
        and v.dtype in (np.uint8, np.float32, np.float64)
        and v.ndim in (2, 3, 4)
    ),
    extra_bad=(
        np.ones((8, 8), "float16"),
        np.ones((8, 8), "int32"),
        np.ones(8, "float32"),
        np.ones((8, 8, 0), "float32"),
    ),
)
OPENCV_TENSOR = Kind(
    "an array or tensor of uint8, float32 or float64, rank 2 to 4",
    lambda v: (
        Array(ranks=(2, 3, 4), floating=False).accepts(v)
        and np.asarray(v).dtype in (np.uint8, np.float32, np.float64)
    ),
    extra_bad=OPENCV.extra_bad,
)
FLOAT_IMAGES = Array(
    ranks=(3, 4),
    extra_bad=(
        np.ones((2, 8, 8, 3), "int32"),
        np.ones((2, 1, 8, 3), "float32"),
        np.ones((2, 8, 8, 0), "float32"),  # no channel
    ),
)


def _layer_call(inputs):
    return GaussianBlur(3)(inputs)


CASES = [
    Case(
        "gaussian_kernel",
        gaussian_kernel,
        {"ksize": 5, "sigma": 0.0},
        {"ksize": KSIZE, "sigma": SIGMA},
    ),
    Case(
        "cv2_blur",
        cv2_blur,
        {"images": IMAGES, "ksize": 3, "sigma": 0.0},
        {"images": OPENCV, "ksize": KSIZE, "sigma": SIGMA},
    ),
    Case(
        "py_function_blur",
        py_function_blur,
        {"images": IMAGES, "ksize": 3, "sigma": 0.0},
        {"images": OPENCV_TENSOR, "ksize": KSIZE, "sigma": SIGMA},
    ),
    Case(
        "numpy_function_blur",
        numpy_function_blur,
        {"images": IMAGES, "ksize": 3, "sigma": 0.0},
        {"images": OPENCV_TENSOR, "ksize": KSIZE, "sigma": SIGMA},
    ),
    Case(
        "native_blur",
        native_blur,
        {"images": IMAGES, "ksize": 3, "sigma": 0.0},
        {"images": FLOAT_IMAGES, "ksize": KSIZE, "sigma": SIGMA},
    ),
    Case(
        "GaussianBlur", GaussianBlur, {"ksize": 3, "sigma": 0.0}, {"ksize": KSIZE, "sigma": SIGMA}
    ),
    Case("GaussianBlur.__call__", _layer_call, {"inputs": IMAGES}, {"inputs": FLOAT_IMAGES}),
]
