"""Argument checks shared by every companion module: one rule per kind of argument, one message form.

Every message reads ``"<argument>: expected <what>, got <type> <value>"``, so a user sees which
argument was wrong, what it should have been and what arrived. Integers may be Python or NumPy
integers (``np.int64`` from an array is as good as ``int``); ``bool`` is never a number here,
and neither is a float with an integral value (``2.0`` for a count is a slip worth reporting).
Real numbers may be Python or NumPy scalars; NaN is rejected wherever a number is checked.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np


def describe(value: Any) -> str:
    """``"<type> <repr>"``, the ``got ...`` part of every message (long reprs shortened)."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def is_int(value: Any) -> bool:
    """True for Python and NumPy integers, False for ``bool`` and everything else."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_real(value: Any) -> bool:
    """True for Python and NumPy real scalars (ints included), False for ``bool``."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _range_text(minimum: float | None, maximum: float | None, above: float | None) -> str:
    parts = []
    if above is not None:
        parts.append(f"> {above:g}")
    if minimum is not None:
        parts.append(f">= {minimum:g}")
    if maximum is not None:
        parts.append(f"<= {maximum:g}")
    return " and ".join(parts)


def check_int(
    value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None, allow_none: bool = False
) -> int | None:
    """Return ``value`` as a Python int if it is an integer within ``[minimum, maximum]``.

    With ``allow_none``, ``None`` is accepted and returned as is.

    Raises:
        TypeError: If ``value`` is not a Python/NumPy integer (``bool`` and floats included).
        ValueError: If it is outside the range.
    """
    what = " ".join(filter(None, ["an int", _range_text(minimum, maximum, None), "or None" if allow_none else ""]))
    if value is None and allow_none:
        return None
    if not is_int(value):
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name}: expected {what}, got {describe(value)}")
    return int(value)


def check_real(
    value: Any,
    name: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    finite: bool = True,
) -> float:
    """Return ``value`` as a Python float if it is a real number in range (NaN never is).

    Args:
        value: The argument to check.
        name: The argument's name, for the message.
        minimum: Smallest allowed value (inclusive).
        maximum: Largest allowed value (inclusive).
        above: Exclusive lower bound (``above=0`` means positive).
        finite: Reject ``inf`` and ``-inf`` as well.

    Raises:
        TypeError: If ``value`` is not a real number (``bool`` included).
        ValueError: If it is NaN, infinite (when ``finite``) or outside the range.
    """
    what = " ".join(filter(None, ["a finite number" if finite else "a number",
                                  _range_text(minimum, maximum, above)]))
    if not is_real(value):
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    number = float(value)
    out_of_range = (
        math.isnan(number)
        or (finite and math.isinf(number))
        or (minimum is not None and number < minimum)
        or (maximum is not None and number > maximum)
        or (above is not None and number <= above)
    )
    if out_of_range:
        raise ValueError(f"{name}: expected {what}, got {describe(value)}")
    return number


def check_bool(value: Any, name: str) -> bool:
    """Return ``value`` if it is a ``bool`` (Python or NumPy), else raise TypeError."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a bool, got {describe(value)}")
    return bool(value)


def float_tensor(value: Any, name: str) -> Any:
    """Convert ``value`` to a tensor and insist on a floating-point dtype.

    Keras 3 weights (``keras.Variable``, what ``add_weight`` returns) convert like any tensor.

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
