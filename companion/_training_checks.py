"""The checks of ``companion.training``'s arguments: models, datasets, metrics, strategies.

Each raises the project's error (``"<argument>: expected <what>, got <type> <value>"``) before
anything is traced, so that a bad call to ``fit``, ``make_train_step`` or ``make_eval_step``
fails at once, naming its argument.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf

from companion._checks import (
    check_callable,
    check_instance,
    check_int,
    check_path,
    check_sequence,
    describe,
    shorten,
)

#: One metric and where it reads: ``(output key or None for the whole output, metric, log name)``.
MetricEntry = tuple[Any, keras.metrics.Metric, str]


def _check_model(model: Any) -> keras.Model:
    return check_instance(model, "model", keras.Model, "a keras.Model")


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
    rate = _learning_rate(optimizer)
    if not math.isfinite(rate):
        raise ValueError(
            f"optimizer: expected a finite learning rate, got {type(optimizer).__name__} with "
            f"learning_rate {rate}"
        )


def _learning_rate(optimizer: keras.optimizers.Optimizer) -> float:
    """The optimizer's current learning rate, read from the device (a schedule's value now)."""
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


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


def _check_loss(loss: Any) -> None:
    _check_signature(loss, "loss", "a callable loss(y_true, y_pred)", (None, None))


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


def _check_metric(metric: Any, name: str) -> keras.metrics.Metric:
    return check_instance(metric, name, keras.metrics.Metric, "a keras.metrics.Metric")


def _metric_entries(metrics: Any) -> list[MetricEntry]:
    """Flatten ``metrics`` (a sequence, or a mapping from output key to metrics) into entries.

    Each entry's log name must be its own and not ``"loss"``: the history has one list per name.
    """
    what = "a list of keras.metrics.Metric or a mapping from output key to metrics"
    if isinstance(metrics, Mapping):
        pairs = [
            (key, m)
            for key, value in metrics.items()
            for m in (
                check_sequence(
                    value, f"metrics[{key!r}]", "metrics", item=_check_metric, min_length=0
                )
                if isinstance(value, (list, tuple))
                else [_check_metric(value, f"metrics[{key!r}]")]
            )
        ]
    else:
        pairs = [
            (None, m)
            for m in check_sequence(metrics, "metrics", what, item=_check_metric, min_length=0)
        ]
    entries = [(key, m, m.name if key is None else f"{key}_{m.name}") for key, m in pairs]
    names = [name for _, _, name in entries]
    for name in names:
        if name == "loss" or names.count(name) > 1:
            raise ValueError(
                f"metrics: expected metrics with distinct names other than 'loss', got "
                f"{describe(metrics)}, whose names clash on {name!r}"
            )
    return entries


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


def _check_metric_keys(entries: list[MetricEntry], structure: Any, what: str) -> None:
    """Each output key of ``entries`` must be a key of ``structure`` (outputs or targets)."""
    for key, _, _ in entries:
        if key is not None and not (isinstance(structure, Mapping) and key in structure):
            keys = sorted(structure) if isinstance(structure, Mapping) else "none: a single tensor"
            raise ValueError(f"metrics: expected keys of {what} ({keys}), got {key!r}")


def _check_output_keys(entries: list[MetricEntry], model: keras.Model) -> None:
    """Check the metrics' output keys now when Keras knows the outputs (a Functional model);
    otherwise the step checks them when it is traced."""
    try:
        outputs = model.output
    except (AttributeError, ValueError):
        return
    _check_metric_keys(entries, outputs, "the model's outputs")


def _check_checkpoint_every(every: Any, checkpoint_dir: str | None) -> int | None:
    every = check_int(every, "checkpoint_every", minimum=1, allow_none=True)
    if every is not None and checkpoint_dir is None:
        raise ValueError(
            f"checkpoint_every: expected None without a checkpoint_dir, got {every}; pass "
            f"checkpoint_dir too"
        )
    return every


def _check_records(
    log_dir: Any, checkpoint_dir: Any, checkpoint_every: Any, on_epoch_end: Any
) -> tuple[str | None, str | None, int | None]:
    """What ``fit`` records, checked: ``(log_dir, checkpoint_dir, checkpoint_every)``."""
    log_dir = _check_folder(log_dir, "log_dir", "TensorBoard's files")
    checkpoint_dir = _check_folder(checkpoint_dir, "checkpoint_dir", "checkpoints")
    checkpoint_every = _check_checkpoint_every(checkpoint_every, checkpoint_dir)
    if on_epoch_end is not None:
        _check_signature(on_epoch_end, "on_epoch_end", "a callable(epoch, logs) or None", (1, {}))
    return log_dir, checkpoint_dir, checkpoint_every
