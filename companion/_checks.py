"""Argument checks shared by every companion module: one rule per kind of argument, one
message form.

Every message reads ``"<argument>: expected <what>, got <type> <value>"``, so a user sees which
argument was wrong, what it should have been and what arrived. Integers may be Python or NumPy
integers (``np.int64`` from an array is as good as ``int``); ``bool`` is never a number here,
and neither is a float with an integral value (``2.0`` for a count is a slip worth reporting).
Real numbers may be Python or NumPy scalars; NaN is rejected wherever a number is checked, and a
number that will live in a tensor is checked against what that tensor's dtype can hold
(``dtype=``): ``1e300`` is finite in Python and ``inf`` in float32.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

#: The largest seed every random API here takes (NumPy's and TensorFlow's both take 32 bits).
MAX_SEED = 2**32 - 1

#: The floating dtypes, as ``keras.backend.standardize_dtype`` names them on every backend.
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def shorten(text: str, limit: int = 60) -> str:
    """``text`` cut to at most ``limit`` characters, ending in ``...`` when cut (the one place a
    message or a repr is shortened)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(value: Any) -> str:
    """``"<type> <repr>"``, the ``got ...`` part of every message (long reprs shortened).

    An array, tensor or variable whose repr is long or spans lines is described by its shape
    and dtype instead (``EagerTensor of shape (32, 32, 3) and dtype float32``), as is one whose
    repr raises (older Keras 3 releases read a ``keras.Variable``'s value for its repr, which
    fails inside a ``tf.function``).
    """
    kind = type(value).__name__
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - any failure of a user object's repr
        text = None
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None and (text is None or "\n" in text or len(text) > 60):
        return f"{kind} of shape {tuple(shape)} and dtype {getattr(dtype, 'name', dtype)}"
    text = f"<{kind} object>" if text is None else text
    return f"{kind} {shorten(text)}"


def is_int(value: Any) -> bool:
    """True for Python and NumPy integers, False for ``bool`` and everything else."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_real(value: Any) -> bool:
    """True for Python and NumPy real scalars (ints included), False for ``bool``."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _number_text(number: float) -> str:
    """An int as written (``1000000000000``, never ``1e+12``); other numbers in ``g`` form."""
    return str(int(number)) if is_int(number) else f"{number:g}"


def _range_text(minimum: float | None, maximum: float | None, above: float | None) -> str:
    parts = []
    if above is not None:
        parts.append(f"> {_number_text(above)}")
    if minimum is not None:
        parts.append(f">= {_number_text(minimum)}")
    if maximum is not None:
        parts.append(f"<= {_number_text(maximum)}")
    return " and ".join(parts)


def dtype_max(dtype: Any) -> float:
    """The largest finite value of a floating ``dtype`` (a name, NumPy or TensorFlow dtype)."""
    name = getattr(dtype, "name", dtype)
    if name == "bfloat16":
        return 3.3895313892515355e38
    return float(np.finfo(np.dtype(name)).max)


def check_int(
    value: Any,
    name: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    allow_none: bool = False,
) -> int | None:
    """Return ``value`` as a Python int if it is an integer within ``[minimum, maximum]``.

    With ``allow_none``, ``None`` is accepted and returned as is.

    Raises:
        TypeError: If ``value`` is not a Python/NumPy integer (``bool`` and floats included).
        ValueError: If it is outside the range.
    """
    what = " ".join(
        filter(
            None, ["an int", _range_text(minimum, maximum, None), "or None" if allow_none else ""]
        )
    )
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
    dtype: Any = None,
) -> float:
    """Return ``value`` as a Python float if it is a real number in range (NaN never is).

    Args:
        value: The argument to check.
        name: The argument's name, for the message.
        minimum: Smallest allowed value (inclusive).
        maximum: Largest allowed value (inclusive).
        above: Exclusive lower bound (``above=0`` means positive).
        finite: Reject ``inf`` and ``-inf`` as well.
        dtype: The floating dtype the value will be held in: its largest finite value caps the
            range on both sides (``1e300`` is ``inf`` in float32).

    Raises:
        TypeError: If ``value`` is not a real number (``bool`` included).
        ValueError: If it is NaN, infinite (when ``finite``) or outside the range.
    """
    if dtype is not None:
        minimum, maximum = _capped_by_dtype(dtype, minimum, maximum, above)
    what = " ".join(
        filter(
            None,
            ["a finite number" if finite else "a number", _range_text(minimum, maximum, above)],
        )
    )
    if not is_real(value):
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    number = float(value)
    if not _is_in_range(number, minimum, maximum, above, finite=finite):
        raise ValueError(f"{name}: expected {what}, got {describe(value)}")
    return number


def _capped_by_dtype(
    dtype: Any, minimum: float | None, maximum: float | None, above: float | None
) -> tuple[float | None, float]:
    """``(minimum, maximum)`` narrowed to what ``dtype`` holds (the lower bound only when
    ``above`` does not set one)."""
    largest = dtype_max(dtype)
    maximum = largest if maximum is None else min(maximum, largest)
    if above is None:
        minimum = -largest if minimum is None else max(minimum, -largest)
    return minimum, maximum


def _is_in_range(
    number: float,
    minimum: float | None,
    maximum: float | None,
    above: float | None,
    *,
    finite: bool,
) -> bool:
    """False for NaN, for an infinity when ``finite``, and for a number outside the bounds."""
    if math.isnan(number) or (finite and math.isinf(number)):
        return False
    too_small = (minimum is not None and number < minimum) or (
        above is not None and number <= above
    )
    return not too_small and (maximum is None or number <= maximum)


def check_clip_norm(clip_norm: Any) -> float | None:
    """None, or a global norm that float32 holds: finite, and not so small that it rounds to 0."""
    if clip_norm is None:
        return None
    # It lives in a float32 tensor: it must be finite there and must not round to 0.
    smallest, largest = float(np.finfo(np.float32).tiny), dtype_max("float32")
    number = check_real(clip_norm, "clip_norm", above=0, maximum=largest)
    if number < smallest:
        raise ValueError(
            f"clip_norm: expected a finite number >= {smallest:g} (the smallest normal float32) "
            f"and <= {largest:g}, got {describe(clip_norm)}"
        )
    return number


def check_fraction(
    value: Any, name: str, *, above_zero: bool = False, below_one: bool = False
) -> float:
    """Return ``value`` as a float in ``[0, 1]`` (each end excluded on request)."""
    number = check_real(
        value,
        name,
        minimum=None if above_zero else 0.0,
        maximum=None if below_one else 1.0,
        above=0.0 if above_zero else None,
    )
    if below_one and number >= 1.0:
        raise ValueError(
            f"{name}: expected a finite number {'> 0' if above_zero else '>= 0'} and < 1,"
            f" got {describe(value)}"
        )
    return number


def check_seed(value: Any, name: str = "seed", *, allow_none: bool = False) -> int | None:
    """Return ``value`` as an int seed in ``[0, 2**32 - 1]`` (``None`` too, with ``allow_none``)."""
    return check_int(value, name, minimum=0, maximum=MAX_SEED, allow_none=allow_none)


def check_odd_int(value: Any, name: str, *, maximum: int) -> int:
    """Return ``value`` as a Python int if it is an odd int from 1 to ``maximum`` (a kernel's
    length); every bad value gets the same message, which states the whole rule."""
    what = f"an odd int >= 1 and <= {maximum}"
    if not is_int(value):
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    if not (1 <= value <= maximum and value % 2 == 1):
        raise ValueError(f"{name}: expected {what}, got {describe(value)}")
    return int(value)


def check_instance(value: Any, name: str, types: type | tuple[type, ...], what: str) -> Any:
    """Return ``value`` if it is an instance of ``types``.

    Else TypeError ``"<name>: expected <what>, ..."``.
    """
    if not isinstance(value, types):
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    return value


def check_callable(value: Any, name: str, what: str = "a callable") -> Any:
    """Return ``value`` if it can be called; else TypeError naming ``name``."""
    if not callable(value):
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    return value


def check_calls(value: Any, name: str) -> dict[str, Callable[..., Any]]:
    """Return ``value`` as a dict if it is a non-empty mapping of str names to callables.

    Raises:
        TypeError: If it is not a mapping, a key is not a str or a value not callable.
        ValueError: If it is empty.
    """
    what = "a non-empty mapping of names to callables"
    check_instance(value, name, Mapping, what)
    if not value:
        raise ValueError(f"{name}: expected {what}, got {describe(value)}")
    for key, call in value.items():
        check_instance(key, f"{name}[{key!r}]", str, "a str name")
        check_callable(call, f"{name}[{key!r}]")
    return dict(value)


def check_str(value: Any, name: str, what: str = "a non-empty str") -> str:
    """Return ``value`` if it is a non-empty ``str`` (an empty name or path is a slip)."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    if not value:
        raise ValueError(f"{name}: expected {what}, got an empty str")
    return value


def check_device(value: Any, name: str = "device") -> str:
    """Return ``value`` if it is a device string naming a device TensorFlow has (``"/CPU:0"``,
    ``"cpu:0"``, ``"/GPU"``: any index).

    Raises:
        TypeError: If ``value`` is not a str.
        ValueError: If it is not a device string, or names a device TensorFlow does not have.
    """
    import tensorflow as tf

    check_str(value, name, "a device string such as '/CPU:0'")
    known = [tf.DeviceSpec.from_string(d.name) for d in tf.config.list_logical_devices()]
    try:
        wanted = tf.DeviceSpec.from_string(value if value.startswith("/") else "/" + value)
    except ValueError as error:
        raise ValueError(
            f"{name}: expected a device string such as '/GPU:0', got {describe(value)}"
        ) from error
    if not any(
        (k.device_type or "").upper() == (wanted.device_type or "").upper()
        and wanted.device_index in (None, k.device_index)
        for k in known
    ):
        names = [k.to_string() for k in known]
        raise ValueError(
            f"{name}: expected one of the devices TensorFlow has, {names}, got {describe(value)}"
        )
    return value


def check_path(value: Any, name: str) -> Any:
    """Return ``value`` as a ``pathlib.Path``: a non-empty ``str`` or ``os.PathLike``.

    ``''`` is no folder, so it is refused.
    """
    import os
    from pathlib import Path

    what = "a non-empty path (str or os.PathLike)"
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    text = os.fspath(value)
    if not isinstance(text, str) or not text:
        raise ValueError(f"{name}: expected {what}, got {describe(value)}")
    return Path(text)


def check_choice(value: Any, name: str, choices: Sequence[Any]) -> Any:
    """Return ``value`` if it equals one of ``choices`` (of the same type).

    Else a ValueError listing them.
    """
    for choice in choices:
        if type(value) is type(choice) and value == choice:
            return value
    options = ", ".join(repr(choice) for choice in choices)
    error = ValueError if any(type(value) is type(choice) for choice in choices) else TypeError
    raise error(f"{name}: expected one of {options}, got {describe(value)}")


def check_sequence(
    value: Any,
    name: str,
    what: str,
    *,
    item: Callable[[Any, str], Any] | None = None,
    min_length: int = 1,
) -> tuple[Any, ...]:
    """Return ``value`` as a tuple if it is a list or tuple of at least ``min_length`` items.

    Strings, mappings and sets are refused (a str would be read one character at a time, a
    dict by its keys, a set in no fixed order). ``item(element, "<name>[i]")`` checks each
    element and returns it as it should be stored.
    """
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    if len(value) < min_length:
        raise ValueError(f"{name}: expected {what}, got {describe(value)}")
    if item is None:
        return tuple(value)
    return tuple(item(element, f"{name}[{index}]") for index, element in enumerate(value))


def check_bool(value: Any, name: str) -> bool:
    """Return ``value`` if it is a ``bool`` (Python or NumPy), else raise TypeError."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a bool, got {describe(value)}")
    return bool(value)


def float_tensor(value: Any, name: str) -> Any:
    """Convert ``value`` to a tensor of the running Keras backend and insist on a floating dtype.

    Keras 3 weights (``keras.Variable``, what ``add_weight`` returns) convert like any tensor.
    Works on every backend (``keras.ops.convert_to_tensor``).

    Raises:
        TypeError: Naming ``name``, if ``value`` is not convertible or not floating point.
    """
    import keras

    try:
        # A keras.Variable is read (on TensorFlow convert_to_tensor hands back the variable).
        tensor = keras.ops.convert_to_tensor(
            value.value if isinstance(value, keras.Variable) else value
        )
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(
            f"{name}: expected a floating-point tensor, got {describe(value)}"
        ) from error
    dtype = keras.backend.standardize_dtype(tensor.dtype)
    if dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name}: expected a floating-point tensor (float16, bfloat16, float32 or float64),"
            f' got dtype {dtype}; cast it first, e.g. keras.ops.cast({name}, "float32")'
        )
    return tensor


def dtype_tiny(dtype: Any) -> float:
    """The smallest positive normal value of a floating ``dtype`` (a name, NumPy or TensorFlow
    dtype): a divisor below it is flushed to zero on most devices."""
    name = getattr(dtype, "name", dtype)
    if name == "bfloat16":
        return 1.1754943508222875e-38
    return float(np.finfo(np.dtype(name)).tiny)
