"""Bad inputs for ``companion.kernels``: the compiled blur, its layer and its build.

The build's arguments are checked before anything runs (no compiler, no file written), so
``build_blur_op`` and ``build_key`` are fuzzed without compiling; the blur's calls load the
library once (compiling it if this stack has no cached build yet).
"""

import re

import numpy as np
from helpers.badinput import Array, Case, Kind, Real, Str, is_int

from companion.kernels import (
    SOURCE,
    CppGaussianBlur,
    build_blur_op,
    build_command,
    build_key,
    cpp_blur,
    source_section,
)

IMAGES = np.ones((1, 8, 8, 2), "float32")
#: A blur takes float images of rank 3 or 4 whose height and width exceed ``ksize // 2``.
BLUR_INPUT = Array(
    ranks=(3, 4),
    extra_bad=(
        np.ones((8, 8, 3), "int32"),
        np.ones((8, 8, 3), "complex64"),
        np.ones((8, 8), "float32"),
        np.ones((1, 2, 8, 8, 3), "float32"),
        np.ones((1, 2, 8, 1), "float32"),
        np.ones((1, 8, 2, 1), "float32"),
        [["a"]],
    ),
)
#: An odd kernel size; one beyond the images (``ksize // 2 >= height``) names either argument.
ODD = Kind("odd int >= 1", lambda v: is_int(v) and v >= 1 and v % 2 == 1, extra_bad=(4,))
KSIZE = Kind(ODD.what, ODD.accepts, extra_bad=(4, 17, 10**12 + 1))
SIGMA = Real(minimum=0)
PATH = Kind("non-empty str or os.PathLike", lambda v: isinstance(v, str) and v != "")
CXX = Str().or_none()
SECTIONS = tuple(re.findall(r"^// ==== (.+?) ====$", SOURCE.read_text(), flags=re.MULTILINE))

CASES = [
    Case(
        "build_command",
        build_command,
        {"source": "blur_op.cc", "output": "blur_op.so", "cxx": "g++"},
        {"source": PATH, "output": PATH, "cxx": CXX},
    ),
    Case("build_key", build_key, {"cxx": "g++"}, {"cxx": CXX}),
    Case(
        "build_blur_op",
        build_blur_op,
        {"cache_dir": None, "cxx": None},
        {"cache_dir": PATH.or_none(), "cxx": CXX},
    ),
    Case(
        "cpp_blur",
        cpp_blur,
        {"images": IMAGES, "ksize": 5, "sigma": 0.0},
        {"images": BLUR_INPUT, "ksize": KSIZE, "sigma": SIGMA},
        names={"ksize": ("ksize", "images")},
    ),
    Case(
        "CppGaussianBlur",
        CppGaussianBlur,
        {"ksize": 5, "sigma": 0.0},
        {"ksize": ODD, "sigma": SIGMA},
    ),
    Case(
        "CppGaussianBlur.__call__",
        lambda inputs: CppGaussianBlur(ksize=5)(inputs),
        {"inputs": IMAGES},
        {"inputs": BLUR_INPUT},
    ),
    Case("source_section", source_section, {"name": "kernel"}, {"name": Str(*SECTIONS)}),
]

EXEMPT = {"BuildError": "an exception class (raised, not called with user input)"}
