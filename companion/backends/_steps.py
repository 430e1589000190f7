"""Chapter 8's ``train_step`` written for each backend, and a short run of it from fixed weights."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from companion._checks import check_bool, check_int


def tensorflow_train_step(self, data):
    """Chapter 8's step: ``tf.GradientTape``, ``optimizer.apply``, ``update_state``."""
    import tensorflow as tf

    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    with tf.GradientTape() as tape:
        y_pred = self(x, training=True)
        loss = self.compute_loss(x, y, y_pred, sample_weight)
    gradients = tape.gradient(loss, self.trainable_variables)
    self.optimizer.apply(gradients, self.trainable_variables)
    return self.update_metrics(loss, y, y_pred)


def jax_train_step(self, state, data):
    """The stateless JAX step: the variables come in ``state`` and go out with the logs."""
    import jax

    trainable, non_trainable, optimizer_variables, metric_variables = state
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)

    def loss_and_updates(trainable, non_trainable):
        y_pred, non_trainable = self.stateless_call(trainable, non_trainable, x, training=True)
        return self.compute_loss(x, y, y_pred, sample_weight), (y_pred, non_trainable)

    (loss, (y_pred, non_trainable)), gradients = jax.value_and_grad(loss_and_updates, has_aux=True)(
        trainable, non_trainable
    )
    trainable, optimizer_variables = self.optimizer.stateless_apply(
        optimizer_variables, gradients, trainable
    )
    logs, new_metric_variables = {}, []
    for metric in self.metrics:
        mine = metric_variables[len(new_metric_variables) :][: len(metric.variables)]
        if metric is self.loss_tracker:
            mine = metric.stateless_update_state(mine, loss)
        else:
            mine = metric.stateless_update_state(mine, y, y_pred)
        logs[metric.name] = metric.stateless_result(mine)
        new_metric_variables += mine
    return logs, (trainable, non_trainable, optimizer_variables, new_metric_variables)


def torch_train_step(self, data):
    """The PyTorch step: ``zero_grad``, ``backward``, ``optimizer.apply`` without autograd."""
    import torch

    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    self.zero_grad()
    y_pred = self(x, training=True)
    loss = self.compute_loss(x, y, y_pred, sample_weight)
    loss.backward()
    variables = self.trainable_variables
    with torch.no_grad():
        self.optimizer.apply([v.value.grad for v in variables], variables)
    return self.update_metrics(loss, y, y_pred)


#: Chapter 8's ``train_step`` for each backend, chosen once when ``StepModel`` is defined.
TRAIN_STEPS = {
    "tensorflow": tensorflow_train_step,
    "jax": jax_train_step,
    "torch": torch_train_step,
}


class StepModel(keras.Model):
    """Chapter 8's regressor, Dense(16, relu) then Dense(1), with its own ``train_step``.

    The step is the one ``TRAIN_STEPS`` holds for the running backend: the same model, written
    three ways. It tracks the loss and the mean absolute error, as chapter 8's ``InlineModel``.

    Example:
        >>> model = StepModel()
        >>> model.compile(keras.optimizers.SGD(0.01), "mse")
        >>> history = model.fit(np.ones((8, 4)), np.ones((8, 1)), epochs=1, verbose=0)
        >>> sorted(history.history)
        ['loss', 'mae']

    Taught in chapter 14, "Chapter 8's train_step on each backend".
    """

    train_step = TRAIN_STEPS[keras.backend.backend()]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(1)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae = keras.metrics.MeanAbsoluteError(name="mae")

    def call(self, x: Any, training: bool | None = None) -> Any:
        """Dense(16, relu), then Dense(1) (``training`` changes nothing: no dropout here)."""
        return self.out(self.hidden(x))

    @property
    def metrics(self) -> list:
        """The two metrics ``fit`` resets each epoch: the loss and the mean absolute error."""
        return [self.loss_tracker, self.mae]

    def update_metrics(self, loss: Any, y: Any, y_pred: Any) -> dict:
        """Update the two metrics (the stateful way) and return their results by name."""
        self.loss_tracker.update_state(loss)
        self.mae.update_state(y, y_pred)
        return {metric.name: metric.result() for metric in self.metrics}


def step_data(n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """``n`` examples of a noisy linear target of 4 features, the same on every backend."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32") + 0.1 * rng.normal(size=(n, 1))
    return x, y.astype("float32")


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
    model.compile(keras.optimizers.Adam(0.01), "mse", metrics=[] if custom_step else ["mae"])
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
