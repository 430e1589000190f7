"""The machinery of chapter 8's learning-rate range test, ``companion.fitting.find_learning_rate``:
the inputs it takes, the callback that sets a growing rate and records each batch's loss, and the
rule that suggests a rate.

The test trains with ``model.fit``, so it takes what ``fit`` reads on every backend: NumPy arrays,
a ``keras.utils.PyDataset``, a ``tf.data.Dataset`` or a PyTorch ``DataLoader``. Neither
TensorFlow nor PyTorch is imported here: an object of theirs exists only once its package has been
imported, so the classes are looked up among the modules already loaded.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import keras
import numpy as np

from companion._checks import check_int, describe

#: What the range test takes, as its messages name it.
DATASETS = (
    "a tf.data.Dataset, a keras.utils.PyDataset, a torch DataLoader or a tuple (x, y) of NumPy "
    "arrays"
)
#: The batch size for NumPy arrays when none is given (``model.fit``'s).
DEFAULT_BATCH_SIZE = 32


def dataset_types() -> tuple[type, ...]:
    """``keras.utils.PyDataset``, with ``tf.data.Dataset`` and PyTorch's ``DataLoader`` where
    their package is loaded (without it no object of theirs can exist)."""
    found: list[type] = [keras.utils.PyDataset]
    if (tf := sys.modules.get("tensorflow")) is not None:
        found.append(tf.data.Dataset)
    if (torch_data := sys.modules.get("torch.utils.data")) is not None:
        found.append(torch_data.DataLoader)
    return tuple(found)


def fit_inputs(dataset: Any, batch_size: Any) -> dict[str, Any]:
    """``model.fit``'s ``x``, ``y`` and ``batch_size`` for the range test's ``dataset``.

    Raises:
        TypeError: If ``dataset`` is none of :data:`DATASETS`, or ``batch_size`` not an int.
        ValueError: If the arrays are empty or differ in length, the dataset has no batch, or
            ``batch_size`` is given for a dataset (which makes its own batches) or is below 1.
    """
    if isinstance(dataset, tuple) and len(dataset) == 2:
        x, y = dataset
        if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
            return _array_inputs(x, y, batch_size)
    if not isinstance(dataset, dataset_types()):
        raise TypeError(f"dataset: expected {DATASETS}, got {describe(dataset)}")
    if batch_size is not None:
        raise ValueError(
            f"batch_size: expected None for a dataset (it makes its own batches), got "
            f"{describe(batch_size)}"
        )
    if _has_no_batch(dataset):
        raise ValueError(f"dataset: expected at least one batch, got none from {describe(dataset)}")
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(dataset, tf.data.Dataset):
        # One endless epoch: an epoch of unknown length ends in a "ran out of data" warning.
        return {"x": dataset.repeat()}
    return {"x": dataset}


def _array_inputs(x: np.ndarray, y: np.ndarray, batch_size: Any) -> dict[str, Any]:
    """``model.fit``'s arguments for NumPy arrays ``x`` and ``y``, in batches of ``batch_size``."""
    if min(x.ndim, y.ndim) == 0 or len(x) != len(y) or len(x) == 0:
        raise ValueError(
            f"dataset: expected (x, y) arrays of the same length >= 1, got shapes {x.shape} and "
            f"{y.shape}"
        )
    size = check_int(batch_size, "batch_size", minimum=1, allow_none=True)
    return {"x": x, "y": y, "batch_size": size or DEFAULT_BATCH_SIZE}


#: What ``next`` returns from a ``DataLoader`` that yields no batch.
_NO_BATCH = object()


def _has_no_batch(dataset: Any) -> bool:
    """Whether ``dataset`` says it has no batch or, a PyTorch ``DataLoader`` of unknown length
    (an ``IterableDataset``'s), yields none when asked for its first. Every epoch iterates a
    ``DataLoader`` afresh, so asking loses nothing; a ``tf.data.Dataset`` of unknown length is
    not asked (its first element can take a pipeline's whole warm-up)."""
    if isinstance(dataset, keras.utils.PyDataset):
        return dataset.num_batches == 0
    try:
        return len(dataset) == 0
    except TypeError:  # a tf.data.Dataset of infinite or unknown cardinality, an IterableDataset
        pass
    torch_data = sys.modules.get("torch.utils.data")
    if torch_data is not None and isinstance(dataset, torch_data.DataLoader):
        return next(iter(dataset), _NO_BATCH) is _NO_BATCH
    return False


class RangeTest(keras.callbacks.Callback):
    """Sets a growing learning rate before each batch and records the batch's loss; stops
    training after the last rate, or when the loss is not finite or above ``divergence`` times
    the lowest seen."""

    def __init__(self, rates: list[float], divergence: float) -> None:
        super().__init__()
        self.rates, self.divergence = rates, divergence
        self.losses: list[float] = []
        self.diverged = False

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.model.reset_metrics()  # so that logs["loss"] is this batch's, not the epoch's mean
        self.model.optimizer.learning_rate = self.rates[len(self.losses)]

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        loss = float(logs["loss"])
        self.losses.append(loss)
        self.diverged = not math.isfinite(loss) or loss > self.divergence * min(self.losses)
        if self.diverged or len(self.losses) == len(self.rates):
            self.model.stop_training = True


def suggest_rate(rates: list[float], losses: list[float], min_lr: float) -> float:
    """A tenth of the rate where the exponentially smoothed loss (0.9, bias-corrected) is
    lowest, never below ``min_lr``."""
    smoothed, average = [], 0.0
    for i, loss in enumerate(losses):
        if not math.isfinite(loss):
            break
        average = 0.9 * average + 0.1 * loss
        smoothed.append(average / (1 - 0.9 ** (i + 1)))
    best = min(range(len(smoothed)), key=smoothed.__getitem__) if smoothed else 0
    return max(min_lr, rates[best] / 10)
