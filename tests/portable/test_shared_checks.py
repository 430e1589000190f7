"""The shared pieces every portable module stands on, on the running Keras backend: the float
check, the non-finite detectors and the error of TensorFlow-only pieces."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from companion._backend import BACKENDS, TensorFlowRequired, backend, require_tensorflow
from companion._checks import float_tensor
from companion._finite import has_nonfinite, nonfinite_flag


def test_the_running_backend_is_one_the_book_covers():
    assert backend() == keras.backend.backend() and backend() in BACKENDS


def test_float_tensor_gives_a_tensor_of_this_backend_and_refuses_integers():
    tensor = float_tensor([1.0, 2.0], "x")
    assert keras.ops.is_tensor(tensor)
    assert keras.backend.standardize_dtype(tensor.dtype) == "float32"
    weight = keras.Variable(np.ones(3, "float16"))  # JAX holds no float64 unless x64 is enabled
    assert keras.backend.standardize_dtype(float_tensor(weight, "w").dtype) == "float16"
    with pytest.raises(TypeError, match=r"x: expected a floating-point tensor .* got dtype int"):
        float_tensor(np.arange(3), "x")
    # TensorFlow makes a string tensor (refused for its dtype); JAX and PyTorch refuse to convert
    with pytest.raises(TypeError, match="x: expected a floating-point tensor.* got (str|dtype)"):
        float_tensor("abc", "x")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_values_are_found_in_tensors_variables_and_nests(bad):
    values = np.array([1.0, bad], "float32")
    for leaf in (values, keras.ops.convert_to_tensor(values), keras.Variable(values)):
        assert has_nonfinite({"a": [None, leaf]})
        assert float(keras.ops.convert_to_numpy(nonfinite_flag([leaf]))) == 1.0
    assert has_nonfinite([1.0, float(bad)])


def test_finite_values_and_integers_are_not_flagged():
    finite = [keras.ops.ones((2, 2)), keras.Variable(np.zeros(2, "float32")), np.arange(3), None]
    assert not has_nonfinite(finite)
    assert float(keras.ops.convert_to_numpy(nonfinite_flag(finite))) == 0.0
    assert float(keras.ops.convert_to_numpy(nonfinite_flag([]))) == 0.0


def test_a_tensor_that_records_gradients_is_read_too():
    x = keras.Variable(np.array([1.0, 2.0], "float32"))
    assert has_nonfinite([x * np.inf]) and not has_nonfinite([x * 2.0])


def test_require_tensorflow_names_the_piece_the_backend_and_the_replacement():
    instead = {"jax": "jax.pure_callback", "torch": "the Python function"}
    if backend() == "tensorflow":
        assert require_tensorflow("companion.pyfunc", instead) is None
        return
    with pytest.raises(TensorFlowRequired) as caught:
        require_tensorflow("companion.pyfunc", instead)
    message = str(caught.value)
    assert message.startswith("companion.pyfunc needs the TensorFlow backend")
    assert f"KERAS_BACKEND='{backend()}'" in message and instead[backend()] in message
    assert isinstance(caught.value, ImportError)


CHILD = """
import sys
from companion._backend import backend
before = backend()
assert "keras" not in sys.modules and "tensorflow" not in sys.modules, "imported too early"
import keras
print(before, keras.backend.backend())
"""


@pytest.mark.parametrize("how", ["KERAS_BACKEND", "keras.json"])
def test_backend_names_keras_choice_before_keras_is_imported(how, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "KERAS_BACKEND"}
    env["KERAS_HOME"] = str(tmp_path)
    if how == "KERAS_BACKEND":
        env["KERAS_BACKEND"] = backend()
    else:
        (tmp_path / "keras.json").write_text(json.dumps({"backend": backend()}))
    child = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split()[-2:] == [backend(), backend()]
