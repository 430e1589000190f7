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
times it side by side. Chapter 13's blur runs on JAX through the XLA FFI (``ffi_blur``) or in
Pallas (``pallas_blur``), and on PyTorch as the ``torch.library`` operator that
``load_torch_blur`` registers; ``ddp_replicas`` trains with ``DistributedDataParallel`` on two
processes.

Each probe runs on every backend: the customisation itself, or its replacement there.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

from companion._backend import BACKEND_NAMES, BACKENDS, TensorFlowRequired
from companion.backends._autodiff import LOOPS, gradient, train_by_hand
from companion.backends._ddp import ddp_replicas
from companion.backends._jax_blur import FFI_TARGET, ffi_blur, pallas_blur, register_ffi_blur
from companion.backends._keras_file import resume_here, save_here
from companion.backends._probes import (
    ADAMW_BOUNDS,
    ADAMW_STEPS,
    CHANGED,
    TF_ONLY,
    UNCHANGED,
    adamw_drift,
)
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
from companion.backends._torch_blur import (
    compile_report,
    gaussian_weights,
    load_torch_blur,
    torch_blur,
)

__all__ = [
    "ADAMW_BOUNDS",
    "ADAMW_STEPS",
    "BACKENDS",
    "BACKEND_ENV",
    "BACKEND_NAMES",
    "CHANGED",
    "EXPECTED",
    "FFI_TARGET",
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
    "adamw_drift",
    "changed_cells",
    "compare_step_speed",
    "compile_report",
    "ddp_replicas",
    "ffi_blur",
    "gaussian_weights",
    "gradient",
    "load_torch_blur",
    "ordinary_data",
    "ordinary_model",
    "pallas_blur",
    "portability_table",
    "probe_column",
    "register_ffi_blur",
    "resume_here",
    "run_on_backend",
    "save_here",
    "step_gaps",
    "step_losses",
    "torch_blur",
    "train_by_hand",
]
