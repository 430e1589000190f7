"""Custom ops built by composing TensorFlow ops (custom-op path 1, chapter 2).

Every function here is a few lines of ordinary ops, written with ``keras.ops`` (on TensorFlow
each is the ``tf`` op of the same name): autodiff, ``tf.function`` and XLA work with no extra
code, and so do ``jax.jit`` and torch's autograd. What takes care is numerical stability: each
op is written so that it stays finite at extreme inputs (``x = ±1000`` in float32 and float64)
and so that its *gradient* stays finite too, which needs the "double ``tf.where``" trick
wherever a branch would overflow.

    >>> import keras
    >>> from companion.ops import swish, softplus, mish, logsumexp, masked_mean
    >>> x = keras.ops.convert_to_tensor([-1000.0, 0.0, 1000.0])
    >>> [round(float(v), 4) for v in keras.ops.convert_to_numpy(softplus(x))]
    [0.0, 0.6931, 1000.0]

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from companion._checks import (
    check_bool,
    check_int,
    check_real,
    check_sequence,
    describe,
    float_tensor,
    is_int,
    is_real,
)
from companion._finite import has_nonfinite

Axis = int | Sequence[int] | None


def _check_axis(axis: Axis, rank: int | None) -> Axis:
    """Check a reduction axis (None, an int or a non-empty list of distinct ints) for ``rank``."""
    what = "None, an int or a non-empty list of distinct ints"
    if axis is None:
        return None
    axes = [axis] if is_int(axis) else check_sequence(axis, "axis", what, item=check_int)
    if rank is not None and any(not -rank <= a < rank for a in axes):
        raise ValueError(
            f"axis: expected values in [{-rank}, {rank}) for a rank-{rank} input, "
            f"got {describe(axis)}"
        )
    distinct = {a % rank for a in axes} if rank else set(axes)
    if len(distinct) != len(axes):
        raise ValueError(f"axis: expected {what}, got {describe(axis)}")
    return int(axis) if is_int(axis) else [int(a) for a in axes]


def _axes(axis: Axis) -> int | tuple[int, ...] | None:
    """A checked axis as every backend's reductions take it (a tuple, not a list)."""
    return tuple(axis) if isinstance(axis, list) else axis


def _rank(x: Any) -> int | None:
    """The rank of ``x``, or None where it is unknown (a ``tf.function`` input without a shape)."""
    try:
        return len(x.shape)
    except (TypeError, ValueError):
        return None


def _static_shape(x: Any) -> tuple[int | None, ...] | None:
    """``x``'s shape as a tuple (None for an unknown size), or None for an unknown rank."""
    return None if _rank(x) is None else tuple(x.shape)


def _bool_tensor(mask: Any, like: Any) -> Any:
    """``mask`` as a boolean tensor broadcastable to ``like`` without raising its rank."""
    what = f"a boolean tensor broadcastable to x's shape {_static_shape(like)}"
    try:
        mask = ops.convert_to_tensor(mask)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(f"mask: expected {what}, got {describe(mask)}") from error
    dtype = keras.backend.standardize_dtype(mask.dtype)
    if dtype != "bool":
        raise TypeError(f"mask: expected {what} (use e.g. mask > 0), got dtype {dtype}")
    shape, like_shape = _static_shape(mask), _static_shape(like)
    if shape is None or like_shape is None:
        return mask  # checked when the values come (a tf.function with unknown ranks)
    if len(shape) > len(like_shape):
        raise ValueError(
            f"mask: expected {what} (at most rank {len(like_shape)}), got shape {shape}"
        )
    known = [
        (m, x) for m, x in zip(shape[::-1], like_shape[::-1]) if m is not None and x is not None
    ]
    if any(m != x and 1 not in (m, x) for m, x in known):
        raise ValueError(f"mask: expected {what}, got shape {shape}")
    return mask


def _is_tensor_like(value: Any) -> bool:
    """A tensor or variable of the running backend, or a ``keras.Variable`` (``add_weight``)."""
    return ops.is_tensor(value) or isinstance(value, keras.Variable)


def _known_now(value: Any) -> bool:
    """True when ``value`` holds numbers now: not a symbol inside ``tf.function`` or ``jax.jit``."""
    if keras.backend.backend() == "jax":
        import jax

        return not isinstance(value, jax.core.Tracer)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.executing_eagerly()
    return True


def swish(x: Any, beta: Any = 1.0) -> Any:
    """Swish activation ``x * sigmoid(beta * x)`` (Ramachandran et al., 2017).

    With ``beta=1`` this is SiLU and equals ``tf.nn.silu`` bit for bit. ``beta`` may be a
    ``tf.Variable`` or a Keras weight (``keras.Variable``, what ``add_weight`` returns), which
    makes it trainable: the gradient reaches it like any other weight.

    Args:
        x: Floating-point tensor (or array/list convertible to one).
        beta: A finite real number, or a floating-point scalar tensor or variable.

    Returns:
        A tensor with the shape and dtype of ``x``.

    Raises:
        TypeError: If ``x`` is not floating point, or ``beta`` is not a real number
            or a floating-point scalar tensor (``bool`` is rejected).
        ValueError: If ``beta`` is a non-finite number or a tensor of rank > 0.

    Example:
        >>> import keras
        >>> x = keras.ops.convert_to_tensor([-2.0, 0.0, 2.0])
        >>> bool(keras.ops.all(swish(x) == x * keras.ops.sigmoid(x)))
        True

    Taught in chapter 2, "Swish from two ops".
    """
    x = float_tensor(x, "x")
    if is_real(beta):
        beta = check_real(beta, "beta")
    elif _is_tensor_like(beta):
        beta = ops.convert_to_tensor(beta)  # reads a tf.Variable or keras.Variable: gradients flow
        dtype = keras.backend.standardize_dtype(beta.dtype)
        if not keras.backend.is_float_dtype(dtype):
            raise TypeError(f"beta: expected a floating-point scalar tensor, got dtype {dtype}")
        if _rank(beta) not in (None, 0):
            raise ValueError(f"beta: expected a scalar (rank 0), got shape {_static_shape(beta)}")
        if _known_now(beta) and has_nonfinite(beta):  # a value known now (eager)
            raise ValueError(f"beta: expected a finite scalar tensor, got {describe(beta)}")
        beta = ops.cast(beta, x.dtype)
    else:
        raise TypeError(
            f"beta: expected a finite number or a float scalar tensor, got {describe(beta)}"
        )
    return x * ops.sigmoid(beta * x)


def softplus(x: Any) -> Any:
    """Numerically stable softplus ``log(1 + exp(x))``, with a correct gradient everywhere.

    Computed as ``x + log1p(exp(-x))`` for ``x > 0`` and ``log1p(exp(x))`` otherwise, so
    ``exp`` never overflows. Each branch only ever sees inputs that are safe for it (the
    double ``tf.where`` trick), so the gradient ``sigmoid(x)`` is finite at ``x = ±1000``
    and 0.5 at ``x = 0`` (the textbook ``relu(x) + log1p(exp(-|x|))`` gives 0 there).
    :func:`companion.gradients.log1p_exp` is the same function with a hand-written
    gradient (path 4, chapter 5).

    Args:
        x: Floating-point tensor.

    Returns:
        A tensor with the shape and dtype of ``x``; equals ``tf.nn.softplus(x)``.

    Raises:
        TypeError: If ``x`` is not floating point.

    Example:
        >>> import keras
        >>> x = keras.ops.convert_to_tensor([-20.0, 0.0, 1000.0])
        >>> [round(float(v), 4) for v in keras.ops.convert_to_numpy(softplus(x))]
        [0.0, 0.6931, 1000.0]

    Taught in chapter 2, "When composing overflows: softplus".
    """
    x = float_tensor(x, "x")
    positive = x > 0
    x_pos = ops.where(positive, x, ops.zeros_like(x))  # the positive branch sees only x > 0
    x_neg = ops.where(positive, ops.zeros_like(x), x)  # the other branch sees only x <= 0
    return ops.where(positive, x_pos + ops.log1p(ops.exp(-x_pos)), ops.log1p(ops.exp(x_neg)))


def mish(x: Any) -> Any:
    """Mish activation ``x * tanh(softplus(x))`` (Misra, 2019), on the stable :func:`softplus`.

    Args:
        x: Floating-point tensor.

    Returns:
        A tensor with the shape and dtype of ``x``; equals ``keras.activations.mish(x)``.

    Raises:
        TypeError: If ``x`` is not floating point.

    Example:
        >>> round(float(mish(1.0)), 4)
        0.8651

    Taught in chapter 2, "Mish: composing composed ops".
    """
    x = float_tensor(x, "x")
    return x * ops.tanh(softplus(x))


def logsumexp(x: Any, axis: Axis = None, keepdims: bool = False) -> Any:
    """Numerically stable ``log(sum(exp(x), axis))``, the max-shift way.

    Subtracts the maximum ``m`` before exponentiating: ``m + log(sum(exp(x - m)))``. The
    shift is wrapped in ``tf.stop_gradient`` (it cancels out mathematically), so the
    gradient is exactly ``softmax(x)``. Slices that are all ``-inf`` give ``-inf``, as in
    ``tf.reduce_logsumexp``.

    Args:
        x: Floating-point tensor.
        axis: Axis or axes to reduce; ``None`` reduces all of them.
        keepdims: Keep reduced axes with length 1.

    Returns:
        The reduced tensor, same dtype as ``x``; equals ``tf.reduce_logsumexp``.

    Raises:
        TypeError: If ``x`` is not floating point, ``axis`` is not None/int/ints or
            ``keepdims`` is not a bool.
        ValueError: If an axis is out of range for the rank of ``x``, or ``axis`` is an empty
            list or names an axis twice.

    Example:
        >>> round(float(logsumexp([1000.0, 1000.0])), 2)
        1000.69

    Taught in chapter 2, "logsumexp: the max-shift trick".
    """
    x = float_tensor(x, "x")
    axis = _axes(_check_axis(axis, _rank(x)))
    keepdims = check_bool(keepdims, "keepdims")
    shift = ops.stop_gradient(ops.max(x, axis=axis, keepdims=True))
    shift = ops.where(ops.isfinite(shift), shift, ops.zeros_like(shift))  # all -inf slices
    total = ops.log(ops.sum(ops.exp(x - shift), axis=axis, keepdims=True)) + shift
    return total if keepdims else ops.squeeze(total, axis=axis)


def masked_mean(x: Any, mask: Any, axis: Axis = None, keepdims: bool = False) -> Any:
    """Mean of the entries of ``x`` where ``mask`` is True, along ``axis``.

    Masked-out entries never reach the arithmetic (``tf.where``, not ``x * mask``), so a
    NaN or inf in padding cannot leak into the result or the gradient. A slice with no
    selected entries has mean 0 (``tf.math.divide_no_nan``), not NaN.

    Args:
        x: Floating-point tensor.
        mask: Boolean tensor broadcastable to the shape of ``x``.
        axis: Axis or axes to average over; ``None`` averages over all of them.
        keepdims: Keep reduced axes with length 1.

    Returns:
        The reduced tensor, same dtype as ``x``.

    Raises:
        TypeError: If ``x`` is not floating point, ``mask`` is not boolean, ``axis`` is not
            None/int/ints or ``keepdims`` is not a bool.
        ValueError: If ``mask`` does not broadcast to the shape of ``x``, or ``axis`` is out of
            range, empty or names an axis twice.

    Example:
        >>> import keras
        >>> x = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
        >>> mask = [[True, True, False], [False, False, False]]
        >>> keras.ops.convert_to_numpy(masked_mean(x, mask, axis=1)).tolist()
        [1.5, 0.0]

    Taught in chapter 2, "masked_mean: `tf.where`, not multiply".
    """
    x = float_tensor(x, "x")
    mask = _bool_tensor(mask, x)
    axis = _axes(_check_axis(axis, _rank(x)))
    keepdims = check_bool(keepdims, "keepdims")
    mask = ops.broadcast_to(mask, ops.shape(x))
    total = ops.sum(ops.where(mask, x, ops.zeros_like(x)), axis=axis, keepdims=keepdims)
    count = ops.sum(ops.cast(mask, x.dtype), axis=axis, keepdims=keepdims)
    return ops.divide_no_nan(total, count)
