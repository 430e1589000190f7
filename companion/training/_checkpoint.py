"""``fit``'s checkpoints: where training stands, written by the chief, restored by every worker.

A :class:`TrainingCheckpoint` holds the model, the optimizer, how far training got (epochs done,
steps done in the next one), the history so far and the running state of the current epoch
(``fit``'s totals and the metrics' variables), so that a job restarted after a crash carries on
from the step it last saved, with the weights and losses of a run that never stopped. (Under a
strategy with several replicas a metric's variables are saved as their sum over the replicas
and restored as one total, so its later sums can round differently in the last bit.)

Under ``MultiWorkerMirroredStrategy`` every worker must take part in a save (reading a variable
may be a collective operation), but only the chief's copy is kept: the others write theirs to a
temporary folder and delete it, as TensorFlow's multi-worker guide does. Every worker restores
from the chief's folder, which must therefore be one they all see (one machine, or a shared disk).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

import keras
import tensorflow as tf

from companion._checks import shorten

#: Checkpoints kept in the folder: the newest, and the one before in case the newest is cut short.
MAX_TO_KEEP = 2


class TrainingCheckpoint:
    """Saves and restores a ``fit`` in ``directory`` (see the module's docstring).

    Args:
        directory: The folder of the checkpoints (created when the first one is written).
        model, optimizer: What is trained; the optimizer is built now if it is not yet (under
            ``strategy.scope()``), so that its slots exist to be restored.
        strategy: The strategy ``fit`` runs under; ``strategy.extended.should_checkpoint`` says
            whether this process is the one whose checkpoints are kept.
        state: The variables of an epoch in progress (totals and metric variables).
    """

    def __init__(
        self,
        directory: str,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        strategy: tf.distribute.Strategy,
        state: list[Any],
    ) -> None:
        if not optimizer.built:
            with strategy.scope():
                optimizer.build(model.trainable_variables)
        self.directory = directory
        self.chief = bool(strategy.extended.should_checkpoint)
        self._epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._history = tf.Variable("{}", dtype=tf.string, trainable=False)
        self._checkpoint = tf.train.Checkpoint(
            model=model,
            optimizer=optimizer,
            state=state,
            epoch=self._epoch,
            step=self._step,
            history=self._history,
        )
        self._manager = (
            tf.train.CheckpointManager(self._checkpoint, directory, max_to_keep=MAX_TO_KEEP)
            if self.chief
            else None
        )

    def restore(self) -> tuple[int, int, dict[str, list[float]], str] | None:
        """Load the newest checkpoint: ``(epochs done, steps done, history, its path)``, or None.

        Raises:
            ValueError: If the checkpoint is not one of this model, optimizer and metrics.
        """
        path = tf.train.latest_checkpoint(self.directory)
        if path is None:
            return None
        status = None
        try:
            status = self._checkpoint.restore(path)
            status.assert_existing_objects_matched()
        except (ValueError, AssertionError) as error:
            if status is not None:  # the error says it all: no warnings when it is collected
                status.expect_partial()
            reason = " ".join(str(error).split())
            raise ValueError(
                f"checkpoint_dir: expected checkpoints of this model, optimizer and metrics, got "
                f"{path!r}, which does not match them: "
                f"{shorten(reason, 300)}"
            ) from error
        status.expect_partial()  # a fresh Checkpoint has no save counter yet: nothing is lost
        history = json.loads(self._history.numpy().decode())
        return int(self._epoch.numpy()), int(self._step.numpy()), history, path

    def save(self, epoch: int, step: int, history: dict[str, list[float]]) -> None:
        """Write a checkpoint: ``epoch`` epochs done, ``step`` steps of the next, ``history``."""
        self._epoch.assign(epoch)
        self._step.assign(step)
        self._history.assign(json.dumps(history))
        if self._manager is not None:
            self._manager.save()
            return
        scratch = tempfile.mkdtemp(prefix="companion-worker-checkpoint-")
        try:
            self._checkpoint.write(os.path.join(scratch, "ckpt"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
