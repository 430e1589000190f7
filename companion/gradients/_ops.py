"""The custom-gradient ops of ``companion.gradients``, written with ``keras.ops.custom_gradient``.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
from keras import ops

from companion._checks import (
    check_instance,
    check_int,
    check_real,
    describe,
    dtype_max,
    float_tensor,
    is_real,
)

#: Input dtypes ``gradient_error`` accepts (finite differences need a float), as Keras names them.
CHECKABLE_DTYPES = ("float16", "float32", "float64")


def _upstream(args: tuple, upstream: Any) -> Any:
    """The upstream gradient, however the backend passed it to ``grad`` (see the module doc)."""
    return args[-1] if upstream is None else upstream


def _static_value(tensor: Any) -> np.ndarray | None:
    """``tensor``'s values when Python can see them now; None inside ``tf.function``/``jax.jit``."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.get_static_value(tensor)
    if backend == "jax":
        import jax

        if isinstance(tensor, jax.core.Tracer):
            return None
    return ops.convert_to_numpy(tensor)


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    """True if a tensor of ``shape`` broadcasts to ``target`` without changing it (None: any)."""
    if len(shape) > len(target):
        return False
    pairs = zip(shape[::-1], target[::-1])
    return all(s is None or t is None or s in (1, t) for s, t in pairs)


def _bound(value: Any, name: str, x: Any) -> Any:
    """A clip bound as a tensor of ``x``'s dtype: a number or a real tensor broadcasting to ``x``.

    Its values must be finite and held by ``x``'s dtype (``1e300`` is ``inf`` in float32); they
    are checked here when Python can see them (always, eagerly), at run time otherwise.
    """
    dtype = keras.backend.standardize_dtype(x.dtype)
    if is_real(value):
        check_real(value, name, dtype=dtype)
    elif not (ops.is_tensor(value) or isinstance(value, (np.ndarray, keras.Variable))):
        raise TypeError(f"{name}: expected a finite number or a tensor, got {describe(value)}")
    # A Python number goes straight to x's precision (plain float32 first would round 0.1). A
    # variable is read here, outside the custom-gradient op: read inside it, TensorFlow would
    # demand a ``variables`` keyword in ``grad``.
    bound = ops.convert_to_tensor(value, dtype=dtype if is_real(value) else None)
    bound_dtype = keras.backend.standardize_dtype(bound.dtype)
    if not (keras.backend.is_float_dtype(bound_dtype) or keras.backend.is_int_dtype(bound_dtype)):
        raise TypeError(
            f"{name}: expected a number or a real-valued tensor, got dtype {bound_dtype}"
        )
    if not _broadcasts_to(tuple(bound.shape), tuple(x.shape)):
        raise ValueError(
            f"{name}: expected a number or a tensor broadcasting to x's shape {_shape(x)},"
            f" got shape {_shape(bound)}"
        )
    known = _static_value(bound)
    # NaN: False
    if known is not None and not np.all(np.abs(known.astype(np.float64)) <= dtype_max(dtype)):
        raise ValueError(
            f"{name}: expected finite values that {dtype} holds, got {describe(known)}"
        )
    if hasattr(bound, "assign"):  # a variable (TensorFlow's convert_to_tensor keeps it): read it
        bound = ops.copy(bound)
    return ops.cast(bound, dtype)


def _shape(x: Any) -> Any:
    """``x.shape`` as TensorFlow prints it (``(3,)`` elsewhere), for error messages."""
    return x.shape if keras.backend.backend() == "tensorflow" else tuple(x.shape)


def _check_order(low: Any, high: Any, clip_min: Any, clip_max: Any) -> None:
    """``low < high`` element-wise: checked now if the values are known.

    Else by an op that runs first.
    """
    known_low, known_high = _static_value(low), _static_value(high)
    # (no repr here: on older Keras 3 releases a variable's repr reads its value)
    if (known_low is None or known_high is None) and keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        tf.debugging.assert_less(
            low, high, message="clip_min: expected values below clip_max element-wise"
        )
    elif known_low is None or known_high is None:
        return  # inside jax.jit: no value to check, and no op that can raise
    elif not np.all(known_low < known_high):
        raise _order_error(np.all(known_low < 1.0), clip_min, clip_max)


def _order_error(min_is_plausible: Any, clip_min: Any, clip_max: Any) -> ValueError:
    """The error for ``clip_min >= clip_max``, naming the bound that is out of place: with a
    ``clip_min`` below the default ``clip_max`` (1), the fault is ``clip_max``'s."""
    if min_is_plausible:
        return ValueError(
            f"clip_max: expected values above clip_min ({describe(clip_min)}) element-wise, "
            f"got {describe(clip_max)}"
        )
    return ValueError(
        f"clip_min: expected values below clip_max ({describe(clip_max)}) element-wise, "
        f"got {describe(clip_min)}"
    )


def clipped_identity(x: Any, clip_min: Any = -1.0, clip_max: Any = 1.0, leak: float = 0.01) -> Any:
    """Clip ``x`` to ``[clip_min, clip_max]``; in the backward pass leak gradient where it clipped.

    Forward: exactly ``tf.clip_by_value(x, clip_min, clip_max)``. Backward: the upstream
    gradient unchanged where ``clip_min <= x <= clip_max`` and ``leak * upstream`` outside.
    At exactly a bound the gradient is the upstream one (factor 1), as for
    ``tf.clip_by_value``, so ``leak=0`` reproduces the built-in's gradient everywhere. The
    bounds are constants of the op: a ``tf.Variable`` or Keras weight as a bound is read
    once, outside the custom-gradient op, and gets no gradient (``None`` whenever ``x`` is
    on the tape, as in any model); chapter 5 shows how to give a variable bound a gradient.
    Works eagerly and inside ``tf.function``.

    Args:
        x: Floating-point tensor (or array, or nested list of floats).
        clip_min: Lower bound: a number or a real tensor (array, variable) that broadcasts to
            ``x``'s shape, with finite values that ``x``'s dtype holds.
        clip_max: Upper bound, the same way; above ``clip_min`` element-wise.
        leak: Non-negative factor for the gradient outside the range (0 = ``tf.clip_by_value``),
            held by ``x``'s dtype.

    Returns:
        The clipped tensor, same shape and dtype as ``x``.

    Raises:
        TypeError: If ``x`` is not floating point, a bound is not a number or real tensor, or
            ``leak`` is not a number.
        ValueError: If a bound does not broadcast to ``x``, holds NaN, inf or a value ``x``'s
            dtype cannot hold, ``clip_min >= clip_max`` somewhere, or ``leak`` is negative or too
            large. Inside a ``tf.function`` a bound whose values are only known at run time is
            checked then (``tf.errors.InvalidArgumentError``; XLA skips that check).

    Example:
        >>> import tensorflow as tf
        >>> x = tf.constant([-2.0, 0.5, 2.0])
        >>> with tf.GradientTape() as tape:
        ...     tape.watch(x)
        ...     y = clipped_identity(x, leak=0.25)
        >>> y.numpy().tolist(), tape.gradient(y, x).numpy().tolist()
        ([-1.0, 0.5, 1.0], [0.25, 1.0, 0.25])

    Taught in chapter 5, "How `tf.custom_gradient` works".
    """
    x = float_tensor(x, "x")
    low, high = _bound(clip_min, "clip_min", x), _bound(clip_max, "clip_max", x)
    _check_order(low, high, clip_min, clip_max)
    leak = check_real(leak, "leak", minimum=0, dtype=keras.backend.standardize_dtype(x.dtype))

    @ops.custom_gradient
    def _clip(x: Any) -> tuple[Any, Callable[..., Any]]:
        def grad(*args: Any, upstream: Any = None) -> Any:
            upstream = _upstream(args, upstream)
            inside = ops.logical_and(x >= low, x <= high)
            return ops.where(inside, upstream, leak * upstream)

        return ops.clip(x, low, high), grad

    return _clip(x)


@keras.saving.register_keras_serializable(package="companion")
class ClippedIdentity(keras.layers.Layer):
    """Keras layer around ``clipped_identity``: clips forward, leaks gradient backward.

    A "straight-through-like" clip: units pushed outside ``[clip_min, clip_max]`` still
    receive ``leak`` times their gradient, so they can come back (with a plain clip they
    get exactly zero and stay stuck).

    Args:
        clip_min: Lower bound (a number the layer's compute dtype holds).
        clip_max: Upper bound (a number), greater than ``clip_min``.
        leak: Non-negative gradient factor outside the range.
        **kwargs: Passed to ``keras.layers.Layer`` (``name``, ``dtype``, ...).

    Raises:
        TypeError, ValueError: As ``clipped_identity`` for the three parameters, checked against
            the compute dtype (float16 under ``mixed_float16``: at most 65504), and at call time
            for the inputs (named ``inputs``).

    Example:
        >>> import numpy as np
        >>> x = np.array([[-1.0, 0.5, 3.0]], "float32")
        >>> keras.ops.convert_to_numpy(ClippedIdentity(0.0, 1.0)(x)).tolist()
        [[0.0, 0.5, 1.0]]

    Taught in chapter 5, "A custom-gradient op inside a Keras model".
    """

    def __init__(
        self, clip_min: float = -1.0, clip_max: float = 1.0, leak: float = 0.01, **kwargs: Any
    ):
        super().__init__(**kwargs)
        self.clip_min = check_real(clip_min, "clip_min", dtype=self.compute_dtype)
        self.clip_max = check_real(clip_max, "clip_max", dtype=self.compute_dtype)
        if not self.clip_min < self.clip_max:
            raise _order_error(self.clip_min < 1.0, clip_min, clip_max)
        self.leak = check_real(leak, "leak", minimum=0, dtype=self.compute_dtype)

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """Check ``inputs`` before Keras converts them (its errors would not name them)."""
        if not isinstance(inputs, keras.KerasTensor):
            inputs = float_tensor(inputs, "inputs")
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs: Any) -> Any:
        return clipped_identity(inputs, self.clip_min, self.clip_max, self.leak)

    def compute_output_shape(self, input_shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"clip_min": self.clip_min, "clip_max": self.clip_max, "leak": self.leak})
        return config


def safe_norm(x: Any, axis: int = -1) -> Any:
    """Euclidean norm along ``axis`` whose gradient is finite at the zero vector.

    ``tf.norm`` is ``sqrt(sum(x**2))``; autodiff multiplies ``1 / (2 sqrt(0)) = inf`` by
    ``2x = 0`` at the zero vector and returns NaN, which then poisons every weight it
    reaches. Here the gradient is ``x / ||x||`` where the norm is positive and 0 where it
    is zero (the minimum-norm subgradient). The forward value equals ``tf.norm``.

    Args:
        x: Floating-point tensor of rank >= 1.
        axis: The axis to reduce (negative counts from the end).

    Returns:
        The norms, with ``axis`` removed from the shape.

    Raises:
        TypeError: If ``x`` is not floating point or ``axis`` is not an int.
        ValueError: If ``x`` is a scalar or ``axis`` is out of range for its rank.

    Example:
        >>> import tensorflow as tf
        >>> x = tf.zeros([1, 3])
        >>> with tf.GradientTape() as tape:
        ...     tape.watch(x)
        ...     n = safe_norm(x)
        >>> tape.gradient(n, x).numpy().tolist()
        [[0.0, 0.0, 0.0]]

    Taught in chapter 5, "A custom gradient that fixes a NaN: the norm at zero".
    """
    x = float_tensor(x, "x")
    axis = check_int(axis, "axis")
    try:
        rank = len(x.shape)
    except (TypeError, ValueError):  # a tf.function input of unknown rank
        rank = None
    if rank == 0:
        raise ValueError("x: expected a tensor of rank >= 1, got a scalar")
    if rank is not None and not -rank <= axis < rank:
        raise ValueError(
            f"axis: expected an int in [{-rank}, {rank}) for x of rank {rank}, got {describe(axis)}"
        )

    @ops.custom_gradient
    def _norm(x: Any) -> tuple[Any, Callable[..., Any]]:
        norm = ops.sqrt(ops.sum(ops.square(x), axis=axis, keepdims=True))

        def grad(*args: Any, upstream: Any = None) -> Any:
            # Where the norm is 0, x is 0 too, so dividing by 1 there gives the 0 subgradient.
            safe = ops.where(norm > 0, norm, ops.ones_like(norm))
            return ops.expand_dims(_upstream(args, upstream), axis) * x / safe

        return ops.squeeze(norm, axis), grad

    return _norm(x)


def log1p_exp(x: Any) -> Any:
    """Softplus ``log(1 + exp(x))``, stable forward and exact gradient ``sigmoid(x)``.

    The naive formula overflows: in float32 ``exp(x)`` is inf for x above about 88, the value
    becomes inf and autodiff's gradient ``exp(x) / (1 + exp(x))`` becomes ``inf / inf = NaN``.
    The stable rewrite ``max(x, 0) + log1p(exp(-|x|))`` fixes the value, but autodiff through
    ``max`` and ``abs`` returns 1 at ``x = 0`` instead of 0.5. The custom gradient returns
    ``sigmoid(x)`` everywhere. Values equal ``tf.nn.softplus``.

    :func:`companion.ops.softplus` is the same function reached by path 1 (composing ops
    with a double ``tf.where``, chapter 2); this path-4 version states the gradient
    instead, so its backward pass is a single ``sigmoid``.

    Args:
        x: Floating-point tensor.

    Returns:
        ``log(1 + exp(x))``, same shape and dtype as ``x``.

    Raises:
        TypeError: If ``x`` is not floating point.

    Example:
        >>> import tensorflow as tf
        >>> x = tf.constant([0.0, 100.0])
        >>> with tf.GradientTape() as tape:
        ...     tape.watch(x)
        ...     y = log1p_exp(x)
        >>> y.numpy().tolist(), tape.gradient(y, x).numpy().tolist()
        ([0.6931471824645996, 100.0], [0.5, 1.0])

    Taught in chapter 5, "Softplus: overflow, and a kink autodiff gets wrong".
    """
    x = float_tensor(x, "x")

    @ops.custom_gradient
    def _softplus(x: Any) -> tuple[Any, Callable[..., Any]]:
        def grad(*args: Any, upstream: Any = None) -> Any:
            return ops.multiply(_upstream(args, upstream), ops.sigmoid(x))

        return ops.maximum(x, 0.0) + ops.log1p(ops.exp(-ops.abs(x))), grad

    return _softplus(x)


def default_delta(dtype: Any) -> float:
    """Finite-difference step for ``dtype``: the power of two nearest ``eps ** (1/3)``.

    For central differences the truncation error grows like ``delta**2`` and the rounding
    error like ``eps / delta``; their sum is smallest near ``eps ** (1/3)``. A power of two
    keeps ``x + delta`` free of an extra rounding of ``delta``. This gives ``2**-17``
    (about 7.6e-6) for float64, ``2**-8`` for float32 and ``2**-3`` for float16.

    Args:
        dtype: One of ``CHECKABLE_DTYPES`` (or its NumPy/string equivalent).

    Returns:
        The step as a Python float.

    Raises:
        TypeError: If ``dtype`` is not float16, float32 or float64.

    Example:
        >>> default_delta("float64") == 2.0 ** -17
        True

    Taught in chapter 5, "Checking a gradient with finite differences".
    """
    what = "float16, float32 or float64 (a name, NumPy or TensorFlow dtype)"
    # a number is no dtype (tf.as_dtype(1) would be float32)
    if not hasattr(dtype, "as_numpy_dtype"):  # a TensorFlow DType, whatever the backend
        check_instance(dtype, "dtype", (str, type, np.dtype), what)
    try:
        checked = keras.backend.standardize_dtype(dtype)
    except (TypeError, ValueError):
        checked = None
    if checked not in CHECKABLE_DTYPES:
        raise TypeError(f"dtype: expected {what}, got {describe(dtype)}")
    eps = float(np.finfo(checked).eps)
    return 2.0 ** round(math.log2(eps ** (1 / 3)))
