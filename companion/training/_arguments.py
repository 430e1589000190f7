"""The checks of ``companion.training``'s arguments: models, datasets, metrics, strategies.

:func:`check_arguments` runs them for ``fit``, ``make_train_step`` and ``make_eval_step``, once
per call and in one order, so that a bad call fails before anything is traced, naming its
argument (``"<argument>: expected <what>, got <type> <value>"``).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import keras
import tensorflow as tf

from companion._checks import (
    check_bool,
    check_callable,
    check_clip_norm,
    check_instance,
    check_int,
    check_path,
    describe,
    shorten,
)
from companion.training._errors import learning_rate
from companion.training._metrics import MetricEntry, check_metric_keys, metric_entries

#: The most epochs ``fit`` takes: a million passes over the data; more is a slip (``10**12`` would
#: never end).
MAX_EPOCHS = 10**6

#: Stands for the optimizer of a function that takes none (``make_eval_step``).
_NO_OPTIMIZER = object()


class FitOptions(NamedTuple):
    """The arguments only ``fit`` takes: what it trains on, how long, and what it records."""

    dataset: Any
    validation_data: Any
    epochs: Any
    progress: Any
    log_dir: Any
    checkpoint_dir: Any
    checkpoint_every: Any
    on_epoch_end: Any


@dataclasses.dataclass(frozen=True)
class Arguments:
    """The checked arguments of ``fit``, ``make_train_step`` or ``make_eval_step``."""

    model: keras.Model
    loss: Callable[..., Any]
    entries: list[MetricEntry]
    strategy: tf.distribute.Strategy
    #: None for ``make_eval_step``.
    optimizer: keras.optimizers.Optimizer | None
    clip_norm: float | None
    element_spec: Any
    #: The model's trainable variables (none for ``make_eval_step``, which trains nothing).
    variables: list[Any]
    #: ``fit``'s own arguments, checked; None for the steps.
    fit: FitOptions | None


def check_arguments(
    model: Any,
    *,
    loss: Any,
    metrics: Any,
    strategy: Any,
    optimizer: Any = _NO_OPTIMIZER,
    clip_norm: Any = None,
    element_spec: Any = None,
    fit: FitOptions | None = None,
) -> Arguments:
    """Check the arguments of a training function, each once, the first bad one raising.

    An unbuilt model is built for ``fit``'s datasets, as ``model.fit`` does; a training function
    (one with an optimizer) needs trainable variables, ``make_eval_step`` a built model.
    """
    model = check_instance(model, "model", keras.Model, "a keras.Model")
    trains = optimizer is not _NO_OPTIMIZER
    if trains:
        _check_optimizer(optimizer)
    _check_signature(loss, "loss", "a callable loss(y_true, y_pred)", (None, None))
    if fit is not None:  # fit checks clip_norm between its datasets and what it records
        fit, clip_norm = _check_fit(fit, clip_norm)
    entries = metric_entries(metrics)
    if fit is None:  # the steps, after their metrics
        clip_norm = check_clip_norm(clip_norm)
    strategy = _check_strategy(strategy, model, optimizer if trains else None)
    element_spec = _check_element_spec(element_spec)
    if fit is not None:
        for data, name in ((fit.dataset, "dataset"), (fit.validation_data, "validation_data")):
            if data is not None:
                _check_inputs(model, data, name, strategy)
    if trains:
        variables = _check_trainable(model)
    else:
        _check_built(model)
        variables = []
    _check_output_keys(entries, model)
    return Arguments(
        model,
        loss,
        entries,
        strategy,
        optimizer if trains else None,
        clip_norm,
        element_spec,
        variables,
        fit,
    )


def _check_fit(options: FitOptions, clip_norm: Any) -> tuple[FitOptions, float | None]:
    """``fit``'s own arguments and ``clip_norm``, checked in this order: the datasets, epochs,
    ``clip_norm``, then what ``fit`` shows and records."""
    dataset = _check_pairs(options.dataset, "dataset")
    validation_data = options.validation_data
    if validation_data is not None:
        validation_data = _check_pairs(validation_data, "validation_data")
    epochs = check_int(options.epochs, "epochs", minimum=1, maximum=MAX_EPOCHS)
    clip_norm = check_clip_norm(clip_norm)
    options = options._replace(dataset=dataset, validation_data=validation_data, epochs=epochs)
    return _check_records(options), clip_norm


def _check_records(options: FitOptions) -> FitOptions:
    """What ``fit`` shows and records, checked: progress, TensorBoard, checkpoints, callback."""
    progress = check_bool(options.progress, "progress")
    log_dir = _check_folder(options.log_dir, "log_dir", "TensorBoard's files")
    checkpoint_dir = _check_folder(options.checkpoint_dir, "checkpoint_dir", "checkpoints")
    every = check_int(options.checkpoint_every, "checkpoint_every", minimum=1, allow_none=True)
    if every is not None and checkpoint_dir is None:
        raise ValueError(
            f"checkpoint_every: expected None without a checkpoint_dir, got {every}; pass "
            f"checkpoint_dir too"
        )
    if options.on_epoch_end is not None:
        what = "a callable(epoch, logs) or None"
        _check_signature(options.on_epoch_end, "on_epoch_end", what, (1, {}))
    return options._replace(
        progress=progress, log_dir=log_dir, checkpoint_dir=checkpoint_dir, checkpoint_every=every
    )


def _check_built(model: keras.Model) -> None:
    if not model.built:
        raise ValueError(
            f"model: expected a built model, got an unbuilt {type(model).__name__}; call it on a "
            f"batch first, or give it an Input (fit builds it from the dataset)"
        )


def _check_trainable(model: keras.Model) -> list[Any]:
    """The model's trainable variables, after checking that it is built and has some."""
    _check_built(model)
    variables = list(model.trainable_variables)
    if not variables:
        raise ValueError(
            f"model: expected trainable variables, got none in {type(model).__name__} "
            f"{model.name!r} (is every layer frozen?)"
        )
    return variables


def _check_inputs(
    model: keras.Model, dataset: tf.data.Dataset, name: str, strategy: tf.distribute.Strategy
) -> None:
    """Run the model symbolically (no data) on the inputs of ``dataset``, the argument ``name``.

    An unbuilt model is built for them, as ``model.fit`` does; inputs a built model does not take
    are refused here, before training, rather than when the step is traced.
    """
    input_spec = dataset.element_spec[0]
    symbolic = tf.nest.map_structure(
        lambda spec: keras.KerasTensor(spec.shape, spec.dtype), input_spec
    )
    try:
        if model.built:
            model.compute_output_spec(symbolic)
        else:
            with strategy.scope():  # its variables must be the strategy's
                model(symbolic, training=False)
    except (TypeError, ValueError) as error:
        reason = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        raise ValueError(
            f"{name}: expected inputs the model takes, got {_shown(input_spec)}: "
            f"{shorten(reason, 300)}"
        ) from error


def _check_optimizer(optimizer: Any) -> None:
    """A Keras optimizer whose learning rate is finite now (read once; the step checks it again)."""
    check_instance(
        optimizer, "optimizer", keras.optimizers.Optimizer, "a keras.optimizers.Optimizer"
    )
    rate = learning_rate(optimizer)
    if not math.isfinite(rate):
        raise ValueError(
            f"optimizer: expected a finite learning rate, got {type(optimizer).__name__} with "
            f"learning_rate {rate}"
        )


def _check_signature(function: Any, name: str, what: str, arguments: tuple[Any, ...]) -> None:
    """``function`` must be callable with ``arguments`` (when Python can tell its signature)."""
    check_callable(function, name, what)
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: its call will tell
        return
    try:
        signature.bind(*arguments)
    except TypeError:
        raise TypeError(
            f"{name}: expected {what}, got {describe(function)} with parameters {signature}"
        ) from None


def _shown(spec: Any) -> str:
    return shorten(repr(spec), 120)


def _check_pairs(dataset: Any, name: str) -> tf.data.Dataset:
    """Insist on a finite, non-empty ``tf.data.Dataset`` of ``(inputs, targets)`` pairs."""
    check_instance(dataset, name, tf.data.Dataset, "a tf.data.Dataset of (inputs, targets) pairs")
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise ValueError(
            f"{name}: expected a tf.data.Dataset of (inputs, targets) pairs, got elements "
            f"{_shown(spec)}; map it to pairs first, e.g. dataset.map(lambda x, y, *rest: (x, y))"
        )
    cardinality = int(dataset.cardinality())
    if cardinality == int(tf.data.INFINITE_CARDINALITY):
        raise ValueError(
            f"{name}: expected a finite dataset (an epoch is one pass over it), got an "
            f"infinite one; limit it, e.g. dataset.take(steps)"
        )
    if cardinality == 0:
        raise ValueError(f"{name}: expected at least one batch, got an empty dataset")
    return dataset


def _check_element_spec(element_spec: Any) -> Any:
    """None, or the ``element_spec`` of a dataset of ``(inputs, targets)`` pairs (type specs)."""
    what = "None or a dataset's element_spec, a pair (inputs, targets) of tf.TypeSpec"
    if element_spec is None:
        return None
    if not isinstance(element_spec, tuple) or len(element_spec) != 2:
        raise TypeError(f"element_spec: expected {what}, got {describe(element_spec)}")
    leaves = tf.nest.flatten(element_spec)
    if not leaves or not all(isinstance(leaf, tf.TypeSpec) for leaf in leaves):
        raise TypeError(f"element_spec: expected {what}, got {describe(element_spec)}")
    return element_spec


def _check_folder(value: Any, name: str, holds: str) -> str | None:
    """None, or a non-empty path that is a folder or can become one (for ``holds``)."""
    if value is None:
        return None
    path = check_path(value, name)
    if path.exists() and not path.is_dir():
        raise ValueError(
            f"{name}: expected a folder for {holds}, got {describe(value)}, an existing file"
        )
    return os.fspath(path)


def _check_strategy(strategy: Any, model: keras.Model, optimizer: Any) -> tf.distribute.Strategy:
    """The strategy to run under (TensorFlow's default one for None), the variables checked."""
    if strategy is None:
        return tf.distribute.get_strategy()
    if not isinstance(strategy, tf.distribute.Strategy):
        raise TypeError(
            f"strategy: expected a tf.distribute.Strategy or None, got {describe(strategy)}"
        )
    variables = list(model.variables) + (list(optimizer.variables) if optimizer is not None else [])
    outside = [
        v.path
        for v in variables
        if not strategy.extended.variable_created_in_scope(_tf_variable(v))
    ]
    if outside:
        raise ValueError(
            f"strategy: expected the model and optimizer to be created under strategy.scope(), "
            f"got {len(outside)} variable(s) created outside it, e.g. {outside[0]!r}"
        )
    return strategy


def _tf_variable(variable: Any) -> Any:
    """The ``tf.Variable`` behind a Keras 3 variable (the variable itself otherwise)."""
    return (
        getattr(variable, "value", variable) if isinstance(variable, keras.Variable) else variable
    )


def _check_output_keys(entries: list[MetricEntry], model: keras.Model) -> None:
    """Check the metrics' output keys now when Keras knows the outputs (a Functional model);
    otherwise the step checks them when it is traced."""
    try:
        outputs = model.output
    except (AttributeError, ValueError):
        return
    check_metric_keys(entries, outputs, "the model's outputs")
