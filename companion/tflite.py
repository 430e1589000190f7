"""Does it deploy? Converting a SavedModel to TFLite, running it, and reading why it was refused.

Chapters 3 and 13 ask this of a blur through ``tf.py_function``, of ``native_blur`` and of the
compiled C++ op: the converter refuses ops it has no kernel for and names them in its error,
and the interpreter refuses custom ops that no TFLite kernel backs.

Backends: TensorFlow only (on JAX use jax2tf + TF's converter; on PyTorch use ``litert-torch``).
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from companion._backend import require_tensorflow

require_tensorflow(
    "companion.tflite",
    {
        "jax": (
            'jax2tf with TensorFlow\'s TFLite converter (Keras 3.15 refuses format="litert" on JAX)'
        ),
        "torch": (
            "litert_torch.convert(model, sample_inputs) from the litert-torch package "
            '(Keras 3.15 wraps it as format="litert"; Keras 3.13.2 refuses that on PyTorch)'
        ),
    },
)

import tensorflow as tf  # noqa: E402

from companion._checks import check_bool, check_instance, check_path, describe  # noqa: E402

__all__ = ["convert", "refused_ops", "run"]

#: How the converter names an op it cannot put into a TFLite file.
_REFUSED = re.compile(r"'tf\.(\w+)' op is neither a custom op nor a flex op")


def convert(
    saved_model_dir: str | os.PathLike, *, select_tf_ops: bool = False, custom_ops: bool = False
) -> bytes:
    """Convert a SavedModel directory to a TFLite flatbuffer.

    Args:
        saved_model_dir: Directory written by ``model.export`` or ``tf.saved_model.save``.
        select_tf_ops: Also allow TensorFlow ops TFLite can bundle (``SELECT_TF_OPS``, the
            "flex" ops) besides its built-in ones.
        custom_ops: Let unknown ops through as custom ops (``allow_custom_ops``); the
            interpreter then needs a TFLite kernel registered for each.

    Returns:
        The ``.tflite`` file's bytes.

    Raises:
        TypeError: If ``saved_model_dir`` is not a path or a flag is not a bool.
        ValueError: If ``saved_model_dir`` is empty or not a directory holding ``saved_model.pb``.
        Exception: The converter's own error when it refuses an op (its class is not public
            API); ``refused_ops(error)`` lists the ops it named.

    Example:
        >>> import keras, tempfile
        >>> inputs = keras.Input((3,))
        >>> path = tempfile.mkdtemp()
        >>> model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
        >>> model.export(path, verbose=False)
        >>> convert(path)[4:8]
        b'TFL3'

    Taught in chapter 3, "TFLite refuses the wrappers".
    """
    select_tf_ops, custom_ops = (
        check_bool(select_tf_ops, "select_tf_ops"),
        check_bool(custom_ops, "custom_ops"),
    )
    saved_model_dir = _check_saved_model_dir(saved_model_dir)
    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model_dir))
    if select_tf_ops:
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.TFLITE_BUILTINS,
            tf.lite.OpsSet.SELECT_TF_OPS,
        ]
    converter.allow_custom_ops = custom_ops
    return converter.convert()


def _check_saved_model_dir(value: Any) -> Path:
    path = check_path(value, "saved_model_dir")
    if not (path / "saved_model.pb").is_file():
        raise ValueError(
            f"saved_model_dir: expected an existing SavedModel directory (with saved_model.pb), "
            f"got {describe(value)}"
        )
    return path


def refused_ops(error: BaseException) -> list[str]:
    """The TensorFlow op names a failed ``convert`` refused, sorted (empty for another error).

    Raises:
        TypeError: If ``error`` is not an exception.

    Taught in chapter 3, "TFLite refuses the wrappers".
    """
    check_instance(error, "error", BaseException, "an exception")
    return sorted(set(_REFUSED.findall(str(error))))


def _input_text(detail: dict[str, Any]) -> str:
    """``"an array of shape (None, 3) (float32)"`` for an interpreter's input details."""
    shape = tuple(None if size < 0 else int(size) for size in detail["shape_signature"])
    return f"an array of shape {shape} ({np.dtype(detail['dtype'])})"


def _checked_batch(inputs: Any, detail: dict[str, Any]) -> np.ndarray:
    """``inputs`` as an array of the input's dtype.

    If its shape fits and it casts within its kind.
    """
    what, dtype = _input_text(detail), np.dtype(detail["dtype"])
    try:
        batch = np.asarray(inputs)
    except (TypeError, ValueError) as error:
        raise TypeError(f"inputs: expected {what}, got {describe(inputs)}") from error
    if not np.can_cast(batch.dtype, dtype, "same_kind") or batch.dtype.kind not in "biuf":
        raise TypeError(
            f"inputs: expected {what}, got {type(inputs).__name__} of dtype {batch.dtype}"
            f" (it does not cast to {dtype} within its kind)"
        )
    signature = detail["shape_signature"]
    if batch.ndim != len(signature) or any(
        0 <= size != got for size, got in zip(signature, batch.shape)
    ):
        raise ValueError(
            f"inputs: expected {what}, got {type(inputs).__name__} of shape {batch.shape}"
        )
    return batch.astype(dtype, copy=False)


def run(model_bytes: bytes, inputs: Any) -> np.ndarray:
    """Run a one-input TFLite model on a batch with the TFLite interpreter.

    Args:
        model_bytes: A flatbuffer from ``convert``.
        inputs: Array (or tensor) for the model's single input, of its shape (any size where
            the model has ``None``); cast to the input's dtype within its kind (float64 and
            integers to float32, never floats to integers). An empty batch gives an empty output.

    Returns:
        The model's first output.

    Raises:
        TypeError: If ``model_bytes`` is not bytes, or ``inputs`` does not cast to the
            input's dtype.
        ValueError: If ``model_bytes`` is not a TFLite model of one input, or ``inputs`` has another
            shape than the model's input.
        RuntimeError: The interpreter's error, e.g. for a custom op it has no kernel for.

    Example:
        >>> import keras, tempfile
        >>> inputs = keras.Input((3,))
        >>> path = tempfile.mkdtemp()
        >>> keras.Model(inputs, inputs * 2.0).export(path, verbose=False)
        >>> run(convert(path), np.ones((2, 3), np.float32)).tolist()
        [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]

    Taught in chapter 3, "TFLite refuses the wrappers".
    """
    interpreter = _interpreter(model_bytes)
    detail = interpreter.get_input_details()[0]
    batch = _checked_batch(inputs, detail)
    interpreter.resize_tensor_input(detail["index"], batch.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(detail["index"], batch)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def _interpreter(model_bytes: Any) -> Any:
    """A TFLite interpreter for ``model_bytes``, a model of one input."""
    what = "the bytes of a TFLite model (from convert)"
    check_instance(model_bytes, "model_bytes", bytes, what)
    if model_bytes[4:8] != b"TFL3":  # the flatbuffer's file identifier
        raise ValueError(f"model_bytes: expected {what}, got {describe(model_bytes)}")
    with warnings.catch_warnings():  # TF 2.20+ points to LiteRT, the interpreter's new home
        warnings.filterwarnings(
            "ignore", message=".*tf.lite.Interpreter is deprecated", category=UserWarning
        )
        interpreter = tf.lite.Interpreter(model_content=model_bytes)
    inputs = len(interpreter.get_input_details())
    if inputs != 1:
        raise ValueError(
            f"model_bytes: expected {what} with one input, got a model of {inputs} inputs"
        )
    return interpreter
