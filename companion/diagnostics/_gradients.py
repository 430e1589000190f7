"""``gradient_norms`` and ``first_nonfinite_gradient``: one training step's gradients, per variable,
in backpropagation order.

The gradient is each backend's own: ``tf.GradientTape``, ``jax.grad`` over the variables' values
(in a ``keras.StatelessScope``, as ``stateless_call`` does), ``torch.autograd.grad``.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from companion._checks import (
    check_bool,
    check_callable,
)
from companion._finite import has_nonfinite
from companion.diagnostics._inputs import (
    blaming,
    call_on,
    check_layer,
    describe_input,
    finite_arrays,
    host_array,
)


def _gradients(
    model: keras.layers.Layer, inputs: Any, targets: Any, loss: Callable[..., Any], training: bool
) -> list[tuple[str, Any]]:
    """(variable path, gradient or None) of a training step, output-side variables first."""
    model = check_layer(model, "model")
    check_callable(loss, "loss", "a callable loss(y_true, y_pred)")
    training = check_bool(training, "training")
    finite_arrays(inputs, "inputs")
    target_arrays = finite_arrays(targets, "targets")

    def forward() -> Any:
        output = call_on(model, inputs, "inputs", training=training)
        _check_targets(target_arrays, output)
        with blaming(
            "targets",
            f"targets that loss accepts for the output ({describe_input(output)})",
            targets,
        ):
            value = loss(targets, output)
        return value + keras.ops.sum(keras.ops.stack(model.losses)) if model.losses else value

    from companion._backend import backend

    gradients = _GRADIENTS[backend()](model, forward)
    variables = list(model.trainable_variables)  # after the call, which builds an unbuilt model
    pairs = [(v.path, g) for v, g in zip(variables, gradients)]
    return pairs[::-1]


def _tensorflow_gradients(model: keras.layers.Layer, forward: Callable[[], Any]) -> list[Any]:
    """``tf.GradientTape``'s gradients of ``forward()`` for the model's trainable variables."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        value = forward()
    gradients = tape.gradient(value, list(model.trainable_variables))
    return [None if g is None else tf.convert_to_tensor(g) for g in gradients]


def _torch_gradients(model: keras.layers.Layer, forward: Callable[[], Any]) -> list[Any]:
    """``torch.autograd.grad`` of ``forward()``; ``None`` where the loss does not depend."""
    import torch

    value = forward()
    parameters = [v.value for v in model.trainable_variables]
    if not parameters or not value.requires_grad:
        return [None] * len(parameters)
    return list(torch.autograd.grad(value, parameters, allow_unused=True))


def _jax_gradients(model: keras.layers.Layer, forward: Callable[[], Any]) -> list[Any]:
    """``jax.grad`` of ``forward()`` over the trainable variables' values, read in a stateless
    scope. A variable the loss does not depend on gets zeros from JAX: ``None`` here, as on the
    other backends (read off the traced function's inputs that reach no output)."""
    import jax

    if not model.built:
        forward()  # builds the model: its variables exist only after a first call
    trainable = list(model.trainable_variables)

    def value_of(values: list[Any]) -> Any:
        mapping = list(zip(trainable, values))
        with keras.StatelessScope(state_mapping=mapping, collect_losses=True):
            return forward()

    values = [v.value for v in trainable]
    gradients = jax.grad(value_of)(values)
    used = _used_inputs(jax.make_jaxpr(value_of)(values).jaxpr)
    return [g if used[i] else None for i, g in enumerate(gradients)]


def _used_inputs(jaxpr: Any) -> list[bool]:
    """For each input of ``jaxpr``, whether any equation reads it (or it is an output)."""
    read = {id(v) for eqn in jaxpr.eqns for v in eqn.invars}
    read |= {id(v) for v in jaxpr.outvars}
    return [id(v) in read for v in jaxpr.invars]


#: Each backend's gradient of a forward pass for a model's trainable variables.
_GRADIENTS = {
    "tensorflow": _tensorflow_gradients,
    "jax": _jax_gradients,
    "torch": _torch_gradients,
}


def _check_targets(targets: list[np.ndarray], output: Any) -> None:
    """Each target has the batch size of the model's output and, when targets and outputs pair
    up one to one, a shape its output's loss takes without broadcasting: the output's shape (a
    trailing axis of 1 on either side aside, which Keras's losses squeeze), or, for integer
    class labels, the output's shape without its last axis."""
    outputs = keras.tree.flatten(output)
    first = outputs[0]
    batch = first.shape[0] if len(first.shape) else None
    for leaf in targets:
        if batch is not None and (leaf.ndim < 1 or leaf.shape[0] != batch):
            raise ValueError(
                f"targets: expected arrays with the batch size of the model's output ({batch}), "
                f"got {describe_input(leaf)}"
            )
    if len(targets) != len(outputs):
        return  # the loss pairs them as it likes
    for leaf, out in zip(targets, outputs):
        shape = tuple(out.shape)
        if not _fits(leaf, shape):
            raise ValueError(
                f"targets: expected arrays of the output's shape {shape} (integer class labels: "
                f"{shape[:-1]}), got {describe_input(leaf)}"
            )


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:-1] if shape and shape[-1] == 1 else shape


def _fits(target: np.ndarray, shape: tuple[int, ...]) -> bool:
    """True if ``target`` pairs with an output of ``shape`` without broadcasting."""
    if _squeezed(target.shape) == _squeezed(shape):
        return True
    return target.dtype.kind in "iu" and _squeezed(target.shape) == shape[:-1]


def gradient_norms(
    model: keras.layers.Layer,
    inputs: Any,
    targets: Any,
    *,
    loss: Callable[..., Any],
    training: bool = True,
) -> dict[str, float | None]:
    """The L2 norm of each variable's gradient for one training step (forward, loss, backward).

    The loss is ``loss(targets, model(inputs))`` plus the model's regularization losses.
    Variables come in reverse creation order: for a stack of layers, the order backpropagation
    reaches them. Norms are computed in float64, so a large but finite gradient is not
    reported as ``inf``. Track the global norm, ``sqrt(sum(n**2))``, over steps to see
    gradients explode before the loss does.

    Args:
        model: A Keras model or layer with trainable variables.
        inputs: The batch's inputs.
        targets: The batch's targets.
        loss: ``loss(y_true, y_pred)`` returning a scalar (a Keras loss object works).
        training: The ``training`` flag of the forward pass.

    Returns:
        ``{variable path: norm}``; ``None`` for a variable the loss does not depend on.

    Raises:
        TypeError: If ``model`` is not a Keras layer/model, ``loss`` is not callable,
            ``training`` is not a bool, or ``inputs`` or ``targets`` hold something other than
            arrays of numbers.
        ValueError: If ``inputs`` or ``targets`` hold NaN or Inf (no layer is to blame), the
            model cannot be called on ``inputs``, or ``targets`` do not fit its output (another
            batch size, a shape the loss would broadcast against the output's, or ``loss``
            fails on them).

    Example:
        >>> import numpy as np
        >>> dense = keras.layers.Dense(1, kernel_initializer="ones", name="d")
        >>> x, y = np.ones((1, 2), "float32"), np.zeros((1, 1), "float32")
        >>> norms = gradient_norms(dense, x, y, loss=keras.losses.MeanSquaredError())
        >>> {path: round(norm, 3) for path, norm in norms.items()}  # d/db (2 + b)^2 = 4
        {'d/bias': 4.0, 'd/kernel': 5.657}

    Taught in chapter 11, "Exploding gradients, caught by tracking the norm".
    """
    return {
        path: None if g is None else float(np.linalg.norm(host_array(g).astype(np.float64)))
        for path, g in _gradients(model, inputs, targets, loss, training)
    }


def first_nonfinite_gradient(
    model: keras.layers.Layer,
    inputs: Any,
    targets: Any,
    *,
    loss: Callable[..., Any],
    training: bool = True,
) -> str | None:
    """The path of the first variable, in backpropagation order, whose gradient holds NaN or Inf.

    Backpropagation reaches the output-side layers first, and a NaN spreads from where it
    appears towards the inputs, so the first non-finite gradient in this order is the one
    closest to where it arose. A forward pass can be finite while a gradient is not (the
    derivative of ``sqrt`` at 0 is infinite): check both.

    Args:
        model: A Keras model or layer with trainable variables.
        inputs: The batch's inputs.
        targets: The batch's targets.
        loss: ``loss(y_true, y_pred)`` returning a scalar.
        training: The ``training`` flag of the forward pass.

    Returns:
        The variable's path (``"dense_1/kernel"``), or ``None`` if all gradients are finite.

    Raises:
        TypeError, ValueError: As for ``gradient_norms``.

    Example:
        >>> import numpy as np
        >>> dense = keras.layers.Dense(1, name="d")
        >>> x, y = np.ones((1, 2), "float32"), np.zeros((1, 1), "float32")
        >>> def sqrt_of_zero(y, p):
        ...     return keras.ops.sum(keras.ops.sqrt(keras.ops.abs(p - p)))
        >>> first_nonfinite_gradient(dense, x, y, loss=sqrt_of_zero)
        'd/bias'

    Taught in chapter 11, "A finite forward pass with a NaN gradient".
    """
    for path, gradient in _gradients(model, inputs, targets, loss, training):
        if has_nonfinite(gradient):
            return path
    return None
