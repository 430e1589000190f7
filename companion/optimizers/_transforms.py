"""Gradient transforms: steps of a gradient pipeline that run before any optimizer.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
from keras import ops

from companion._checks import (
    check_fraction,
    check_instance,
    check_real,
    check_seed,
    check_str,
    dtype_max,
    dtype_tiny,
)
from companion._clipping import clip_by_global_norm
from companion.optimizers._shared import register, replicas_in_sync, variable_path

#: The largest :class:`GaussianNoise` ``stddev``: its noise (|draw| < 8 standard deviations)
#: stays finite.
MAX_NOISE_STDDEV = dtype_max("float32") / 8


class GradientTransform:
    """One step of a gradient pipeline: ``transform(gradients, variables, step) -> gradients``.

    Subclasses implement ``__call__`` (lists in, a list of the same length out, ``None`` kept
    where a variable has no gradient) and ``get_config``; a transform with state creates its
    variables in ``build`` with ``optimizer.add_variable(..., aggregation="only_first_replica")``,
    so they are saved and restored with the optimizer and may be assigned on every replica.
    Under a ``tf.distribute`` strategy :class:`TransformGradients` hands transforms the
    gradients already summed over the replicas, so every replica computes the same thing.

    Taught in chapter 9, "Changing gradients without writing an optimizer".
    """

    def build(self, optimizer: keras.optimizers.Optimizer, variables: list[Any]) -> None:
        """Create state variables through ``optimizer`` (nothing by default).

        Taught in chapter 9, "Changing gradients without writing an optimizer".
        """

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

    The clipping is :func:`companion.training.clip_by_global_norm`, the companion's one global-norm
    clipper: ``tf.clip_by_global_norm``'s rule (Keras's ``global_clipnorm`` too), a non-finite
    norm giving NaN gradients. :class:`TransformGradients` hands every replica the gradients
    already summed over the ``n`` replicas, so the clipper's own sum over the replicas holds ``n``
    copies of them: it divides that norm by ``n`` as by a loss scale.

    Args:
        clip_norm: The largest global norm let through: a float32 number, at least float32's
            smallest normal number (``1.2e-38``; below it the clip would be flushed to zero).

    Raises:
        TypeError: If ``clip_norm`` is not a real number.
        ValueError: If it is NaN, infinite or outside float32's normal positive range.

    Taught in chapter 9, "Changing gradients without writing an optimizer".
    """

    def __init__(self, clip_norm: float) -> None:
        self.clip_norm = check_real(
            clip_norm, "clip_norm", minimum=dtype_tiny("float32"), dtype="float32"
        )

    def build(self, optimizer: keras.optimizers.Optimizer, variables: list[Any]) -> None:
        self.norm = optimizer.add_variable((), aggregation="only_first_replica", name="global_norm")

    def __call__(self, gradients: list[Any], variables: list[Any], step: Any) -> list[Any]:
        squares = [ops.sum(ops.square(ops.cast(g, "float32"))) for g in gradients if g is not None]
        self.norm.assign(ops.cast(ops.sqrt(sum(squares[1:], squares[0])), self.norm.dtype))
        return clip_by_global_norm(gradients, self.clip_norm, loss_scale=replicas_in_sync())

    def get_config(self) -> dict[str, Any]:
        return {"clip_norm": self.clip_norm}


def _normal_tf(shape: tuple, seed: int, counter: Any, dtype: str) -> Any:
    import tensorflow as tf

    pair = tf.stack([tf.constant(seed, tf.int64), counter])
    return tf.random.stateless_normal(shape, seed=pair, dtype=dtype)


def _normal_jax(shape: tuple, seed: int, counter: Any, dtype: str) -> Any:
    import jax

    return jax.random.normal(jax.random.fold_in(jax.random.key(seed), counter), shape, dtype)


def _normal_torch(shape: tuple, seed: int, counter: Any, dtype: str) -> Any:
    # PyTorch runs eagerly: the counter is a number here. (torch.Generator keeps only 32 bits
    # of its seed, so seeds and counters are mixed by NumPy's SeedSequence instead.)
    rng = np.random.default_rng([seed, int(counter)])
    return ops.convert_to_tensor(rng.standard_normal(tuple(shape)), dtype)


#: A standard normal draw that is a function of (seed, counter) alone, on each backend (the three
#: draw different numbers from the same pair). The counter is an int64 tensor on TensorFlow, an
#: int32 one on JAX (its default integer width) and a number on PyTorch.
_STATELESS_NORMAL = {"tensorflow": _normal_tf, "jax": _normal_jax, "torch": _normal_torch}
_COUNTER_DTYPE = {"tensorflow": "int64", "jax": "int32", "torch": "int64"}


@register
class GaussianNoise(GradientTransform):
    """Add seeded Gaussian noise with a decaying standard deviation (Neelakantan et al., 2015).

    At optimizer step ``t`` the noise's standard deviation is ``stddev / (1 + t) ** (decay / 2)``
    (variance ``stddev**2 / (1 + t) ** decay``). The noise is a stateless function of ``seed``,
    ``t`` and the variable's position, so a run is reproducible, replicas agree, and training
    resumed from a checkpoint draws the noise the uninterrupted run would have drawn. Each
    backend draws it with its own generator (TensorFlow's ``stateless_normal``, JAX's
    ``fold_in``, NumPy's generator on PyTorch), so the same seed gives different noise on each.

    Args:
        stddev: Standard deviation at step 0, in ``[0, MAX_NOISE_STDDEV]``: float32's largest
            value / 8, so that ``stddev * noise`` stays finite (a standard normal float32 draw is
            never beyond 6.7 in magnitude).
        decay: Exponent ``gamma`` of the variance's decay (>= 0; 0.55 in the paper).
        seed: An int seed in ``[0, 2**32 - 1]``.

    Raises:
        TypeError: If a number is not a real number, or ``seed`` not an int.
        ValueError: If a number is NaN, infinite or out of its range.

    Taught in chapter 9, "Chaining transforms and recording update norms".
    """

    def __init__(self, stddev: float, decay: float = 0.55, seed: int = 0) -> None:
        self.stddev = check_real(stddev, "stddev", minimum=0, maximum=MAX_NOISE_STDDEV)
        self.decay = check_real(decay, "decay", minimum=0, dtype="float32")
        self.seed = check_seed(seed)

    def __call__(self, gradients: list[Any], variables: list[Any], step: Any) -> list[Any]:
        scale = self.stddev / ops.power(1.0 + ops.cast(step, "float32"), self.decay / 2)
        backend = keras.backend.backend()
        draw = _STATELESS_NORMAL[backend]
        noisy = []
        for index, gradient in enumerate(gradients):
            if gradient is not None:
                gradient = ops.convert_to_tensor(gradient)
                counter = ops.cast(step, _COUNTER_DTYPE[backend]) * len(gradients) + index
                noise = draw(ops.shape(gradient), self.seed, counter, ops.dtype(gradient))
                gradient = gradient + ops.cast(scale, ops.dtype(gradient)) * noise
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

    Taught in chapter 9, "Chaining transforms and recording update norms".
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
                magnitude = ops.abs(ops.convert_to_tensor(gradient))
                size = math.prod(variable.shape)
                k = max(1, math.ceil(self.fraction * size))
                threshold = ops.top_k(ops.reshape(magnitude, (-1,)), k)[0][-1]
                mask = ops.cast(magnitude >= threshold, magnitude.dtype)
                gradient, total = gradient * mask, total + size
                kept.append(ops.sum(ops.cast(mask, "float32")))
            sparse.append(gradient)
        self.kept.assign(ops.cast(sum(kept[1:], kept[0]) / total, self.kept.dtype))
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

    Taught in chapter 9, "Chaining transforms and recording update norms".
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
        unmatched = [
            key for key in self.weights if not any(key in variable_path(v) for v in variables)
        ]
        if unmatched:
            raise ValueError(
                f"weights: expected keys found in variable paths, got {unmatched[0]!r}, "
                f"which matches none of {[variable_path(v) for v in variables][:6]}"
            )

    def __call__(self, gradients: list[Any], variables: list[Any], step: Any) -> list[Any]:
        return [g if g is None else g * self._factor(v) for g, v in zip(gradients, variables)]

    def _factor(self, variable: Any) -> float:
        return next((w for key, w in self.weights.items() if key in variable_path(variable)), 1.0)

    def get_config(self) -> dict[str, Any]:
        return {"weights": dict(self.weights)}
