"""Learning-rate schedules: linear warmup, then cosine decay.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from companion._checks import (
    check_fraction,
    check_int,
    check_real,
)
from companion.optimizers._shared import MAX_STEP, register


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

    Taught in chapter 9, "Learning-rate schedules".
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
