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

Around the epochs, ``fit``'s bookkeeping sits behind :class:`_FitHooks`, as Keras puts its own
behind ``CallbackList``: the history, the progress lines, TensorBoard's scalars, the caller's
``on_epoch_end`` and the checkpoints, each a small hook called at the start and end of training
and of every epoch.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from companion._checks import shorten

__all__ = ["TrainingCheckpoint"]

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


#: What one pass saves within an epoch: ``(every, save)``, ``save(step)`` called every ``every``
#: steps (see ``companion.training._run_epoch``).
SaveWithin = tuple[int, Callable[[int], None]]

#: Marks a summary as a TensorBoard scalar (what ``tf.summary.scalar`` writes, without needing
#: the ``tensorboard`` package, which ``tf.summary.scalar`` imports and TensorFlow does not
#: require).
_SCALAR_METADATA = tf.compat.v1.SummaryMetadata(
    plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars")
).SerializeToString()


class _Hook:
    """One piece of ``fit``'s bookkeeping, called as Keras calls a ``keras.callbacks.Callback``."""

    def on_train_begin(self) -> None:
        """Before the first epoch run (after a checkpoint was restored)."""

    def on_epoch_begin(self, epoch: int) -> None:
        """Before the epoch's training pass (``epoch`` counted from 1)."""

    def on_epoch_end(self, epoch: int, logs: dict[str, float], history: dict) -> None:
        """After the epoch's validation, ``logs`` already in ``history``."""

    def on_train_end(self) -> None:
        """After the last epoch, or when training stops on an error."""


class _Progress(_Hook):
    """``Epoch i/n`` before each epoch; a ``keras.utils.Progbar`` per pass (see :meth:`bar`)."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs

    def on_epoch_begin(self, epoch: int) -> None:
        print(f"Epoch {epoch}/{self.epochs}")

    @staticmethod
    def bar(steps: int | None, names: list[str]) -> keras.utils.Progbar:
        """A Progbar for one pass: live in a terminal, one finished line elsewhere (no ``\\r``).

        Training and validation each get their own line, so that a line stays short: Keras's
        single line with every metric and its ``val_`` form runs past 88 columns with two
        metrics."""
        live = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
        return keras.utils.Progbar(steps, verbose=1 if live else 2, stateful_metrics=names)


class _TensorBoard(_Hook):
    """Every history entry as a TensorBoard scalar per epoch (step = epoch number, from 1)."""

    def __init__(self, log_dir: str) -> None:
        self.log_dir, self.writer = log_dir, None

    def on_train_begin(self) -> None:
        self.writer = tf.summary.create_file_writer(self.log_dir)

    def on_epoch_end(self, epoch: int, logs: dict[str, float], history: dict) -> None:
        with self.writer.as_default():
            for name, value in logs.items():
                tf.summary.write(
                    name, tf.constant(value, tf.float32), step=epoch, metadata=_SCALAR_METADATA
                )
        self.writer.flush()

    def on_train_end(self) -> None:
        if self.writer is not None:
            self.writer.close()


class _EpochEndCall(_Hook):
    """The caller's ``on_epoch_end(epoch, logs)``, with a copy of the epoch's entries."""

    def __init__(self, function: Callable[[int, dict[str, float]], None]) -> None:
        self.function = function

    def on_epoch_end(self, epoch: int, logs: dict[str, float], history: dict) -> None:
        self.function(epoch, dict(logs))


class _Checkpoints(_Hook):
    """A :class:`TrainingCheckpoint` at every epoch's end, and every ``every`` steps within."""

    def __init__(self, checkpoint: TrainingCheckpoint, every: int | None) -> None:
        self.checkpoint, self.every = checkpoint, every

    def within(self, epoch: int, history: dict) -> SaveWithin | None:
        """What the epoch's training pass saves (``epoch - 1`` epochs done), or None."""
        if self.every is None:
            return None
        return self.every, lambda step: self.checkpoint.save(epoch - 1, step, history)

    def on_epoch_end(self, epoch: int, logs: dict[str, float], history: dict) -> None:
        self.checkpoint.save(epoch, 0, history)


class _FitHooks:
    """``fit``'s hooks in the order they run, with the history they keep (a ``CallbackList``).

    Args:
        epochs: The epochs ``fit`` runs to, for the progress lines.
        progress: Whether to print progress lines and bars.
        log_dir: TensorBoard's folder, or None.
        on_epoch_end: The caller's function, or None.
        checkpoint: The checkpoint to restore and save, or None.
        checkpoint_every: Save within an epoch every this many steps too, or None.
    """

    def __init__(
        self,
        epochs: int,
        progress: bool,
        log_dir: str | None,
        on_epoch_end: Callable[[int, dict[str, float]], None] | None,
        checkpoint: TrainingCheckpoint | None,
        checkpoint_every: int | None,
    ) -> None:
        self.history: dict[str, list[float]] = {}
        self.progress = _Progress(epochs) if progress else None
        self.checkpoints = (
            _Checkpoints(checkpoint, checkpoint_every) if checkpoint is not None else None
        )
        optional = (
            self.progress,
            _TensorBoard(log_dir) if log_dir is not None else None,
            _EpochEndCall(on_epoch_end) if on_epoch_end is not None else None,
            self.checkpoints,
        )
        self.hooks = [hook for hook in optional if hook is not None]

    def on_train_begin(self) -> tuple[int, int]:
        """Restore the newest checkpoint, if any: ``(epochs done, steps done in the next)``."""
        done, start = 0, 0
        restored = self.checkpoints.checkpoint.restore() if self.checkpoints else None
        if restored is not None:
            done, start, self.history, path = restored
            if self.progress is not None:
                print(_resumed(path, done, start))
        for hook in self.hooks:
            hook.on_train_begin()
        return done, start

    def on_epoch_begin(self, epoch: int) -> None:
        for hook in self.hooks:
            hook.on_epoch_begin(epoch)

    def on_epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        """Add ``logs`` to the history, then run each hook's ``on_epoch_end``."""
        for name, value in logs.items():
            self.history.setdefault(name, []).append(value)
        for hook in self.hooks:
            hook.on_epoch_end(epoch, logs, self.history)

    def on_train_end(self) -> None:
        for hook in self.hooks:
            hook.on_train_end()

    def bar(self, steps: int | None, names: list[str]) -> keras.utils.Progbar | None:
        """A pass's progress bar, or None when ``fit`` is silent."""
        return self.progress.bar(steps, names) if self.progress is not None else None

    def save_within(self, epoch: int) -> SaveWithin | None:
        """What the training pass of ``epoch`` saves within it, or None."""
        return self.checkpoints.within(epoch, self.history) if self.checkpoints else None


def _finish(bar: keras.utils.Progbar | None, steps_run: int, logs: dict[str, float]) -> None:
    """Complete ``bar`` (if any) with the pass's ``logs``: its one finished line."""
    if bar is not None:
        bar.target = bar.target or steps_run  # a dataset of unknown length: now known
        bar.update(steps_run, list(logs.items()), finalize=True)


def _resumed(path: str, epochs_done: int, steps_done: int) -> str:
    """The line ``fit`` prints when it carries on from the checkpoint at ``path``."""
    where = (
        f"epoch {epochs_done + 1}, after step {steps_done}"
        if steps_done
        else (f"after epoch {epochs_done}")
    )
    return f"Resumed from {os.path.basename(path)} ({where})"
