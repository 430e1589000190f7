"""Bad inputs for ``companion.gradients``: bounds are checked against the dtype of ``x``."""

import numpy as np
import tensorflow as tf
from helpers.badinput import Array, Callable_, Case, Int, Kind, Real

from companion.gradients import (
    ClippedIdentity,
    clipped_identity,
    default_delta,
    gradient_error,
    gradient_penalty,
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


REAL, FAKE = np.ones((4, 2), "float32"), np.zeros((4, 2), "float32")
# real and fake: float32 batches of shape (4, 2) each (the other one fixed); a mismatch may be
# reported under either name.
BATCH = Array(extra_bad=(np.ones((4, 3), "float32"), np.ones((4, 2), "float64"), np.zeros((0, 2))))
BATCH = Kind(
    "a float32 array of shape (4, 2)",
    lambda v: np.asarray(v).shape == (4, 2) and np.asarray(v).dtype == np.float32,
    BATCH.extra_bad,
)
ALPHA = Kind(
    "None, a number in [0, 1] or a float array of shape (4,) in [0, 1]",
    lambda v: (
        v is None
        or Real(0, 1).accepts(v)
        or (
            np.asarray(v).dtype.kind == "f"
            and np.asarray(v).shape == (4,)
            and bool(np.all((np.asarray(v) >= 0) & (np.asarray(v) <= 1)))
        )
    ),
    extra_bad=(np.full(4, 1.5), np.full(4, np.nan), np.ones(4, "int32"), np.full(3, 0.5)),
)


def _score_sum(x):
    return tf.reduce_sum(x * [3.0, 4.0], axis=-1)


def _layer_call(inputs):
    return ClippedIdentity()(inputs)


CASES = [
    Case(
        "clipped_identity",
        clipped_identity,
        {"x": X, "clip_min": -1.0, "clip_max": 1.0, "leak": 0.01},
        {"x": FLOATS, "clip_min": BOUND, "clip_max": BOUND, "leak": Real(0, FLOAT32_MAX)},
    ),
    Case(
        "ClippedIdentity",
        ClippedIdentity,
        {"clip_min": -1.0, "clip_max": 1.0, "leak": 0.01},
        {"clip_min": BOUND32, "clip_max": BOUND32, "leak": Real(0, FLOAT32_MAX)},
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
    Case(
        "gradient_penalty",
        gradient_penalty,
        {"critic": _score_sum, "real": REAL, "fake": FAKE, "alpha": None, "seed": 0},
        {
            "critic": Callable_(),
            "real": BATCH,
            "fake": BATCH,
            "alpha": ALPHA,
            "seed": Int(0, 2**32 - 1).or_none(),
        },
        names={"real": ("real", "fake"), "fake": ("real", "fake")},
    ),
]
