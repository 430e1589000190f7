"""The one home of "does this hold a NaN or an infinity?", eagerly and inside a graph.

``has_nonfinite`` answers in Python for values already computed (a loss, weights, gradients,
a layer's output); ``nonfinite_flag`` answers with a tensor, for a compiled training step that
must decide without leaving the graph. Both work on every Keras backend, take a tensor, an
array, a variable or any nest of them (``None`` leaves skipped) and look only at floating-point
leaves.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from companion._checks import FLOAT_DTYPES


def _is_floating(dtype: Any) -> bool:
    """True for a floating dtype of any backend, NumPy's or its name (bfloat16 included, which
    NumPy does not count as floating)."""
    import keras

    try:
        name = keras.backend.standardize_dtype(getattr(dtype, "name", dtype))
    except ValueError:  # not a dtype Keras knows (a string, an object)
        return False
    return name in FLOAT_DTYPES


def _float_leaves(structure: Any) -> list[Any]:
    import keras

    leaves = []
    for leaf in keras.tree.flatten(structure):
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
        elif not np.isfinite(_float64_array(leaf)).all():
            return True
    return False


def _float64_array(leaf: Any) -> np.ndarray:
    """``leaf``'s values as a float64 array; through Keras for what NumPy cannot read itself (a
    torch tensor that requires grad or lives on a GPU)."""
    try:
        return np.asarray(leaf, dtype="float64")
    except NotImplementedError:  # a symbolic tensor has no values to read, through Keras neither
        raise
    except (TypeError, RuntimeError):
        import keras

        return keras.ops.convert_to_numpy(leaf).astype("float64")


def nonfinite_flag(structure: Any) -> Any:
    """A float32 tensor: 1.0 if any floating-point leaf holds NaN or ±inf, else 0.0 (safe inside a
    compiled step: ``tf.function``, ``jax.jit``)."""
    from keras import ops

    leaves = [ops.convert_to_tensor(leaf) for leaf in _float_leaves(structure)]
    if not leaves:
        return ops.zeros((), "float32")
    finite = ops.all(ops.stack([ops.all(ops.isfinite(leaf)) for leaf in leaves]))
    return 1.0 - ops.cast(finite, "float32")
