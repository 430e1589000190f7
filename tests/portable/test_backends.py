"""Chapter 14's table, this backend's column: every probe run in this process gives the cell
``EXPECTED`` holds (under ``make test`` the TensorFlow column, in the backend lane JAX's and
PyTorch's)."""

import importlib.util

import keras
import numpy as np
import pytest

from companion.backends import (
    EXPECTED,
    ROWS,
    changed_cells,
    gradient,
    probe_column,
    run_on_backend,
    step_losses,
    train_by_hand,
)
from companion.backends._keras_file import save_under_tensorflow
from companion.backends._steps import step_data, step_model

BACKEND = keras.backend.backend()
KERAS_FILE = ".keras file saved under TensorFlow"


def test_every_cell_of_this_column_but_the_keras_file(tmp_path):
    rows = [row for row in ROWS if row != KERAS_FILE]
    column = probe_column(str(tmp_path), rows)
    assert changed_cells({BACKEND: column}) == []


def test_a_file_saved_under_tensorflow_loads_and_trains_here(tmp_path):
    if BACKEND == "tensorflow":
        column = probe_column(str(tmp_path), [KERAS_FILE])  # saves, then loads
    elif importlib.util.find_spec("tensorflow") is None:
        pytest.skip("a file saved under TensorFlow needs TensorFlow installed to write it")
    else:
        run_on_backend(save_under_tensorflow, "tensorflow", str(tmp_path))
        column = probe_column(str(tmp_path), [KERAS_FILE])
    assert column["cells"] == {KERAS_FILE: EXPECTED[KERAS_FILE][BACKEND]}


def test_the_custom_step_equals_kerass_step_here():
    # the same arithmetic in the same order: equal to float32 rounding (measured 0.0)
    np.testing.assert_allclose(step_losses(True), step_losses(False), rtol=1e-6)


def test_the_hand_written_loop_equals_fit_here():
    x, y = step_data()
    looped = train_by_hand(step_model(custom_step=False), x, y).get_weights()
    fitted = step_model(custom_step=False)
    fitted.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    for ours, theirs in zip(looped, fitted.get_weights()):
        np.testing.assert_allclose(ours, theirs, atol=1e-6)  # measured 3e-8 on JAX
    assert any(np.abs(a - b).max() > 1e-3 for a, b in zip(looped, step_model(False).get_weights()))


def test_gradient_is_this_backends_autodiff():
    x = np.array([-1.0, 0.5, 2.0], "float32")
    got = gradient(lambda t: keras.ops.sin(t) * t, x)
    np.testing.assert_allclose(got, np.cos(x) * x + np.sin(x), atol=1e-6)
