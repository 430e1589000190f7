"""companion.tflite: convert a Keras export, run it, name the ops the converter refuses."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from companion.pyfunc import GaussianBlur, py_function_blur
from companion.tflite import convert, refused_ops, run


def export(tmp_path, layer, shape=(8, 8, 3)):
    inputs = keras.Input(shape)
    model = keras.Model(inputs, layer(inputs))
    model.export(tmp_path / "model", verbose=False)
    return model, tmp_path / "model"


def test_a_keras_layer_converts_and_runs_like_keras(tmp_path):
    model, path = export(tmp_path, GaussianBlur(ksize=3))  # a layer inside a model, exported by Keras
    images = np.random.default_rng(0).random((2, 8, 8, 3), dtype=np.float32)
    assert np.abs(run(convert(path), images) - model(images).numpy()).max() < 1e-5


# EnsureShape (which keeps py_function_blur's static shape) is a flex op: SELECT_TF_OPS bundles it.
@pytest.mark.parametrize("select_tf_ops, refused", [(False, ["EagerPyFunc", "EnsureShape"]), (True, ["EagerPyFunc"])])
def test_a_py_function_is_refused_and_named(tmp_path, select_tf_ops, refused):
    _, path = export(tmp_path, keras.layers.Lambda(py_function_blur))
    with pytest.raises(Exception) as caught:  # the converter's ConverterError is not public API
        convert(path, select_tf_ops=select_tf_ops)
    assert refused_ops(caught.value) == refused


def test_refused_ops_is_empty_for_another_error():
    assert refused_ops(ValueError("something else")) == []


def test_a_tensor_batch_is_accepted(tmp_path):
    _, path = export(tmp_path, keras.layers.Rescaling(2.0), shape=(3,))
    assert run(convert(path), tf.ones((4, 3))).tolist() == [[2.0] * 3] * 4


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda p: convert(123), TypeError, "^saved_model_dir: expected a path to a SavedModel directory, got int 123"),
        (lambda p: convert(p / "missing"), ValueError, "^saved_model_dir: expected an existing SavedModel directory"),
        (lambda p: convert(p, select_tf_ops="yes"), TypeError, "^select_tf_ops: expected"),
        (lambda p: run("model.tflite", np.ones(2)), TypeError, "^model_bytes: expected the bytes of a TFLite model"),
    ],
)
def test_bad_input_is_named(tmp_path, call, error, match):
    with pytest.raises(error, match=match):
        call(tmp_path)
