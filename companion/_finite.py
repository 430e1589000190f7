"""The one home of "does this hold a NaN or an infinity?", eagerly and inside a graph.

``has_nonfinite`` answers in Python for values already computed (a loss, weights, gradients,
a layer's output); ``nonfinite_flag`` answers with a tensor, for a compiled training step that
must decide without leaving the graph. Both take a tensor, an array, a variable or any nest of
them (``None`` leaves skipped) and look only at floating-point leaves.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _is_floating(dtype: Any) -> bool:
    """True for a floating dtype: NumPy's, TensorFlow's or its name (bfloat16 included, which
    NumPy does not count as floating)."""
    import tensorflow as tf

    return tf.as_dtype(getattr(dtype, "name", dtype)).is_floating


def _float_leaves(structure: Any) -> list[Any]:
    import tensorflow as tf

    leaves = []
    for leaf in tf.nest.flatten(structure):
        if leaf is None:
            continue
        dtype = getattr(leaf, "dtype", None)
        if dtype is None and isinstance(leaf, (int, float)):
            leaves.append(float(leaf))
        elif dtype is not None and _is_floating(dtype):
            leaves.append(leaf)
    return leaves


def has_nonfinite(structure: Any) -> bool:
    """True if any floating-point leaf of ``structure`` (eager values) holds NaN or ±inf."""
    for leaf in _float_leaves(structure):
        if isinstance(leaf, float):
            if not math.isfinite(leaf):
                return True
        elif not np.isfinite(np.asarray(leaf, dtype="float64")).all():
            return True
    return False


def nonfinite_flag(structure: Any) -> Any:
    """A float32 tensor: 1.0 if any floating-point leaf holds NaN or ±inf, else 0.0 (graph-safe)."""
    import tensorflow as tf

    leaves = [tf.convert_to_tensor(leaf) for leaf in _float_leaves(structure)]
    if not leaves:
        return tf.constant(0.0)
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(leaf)) for leaf in leaves])
    return 1.0 - tf.cast(finite, tf.float32)
