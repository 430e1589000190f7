"""Bad inputs for ``companion.training``: a two-weight model and a dataset of two batches.

Every call builds a fresh model and optimizer (``valid`` is a function), so no call sees another's
state. Checks run before anything is traced, so the bad calls stay cheap.
"""

import math
import os
import tempfile
from collections.abc import Mapping

import keras
import numpy as np
import tensorflow as tf
from helpers.badinput import Bool, Case, Instance, Int, Kind, Real, Str, is_real
from helpers.small_models import dense

from companion.training import (
    MAX_EPOCHS,
    NonFiniteError,
    clip_by_global_norm,
    fit,
    make_eval_step,
    make_train_step,
)

X, Y = np.ones((4, 2), "float32"), np.ones((4, 1), "float32")


def pairs(x=X, y=Y):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(2)


def frozen_model():
    model = dense(2, functional=True)
    model.trainable = False
    return model


#: A plain file where a checkpoint folder is expected; removed when the test process exits.
_SCRATCH = tempfile.TemporaryDirectory(prefix="badinput_training_")
_FILE = os.path.join(_SCRATCH.name, "a_file")
open(_FILE, "w").close()


def model_kind(*, unbuilt_ok: bool = False, frozen_ok: bool = False) -> Kind:
    """A keras.Model; built unless the function builds it, with trainable weights if it trains."""
    unbuilt = () if unbuilt_ok else (keras.Sequential([keras.layers.Dense(1)]),)
    frozen = () if frozen_ok else (frozen_model(),)
    return Kind("a keras.Model", lambda v: isinstance(v, keras.Model), extra_bad=unbuilt + frozen)


#: What fit takes for data: a finite, non-empty dataset of (inputs, targets) the model accepts.
DATASET = Kind(
    "a finite, non-empty tf.data.Dataset of (inputs, targets) pairs",
    lambda v: isinstance(v, tf.data.Dataset),
    extra_bad=(
        tf.data.Dataset.from_tensor_slices(X).batch(2),  # no targets
        tf.data.Dataset.from_tensor_slices((X, Y, Y)).batch(2),  # triples
        pairs().repeat(),  # infinite
        pairs().take(0),  # empty
        pairs(np.ones((4, 3), "float32")),
    ),  # inputs the model does not take
)
OPTIMIZER = Kind(
    "a Keras optimizer with a finite learning rate",
    lambda v: isinstance(v, keras.optimizers.Optimizer),
    extra_bad=(
        keras.optimizers.SGD(learning_rate=math.nan),
        keras.optimizers.SGD(learning_rate=math.inf),
    ),
)
LOSS = Kind("a callable loss(y_true, y_pred)", callable, extra_bad=(lambda y: y, lambda: 0.0))


#: A loss the step calls: one returning a str or an int is refused when the step is traced.
RETURNED_LOSS = Kind(
    "a callable loss(y_true, y_pred) returning float losses",
    lambda v: isinstance(v, keras.losses.Loss),
    extra_bad=(lambda y, p: "abc", lambda y, p: 3),
)


def _evaluate_once(loss):
    """``make_eval_step(..., loss=loss)`` called on one batch (the loss runs when it is traced)."""
    return make_eval_step(dense(2, functional=True), loss=loss)(next(iter(pairs())))


def _is_metric_list(value):
    return isinstance(value, (list, tuple)) and all(
        isinstance(m, keras.metrics.Metric) for m in value
    )


METRICS = Kind(
    "a list of Keras metrics with distinct names (or a mapping from output key to metrics)",
    lambda v: _is_metric_list(v) or (isinstance(v, Mapping) and not v),
    extra_bad=(
        [
            keras.metrics.MeanAbsoluteError(name="m"),
            keras.metrics.MeanSquaredError(name="m"),
        ],  # twice "m"
        [keras.metrics.MeanAbsoluteError(name="loss")],  # the loss's own name
        {"no_such_output": keras.metrics.MeanAbsoluteError()},
    ),  # a key the outputs lack
)
CLIP_NORM = Kind(
    "None or a number > 0 that float32 holds (not 0)",
    lambda v: v is None or Real(above=0, maximum=3.4e38).accepts(v),
    extra_bad=(1e-300, 1e39),
)
STRATEGY = Instance(tf.distribute.Strategy, what="a tf.distribute.Strategy").or_none()
FOLDER = Kind(
    "None or a non-empty path of a folder",
    lambda v: v is None or (isinstance(v, str) and v != ""),
    extra_bad=(_FILE,),
)
ON_EPOCH_END = Kind(
    "None or a callable(epoch, logs)", lambda v: v is None or callable(v), extra_bad=(lambda: None,)
)
ELEMENT_SPEC = Kind(
    "None or a dataset's element_spec of (inputs, targets)",
    lambda v: v is None,
    extra_bad=(tf.TensorSpec((None, 2)), (1, 2), (tf.TensorSpec((None, 2)),)),
)


def fit_arguments():
    return {
        "model": dense(2, functional=True),
        "dataset": pairs(),
        "optimizer": keras.optimizers.SGD(0.1),
        "loss": keras.losses.MeanSquaredError(),
        "epochs": 1,
        "metrics": [],
        "validation_data": None,
        "clip_norm": None,
        "strategy": None,
        "log_dir": None,
        "progress": False,
        "on_epoch_end": None,
        "checkpoint_dir": None,
        "checkpoint_every": None,
    }


def step_arguments():
    return {
        "model": dense(2, functional=True),
        "optimizer": keras.optimizers.SGD(0.1),
        "loss": keras.losses.MeanSquaredError(),
        "metrics": [],
        "clip_norm": None,
        "strategy": None,
        "element_spec": None,
    }


def eval_arguments():
    return {
        "model": dense(2, functional=True),
        "loss": keras.losses.MeanSquaredError(),
        "metrics": [],
        "strategy": None,
        "element_spec": None,
    }


HISTORY = Kind(
    "a dict from str to lists of numbers",
    lambda v: (
        isinstance(v, dict)
        and all(
            isinstance(k, str) and isinstance(x, list) and all(is_real(e) for e in x)
            for k, x in v.items()
        )
    ),
)
CAUSE = Kind(
    "None or a cause",
    lambda v: v is None or Str(*NonFiniteError.CAUSES).accepts(v),
    extra_bad=("not-a-cause",),
)


def _float_like(value):
    try:
        return np.issubdtype(np.asarray(value).dtype, np.floating)
    except (TypeError, ValueError):
        return False


GRADIENTS = Kind(
    "a list or tuple of float tensors or None",
    lambda v: (
        isinstance(v, (list, tuple, np.ndarray))
        and len(v) >= 1
        and all(g is None or _float_like(g) for g in v)
    ),
    extra_bad=([tf.constant([1, 2])],),
)

CASES = [
    Case(
        "clip_by_global_norm",
        clip_by_global_norm,
        lambda: {"gradients": [tf.constant([3.0, 4.0]), None], "clip_norm": 1.0},
        {
            "gradients": GRADIENTS,
            "clip_norm": Kind(
                "a number > 0 that float32 holds",
                lambda v: v is not None and CLIP_NORM.accepts(v),
                CLIP_NORM.extra_bad,
            ),
        },
    ),
    Case(
        "fit",
        fit,
        fit_arguments,
        {
            "model": model_kind(unbuilt_ok=True),
            "dataset": DATASET,
            "optimizer": OPTIMIZER,
            "loss": LOSS,
            "epochs": Int(1, MAX_EPOCHS),
            "metrics": METRICS,
            "validation_data": DATASET.or_none(),
            "clip_norm": CLIP_NORM,
            "strategy": STRATEGY,
            "log_dir": FOLDER,
            "checkpoint_dir": FOLDER,
            "checkpoint_every": Int(1).or_none(),
            "progress": Bool(),
            "on_epoch_end": ON_EPOCH_END,
        },
    ),
    Case(
        "make_train_step",
        make_train_step,
        step_arguments,
        {
            "model": model_kind(),
            "optimizer": OPTIMIZER,
            "loss": LOSS,
            "metrics": METRICS,
            "clip_norm": CLIP_NORM,
            "strategy": STRATEGY,
            "element_spec": ELEMENT_SPEC,
        },
    ),
    Case(
        "make_eval_step",
        make_eval_step,
        eval_arguments,
        {
            "model": model_kind(frozen_ok=True),
            "loss": LOSS,
            "metrics": METRICS,
            "strategy": STRATEGY,
            "element_spec": ELEMENT_SPEC,
        },
    ),
    Case(
        "make_eval_step.step",
        _evaluate_once,
        {"loss": keras.losses.MeanSquaredError()},
        {"loss": RETURNED_LOSS},
    ),
    Case(
        "NonFiniteError",
        NonFiniteError,
        {"epoch": 1, "step": 1, "loss": math.nan, "history": {}, "cause": None},
        {
            "epoch": Int(1),
            "step": Int(1),
            "loss": Kind("a number (NaN and inf too)", is_real),
            "history": HISTORY,
            "cause": CAUSE,
        },
    ),
]
