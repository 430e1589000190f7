"""Custom training loops (chapter 7): the training step written out, and ``fit`` around it.

``make_train_step`` builds the compiled step a reader would write by hand (``GradientTape``,
loss, gradients, optional global-norm clipping, ``apply_gradients``, metrics), and
``make_eval_step`` its validation twin. ``fit`` is the outer loop: epochs, metrics reset each
epoch, validation, a ``keras.utils.Progbar``, TensorBoard scalars, and a stop at the first
non-finite loss or gradient, with the weights from before that step.

The same code runs on one device and under a ``tf.distribute`` strategy: the step always goes
through ``strategy.run`` and ``strategy.reduce`` (without a strategy, TensorFlow's default
strategy, whose ``run`` is a plain call). Each replica scales its loss by the *global* batch
size, so the gradients the optimizer sums over the replicas are those of the global mean loss.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from companion._checks import check_bool, check_int, check_real, describe

__all__ = ["NonFiniteError", "fit", "make_eval_step", "make_train_step"]

#: One metric and where it reads: ``(output key or None for the whole output, metric, log name)``.
MetricEntry = tuple[Any, keras.metrics.Metric, str]


class NonFiniteError(FloatingPointError):
    """``fit`` stopped because a step's loss or one of its gradients was NaN or infinite.

    The step's gradients were not applied: the model holds the weights from before that step.
    A finite loss with non-finite gradients happens, e.g. when a NaN input reaches a loss that
    clips its argument (Keras's cross-entropies clip probabilities), which hides the NaN in the
    loss but not in the gradients.

    Attributes:
        epoch: The epoch of the bad step (counted from 1).
        step: The step within that epoch (counted from 1).
        loss: The step's loss (``nan`` or ``inf``, or a finite value when only gradients were not).
        history: The history of the epochs completed before this one.
    """

    def __init__(self, epoch: int, step: int, loss: float, history: dict[str, list[float]]) -> None:
        what = f"loss is {loss}" if not math.isfinite(loss) else f"gradients are not finite (loss {loss:.4g})"
        super().__init__(
            f"{what} at epoch {epoch}, step {step}: training stopped before applying that step's "
            f"gradients, so the model keeps the weights from before it"
        )
        self.epoch, self.step, self.loss, self.history = epoch, step, loss, history


def _check_model(model: Any) -> keras.Model:
    if not isinstance(model, keras.Model):
        raise TypeError(f"model: expected a keras.Model, got {describe(model)}")
    return model


def _check_optimizer(optimizer: Any) -> None:
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"optimizer: expected a keras.optimizers.Optimizer, got {describe(optimizer)}")


def _check_loss(loss: Any) -> None:
    if not callable(loss):
        raise TypeError(f"loss: expected a callable loss(y_true, y_pred), got {describe(loss)}")


def _check_pairs(dataset: Any, name: str) -> tf.data.Dataset:
    """Insist on a ``tf.data.Dataset`` whose elements are ``(inputs, targets)`` pairs."""
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(f"{name}: expected a tf.data.Dataset of (inputs, targets) pairs, got {describe(dataset)}")
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        shown = repr(spec) if len(repr(spec)) <= 120 else repr(spec)[:117] + "..."
        raise ValueError(
            f"{name}: expected a tf.data.Dataset of (inputs, targets) pairs, got elements {shown}; "
            f"map it to pairs first, e.g. dataset.map(lambda x, y, *rest: (x, y))"
        )
    return dataset


def _metric_entries(metrics: Any) -> list[MetricEntry]:
    """Flatten ``metrics`` (a sequence, or a mapping from output key to metrics) into entries."""
    if isinstance(metrics, Mapping):
        pairs = [(key, m) for key, value in metrics.items()
                 for m in (value if isinstance(value, Sequence) else [value])]
    elif isinstance(metrics, Sequence) and not isinstance(metrics, str):
        pairs = [(None, m) for m in metrics]
    else:
        raise TypeError(f"metrics: expected a sequence of keras.metrics.Metric or a mapping "
                        f"from output key to metrics, got {describe(metrics)}")
    for _, metric in pairs:
        if not isinstance(metric, keras.metrics.Metric):
            raise TypeError(f"metrics: expected keras.metrics.Metric instances, got {describe(metric)}")
    return [(key, m, m.name if key is None else f"{key}_{m.name}") for key, m in pairs]


def _check_strategy(strategy: Any, model: keras.Model, optimizer: Any) -> tf.distribute.Strategy:
    """The strategy to run under (TensorFlow's default one for None), after checking the variables."""
    if strategy is None:
        return tf.distribute.get_strategy()
    if not isinstance(strategy, tf.distribute.Strategy):
        raise TypeError(f"strategy: expected a tf.distribute.Strategy or None, got {describe(strategy)}")
    variables = list(model.variables) + (list(optimizer.variables) if optimizer is not None else [])
    outside = [v.path for v in variables if not strategy.extended.variable_created_in_scope(_tf_variable(v))]
    if outside:
        raise ValueError(
            f"strategy: expected the model and optimizer to be created under strategy.scope(), "
            f"got {len(outside)} variable(s) created outside it, e.g. {outside[0]!r}"
        )
    return strategy


def _tf_variable(variable: Any) -> Any:
    """The ``tf.Variable`` behind a Keras 3 variable (the variable itself otherwise)."""
    return getattr(variable, "value", variable) if isinstance(variable, keras.Variable) else variable


def _batch_size(x: Any) -> tf.Tensor:
    return tf.shape(tf.nest.flatten(x)[0])[0]


def _replica_loss(
    loss: Callable[..., Any], model: keras.Model, y: Any, predictions: Any, size: tf.Tensor
) -> tf.Tensor:
    """This replica's share of the global mean loss (plus its share of ``model.losses``).

    Per-example losses are summed and divided by the *global* batch size
    (``tf.nn.compute_average_loss``), so the replicas' shares add up to the global mean. A
    scalar (an already averaged loss) is used as is on one replica; under a strategy with more
    replicas it is refused: Keras's own losses have already divided their mean by the number of
    replicas there, a hand-written mean has not, and the step cannot tell which it got.
    """
    values = tf.convert_to_tensor(loss(y, predictions))
    if values.shape.rank == 0:
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        if replicas > 1:
            raise ValueError(
                f"loss: expected per-example losses (shape (batch,)) under a strategy with {replicas} "
                f"replicas, got a scalar; create Keras losses with reduction=None, e.g. "
                f"keras.losses.SparseCategoricalCrossentropy(reduction=None)"
            )
        share = values
    else:
        global_size = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, size)
        share = tf.nn.compute_average_loss(values, global_batch_size=global_size)
    if model.losses:  # regularization penalties: counted once over all replicas
        share += tf.nn.scale_regularization_loss(tf.add_n([tf.cast(p, share.dtype) for p in model.losses]))
    return share


def _count_nonfinite(share: tf.Tensor, gradients: list[Any]) -> tf.Tensor:
    """1 if this replica's loss or any of its gradients is NaN or infinite, else 0."""
    present = [g for g in gradients if g is not None]
    finite = tf.math.is_finite(share)
    if present:
        finite = tf.logical_and(finite, tf.math.is_finite(tf.linalg.global_norm(present)))
    return tf.cast(tf.logical_not(finite), tf.int32)


def _update_metrics(entries: list[MetricEntry], y: Any, predictions: Any) -> None:
    for key, metric, _ in entries:
        metric.update_state(y if key is None else y[key], predictions if key is None else predictions[key])


def _clip_by_global_norm(gradients: list[Any], clip_norm: float) -> list[Any]:
    """Scale every replica's gradients by ``min(1, clip_norm / norm)`` of the *summed* gradients.

    The optimizer sums the replicas' gradients; clipping each replica's part by its own norm
    would bound the wrong vector. With one replica the all-reduce is the identity.
    """
    present = [g for g in gradients if g is not None]
    summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, present)
    clipped, _ = tf.clip_by_global_norm(gradients, clip_norm, use_norm=tf.linalg.global_norm(summed))
    return clipped


def _function(fn: Callable[..., Any], element_spec: Any) -> Any:
    """``tf.function`` traced once for ``element_spec`` (or relaxing shapes when it is None).

    Without AutoGraph, as Keras layers are traced: the step has no Python control flow on tensors,
    and an error raised while tracing (a bad loss) reaches the caller as it was raised.
    """
    if element_spec is None:
        return tf.function(fn, reduce_retracing=True, autograph=False)
    return tf.function(fn, input_signature=[element_spec], autograph=False)


def make_train_step(
    model: keras.Model,
    *,
    optimizer: keras.optimizers.Optimizer,
    loss: Callable[..., Any],
    metrics: Sequence[keras.metrics.Metric] | Mapping[str, Any] = (),
    clip_norm: float | None = None,
    strategy: tf.distribute.Strategy | None = None,
    element_spec: Any = None,
) -> Any:
    """Build the compiled training step ``step((x, y)) -> {"loss": ..., "examples": ..., "applied": ...}``.

    One call runs the forward pass under a ``tf.GradientTape``, adds ``model.losses`` (e.g. L2
    penalties) to ``loss(y, predictions)``, takes the gradients of ``model.trainable_variables``
    (so frozen layers, ``layer.trainable = False``, stay as they are), clips them to a global norm
    if asked, applies them with ``optimizer`` and updates ``metrics``. If the loss or a gradient
    is not finite (on any replica), the gradients are **not** applied: the weights and the
    optimizer stay as they were (the metrics are still updated), and ``"applied"`` says so. Write
    your own outer loop around it, or use :func:`fit`.

    Args:
        model: A built ``keras.Model`` (created under ``strategy.scope()`` when a strategy is given).
        optimizer: A Keras optimizer; it is built for the model's trainable variables here.
        loss: ``loss(y_true, y_pred)`` returning per-example losses (shape ``(batch,)``, e.g. a
            Keras loss made with ``reduction=None``) or, on one replica only, the batch's mean
            loss (a scalar, what Keras losses return by default). ``y_true`` and ``y_pred`` are
            whatever the dataset and the model give: dicts for multi-output models, so a
            multi-task loss is a plain function of both.
        metrics: Keras metrics updated with ``(y, predictions)``, or a mapping from an output key
            to metrics updated with ``(y[key], predictions[key])``. Reset them yourself
            (``metric.reset_state()``) between epochs.
        clip_norm: Clip the gradients to this global norm (> 0) before applying them; None: no clipping.
        strategy: A ``tf.distribute`` strategy; None runs on one device.
        element_spec: The ``element_spec`` of the dataset the step will get (of the distributed
            dataset, with a strategy): the step is then traced once. None: traced per new input
            shape, with shapes relaxed after the second.

    Returns:
        A ``tf.function`` taking one batch ``(x, y)`` (as the dataset yields it) and returning a
        dict with the batch's mean ``"loss"`` over all replicas, the number of ``"examples"`` in
        the batch, and ``"applied"``, a boolean: False when the update was skipped because the loss
        or a gradient was not finite.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If ``clip_norm <= 0``, or with a strategy, if the model or optimizer was
            created outside its scope; when first called, if ``loss`` returns a scalar under a
            strategy with several replicas.

    Example:
        >>> import numpy as np
        >>> keras.utils.set_random_seed(0)
        >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        >>> data = tf.data.Dataset.from_tensor_slices((np.ones((8, 3), "float32"), np.ones((8, 1), "float32")))
        >>> data = data.batch(4)
        >>> step = make_train_step(model, optimizer=keras.optimizers.SGD(0.1),
        ...                        loss=keras.losses.MeanSquaredError(), element_spec=data.element_spec)
        >>> losses = [float(step(batch)["loss"]) for _ in range(3) for batch in data]
        >>> losses[-1] < losses[0], step.experimental_get_tracing_count()
        (True, 1)
    """
    model = _check_model(model)
    _check_optimizer(optimizer)
    _check_loss(loss)
    entries = _metric_entries(metrics)
    if clip_norm is not None:
        clip_norm = check_real(clip_norm, "clip_norm", above=0)
    strategy = _check_strategy(strategy, model, optimizer)
    variables = list(model.trainable_variables)
    with strategy.scope():
        if not optimizer.built:
            optimizer.build(variables)

    def forward_backward(x: Any, y: Any) -> tuple[tf.Tensor, list[Any], tf.Tensor]:
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            share = _replica_loss(loss, model, y, predictions, _batch_size(x))
        _update_metrics(entries, y, predictions)
        gradients = tape.gradient(share, variables)
        return share, gradients, _count_nonfinite(share, gradients)

    def apply(gradients: list[Any]) -> None:
        if clip_norm is not None:
            gradients = _clip_by_global_norm(gradients, clip_norm)
        optimizer.apply_gradients(zip(gradients, variables))

    def step(batch: Any) -> dict[str, tf.Tensor]:
        x, y = batch
        shares, gradients, nonfinite = strategy.run(forward_backward, args=(x, y))
        batch_loss = strategy.reduce(tf.distribute.ReduceOp.SUM, shares, axis=None)
        examples = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(_batch_size, args=(x,)), axis=None)
        applied = tf.equal(strategy.reduce(tf.distribute.ReduceOp.SUM, nonfinite, axis=None), 0)

        def apply_all() -> tf.Tensor:  # run in cross-replica context: the optimizer's merge_call needs it
            strategy.run(apply, args=(gradients,))
            return tf.constant(True)

        tf.cond(applied, apply_all, lambda: tf.constant(False))
        return {"loss": batch_loss, "examples": examples, "applied": applied}

    return _function(step, element_spec)


def make_eval_step(
    model: keras.Model,
    *,
    loss: Callable[..., Any],
    metrics: Sequence[keras.metrics.Metric] | Mapping[str, Any] = (),
    strategy: tf.distribute.Strategy | None = None,
    element_spec: Any = None,
) -> Any:
    """Build the compiled validation step ``step((x, y)) -> {"loss": ..., "examples": ...}``.

    The forward pass runs with ``training=False``; the loss includes ``model.losses``, as in
    Keras's ``evaluate``; the metrics are updated. Nothing is trained.

    Args:
        model: A built ``keras.Model``.
        loss: As for :func:`make_train_step`.
        metrics: As for :func:`make_train_step`.
        strategy: As for :func:`make_train_step`.
        element_spec: As for :func:`make_train_step`.

    Returns:
        A ``tf.function`` taking one batch ``(x, y)`` and returning the batch's mean ``"loss"``
        and its number of ``"examples"``.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: With a strategy, if the model was created outside its scope.

    Example:
        >>> import numpy as np
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, kernel_initializer="zeros")])
        >>> data = tf.data.Dataset.from_tensor_slices((np.ones((4, 2), "float32"), np.full((4, 1), 3.0, "float32")))
        >>> step = make_eval_step(model, loss=keras.losses.MeanSquaredError())
        >>> float(step(next(iter(data.batch(4))))["loss"])  # (0 - 3) ** 2
        9.0
    """
    model = _check_model(model)
    _check_loss(loss)
    entries = _metric_entries(metrics)
    strategy = _check_strategy(strategy, model, None)

    def forward(x: Any, y: Any) -> tf.Tensor:
        predictions = model(x, training=False)
        _update_metrics(entries, y, predictions)
        return _replica_loss(loss, model, y, predictions, _batch_size(x))

    def step(batch: Any) -> dict[str, tf.Tensor]:
        x, y = batch
        shares = strategy.run(forward, args=(x, y))
        batch_loss = strategy.reduce(tf.distribute.ReduceOp.SUM, shares, axis=None)
        examples = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(_batch_size, args=(x,)), axis=None)
        return {"loss": batch_loss, "examples": examples}

    return _function(step, element_spec)


def _distribute(dataset: tf.data.Dataset, strategy: tf.distribute.Strategy) -> Any:
    """The dataset as the step iterates it: split over the replicas under a real strategy."""
    if strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy():
        return dataset
    return strategy.experimental_distribute_dataset(dataset)


def _run_epoch(
    step: Any, data: Any, entries: list[MetricEntry], *, epoch: int, history: dict[str, list[float]],
    bar: keras.utils.Progbar | None = None,
) -> tuple[dict[str, float], int]:
    """One pass over ``data``: the example-weighted mean loss, the metrics' results, the steps run.

    Raises:
        NonFiniteError: When a training step reports that it did not apply its gradients.
    """
    for _, metric, _ in entries:
        metric.reset_state()
    total, count, index = 0.0, 0, 0
    for index, batch in enumerate(data, start=1):
        out = step(batch)
        value, examples = float(out["loss"]), int(out["examples"])
        if "applied" in out and not bool(out["applied"]):
            raise NonFiniteError(epoch, index, value, history)
        total += value * examples
        count += examples
        if bar is not None:
            bar.update(index, [("loss", total / count)], finalize=False)
    logs = {"loss": total / max(count, 1)}
    logs.update({name: float(metric.result()) for _, metric, name in entries})
    return logs, index


def fit(
    model: keras.Model,
    dataset: tf.data.Dataset,
    *,
    optimizer: keras.optimizers.Optimizer,
    loss: Callable[..., Any],
    epochs: int = 1,
    metrics: Sequence[keras.metrics.Metric] | Mapping[str, Any] = (),
    validation_data: tf.data.Dataset | None = None,
    clip_norm: float | None = None,
    strategy: tf.distribute.Strategy | None = None,
    log_dir: str | os.PathLike | None = None,
    progress: bool = True,
    on_epoch_end: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, list[float]]:
    """Train ``model`` on ``dataset`` with a custom loop; the counterpart of ``model.fit``.

    Each epoch resets the metrics, runs the compiled step of :func:`make_train_step` on every
    batch (traced once for the dataset's ``element_spec``, not once per epoch), then validates
    on ``validation_data``. With the same initial weights, batches, SGD optimizer and loss, the
    weights it reaches equal those of ``model.compile(...); model.fit(...)`` up to float rounding.

    Args:
        model: A built ``keras.Model``. Freeze layers with ``layer.trainable = False`` before
            calling; their weights then stay as they are.
        dataset: A batched ``tf.data.Dataset`` of ``(inputs, targets)`` pairs, iterated once per
            epoch in its own order (shuffle it in the pipeline if you want shuffling).
        optimizer: A Keras optimizer (created under ``strategy.scope()`` with a strategy).
        loss: ``loss(y_true, y_pred)``: per-example losses, or a mean loss without a strategy
            (see :func:`make_train_step`); ``model.losses`` (regularization penalties) are added.
        epochs: Number of passes over ``dataset`` (>= 1).
        metrics: Keras metrics (or a mapping from output key to metrics), reported per epoch
            under their names (``key_name`` for a mapping), with a ``val_`` prefix on validation.
        validation_data: A dataset of ``(inputs, targets)`` pairs evaluated after each epoch.
        clip_norm: Clip the gradients to this global norm (> 0); None: no clipping.
        strategy: A ``tf.distribute`` strategy (e.g. ``MirroredStrategy``); the datasets are
            split over its replicas with ``experimental_distribute_dataset``. None: one device.
        log_dir: A directory for TensorBoard: every history entry is written there as a scalar
            per epoch (step = epoch number, from 1). None: no logs.
        progress: Show a ``keras.utils.Progbar``: a live bar when standard output is a terminal,
            one line per epoch elsewhere (notebooks, logs). False: silent.
        on_epoch_end: Called as ``on_epoch_end(epoch, logs)`` after each epoch (from 1), with the
            epoch's entries; use it for checkpoints or your own logging.

    Returns:
        A history dict, from ``"loss"``, each metric's name and their ``val_`` forms to one
        float per epoch. ``"loss"`` is the mean over the epoch's examples of each batch's loss,
        as ``model.fit`` reports it.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: Before training, if a dataset does not yield ``(inputs, targets)`` pairs,
            ``epochs < 1``, ``clip_norm <= 0``, or the model or optimizer was created outside
            ``strategy.scope()``.
        NonFiniteError: (a ``FloatingPointError``) if a training step's loss or a gradient is NaN
            or infinite; the message names the epoch and step, and the model keeps the weights from
            before that step.

    Example:
        >>> import numpy as np
        >>> keras.utils.set_random_seed(0)
        >>> x = np.random.default_rng(0).normal(size=(64, 2)).astype("float32")
        >>> data = tf.data.Dataset.from_tensor_slices((x, (x[:, 0] > 0).astype("int32"))).batch(16)
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, activation="softmax")])
        >>> history = fit(model, data, optimizer=keras.optimizers.Adam(0.1), epochs=5, progress=False,
        ...               loss=keras.losses.SparseCategoricalCrossentropy(),
        ...               metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
        >>> sorted(history), history["loss"][-1] < history["loss"][0], history["accuracy"][-1] > 0.9
        (['accuracy', 'loss'], True, True)
    """
    model = _check_model(model)
    _check_optimizer(optimizer)
    _check_loss(loss)
    dataset = _check_pairs(dataset, "dataset")
    if validation_data is not None:
        validation_data = _check_pairs(validation_data, "validation_data")
    epochs = check_int(epochs, "epochs", minimum=1)
    if clip_norm is not None:
        clip_norm = check_real(clip_norm, "clip_norm", above=0)
    progress = check_bool(progress, "progress")
    if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
        raise TypeError(f"log_dir: expected a directory path or None, got {describe(log_dir)}")
    if on_epoch_end is not None and not callable(on_epoch_end):
        raise TypeError(f"on_epoch_end: expected a callable or None, got {describe(on_epoch_end)}")
    entries = _metric_entries(metrics)
    strategy = _check_strategy(strategy, model, optimizer)

    train_data = _distribute(dataset, strategy)
    train_step = make_train_step(model, optimizer=optimizer, loss=loss, metrics=metrics, clip_norm=clip_norm,
                                 strategy=strategy, element_spec=train_data.element_spec)
    if validation_data is not None:
        validation_data = _distribute(validation_data, strategy)
        eval_step = make_eval_step(model, loss=loss, metrics=metrics, strategy=strategy,
                                   element_spec=validation_data.element_spec)
    steps = int(dataset.cardinality()) if int(dataset.cardinality()) >= 0 else None
    names = ["loss", *(name for _, _, name in entries)]
    names += [f"val_{name}" for name in names]
    history: dict[str, list[float]] = {}
    writer = tf.summary.create_file_writer(os.fspath(log_dir)) if log_dir is not None else None
    try:
        for epoch in range(1, epochs + 1):
            bar = _progress_bar(epoch, epochs, steps, names) if progress else None
            logs, steps_run = _run_epoch(train_step, train_data, entries, epoch=epoch, history=history, bar=bar)
            if validation_data is not None:
                val_logs, _ = _run_epoch(eval_step, validation_data, entries, epoch=epoch, history=history)
                logs.update({f"val_{name}": value for name, value in val_logs.items()})
            for name, value in logs.items():
                history.setdefault(name, []).append(value)
            if bar is not None:
                bar.target = bar.target or steps_run  # a dataset of unknown length: now known
                bar.update(steps_run, list(logs.items()), finalize=True)
            if writer is not None:
                _write_scalars(writer, logs, epoch)
            if on_epoch_end is not None:
                on_epoch_end(epoch, dict(logs))
    finally:
        if writer is not None:
            writer.close()
    return history


#: Marks a summary as a TensorBoard scalar (what ``tf.summary.scalar`` writes, without needing
#: the ``tensorboard`` package, which ``tf.summary.scalar`` imports and TensorFlow does not require).
_SCALAR_METADATA = tf.compat.v1.SummaryMetadata(
    plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars")
).SerializeToString()


def _write_scalars(writer: Any, logs: dict[str, float], epoch: int) -> None:
    with writer.as_default():
        for name, value in logs.items():
            tf.summary.write(name, tf.constant(value, tf.float32), step=epoch, metadata=_SCALAR_METADATA)
    writer.flush()


def _progress_bar(epoch: int, epochs: int, steps: int | None, names: list[str]) -> keras.utils.Progbar:
    """A Progbar for one epoch: live in a terminal, one finished line elsewhere (no ``\\r``)."""
    live = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
    print(f"Epoch {epoch}/{epochs}")
    return keras.utils.Progbar(steps, verbose=1 if live else 2, stateful_metrics=names)
