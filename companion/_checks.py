"""Input checks shared by the chapter modules (the public boundary's error messages)."""

from __future__ import annotations

from typing import Any


def float_tensor(value: Any, name: str) -> Any:
    """Convert ``value`` to a tensor and insist on a floating-point dtype.

    Raises:
        TypeError: Naming ``name``, if ``value`` is not convertible or not floating point.
    """
    import tensorflow as tf

    try:
        tensor = tf.convert_to_tensor(value)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name}: expected a floating-point tensor, got {type(value).__name__}") from error
    if not tensor.dtype.is_floating:
        raise TypeError(
            f"{name}: expected a floating-point tensor (float16, bfloat16, float32 or float64),"
            f" got dtype {tensor.dtype.name}; cast it first, e.g. tf.cast({name}, tf.float32)"
        )
    return tensor
