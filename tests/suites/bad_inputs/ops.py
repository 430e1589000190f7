"""Bad inputs for ``companion.ops``: math on any float values is valid (NaN in, NaN out)."""

import numpy as np
from helpers.badinput import Array, Bool, Case, Int, Kind, Real, Seq

from companion.ops import logsumexp, masked_mean, mish, softplus, swish

X = np.ones((2, 3), "float32")
FLOATS = Array(extra_bad=(np.ones(3, "int32"), ["a", "b"]))
AXIS = Kind(
    "None, an axis of a rank-2 input or a list of them",
    lambda v: v is None or Int(-2, 1).accepts(v) or Seq(Int(-2, 1)).accepts(v),
)

CASES = [
    Case("swish", swish, {"x": X, "beta": 1.0}, {"x": FLOATS, "beta": Real()}),
    Case("softplus", softplus, {"x": X}, {"x": FLOATS}),
    Case("mish", mish, {"x": X}, {"x": FLOATS}),
    Case(
        "logsumexp",
        logsumexp,
        {"x": X, "axis": 1, "keepdims": False},
        {"x": FLOATS, "axis": AXIS, "keepdims": Bool()},
    ),
    Case(
        "masked_mean",
        masked_mean,
        {"x": X, "mask": X > 0, "axis": 1, "keepdims": False},
        {
            "x": FLOATS,
            "mask": Array(floating=False, extra_bad=(np.ones((2, 3), "float32"),)),
            "axis": AXIS,
            "keepdims": Bool(),
        },
    ),
]
