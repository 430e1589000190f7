"""The training step written out (chapter 7): :func:`make_train_step`, its validation twin
:func:`make_eval_step`, and the replica's share of the loss they both take (under a strategy or
not, and under mixed precision: see ``companion.training``'s docstring)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from companion._checks import describe
from companion._clipping import clip_by_global_norm
from companion._finite import nonfinite_flag
from companion.training._arguments import Arguments, check_arguments
from companion.training._metrics import update_metrics


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
    arguments = check_arguments(
        model,
        optimizer=optimizer,
        loss=loss,
        metrics=metrics,
        clip_norm=clip_norm,
        strategy=strategy,
        element_spec=element_spec,
    )
    return _function(train_step(arguments), arguments.element_spec)


def train_step(arguments: Arguments) -> Callable[[Any], dict[str, tf.Tensor]]:
    """The training step of :func:`make_train_step` as a Python function (checked arguments)."""
    model, optimizer, loss = arguments.model, arguments.optimizer, arguments.loss
    entries, clip_norm, strategy = arguments.entries, arguments.clip_norm, arguments.strategy
    variables = arguments.variables
    with strategy.scope():
        if not optimizer.built:
            optimizer.build(variables)
    loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def forward_backward(x: Any, y: Any) -> tuple[tf.Tensor, list[Any], tf.Tensor]:
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            share = _replica_loss(loss, model, y, predictions, _batch_size(x))
            scaled = optimizer.scale_loss(share)
        update_metrics(entries, y, predictions)
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
    arguments = check_arguments(
        model, loss=loss, metrics=metrics, strategy=strategy, element_spec=element_spec
    )
    return _function(eval_step(arguments), arguments.element_spec)


def eval_step(arguments: Arguments) -> Callable[[Any], dict[str, tf.Tensor]]:
    """The validation step of :func:`make_eval_step` as a Python function (checked arguments)."""
    model, loss, entries, strategy = (
        arguments.model,
        arguments.loss,
        arguments.entries,
        arguments.strategy,
    )

    def forward(x: Any, y: Any) -> tf.Tensor:
        predictions = model(x, training=False)
        update_metrics(entries, y, predictions)
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
