"""Customising ``model.fit`` (chapter 8): a training step, a metric and a callback of our own.

- :class:`GuardedModel`, a ``keras.Model`` whose ``train_step`` clips the gradients to a global
  norm (of the gradient summed over the replicas, as the optimizer applies it) and skips a step
  whose loss or gradients are not finite, leaving the weights and the optimizer's state as they
  were. Everything else is Keras's: ``compile``, ``fit``, ``evaluate``, callbacks,
  ``steps_per_execution``, ``tf.distribute`` strategies, mixed precision and ``.keras`` files.
- :class:`ExpectedCalibrationError`, a streaming ``keras.metrics.Metric``.
- :func:`find_learning_rate`, a learning-rate range test written as a ``keras.callbacks.Callback``.

``GuardedModel`` has a step per backend: TensorFlow's (``GradientTape``, ``tf.distribute``
replicas), JAX's stateless ``train_step(state, data)`` (the skip a ``jnp.where`` over new and old
state) and PyTorch's (``backward``, a Python ``if``). ``find_learning_rate`` takes what
``model.fit`` reads on every backend: NumPy arrays, a ``keras.utils.PyDataset``, a
``tf.data.Dataset`` or a PyTorch ``DataLoader`` (its machinery is in ``companion._lr_finder``).

Backends: TensorFlow, JAX, PyTorch.
"""

from dataclasses import dataclass
from typing import Any

import keras
from keras import ops

# Not exported by keras: the base of GuardedModel's functional form (see _init_functional).
from keras.src.models.functional import Functional

from companion._checks import (
    check_bool,
    check_clip_norm,
    check_instance,
    check_int,
    check_real,
    check_sequence,
    describe,
    float_tensor,
    is_real,
)
from companion._clipping import clip_by_global_norm
from companion._finite import has_nonfinite, nonfinite_flag
from companion._lr_finder import RangeTest, fit_inputs, suggest_rate

__all__ = ["ExpectedCalibrationError", "GuardedModel", "LearningRateRange", "find_learning_rate"]

#: The most bins :class:`ExpectedCalibrationError` takes (each bin is three float32 counters).
MAX_BINS = 100_000
#: The most steps :func:`find_learning_rate` runs.
MAX_RANGE_STEPS = 1_000_000


def _apply_where(condition: Any, optimizer: Any, gradients: list, variables: list) -> None:
    """``optimizer.apply(gradients, variables)`` on every replica where ``condition`` holds.

    ``condition`` must be the same on every replica. The branch runs in cross-replica context:
    a strategy refuses a ``tf.cond`` inside a replica whose branch calls ``merge_call``, and
    ``optimizer.apply`` does (Keras's ``LossScaleOptimizer`` takes the same route).
    """
    import tensorflow as tf

    def cross_replica(strategy: Any, gradients: Any, condition: Any) -> None:
        def apply() -> None:
            strategy.extended.call_for_each_replica(optimizer.apply, args=(gradients, variables))

        first = strategy.experimental_local_results(condition)[0]
        tf.cond(first, apply, lambda: None)

    tf.distribute.get_replica_context().merge_call(cross_replica, args=(gradients, condition))


def _update_metrics(model: Any, x: Any, y: Any, y_pred: Any, weight: Any, loss: Any, replicas=1):
    """Keras's updates of a step: the loss tracker (the loss of the whole batch: the replicas'
    losses summed) and the compiled metrics."""
    batch = ops.shape(keras.tree.flatten(x)[0])[0]
    for metric in model.metrics:
        if metric.name == "loss":
            metric.update_state(loss * replicas, sample_weight=batch)
    model.compute_metrics(x, y, y_pred, weight)


def _loss_scaling(model: Any) -> bool:
    return isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)


def _train_step_tf(model: Any, data: Any) -> dict[str, Any]:
    """TensorFlow: a ``GradientTape``, flags all-reduced over the replicas, ``tf.cond``."""
    import tensorflow as tf

    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    with tf.GradientTape() as tape:
        y_pred = model(x, training=True)
        loss = model.compute_loss(x, y, y_pred, sample_weight, training=True)
        scaled = model.optimizer.scale_loss(loss)
    variables = model.trainable_variables  # after the call, which builds a subclass
    gradients = tape.gradient(scaled, variables)
    context = tf.distribute.get_replica_context()
    bad_loss, bad_gradients = tf.unstack(
        context.all_reduce(
            tf.distribute.ReduceOp.SUM,
            tf.stack([nonfinite_flag(loss), nonfinite_flag(gradients)]),
        )
    )
    if model.clip_norm is not None:
        gradients = clip_by_global_norm(
            gradients, model.clip_norm, model.optimizer.scale_loss(tf.constant(1.0))
        )
    step_ok = tf.equal(bad_loss + bad_gradients, 0.0)
    # A loss-scale optimizer must see overflowing gradients: it lowers its scale then.
    apply = tf.logical_and(tf.equal(bad_loss, 0.0), tf.logical_or(step_ok, _loss_scaling(model)))
    _apply_where(apply, model.optimizer, gradients, variables)

    def update_metrics() -> Any:
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        _update_metrics(model, x, y, y_pred, sample_weight, loss, replicas)
        return tf.no_op()

    tf.cond(step_ok, update_metrics, tf.no_op)
    first_replica = tf.equal(context.replica_id_in_sync_group, 0)
    model.skipped_steps.update_state(
        tf.cast(tf.logical_and(first_replica, tf.logical_not(step_ok)), tf.float32)
    )
    return model.get_metrics_result()


def _stateless(variables: list, values: list, update: Any) -> tuple[list, Any]:
    """Run ``update()`` with ``variables`` holding ``values``: the values it leaves them with, and
    what it returns."""
    with keras.StatelessScope(state_mapping=list(zip(variables, values))) as scope:
        result = update()
    new = [scope.get_current_value(v) for v in variables]
    return [old if value is None else value for value, old in zip(new, values)], result


def _train_step_jax(model: Any, state: tuple, data: Any) -> tuple[dict[str, Any], tuple]:
    """JAX: a stateless step; a skipped step returns the old state (a ``jnp.where`` per leaf)."""
    import jax
    import jax.numpy as jnp

    trainable, non_trainable, optimizer_state, metrics_state = state
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    gradient_of = jax.value_and_grad(model.compute_loss_and_updates, has_aux=True)
    (_, (loss, y_pred, new_non_trainable, new_metrics)), gradients = gradient_of(
        trainable, non_trainable, metrics_state, x, y, sample_weight,
        training=True, optimizer_variables=optimizer_state,
    )  # fmt: skip
    bad_loss, bad_gradients = nonfinite_flag(loss), nonfinite_flag(gradients)
    optimizer = model.optimizer
    if model.clip_norm is not None:
        _, loss_scale = _stateless(
            optimizer.variables, optimizer_state, lambda: optimizer.scale_loss(ops.ones(()))
        )
        gradients = clip_by_global_norm(gradients, model.clip_norm, loss_scale)
    new_trainable, new_optimizer = optimizer.stateless_apply(optimizer_state, gradients, trainable)
    step_ok = bad_loss + bad_gradients == 0
    apply = (bad_loss == 0) & (step_ok | _loss_scaling(model))

    def keep(condition: Any, new: Any, old: Any) -> Any:
        return jax.tree.map(lambda a, b: jnp.where(condition, a, b), new, old)

    def count_skip() -> dict[str, Any]:
        model.skipped_steps.update_state(1.0 - ops.cast(step_ok, "float32"))
        return model.get_metrics_result()

    variables = model.metrics_variables
    updated, _ = _stateless(
        variables, new_metrics, lambda: _update_metrics(model, x, y, y_pred, sample_weight, loss)
    )
    metrics_state, logs = _stateless(variables, keep(step_ok, updated, metrics_state), count_skip)
    state = (
        keep(apply, new_trainable, trainable),
        keep(step_ok, new_non_trainable, non_trainable),
        keep(apply, new_optimizer, optimizer_state),
        metrics_state,
    )
    return logs, state


def _train_step_torch(model: Any, data: Any) -> dict[str, Any]:
    """PyTorch: eager, so the decision is a Python ``if`` on the flags."""
    import torch

    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    model.zero_grad()
    y_pred = model(x, training=True)
    loss = model.compute_loss(x, y, y_pred, sample_weight, training=True)
    model.optimizer.scale_loss(loss).backward()
    variables = model.trainable_variables
    gradients = [v.value.grad for v in variables]
    bad_loss, bad_gradients = has_nonfinite(loss), has_nonfinite(gradients)
    if model.clip_norm is not None:
        loss_scale = model.optimizer.scale_loss(ops.ones(()))
        gradients = clip_by_global_norm(gradients, model.clip_norm, loss_scale)
    step_ok = not (bad_loss or bad_gradients)
    if not bad_loss and (step_ok or _loss_scaling(model)):
        with torch.no_grad():
            model.optimizer.apply(gradients, variables)
    if step_ok:
        _update_metrics(model, x, y, y_pred, sample_weight, loss)
    model.skipped_steps.update_state(0.0 if step_ok else 1.0)
    return model.get_metrics_result()


#: GuardedModel's training step on each backend (JAX's takes and returns the state).
_TRAIN_STEPS = {"tensorflow": _train_step_tf, "jax": _train_step_jax, "torch": _train_step_torch}


@keras.saving.register_keras_serializable(package="companion")
class GuardedModel(keras.Model):
    """A ``keras.Model`` whose training step clips gradients and skips non-finite steps.

    Subclass it (write ``call``) or use it as a Functional model,
    ``GuardedModel(inputs=..., outputs=..., clip_norm=1.0)`` (a subclass of it cannot take
    inputs and outputs: Keras would rewrite this class's bases). Each training step:

    1. computes the loss as ``model.fit`` does (``compute_loss``: the compiled loss, sample
       weights, ``add_loss`` terms, divided among replicas) and its gradients;
    2. if ``clip_norm`` is set, scales the gradients by ``min(1, clip_norm / norm)``, where
       ``norm`` is the global norm of the gradient *summed over the replicas* (what the optimizer
       applies; Keras's own ``global_clipnorm`` clips each replica's part separately);
    3. applies them, unless the loss or a gradient is NaN or infinite on any replica: then the
       weights, the optimizer's variables and the metrics are left as they were, and the
       ``skipped_steps`` metric counts the step. Under a ``LossScaleOptimizer``
       (``mixed_float16``) a step whose loss is finite but whose scaled gradients overflow goes to
       the optimizer, which skips it and halves its loss scale, as in Keras's own step.

    ``skipped_steps`` is reported with the other metrics: per epoch in ``fit`` (reset with them),
    0 in ``evaluate``. Each backend has its own step: on JAX ``train_step(state, data)``.

    Args:
        *args: What ``keras.Model`` takes (``inputs=``, ``outputs=`` for a Functional model).
        clip_norm: The largest global norm of the summed gradient (> 0, a float32 normal number),
            or None (no clipping).
        **kwargs: What ``keras.Model`` takes (``name=``, ...).

    Raises:
        TypeError: If ``clip_norm`` is not a real number or None, or a subclass is called with
            inputs and outputs.
        ValueError: If it is not finite and positive in float32.

    Taught in chapter 8, "The companion's GuardedModel".
    """

    def __init__(self, *args: Any, clip_norm: float | None = None, **kwargs: Any) -> None:
        clip_norm = check_clip_norm(clip_norm)  # before Keras builds a Functional graph
        super().__init__(*args, **kwargs)
        self._guard(clip_norm)

    def __new__(cls, *args: Any, **kwargs: Any) -> "GuardedModel":
        # Called with inputs and outputs, keras.Model.__init__ makes the class (and each class
        # above it) a Functional subclass for good: it rewrites their __bases__, and every later
        # subclass that writes call() then breaks. The functional form gets a class of its own.
        if _functional_arguments(args, kwargs) and not issubclass(cls, Functional):
            if cls is not GuardedModel:
                raise TypeError(
                    f"{cls.__name__}: expected no inputs and outputs (a subclass of GuardedModel "
                    f"writes call()), got inputs and outputs; Keras would turn GuardedModel into "
                    f"a Functional class for the whole process. Use GuardedModel(inputs=..., "
                    f"outputs=...) for a Functional model"
                )
            cls = _FunctionalGuardedModel
        return super().__new__(cls, *args, **kwargs)

    def _guard(self, clip_norm: float | None) -> None:
        self.clip_norm = clip_norm
        self.skipped_steps = keras.metrics.Sum(name="skipped_steps")

    def train_step(self, *args: Any) -> Any:
        """One guarded step: ``(data)`` on TensorFlow and PyTorch, ``(state, data)`` on JAX.

        Taught in chapter 8, "The companion's GuardedModel".
        """
        return _TRAIN_STEPS[keras.backend.backend()](self, *args)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "clip_norm": self.clip_norm}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> "GuardedModel":
        """The model ``get_config`` describes, in its form, with its ``clip_norm``.

        Taught in chapter 8, "The companion's GuardedModel".
        """
        config = dict(config)
        clip_norm = config.pop("clip_norm", None)
        model = super().from_config(config, custom_objects=custom_objects)
        model.clip_norm = check_clip_norm(clip_norm)
        return model


def _functional_arguments(args: tuple, kwargs: dict) -> bool:
    """Whether a model is called with inputs and outputs (Keras's own test)."""
    return (
        len(args) == 2
        or (len(args) == 1 and "outputs" in kwargs)
        or {"inputs", "outputs"} <= set(kwargs)
    )


@keras.saving.register_keras_serializable(package="companion", name="FunctionalGuardedModel")
class _FunctionalGuardedModel(GuardedModel, Functional):
    """``GuardedModel(inputs=..., outputs=...)``: a Functional model with the guarded step.

    Named ``GuardedModel`` for readers (its repr, its default layer name ``guarded_model``).
    """

    def __init__(self, *args: Any, clip_norm: float | None = None, **kwargs: Any) -> None:
        clip_norm = check_clip_norm(clip_norm)
        _init_functional(self, args, kwargs)
        self._guard(clip_norm)


def _init_functional(model: keras.Model, args: tuple, kwargs: dict) -> None:
    """What ``keras.Model.__init__(model, inputs, outputs)`` does, minus rewriting classes.

    Keras 3's ``Model.__init__`` (``keras/src/models/model.py``, the same in 3.13 and 3.15) runs
    ``Trainer.__init__(self)`` (the backend's ``TensorFlowTrainer``, ``keras.Model.__bases__[0]``),
    then, given inputs and outputs, ``inject_functional_model_class(self.__class__)``, which
    rewrites the ``__bases__`` of the class and of every class above it up to ``keras.Model``
    (here ``GuardedModel``, for the whole process), and ``Functional.__init__``. No public API
    builds a Functional model whose parent classes must stay as they are, so the two calls are
    made here; ``tests/unit/test_fitting.py`` fails loudly if Keras's ``Model.__init__`` changes
    (``test_the_functional_init_mirrors_keras_model_init``).
    """
    keras.Model.__bases__[0].__init__(model)  # the backend's Trainer
    Functional.__init__(model, *args, **kwargs)


_FunctionalGuardedModel.__name__ = "GuardedModel"


@keras.saving.register_keras_serializable(package="companion")
class ExpectedCalibrationError(keras.metrics.Metric):
    """Expected calibration error of a classifier's top-1 confidence, accumulated over batches.

    The top-1 confidence ``max(y_pred)`` of each example falls in one of ``num_bins`` equal-width
    bins over [0, 1] (a confidence of 1.0 in the last). With ``w`` the sample weights (1 by
    default) and, per bin ``b``, ``W_b`` its total weight, ``acc_b`` and ``conf_b`` its weighted
    accuracy and mean confidence, the result is ``sum_b (W_b / W) * |acc_b - conf_b|``. The
    state is three weighted sums per bin, so the result over a dataset does not depend on how it
    was split into batches or replicas.

    Args:
        num_bins: Number of bins, an int from 1 to ``MAX_BINS``.
        name: The metric's name.
        dtype: The dtype of the state (float32 by default).

    Raises:
        TypeError: If ``num_bins`` is not an int.
        ValueError: If it is out of range.

    Example:
        >>> metric = ExpectedCalibrationError(num_bins=10)
        >>> # class 0 at confidence 0.9 (right), class 0 at 0.7 (wrong: the label is 1)
        >>> metric.update_state([0, 1], [[0.9, 0.1], [0.7, 0.3]])
        >>> round(float(metric.result()), 4)  # (|1 - 0.9| + |0 - 0.7|) / 2
        0.4

    Taught in chapter 8, "The companion's metric: expected calibration error".
    """

    def __init__(
        self, num_bins: int = 15, name: str = "expected_calibration_error", dtype: Any = None
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        self.num_bins = check_int(num_bins, "num_bins", minimum=1, maximum=MAX_BINS)
        self.totals = {
            key: self.add_variable((self.num_bins,), "zeros", name=key)
            for key in ("weight", "correct", "confidence")
        }

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Add a batch: ``y_true`` class ids ``(batch,)`` (or ``(batch, 1)``), ``y_pred``
        probabilities ``(batch, classes)``, ``sample_weight`` ``(batch,)`` or None.

        Taught in chapter 8, "The companion's metric: expected calibration error".
        """
        y_pred = ops.cast(float_tensor(y_pred, "y_pred"), self.dtype)
        if len(y_pred.shape) != 2:
            raise ValueError(
                f"y_pred: expected probabilities of shape (batch, classes), got shape "
                f"{tuple(y_pred.shape)}"
            )
        y_true = ops.reshape(ops.cast(y_true, "int32"), (-1,))
        confidence = ops.clip(ops.max(y_pred, axis=-1), 0.0, 1.0)
        correct = ops.cast(ops.equal(ops.cast(ops.argmax(y_pred, -1), "int32"), y_true), self.dtype)
        weight = ops.ones_like(confidence)
        if sample_weight is not None:
            weight = ops.reshape(ops.cast(sample_weight, self.dtype), (-1,)) * weight
        bins = ops.minimum(ops.cast(confidence * self.num_bins, "int32"), self.num_bins - 1)
        for key, value in (
            ("weight", weight),
            ("correct", weight * correct),
            ("confidence", weight * confidence),
        ):
            total = self.totals[key]
            total.assign_add(ops.segment_sum(value, bins, num_segments=self.num_bins))

    def result(self) -> Any:
        gaps = ops.abs(self.totals["correct"] - self.totals["confidence"])
        return ops.divide_no_nan(ops.sum(gaps), ops.sum(self.totals["weight"]))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "num_bins": self.num_bins}


@dataclass(frozen=True)
class LearningRateRange:
    """What :func:`find_learning_rate` measured.

    Attributes:
        learning_rates: The learning rate of each step, growing geometrically.
        losses: The loss of each step's batch (before that step's update).
        suggestion: A learning rate a tenth of the one where the smoothed loss was lowest,
            within ``[min_lr, max_lr]``.
        diverged: Whether the test stopped early because the loss blew up.

    Taught in chapter 8, "A learning-rate range test".
    """

    learning_rates: list[float]
    losses: list[float]
    suggestion: float
    diverged: bool

    def __post_init__(self) -> None:
        rates = check_sequence(
            self.learning_rates,
            "learning_rates",
            "a list of learning rates (finite numbers > 0)",
            item=lambda rate, name: check_real(rate, name, above=0),
            min_length=0,
        )
        losses = check_sequence(
            self.losses,
            "losses",
            "a list of losses (numbers, NaN and inf too), one per learning rate",
            item=_check_recorded_loss,
            min_length=0,
        )
        if len(losses) != len(rates):
            raise ValueError(
                f"losses: expected one loss per learning rate ({len(rates)}), got "
                f"{describe(self.losses)} of length {len(losses)}"
            )
        check_real(self.suggestion, "suggestion", above=0)
        check_bool(self.diverged, "diverged")

    def plot(self, ax: Any = None) -> Any:
        """Loss against learning rate (log scale), the suggestion marked; returns the axes.

        Raises:
            TypeError: If ``ax`` is not a Matplotlib ``Axes`` or None.

        Taught in chapter 8, "A learning-rate range test".
        """
        import matplotlib.axes
        import matplotlib.pyplot as plt

        if ax is not None:
            check_instance(ax, "ax", matplotlib.axes.Axes, "a matplotlib Axes or None")
        ax = plt.subplots(figsize=(6, 3.5))[1] if ax is None else ax
        ax.plot(self.learning_rates, self.losses)
        ax.axvline(self.suggestion, color="tab:red", linestyle="--", label="suggestion")
        ax.set(xscale="log", xlabel="learning rate", ylabel="loss of the batch")
        ax.legend()
        return ax


def _check_recorded_loss(loss: Any, name: str) -> float:
    """A loss as the range test records it: any real number, NaN and inf too (a divergence)."""
    if not is_real(loss):
        raise TypeError(f"{name}: expected a number (NaN and inf too), got {describe(loss)}")
    return float(loss)


def find_learning_rate(
    model: keras.Model,
    dataset: Any,
    *,
    min_lr: float = 1e-6,
    max_lr: float = 1.0,
    steps: int = 100,
    batch_size: int | None = None,
) -> LearningRateRange:
    """Learning-rate range test (Smith, 2017): train briefly with a growing rate, then undo it.

    The learning rate grows geometrically from ``min_lr`` to ``max_lr`` over ``steps`` batches
    of ``dataset`` (repeated if it is shorter), one step per call of the compiled function
    whatever the model's ``steps_per_execution``; the test stops early when the loss is not
    finite or above 4 times the lowest seen. Afterwards the model's weights, its optimizer's
    variables, its learning rate and its ``steps_per_execution`` are exactly as they were (an
    optimizer not built yet is built first).

    Args:
        model: A compiled ``keras.Model`` whose optimizer has a plain (not scheduled) learning
            rate.
        dataset: Batches of ``(inputs, targets)`` as ``model.fit`` reads them on every backend:
            a ``tf.data.Dataset``, a ``keras.utils.PyDataset`` or a PyTorch ``DataLoader``, or
            a tuple ``(x, y)`` of NumPy arrays, taken in order in batches of ``batch_size``.
        min_lr: The first learning rate (> 0).
        max_lr: The last learning rate (> ``min_lr``).
        steps: Number of batches, an int from 2 to ``MAX_RANGE_STEPS``.
        batch_size: The batch size of NumPy arrays (default 32); None for a dataset, which
            makes its own batches.

    Returns:
        A :class:`LearningRateRange`: rates, losses, a suggestion, whether the loss diverged.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If the model is not compiled, its learning rate is a schedule, the dataset
            has no batch, or a number is out of range.

    Example:
        >>> import keras, numpy as np
        >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        >>> model.compile(keras.optimizers.SGD(0.01), "mse")
        >>> x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
        >>> data = (x, x.sum(axis=1))  # NumPy arrays: no TensorFlow needed
        >>> found = find_learning_rate(
        ...     model, data, min_lr=1e-3, max_lr=0.1, steps=10, batch_size=16
        ... )
        >>> len(found.losses), found.diverged, found.learning_rates[-1]
        (10, False, 0.1)

    Taught in chapter 8, "A learning-rate range test".
    """
    check_instance(model, "model", keras.Model, "a keras.Model")
    inputs = fit_inputs(dataset, batch_size)
    min_lr = check_real(min_lr, "min_lr", above=0, dtype="float32")
    max_lr = check_real(max_lr, "max_lr", above=min_lr, dtype="float32")
    steps = check_int(steps, "steps", minimum=2, maximum=MAX_RANGE_STEPS)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        raise ValueError("model: expected a compiled model (model.compile(...)), got no optimizer")
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    schedule = inner.get_config()["learning_rate"]  # a schedule's config is a dict
    if isinstance(schedule, dict):
        raise ValueError(
            f"model: expected an optimizer with a plain learning rate, got a schedule "
            f"({schedule.get('class_name')}); compile with a number for the test"
        )
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    saved = [ops.convert_to_numpy(v) for v in model.variables + optimizer.variables]
    rates = [min_lr * (max_lr / min_lr) ** (i / (steps - 1)) for i in range(steps)]
    test = RangeTest(rates, divergence=4.0)
    # Keras calls batch hooks once per execution: one step per execution for the test, so that
    # every step gets its own rate and its own recorded loss. Each epoch has a batch at least,
    # and the test stops training after its last rate: `steps` epochs are enough.
    steps_per_execution = model.steps_per_execution
    try:
        if steps_per_execution != 1:
            model.steps_per_execution, model.train_function = 1, None
        model.fit(**inputs, epochs=steps, callbacks=[test], verbose=0, shuffle=False)
    finally:
        for variable, value in zip(model.variables + optimizer.variables, saved):
            variable.assign(value)
        if steps_per_execution != 1:
            model.steps_per_execution, model.train_function = steps_per_execution, None
    losses = test.losses
    if not losses:
        raise ValueError(f"dataset: expected at least one batch, got none from {describe(dataset)}")
    return LearningRateRange(
        learning_rates=rates[: len(losses)],
        losses=losses,
        suggestion=suggest_rate(rates[: len(losses)], losses, min_lr),
        diverged=test.diverged,
    )
