"""Bad inputs for ``companion.gradients``: bounds are checked against the dtype of ``x``."""

import numpy as np
import tensorflow as tf
from badinput import Array, Callable_, Case, Int, Kind, Real

from companion.gradients import (
    ClippedIdentity,
    clipped_identity,
    default_delta,
    gradient_error,
    log1p_exp,
    safe_norm,
    value_and_gradient,
)

X = np.linspace(-2.0, 2.0, 6, dtype="float32").reshape(2, 3)
FLOAT32_MAX = float(np.finfo("float32").max)
FLOATS = Array(extra_bad=(np.ones(3, "int32"), ["a", "b"]))
BOUND32 = Real(-FLOAT32_MAX, FLOAT32_MAX)
# A number or a float array broadcasting to x's shape (2, 3); NaN never.
BOUND = Kind(
    "a finite number or an array broadcasting to x",
    lambda v: BOUND32.accepts(v),
    extra_bad=(np.array([np.nan, 0.0, 0.0]), np.ones((2, 2)), np.ones((4, 2, 3)), ["a", "b", "c"]),
)
CHECKABLE = Kind(
    "float16, float32 or float64 (a name, NumPy or TensorFlow dtype)",
    lambda v: (
        v in ("float16", "float32", "float64")
        or v in (np.float16, np.float32, np.float64)
        or v in (tf.float16, tf.float32, tf.float64)
    ),
    extra_bad=("int32", tf.int32, np.int64),
)
FLOAT64 = np.linspace(-1.0, 1.0, 3)


def _layer_call(inputs):
    return ClippedIdentity()(inputs)


CASES = [
    Case(
        "clipped_identity",
        clipped_identity,
        {"x": X, "clip_min": -1.0, "clip_max": 1.0, "leak": 0.01},
        {"x": FLOATS, "clip_min": BOUND, "clip_max": BOUND, "leak": Real(0, FLOAT32_MAX)},
        names={"clip_min": ("clip_min", "clip_max"), "clip_max": ("clip_min", "clip_max")},
    ),
    Case(
        "ClippedIdentity",
        ClippedIdentity,
        {"clip_min": -1.0, "clip_max": 1.0, "leak": 0.01},
        {"clip_min": BOUND32, "clip_max": BOUND32, "leak": Real(0, FLOAT32_MAX)},
        names={"clip_min": ("clip_min", "clip_max"), "clip_max": ("clip_min", "clip_max")},
    ),
    Case("ClippedIdentity.__call__", _layer_call, {"inputs": X}, {"inputs": FLOATS}),
    Case(
        "safe_norm",
        safe_norm,
        {"x": X, "axis": -1},
        {"x": Array(ranks=(1, 2, 3, 4)), "axis": Int(-2, 1)},
    ),
    Case("log1p_exp", log1p_exp, {"x": X}, {"x": FLOATS}),
    Case("default_delta", default_delta, {"dtype": "float64"}, {"dtype": CHECKABLE}),
    Case(
        "gradient_error",
        gradient_error,
        {"fn": tf.sin, "x": FLOAT64, "delta": None},
        {"fn": Callable_(), "x": FLOATS, "delta": Real(above=0).or_none()},
    ),
    Case(
        "value_and_gradient",
        value_and_gradient,
        {"fn": tf.square, "x": FLOAT64},
        {"fn": Callable_(), "x": FLOATS},
    ),
]
