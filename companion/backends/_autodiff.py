"""Gradients and a hand-written training loop on each backend: what ``tf.GradientTape`` becomes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from companion._checks import check_callable, check_int, describe


def _tensorflow_gradient(fn: Callable[[Any], Any], x: np.ndarray) -> np.ndarray:
    import tensorflow as tf

    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        total = tf.reduce_sum(fn(x))
    return tape.gradient(total, x).numpy()


def _jax_gradient(fn: Callable[[Any], Any], x: np.ndarray) -> np.ndarray:
    import jax
    import jax.numpy as jnp

    return np.asarray(jax.grad(lambda t: jnp.sum(fn(t)))(jnp.asarray(x)))


def _torch_gradient(fn: Callable[[Any], Any], x: np.ndarray) -> np.ndarray:
    import torch

    t = torch.tensor(x, requires_grad=True)
    torch.sum(fn(t)).backward()
    return t.grad.numpy()


def gradient(fn: Callable[[Any], Any], x: Any) -> np.ndarray:
    """The gradient of ``sum(fn(x))`` with respect to ``x``, by the running backend's autodiff.

    ``tf.GradientTape`` on TensorFlow, ``jax.grad`` on JAX, ``backward()`` on PyTorch.

    Args:
        fn: A function of one tensor, written in ``keras.ops`` (or the backend's own ops).
        x: A float array (NumPy or nested lists).

    Returns:
        The gradient as a NumPy array of ``x``'s shape.

    Raises:
        TypeError: If ``fn`` is not callable.

    Example:
        >>> gradient(lambda t: keras.ops.square(t), np.array([1.0, -2.0], "float32"))
        array([ 2., -4.], dtype=float32)

    Taught in chapter 14, "What stays TensorFlow-only".
    """
    check_callable(fn, "fn", "a function of one tensor")
    return GRADIENTS[keras.backend.backend()](fn, np.asarray(x))


#: The running backend's autodiff for ``gradient``, by backend.
GRADIENTS = {
    "tensorflow": _tensorflow_gradient,
    "jax": _jax_gradient,
    "torch": _torch_gradient,
}


def _tensorflow_loop(model: keras.Model, batches: list, optimizer: Any) -> None:
    import tensorflow as tf

    for x, y in batches:
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x, y, model(x, training=True))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(gradients, model.trainable_variables)


def _jax_loop(model: keras.Model, batches: list, optimizer: Any) -> None:
    import jax

    def loss_of(trainable, non_trainable, x, y):
        y_pred, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return model.compute_loss(x, y, y_pred), non_trainable

    optimizer.build(model.trainable_variables)
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    state = [v.value for v in optimizer.variables]
    step = jax.jit(jax.value_and_grad(loss_of, has_aux=True))
    for x, y in batches:
        (_, non_trainable), gradients = step(trainable, non_trainable, x, y)
        trainable, state = optimizer.stateless_apply(state, gradients, trainable)
    for variable, value in zip(model.trainable_variables, trainable):
        variable.assign(value)  # the loop kept the weights outside the model: put them back


def _torch_loop(model: keras.Model, batches: list, optimizer: Any) -> None:
    import torch

    for x, y in batches:
        model.zero_grad()
        loss = model.compute_loss(x, y, model(x, training=True))
        loss.backward()
        variables = model.trainable_variables
        with torch.no_grad():
            optimizer.apply([v.value.grad for v in variables], variables)


#: A hand-written training loop for each backend (what chapter 7's ``GradientTape`` loop becomes).
LOOPS = {"tensorflow": _tensorflow_loop, "jax": _jax_loop, "torch": _torch_loop}


def train_by_hand(model: keras.Model, x: Any, y: Any, *, batch_size: int = 16) -> keras.Model:
    """Train ``model`` one epoch on ``(x, y)`` with its compiled optimizer and loss, in the
    running backend's own loop (no ``fit``); batches in order, as ``fit(shuffle=False)``.

    Args:
        model: A compiled, built ``keras.Model``.
        x: The inputs (a NumPy array).
        y: The targets (a NumPy array).
        batch_size: Examples per step (an int >= 1).

    Returns:
        ``model``, trained.

    Raises:
        TypeError: If ``model`` is not a compiled ``keras.Model`` or ``batch_size`` not an int.
        ValueError: If ``batch_size`` is below 1.

    Example:
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> model.compile("sgd", "mse")
        >>> x = np.ones((32, 2), "float32")
        >>> train_by_hand(model, x, 2 * x[:, :1]) is model
        True

    Taught in chapter 14, "What stays TensorFlow-only".
    """
    if not isinstance(model, keras.Model) or getattr(model, "optimizer", None) is None:
        raise TypeError(f"model: expected a compiled keras.Model, got {describe(model)}")
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    tensor = keras.ops.convert_to_tensor
    starts = range(0, len(x), batch_size)
    batches = [(tensor(x[i : i + batch_size]), tensor(y[i : i + batch_size])) for i in starts]
    LOOPS[keras.backend.backend()](model, batches, model.optimizer)
    return model
