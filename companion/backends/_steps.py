"""Chapter 14's ``train_step`` and ``test_step`` for each backend, the ordinary model that checks
them against Keras's own steps, and chapter 8's regressor trained with them."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

from companion._checks import check_bool, check_int, check_real, check_seed, describe
from companion.backends._probes import CHANGED, UNCHANGED


def update_metrics(model: keras.Model, loss: Any, x: Any, y: Any, y_pred: Any, sample_weight: Any):
    """Update every metric of a compiled model as Keras's steps do, and return their results.

    Each metric named ``"loss"`` gets the batch's loss, weighted by the batch's size (so that an
    epoch's loss is the mean over examples); ``compute_metrics`` updates the compiled metrics,
    passing ``sample_weight`` to the ``weighted_metrics`` only, and returns every result.

    Taught in chapter 14, "Chapter 8's train_step on each backend".
    """
    batch = ops.shape(keras.tree.flatten(x)[0])[0]
    for metric in model.metrics:
        if metric.name == "loss":
            metric.update_state(loss, sample_weight=batch)
    return model.compute_metrics(x, y, y_pred, sample_weight)


def tensorflow_train_step(self, data):
    """TensorFlow's step: ``tf.GradientTape``, ``optimizer.apply``, ``update_metrics``."""
    import tensorflow as tf

    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    with tf.GradientTape() as tape:
        y_pred = self(x, training=True)
        loss = self.compute_loss(x, y, y_pred, sample_weight, training=True)
    gradients = tape.gradient(loss, self.trainable_variables)
    self.optimizer.apply(gradients, self.trainable_variables)
    return update_metrics(self, loss, x, y, y_pred, sample_weight)


def stateful_test_step(self, data):
    """The test step of TensorFlow and PyTorch: a call with ``training=False``, the loss, the
    metrics; no gradient."""
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    y_pred = self(x, training=False)
    loss = self.compute_loss(x, y, y_pred, sample_weight, training=False)
    return update_metrics(self, loss, x, y, y_pred, sample_weight)


def stateless_update_metrics(model, metric_variables, loss, x, y, y_pred, sample_weight):
    """``update_metrics`` on JAX: run it with the metrics' variables holding
    ``metric_variables``; return the logs and the variables' new values."""
    mapping = list(zip(model.metrics_variables, metric_variables))
    with keras.StatelessScope(state_mapping=mapping) as scope:
        logs = update_metrics(model, loss, x, y, y_pred, sample_weight)
    new = [scope.get_current_value(v) for v in model.metrics_variables]
    return logs, [old if value is None else value for value, old in zip(new, metric_variables)]


def jax_train_step(self, state, data):
    """JAX's stateless step: the variables come in ``state`` and go out with the logs. The loss
    is stateless too: ``compute_loss_and_updates`` (regularizers and ``add_loss`` terms)."""
    import jax

    trainable, non_trainable, optimizer_variables, metric_variables = state
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    grad_fn = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)
    (_, (loss, y_pred, non_trainable, metric_variables)), gradients = grad_fn(
        trainable, non_trainable, metric_variables, x, y, sample_weight,
        training=True, optimizer_variables=optimizer_variables,
    )  # fmt: skip
    trainable, optimizer_variables = self.optimizer.stateless_apply(
        optimizer_variables, gradients, trainable
    )
    logs, metric_variables = stateless_update_metrics(
        self, metric_variables, loss, x, y, y_pred, sample_weight
    )
    return logs, (trainable, non_trainable, optimizer_variables, metric_variables)


def jax_test_step(self, state, data):
    """JAX's stateless test step: ``state`` holds no optimizer variables."""
    trainable, non_trainable, metric_variables = state
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    _, (loss, y_pred, non_trainable, metric_variables) = self.compute_loss_and_updates(
        trainable, non_trainable, metric_variables, x, y, sample_weight, training=False
    )
    logs, metric_variables = stateless_update_metrics(
        self, metric_variables, loss, x, y, y_pred, sample_weight
    )
    return logs, (trainable, non_trainable, metric_variables)


def torch_train_step(self, data):
    """PyTorch's step: ``zero_grad``, ``backward``, ``optimizer.apply`` without autograd."""
    import torch

    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    self.zero_grad()
    y_pred = self(x, training=True)
    loss = self.compute_loss(x, y, y_pred, sample_weight, training=True)
    loss.backward()
    variables = self.trainable_variables
    with torch.no_grad():
        self.optimizer.apply([v.value.grad for v in variables], variables)
    return update_metrics(self, loss, x, y, y_pred, sample_weight)


#: The ``train_step`` of each backend, for any compiled model.
TRAIN_STEPS = {
    "tensorflow": tensorflow_train_step,
    "jax": jax_train_step,
    "torch": torch_train_step,
}
#: The ``test_step`` of each backend (``evaluate`` runs it).
TEST_STEPS = {
    "tensorflow": stateful_test_step,
    "jax": jax_test_step,
    "torch": stateful_test_step,
}


class CustomStepModel(keras.Model):
    """A ``keras.Model`` whose ``train_step`` and ``test_step`` are ``TRAIN_STEPS`` and
    ``TEST_STEPS`` for the running backend: pass it to ``ordinary_model``.

    Taught in chapter 14, "Chapter 8's train_step on each backend".
    """

    train_step = TRAIN_STEPS[keras.backend.backend()]
    test_step = TEST_STEPS[keras.backend.backend()]


class VAESampling(keras.layers.Layer):
    """A VAE's sampling layer: ``mean + exp(log_var / 2) * noise`` in training, ``mean``
    otherwise; it adds the KL divergence from N(0, 1), times ``kl_weight``, with ``add_loss``.

    Taught in chapter 14, "Chapter 8's train_step on each backend".
    """

    def __init__(self, kl_weight: float = 0.01, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kl_weight = check_real(kl_weight, "kl_weight", minimum=0)
        self.seed_generator = keras.random.SeedGenerator(check_seed(seed))

    def call(self, inputs: Any, training: bool = False) -> Any:
        """Sample the latent variable and add the KL term."""
        mean, log_var = inputs
        kl = -0.5 * ops.sum(1 + log_var - ops.square(mean) - ops.exp(log_var), axis=-1)
        self.add_loss(self.kl_weight * ops.mean(kl))
        if not training:
            return mean
        noise = keras.random.normal(ops.shape(mean), seed=self.seed_generator)
        return mean + ops.exp(0.5 * log_var) * noise


def ordinary_model(model_class: type = keras.Model, l2: float = 0.01) -> keras.Model:
    """The model a step must train as Keras's does, compiled: an L2 kernel regularizer,
    BatchNormalization, Dropout, a VAE's sampling layer (its KL term an ``add_loss``), Adam, the
    loss ``"mse"``, ``mae`` as a metric and ``weighted_mae`` as a weighted metric.

    The same seeds every call, so two such models start equal and draw the same dropout masks
    and noise (on one backend; each backend draws its own).

    Args:
        model_class: ``keras.Model`` (Keras's own steps) or a subclass with its own
            ``train_step``; called as ``model_class(inputs, outputs)``.
        l2: The kernel regularizer's factor (a float >= 0; 0 for none).

    Returns:
        The compiled model, built for 4 features.

    Raises:
        TypeError: If ``model_class`` is not a ``keras.Model`` subclass or ``l2`` not a number.
        ValueError: If ``l2`` is negative or not finite.

    Example:
        >>> model = ordinary_model()
        >>> [metric.name for metric in model.metrics]
        ['loss', 'compile_metrics']

    Taught in chapter 14, "Chapter 8's train_step on each backend".
    """
    if not (isinstance(model_class, type) and issubclass(model_class, keras.Model)):
        raise TypeError(
            f"model_class: expected a keras.Model subclass, got {describe(model_class)}"
        )
    l2 = check_real(l2, "l2", minimum=0)
    keras.utils.set_random_seed(0)
    regularizer = keras.regularizers.L2(l2) if l2 else None
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(16, "relu", kernel_regularizer=regularizer)(inputs)
    hidden = keras.layers.Dropout(0.25, seed=1)(keras.layers.BatchNormalization()(hidden))
    mean, log_var = keras.layers.Dense(2)(hidden), keras.layers.Dense(2)(hidden)
    outputs = keras.layers.Dense(1)(VAESampling(seed=2)([mean, log_var]))
    model = model_class(inputs, outputs)
    mae = keras.metrics.MeanAbsoluteError
    model.compile(
        keras.optimizers.Adam(0.01),
        "mse",
        metrics=[mae(name="mae")],
        weighted_metrics=[mae(name="weighted_mae")],
    )
    return model


def ordinary_data(n: int = 72) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` examples of a noisy linear target of 4 features, and a weight for each.

    Args:
        n: Examples (an int >= 1). The default, 72, leaves a last batch of 8 in batches of 16.

    Returns:
        ``(x, y, sample_weight)``: float32 arrays of shapes ``(n, 4)``, ``(n, 1)`` and ``(n,)``,
        the weights between 0.5 and 1.5; the same on every backend.

    Raises:
        TypeError, ValueError: If ``n`` is not an int >= 1.

    Example:
        >>> [a.shape for a in ordinary_data(8)]
        [(8, 4), (8, 1), (8,)]

    Taught in chapter 14, "Chapter 8's train_step on each backend".
    """
    n = check_int(n, "n", minimum=1)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32") + 0.1 * rng.normal(size=(n, 1))
    return x, y.astype("float32"), rng.uniform(0.5, 1.5, n).astype("float32")


def ordinary_run(model_class: type = keras.Model, epochs: int = 2, l2: float = 0.01) -> dict:
    """Train ``ordinary_model(model_class, l2)`` with ``fit`` (batches of 16, in order, sample
    weights), then ``evaluate`` it: a JSON-able dict of ``history``, ``evaluate``, ``weights``
    (the values of ``model.weights`` in order, BatchNormalization's moving statistics
    included), ``start`` (the same before training) and ``paths`` (their paths)."""
    epochs = check_int(epochs, "epochs", minimum=1)
    x, y, sample_weight = ordinary_data()
    model = ordinary_model(model_class, l2)
    start = [ops.convert_to_numpy(w).tolist() for w in model.weights]
    history = model.fit(
        x, y, sample_weight=sample_weight, batch_size=16, epochs=epochs, shuffle=False, verbose=0
    )
    evaluated = model.evaluate(
        x, y, sample_weight=sample_weight, batch_size=16, verbose=0, return_dict=True
    )
    return {
        "history": {k: [float(v) for v in values] for k, values in history.history.items()},
        "evaluate": {k: float(v) for k, v in evaluated.items()},
        "weights": [ops.convert_to_numpy(w).tolist() for w in model.weights],
        "start": start,
        "paths": [w.path for w in model.weights],
    }


def step_gaps(model_class: type = CustomStepModel, epochs: int = 2) -> dict[str, float]:
    """How far ``model_class``'s steps are from Keras's own on ``ordinary_model``, trained
    ``epochs`` epochs by ``fit`` then evaluated (``ordinary_run``).

    Args:
        model_class: A ``keras.Model`` subclass with its own ``train_step`` (and ``test_step``).
        epochs: Epochs of ``fit`` (an int >= 1).

    Returns:
        ``weights``: the largest absolute difference of any weight (BatchNormalization's moving
        statistics included); ``history`` and ``evaluate``: the largest relative difference of
        any log; ``moved``: how far Keras's training moved the weights (so a gap is small).

    Raises:
        TypeError: If ``model_class`` is not a ``keras.Model`` subclass or ``epochs`` not an int.
        ValueError: If ``epochs`` is below 1.

    Example:
        >>> gaps = step_gaps(epochs=1)
        >>> gaps["weights"] < 1e-5 < gaps["moved"]
        True

    Taught in chapter 14, "Chapter 8's train_step on each backend".
    """
    ours, theirs = ordinary_run(model_class, epochs), ordinary_run(keras.Model, epochs)

    def largest(pairs: Any) -> float:
        return max(float(np.max(np.abs(np.subtract(a, b)))) for a, b in pairs)

    def relative(logs: dict, reference: dict) -> float:
        if sorted(logs) != sorted(reference):
            return float("inf")
        return max(float(np.max(np.abs(np.divide(logs[k], reference[k]) - 1))) for k in reference)

    return {
        "weights": largest(zip(ours["weights"], theirs["weights"])),
        "history": relative(ours["history"], theirs["history"]),
        "evaluate": relative(ours["evaluate"], theirs["evaluate"]),
        "moved": largest(zip(theirs["start"], theirs["weights"])),
    }


def probe_train_step() -> str:
    """``CustomStepModel`` (this backend's steps) on ``ordinary_model``, two epochs: every
    weight and log of ``fit`` and ``evaluate`` equals Keras's own steps' to float32 rounding."""
    gaps = step_gaps(CustomStepModel)
    for what, bound in [("weights", 1e-5), ("history", 1e-5), ("evaluate", 1e-5)]:
        if not gaps[what] <= bound:
            raise AssertionError(f"train_step against fit, {what}: {gaps[what]:.3g} > {bound:g}")
    return {
        "tensorflow": UNCHANGED,
        "jax": CHANGED + "a stateless train_step(self, state, data)",
        "torch": CHANGED + "zero_grad, backward, optimizer.apply",
    }[keras.backend.backend()]


class StepModel(keras.Model):
    """Chapter 8's regressor, Dense(16, relu) then Dense(1), with this backend's steps
    (``TRAIN_STEPS``, ``TEST_STEPS``): the same model, trained three ways. (Not a subclass of
    ``CustomStepModel``: Keras turns that class, used with inputs and outputs, into a
    Functional one.)

    Example:
        >>> model = StepModel()
        >>> model.compile(keras.optimizers.SGD(0.01), "mse", metrics=["mae"])
        >>> history = model.fit(np.ones((8, 4)), np.ones((8, 1)), epochs=1, verbose=0)
        >>> sorted(history.history)
        ['loss', 'mae']

    Taught in chapter 14, "Chapter 8's train_step on each backend".
    """

    train_step = TRAIN_STEPS[keras.backend.backend()]
    test_step = TEST_STEPS[keras.backend.backend()]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(1)

    def call(self, x: Any, training: bool | None = None) -> Any:
        """Dense(16, relu), then Dense(1) (``training`` changes nothing: no dropout here)."""
        return self.out(self.hidden(x))


def step_data(n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """``n`` examples of a noisy linear target of 4 features, the same on every backend."""
    x, y, _ = ordinary_data(n)
    return x, y


def initial_weights() -> list[np.ndarray]:
    """The regressor's starting weights, drawn with NumPy so that every backend starts equal."""
    rng = np.random.default_rng(1)
    return [
        (0.5 * rng.normal(size=(4, 16))).astype("float32"),
        np.zeros(16, "float32"),
        (0.5 * rng.normal(size=(16, 1))).astype("float32"),
        np.zeros(1, "float32"),
    ]


def step_model(custom_step: bool = True) -> keras.Model:
    """A compiled regressor from ``initial_weights``: ``StepModel``, or the same layers as a
    plain functional model (Keras's own step) when ``custom_step`` is False."""
    if custom_step:
        model = StepModel()
        model(np.zeros((1, 4), "float32"))  # creates the weights
    else:
        inputs = keras.Input((4,))
        hidden = keras.layers.Dense(16, activation="relu")(inputs)
        model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    model.set_weights(initial_weights())
    model.compile(keras.optimizers.Adam(0.01), "mse", metrics=["mae"])
    return model


def step_losses(custom_step: bool = True, epochs: int = 5) -> list[float]:
    """The epoch losses of ``step_model(custom_step)`` trained on ``step_data`` in batches of 16.

    Args:
        custom_step: True for ``StepModel`` (the backend's own step), False for Keras's step.
        epochs: Epochs to train (an int >= 1).

    Returns:
        The loss of each epoch, as Python floats.

    Raises:
        TypeError: If ``custom_step`` is not a bool or ``epochs`` not an int.
        ValueError: If ``epochs`` is below 1.

    Example:
        >>> losses = step_losses(epochs=2)
        >>> len(losses), losses[1] < losses[0]
        (2, True)

    Taught in chapter 14, "Chapter 8's train_step on each backend".
    """
    custom_step = check_bool(custom_step, "custom_step")
    epochs = check_int(epochs, "epochs", minimum=1)
    x, y = step_data()
    model = step_model(custom_step)
    history = model.fit(x, y, batch_size=16, epochs=epochs, shuffle=False, verbose=0)
    return [float(loss) for loss in history.history["loss"]]
