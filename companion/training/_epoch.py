"""One pass over a dataset, as ``fit`` runs it: the compiled function that runs the next step
and keeps the pass's totals on the device, and the loop around it that reads them back only at
the end of the pass, or every :data:`READ_INTERVAL` seconds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import tensorflow as tf

from companion.training._errors import NonFiniteError
from companion.training._hooks import PassBar, SaveWithin
from companion.training._metrics import MetricEntry

#: ``fit`` reads its running totals back from the device at most this often (seconds) during an
#: epoch, to refresh a live progress bar and to stop early after a non-finite step; never per step.
READ_INTERVAL = 0.5


class EpochFunction(NamedTuple):
    """A pass's compiled function and its totals (unpacks as ``run_next, totals``)."""

    #: ``run_next(iterator)`` runs the step on the iterator's next batch; it returns whether the
    #: iterator had one.
    run_next: Callable[[Any], Any]
    #: The pass's totals, variables on the device (see :func:`epoch_function`).
    totals: dict[str, tf.Variable]


def epoch_function(step: Callable[[Any], dict[str, tf.Tensor]]) -> EpochFunction:
    """``run_next(iterator)``, which runs ``step`` on the iterator's next batch, and its totals.

    As in ``model.fit``, the compiled function takes the iterator and fetches the batch inside
    the graph. The epoch's totals are variables on the device (the loss times the examples, the
    examples, the steps run, the first bad step and the loss of the last step run), so the loop
    needs to read nothing back per step. A training step is bad when it did not apply its
    gradients or left a weight non-finite; a validation step, when its loss is not finite. After
    a bad step every later call only consumes its batch: it is the last step run, and the
    weights stay as that step left them. ``run_next`` returns whether the iterator had a batch.
    """
    totals = {
        "loss": tf.Variable(0.0, dtype=tf.float64, trainable=False),
        "examples": tf.Variable(0, dtype=tf.int64, trainable=False),
        "steps": tf.Variable(0, dtype=tf.int64, trainable=False),
        "bad_step": tf.Variable(0, dtype=tf.int64, trainable=False),
        "last_loss": tf.Variable(0.0, dtype=tf.float64, trainable=False),
    }

    def run_next(iterator: Any) -> tf.Tensor:
        batch = iterator.get_next_as_optional()

        def run() -> tf.Tensor:
            out = step(batch.get_value())
            index = totals["steps"].assign_add(1)
            value, examples = tf.cast(out["loss"], tf.float64), tf.cast(out["examples"], tf.int64)
            totals["loss"].assign_add(value * tf.cast(examples, tf.float64))
            totals["examples"].assign_add(examples)
            totals["last_loss"].assign(value)
            good = (
                tf.logical_and(out["applied"], out["weights_finite"])
                if "applied" in out
                else tf.math.is_finite(value)
            )
            totals["bad_step"].assign(tf.where(good, tf.constant(0, tf.int64), index))
            return tf.constant(True)

        tf.cond(
            tf.logical_and(batch.has_value(), tf.equal(totals["bad_step"], 0)),
            run,
            lambda: tf.constant(False),
        )
        return batch.has_value()

    return EpochFunction(tf.function(run_next, autograph=False), totals)


def run_epoch(
    function: EpochFunction,
    data: Any,
    steps: int | None,
    entries: list[MetricEntry],
    *,
    name: str,
    cause: Callable[[float], str],
    epoch: int,
    history: dict[str, list[float]],
    bar: PassBar,
    start: int = 0,
    save: SaveWithin | None = None,
) -> tuple[dict[str, float], int]:
    """One pass over ``data`` (the argument ``name``): the mean loss and metrics, the steps run.

    With a known number of ``steps`` the loop reads nothing back from the device until the end
    of the epoch, except every ``READ_INTERVAL`` seconds: the running loss for a live ``bar``,
    and whether a step has failed (the remaining batches are then left unread).

    ``start``: the steps of this epoch already run before a restart; ``data`` holds the rest,
    and the totals and metrics hold the state those steps left (restored from a checkpoint), so
    they are not reset. ``save``: calls ``save.save(step)`` when ``save.due(step, steps)``
    (counted from the epoch's first step, ``start`` included), unless a step was bad.

    Raises:
        NonFiniteError: After a bad step (see :func:`epoch_function`); ``cause(loss)`` names its
            cause.
        ValueError: If ``data`` gave no example (a dataset of unknown length can turn out empty).
    """
    if not start:
        for entry in entries:
            entry.metric.reset_state()
        for variable in function.totals.values():
            variable.assign(tf.zeros_like(variable))
    _run_steps(function, data, steps, bar, start, save)
    totals = function.totals
    if int(totals["bad_step"]):
        loss = float(totals["last_loss"])
        raise NonFiniteError(epoch, int(totals["bad_step"]), loss, history, cause(loss))
    examples = int(totals["examples"])
    if not examples:
        raise ValueError(
            f"{name}: expected at least one example per epoch, got a dataset that yielded "
            f"{int(totals['steps'])} batches and no example"
        )
    logs = {"loss": float(totals["loss"]) / examples}
    logs.update({entry.name: float(entry.metric.result()) for entry in entries})
    return logs, int(totals["steps"])


def _run_steps(
    function: EpochFunction,
    data: Any,
    steps: int | None,
    bar: PassBar,
    start: int,
    save: SaveWithin | None,
) -> None:
    """Run the steps of a pass after its first ``start``: to its end, or to the first read that
    finds a bad step."""
    run_next, totals = function
    iterator = iter(data)
    index, next_read = start, time.monotonic() + READ_INTERVAL
    while steps is None or index < steps:
        more = run_next(iterator)
        if steps is None and not bool(more):  # a dataset of unknown length: ask the iterator
            break
        index += 1
        if save is not None and save.due(index, steps):
            if int(totals["bad_step"]):
                break
            save.save(index)
        if time.monotonic() >= next_read:
            if int(totals["bad_step"]):
                break
            bar.update(index, totals)
            next_read = time.monotonic() + READ_INTERVAL
