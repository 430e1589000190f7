"""The ``.keras`` rows of chapter 14 whatever the saver's device: a TensorFlow file saved with
``jit_compile=True`` (what a GPU runtime stores) gives the row's cells, and a file saved under
JAX or PyTorch loads, predicts and trains on under the other, TensorFlow not needed."""

import importlib.util
import json
import zipfile
from pathlib import Path

import keras
import pytest

from companion.backends import EXPECTED, run_on_backend, save_here
from companion.backends._keras_file import (
    OTHER_SAVER,
    model_file,
    probe_keras_file,
    probe_keras_file_across,
    save_under_tensorflow,
)
from companion.backends._probes import CHANGED, UNCHANGED
from companion.devices import STAND_IN_VARIABLE

BACKEND = keras.backend.backend()
ROW = ".keras file saved under TensorFlow"
#: The row without TensorFlow: the file saved under the other of JAX and PyTorch, by loader.
ACROSS = {
    "tensorflow": UNCHANGED,
    "jax": CHANGED + 'custom_objects={"Adam": keras.optimizers.Adam}',  # PyTorch's Adam class
    "torch": UNCHANGED,  # JAX's file stores jit_compile=True
}


def stored_jit_compile(folder, saver):
    """The ``jit_compile`` a ``.keras`` file's compile config holds."""
    with zipfile.ZipFile(Path(folder) / model_file(saver)) as saved:
        return json.loads(saved.read("config.json"))["compile_config"]["jit_compile"]


def test_a_tensorflow_file_saved_with_jit_compile_true_gives_the_rows_cells(tmp_path):
    folder = str(tmp_path)
    if BACKEND == "tensorflow":
        from companion.devices import simulated_gpu

        with simulated_gpu():  # compile resolves jit_compile="auto" as on a GPU runtime
            save_under_tensorflow(folder)
        loaders = [b for b in ("jax", "torch") if importlib.util.find_spec(b)]
    elif importlib.util.find_spec("tensorflow") is None:
        pytest.skip("a file saved under TensorFlow needs TensorFlow installed to write it")
    else:  # the child starts the GPU stand-in, as a GPU runtime's compile
        run_on_backend(save_under_tensorflow, "tensorflow", folder, env={STAND_IN_VARIABLE: "1"})
        loaders = [BACKEND]
    assert stored_jit_compile(folder, "tensorflow") is True
    for loader in loaders:
        if loader == BACKEND:
            cell = probe_keras_file(folder)
        else:
            cell = run_on_backend(probe_keras_file, loader, folder)
        assert cell == EXPECTED[ROW][loader], loader


def test_a_file_saved_under_the_other_of_jax_and_pytorch_loads_and_trains_here(tmp_path):
    saver = OTHER_SAVER[BACKEND]
    assert run_on_backend(save_here, saver, str(tmp_path)) == model_file(saver)
    assert stored_jit_compile(tmp_path, saver) is (saver == "jax")  # JAX compiles every step
    assert probe_keras_file_across(str(tmp_path)) == ACROSS[BACKEND]
