"""companion.backends under TensorFlow: the runner's children, and the train step's losses on
JAX and PyTorch against TensorFlow's (the cross-backend half of chapter 14's table)."""

import numpy as np
import pytest

from companion._backend import backend
from companion.backends import (
    EXPECTED,
    ROWS,
    BackendRunError,
    changed_cells,
    probe_column,
    run_on_backend,
    step_losses,
)

STEP_ROW = "chapter 8's train_step"


def answer_with_numpy(n):  # sent as source: it imports what it uses
    import keras
    import numpy as np

    return {"backend": keras.backend.backend(), "sum": float(np.arange(n).sum())}


def fails_in_the_child():
    raise RuntimeError("this went wrong in the child")


def test_a_companion_function_is_imported_in_the_child():
    assert run_on_backend(backend, "jax") == "jax"


def test_a_local_function_is_sent_as_source_with_its_arguments():
    assert run_on_backend(answer_with_numpy, "torch", 5) == {"backend": "torch", "sum": 10.0}


def doubled(n):
    return 2 * n


def uses_a_helper(n):
    return doubled(n) + 1


def test_helpers_are_sent_before_the_function():
    assert run_on_backend(uses_a_helper, "jax", 4, helpers=[doubled]) == 9


def test_a_failing_child_raises_with_its_traceback():
    with pytest.raises(BackendRunError, match=r"(?s)KERAS_BACKEND=jax.*this went wrong"):
        run_on_backend(fails_in_the_child, "jax")


def torch_threads():
    import torch

    return torch.get_num_threads()


def test_torch_children_run_on_one_thread():
    assert run_on_backend(torch_threads, "torch") == 1


def test_every_row_has_an_expected_cell_per_backend():
    assert set(EXPECTED) == set(ROWS)
    for cells in EXPECTED.values():
        assert set(cells) == {"tensorflow", "jax", "torch"}
        for cell in cells.values():
            assert cell.startswith(("runs unchanged", "runs with this change: ", "TF-only → use "))


def test_a_changed_cell_is_named():
    column = {"cells": {STEP_ROW: "runs unchanged"}, "losses": []}
    assert changed_cells({"tensorflow": column}) == []
    changed = changed_cells({"jax": column})
    assert changed == [
        f"{STEP_ROW} / JAX: got 'runs unchanged', expected {EXPECTED[STEP_ROW]['jax']!r}"
    ]


@pytest.mark.parametrize("other", ["jax", "torch"])
def test_the_train_step_trains_to_tensorflows_losses(other, tmp_path):
    # From the same NumPy initial weights and batches, 5 epochs of Adam: float32 rounding only,
    # in matmuls summed in another order (measured 1e-7 relative); 1e-5 relative allows 100x.
    column = run_on_backend(probe_column, other, str(tmp_path), [STEP_ROW])
    assert column["cells"] == {STEP_ROW: EXPECTED[STEP_ROW][other]}
    ours = np.array(step_losses())
    np.testing.assert_allclose(column["losses"], ours, rtol=1e-5, atol=0)
    assert column["losses"] != pytest.approx(ours * 1.001, rel=1e-5)
