"""The tape-based helpers of ``companion.gradients``: a function's derivative, a gradient checker
against finite differences, the WGAN-GP penalty (nested tapes).

Backends: TensorFlow only (on JAX use ``jax.grad``; on PyTorch use ``torch.autograd.grad``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from companion._backend import require_tensorflow
from companion._checks import (
    check_callable,
    check_real,
    check_seed,
    describe,
    dtype_max,
    float_tensor,
    is_real,
)
from companion.gradients._ops import CHECKABLE_DTYPES, default_delta, safe_norm

#: What JAX and PyTorch use instead of the tape-based helpers.
TAPE_INSTEAD = {
    "jax": "jax.value_and_grad (jax.vjp for the gradient of a sum; jax.test_util.check_grads)",
    "torch": "torch.autograd.grad (torch.autograd.gradcheck for finite differences)",
}


def value_and_gradient(fn: Callable[[Any], Any], x: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """``fn(x)`` and the gradient of ``sum(fn(x))`` with respect to ``x``, both as NumPy arrays.

    For an elementwise ``fn`` the gradient is the derivative at each point, which is what
    the chapters plot and tabulate. The gradient is ``None`` when ``fn``'s output does not
    depend on ``x`` through differentiable ops (``tf.round``, a cast to int, ...).

    Args:
        fn: Function of one tensor.
        x: Point(s) to evaluate at: a tensor or array (a NumPy array keeps its dtype).

    Returns:
        ``(value, gradient)``; ``gradient`` has the shape of ``x``, or is ``None``.

    Raises:
        TypeError: If ``fn`` is not callable or ``x`` is not floating point.
        companion.backends.TensorFlowRequired: Under another backend (naming its gradient function).

    Example:
        >>> import tensorflow as tf
        >>> value, gradient = value_and_gradient(tf.square, [1.0, -2.0])
        >>> value.tolist(), gradient.tolist()
        ([1.0, 4.0], [2.0, -4.0])

    Taught in chapter 5, "Checking a gradient with finite differences".
    """
    require_tensorflow("companion.gradients.value_and_gradient", TAPE_INSTEAD)
    import tensorflow as tf

    check_callable(fn, "fn", "a callable taking one tensor")
    x = float_tensor(x, "x")
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    gradient = tape.gradient(y, x)
    return np.asarray(y), None if gradient is None else gradient.numpy()


def _checkable_array(x: Any) -> Any:
    """``x`` as a tensor of a dtype in ``CHECKABLE_DTYPES``.

    NumPy and Python floats stay float64.
    """
    import tensorflow as tf

    what = "float16, float32 or float64 values"
    try:
        array = x if tf.is_tensor(x) else np.asarray(x)
        dtype = tf.as_dtype(array.dtype)
    except (TypeError, ValueError):  # no array (None, a dict, a ragged list) or text
        raise TypeError(f"x: expected {what}, got {describe(x)}") from None
    if dtype.name not in CHECKABLE_DTYPES:
        raise TypeError(f"x: expected {what}, got dtype {dtype.name}")
    return tf.convert_to_tensor(array, dtype)


def gradient_error(fn: Callable[[Any], Any], x: Any, *, delta: float | None = None) -> float:
    """Largest absolute difference between ``fn``'s autodiff Jacobian and finite differences.

    Builds on ``tf.test.compute_gradient``: the autodiff Jacobian is assembled row by row
    from backward passes, the numeric one column by column from central differences
    ``(fn(x + delta e_i) - fn(x - delta e_i)) / (2 delta)``. The check runs in ``x``'s dtype:
    use float64 for a meaningful comparison (errors around 1e-10 for a correct gradient);
    in float32 rounding alone leaves errors around 1e-4, which hides small mistakes.
    Cost: one backward pass per output element and two forward passes per input element,
    so keep ``x`` small (tens of elements).

    Args:
        fn: Function of one tensor returning a floating-point tensor (custom gradient or not).
        x: The point to check at: a float array or tensor. NumPy/Python floats stay float64;
            a tensor keeps its dtype.
        delta: Finite-difference step; default ``default_delta(x.dtype)``.

    Returns:
        ``max |J_autodiff - J_numeric|`` over all entries, as a Python float (NaN if either
        Jacobian contains NaN, so a broken gradient never looks fine).

    Raises:
        TypeError: If ``fn`` is not callable or ``x`` is not float16/32/64.
        ValueError: If ``x`` is empty or ``delta`` is not a positive number ``x``'s dtype holds.

    Example:
        >>> import numpy as np, tensorflow as tf
        >>> gradient_error(tf.sin, np.linspace(-2.0, 2.0, 5)) < 1e-9
        True

    Taught in chapter 5, "Checking a gradient with finite differences".
    """
    require_tensorflow("companion.gradients.gradient_error", TAPE_INSTEAD)
    import tensorflow as tf

    check_callable(fn, "fn", "a callable taking one tensor")
    array = _checkable_array(x)
    if int(np.prod(array.shape)) == 0:
        raise ValueError(f"x: expected at least one element, got shape {tuple(array.shape)}")
    dtype = array.dtype
    if delta is None:
        delta = default_delta(dtype)
    else:  # maximum=, not dtype=: that would also print the lower bound -max after "> 0"
        delta = check_real(delta, "delta", above=0, maximum=dtype_max(dtype))
    (autodiff,), (numeric,) = tf.test.compute_gradient(fn, [array], delta=delta)
    return float(np.max(np.abs(autodiff.astype(np.float64) - numeric.astype(np.float64))))


def _mixing_weights(alpha: Any, batch: Any, dtype: Any, seed: int | None) -> Any:
    """``alpha`` as one weight per example, shape ``(batch,)``: drawn when ``None``."""
    import tensorflow as tf

    what = "None, a number in [0, 1] or a float tensor of shape (batch,) with values in [0, 1]"
    if alpha is None:
        if seed is None:
            return tf.random.uniform([batch], dtype=dtype)
        return tf.random.stateless_uniform([batch], seed=[seed, 0], dtype=dtype)
    if is_real(alpha):
        check_real(alpha, "alpha", minimum=0, maximum=1)
        return tf.fill([batch], tf.constant(alpha, dtype))
    try:
        weights = tf.convert_to_tensor(alpha)
    except (TypeError, ValueError):
        raise TypeError(f"alpha: expected {what}, got {describe(alpha)}") from None
    if not weights.dtype.is_floating:
        raise TypeError(f"alpha: expected {what}, got dtype {weights.dtype.name}")
    static_batch = tf.get_static_value(batch)
    if weights.shape.rank != 1 or (
        static_batch is not None and weights.shape[0] not in (None, int(static_batch))
    ):
        raise ValueError(f"alpha: expected {what}, got shape {tuple(weights.shape)}")
    known = tf.get_static_value(weights)
    if known is not None and not np.all((known >= 0) & (known <= 1)):
        raise ValueError(f"alpha: expected {what}, got {describe(alpha)}")
    return tf.cast(weights, dtype)


def gradient_penalty(
    critic: Callable[[Any], Any],
    real: Any,
    fake: Any,
    alpha: Any = None,
    *,
    seed: int | None = None,
) -> Any:
    """The WGAN-GP gradient penalty, ``mean((||grad_x critic(x_hat)|| - 1) ** 2)``.

    ``x_hat = alpha * real + (1 - alpha) * fake`` mixes each real example with its fake one
    (Gulrajani et al., 2017). The gradient of the critic at ``x_hat`` is taken by a tape
    inside this function; call it under your training step's tape and that outer tape
    records the inner gradient, so the penalty's gradient with respect to the critic's
    weights (a second-order derivative) comes out of ``outer.gradient`` as usual. The norm
    runs over every axis but the first (the batch) and is ``safe_norm``, so a critic that is
    flat at ``x_hat`` gives the weights a zero gradient, not NaN. The critic must score each
    example on its own (no batch normalization in training mode). Works eagerly and in
    ``tf.function``.

    Args:
        critic: Callable mapping a batch shaped like ``real`` to one score per example.
        real: Floating-point tensor, batch first (rank >= 1, at least one example).
        fake: Tensor of the same shape and dtype as ``real``.
        alpha: Mixing weight(s): ``None`` draws one per example uniformly from ``[0, 1]``; a
            number in ``[0, 1]`` or a float tensor of shape ``(batch,)`` fixes them.
        seed: With ``alpha=None``, an int in ``[0, 2**32 - 1]`` makes the draw stateless and
            repeatable (the same weights on every call); ``None`` draws fresh weights.

    Returns:
        The penalty, a scalar tensor of ``real``'s dtype.

    Raises:
        TypeError: If ``critic`` is not callable, ``real``, ``fake`` or ``alpha`` is not
            floating point, or ``seed`` is not an int.
        ValueError: If ``real`` is a scalar or empty, ``fake`` differs from it in shape or
            dtype, ``alpha`` has values outside ``[0, 1]`` or the wrong shape, ``seed`` is out
            of range, or the critic's output does not depend on its input (no gradient).

    Example:
        >>> import tensorflow as tf
        >>> critic = lambda x: tf.reduce_sum(x * [3.0, 4.0], axis=-1)  # gradient norm 5
        >>> float(gradient_penalty(critic, tf.ones([8, 2]), tf.zeros([8, 2])))
        16.0

    Taught in chapter 5, "Nested tapes: second derivatives and a gradient penalty".
    """
    require_tensorflow("companion.gradients.gradient_penalty", TAPE_INSTEAD)
    import tensorflow as tf

    check_callable(critic, "critic", "a callable scoring a batch")
    real = float_tensor(real, "real")
    fake = float_tensor(fake, "fake")
    seed = check_seed(seed, allow_none=True)
    if real.shape.rank == 0:
        raise ValueError("real: expected a tensor of rank >= 1 (batch first), got a scalar")
    if real.shape.rank is not None and real.shape[0] == 0:
        raise ValueError(f"real: expected at least one example, got shape {tuple(real.shape)}")
    if fake.dtype != real.dtype:
        raise TypeError(
            f"fake: expected dtype {real.dtype.name} (real's), got dtype {fake.dtype.name}"
        )
    if not fake.shape.is_compatible_with(real.shape):
        raise ValueError(
            f"fake: expected real's shape {tuple(real.shape)}, got shape {tuple(fake.shape)}"
        )
    batch = tf.shape(real)[0]
    weights = _mixing_weights(alpha, batch, real.dtype, seed)
    weights = tf.reshape(weights, tf.concat([[batch], tf.ones_like(tf.shape(real)[1:])], 0))
    x_hat = fake + weights * (real - fake)
    with tf.GradientTape() as tape:
        tape.watch(x_hat)
        scores = critic(x_hat)
    gradient = tape.gradient(scores, x_hat)
    if gradient is None:
        raise ValueError(
            "critic: expected a score that depends on its input, got no gradient"
            f" from {describe(critic)}"
        )
    # safe_norm, not tf.norm: where the critic is flat (a dead ReLU region) the gradient is
    # zero, and tf.norm's first derivative there, x / ||x||, is 0/0 (autodiff: sqrt's infinite
    # slope times 2x = 0), NaN; multiplied by the zero derivative of that flat gradient with
    # respect to the weights it is still NaN, and reaches every weight.
    norms = safe_norm(tf.reshape(gradient, [batch, -1]), axis=1)
    return tf.reduce_mean(tf.square(norms - 1))
