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
Under mixed precision the step scales the loss with ``optimizer.scale_loss`` before taking
gradients, as Keras's own ``train_step`` does, so a ``keras.optimizers.LossScaleOptimizer`` works.

``fit`` runs as ``model.fit`` does: the compiled function takes the dataset's *iterator* and
fetches each batch inside the graph, the epoch's totals stay on the device (nothing is read
back after each step), and the traced function is kept on the model, so calling ``fit`` again
with the same model, optimizer, loss, metrics and data layout does not trace again.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from companion._checks import check_bool, check_int, check_real, describe

__all__ = ["NonFiniteError", "fit", "make_eval_step", "make_train_step"]

#: One metric and where it reads: ``(output key or None for the whole output, metric, log name)``.
MetricEntry = tuple[Any, keras.metrics.Metric, str]

#: ``fit`` reads its running totals back from the device at most this often (seconds) during an
#: epoch, to refresh a live progress bar and to stop early after a non-finite step; never per step.
READ_INTERVAL = 0.5

#: The attribute of a model where ``fit`` keeps its traced functions (as ``model.fit`` keeps
#: ``model.train_function``); set past Keras's attribute tracking, so it is neither a weight
#: nor saved.
_CACHE = "_companion_fit_functions"


class NonFiniteError(FloatingPointError):
    """``fit`` stopped because a step's loss or one of its gradients was NaN or infinite.

    The step's gradients were not applied, nor those of any later step: the model holds the
    weights from before that step. A finite loss with non-finite gradients happens, e.g., when a
    NaN input reaches a ``Dense`` layer with a ReLU in compiled code: TensorFlow's graph
    optimizer runs such a layer as one fused MatMul+BiasAdd+ReLU kernel, which outputs 0 where a
    separate ReLU would pass the NaN on, so the forward pass and the loss stay finite while the
    layer's kernel gradient (its input times the upstream gradient) is NaN. With a
    ``keras.optimizers.LossScaleOptimizer`` only a non-finite loss stops training: non-finite
    (scaled) gradients are its business (it skips the step and lowers its loss scale).

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


def _check_trainable(model: keras.Model) -> list[Any]:
    """The model's trainable variables, after checking that it is built and has some."""
    if not model.built:
        raise ValueError(
            f"model: expected a built model, got an unbuilt {type(model).__name__}; call it on a batch "
            f"first, or give it an Input (fit builds it from the dataset)"
        )
    variables = list(model.trainable_variables)
    if not variables:
        raise ValueError(f"model: expected trainable variables, got none in {type(model).__name__} "
                         f"{model.name!r} (is every layer frozen?)")
    return variables


def _build(model: keras.Model, input_spec: Any, strategy: tf.distribute.Strategy) -> None:
    """Build an unbuilt model for inputs like ``input_spec``, symbolically, as ``model.fit`` does."""
    if model.built:
        return
    symbolic = tf.nest.map_structure(lambda spec: keras.KerasTensor(spec.shape, spec.dtype), input_spec)
    with strategy.scope():  # its variables must be the strategy's
        model(symbolic, training=False)


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
    if int(dataset.cardinality()) == int(tf.data.INFINITE_CARDINALITY):
        raise ValueError(f"{name}: expected a finite dataset (an epoch is one pass over it), got an "
                         f"infinite one; limit it, e.g. dataset.take(steps)")
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
    (``tf.nn.compute_average_loss``), so the replicas' shares add up to the global mean. A scalar
    from a ``keras.losses.Loss`` is already a share: inside a replica, Keras divides its mean by
    the number of replicas (and sums add up by themselves). A scalar from any other function is
    used as is on one replica and refused under several: a hand-written mean has not been
    divided, and the step cannot tell it from a Keras one. Float16 losses are summed in float32.
    """
    values = tf.convert_to_tensor(loss(y, predictions))
    if values.dtype in (tf.float16, tf.bfloat16):
        values = tf.cast(values, tf.float32)
    if values.shape.rank == 0:
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        if replicas > 1 and not isinstance(loss, keras.losses.Loss):
            name = getattr(loss, "__name__", type(loss).__name__)
            raise ValueError(
                f"loss: expected per-example losses (shape (batch,)) or a keras.losses.Loss under a "
                f"strategy with {replicas} replicas, got a scalar from {name!r}; a mean of each replica's "
                f"examples would count {replicas} times, so return one loss per example"
            )
        share = values
    else:
        global_size = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, size)
        share = tf.nn.compute_average_loss(values, global_batch_size=global_size)
    if model.losses:  # regularization penalties: counted once over all replicas
        share += tf.nn.scale_regularization_loss(tf.add_n([tf.cast(p, share.dtype) for p in model.losses]))
    return share


def _count_nonfinite(share: tf.Tensor, gradients: list[Any]) -> tf.Tensor:
    """1 if this replica's loss or any of ``gradients`` is NaN or infinite, else 0."""
    present = [g for g in gradients if g is not None]
    finite = tf.math.is_finite(share)
    if present:
        finite = tf.logical_and(finite, tf.math.is_finite(tf.linalg.global_norm(present)))
    return tf.cast(tf.logical_not(finite), tf.int32)


def _update_metrics(entries: list[MetricEntry], y: Any, predictions: Any) -> None:
    for key, metric, _ in entries:
        metric.update_state(y if key is None else y[key], predictions if key is None else predictions[key])


def _clip_by_global_norm(gradients: list[Any], clip_norm: Any) -> list[Any]:
    """Scale every replica's gradients by ``min(1, clip_norm / norm)`` of the *summed* gradients.

    The optimizer sums the replicas' gradients; clipping each replica's part by its own norm
    would bound the wrong vector. With one replica the all-reduce is the identity. Non-finite
    gradients come out NaN (and are then refused, by the step or by a loss-scale optimizer).
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
    penalties) to ``loss(y, predictions)``, scales that loss with ``optimizer.scale_loss`` (the
    identity, except for a ``keras.optimizers.LossScaleOptimizer``, which multiplies it by its
    loss scale and divides the gradients by it again), takes the gradients of
    ``model.trainable_variables`` (so frozen layers, ``layer.trainable = False``, stay as they
    are), clips them to a global norm if asked, applies them with ``optimizer`` and updates
    ``metrics``. If the loss or a gradient is not finite (on any replica), the gradients are
    **not** applied: the weights and the optimizer stay as they were (the metrics are still
    updated), and ``"applied"`` says so. With a ``LossScaleOptimizer`` only the loss is checked
    here: non-finite scaled gradients are the optimizer's to skip (it lowers its scale). Write
    your own outer loop around it, or use :func:`fit`.

    Args:
        model: A built ``keras.Model`` (created under ``strategy.scope()`` when a strategy is given).
        optimizer: A Keras optimizer; it is built for the model's trainable variables here. Under
            ``keras.mixed_precision.set_global_policy("mixed_float16")``, wrap it in a
            ``keras.optimizers.LossScaleOptimizer``, as ``model.compile`` does.
        loss: ``loss(y_true, y_pred)`` returning per-example losses (shape ``(batch,)``, e.g. a
            Keras loss made with ``reduction=None``), or a scalar: the batch's loss from a
            ``keras.losses.Loss`` (e.g. with its default mean reduction), or, on one replica only,
            from any function. ``y_true`` and ``y_pred`` are whatever the dataset and the model
            give: dicts for multi-output models, so a multi-task loss is a plain function of both.
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
        or (without a loss-scale optimizer) a gradient was not finite.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If ``clip_norm <= 0``, the model is not built or has no trainable variables,
            or with a strategy, if the model or optimizer was created outside its scope; when
            first called, if ``loss`` is a plain function returning a scalar under a strategy with
            several replicas.

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
    return _function(_train_step(model, optimizer, loss, entries, clip_norm, strategy), element_spec)


def _train_step(
    model: keras.Model, optimizer: keras.optimizers.Optimizer, loss: Callable[..., Any],
    entries: list[MetricEntry], clip_norm: float | None, strategy: tf.distribute.Strategy,
) -> Callable[[Any], dict[str, tf.Tensor]]:
    """The training step of :func:`make_train_step` as a Python function (checked arguments)."""
    variables = _check_trainable(model)
    with strategy.scope():
        if not optimizer.built:
            optimizer.build(variables)
    loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def forward_backward(x: Any, y: Any) -> tuple[tf.Tensor, list[Any], tf.Tensor]:
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            share = _replica_loss(loss, model, y, predictions, _batch_size(x))
            scaled = optimizer.scale_loss(share)
        _update_metrics(entries, y, predictions)
        gradients = tape.gradient(scaled, variables)
        return share, gradients, _count_nonfinite(share, [] if loss_scaling else gradients)

    def apply(gradients: list[Any]) -> None:
        if clip_norm is not None:  # the gradients are scaled with the loss: so is their limit
            gradients = _clip_by_global_norm(gradients, optimizer.scale_loss(clip_norm))
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

    return step


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
    return _function(_eval_step(model, loss, entries, strategy), element_spec)


def _eval_step(
    model: keras.Model, loss: Callable[..., Any], entries: list[MetricEntry], strategy: tf.distribute.Strategy
) -> Callable[[Any], dict[str, tf.Tensor]]:
    """The validation step of :func:`make_eval_step` as a Python function (checked arguments)."""

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

    return step


def _distribute(dataset: tf.data.Dataset, strategy: tf.distribute.Strategy) -> Any:
    """The dataset as the step iterates it: split over the replicas under a real strategy."""
    if strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy():
        return dataset
    return strategy.experimental_distribute_dataset(dataset)


def _epoch_function(step: Callable[[Any], dict[str, tf.Tensor]]) -> tuple[Any, dict[str, tf.Variable]]:
    """``run_next(iterator)``, which runs ``step`` on the iterator's next batch, and its totals.

    As in ``model.fit``, the compiled function takes the iterator and fetches the batch inside
    the graph. The epoch's totals are variables on the device (the loss times the examples, the
    examples, the steps run, the first step whose gradients were not applied and the loss of the
    last step run), so the loop needs to read nothing back per step. Once a step has not applied
    its gradients, every later call only consumes its batch: the weights stay those from before
    that step, and it is the last step run. ``run_next`` returns whether the iterator had a batch.
    """
    totals = {"loss": tf.Variable(0.0, dtype=tf.float64, trainable=False),
              "examples": tf.Variable(0, dtype=tf.int64, trainable=False),
              "steps": tf.Variable(0, dtype=tf.int64, trainable=False),
              "bad_step": tf.Variable(0, dtype=tf.int64, trainable=False),
              "last_loss": tf.Variable(0.0, dtype=tf.float64, trainable=False)}

    def run_next(iterator: Any) -> tf.Tensor:
        batch = iterator.get_next_as_optional()

        def run() -> tf.Tensor:
            out = step(batch.get_value())
            index = totals["steps"].assign_add(1)
            value, examples = tf.cast(out["loss"], tf.float64), tf.cast(out["examples"], tf.int64)
            totals["loss"].assign_add(value * tf.cast(examples, tf.float64))
            totals["examples"].assign_add(examples)
            totals["last_loss"].assign(value)
            if "applied" in out:
                totals["bad_step"].assign(tf.where(out["applied"], tf.constant(0, tf.int64), index))
            return tf.constant(True)

        tf.cond(tf.logical_and(batch.has_value(), tf.equal(totals["bad_step"], 0)), run, lambda: tf.constant(False))
        return batch.has_value()

    return tf.function(run_next, autograph=False), totals


def _cached(model: keras.Model, kind: str, key: tuple[Any, ...], keep: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """The ``kind`` function kept on ``model`` for ``key``, or a new one from ``make()``.

    ``key`` names objects by ``id``; ``keep`` holds them, so that no id is reused while the
    entry lives. One entry per kind: a new key replaces the old function, as ``model.compile``
    replaces ``model.train_function``.
    """
    functions = vars(model).get(_CACHE)
    if functions is None:
        functions = {}
        object.__setattr__(model, _CACHE, functions)  # past Keras's tracking: not a weight, not saved
    if kind not in functions or functions[kind][0] != key:
        functions[kind] = (key, keep, make())
    return functions[kind][2]


def _run_epoch(
    function: tuple[Any, dict[str, tf.Variable]], data: Any, steps: int | None, entries: list[MetricEntry], *,
    epoch: int, history: dict[str, list[float]], bar: keras.utils.Progbar | None = None,
) -> tuple[dict[str, float], int]:
    """One pass over ``data``: the example-weighted mean loss, the metrics' results, the steps run.

    With a known number of ``steps`` the loop reads nothing back from the device until the end
    of the epoch, except every ``READ_INTERVAL`` seconds: the running loss for a live bar, and
    whether a step has failed (the remaining batches are then left unread).

    Raises:
        NonFiniteError: When a training step reports that it did not apply its gradients.
    """
    run_next, totals = function
    for _, metric, _ in entries:
        metric.reset_state()
    for variable in totals.values():
        variable.assign(tf.zeros_like(variable))
    iterator = iter(data)
    index, next_read = 0, time.monotonic() + READ_INTERVAL
    while steps is None or index < steps:
        more = run_next(iterator)
        if steps is None and not bool(more):  # a dataset of unknown length: ask the iterator
            break
        index += 1
        if time.monotonic() >= next_read:
            if int(totals["bad_step"]):
                break
            if bar is not None and bar.verbose == 1:
                bar.update(index, [("loss", float(totals["loss"]) / max(int(totals["examples"]), 1))])
            next_read = time.monotonic() + READ_INTERVAL
    if int(totals["bad_step"]):
        raise NonFiniteError(epoch, int(totals["bad_step"]), float(totals["last_loss"]), history)
    logs = {"loss": float(totals["loss"]) / max(int(totals["examples"]), 1)}
    logs.update({name: float(metric.result()) for _, metric, name in entries})
    return logs, int(totals["steps"])


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

    Each epoch resets the metrics, runs the step of :func:`make_train_step` on every batch, then
    validates on ``validation_data``. As in ``model.fit``, the compiled function fetches each
    batch from the dataset's iterator inside the graph and keeps the epoch's totals on the device,
    so nothing is read back per step; it is traced once and kept on the model: a later call with
    the same model, optimizer, loss, metrics, ``clip_norm``, strategy and dataset ``element_spec``
    (and the same trainable variables) reuses it. With the same initial weights, batches, SGD
    optimizer and loss, the weights it reaches equal those of ``model.compile(...);
    model.fit(...)`` up to float rounding; with a ``keras.optimizers.LossScaleOptimizer`` under
    ``mixed_float16``, too (the loss is scaled as in Keras's ``train_step``).

    Args:
        model: A ``keras.Model``; one not built yet (no ``Input``) is built for the inputs of
            ``dataset``'s ``element_spec``, as ``model.fit`` does. Freeze layers with
            ``layer.trainable = False`` before calling; their weights then stay as they are.
        dataset: A batched ``tf.data.Dataset`` of ``(inputs, targets)`` pairs, iterated once per
            epoch in its own order (shuffle it in the pipeline if you want shuffling); finite.
        optimizer: A Keras optimizer (created under ``strategy.scope()`` with a strategy).
        loss: ``loss(y_true, y_pred)``: per-example losses, a Keras loss (any reduction), or,
            without a strategy, any scalar loss (see :func:`make_train_step`); ``model.losses``
            (regularization penalties) are added.
        epochs: Number of passes over ``dataset`` (>= 1).
        metrics: Keras metrics (or a mapping from output key to metrics), reported per epoch
            under their names (``key_name`` for a mapping), with a ``val_`` prefix on validation.
        validation_data: A dataset of ``(inputs, targets)`` pairs evaluated after each epoch.
        clip_norm: Clip the gradients to this global norm (> 0); None: no clipping.
        strategy: A ``tf.distribute`` strategy (e.g. ``MirroredStrategy``); the datasets are
            split over its replicas with ``experimental_distribute_dataset``. None: one device.
        log_dir: A directory for TensorBoard: every history entry is written there as a scalar
            per epoch (step = epoch number, from 1). None: no logs.
        progress: Show a ``keras.utils.Progbar``: a live bar when standard output is a terminal
            (refreshed every ``READ_INTERVAL`` seconds), one line per epoch elsewhere (notebooks,
            logs). False: silent.
        on_epoch_end: Called as ``on_epoch_end(epoch, logs)`` after each epoch (from 1), with the
            epoch's entries; use it for checkpoints or your own logging.

    Returns:
        A history dict, from ``"loss"``, each metric's name and their ``val_`` forms to one
        float per epoch. ``"loss"`` is the mean over the epoch's examples of each batch's loss,
        as ``model.fit`` reports it.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: Before training, if a dataset does not yield ``(inputs, targets)`` pairs or
            is infinite, ``epochs < 1``, ``clip_norm <= 0``, the model has no trainable
            variables, or the model or optimizer was created outside ``strategy.scope()``; when
            tracing, if a plain function returns a scalar loss under several replicas.
        NonFiniteError: (a ``FloatingPointError``) if a training step's loss or (without a
            loss-scale optimizer) a gradient is NaN or infinite; the message names the epoch and
            step, and the model keeps the weights from before that step. It is raised at the
            end of that epoch, or sooner, at the loop's next read of the device.

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
    _build(model, dataset.element_spec[0], strategy)
    variables = _check_trainable(model)

    train_data = _distribute(dataset, strategy)
    metric_key = tuple((key, id(metric)) for key, metric, _ in entries)
    train = _cached(
        model, "train",
        (id(optimizer), id(loss), metric_key, clip_norm, id(strategy), train_data.element_spec,
         tuple(id(v) for v in variables)),
        (optimizer, loss, entries, strategy, variables),
        lambda: _epoch_function(_train_step(model, optimizer, loss, entries, clip_norm, strategy)),
    )
    if validation_data is not None:
        validation_steps = _length(validation_data)
        validation_data = _distribute(validation_data, strategy)
        evaluate = _cached(
            model, "eval", (id(loss), metric_key, id(strategy), validation_data.element_spec),
            (loss, entries, strategy), lambda: _epoch_function(_eval_step(model, loss, entries, strategy)),
        )
    steps = _length(dataset)
    names = ["loss", *(name for _, _, name in entries)]
    names += [f"val_{name}" for name in names]
    history: dict[str, list[float]] = {}
    writer = tf.summary.create_file_writer(os.fspath(log_dir)) if log_dir is not None else None
    try:
        for epoch in range(1, epochs + 1):
            bar = _progress_bar(epoch, epochs, steps, names) if progress else None
            logs, steps_run = _run_epoch(train, train_data, steps, entries, epoch=epoch, history=history, bar=bar)
            if validation_data is not None:
                val_logs, _ = _run_epoch(evaluate, validation_data, validation_steps, entries, epoch=epoch,
                                         history=history)
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


def _length(dataset: tf.data.Dataset) -> int | None:
    """The number of batches per pass over ``dataset``; None if unknown (e.g. after ``filter``)."""
    cardinality = int(dataset.cardinality())
    return cardinality if cardinality >= 0 else None


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
