"""Checking, describing and calling on the inputs a diagnostic is given: an error names the
argument and says what the call raised.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np

from companion._checks import (
    check_instance,
    describe,
)
from companion._finite import has_nonfinite
from companion._text import error_text


def host_array(value: Any) -> np.ndarray:
    """``value`` as a NumPy array: a backend tensor or Variable through ``convert_to_numpy`` (a
    torch tensor that requires grad, a JAX array), anything else through ``np.asarray``."""
    if isinstance(value, keras.Variable) or keras.ops.is_tensor(value):
        return keras.ops.convert_to_numpy(value)
    return np.asarray(value)


def to_numpy(structure: Any) -> list[np.ndarray]:
    """The leaves of a (nested) output as NumPy arrays, in ``keras.tree`` (= ``tf.nest``) order."""
    return [host_array(leaf) for leaf in keras.tree.flatten(structure)]


def check_layer(value: Any, name: str) -> keras.layers.Layer:
    """``value`` if it is a Keras layer or model (TypeError naming ``name`` otherwise)."""
    return check_instance(value, name, keras.layers.Layer, "a Keras layer or model")


def describe_input(value: Any) -> str:
    """``"ndarray of shape (2, 3) and dtype float32"`` for an array or tensor (also in a dict);
    else ``describe`` on one line."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        dtype = getattr(value.dtype, "name", value.dtype)
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {dtype}"
    if isinstance(value, dict):
        return (
            "dict {"
            + ", ".join(f"{key!r}: {describe_input(item)}" for key, item in value.items())
            + "}"
        )
    return " ".join(describe(value).split())


def as_arrays(value: Any, name: str, *, numbers: bool = True) -> Any:
    """``value`` (an array or tensor, or a list, tuple or dict of them) with NumPy arrays as leaves.

    Raises:
        TypeError: If a leaf is no array (of numbers, when ``numbers``).
        ValueError: If ``value`` holds no array at all (an empty list or dict).
    """
    what = "an array, or a list, tuple or dict of arrays" + (" of numbers" if numbers else "")
    try:
        arrays = keras.tree.map_structure(host_array, value)
    except (TypeError, ValueError) as error:  # ragged lists, objects NumPy cannot hold
        raise TypeError(f"{name}: expected {what}, got {describe(value)}") from error
    leaves = keras.tree.flatten(arrays)
    if not leaves:
        raise ValueError(f"{name}: expected {what}, got {describe(value)}")
    if any(leaf.dtype.kind not in ("biuf" if numbers else "biufcSU") for leaf in leaves):
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    return arrays


def finite_arrays(value: Any, name: str) -> list[np.ndarray]:
    """The leaves of ``value`` as arrays of finite numbers (NaN or Inf is no layer's fault)."""
    leaves = keras.tree.flatten(as_arrays(value, name))
    if has_nonfinite(leaves):
        raise ValueError(
            f"{name}: expected finite values, got NaN or Inf: no layer is to blame; "
            "clean the data (e.g. tf.debugging.assert_all_finite in the input pipeline)"
        )
    return leaves


@contextlib.contextmanager
def blaming(name: str, what: str, value: Any) -> Iterator[None]:
    """In the block, an error means that ``value`` does not fit: a ValueError naming ``name``."""
    try:
        yield
    except Exception as error:  # whatever the call raises tells why this value does not fit
        raise ValueError(
            f"{name}: expected {what}, got {describe_input(value)}; "
            f"the call raised {error_text(error)}"
        ) from error


def call_on(obj: Any, value: Any, name: str, **kwargs: Any) -> Any:
    """``obj(value, **kwargs)``; if that fails, ``value`` does not fit: a ValueError naming it."""
    with blaming(name, f"an input {subject_of(obj)} accepts", value):
        return obj(value, **kwargs)


def subject_of(obj: Any) -> str:
    """``"Dense 'dense'"``: the object's class and, if it has one, its name."""
    name = getattr(obj, "name", None)
    return type(obj).__name__ if name is None else f"{type(obj).__name__} {name!r}"
