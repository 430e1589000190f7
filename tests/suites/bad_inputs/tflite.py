"""Bad inputs for ``companion.tflite``: a SavedModel directory, the bytes of a TFLite model and a
batch of the model's input shape (None, 3), float32."""

import functools
import os
import tempfile

import keras
import numpy as np
from helpers.badinput import Bool, Case, Instance, Kind

from companion.tflite import convert, refused_ops, run

#: Scratch space for this module's files, removed when the test process exits.
_SCRATCH = tempfile.TemporaryDirectory(prefix="badinput_tflite_")


@functools.cache
def _saved_model() -> str:
    """A tiny exported model (input (None, 3) float32), made once on first use."""
    inputs = keras.Input((3,))
    path = os.path.join(_SCRATCH.name, "model")
    keras.Model(inputs, inputs * 2.0).export(path, verbose=False)
    return path


@functools.cache
def _model_bytes() -> bytes:
    return convert(_saved_model())


def _missing_dir() -> str:
    return os.path.join(_SCRATCH.name, "no_such_dir")


def _not_a_saved_model() -> str:
    return tempfile.mkdtemp(prefix="empty_", dir=_SCRATCH.name)


SAVED_MODEL_DIR = Kind(
    "an existing SavedModel directory",
    lambda v: (
        isinstance(v, (str, os.PathLike))
        and v != ""
        and os.path.isfile(os.path.join(v, "saved_model.pb"))
    ),
    extra_bad=(_missing_dir(), _not_a_saved_model(), __file__),
)
MODEL_BYTES = Kind(
    "the bytes of a TFLite model",
    lambda v: isinstance(v, bytes) and v[4:8] == b"TFL3",
    extra_bad=(b"not a model at all",),
)
BATCH = Kind(
    "a batch of shape (n, 3) that casts to float32 within its kind",
    lambda v: isinstance(v, np.ndarray) and v.ndim == 2 and v.shape[1] == 3 and v.dtype.kind == "f",
    extra_bad=(
        np.ones((3, 2), "float32"),
        np.ones((2, 3, 1), "float32"),
        np.ones(3, "float32"),
        np.array([["a", "b", "c"]]),
        np.ones((2, 3), "complex64"),
    ),
)

CASES = [
    Case(
        "convert",
        convert,
        lambda: {"saved_model_dir": _saved_model(), "select_tf_ops": False, "custom_ops": False},
        {"saved_model_dir": SAVED_MODEL_DIR, "select_tf_ops": Bool(), "custom_ops": Bool()},
    ),
    Case(
        "refused_ops",
        refused_ops,
        {"error": ValueError("x")},
        {"error": Instance(BaseException, what="an exception")},
    ),
    Case(
        "run",
        run,
        lambda: {"model_bytes": _model_bytes(), "inputs": np.ones((2, 3), "float32")},
        {"model_bytes": MODEL_BYTES, "inputs": BATCH},
    ),
]
