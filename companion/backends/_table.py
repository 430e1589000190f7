"""Chapter 14's table: each customisation probed on each backend, and the table CI expects."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from companion._backend import BACKEND_NAMES, BACKENDS
from companion._checks import check_choice, check_instance, check_sequence, check_str
from companion._subprocess import check_timeout
from companion.backends import _autodiff, _distribute, _keras_file, _probes, _steps, _tf_only
from companion.backends._runner import run_on_backend
from companion.backends._steps import step_losses

#: The table's rows: the customisation as the chapter names it, and its probe. The ``.keras``
#: rows' probes take the folder of the saved files: TensorFlow's, and the other of JAX and
#: PyTorch (TensorFlow loads JAX's), which a child writes where the folder lacks it.
ROWS = {
    "composed op (keras.ops)": _probes.probe_composed_op,
    "custom layer (add_weight, get_config, seeds)": _probes.probe_custom_layer,
    "Sequential, functional, subclassed models": _probes.probe_modelling_apis,
    "loss and metric (calibration error)": _probes.probe_loss_and_metric,
    "callback": _probes.probe_callback,
    "optimizer and schedule (AdamW, WarmupCosine)": _probes.probe_optimizer_and_schedule,
    "overridden compute_loss": _probes.probe_compute_loss,
    "keras.ops.custom_gradient": _probes.probe_custom_gradient,
    ".keras file saved under TensorFlow": _keras_file.probe_keras_file,
    ".keras file saved under JAX or PyTorch": _keras_file.probe_keras_file_across,
    "chapter 8's train_step": _steps.probe_train_step,
    "tf.py_function": _tf_only.probe_py_function,
    "tf.custom_gradient": _tf_only.probe_tf_custom_gradient,
    "compiled C++ op (chapter 13)": _tf_only.probe_compiled_op,
    "GradientTape loop": _autodiff.probe_tape_loop,
    "tf.distribute": _distribute.probe_distribute,
}

_SAME = _probes.UNCHANGED
_OPTIMIZER = "optimizer and schedule (AdamW, WarmupCosine)"
_USE = _probes.TF_ONLY
#: The table as the probes last found it, by row and backend. A run that finds another cell
#: fails the chapter's check and ``tests/portable/test_backends.py``.
EXPECTED = {
    row: dict(zip(BACKENDS, cells))
    for row, cells in {
        "composed op (keras.ops)": (_SAME, _SAME, _SAME),
        "custom layer (add_weight, get_config, seeds)": (_SAME, _SAME, _SAME),
        "Sequential, functional, subclassed models": (_SAME, _SAME, _SAME),
        "loss and metric (calibration error)": (_SAME, _SAME, _SAME),
        "callback": (_SAME, _SAME, _SAME),
        "optimizer and schedule (AdamW, WarmupCosine)": (_SAME, _SAME, _SAME),
        "overridden compute_loss": (_SAME, _SAME, _SAME),
        "keras.ops.custom_gradient": (
            _SAME,
            _SAME,
            _probes.CHANGED + "def grad(*args, upstream=None)",
        ),
        ".keras file saved under TensorFlow": (_SAME, _SAME, _SAME),
        ".keras file saved under JAX or PyTorch": (  # JAX's file, PyTorch's on JAX
            _SAME,
            _probes.CHANGED + 'custom_objects={"Adam": keras.optimizers.Adam}',
            _SAME,
        ),
        "chapter 8's train_step": (
            _SAME,
            _probes.CHANGED + "a stateless train_step(self, state, data)",
            _probes.CHANGED + "zero_grad, backward, optimizer.apply",
        ),
        "tf.py_function": (
            _SAME,
            _USE + _tf_only.PURE_CALLBACK,
            _USE + "the Python function, called in eager code",
        ),
        "tf.custom_gradient": (
            _SAME,
            _USE + "keras.ops.custom_gradient or jax.custom_vjp",
            _USE + "keras.ops.custom_gradient or torch.autograd.Function",
        ),
        "compiled C++ op (chapter 13)": (
            _SAME,
            _USE + _tf_only.COMPILED_OP["jax"],
            _USE + _tf_only.COMPILED_OP["torch"],
        ),
        "GradientTape loop": (
            _SAME,
            _USE + "jax.value_and_grad",
            _USE + "loss.backward() (torch autograd)",
        ),
        "tf.distribute": (
            _SAME,
            _USE + "keras.distribution.DataParallel",
            _USE + "torch DistributedDataParallel, gloo (Keras has no torch distribution)",
        ),
    }.items()
}


def check_rows(rows: object) -> tuple[str, ...]:
    """``rows`` as a tuple of ``ROWS`` names (a non-empty list or tuple of them)."""
    return check_sequence(
        rows, "rows", "a list of the table's rows", item=lambda r, n: check_choice(r, n, list(ROWS))
    )


def check_backends(backends: object) -> tuple[str, ...]:
    """``backends`` as a tuple of backend names (a non-empty list or tuple of ``BACKENDS``)."""
    return check_sequence(
        backends, "backends", "a list of backends", item=lambda b, n: check_choice(b, n, BACKENDS)
    )


#: What a column's child gets besides ``BACKEND_ENV``: two JAX host devices, so that the
#: ``tf.distribute`` row runs ``DataParallel`` in that child instead of starting another.
COLUMN_ENV = {"jax": _distribute.TWO_HOST_DEVICES}

#: The probes that take the folder of the saved ``.keras`` files.
_FILE_PROBES = (_keras_file.probe_keras_file, _keras_file.probe_keras_file_across)
#: Rows probed first in a process: two TensorFlow replicas need the CPU split before TF starts.
_FIRST = ("tf.distribute",)


def probe_column(folder: str, rows: Sequence[str] | None = None) -> dict:
    """Run each row's probe on the running backend: ``{"cells": {row: cell}, "losses": ...}``.

    A probe that raises gets the cell ``"fails: <error>"``. ``losses`` are chapter 8's
    ``train_step`` losses here, for the comparison across backends; ``adamw_drift``, when the
    optimizer row ran and passed, is its measured gap to Keras's AdamW (``_probes.adamw_drift``).

    Args:
        folder: The folder of the TensorFlow-saved ``.keras`` file (the ``.keras`` row); under
            TensorFlow the file is written there first.
        rows: The rows to probe (names of ``ROWS``), or None for all.

    Returns:
        A JSON-able dict.

    Raises:
        TypeError: If ``folder`` is not a str or ``rows`` not a list of row names.
        ValueError: If ``folder`` is empty or a row is not in ``ROWS``.

    Taught in chapter 14, "One table, generated by running".
    """
    from companion._backend import backend

    folder = check_str(folder, "folder", "a folder's path (a non-empty str)")
    chosen = list(ROWS) if rows is None else list(check_rows(rows))
    if backend() == "tensorflow" and ".keras file saved under TensorFlow" in chosen:
        _keras_file.save_under_tensorflow(folder)
    cells = {}
    for row in sorted(chosen, key=lambda name: name not in _FIRST):
        probe = ROWS[row]
        arguments = (folder,) if probe in _FILE_PROBES else ()
        try:
            cells[row] = probe(*arguments)
        except Exception as error:  # a failed probe is a cell of the table, not a crash
            first = (str(error).splitlines() or [""])[0][:120]
            cells[row] = f"fails: {type(error).__name__}: {first}"
    drift = {"adamw_drift": _probes.adamw_drift()} if cells.get(_OPTIMIZER) == _SAME else {}
    return {"cells": {row: cells[row] for row in chosen}, "losses": step_losses(), **drift}


def portability_table(backends: Sequence[str] = BACKENDS, *, timeout: float = 900.0) -> dict:
    """Probe every row on every backend, one child process per backend: TensorFlow first, then
    the others side by side.

    Args:
        backends: The backends, in order. TensorFlow's child writes the ``.keras`` file the
            others load; without it in ``backends`` that row fails.
        timeout: Seconds each child may run.

    Returns:
        ``{backend: probe_column's result}``.

    Raises:
        TypeError, ValueError: If ``backends`` is not a list of ``BACKENDS`` or ``timeout``
            not a number of seconds > 0.
        BackendRunError: If a child process fails outside the probes.

    Taught in chapter 14, "One table, generated by running".
    """
    backends = check_backends(backends)
    timeout = check_timeout(timeout)
    folder = tempfile.mkdtemp(prefix="ch14-")
    columns = {}
    if "tensorflow" in backends:  # first: it writes the .keras file the others load
        columns["tensorflow"] = run_on_backend(probe_column, "tensorflow", folder, timeout=timeout)
    others = [b for b in backends if b != "tensorflow"]
    with ThreadPoolExecutor(max(len(others), 1)) as pool:  # the other children side by side
        runs = [
            pool.submit(
                run_on_backend, probe_column, b, folder, env=COLUMN_ENV.get(b), timeout=timeout
            )
            for b in others
        ]
        columns.update(zip(others, (run.result() for run in runs)))
    return {b: columns[b] for b in backends}


def changed_cells(columns: dict) -> list[str]:
    """Every cell of ``columns`` (``portability_table``'s result) that differs from
    ``EXPECTED``, as ``"row / Backend: got ..., expected ..."``.

    Taught in chapter 14, "One table, generated by running".
    """
    check_instance(columns, "columns", dict, "portability_table's result (a dict by backend)")
    for b, column in columns.items():
        check_choice(b, "columns", BACKENDS)
        check_instance(column, f"columns[{b!r}]", dict, "probe_column's result (a dict)")
        check_instance(column.get("cells"), f"columns[{b!r}]", dict, "a dict with 'cells'")
    return [
        f"{row} / {BACKEND_NAMES[b]}: got {cell!r}, expected {EXPECTED[row][b]!r}"
        for b, column in columns.items()
        for row, cell in column["cells"].items()
        if cell != EXPECTED.get(row, {}).get(b)
    ]
