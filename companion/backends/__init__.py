"""Chapter 14: the book's customisations on JAX and PyTorch, each probed in its own process.

Keras fixes its backend when it is first imported, so ``run_on_backend(function, backend)``
runs a function in a fresh process with ``KERAS_BACKEND`` set and brings back its JSON-able
result. One probe per customisation (``ROWS``) runs it on the running backend and returns the
table's cell: ``"runs unchanged"``, ``"runs with this change: ..."`` or ``"TF-only → use ..."``;
``portability_table()`` fills every column, and ``EXPECTED`` is the table as last found.
``TRAIN_STEPS`` and ``TEST_STEPS`` are a ``train_step`` and a ``test_step`` for each backend that
train any compiled model as Keras's own steps do; ``step_gaps`` measures that on
``ordinary_model`` (an L2 regularizer, an ``add_loss`` term, Dropout, BatchNormalization, sample
weights). ``StepModel`` is chapter 8's regressor with those steps, and ``compare_step_speed``
times it side by side.

Each probe runs on every backend: the customisation itself, or its replacement there.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

from companion._backend import BACKEND_NAMES, BACKENDS, TensorFlowRequired
from companion.backends._autodiff import LOOPS, gradient, train_by_hand
from companion.backends._keras_file import resume_here, save_here
from companion.backends._probes import CHANGED, TF_ONLY, UNCHANGED
from companion.backends._runner import BACKEND_ENV, BackendRunError, run_on_backend
from companion.backends._speed import compare_step_speed
from companion.backends._steps import (
    TEST_STEPS,
    TRAIN_STEPS,
    CustomStepModel,
    StepModel,
    VAESampling,
    ordinary_data,
    ordinary_model,
    step_gaps,
    step_losses,
)
from companion.backends._table import (
    EXPECTED,
    ROWS,
    changed_cells,
    portability_table,
    probe_column,
)
from companion.backends._torch_blur import torch_blur

__all__ = [
    "BACKENDS",
    "BACKEND_ENV",
    "BACKEND_NAMES",
    "CHANGED",
    "EXPECTED",
    "LOOPS",
    "ROWS",
    "TEST_STEPS",
    "TF_ONLY",
    "TRAIN_STEPS",
    "UNCHANGED",
    "BackendRunError",
    "CustomStepModel",
    "StepModel",
    "TensorFlowRequired",
    "VAESampling",
    "changed_cells",
    "compare_step_speed",
    "gradient",
    "ordinary_data",
    "ordinary_model",
    "portability_table",
    "probe_column",
    "resume_here",
    "run_on_backend",
    "save_here",
    "step_gaps",
    "step_losses",
    "torch_blur",
    "train_by_hand",
]
