"""Custom gradients (custom-op path 4): ``tf.custom_gradient`` ops and a gradient checker.

Chapter 5 builds each of these inline first:

- ``clipped_identity``: clips in the forward pass, lets a small ``leak`` of the gradient
  through where it clipped (instead of ``tf.clip_by_value``'s zero);
- ``ClippedIdentity``: the same op as a serializable Keras layer;
- ``safe_norm`` and ``log1p_exp``: ops whose custom gradient fixes a numerical problem of
  plain autodiff (NaN at the zero vector; NaN for large inputs, wrong value at 0);
- ``gradient_error``: autodiff against central finite differences, to check any of them;
- ``value_and_gradient``: a function's values and pointwise derivatives, for tables and plots;
- ``gradient_penalty``: the WGAN-GP term, a gradient taken inside a tape (nested tapes), so
  that training can differentiate the gradient itself.

The pattern every op here follows: validate and convert the non-tensor parameters
outside, then decorate an inner function that takes only the tensor input(s), closes over
the parameters and returns exactly one gradient per tensor input.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from companion._checks import (
    check_callable,
    check_instance,
    check_int,
    check_real,
    check_seed,
    describe,
    dtype_max,
    float_tensor,
    is_real,
)

__all__ = [
    "CHECKABLE_DTYPES",
    "ClippedIdentity",
    "clipped_identity",
    "default_delta",
    "gradient_error",
    "gradient_penalty",
    "log1p_exp",
    "safe_norm",
    "value_and_gradient",
]

#: Input dtypes ``gradient_error`` accepts (finite differences need a float).
CHECKABLE_DTYPES = (tf.float16, tf.float32, tf.float64)


def _bound(value: Any, name: str, x: tf.Tensor) -> tf.Tensor:
    """A clip bound as a tensor of ``x``'s dtype: a number or a real tensor broadcasting to ``x``.

    Its values must be finite and held by ``x``'s dtype (``1e300`` is ``inf`` in float32); they
    are checked here when Python can see them (always, eagerly), at run time otherwise.
    """
    if is_real(value):
        check_real(value, name, dtype=x.dtype)
    elif not (tf.is_tensor(value) or isinstance(value, (np.ndarray, tf.Variable, keras.Variable))):
        raise TypeError(f"{name}: expected a finite number or a tensor, got {describe(value)}")
    # ``dtype_hint`` keeps a Python float at x's precision (plain ``tf.cast(0.1, tf.float64)``
    # goes via float32). A variable is read here, outside the custom-gradient op: read inside
    # it, TensorFlow would demand a ``variables`` keyword in ``grad``.
    bound = tf.convert_to_tensor(value, dtype_hint=x.dtype)
    if not (bound.dtype.is_floating or bound.dtype.is_integer):
        raise TypeError(
            f"{name}: expected a number or a real-valued tensor, got dtype {bound.dtype.name}"
        )
    try:
        shape = tf.broadcast_static_shape(x.shape, bound.shape)
    except ValueError:
        shape = None
    if shape is None or not shape.is_compatible_with(x.shape):
        raise ValueError(
            f"{name}: expected a number or a tensor broadcasting to x's shape {x.shape},"
            f" got shape {bound.shape}"
        )
    known = tf.get_static_value(bound)
    # NaN: False
    if known is not None and not np.all(np.abs(known.astype(np.float64)) <= dtype_max(x.dtype)):
        raise ValueError(
            f"{name}: expected finite values that {x.dtype.name} holds, got {describe(known)}"
        )
    return tf.cast(bound, x.dtype)


def _check_order(low: tf.Tensor, high: tf.Tensor, clip_min: Any, clip_max: Any) -> None:
    """``low < high`` element-wise: checked now if the values are known.

    Else by an op that runs first.
    """
    known_low, known_high = tf.get_static_value(low), tf.get_static_value(high)
    # (no repr here: on older Keras 3 releases a variable's repr reads its value)
    if known_low is None or known_high is None:
        tf.debugging.assert_less(
            low, high, message="clip_min: expected values below clip_max element-wise"
        )
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


def value_and_gradient(
    fn: Callable[[tf.Tensor], Any], x: Any
) -> tuple[np.ndarray, np.ndarray | None]:
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

    Example:
        >>> import tensorflow as tf
        >>> value, gradient = value_and_gradient(tf.square, [1.0, -2.0])
        >>> value.tolist(), gradient.tolist()
        ([1.0, 4.0], [2.0, -4.0])

    Taught in chapter 5, "Checking a gradient with finite differences".
    """
    check_callable(fn, "fn", "a callable taking one tensor")
    x = float_tensor(x, "x")
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    gradient = tape.gradient(y, x)
    return np.asarray(y), None if gradient is None else gradient.numpy()


def clipped_identity(
    x: Any, clip_min: Any = -1.0, clip_max: Any = 1.0, leak: float = 0.01
) -> tf.Tensor:
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
    leak = check_real(leak, "leak", minimum=0, dtype=x.dtype)

    @tf.custom_gradient
    def _clip(x: tf.Tensor) -> tuple[tf.Tensor, Callable[[tf.Tensor], tf.Tensor]]:
        def grad(upstream: tf.Tensor) -> tf.Tensor:
            inside = tf.logical_and(x >= low, x <= high)
            return tf.where(inside, upstream, leak * upstream)

        return tf.clip_by_value(x, low, high), grad

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
        >>> ClippedIdentity(0.0, 1.0)(x).numpy().tolist()
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

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return clipped_identity(inputs, self.clip_min, self.clip_max, self.leak)

    def compute_output_shape(self, input_shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"clip_min": self.clip_min, "clip_max": self.clip_max, "leak": self.leak})
        return config


def safe_norm(x: Any, axis: int = -1) -> tf.Tensor:
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
    rank = x.shape.rank
    if rank == 0:
        raise ValueError("x: expected a tensor of rank >= 1, got a scalar")
    if rank is not None and not -rank <= axis < rank:
        raise ValueError(
            f"axis: expected an int in [{-rank}, {rank}) for x of rank {rank}, got {describe(axis)}"
        )

    @tf.custom_gradient
    def _norm(x: tf.Tensor) -> tuple[tf.Tensor, Callable[[tf.Tensor], tf.Tensor]]:
        norm = tf.sqrt(tf.reduce_sum(tf.square(x), axis=axis, keepdims=True))

        def grad(upstream: tf.Tensor) -> tf.Tensor:
            # Where the norm is 0, x is 0 too, so dividing by 1 there gives the 0 subgradient.
            safe = tf.where(norm > 0, norm, tf.ones_like(norm))
            return tf.expand_dims(upstream, axis) * x / safe

        return tf.squeeze(norm, axis), grad

    return _norm(x)


def log1p_exp(x: Any) -> tf.Tensor:
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

    @tf.custom_gradient
    def _softplus(x: tf.Tensor) -> tuple[tf.Tensor, Callable[[tf.Tensor], tf.Tensor]]:
        def grad(upstream: tf.Tensor) -> tf.Tensor:
            return upstream * tf.sigmoid(x)

        return tf.maximum(x, 0) + tf.math.log1p(tf.exp(-tf.abs(x))), grad

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
    # tf.as_dtype(1) is float32
    check_instance(dtype, "dtype", (str, type, np.dtype, tf.DType), what)
    try:
        checked = tf.as_dtype(dtype)
    except TypeError:
        checked = None
    if checked not in CHECKABLE_DTYPES:
        raise TypeError(f"dtype: expected {what}, got {describe(dtype)}")
    eps = float(np.finfo(checked.as_numpy_dtype).eps)
    return 2.0 ** round(math.log2(eps ** (1 / 3)))


def _checkable_array(x: Any) -> tf.Tensor:
    """``x`` as a tensor of a dtype in ``CHECKABLE_DTYPES``.

    NumPy and Python floats stay float64.
    """
    what = "float16, float32 or float64 values"
    try:
        array = x if tf.is_tensor(x) else np.asarray(x)
        dtype = tf.as_dtype(array.dtype)
    except (TypeError, ValueError):  # no array (None, a dict, a ragged list) or text
        raise TypeError(f"x: expected {what}, got {describe(x)}") from None
    if dtype not in CHECKABLE_DTYPES:
        raise TypeError(f"x: expected {what}, got dtype {dtype.name}")
    return tf.convert_to_tensor(array, dtype)


def gradient_error(fn: Callable[[tf.Tensor], Any], x: Any, *, delta: float | None = None) -> float:
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


def _mixing_weights(alpha: Any, batch: tf.Tensor, dtype: tf.DType, seed: int | None) -> tf.Tensor:
    """``alpha`` as one weight per example, shape ``(batch,)``: drawn when ``None``."""
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
    critic: Callable[[tf.Tensor], Any],
    real: Any,
    fake: Any,
    alpha: Any = None,
    *,
    seed: int | None = None,
) -> tf.Tensor:
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
