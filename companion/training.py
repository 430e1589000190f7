"""Custom training loops (chapter 7): the training step written out, and ``fit`` around it.

``make_train_step`` builds the compiled step a reader would write by hand (``GradientTape``,
loss, gradients, optional global-norm clipping, ``apply_gradients``, metrics), and
``make_eval_step`` its validation twin. ``fit`` is the outer loop: epochs, metrics reset each
epoch, validation, a ``keras.utils.Progbar``, TensorBoard scalars, and a stop at the first
non-finite loss, gradient or learning rate, with the weights from before that step (or right
after an update that made a weight non-finite, or after an epoch whose validation loss is not).

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

With ``checkpoint_dir`` (chapter 10) ``fit`` writes checkpoints of the model, the optimizer,
the history and the epoch in progress, so that a job that crashed can be restarted where it
stopped: it carries on from the newest one, to the weights an unbroken run reaches (the same
weights and losses to the bit, metrics to float rounding on several replicas) if the datasets
yield the same batches each pass (no reshuffling, or a seeded shuffle with
``reshuffle_each_iteration=False``). Under a multi-worker strategy the chief's checkpoints are
kept (every worker takes part in a save) and every worker restores from the folder, which must
be one they all see.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from companion._checks import (
    check_bool,
    check_choice,
    check_clip_norm,
    check_instance,
    check_int,
    check_sequence,
    describe,
    float_tensor,
    is_real,
)
from companion._finite import has_nonfinite, nonfinite_flag
from companion._training_checks import (
    MetricEntry,
    _check_built,
    _check_element_spec,
    _check_inputs,
    _check_loss,
    _check_metric_keys,
    _check_model,
    _check_optimizer,
    _check_output_keys,
    _check_pairs,
    _check_records,
    _check_strategy,
    _check_trainable,
    _learning_rate,
    _metric_entries,
)
from companion._training_state import TrainingCheckpoint, _finish, _FitHooks

__all__ = ["NonFiniteError", "clip_by_global_norm", "fit", "make_eval_step", "make_train_step"]

#: ``fit`` reads its running totals back from the device at most this often (seconds) during an
#: epoch, to refresh a live progress bar and to stop early after a non-finite step; never per step.
READ_INTERVAL = 0.5

#: The most epochs ``fit`` takes: a million passes over the data; more is a slip (``10**12`` would
#: never end).
MAX_EPOCHS = 10**6

#: The attribute of a model where ``fit`` keeps its traced functions (as ``model.fit`` keeps
#: ``model.train_function``); set past Keras's attribute tracking, so it is neither a weight
#: nor saved.
_CACHE = "_companion_fit_functions"


class NonFiniteError(FloatingPointError):
    """``fit`` stopped: a loss, a gradient, the learning rate or the weights were NaN or infinite.

    ``cause`` says which, and the message says what the model holds:

    - ``"loss"``, ``"gradients"``, ``"learning_rate"``: a training step's loss, one of its gradients
      or the optimizer's learning rate (e.g. from a schedule) was not finite. The step's gradients
      were not applied, nor those of any later step: the model keeps the weights from before it.
    - ``"weights"``: the step applied its update and a weight came out NaN or infinite (e.g. an
      optimizer setting that overflows): training stopped after that step, with those weights.
    - ``"val_loss"``: the loss on ``validation_data`` was not finite (NaN or inf in its inputs or
      targets, or in the model's output on them): training stopped after the epoch's training.

    A finite loss with non-finite gradients happens, e.g., when a NaN input reaches a ``Dense``
    layer with a ReLU in compiled code: TensorFlow's graph optimizer runs such a layer as one fused
    MatMul+BiasAdd+ReLU kernel, which outputs 0 where a separate ReLU would pass the NaN on, so
    the forward pass and the loss stay finite while the layer's kernel gradient (its input times
    the upstream gradient) is NaN. With a ``keras.optimizers.LossScaleOptimizer`` non-finite
    (scaled) gradients do not stop training: they are its business (it skips the step and lowers
    its loss scale).

    Attributes:
        epoch: The epoch of the bad step (counted from 1).
        step: The step within that epoch (counted from 1; a validation step for ``"val_loss"``).
        loss: The step's loss (``nan`` or ``inf``, or a finite value when only something else
            was not).
        history: The history of the epochs completed before this one.
        cause: One of :attr:`CAUSES`.

    Taught in chapter 7, "A NaN stops training, and keeps the last good weights".
    """

    #: What can stop training, each with what the message says about it and about the weights.
    CAUSES = {
        "loss": (
            "loss is {loss}",
            "training stopped before applying that step's gradients, so the model keeps the "
            "weights from before it",
        ),
        "gradients": (
            "gradients are not finite (loss {loss:.4g})",
            "training stopped before applying that step's "
            "gradients, so the model keeps the weights from before it",
        ),
        "learning_rate": (
            "the learning rate is not finite (loss {loss:.4g})",
            "training stopped before applying "
            "that step's gradients, so the model keeps the weights from before it",
        ),
        "weights": (
            "weights are not finite after the update (loss {loss:.4g})",
            "the optimizer's step made them so (check its learning rate and settings); training "
            "stopped after that step, so the model holds those non-finite weights",
        ),
        "val_loss": (
            "val_loss is {loss} on validation_data",
            "check validation_data for NaN or infinite values; "
            "training stopped after that epoch's training, whose weights the model keeps",
        ),
    }

    def __init__(
        self,
        epoch: int,
        step: int,
        loss: float,
        history: dict[str, list[float]],
        cause: str | None = None,
    ) -> None:
        epoch, step = check_int(epoch, "epoch", minimum=1), check_int(step, "step", minimum=1)
        if not is_real(loss):
            raise TypeError(f"loss: expected a number (NaN and inf too), got {describe(loss)}")
        loss = float(loss)
        what = "a dict from names to lists of floats"
        history = check_instance(history, "history", dict, what)
        if not all(
            isinstance(key, str) and isinstance(values, list) for key, values in history.items()
        ):
            raise TypeError(f"history: expected {what}, got {describe(history)}")
        if cause is None:
            cause = "loss" if not math.isfinite(loss) else "gradients"
        what, outcome = self.CAUSES[check_choice(cause, "cause", tuple(self.CAUSES))]
        where = (
            f"epoch {epoch}, validation step {step}"
            if cause == "val_loss"
            else f"epoch {epoch}, step {step}"
        )
        super().__init__(f"{what.format(loss=loss)} at {where}: {outcome}")
        self.epoch, self.step, self.loss, self.history, self.cause = (
            epoch,
            step,
            loss,
            history,
            cause,
        )


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
    values = _loss_values(loss, loss(y, predictions))
    if values.dtype in (tf.float16, tf.bfloat16):
        values = tf.cast(values, tf.float32)
    if values.shape.rank == 0:
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        if replicas > 1 and not isinstance(loss, keras.losses.Loss):
            name = getattr(loss, "__name__", type(loss).__name__)
            raise ValueError(
                f"loss: expected per-example losses (shape (batch,)) or a keras.losses.Loss under "
                f"a strategy with {replicas} replicas, got a scalar from {name!r}; a mean of each "
                f"replica's examples would count {replicas} times, so return one loss per example"
            )
        share = values
    else:
        global_size = tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, size
        )
        share = tf.nn.compute_average_loss(values, global_batch_size=global_size)
    if model.losses:  # regularization penalties: counted once over all replicas
        share += tf.nn.scale_regularization_loss(
            tf.add_n([tf.cast(p, share.dtype) for p in model.losses])
        )
    return share


def _loss_values(loss: Callable[..., Any], value: Any) -> tf.Tensor:
    """What ``loss`` returned, as a float tensor; the project's error for anything else (a str,
    an int: Keras's own losses return floats, and an int loss has no gradient)."""
    try:
        values = tf.convert_to_tensor(value)
    except (TypeError, ValueError):
        values = None
    if values is None or not values.dtype.is_floating:
        raise TypeError(
            f"loss: expected a callable returning float losses, got {describe(loss)}, which "
            f"returned {describe(value)}"
        )
    return values


def _count_nonfinite(share: tf.Tensor, gradients: list[Any]) -> tf.Tensor:
    """1 if this replica's loss or the global norm of ``gradients`` is NaN or infinite (any
    gradient is, or the norm overflows), else 0."""
    present = [g for g in gradients if g is not None]
    norm = tf.linalg.global_norm(present) if present else None
    return tf.cast(nonfinite_flag([share, norm]), tf.int32)


def _update_metrics(entries: list[MetricEntry], y: Any, predictions: Any) -> None:
    _check_metric_keys(entries, predictions, "the model's outputs")  # runs while tracing
    _check_metric_keys(entries, y, "the targets")
    for key, metric, _ in entries:
        metric.update_state(
            y if key is None else y[key], predictions if key is None else predictions[key]
        )


def _gradient(value: Any, name: str) -> Any:
    """A gradient as the tape gives it: None, ``tf.IndexedSlices`` (kept sparse) or a tensor."""
    if value is None or isinstance(value, tf.IndexedSlices):
        return value
    return float_tensor(value, name)


def clip_by_global_norm(
    gradients: Sequence[Any], clip_norm: float, loss_scale: Any = 1.0
) -> list[Any]:
    """Scale every replica's gradients by ``min(1, clip_norm / norm)`` of the *summed* gradients.

    For a training step that runs on each replica (``strategy.run``, Keras's ``train_step``):
    the optimizer sums the replicas' gradients, and clipping each replica's part by its own norm
    (as ``global_clipnorm`` does) would bound the wrong vector. With one replica the all-reduce
    is the identity. The gradients are those of the loss times ``loss_scale`` (under a
    ``LossScaleOptimizer``, ``optimizer.scale_loss(1.0)``). The norm is divided by the scale and
    by ``clip_norm``, and clipped to 1: ``tf.clip_by_global_norm`` with ``clip_norm`` itself
    computes ``1 / clip_norm``, which float32 flushes to 0 above about 8.5e37 (every gradient
    zeroed), and a limit multiplied by the scale overflows. Non-finite gradients come out NaN.
    The norm is computed in float64 when a gradient is float64 (a float64 model), in float32
    otherwise (float16 gradients too), and each gradient keeps its dtype.

    Args:
        gradients: A list of gradient tensors, None for a variable without one.
        clip_norm: The largest global norm, as for :func:`fit`.
        loss_scale: The factor the loss was multiplied by before taking gradients.

    Returns:
        The gradients, scaled (None where there was none).

    Raises:
        TypeError: If ``gradients`` is not a list or tuple, or ``clip_norm`` not a number.
        ValueError: If ``gradients`` is empty or ``clip_norm`` is out of range.

    Example:
        >>> clipped = clip_by_global_norm([tf.constant([3.0, 4.0]), None], clip_norm=1.0)
        >>> [round(float(v), 3) for v in clipped[0]], clipped[1]
        ([0.6, 0.8], None)

    Taught in chapter 7, "What a custom loop lets you change".
    """
    gradients = check_sequence(
        gradients,
        "gradients",
        "a list of gradient tensors",
        item=_gradient,
    )
    clip_norm = check_clip_norm(clip_norm)
    if clip_norm is None:
        raise TypeError("clip_norm: expected a finite number > 0, got NoneType None")
    present = [g for g in gradients if g is not None]
    if not present:
        return list(gradients)
    summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, present)
    # float64 gradients (a float64 model) in float64, the others in float32
    dtype = tf.float64 if any(g.dtype == tf.float64 for g in summed) else tf.float32
    norm = tf.linalg.global_norm([tf.cast(g, dtype) for g in summed])
    relative = norm / tf.cast(loss_scale, dtype) / clip_norm
    clipped, _ = tf.clip_by_global_norm(gradients, 1.0, use_norm=relative)
    return clipped


def _all_finite(variables: list[Any]) -> tf.Tensor:
    """Whether every element of ``variables`` is finite (elementwise: a large weight is fine)."""
    return tf.equal(nonfinite_flag(variables), 0.0)


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
    """Build the compiled training step ``step((x, y)) -> {"loss": ..., "applied": ..., ...}``.

    One call runs the forward pass under a ``tf.GradientTape``, adds ``model.losses`` (e.g. L2
    penalties) to ``loss(y, predictions)``, scales that loss with ``optimizer.scale_loss`` (the
    identity, except for a ``keras.optimizers.LossScaleOptimizer``, which multiplies it by its
    loss scale and divides the gradients by it again), takes the gradients of
    ``model.trainable_variables`` (so frozen layers, ``layer.trainable = False``, stay as they
    are), clips them to a global norm if asked, applies them with ``optimizer`` and updates
    ``metrics``. If the loss, a gradient (on any replica) or the learning rate is not finite,
    the gradients are **not** applied: the weights and the optimizer stay as they were (the
    metrics are still updated), and ``"applied"`` says so. With a ``LossScaleOptimizer`` the
    gradients are not checked here: non-finite scaled gradients are the optimizer's to skip (it
    lowers its scale). After an update the step checks the weights: ``"weights_finite"`` is
    False when the update made one NaN or infinite (e.g. an optimizer setting that overflows);
    stop there. Write your own outer loop around it, or use :func:`fit`. Make the step after
    freezing layers: it trains the variables that were trainable when it was made.

    Args:
        model: A built ``keras.Model`` (created under ``strategy.scope()`` with a strategy).
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
        clip_norm: Clip the gradients to this global norm before applying them (> 0 and at most
            float32's largest value, about 3.4e38; values that round to 0 in float32 are
            refused); None: no clipping.
        strategy: A ``tf.distribute`` strategy; None runs on one device.
        element_spec: The ``element_spec`` of the dataset the step will get, an ``(inputs,
            targets)`` pair of ``tf.TypeSpec`` (of the distributed dataset, with a strategy): the
            step is then traced once. None: traced per new input shape, with shapes relaxed after
            the second.

    Returns:
        A ``tf.function`` taking one batch ``(x, y)`` (as the dataset yields it) and returning a
        dict with the batch's mean ``"loss"`` over all replicas, the number of ``"examples"`` in
        the batch, ``"applied"``, a boolean: False when the update was skipped because the loss,
        the learning rate or (without a loss-scale optimizer) a gradient was not finite, and
        ``"weights_finite"``, a boolean: False when the applied update left a weight non-finite.

    Raises:
        TypeError: If an argument has the wrong type (``loss`` that cannot take two arguments
            included); when first called, if ``loss`` returns no floats (a str, an int).
        ValueError: If ``clip_norm`` is out of range, the optimizer's learning rate is not
            finite, metrics share a name (or take ``"loss"``), a metrics key is not one of a
            Functional model's outputs, the model is not built or has no trainable variables, or
            with a strategy, if the model or optimizer was created outside its scope; when first
            called, if a metrics key is not one of the outputs or targets, or ``loss`` is a plain
            function returning a scalar under a strategy with several replicas.

    Example:
        >>> import numpy as np
        >>> keras.utils.set_random_seed(0)
        >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        >>> x, y = np.ones((8, 3), "float32"), np.ones((8, 1), "float32")
        >>> data = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
        >>> step = make_train_step(model, optimizer=keras.optimizers.SGD(0.1),
        ...                        loss=keras.losses.MeanSquaredError(),
        ...                        element_spec=data.element_spec)
        >>> losses = [float(step(batch)["loss"]) for _ in range(3) for batch in data]
        >>> losses[-1] < losses[0], step.experimental_get_tracing_count()
        (True, 1)

    Taught in chapter 7, "A NaN stops training, and keeps the last good weights".
    """
    model = _check_model(model)
    _check_optimizer(optimizer)
    _check_loss(loss)
    entries = _metric_entries(metrics)
    clip_norm = check_clip_norm(clip_norm)
    strategy = _check_strategy(strategy, model, optimizer)
    element_spec = _check_element_spec(element_spec)
    step = _train_step(model, optimizer, loss, entries, clip_norm, strategy)
    _check_output_keys(entries, model)
    return _function(step, element_spec)


def _train_step(
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    loss: Callable[..., Any],
    entries: list[MetricEntry],
    clip_norm: float | None,
    strategy: tf.distribute.Strategy,
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
        if clip_norm is not None:
            gradients = clip_by_global_norm(
                gradients, clip_norm, optimizer.scale_loss(tf.constant(1.0))
            )
        optimizer.apply_gradients(zip(gradients, variables))

    def step(batch: Any) -> dict[str, tf.Tensor]:
        x, y = batch
        shares, gradients, nonfinite = strategy.run(forward_backward, args=(x, y))
        batch_loss = strategy.reduce(tf.distribute.ReduceOp.SUM, shares, axis=None)
        examples = strategy.reduce(
            tf.distribute.ReduceOp.SUM, strategy.run(_batch_size, args=(x,)), axis=None
        )
        applied = tf.logical_and(
            tf.equal(strategy.reduce(tf.distribute.ReduceOp.SUM, nonfinite, axis=None), 0),
            tf.math.is_finite(tf.cast(optimizer.learning_rate, tf.float32)),
        )

        # run in cross-replica context: the optimizer's merge_call needs it
        def apply_all() -> tf.Tensor:
            strategy.run(apply, args=(gradients,))
            return _all_finite(variables)

        weights_finite = tf.cond(applied, apply_all, lambda: tf.constant(True))
        return {
            "loss": batch_loss,
            "examples": examples,
            "applied": applied,
            "weights_finite": weights_finite,
        }

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
        TypeError: If an argument has the wrong type; when first called, if ``loss`` returns
            no floats (a str, an int).
        ValueError: If the model is not built, metrics share a name or a metrics key is not an
            output (as for :func:`make_train_step`), or with a strategy, if the model was created
            outside its scope.

    Example:
        >>> import numpy as np
        >>> dense = keras.layers.Dense(1, kernel_initializer="zeros")
        >>> model = keras.Sequential([keras.Input((2,)), dense])
        >>> x, y = np.ones((4, 2), "float32"), np.full((4, 1), 3.0, "float32")
        >>> data = tf.data.Dataset.from_tensor_slices((x, y))
        >>> step = make_eval_step(model, loss=keras.losses.MeanSquaredError())
        >>> float(step(next(iter(data.batch(4))))["loss"])  # (0 - 3) ** 2
        9.0

    Taught in chapter 7, "The same weights as model.fit".
    """
    model = _check_model(model)
    _check_loss(loss)
    entries = _metric_entries(metrics)
    strategy = _check_strategy(strategy, model, None)
    element_spec = _check_element_spec(element_spec)
    _check_built(model)
    _check_output_keys(entries, model)
    return _function(_eval_step(model, loss, entries, strategy), element_spec)


def _eval_step(
    model: keras.Model,
    loss: Callable[..., Any],
    entries: list[MetricEntry],
    strategy: tf.distribute.Strategy,
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
        examples = strategy.reduce(
            tf.distribute.ReduceOp.SUM, strategy.run(_batch_size, args=(x,)), axis=None
        )
        return {"loss": batch_loss, "examples": examples}

    return step


def _distribute(dataset: tf.data.Dataset, strategy: tf.distribute.Strategy) -> Any:
    """The dataset as the step iterates it: split over the replicas under a real strategy."""
    if strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy():
        return dataset
    return strategy.experimental_distribute_dataset(dataset)


def _epoch_function(
    step: Callable[[Any], dict[str, tf.Tensor]],
) -> tuple[Any, dict[str, tf.Variable]]:
    """``run_next(iterator)``, which runs ``step`` on the iterator's next batch, and its totals.

    As in ``model.fit``, the compiled function takes the iterator and fetches the batch inside
    the graph. The epoch's totals are variables on the device (the loss times the examples, the
    examples, the steps run, the first bad step and the loss of the last step run), so the loop
    needs to read nothing back per step. A training step is bad when it did not apply its
    gradients or left a weight non-finite; a validation step, when its loss is not finite. After
    a bad step every later call only consumes its batch: it is the last step run, and the
    weights stay as that step left them. ``run_next`` returns whether the iterator had a batch.
    """
    totals = {
        "loss": tf.Variable(0.0, dtype=tf.float64, trainable=False),
        "examples": tf.Variable(0, dtype=tf.int64, trainable=False),
        "steps": tf.Variable(0, dtype=tf.int64, trainable=False),
        "bad_step": tf.Variable(0, dtype=tf.int64, trainable=False),
        "last_loss": tf.Variable(0.0, dtype=tf.float64, trainable=False),
    }

    def run_next(iterator: Any) -> tf.Tensor:
        batch = iterator.get_next_as_optional()

        def run() -> tf.Tensor:
            out = step(batch.get_value())
            index = totals["steps"].assign_add(1)
            value, examples = tf.cast(out["loss"], tf.float64), tf.cast(out["examples"], tf.int64)
            totals["loss"].assign_add(value * tf.cast(examples, tf.float64))
            totals["examples"].assign_add(examples)
            totals["last_loss"].assign(value)
            good = (
                tf.logical_and(out["applied"], out["weights_finite"])
                if "applied" in out
                else tf.math.is_finite(value)
            )
            totals["bad_step"].assign(tf.where(good, tf.constant(0, tf.int64), index))
            return tf.constant(True)

        tf.cond(
            tf.logical_and(batch.has_value(), tf.equal(totals["bad_step"], 0)),
            run,
            lambda: tf.constant(False),
        )
        return batch.has_value()

    return tf.function(run_next, autograph=False), totals


def _cached(
    model: keras.Model,
    kind: str,
    key: tuple[Any, ...],
    keep: tuple[Any, ...],
    make: Callable[[], Any],
) -> Any:
    """The ``kind`` function kept on ``model`` for ``key``, or a new one from ``make()``.

    ``key`` names objects by ``id``; ``keep`` holds them, so that no id is reused while the
    entry lives. One entry per kind: a new key replaces the old function, as ``model.compile``
    replaces ``model.train_function``.
    """
    functions = vars(model).get(_CACHE)
    if functions is None:
        functions = {}
        # past Keras's tracking: not a weight, not saved
        object.__setattr__(model, _CACHE, functions)
    if kind not in functions or functions[kind][0] != key:
        functions[kind] = (key, keep, make())
    return functions[kind][2]


def _run_epoch(
    function: tuple[Any, dict[str, tf.Variable]],
    data: Any,
    steps: int | None,
    entries: list[MetricEntry],
    *,
    name: str,
    cause: Callable[[float], str],
    epoch: int,
    history: dict[str, list[float]],
    bar: keras.utils.Progbar | None = None,
    start: int = 0,
    save: tuple[int, Callable[[int], None]] | None = None,
) -> tuple[dict[str, float], int]:
    """One pass over ``data`` (the argument ``name``): the mean loss and metrics, the steps run.

    With a known number of ``steps`` the loop reads nothing back from the device until the end
    of the epoch, except every ``READ_INTERVAL`` seconds: the running loss for a live bar, and
    whether a step has failed (the remaining batches are then left unread).

    ``start``: the steps of this epoch already run before a restart; ``data`` holds the rest,
    and the totals and metrics hold the state those steps left (restored from a checkpoint), so
    they are not reset. ``save``: ``(every, save)`` calls ``save(step)`` after every ``every``
    steps of the epoch (counted from its first step, ``start`` included), unless a step was bad,
    except after the last of a known number of ``steps``.

    Raises:
        NonFiniteError: After a bad step (see :func:`_epoch_function`); ``cause(loss)`` names its
            cause.
        ValueError: If ``data`` gave no example (a dataset of unknown length can turn out empty).
    """
    run_next, totals = function
    if not start:
        for _, metric, _ in entries:
            metric.reset_state()
        for variable in totals.values():
            variable.assign(tf.zeros_like(variable))
    iterator = iter(data)
    index, next_read = start, time.monotonic() + READ_INTERVAL
    while steps is None or index < steps:
        more = run_next(iterator)
        if steps is None and not bool(more):  # a dataset of unknown length: ask the iterator
            break
        index += 1
        # not after the epoch's last step: fit saves that state at the epoch's end (validated)
        if save is not None and index % save[0] == 0 and index != steps:
            if int(totals["bad_step"]):
                break
            save[1](index)
        if time.monotonic() >= next_read:
            if int(totals["bad_step"]):
                break
            if bar is not None and bar.verbose == 1:
                bar.update(
                    index, [("loss", float(totals["loss"]) / max(int(totals["examples"]), 1))]
                )
            next_read = time.monotonic() + READ_INTERVAL
    if int(totals["bad_step"]):
        loss = float(totals["last_loss"])
        raise NonFiniteError(epoch, int(totals["bad_step"]), loss, history, cause(loss))
    examples = int(totals["examples"])
    if not examples:
        raise ValueError(
            f"{name}: expected at least one example per epoch, got a dataset that yielded "
            f"{int(totals['steps'])} batches and no example"
        )
    logs = {"loss": float(totals["loss"]) / examples}
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
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
) -> dict[str, list[float]]:
    """Train ``model`` on ``dataset`` with a custom loop; the counterpart of ``model.fit``.

    Each epoch resets the metrics, runs the step of :func:`make_train_step` on every batch, then
    validates on ``validation_data``. The compiled function is kept on the model and reused (see
    the module's docstring). With the same initial weights, batches, SGD optimizer and loss, the
    weights it reaches equal those of ``model.fit`` up to float rounding (with a
    ``keras.optimizers.LossScaleOptimizer`` under ``mixed_float16``, too).

    Args:
        model: A ``keras.Model``; an unbuilt one is built for ``dataset``'s inputs, as
            ``model.fit`` does. Layers frozen (``layer.trainable = False``) keep their weights.
        dataset: A batched, finite, non-empty ``tf.data.Dataset`` of ``(inputs, targets)``
            pairs, iterated once per epoch in its own order (shuffle it in the pipeline).
        optimizer: A Keras optimizer (created under ``strategy.scope()`` with a strategy).
        loss: As for :func:`make_train_step` (any scalar loss only without a strategy);
            ``model.losses`` (regularization penalties) are added.
        epochs: Number of passes over ``dataset`` (from 1 to ``MAX_EPOCHS``, a million).
        metrics: As for :func:`make_train_step`, reported per epoch under their names
            (``key_name`` for a mapping), with a ``val_`` prefix on validation.
        validation_data: Like ``dataset``, evaluated after each epoch (a NaN or inf loss stops).
        clip_norm, strategy: As for :func:`make_train_step`; the datasets are split over the
            strategy's replicas with ``experimental_distribute_dataset``.
        log_dir: A directory for TensorBoard (created if missing; not ``""``, not a file): every
            history entry is written there as a scalar per epoch (step = epoch number, from 1).
        progress: Show a ``keras.utils.Progbar`` per pass: live in a terminal (refreshed every
            ``READ_INTERVAL`` seconds), one finished line elsewhere (notebooks). False: silent.
        on_epoch_end: Called as ``on_epoch_end(epoch, logs)`` after each epoch (from 1).
        checkpoint_dir: A folder for checkpoints (see the module's docstring), one per epoch's
            end; ``fit`` first restores the newest there and carries on from its step
            (``epochs`` counts the epochs restored: all done, it returns their history).
        checkpoint_every: Also write a checkpoint every this many steps within an epoch (needs
            ``checkpoint_dir``), but not after its last step, whose state the epoch's end saves
            (for a dataset of unknown length, there too); None: at the end of epochs only.

    Returns:
        A history dict from ``"loss"``, each metric's name and their ``val_`` forms to one float
        per epoch (the mean over the epoch's examples, as ``model.fit`` reports it).

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If a dataset is not finite, non-empty ``(inputs, targets)`` pairs the model
            takes, an argument is out of range (``log_dir`` ``""`` or a file, a learning rate not
            finite, metrics sharing a name), the model has no trainable variables or was created
            outside ``strategy.scope()``, ``checkpoint_dir`` holds another model's checkpoint, or
            (at an epoch's end) a dataset of unknown length gave no example; as
            :func:`make_train_step` when tracing.
        NonFiniteError: If a loss, the learning rate, a gradient (without a loss-scale
            optimizer) or, after an update, a weight is NaN or infinite: at the end of that epoch
            or the loop's next read of the device (see :class:`NonFiniteError`).

    Example:
        >>> import numpy as np
        >>> keras.utils.set_random_seed(0)
        >>> x = np.random.default_rng(0).normal(size=(64, 2)).astype("float32")
        >>> y = (x[:, 0] > 0).astype("int32")
        >>> data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
        >>> dense = keras.layers.Dense(2, activation="softmax")
        >>> model = keras.Sequential([keras.Input((2,)), dense])
        >>> loss = keras.losses.SparseCategoricalCrossentropy()
        >>> accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        >>> history = fit(model, data, optimizer=keras.optimizers.Adam(0.1), epochs=5,
        ...               progress=False, loss=loss, metrics=[accuracy])
        >>> loss, accuracy = history["loss"], history["accuracy"]
        >>> sorted(history), loss[-1] < loss[0], accuracy[-1] > 0.9
        (['accuracy', 'loss'], True, True)

    Taught in chapter 7, "The same weights as model.fit".
    """
    model = _check_model(model)
    _check_optimizer(optimizer)
    _check_loss(loss)
    dataset = _check_pairs(dataset, "dataset")
    if validation_data is not None:
        validation_data = _check_pairs(validation_data, "validation_data")
    epochs = check_int(epochs, "epochs", minimum=1, maximum=MAX_EPOCHS)
    clip_norm = check_clip_norm(clip_norm)
    progress = check_bool(progress, "progress")
    log_dir, checkpoint_dir, checkpoint_every = _check_records(
        log_dir, checkpoint_dir, checkpoint_every, on_epoch_end
    )
    entries = _metric_entries(metrics)
    strategy = _check_strategy(strategy, model, optimizer)
    for data, name in ((dataset, "dataset"), (validation_data, "validation_data")):
        if data is not None:
            _check_inputs(model, data, name, strategy)
    variables = _check_trainable(model)
    _check_output_keys(entries, model)

    passes = _EpochPasses(model, optimizer, loss, entries, strategy)
    passes.prepare(dataset, validation_data, clip_norm, variables)
    checkpoint = _checkpoint(checkpoint_dir, model, optimizer, strategy, passes)
    hooks = _FitHooks(epochs, progress, log_dir, on_epoch_end, checkpoint, checkpoint_every)
    done, start = hooks.on_train_begin()
    try:
        for epoch in range(done + 1, epochs + 1):
            hooks.on_epoch_begin(epoch)
            logs = passes.train(epoch, start, hooks)
            start = 0
            logs.update(passes.validate(epoch, hooks))
            hooks.on_epoch_end(epoch, logs)
    finally:
        hooks.on_train_end()
    return hooks.history


class _EpochPasses:
    """What each epoch of :func:`fit` runs: a training pass, then a validation pass (if any).

    Their compiled functions are kept on the model (``_cached``), as ``model.fit`` keeps
    ``model.train_function``; their progress bars and mid-epoch saves come from ``fit``'s hooks.
    """

    def __init__(
        self,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        loss: Callable[..., Any],
        entries: list[MetricEntry],
        strategy: tf.distribute.Strategy,
    ) -> None:
        self.model, self.optimizer, self.loss = model, optimizer, loss
        self.entries, self.strategy = entries, strategy
        self.names = ["loss", *(name for _, _, name in entries)]
        self.metric_key = tuple((key, id(metric)) for key, metric, _ in entries)
        self.evaluate = None

    def prepare(
        self,
        dataset: tf.data.Dataset,
        validation_data: tf.data.Dataset | None,
        clip_norm: float | None,
        variables: list[Any],
    ) -> None:
        """Trace (or reuse) the passes' functions for these datasets and variables."""
        model, optimizer, loss, entries, strategy = (
            self.model,
            self.optimizer,
            self.loss,
            self.entries,
            self.strategy,
        )
        self.dataset, self.steps = dataset, _length(dataset)
        self.train_data = _distribute(dataset, strategy)
        self.function = _cached(
            model,
            "train",
            (
                id(optimizer),
                id(loss),
                self.metric_key,
                clip_norm,
                id(strategy),
                self.train_data.element_spec,
                tuple(id(v) for v in variables),
            ),
            (optimizer, loss, entries, strategy, variables),
            lambda: _epoch_function(
                _train_step(model, optimizer, loss, entries, clip_norm, strategy)
            ),
        )
        if validation_data is not None:
            self.validation_steps = _length(validation_data)
            self.validation_data = _distribute(validation_data, strategy)
            self.evaluate = _cached(
                model,
                "eval",
                (id(loss), self.metric_key, id(strategy), self.validation_data.element_spec),
                (loss, entries, strategy),
                lambda: _epoch_function(_eval_step(model, loss, entries, strategy)),
            )

    def train(self, epoch: int, start: int, hooks: _FitHooks) -> dict[str, float]:
        """The training pass of ``epoch``, after its first ``start`` steps (a restart)."""
        bar = hooks.bar(self.steps, self.names)
        data = _distribute(self.dataset.skip(start), self.strategy) if start else self.train_data
        logs, steps_run = _run_epoch(
            self.function,
            data,
            self.steps,
            self.entries,
            name="dataset",
            epoch=epoch,
            history=hooks.history,
            bar=bar,
            cause=lambda loss: _training_cause(loss, self.model, self.optimizer),
            start=start,
            save=hooks.save_within(epoch),
        )
        _finish(bar, steps_run, logs)
        return logs

    def validate(self, epoch: int, hooks: _FitHooks) -> dict[str, float]:
        """The validation pass of ``epoch``: its ``val_`` entries (none without validation)."""
        if self.evaluate is None:
            return {}
        bar = hooks.bar(self.validation_steps, [f"val_{name}" for name in self.names])
        logs, steps_run = _run_epoch(
            self.evaluate,
            self.validation_data,
            self.validation_steps,
            self.entries,
            epoch=epoch,
            name="validation_data",
            cause=lambda loss: "val_loss",
            history=hooks.history,
        )
        logs = {f"val_{name}": value for name, value in logs.items()}
        _finish(bar, steps_run, logs)
        return logs


def _checkpoint(
    checkpoint_dir: str | None,
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    strategy: tf.distribute.Strategy,
    passes: _EpochPasses,
) -> TrainingCheckpoint | None:
    """The checkpoint of a ``fit`` in ``checkpoint_dir``: model, optimizer, the epoch's totals
    and metric variables; None without a folder."""
    if checkpoint_dir is None:
        return None
    totals = passes.function[1].values()
    state = [*totals, *(v for _, metric, _ in passes.entries for v in metric.variables)]
    return TrainingCheckpoint(checkpoint_dir, model, optimizer, strategy, state)


def _training_cause(loss: float, model: keras.Model, optimizer: keras.optimizers.Optimizer) -> str:
    """Why a training step was bad (read from the device once, after it was)."""
    if not math.isfinite(loss):
        return "loss"
    if has_nonfinite([keras.ops.convert_to_numpy(v) for v in model.trainable_variables]):
        return "weights"
    if not math.isfinite(_learning_rate(optimizer)):
        return "learning_rate"
    return "gradients"


def _length(dataset: tf.data.Dataset) -> int | None:
    """The number of batches per pass over ``dataset``; None if unknown (e.g. after ``filter``)."""
    cardinality = int(dataset.cardinality())
    return cardinality if cardinality >= 0 else None
