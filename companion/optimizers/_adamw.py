"""AdamW written out on the Keras 3 optimizer API, and the learning-rate checks it makes.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from companion._checks import (
    check_choice,
    check_fraction,
    check_real,
    describe,
    dtype_tiny,
    is_real,
)
from companion.optimizers._shared import check_words, name_matches, register

#: Substrings of variable *names* that AdamW does not decay by default: biases and normalization
#: parameters (``gamma``/``beta`` of Batch/LayerNormalization), as in the AdamW paper's practice.
#: They are matched against a variable's own name (``bias``), never its path (``beta_vae/dense/
#: kernel``), as ``exclude_from_weight_decay(var_names=...)`` does in Keras.
DEFAULT_EXCLUDE = ("bias", "norm", "gamma", "beta")


def _check_learning_rate(value: Any) -> Any:
    """A schedule or callable as is; a number >= 0 that float32 holds (Keras keeps it in a float32
    variable)."""
    if isinstance(value, keras.optimizers.schedules.LearningRateSchedule) or callable(value):
        return value
    if not is_real(value):
        raise TypeError(
            f"learning_rate: expected a number, a LearningRateSchedule or a callable,"
            f" got {describe(value)}"
        )
    return check_real(value, "learning_rate", minimum=0, dtype="float32")


def _finite_learning_rate(learning_rate: Any) -> Any:
    """``learning_rate`` (cast to a variable's dtype) if finite; NaN or inf stops the step, clearly.

    On TensorFlow ``tf.debugging.check_numerics`` raises naming the learning rate. Where no such
    check can run (under XLA, where it is compiled away; in JAX's traced step; on PyTorch, for
    the same code on every backend) a non-finite rate is replaced by 0, so the step leaves the
    weights as they were instead of making them NaN.
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        learning_rate = tf.debugging.check_numerics(
            learning_rate,
            "learning_rate: expected a finite number from the optimizer's learning rate or "
            "schedule, got NaN or inf; the step was not applied",
        )
    return ops.where(ops.isfinite(learning_rate), learning_rate, ops.zeros_like(learning_rate))


@register
class AdamW(keras.optimizers.Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter), written on the Keras 3 API.

    Each step first decays a variable, ``w -= lr * weight_decay * w`` (unless its own name, such
    as ``bias``, contains one of ``exclude_from_decay``), then takes the Adam step
    ``w -= alpha * m / (sqrt(v) + eps)`` with
    ``alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)``: the same operations in the same order
    as ``keras.optimizers.AdamW``, so with the same variables excluded the trajectories agree to
    float rounding. ``epsilon_placement="paper"`` adds epsilon to the bias-corrected
    ``sqrt(v_hat)`` instead (Algorithm 1 of Kingma & Ba, PyTorch's form): the same as Keras's
    form with epsilon scaled by ``sqrt(1 - beta_2**t)``, so it differs in early steps.

    The decay is done here, not by the base class: ``weight_decay`` is *not* passed to
    ``super().__init__`` (that would decay twice), so the base attribute ``weight_decay`` stays
    None and the rate is ``decay_rate``. ``exclude_from_weight_decay`` of the base class still
    works, before the optimizer is built (``var_list=`` excludes given variables, for instance a
    whole layer's). Which variables are decayed is decided once, in ``build``.

    ``exclude_from_decay`` is matched against each variable's own name (``kernel``, ``bias``,
    ``gamma``), not its path: a layer or model named ``beta_vae``, ``normalizing_flow`` or
    ``unbiased_head`` still has its kernels decayed, as with Keras's ``exclude_from_weight_decay``.

    Args:
        learning_rate: A number >= 0 that float32 holds, a
            ``keras.optimizers.schedules.LearningRateSchedule`` or a callable. A rate that is NaN
            or infinite at some step (a schedule gone wrong, ``optimizer.learning_rate = nan``)
            stops that step with ``tf.errors.InvalidArgumentError`` naming ``learning_rate``,
            before any weight changes; under XLA, where that check is compiled away, and on JAX
            and PyTorch, the step leaves the weights unchanged instead.
        beta_1: Decay rate of the first-moment average, in [0, 1).
        beta_2: Decay rate of the second-moment average, in [0, 1).
        epsilon: Added to the denominator (> 0: at least float32's smallest normal number, so
            that a zero gradient never divides 0 by 0).
        weight_decay: Decoupled decay rate (>= 0, float32), multiplied by the learning rate.
        epsilon_placement: ``"keras"`` (epsilon-hat, as Keras and TensorFlow) or ``"paper"``.
        exclude_from_decay: Substrings of variable names (``"bias"``; not paths) not to decay.
        **kwargs: Base-optimizer arguments (``name``, ``global_clipnorm``, ``use_ema``, ...).

    Raises:
        TypeError: If a number is not a real number (``learning_rate`` neither a schedule nor a
            callable), or ``exclude_from_decay`` not a list or tuple of strings.
        ValueError: If a number is NaN, infinite or beyond float32, ``learning_rate`` or
            ``weight_decay`` negative, ``beta_1``/``beta_2`` outside [0, 1), ``epsilon`` not
            positive, a word of ``exclude_from_decay`` empty, or ``epsilon_placement`` unknown.

    Example:
        >>> variable = keras.Variable([1.0, 2.0, 3.0, 4.0])
        >>> gradient = ops.array([1.0, 6.0, 7.0, 2.0])
        >>> _ = AdamW(learning_rate=0.5).apply_gradients([(gradient, variable)])
        >>> [round(float(w), 4) for w in variable.numpy()]   # Keras's own test values
        [0.498, 1.496, 2.494, 3.492]

    Taught in chapter 9, "Adam, written out".
    """

    def __init__(
        self,
        learning_rate: Any = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        weight_decay: float = 0.004,
        *,
        epsilon_placement: str = "keras",
        exclude_from_decay: Sequence[str] = DEFAULT_EXCLUDE,
        **kwargs: Any,
    ) -> None:
        super().__init__(learning_rate=_check_learning_rate(learning_rate), **kwargs)
        self.beta_1 = check_fraction(beta_1, "beta_1", below_one=True)
        self.beta_2 = check_fraction(beta_2, "beta_2", below_one=True)
        self.epsilon = check_real(
            epsilon, "epsilon", minimum=dtype_tiny("float32"), dtype="float32"
        )
        self.decay_rate = check_real(weight_decay, "weight_decay", minimum=0, dtype="float32")
        self.epsilon_placement = check_choice(
            epsilon_placement, "epsilon_placement", ("keras", "paper")
        )
        self.exclude_from_decay = check_words(exclude_from_decay, "exclude_from_decay")

    def build(self, variables: list[Any]) -> None:
        """Create the moment slots; decide once, per variable, whether it is decayed.

        Taught in chapter 9, "The Keras 3 optimizer class, step by step".
        """
        if self.built:
            return
        super().build(variables)
        self._momentums, self._velocities = self.add_optimizer_variables(
            variables, ["momentum", "velocity"]
        )
        self._decayed = [
            self.decay_rate > 0
            and self._use_weight_decay(v)
            and not name_matches(v, self.exclude_from_decay)
            for v in variables
        ]

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        """Decay ``variable``, then take one Adam step with ``gradient``.

        Taught in chapter 9, "The Keras 3 optimizer class, step by step".
        """
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        lr = _finite_learning_rate(ops.cast(learning_rate, dtype))
        gradient = ops.cast(gradient, dtype)
        step = ops.cast(self.iterations + 1, dtype)
        beta_1_power = ops.power(ops.cast(self.beta_1, dtype), step)
        beta_2_power = ops.power(ops.cast(self.beta_2, dtype), step)
        m, v = self._momentums[index], self._velocities[index]
        if self._decayed[index]:
            self.assign_sub(variable, variable * ops.cast(self.decay_rate, dtype) * lr)
        alpha = lr * ops.sqrt(1 - beta_2_power) / (1 - beta_1_power)
        self.assign_add(
            m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1)
        )  # 1 - beta in Python
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        epsilon = (
            self.epsilon
            if self.epsilon_placement == "keras"
            else self.epsilon * ops.sqrt(1 - beta_2_power)
        )
        self.assign_sub(variable, ops.divide(ops.multiply(m, alpha), ops.add(ops.sqrt(v), epsilon)))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            beta_1=self.beta_1,
            beta_2=self.beta_2,
            epsilon=self.epsilon,
            weight_decay=self.decay_rate,
            epsilon_placement=self.epsilon_placement,
            exclude_from_decay=list(self.exclude_from_decay),
        )
        return config
