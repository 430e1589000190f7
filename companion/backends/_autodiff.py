"""Gradients and a hand-written training loop on each backend: what ``tf.GradientTape`` becomes."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

import keras
import numpy as np

from companion._checks import check_callable, check_int, describe
from companion.backends._probes import TF_ONLY, UNCHANGED


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

    On JAX the gradient of a float64 ``x`` is float32: JAX computes in float32 unless x64 is
    turned on (``jax.config.update("jax_enable_x64", True)`` before its first array).
    TensorFlow and PyTorch keep float64.

    Args:
        fn: A function of one tensor, written in ``keras.ops`` (or the backend's own ops).
        x: A float array (NumPy or nested lists).

    Returns:
        The gradient as a NumPy array of ``x``'s shape, of ``x``'s dtype (float32 for float64
        on JAX without x64).

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

    for x, y, sample_weight in batches:
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x, y, y_pred, sample_weight, training=True)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(gradients, model.trainable_variables)


def _jax_loop(model: keras.Model, batches: list, optimizer: Any) -> None:
    import jax

    def step(state, metric_values, x, y, sample_weight):
        trainable, non_trainable, optimizer_values = state
        grad_fn = jax.value_and_grad(model.compute_loss_and_updates, has_aux=True)
        (_, (_, _, non_trainable, _)), gradients = grad_fn(
            trainable, non_trainable, metric_values, x, y, sample_weight,
            training=True, optimizer_variables=optimizer_values,
        )  # fmt: skip
        trainable, optimizer_values = optimizer.stateless_apply(
            optimizer_values, gradients, trainable
        )
        return trainable, non_trainable, optimizer_values

    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    # The loop keeps the state outside the model, and puts all of it back at the end.
    variables = (model.trainable_variables, model.non_trainable_variables, optimizer.variables)
    state = [[v.value for v in group] for group in variables]
    metric_values = [v.value for v in model.metrics_variables]
    step = jax.jit(step)
    for x, y, sample_weight in batches:
        state = step(state, metric_values, x, y, sample_weight)
    for group, values in zip(variables, state):
        for variable, value in zip(group, values):
            variable.assign(value)


def _torch_loop(model: keras.Model, batches: list, optimizer: Any) -> None:
    import torch

    for x, y, sample_weight in batches:
        model.zero_grad()
        y_pred = model(x, training=True)
        model.compute_loss(x, y, y_pred, sample_weight, training=True).backward()
        variables = model.trainable_variables
        with torch.no_grad():
            optimizer.apply([v.value.grad for v in variables], variables)


#: A hand-written training loop for each backend (what chapter 7's ``GradientTape`` loop becomes).
LOOPS = {"tensorflow": _tensorflow_loop, "jax": _jax_loop, "torch": _torch_loop}


def train_by_hand(
    model: keras.Model, x: Any, y: Any, *, sample_weight: Any = None, batch_size: int = 16
) -> keras.Model:
    """Train ``model`` one epoch on ``(x, y)`` with its compiled optimizer and loss, in the
    running backend's own loop (no ``fit``); batches in order, as ``fit(shuffle=False)``.

    It trains as ``fit`` does: the loss holds the regularizers' penalties and the ``add_loss``
    terms, layers run with ``training=True``, and the optimizer's state (its iterations, Adam's
    moments) and the non-trainable variables (BatchNormalization's statistics, seed
    generators' states) are the model's and its optimizer's, so a second call continues the
    first. The metrics are not updated.

    Args:
        model: A compiled, built ``keras.Model``.
        x: The inputs (a NumPy array).
        y: The targets (a NumPy array).
        sample_weight: A weight per example (a NumPy array of ``len(x)``), or None.
        batch_size: Examples per step (an int >= 1).

    Returns:
        ``model``, trained.

    Raises:
        TypeError: If ``model`` is not a compiled ``keras.Model`` or ``batch_size`` not an int.
        ValueError: If ``batch_size`` is below 1, or ``sample_weight`` is not one number per
            example.

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
    if sample_weight is not None:
        weights = np.asarray(sample_weight)
        if weights.shape != (len(x),) or not np.issubdtype(weights.dtype, np.number):
            raise ValueError(
                f"sample_weight: expected None or one number per example ({len(x)}), "
                f"got {describe(sample_weight)}"
            )
    tensor = keras.ops.convert_to_tensor

    def batch(values: Any, i: int) -> Any:
        return None if values is None else tensor(values[i : i + batch_size])

    batches = [
        (batch(x, i), batch(y, i), batch(sample_weight, i)) for i in range(0, len(x), batch_size)
    ]
    LOOPS[keras.backend.backend()](model, batches, model.optimizer)
    return model


def probe_tape_loop() -> str:
    """``train_by_hand`` equals ``fit`` on ``ordinary_model`` (an L2 regularizer, ``add_loss``,
    BatchNormalization, Dropout, sample weights, Adam): two calls against two epochs, every
    weight within 1e-5, the optimizer's iterations and variables within 1e-5 too."""
    from companion.backends._steps import ordinary_data, ordinary_model

    x, y, sample_weight = ordinary_data()
    looped, fitted = ordinary_model(), ordinary_model()
    if keras.backend.backend() == "tensorflow":
        # Where a GPU is visible, TensorFlow's fit compiles with XLA, which draws other dropout
        # masks than the loop's eager ops: compare the same kernels. (JAX's loop and fit both
        # jit; PyTorch's are both eager.)
        fitted.jit_compile = False
    for _ in range(2):
        train_by_hand(looped, x, y, sample_weight=sample_weight)
    fitted.fit(x, y, sample_weight=sample_weight, batch_size=16, epochs=2, shuffle=False, verbose=0)
    for what in ["weights", "optimizer.variables"]:
        ours, theirs = (
            [keras.ops.convert_to_numpy(v) for v in attrgetter(what)(m)] for m in (looped, fitted)
        )
        gap = max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs))
        if len(ours) != len(theirs) or not gap <= 1e-5:
            raise AssertionError(f"train_by_hand against fit, {what}: {gap:.3g} > 1e-05")
    return {
        "tensorflow": UNCHANGED,
        "jax": TF_ONLY + "jax.value_and_grad",
        "torch": TF_ONLY + "loss.backward() (torch autograd)",
    }[keras.backend.backend()]
