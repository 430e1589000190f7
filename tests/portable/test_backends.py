"""Chapter 14's table, this backend's column: every probe run in this process gives the cell
``EXPECTED`` holds (under ``make test`` the TensorFlow column, in the backend lane JAX's and
PyTorch's)."""

import importlib.util

import keras
import pytest

from companion.backends import EXPECTED, ROWS, changed_cells, probe_column, run_on_backend
from companion.backends._keras_file import save_under_tensorflow

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
