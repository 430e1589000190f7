"""Bad inputs for ``companion.fitting``: the guarded model, the metric, the range test and its
result."""

import math

import keras
import numpy as np
import tensorflow as tf
from helpers.badinput import Array, Bool, Case, Instance, Int, Kind, Real, is_real
from helpers.small_models import dense

from companion.fitting import (
    MAX_BINS,
    MAX_RANGE_STEPS,
    ExpectedCalibrationError,
    GuardedModel,
    LearningRateRange,
    find_learning_rate,
)

FLOAT32_MAX = float(np.finfo("float32").max)
FLOAT32_TINY = float(np.finfo("float32").tiny)
CLIP_NORM = Kind(
    "None or a number > 0 that float32 holds as a normal number",
    lambda v: v is None or Real(minimum=FLOAT32_TINY, maximum=FLOAT32_MAX).accepts(v),
    extra_bad=(1e-300, 1e39),
)


def _guarded(clip_norm):
    inputs = keras.Input((3,))
    return GuardedModel(inputs=inputs, outputs=keras.layers.Dense(1)(inputs), clip_norm=clip_norm)


def _compiled():
    model = dense(3)
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def _data():
    return tf.data.Dataset.from_tensor_slices((np.ones((4, 3), "float32"), np.ones((4, 1)))).batch(
        2
    )


def _arrays(rows=4):
    return np.ones((rows, 3), "float32"), np.ones((rows, 1), "float32")


class _NoBatches(keras.utils.PyDataset):
    """A PyDataset with no batch."""

    def __len__(self):
        return 0


def _is_dataset(value):
    """What find_learning_rate reads: a dataset, or (x, y) arrays of the same length >= 1."""
    if isinstance(value, tuple) and len(value) == 2:
        x, y = value
        arrays = isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and min(x.ndim, y.ndim)
        return bool(arrays) and len(x) == len(y) > 0
    batches = value.num_batches if isinstance(value, keras.utils.PyDataset) else None
    return isinstance(value, (tf.data.Dataset, keras.utils.PyDataset)) and batches != 0


DATASET = Kind(
    "a tf.data.Dataset, a PyDataset or (x, y) arrays of the same length >= 1",
    _is_dataset,
    extra_bad=(
        (_arrays(4)[0], _arrays(3)[1]),  # one target short
        _arrays(0),  # no rows
        (np.float32(1.0), np.float32(1.0)),  # scalars
        ([[1.0, 2.0, 3.0]], [[1.0]]),  # lists, not arrays
        (_arrays()[0],),  # no targets
        _NoBatches(),
    ),
)


def _update(y_pred):
    ExpectedCalibrationError().update_state([0, 1], y_pred)


CASES = [
    Case("GuardedModel", _guarded, {"clip_norm": None}, {"clip_norm": CLIP_NORM}),
    Case(
        "ExpectedCalibrationError",
        ExpectedCalibrationError,
        {"num_bins": 15},
        {"num_bins": Int(1, MAX_BINS)},
    ),
    Case(
        "ExpectedCalibrationError.update_state",
        _update,
        {"y_pred": [[0.9, 0.1], [0.2, 0.8]]},
        {"y_pred": Array(ranks=(2,), extra_bad=([0.5, 0.5],))},
    ),
    Case(
        "find_learning_rate",
        find_learning_rate,
        lambda: {
            "model": _compiled(),
            "dataset": _data(),
            "min_lr": 1e-3,
            "max_lr": 0.1,
            "steps": 2,
        },
        {
            "model": Instance(keras.Model, what="a compiled keras.Model"),
            "dataset": DATASET,
            "min_lr": Real(above=0, maximum=0.1),
            "max_lr": Real(above=1e-3, maximum=FLOAT32_MAX),
            "steps": Int(2, MAX_RANGE_STEPS),
            "batch_size": Kind("None for a dataset", lambda v: v is None),
        },
        names={"min_lr": ("min_lr", "max_lr")},
    ),
    Case(
        "find_learning_rate.arrays",
        find_learning_rate,
        lambda: {"model": _compiled(), "dataset": _arrays(), "steps": 2, "batch_size": 2},
        {"batch_size": Int(1).or_none()},
    ),
    Case(
        "LearningRateRange",
        LearningRateRange,
        {
            "learning_rates": [1e-3, 1e-2],
            "losses": [1.0, 2.0],
            "suggestion": 1e-4,
            "diverged": False,
        },
        {
            "learning_rates": Kind(
                "a list of 2 learning rates > 0",
                lambda v: (
                    isinstance(v, (list, tuple))
                    and len(v) == 2
                    and all(Real(above=0).accepts(x) for x in v)
                ),
                extra_bad=([0.0, 1e-2], [1e-3, math.nan], ["a", 1e-2], [1e-3]),
            ),
            "losses": Kind(
                "a list of 2 losses",
                lambda v: (
                    isinstance(v, (list, tuple)) and len(v) == 2 and all(is_real(x) for x in v)
                ),
                extra_bad=([1.0], [1.0, "a"], [1.0, 2.0, 3.0]),
            ),
            "suggestion": Real(above=0),
            "diverged": Bool(),
        },
        names={"learning_rates": ("learning_rates", "losses")},
    ),
    Case(
        "LearningRateRange.plot",
        lambda ax: LearningRateRange([1e-3, 1e-2], [1.0, 2.0], 1e-4, False).plot(ax),
        {"ax": None},
        {"ax": Kind("a matplotlib Axes or None", lambda v: v is None)},
    ),
]
