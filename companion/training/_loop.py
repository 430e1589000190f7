"""The outer loop of chapter 7: :func:`fit`, its epochs and their training and validation passes,
whose traced functions are kept on the model (see ``companion.training``'s docstring)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from companion.training._arguments import Arguments, FitOptions, check_arguments
from companion.training._checkpoint import TrainingCheckpoint
from companion.training._epoch import EpochFunction, epoch_function, run_epoch
from companion.training._errors import training_cause
from companion.training._hooks import FitHooks
from companion.training._step import eval_step, train_step

#: The attribute of a model where ``fit`` keeps its traced functions (as ``model.fit`` keeps
#: ``model.train_function``); set past Keras's attribute tracking, so it is neither a weight
#: nor saved.
_CACHE = "_companion_fit_functions"


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
    arguments = check_arguments(
        model,
        optimizer=optimizer,
        loss=loss,
        metrics=metrics,
        clip_norm=clip_norm,
        strategy=strategy,
        fit=FitOptions(
            dataset,
            validation_data,
            epochs,
            progress,
            log_dir,
            checkpoint_dir,
            checkpoint_every,
            on_epoch_end,
        ),
    )
    passes = _EpochPasses(arguments)
    hooks = FitHooks(arguments.fit, _checkpoint(arguments, passes))
    done, start = hooks.on_train_begin()
    try:
        for epoch in range(done + 1, arguments.fit.epochs + 1):
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
    ``model.train_function``; they are traced (or reused) here, for ``fit``'s datasets and the
    model's trainable variables. Their progress bars and mid-epoch saves come from ``fit``'s hooks.
    """

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        self.names = ["loss", *(entry.name for entry in arguments.entries)]
        self.metric_key = tuple((entry.key, id(entry.metric)) for entry in arguments.entries)
        dataset, validation_data = arguments.fit.dataset, arguments.fit.validation_data
        self.dataset, self.steps = dataset, _length(dataset)
        self.train_data = _distribute(dataset, arguments.strategy)
        self.function = self._train_function()
        self.validation_steps = self.validation_data = self.evaluate = None
        if validation_data is not None:
            self.validation_steps = _length(validation_data)
            self.validation_data = _distribute(validation_data, arguments.strategy)
            self.evaluate = self._eval_function()

    def _train_function(self) -> EpochFunction:
        """The training pass's function, for this optimizer, loss, metrics and data layout."""
        arguments = self.arguments
        key = (
            id(arguments.optimizer),
            id(arguments.loss),
            self.metric_key,
            arguments.clip_norm,
            id(arguments.strategy),
            self.train_data.element_spec,
            tuple(id(v) for v in arguments.variables),
        )
        keep = (
            arguments.optimizer,
            arguments.loss,
            arguments.entries,
            arguments.strategy,
            arguments.variables,
        )
        return _cached(
            arguments.model, "train", key, keep, lambda: epoch_function(train_step(arguments))
        )

    def _eval_function(self) -> EpochFunction:
        """The validation pass's function, for this loss, metrics and data layout."""
        arguments = self.arguments
        key = (
            id(arguments.loss),
            self.metric_key,
            id(arguments.strategy),
            self.validation_data.element_spec,
        )
        keep = (arguments.loss, arguments.entries, arguments.strategy)
        return _cached(
            arguments.model, "eval", key, keep, lambda: epoch_function(eval_step(arguments))
        )

    def train(self, epoch: int, start: int, hooks: FitHooks) -> dict[str, float]:
        """The training pass of ``epoch``, after its first ``start`` steps (a restart)."""
        arguments = self.arguments
        bar = hooks.bar(self.steps, self.names)
        data = (
            _distribute(self.dataset.skip(start), arguments.strategy) if start else self.train_data
        )
        logs, steps_run = run_epoch(
            self.function,
            data,
            self.steps,
            arguments.entries,
            name="dataset",
            epoch=epoch,
            history=hooks.history,
            bar=bar,
            cause=lambda loss: training_cause(loss, arguments.model, arguments.optimizer),
            start=start,
            save=hooks.save_within(epoch),
        )
        bar.finish(steps_run, logs)
        return logs

    def validate(self, epoch: int, hooks: FitHooks) -> dict[str, float]:
        """The validation pass of ``epoch``: its ``val_`` entries (none without validation)."""
        if self.evaluate is None:
            return {}
        # not refreshed while it runs: one line when it ends
        names = [f"val_{name}" for name in self.names]
        bar = hooks.bar(self.validation_steps, names, refreshed=False)
        logs, steps_run = run_epoch(
            self.evaluate,
            self.validation_data,
            self.validation_steps,
            self.arguments.entries,
            epoch=epoch,
            name="validation_data",
            cause=lambda loss: "val_loss",
            history=hooks.history,
            bar=bar,
        )
        logs = {f"val_{name}": value for name, value in logs.items()}
        bar.finish(steps_run, logs)
        return logs


def _checkpoint(arguments: Arguments, passes: _EpochPasses) -> TrainingCheckpoint | None:
    """The checkpoint of a ``fit`` in its ``checkpoint_dir``: model, optimizer, the epoch's
    totals and metric variables; None without a folder."""
    if arguments.fit.checkpoint_dir is None:
        return None
    metric_variables = (v for entry in arguments.entries for v in entry.metric.variables)
    state = [*passes.function.totals.values(), *metric_variables]
    return TrainingCheckpoint(
        arguments.fit.checkpoint_dir,
        arguments.model,
        arguments.optimizer,
        arguments.strategy,
        state,
    )


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


def _distribute(dataset: tf.data.Dataset, strategy: tf.distribute.Strategy) -> Any:
    """The dataset as the step iterates it: split over the replicas under a real strategy."""
    if strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy():
        return dataset
    return strategy.experimental_distribute_dataset(dataset)


def _length(dataset: tf.data.Dataset) -> int | None:
    """The number of batches per pass over ``dataset``; None if unknown (e.g. after ``filter``)."""
    cardinality = int(dataset.cardinality())
    return cardinality if cardinality >= 0 else None
