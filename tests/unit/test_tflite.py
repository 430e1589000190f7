"""companion.tflite: convert a Keras export, run it, name the ops the converter refuses."""

import re

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
    # a layer inside a model, exported by Keras
    model, path = export(tmp_path, GaussianBlur(ksize=3))
    images = np.random.default_rng(0).random((2, 8, 8, 3), dtype=np.float32)
    assert np.abs(run(convert(path), images) - model(images).numpy()).max() < 1e-5


# EnsureShape (which keeps py_function_blur's static shape) is a flex op: SELECT_TF_OPS bundles it.
@pytest.mark.parametrize(
    "select_tf_ops, refused", [(False, ["EagerPyFunc", "EnsureShape"]), (True, ["EagerPyFunc"])]
)
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


@pytest.fixture(scope="module")
def doubling_model(tmp_path_factory):
    """A TFLite model of input (None, 3) float32 that doubles it."""
    path = tmp_path_factory.mktemp("doubling") / "model"
    inputs = keras.Input((3,))
    keras.Model(inputs, inputs * 2.0).export(path, verbose=False)
    return convert(path)


@pytest.mark.parametrize(
    "batch", [np.ones((3, 2), "float32"), np.ones((2, 3, 1), "float32"), np.ones(3, "float32")]
)
def test_run_refuses_a_batch_of_another_shape(doubling_model, batch):
    # before: a (3, 2) batch was reshaped to fit and silently gave 2 rows
    with pytest.raises(
        ValueError,
        match=r"^inputs: expected an array of shape \(None, 3\) \(float32\), got ndarray of "
        rf"shape {re.escape(str(batch.shape))}",
    ):
        run(doubling_model, batch)


@pytest.mark.parametrize(
    "batch", [np.ones((2, 3), "complex64"), np.array([["a", "b", "c"]]), [[None, 1, 2]]]
)
def test_run_refuses_a_batch_that_does_not_cast_to_the_input_dtype(doubling_model, batch):
    with pytest.raises(
        TypeError, match=r"^inputs: expected an array of shape \(None, 3\) \(float32\)"
    ):
        run(doubling_model, batch)


def test_run_casts_within_a_kind_and_takes_an_empty_batch(doubling_model):
    assert run(doubling_model, np.ones((2, 3))).tolist() == [[2.0] * 3] * 2  # float64 and ints cast
    assert run(doubling_model, [[1, 2, 3]]).tolist() == [[2.0, 4.0, 6.0]]
    empty = run(doubling_model, np.ones((0, 3), "float32"))
    assert empty.shape == (0, 3) and empty.dtype == np.float32


def test_run_refuses_bytes_that_are_no_tflite_model():
    with pytest.raises(ValueError, match="^model_bytes: expected the bytes of a TFLite model"):
        run(b"not a model at all", np.ones((1, 3), "float32"))


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda p: convert(123),
            TypeError,
            "^saved_model_dir: expected a non-empty path .*, got int 123",
        ),
        (
            lambda p: convert(p / "missing"),
            ValueError,
            "^saved_model_dir: expected an existing SavedModel directory",
        ),
        (lambda p: convert(p, select_tf_ops="yes"), TypeError, "^select_tf_ops: expected"),
        (
            lambda p: run("model.tflite", np.ones(2)),
            TypeError,
            "^model_bytes: expected the bytes of a TFLite model",
        ),
        (lambda p: convert(""), ValueError, "^saved_model_dir: expected a non-empty path"),
        (
            lambda p: convert(p),
            ValueError,
            "^saved_model_dir: expected an existing SavedModel directory.*, got PosixPath",
        ),
        (
            lambda p: convert(__file__),
            ValueError,
            "^saved_model_dir: expected an existing SavedModel directory",
        ),
        (
            lambda p: refused_ops("EagerPyFunc"),
            TypeError,
            "^error: expected an exception, got str 'EagerPyFunc'",
        ),
    ],
)
def test_bad_input_is_named(tmp_path, call, error, match):
    with pytest.raises(error, match=match):
        call(tmp_path)


def test_run_lets_the_interpreters_error_for_an_unresolved_custom_op_through(tmp_path):
    _, path = export(tmp_path, keras.layers.Lambda(py_function_blur))
    # EagerPyFunc goes in as a custom op
    custom = convert(path, select_tf_ops=True, custom_ops=True)
    with pytest.raises(RuntimeError, match="unresolved custom op: EagerPyFunc"):
        run(custom, np.ones((1, 8, 8, 3), "float32"))
