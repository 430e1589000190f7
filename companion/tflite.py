"""Does it deploy? Converting a SavedModel to TFLite, running it, and reading why it was refused.

Chapters 3 and 11 ask this of a blur through ``tf.py_function``, of ``native_blur`` and of the
compiled C++ op: the converter refuses ops it has no kernel for and names them in its error,
and the interpreter refuses custom ops that no TFLite kernel backs.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Any

import numpy as np
import tensorflow as tf

from companion._checks import check_bool, describe

__all__ = ["convert", "refused_ops", "run"]

#: How the converter names an op it cannot put into a TFLite file.
_REFUSED = re.compile(r"'tf\.(\w+)' op is neither a custom op nor a flex op")


def convert(saved_model_dir: str | os.PathLike, *, select_tf_ops: bool = False, custom_ops: bool = False) -> bytes:
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
        ValueError: If ``saved_model_dir`` is not a directory.
        Exception: The converter's own error when it refuses an op (its class is not public
            API); ``refused_ops(error)`` lists the ops it named.

    Example:
        >>> import keras, tempfile
        >>> inputs = keras.Input((3,))
        >>> path = tempfile.mkdtemp()
        >>> keras.Model(inputs, keras.layers.Dense(2)(inputs)).export(path, verbose=False)
        >>> convert(path)[4:8]
        b'TFL3'
    """
    if not isinstance(saved_model_dir, (str, os.PathLike)):
        raise TypeError(f"saved_model_dir: expected a path to a SavedModel directory, "
                        f"got {describe(saved_model_dir)}")
    if not os.path.isdir(saved_model_dir):
        raise ValueError(f"saved_model_dir: expected an existing SavedModel directory, "
                         f"got {os.fspath(saved_model_dir)!r}")
    select_tf_ops, custom_ops = check_bool(select_tf_ops, "select_tf_ops"), check_bool(custom_ops, "custom_ops")
    converter = tf.lite.TFLiteConverter.from_saved_model(os.fspath(saved_model_dir))
    if select_tf_ops:
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS]
    converter.allow_custom_ops = custom_ops
    return converter.convert()


def refused_ops(error: BaseException) -> list[str]:
    """The TensorFlow op names a failed ``convert`` refused, sorted (empty for another error)."""
    return sorted(set(_REFUSED.findall(str(error))))


def run(model_bytes: bytes, inputs: Any) -> np.ndarray:
    """Run a one-input TFLite model on a batch with the TFLite interpreter.

    Args:
        model_bytes: A flatbuffer from ``convert``.
        inputs: Array (or tensor) for the model's single input; the input is resized to its shape.

    Returns:
        The model's first output.

    Raises:
        TypeError: If ``model_bytes`` is not bytes.
        RuntimeError: The interpreter's error, e.g. for a custom op it has no kernel for.

    Example:
        >>> import keras, tempfile
        >>> inputs = keras.Input((3,))
        >>> path = tempfile.mkdtemp()
        >>> keras.Model(inputs, inputs * 2.0).export(path, verbose=False)
        >>> run(convert(path), np.ones((2, 3), np.float32)).tolist()
        [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
    """
    if not isinstance(model_bytes, bytes):
        raise TypeError(f"model_bytes: expected the bytes of a TFLite model (from convert), "
                        f"got {describe(model_bytes)}")
    batch = np.asarray(inputs)
    with warnings.catch_warnings():  # TF 2.20+ points to LiteRT, the interpreter's new home
        warnings.filterwarnings("ignore", message=".*tf.lite.Interpreter is deprecated", category=UserWarning)
        interpreter = tf.lite.Interpreter(model_content=model_bytes)
    index = interpreter.get_input_details()[0]["index"]
    interpreter.resize_tensor_input(index, batch.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(index, batch)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
