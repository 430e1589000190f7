"""A callback that puts a recording optimizer's update norms into each epoch's logs.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

from typing import Any

import keras

from companion._checks import (
    check_instance,
)
from companion.optimizers._wrappers import TransformGradients


class UpdateNormLogger(keras.callbacks.Callback):
    """Add a recording optimizer's update norms to each epoch's logs (for History and TensorBoard).

    Put it before ``keras.callbacks.TensorBoard`` in the callback list: TensorBoard then writes
    every ``update_norm/<variable path>`` entry as a scalar.

    Args:
        optimizer: A :class:`TransformGradients` made with ``record_update_norms=True``.

    Raises:
        TypeError: If ``optimizer`` is not a :class:`TransformGradients`.
        ValueError: If it does not record update norms.

    Taught in chapter 9, "Chaining transforms and recording update norms".
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
