"""``fit``'s bookkeeping around the epochs, behind :class:`FitHooks`, as Keras puts its own
behind ``CallbackList``: the history, the progress lines and bars, TensorBoard's scalars, the
caller's ``on_epoch_end`` and the checkpoints, each a small hook called at the start and end of
training and of every epoch."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import NamedTuple

import keras
import tensorflow as tf

from companion.training._arguments import FitOptions
from companion.training._checkpoint import TrainingCheckpoint

#: Marks a summary as a TensorBoard scalar (what ``tf.summary.scalar`` writes, without needing
#: the ``tensorboard`` package, which ``tf.summary.scalar`` imports and TensorFlow does not
#: require).
_SCALAR_METADATA = tf.compat.v1.SummaryMetadata(
    plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars")
).SerializeToString()


class SaveWithin(NamedTuple):
    """What one training pass saves within its epoch (unpacks as ``every, save``)."""

    #: Save after every this many steps of the epoch (counted from its first step).
    every: int
    #: ``save(step)`` writes the checkpoint of the epoch after ``step`` steps.
    save: Callable[[int], None]

    def due(self, step: int, steps: int | None) -> bool:
        """Whether to save after ``step``: every ``every`` steps, but not after the last of a
        known number of ``steps``, whose state ``fit`` saves at the epoch's end (validated)."""
        return step % self.every == 0 and step != steps


class PassBar:
    """The progress bar of one pass, whole: created, refreshed and finished here.

    A ``keras.utils.Progbar`` is live in a terminal (refreshed with the running loss while the
    pass runs, if ``refreshed``) and one finished line elsewhere (no ``\\r``, for notebooks).
    Training and validation each get their own, so that a line stays short: Keras's single line
    with every metric and its ``val_`` form runs past 88 columns with two metrics. Without
    ``shown`` (``fit(progress=False)``) it prints and reads nothing.

    Args:
        steps: The pass's number of steps, or None if unknown (known once it has run).
        names: The names of the pass's logs (shown as they are, not averaged again).
        shown: Whether to show a bar at all.
        refreshed: Whether a live bar shows the running loss during the pass.
    """

    def __init__(
        self, steps: int | None, names: list[str], shown: bool = True, refreshed: bool = True
    ) -> None:
        self.progbar = None
        if shown:
            live = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
            self.progbar = keras.utils.Progbar(
                steps, verbose=1 if live else 2, stateful_metrics=names
            )
        self.refreshed = refreshed

    @property
    def live(self) -> bool:
        """Whether :meth:`update` shows anything (and so reads the device): a live bar."""
        return self.refreshed and self.progbar is not None and self.progbar.verbose == 1

    def update(self, step: int, totals: dict[str, tf.Variable]) -> None:
        """Show the running mean loss after ``step`` steps, read from the pass's ``totals``."""
        if self.live:
            loss = float(totals["loss"]) / max(int(totals["examples"]), 1)
            self.progbar.update(step, [("loss", loss)])

    def finish(self, steps_run: int, logs: dict[str, float]) -> None:
        """Complete the bar with the pass's ``logs``: its one finished line."""
        if self.progbar is not None:
            # a dataset of unknown length: now known
            self.progbar.target = self.progbar.target or steps_run
            self.progbar.update(steps_run, list(logs.items()), finalize=True)


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
    """``Epoch i/n`` before each epoch (each pass shows its own :class:`PassBar`)."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs

    def on_epoch_begin(self, epoch: int) -> None:
        print(f"Epoch {epoch}/{self.epochs}")


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
        return SaveWithin(self.every, lambda step: self.checkpoint.save(epoch - 1, step, history))

    def on_epoch_end(self, epoch: int, logs: dict[str, float], history: dict) -> None:
        self.checkpoint.save(epoch, 0, history)


class FitHooks:
    """``fit``'s hooks in the order they run, with the history they keep (a ``CallbackList``).

    Args:
        options: ``fit``'s own arguments, checked: the epochs it runs to (for the progress
            lines), whether to print progress, TensorBoard's folder, the caller's
            ``on_epoch_end`` and ``checkpoint_every`` (each None when not given).
        checkpoint: The checkpoint to restore and save, or None.
    """

    def __init__(self, options: FitOptions, checkpoint: TrainingCheckpoint | None) -> None:
        self.history: dict[str, list[float]] = {}
        self.progress = _Progress(options.epochs) if options.progress else None
        self.checkpoints = (
            _Checkpoints(checkpoint, options.checkpoint_every) if checkpoint is not None else None
        )
        log_dir, on_epoch_end = options.log_dir, options.on_epoch_end
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

    def bar(self, steps: int | None, names: list[str], refreshed: bool = True) -> PassBar:
        """A pass's progress bar (silent when ``fit`` is); see :class:`PassBar`."""
        return PassBar(steps, names, shown=self.progress is not None, refreshed=refreshed)

    def save_within(self, epoch: int) -> SaveWithin | None:
        """What the training pass of ``epoch`` saves within it, or None."""
        return self.checkpoints.within(epoch, self.history) if self.checkpoints else None


def _resumed(path: str, epochs_done: int, steps_done: int) -> str:
    """The line ``fit`` prints when it carries on from the checkpoint at ``path``."""
    where = (
        f"epoch {epochs_done + 1}, after step {steps_done}"
        if steps_done
        else (f"after epoch {epochs_done}")
    )
    return f"Resumed from {os.path.basename(path)} ({where})"
