"""What stops ``fit``: :class:`NonFiniteError`, and the cause of a bad training step read back
from the device once it was."""

from __future__ import annotations

import math

import keras

from companion._checks import check_choice, check_instance, check_int, describe, is_real
from companion._finite import has_nonfinite


class NonFiniteError(FloatingPointError):
    """``fit`` stopped: a loss, a gradient, the learning rate or the weights were NaN or infinite.

    ``cause`` says which, and the message says what the model holds:

    - ``"loss"``, ``"gradients"``, ``"learning_rate"``: a training step's loss, one of its gradients
      or the optimizer's learning rate (e.g. from a schedule) was not finite. The step's gradients
      were not applied, nor those of any later step: the model keeps the weights from before it.
    - ``"weights"``: the step applied its update and a weight came out NaN or infinite (e.g. an
      optimizer setting that overflows): training stopped after that step, with those weights.
    - ``"val_loss"``: the loss on ``validation_data`` was not finite (NaN or inf in its inputs or
      targets, or in the model's output on them): training stopped after the epoch's training.

    A finite loss with non-finite gradients happens, e.g., when a NaN input reaches a ``Dense``
    layer with a ReLU in compiled code: TensorFlow's graph optimizer runs such a layer as one fused
    MatMul+BiasAdd+ReLU kernel, which outputs 0 where a separate ReLU would pass the NaN on, so
    the forward pass and the loss stay finite while the layer's kernel gradient (its input times
    the upstream gradient) is NaN. With a ``keras.optimizers.LossScaleOptimizer`` non-finite
    (scaled) gradients do not stop training: they are its business (it skips the step and lowers
    its loss scale).

    Attributes:
        epoch: The epoch of the bad step (counted from 1).
        step: The step within that epoch (counted from 1; a validation step for ``"val_loss"``).
        loss: The step's loss (``nan`` or ``inf``, or a finite value when only something else
            was not).
        history: The history of the epochs completed before this one.
        cause: One of :attr:`CAUSES`.

    Taught in chapter 7, "A NaN stops training, and keeps the last good weights".
    """

    #: What can stop training, each with what the message says about it and about the weights.
    CAUSES = {
        "loss": (
            "loss is {loss}",
            "training stopped before applying that step's gradients, so the model keeps the "
            "weights from before it",
        ),
        "gradients": (
            "gradients are not finite (loss {loss:.4g})",
            "training stopped before applying that step's "
            "gradients, so the model keeps the weights from before it",
        ),
        "learning_rate": (
            "the learning rate is not finite (loss {loss:.4g})",
            "training stopped before applying "
            "that step's gradients, so the model keeps the weights from before it",
        ),
        "weights": (
            "weights are not finite after the update (loss {loss:.4g})",
            "the optimizer's step made them so (check its learning rate and settings); training "
            "stopped after that step, so the model holds those non-finite weights",
        ),
        "val_loss": (
            "val_loss is {loss} on validation_data",
            "check validation_data for NaN or infinite values; "
            "training stopped after that epoch's training, whose weights the model keeps",
        ),
    }

    def __init__(
        self,
        epoch: int,
        step: int,
        loss: float,
        history: dict[str, list[float]],
        cause: str | None = None,
    ) -> None:
        epoch, step = check_int(epoch, "epoch", minimum=1), check_int(step, "step", minimum=1)
        if not is_real(loss):
            raise TypeError(f"loss: expected a number (NaN and inf too), got {describe(loss)}")
        loss = float(loss)
        what = "a dict from names to lists of floats"
        history = check_instance(history, "history", dict, what)
        if not all(
            isinstance(key, str) and isinstance(values, list) for key, values in history.items()
        ):
            raise TypeError(f"history: expected {what}, got {describe(history)}")
        if cause is None:
            cause = "loss" if not math.isfinite(loss) else "gradients"
        what, outcome = self.CAUSES[check_choice(cause, "cause", tuple(self.CAUSES))]
        where = (
            f"epoch {epoch}, validation step {step}"
            if cause == "val_loss"
            else f"epoch {epoch}, step {step}"
        )
        super().__init__(f"{what.format(loss=loss)} at {where}: {outcome}")
        self.epoch, self.step, self.loss, self.history, self.cause = (
            epoch,
            step,
            loss,
            history,
            cause,
        )


def learning_rate(optimizer: keras.optimizers.Optimizer) -> float:
    """The optimizer's current learning rate, read from the device (a schedule's value now)."""
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def training_cause(loss: float, model: keras.Model, optimizer: keras.optimizers.Optimizer) -> str:
    """Why a training step was bad (read from the device once, after it was)."""
    if not math.isfinite(loss):
        return "loss"
    if has_nonfinite([keras.ops.convert_to_numpy(v) for v in model.trainable_variables]):
        return "weights"
    if not math.isfinite(learning_rate(optimizer)):
        return "learning_rate"
    return "gradients"
