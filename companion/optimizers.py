"""Custom optimizers on the Keras 3 API (chapter 9): AdamW written out, a warmup-then-cosine
learning-rate schedule, gradient transforms that chain in front of any optimizer, magnitude
pruning, a debug recorder of update norms, Lookahead.

Keras 3 optimizers are written with three methods: ``build(variables)`` creates the slot
variables (``add_optimizer_variables``), ``update_step(gradient, variable, learning_rate)``
changes one variable through ``self.assign*``, and ``get_config`` lists the hyperparameters.
``self.assign*`` are Keras's hooks for backend-specific updates: on TensorFlow they cast the value
to the variable's dtype and turn a sparse ``IndexedSlices`` gradient (an ``Embedding``'s) into a
scatter update of the rows it touches, where ``variable.assign_sub`` would densify it. They are not
what keeps ``tf.distribute`` replicas in sync: the base class all-reduces the gradients and runs
``update_step`` on every replica's copy, so a plain ``variable.assign*`` stays in sync too.

The wrappers here (:class:`TransformGradients`, :class:`Lookahead`) hold another optimizer and
override ``apply``, the one method that both ``model.fit`` and a custom loop
(``apply_gradients``) go through, as ``keras.optimizers.LossScaleOptimizer`` does. Every class is
registered serializable, so ``.keras`` files that use them load in any process that has imported
this module.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from companion._checks import (
    check_bool,
    check_choice,
    check_fraction,
    check_instance,
    check_int,
    check_real,
    check_seed,
    check_sequence,
    check_str,
    describe,
    is_real,
)

__all__ = [
    "AdamW",
    "ClipGlobalNorm",
    "GaussianNoise",
    "GradientTransform",
    "Lookahead",
    "MagnitudePruning",
    "TaskWeights",
    "TopK",
    "TransformGradients",
    "UpdateNormLogger",
    "WarmupCosine",
    "polynomial_sparsity",
    "sparsity",
]

register = keras.saving.register_keras_serializable(package="companion")

#: Substrings of variable *names* that AdamW does not decay by default: biases and normalization
#: parameters (``gamma``/``beta`` of Batch/LayerNormalization), as in the AdamW paper's practice.
#: They are matched against a variable's own name (``bias``), never its path (``beta_vae/dense/
#: kernel``), as ``exclude_from_weight_decay(var_names=...)`` does in Keras.
DEFAULT_EXCLUDE = ("bias", "norm", "gamma", "beta")


#: The largest value float32 holds: every hyperparameter here is used as a float32 tensor.
FLOAT32_MAX = float(np.finfo("float32").max)
#: float32's smallest normal number: a divisor below it is flushed to zero on most devices.
FLOAT32_TINY = float(np.finfo("float32").tiny)
#: The largest step count (Keras counts ``iterations`` in int64).
MAX_STEP = 2**63 - 1
#: The largest :class:`GaussianNoise` ``stddev``: its noise (|draw| < 8 standard deviations)
#: stays finite.
MAX_NOISE_STDDEV = FLOAT32_MAX / 8


def _path(variable: Any) -> str:
    """A Keras variable's path (``dense/kernel``), or a ``tf.Variable``'s name."""
    return getattr(variable, "path", None) or variable.name


def _own_name(variable: Any) -> str:
    """A variable's own name (``kernel``): a Keras variable's name, a tf.Variable's last part."""
    return variable.name.split("/")[-1].split(":")[0]


def _name_matches(variable: Any, words: Sequence[str]) -> bool:
    name = _own_name(variable)
    return any(word in name for word in words)


def _selects(variable: Any, words: Sequence[str]) -> bool:
    """A word with ``/`` is part of the variable's path; a word without, part of its own name."""
    return any(word in (_path(variable) if "/" in word else _own_name(variable)) for word in words)


def _check_words(words: Any, name: str, *, min_length: int = 0) -> tuple[str, ...]:
    """A list or tuple of non-empty strings (an empty one would match every variable)."""
    return check_sequence(
        words, name, "a list or tuple of non-empty str", item=check_str, min_length=min_length
    )


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


def _finite_learning_rate(learning_rate: tf.Tensor) -> tf.Tensor:
    """``learning_rate`` (cast to a variable's dtype) if finite; NaN or inf stops the step, clearly.

    Under XLA (where the check is compiled away) a non-finite rate is replaced by 0, so the
    step leaves the weights as they were instead of making them NaN.
    """
    lr = tf.debugging.check_numerics(
        learning_rate,
        "learning_rate: expected a finite number from the optimizer's learning rate or schedule, "
        "got NaN or inf; the step was not applied",
    )
    return tf.where(tf.math.is_finite(lr), lr, tf.zeros_like(lr))


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
            before any weight changes; under XLA, where that check is compiled away, the step
            leaves the weights unchanged instead.
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
        self.epsilon = check_real(epsilon, "epsilon", minimum=FLOAT32_TINY, dtype="float32")
        self.decay_rate = check_real(weight_decay, "weight_decay", minimum=0, dtype="float32")
        self.epsilon_placement = check_choice(
            epsilon_placement, "epsilon_placement", ("keras", "paper")
        )
        self.exclude_from_decay = _check_words(exclude_from_decay, "exclude_from_decay")

    def build(self, variables: list[Any]) -> None:
        """Create the moment slots; decide once, per variable, whether it is decayed."""
        if self.built:
            return
        super().build(variables)
        self._momentums, self._velocities = self.add_optimizer_variables(
            variables, ["momentum", "velocity"]
        )
        self._decayed = [
            self.decay_rate > 0
            and self._use_weight_decay(v)
            and not _name_matches(v, self.exclude_from_decay)
            for v in variables
        ]

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        """Decay ``variable``, then take one Adam step with ``gradient``."""
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


@register
class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup, then cosine decay, then constant: the schedule of most transformer recipes.

    With ``w = warmup_steps``, ``d = decay_steps``, ``t`` the optimizer's step and
    ``s = min(t, w + d)``::

        s < w:   lr = warmup_start + (base_lr - warmup_start) * (s / w)
        s >= w:  lr = base_lr * ((1 - alpha) * 0.5 * (1 + cos(pi * ((s - w) / d))) + alpha)

    so the rate climbs from ``warmup_start`` at step 0 to ``base_lr`` at step ``w``, falls along
    half a cosine to ``alpha * base_lr`` at step ``w + d`` and stays there. Every operation is
    done in float32 in the order ``keras.optimizers.schedules.CosineDecay(warmup_start,
    decay_steps, alpha=alpha, warmup_target=base_lr, warmup_steps=warmup_steps)`` does it, so
    the two agree bit for bit at every step; this class is that schedule with the formula in
    plain sight and its arguments checked.

    The optimizer calls it with its raw step counter: with ``gradient_accumulation_steps=k`` that
    counts micro-batches (``k`` per update), so give ``warmup_steps`` and ``decay_steps`` in
    micro-batches too.

    Args:
        base_lr: The peak rate, reached at the end of the warmup (>= 0, float32).
        warmup_steps: Steps of linear warmup (an int >= 0; 0 starts the decay at once).
        decay_steps: Steps of cosine decay after the warmup (an int >= 1).
        alpha: The final rate as a fraction of ``base_lr``, in [0, 1].
        warmup_start: The rate at step 0 (>= 0, float32).

    Raises:
        TypeError: If a rate or ``alpha`` is not a real number, or a step count not an int.
        ValueError: If a number is NaN, infinite or out of its range.

    Example:
        >>> schedule = WarmupCosine(1.0, warmup_steps=2, decay_steps=4, alpha=0.1)
        >>> [round(float(schedule(t)), 4) for t in range(8)]
        [0.0, 0.5, 1.0, 0.8682, 0.55, 0.2318, 0.1, 0.1]
    """

    def __init__(
        self,
        base_lr: float,
        warmup_steps: int,
        decay_steps: int,
        alpha: float = 0.0,
        warmup_start: float = 0.0,
    ) -> None:
        super().__init__()
        self.base_lr = check_real(base_lr, "base_lr", minimum=0, dtype="float32")
        self.warmup_steps = check_int(warmup_steps, "warmup_steps", minimum=0, maximum=MAX_STEP)
        self.decay_steps = check_int(decay_steps, "decay_steps", minimum=1, maximum=MAX_STEP)
        self.alpha = check_fraction(alpha, "alpha")
        self.warmup_start = check_real(warmup_start, "warmup_start", minimum=0, dtype="float32")

    def __call__(self, step: Any) -> Any:
        base_lr = ops.cast(self.base_lr, "float32")
        start = ops.cast(self.warmup_start, "float32")
        warmup = ops.cast(self.warmup_steps, "float32")
        decay = ops.cast(self.decay_steps, "float32")
        step = ops.minimum(ops.cast(step, "float32"), decay + warmup)

        def warming() -> Any:
            return (base_lr - start) * (step / warmup) + start

        def decaying() -> Any:
            pi = ops.array(math.pi, "float32")
            cosine = 0.5 * (1.0 + ops.cos(pi * ((step - warmup) / decay)))
            return base_lr * ((1 - self.alpha) * cosine + self.alpha)

        # A conditional, as in CosineDecay. With ops.where, inside a tf.function TensorFlow's
        # graph optimizer (its constant folding) regroups this arithmetic and the last bits change.
        return ops.cond(step < warmup, warming, decaying)

    def get_config(self) -> dict[str, Any]:
        return {
            "base_lr": self.base_lr,
            "warmup_steps": self.warmup_steps,
            "decay_steps": self.decay_steps,
            "alpha": self.alpha,
            "warmup_start": self.warmup_start,
        }


class GradientTransform:
    """One step of a gradient pipeline: ``transform(gradients, variables, step) -> gradients``.

    Subclasses implement ``__call__`` (lists in, a list of the same length out, ``None`` kept
    where a variable has no gradient) and ``get_config``; a transform with state creates its
    variables in ``build`` with ``optimizer.add_variable(..., aggregation="only_first_replica")``,
    so they are saved and restored with the optimizer and may be assigned on every replica.
    Under a ``tf.distribute`` strategy :class:`TransformGradients` hands transforms the
    gradients already summed over the replicas, so every replica computes the same thing.
    """

    def build(self, optimizer: keras.optimizers.Optimizer, variables: list[Any]) -> None:
        """Create state variables through ``optimizer`` (nothing by default)."""

    def __call__(self, gradients: list[Any], variables: list[Any], step: Any) -> list[Any]:
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> GradientTransform:
        return cls(**config)


@register
class ClipGlobalNorm(GradientTransform):
    """Scale all gradients by ``min(1, clip_norm / global_norm)``; ``norm`` is the last norm seen.

    Args:
        clip_norm: The largest global norm let through: a float32 number, at least float32's
            smallest normal number (``1.2e-38``; below it the clip would be flushed to zero).

    Raises:
        TypeError: If ``clip_norm`` is not a real number.
        ValueError: If it is NaN, infinite or outside float32's normal positive range.
    """

    def __init__(self, clip_norm: float) -> None:
        self.clip_norm = check_real(clip_norm, "clip_norm", minimum=FLOAT32_TINY, dtype="float32")

    def build(self, optimizer: keras.optimizers.Optimizer, variables: list[Any]) -> None:
        self.norm = optimizer.add_variable((), aggregation="only_first_replica", name="global_norm")

    def __call__(self, gradients: list[Any], variables: list[Any], step: Any) -> list[Any]:
        norm = tf.linalg.global_norm([tf.cast(g, tf.float32) for g in gradients if g is not None])
        self.norm.assign(tf.cast(norm, self.norm.dtype))
        # clip / max(norm, clip) is at most 1 for any float32 norm and clip (tf.clip_by_global_norm
        # multiplies by clip first, which overflows near float32's maximum); norm - norm makes a
        # non-finite norm give NaN gradients, as tf.clip_by_global_norm does, rather than zeros.
        scale = self.clip_norm / tf.maximum(norm, self.clip_norm) + (norm - norm)
        return [None if g is None else g * tf.cast(scale, g.dtype) for g in gradients]

    def get_config(self) -> dict[str, Any]:
        return {"clip_norm": self.clip_norm}


@register
class GaussianNoise(GradientTransform):
    """Add seeded Gaussian noise with a decaying standard deviation (Neelakantan et al., 2015).

    At optimizer step ``t`` the noise's standard deviation is ``stddev / (1 + t) ** (decay / 2)``
    (variance ``stddev**2 / (1 + t) ** decay``). The noise is a stateless function of ``seed``,
    ``t`` and the variable's position, so a run is reproducible, replicas agree, and training
    resumed from a checkpoint draws the noise the uninterrupted run would have drawn.

    Args:
        stddev: Standard deviation at step 0, in ``[0, MAX_NOISE_STDDEV]``: float32's largest
            value / 8, so that ``stddev * noise`` stays finite (a standard normal float32 draw is
            never beyond 6.7 in magnitude).
        decay: Exponent ``gamma`` of the variance's decay (>= 0; 0.55 in the paper).
        seed: An int seed in ``[0, 2**32 - 1]``.

    Raises:
        TypeError: If a number is not a real number, or ``seed`` not an int.
        ValueError: If a number is NaN, infinite or out of its range.
    """

    def __init__(self, stddev: float, decay: float = 0.55, seed: int = 0) -> None:
        self.stddev = check_real(stddev, "stddev", minimum=0, maximum=MAX_NOISE_STDDEV)
        self.decay = check_real(decay, "decay", minimum=0, dtype="float32")
        self.seed = check_seed(seed)

    def __call__(self, gradients: list[Any], variables: list[Any], step: Any) -> list[Any]:
        step = tf.cast(step, tf.int64)
        scale = self.stddev / tf.pow(1.0 + tf.cast(step, tf.float32), self.decay / 2)
        noisy = []
        for index, gradient in enumerate(gradients):
            if gradient is not None:
                gradient = tf.convert_to_tensor(gradient)
                seed = tf.stack([tf.constant(self.seed, tf.int64), step * len(gradients) + index])
                noise = tf.random.stateless_normal(
                    tf.shape(gradient), seed=seed, dtype=gradient.dtype
                )
                gradient = gradient + tf.cast(scale, gradient.dtype) * noise
            noisy.append(gradient)
        return noisy

    def get_config(self) -> dict[str, Any]:
        return {"stddev": self.stddev, "decay": self.decay, "seed": self.seed}


@register
class TopK(GradientTransform):
    """Keep the largest ``fraction`` of each gradient's entries by magnitude, zero the rest.

    ``kept`` holds the fraction of all gradient entries kept at the last step (ties at the
    threshold are kept, so it can exceed ``fraction`` slightly).

    Args:
        fraction: Fraction of entries to keep per variable, in (0, 1] (at least one is kept).
    """

    def __init__(self, fraction: float) -> None:
        self.fraction = check_fraction(fraction, "fraction", above_zero=True)

    def build(self, optimizer: keras.optimizers.Optimizer, variables: list[Any]) -> None:
        self.kept = optimizer.add_variable(
            (), initializer="ones", aggregation="only_first_replica", name="kept"
        )

    def __call__(self, gradients: list[Any], variables: list[Any], step: Any) -> list[Any]:
        sparse, kept, total = [], [], 0
        for gradient, variable in zip(gradients, variables):
            if gradient is not None:
                magnitude = tf.abs(tf.convert_to_tensor(gradient))
                size = math.prod(variable.shape)
                k = max(1, math.ceil(self.fraction * size))
                threshold = tf.math.top_k(tf.reshape(magnitude, [-1]), k).values[-1]
                mask = tf.cast(magnitude >= threshold, magnitude.dtype)
                gradient, total = gradient * mask, total + size
                kept.append(tf.reduce_sum(tf.cast(mask, tf.float32)))
            sparse.append(gradient)
        self.kept.assign(tf.cast(tf.add_n(kept) / total, self.kept.dtype))
        return sparse

    def get_config(self) -> dict[str, Any]:
        return {"fraction": self.fraction}


@register
class TaskWeights(GradientTransform):
    """Scale the gradients of each task's own variables (path contains the key) by its weight.

    For a multi-task model with one head per task, a head's variables receive gradients from
    its task's loss only, so this weights each task's updates of its head; variables matching
    no key (the shared trunk) keep their gradients. (To reweight the tasks' *shared* gradients,
    weight the losses: ``compile(loss_weights=...)``.)

    Args:
        weights: A mapping from a non-empty substring of variable paths (e.g. a head's layer
            name) to a factor (>= 0, float32). The first matching key wins.

    Raises:
        TypeError: If ``weights`` is not a mapping from str to real numbers.
        ValueError: If a key is empty (it would match every variable) or a factor out of range;
            when built, if a key matches none of the optimizer's variables.
    """

    def __init__(self, weights: Mapping[str, float]) -> None:
        what = "a mapping from non-empty str (part of variable paths) to a number >= 0"
        check_instance(weights, "weights", Mapping, what)
        self.weights = {
            check_str(key, "weights", what): check_real(
                value, f"weights[{key!r}]", minimum=0, dtype="float32"
            )
            for key, value in weights.items()
        }

    def build(self, optimizer: keras.optimizers.Optimizer, variables: list[Any]) -> None:
        unmatched = [key for key in self.weights if not any(key in _path(v) for v in variables)]
        if unmatched:
            raise ValueError(
                f"weights: expected keys found in variable paths, got {unmatched[0]!r}, "
                f"which matches none of {[_path(v) for v in variables][:6]}"
            )

    def __call__(self, gradients: list[Any], variables: list[Any], step: Any) -> list[Any]:
        return [g if g is None else g * self._factor(v) for g, v in zip(gradients, variables)]

    def _factor(self, variable: Any) -> float:
        return next((w for key, w in self.weights.items() if key in _path(variable)), 1.0)

    def get_config(self) -> dict[str, Any]:
        return {"weights": dict(self.weights)}


class _Wrapper(keras.optimizers.Optimizer):
    """An optimizer that holds another and overrides ``apply`` (the pattern of LossScaleOptimizer).

    The wrapped optimizer owns the learning rate and the step count; the wrapper's variables
    come first in ``variables``, then the wrapped optimizer's, so ``.keras`` files and
    checkpoints hold both.
    """

    def __init__(self, optimizer: keras.optimizers.Optimizer, name: str | None = None) -> None:
        check_instance(
            optimizer, "optimizer", keras.optimizers.Optimizer, "a keras.optimizers.Optimizer"
        )
        if name is not None:
            check_str(name, "name", "a non-empty str or None")
        super().__init__(learning_rate=0.0, name=name)
        self.inner_optimizer = optimizer

    def build(self, variables: list[Any]) -> None:
        if self.built:
            return
        # Outside any function being traced: without a strategy, model.fit builds the optimizer
        # while tracing its first step, and XLA (compile's default on a GPU) cannot lift out a
        # variable whose initial value reads another variable, as Lookahead's slow copies do.
        with tf.init_scope():
            self.inner_optimizer.build(variables)
            super().build(variables)
            self._build_own(list(variables))

    def _build_own(self, variables: list[Any]) -> None:
        """Create the wrapper's own variables."""

    def apply(self, grads: Any, trainable_variables: Any = None) -> None:
        variables = list(
            self._trainable_variables if trainable_variables is None else trainable_variables
        )
        if not self.built:
            self.build(variables)
        self._apply(list(grads), variables)

    def _apply(self, gradients: list[Any], variables: list[Any]) -> None:
        raise NotImplementedError

    @property
    def variables(self) -> list[Any]:
        return self._variables[:] + self.inner_optimizer.variables

    @property
    def learning_rate(self) -> Any:
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self.inner_optimizer.learning_rate = value

    @property
    def iterations(self) -> Any:
        return self.inner_optimizer.iterations

    def finalize_variable_values(self, var_list: list[Any]) -> None:
        self.inner_optimizer.finalize_variable_values(var_list)

    def scale_loss(self, loss: Any) -> Any:
        """Scale ``loss`` by the wrapped optimizer's ``loss_scale_factor``, which unscales.

        ``model.fit`` asks the optimizer it was given (the wrapper) to scale the loss; the
        wrapped optimizer divides the gradients by its own factor, so the two must agree.
        """
        return self.inner_optimizer.scale_loss(loss)

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "optimizer": keras.saving.serialize_keras_object(self.inner_optimizer),
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> _Wrapper:
        config = dict(config)
        optimizer = keras.saving.deserialize_keras_object(
            config.pop("optimizer"), custom_objects=custom_objects
        )
        return cls(optimizer, **config)


def _replicas() -> int:
    """How many replicas run this code in sync (1 outside ``strategy.run``, or with no strategy)."""
    context = tf.distribute.get_replica_context()
    return 1 if context is None else context.num_replicas_in_sync


@register
class TransformGradients(_Wrapper):
    """Run gradients through a chain of :class:`GradientTransform` s, then any Keras optimizer.

    Works wherever an optimizer does (``compile/fit``, ``companion.training.fit``, a hand-written
    ``apply_gradients``, inside ``tf.function``). Under a strategy with ``n`` replicas it first
    sums the gradients over the replicas (what the optimizer would apply), transforms that sum,
    and hands every replica ``1/n`` of the result, which the wrapped optimizer sums again: global
    clipping then clips the global gradient, not each replica's part (Keras's own ``clipnorm`` and
    ``global_clipnorm`` clip each replica's part before the sum: on two replicas an update of norm
    up to 2 instead of 1).

    With ``record_update_norms``, after each step ``update_norms()`` gives the Euclidean norm of
    every variable's change (``||w_new - w_old||``), kept in non-trainable optimizer variables, so
    recording works inside a compiled step; :class:`UpdateNormLogger` puts them into the logs.

    Args:
        optimizer: The Keras optimizer that applies the transformed gradients.
        transforms: Transforms applied in order.
        record_update_norms: Record each variable's update norm (debug mode).
        name: The optimizer's name.

    Example:
        >>> variable = keras.Variable([3.0, -4.0], name="w")
        >>> optimizer = TransformGradients(
        ...     keras.optimizers.SGD(1.0), [ClipGlobalNorm(1.0)], record_update_norms=True
        ... )
        >>> _ = optimizer.apply_gradients([(ops.array([30.0, -40.0]), variable)])
        >>> norm = optimizer.transforms[0].norm
        >>> [round(float(w), 4) for w in variable.numpy()], round(float(norm), 4)
        ([2.4, -3.2], 50.0)
        >>> {path: round(norm, 4) for path, norm in optimizer.update_norms().items()}
        {'w': 1.0}
    """

    def __init__(
        self,
        optimizer: keras.optimizers.Optimizer,
        transforms: Sequence[GradientTransform] = (),
        *,
        record_update_norms: bool = False,
        name: str | None = None,
    ) -> None:
        transforms = check_sequence(
            transforms,
            "transforms",
            "a list or tuple of GradientTransform",
            min_length=0,
            item=lambda transform, name: check_instance(
                transform, name, GradientTransform, "a GradientTransform"
            ),
        )
        record_update_norms = check_bool(record_update_norms, "record_update_norms")
        super().__init__(optimizer, name=name)
        self._transforms = transforms  # a tuple: the tracker leaves it alone
        self.record_update_norms = record_update_norms

    @property
    def transforms(self) -> tuple[GradientTransform, ...]:
        return self._transforms

    def _build_own(self, variables: list[Any]) -> None:
        for transform in self._transforms:
            transform.build(self, variables)
        self._norms = (
            [
                self.add_variable(
                    (),
                    aggregation="only_first_replica",
                    name=f"{_path(v).replace('/', '_')}_update_norm",
                )
                for v in variables
            ]
            if self.record_update_norms
            else []
        )

    def _apply(self, gradients: list[Any], variables: list[Any]) -> None:
        if self._transforms:
            # Transforms see the gradient of the loss itself: with the wrapped optimizer's
            # loss_scale_factor s, undo the scaling for them and redo it for the optimizer
            # (exact for a power of two).
            scale = self.inner_optimizer.loss_scale_factor
            if scale is not None:
                gradients = [g if g is None else g / scale for g in gradients]
            gradients = self._transform(gradients, variables)
            if scale is not None:
                gradients = [g if g is None else g * scale for g in gradients]
        before = [tf.identity(v.value) for v in variables] if self.record_update_norms else []
        self.inner_optimizer.apply(gradients, variables)
        for old, variable in zip(before, variables):
            norm = tf.norm(tf.cast(variable.value, tf.float32) - tf.cast(old, tf.float32))
            self._norms[self._get_variable_index(variable)].assign(norm)

    def _transform(self, gradients: list[Any], variables: list[Any]) -> list[Any]:
        replicas = _replicas()
        present = [i for i, g in enumerate(gradients) if g is not None]
        if replicas > 1:
            summed = tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, [tf.convert_to_tensor(gradients[i]) for i in present]
            )
            gradients = list(gradients)
            for i, g in zip(present, summed):
                gradients[i] = g
        step = self.iterations
        for transform in self._transforms:
            gradients = transform(gradients, variables, step)
        return gradients if replicas == 1 else [g if g is None else g / replicas for g in gradients]

    def update_norms(self) -> dict[str, float]:
        """The last step's update norm of each variable by path (without ``record_update_norms``:
        empty)."""
        return {_path(v): float(n.numpy()) for v, n in zip(self._trainable_variables, self._norms)}

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "record_update_norms": self.record_update_norms,
            "transforms": [keras.saving.serialize_keras_object(t) for t in self._transforms],
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> TransformGradients:
        config = dict(config)
        config["transforms"] = [
            keras.saving.deserialize_keras_object(t, custom_objects=custom_objects)
            for t in config.get("transforms", [])
        ]
        return super().from_config(config, custom_objects)


def _copy_of(variable: Any) -> Any:
    """An initializer returning ``variable``'s value when the new variable is initialized."""
    return lambda shape, dtype=None: ops.cast(
        ops.convert_to_tensor(variable), dtype or variable.dtype
    )


@register
class Lookahead(_Wrapper):
    """Lookahead (Zhang et al., 2019) around any Keras optimizer: fast weights, slow weights.

    The wrapped ("fast") optimizer steps as usual; every ``sync_period`` steps the slow copy
    moves ``slow_step_size`` of the way towards the fast weights, ``slow += a * (fast - slow)``,
    and the fast weights restart from it. The slow weights are optimizer variables: saved in
    ``.keras`` files and checkpoints, and restored with them.

    Args:
        optimizer: The fast optimizer.
        sync_period: Steps between synchronizations (``k``, >= 1).
        slow_step_size: ``alpha``, in (0, 1].
        name: The optimizer's name.

    Example:
        >>> variable = keras.Variable([0.0])
        >>> inner = keras.optimizers.SGD(1.0)
        >>> optimizer = Lookahead(inner, sync_period=2, slow_step_size=0.5)
        >>> for _ in range(2):
        ...     _ = optimizer.apply_gradients([(ops.array([-1.0]), variable)])
        >>> float(variable.numpy()[0])  # the fast weights reached 2.0, then went halfway
        1.0
    """

    def __init__(
        self,
        optimizer: keras.optimizers.Optimizer,
        sync_period: int = 5,
        slow_step_size: float = 0.5,
        name: str | None = None,
    ) -> None:
        super().__init__(optimizer, name=name)
        self.sync_period = check_int(sync_period, "sync_period", minimum=1, maximum=MAX_STEP)
        self.slow_step_size = check_fraction(slow_step_size, "slow_step_size", above_zero=True)

    def _build_own(self, variables: list[Any]) -> None:
        # An initializer, not an assign after creation: Keras may create the variables lazily
        # (model.fit builds the optimizer in a scope that initializes them later), which would
        # overwrite an assigned value with the initializer's.
        self._slow = [
            self.add_variable_from_reference(v, name="slow", initializer=_copy_of(v))
            for v in variables
        ]

    def _apply(self, gradients: list[Any], variables: list[Any]) -> None:
        self.inner_optimizer.apply(gradients, variables)
        tf.__internal__.distribute.interim.maybe_merge_call(
            self._sync, tf.distribute.get_strategy(), variables
        )

    def _sync(self, strategy: tf.distribute.Strategy, variables: list[Any]) -> None:
        """In cross-replica context (``merge_call``): every ``k`` steps, move the slow weights and
        reset the fast ones."""
        alpha = self.slow_step_size

        def synchronize() -> tf.Tensor:
            for fast in variables:
                slow = self._slow[self._get_variable_index(fast)].value
                strategy.extended.update(
                    slow,
                    lambda s, f: s.assign_add(alpha * (f - s)),
                    args=(fast.value,),
                    group=False,
                )
                strategy.extended.update(
                    fast.value, lambda f, s: f.assign(s), args=(slow,), group=False
                )
            return tf.constant(True)

        tf.cond(
            tf.equal(self.iterations % self.sync_period, 0), synchronize, lambda: tf.constant(False)
        )

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "sync_period": self.sync_period,
            "slow_step_size": self.slow_step_size,
        }


class UpdateNormLogger(keras.callbacks.Callback):
    """Add a recording optimizer's update norms to each epoch's logs (for History and TensorBoard).

    Put it before ``keras.callbacks.TensorBoard`` in the callback list: TensorBoard then writes
    every ``update_norm/<variable path>`` entry as a scalar.

    Args:
        optimizer: A :class:`TransformGradients` made with ``record_update_norms=True``.

    Raises:
        TypeError: If ``optimizer`` is not a :class:`TransformGradients`.
        ValueError: If it does not record update norms.
    """

    def __init__(self, optimizer: TransformGradients) -> None:
        super().__init__()
        what = "a TransformGradients with record_update_norms=True"
        check_instance(optimizer, "optimizer", TransformGradients, what)
        if not optimizer.record_update_norms:
            raise ValueError(f"optimizer: expected {what}, got one with record_update_norms=False")
        self.recorder = optimizer

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if logs is not None:
            logs.update(
                {f"update_norm/{path}": norm for path, norm in self.recorder.update_norms().items()}
            )


def polynomial_sparsity(
    step: Any,
    *,
    target_sparsity: float,
    begin_step: int,
    end_step: int,
    initial_sparsity: float = 0.0,
    power: float = 3.0,
) -> Any:
    """The sparsity schedule of Zhu & Gupta (2017): fast at first, levelling off at the target.

    ``s(t) = target + (initial - target) * (1 - (t - begin) / (end - begin)) ** power`` for
    ``begin <= t <= end``; ``initial`` before, ``target`` after.

    Args:
        step: The step ``t``: an int >= 0, or an integer tensor or variable (an optimizer's
            ``iterations``, inside ``tf.function`` too), which gives a float32 tensor.
        target_sparsity: The sparsity reached at ``end_step``, in [0, 1).
        begin_step: The step the schedule starts rising (>= 0).
        end_step: The step it reaches the target (> ``begin_step``).
        initial_sparsity: The sparsity up to ``begin_step``, in [0, 1).
        power: The exponent (> 0; 3 in the paper).

    Returns:
        The sparsity at ``step``: a float, or a float32 tensor for a tensor ``step``.

    Raises:
        TypeError: If an argument is not a number (an int for the steps).
        ValueError: If a number is NaN, infinite or out of its range.

    Example:
        >>> schedule = dict(target_sparsity=0.8, begin_step=0, end_step=10)
        >>> [round(polynomial_sparsity(t, **schedule), 3) for t in (0, 5, 10, 20)]
        [0.0, 0.7, 0.8, 0.8]
    """
    target = check_fraction(target_sparsity, "target_sparsity", below_one=True)
    initial = check_fraction(initial_sparsity, "initial_sparsity", below_one=True)
    begin = check_int(begin_step, "begin_step", minimum=0, maximum=MAX_STEP - 1)
    span = check_int(end_step, "end_step", minimum=begin + 1, maximum=MAX_STEP) - begin
    power = check_real(power, "power", above=0, maximum=FLOAT32_MAX)
    if ops.is_tensor(step):
        progress = ops.clip((ops.cast(step, "float32") - begin) / span, 0.0, 1.0)
    else:
        progress = min(
            max((check_int(step, "step", minimum=0, maximum=MAX_STEP) - begin) / span, 0.0), 1.0
        )
    return target + (initial - target) * (1.0 - progress) ** power


def _weights_array(value: Any, name: str) -> np.ndarray:
    """``value`` (an array, tensor or variable) as a NumPy array of numbers or bools."""
    what = "an array, tensor or variable of numbers"
    try:
        array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    except ValueError as error:  # a ragged nested list
        raise TypeError(f"{name}: expected {what}, got {describe(value)}") from error
    if array.dtype.kind not in "biuf":  # str, bytes, None, a dict
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    return array


def sparsity(variables: Any) -> float:
    """The fraction of exact zeros in ``variables``.

    Args:
        variables: A layer or model (its kernels: the weights whose own name contains
            ``kernel``), one array, tensor or variable, or a list or tuple of them.

    Raises:
        TypeError: If ``variables`` is none of these (a str, a dict, ``None`` inside a list).
        ValueError: If it holds no weights at all (an empty list, a model without kernels).

    Example:
        >>> sparsity([np.array([0.0, 1.0]), keras.Variable([[0.0, 2.0], [3.0, 0.0]])])
        0.5
    """
    what = "a layer, model, array or variable, or a list or tuple of them, with at least one weight"
    if isinstance(variables, keras.layers.Layer):
        arrays = [
            _weights_array(v, "variables") for v in variables.weights if _selects(v, ("kernel",))
        ]
    elif isinstance(variables, np.ndarray) or ops.is_tensor(
        variables
    ):  # Keras and TF variables too
        arrays = [_weights_array(variables, "variables")]
    else:
        arrays = check_sequence(variables, "variables", what, item=_weights_array)
    size = sum(array.size for array in arrays)
    if size == 0:
        raise ValueError(f"variables: expected {what}, got {describe(variables)}")
    return float(sum(np.count_nonzero(array == 0) for array in arrays) / size)


class MagnitudePruning(keras.callbacks.Callback):
    """Progressive magnitude pruning under ``fit``: a schedule, a mask, weights multiplied by it.

    Every ``frequency`` training batches from ``begin_step`` to ``end_step`` the mask of each
    pruned variable is recomputed: the ``s(t)`` fraction (:func:`polynomial_sparsity`) of its
    entries with the smallest magnitudes are masked, exactly ``round(s * size)`` of them. After
    *every* batch the weights are multiplied by the mask, so pruned weights are exactly zero
    and stay zero although the optimizer's momentum would move them (masking the *update*
    instead, as the article does, freezes small weights at non-zero values). Since the schedule
    only rises and zeros have the smallest magnitude, a pruned weight is never revived.

    ``step`` counts the batches this callback has seen; call ``on_train_batch_end`` yourself
    (after ``set_model``) to prune in a custom loop.

    Args:
        target_sparsity: Final fraction of zeros per variable, in [0, 1).
        begin_step: First batch at which to prune (>= 0).
        end_step: Batch at which the target is reached (> begin_step).
        frequency: Batches between mask updates (>= 1).
        include: Which variables to prune: a word without ``/`` is part of a variable's own name
            (the default ``kernel`` selects ``kernel``, ``recurrent_kernel``, ... and never the
            bias of a layer named ``kernel_net``); a word with ``/`` is part of its path
            (``dense_1/kernel``).

    Raises:
        TypeError: If an argument has the wrong type (``include`` a str instead of a list).
        ValueError: If ``target_sparsity`` is outside [0, 1), the steps are out of order or a
            word of ``include`` is empty; at the start of training, if no variable matches
            ``include``.

    Example:
        >>> keras.utils.set_random_seed(0)
        >>> model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
        >>> model.compile("adam", "mse")
        >>> x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
        >>> pruning = MagnitudePruning(0.75, begin_step=0, end_step=4, frequency=2)
        >>> _ = model.fit(x, x[:, :4], batch_size=8, verbose=0, callbacks=[pruning])
        >>> sparsity(model)
        0.75
    """

    def __init__(
        self,
        target_sparsity: float,
        *,
        begin_step: int = 0,
        end_step: int = 1000,
        frequency: int = 100,
        include: Sequence[str] = ("kernel",),
    ) -> None:
        super().__init__()
        self.target_sparsity = check_fraction(target_sparsity, "target_sparsity", below_one=True)
        self.begin_step = check_int(begin_step, "begin_step", minimum=0, maximum=MAX_STEP - 1)
        self.end_step = check_int(
            end_step, "end_step", minimum=self.begin_step + 1, maximum=MAX_STEP
        )
        self.frequency = check_int(frequency, "frequency", minimum=1)
        self.include = _check_words(include, "include", min_length=1)
        self.step, self.masks = 0, {}

    def on_train_begin(self, logs: Any = None) -> None:
        self.pruned = [v for v in self.model.trainable_weights if _selects(v, self.include)]
        if not self.pruned:
            raise ValueError(
                f"include: expected parts of the names or paths of the model's variables,"
                f" got {describe(self.include)}"
            )
        self._apply_masks()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if not hasattr(self, "pruned"):
            self.on_train_begin()
        self.step += 1
        due = self.begin_step <= self.step <= self.end_step and (
            (self.step - self.begin_step) % self.frequency == 0 or self.step == self.end_step
        )
        if due:
            self._update_masks(
                polynomial_sparsity(
                    self.step,
                    target_sparsity=self.target_sparsity,
                    begin_step=self.begin_step,
                    end_step=self.end_step,
                )
            )
        self._apply_masks()

    def _update_masks(self, level: float) -> None:
        for variable in self.pruned:
            magnitude = np.abs(variable.numpy()).ravel()
            mask = np.ones(magnitude.size, variable.dtype)
            mask[np.argsort(magnitude, kind="stable")[: round(level * magnitude.size)]] = 0
            self.masks[_path(variable)] = tf.constant(mask.reshape(variable.shape))

    def _apply_masks(self) -> None:
        for variable in self.pruned:
            if _path(variable) in self.masks:
                variable.assign(variable * self.masks[_path(variable)])
