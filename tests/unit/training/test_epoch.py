"""companion.training._epoch: one pass over the data reads the device once at its end, takes data of
unknown length, refuses an empty pass; its function unpacks as (run_next, totals)."""

import math

import keras
import pytest
import tensorflow as tf
from helpers.small_models import dense, max_difference, shapes_dataset, two_input_classifier
from helpers.training_helpers import crossentropy, fit_regression, regression_data

from companion.training import _epoch, _loop, fit
from companion.training._epoch import EpochFunction, epoch_function


def test_an_epoch_of_known_length_reads_the_device_once_at_its_end_not_per_step(monkeypatch):
    """What keeps the host from waiting for each step (a GPU would idle): no read per step."""
    reads = []

    class Counted(dict):
        def __getitem__(self, key):
            reads.append(key)
            return super().__getitem__(key)

    class Answer:  # what run_next returns; the loop converts it only when the length is unknown
        def __init__(self, value):
            self.value = value

        def __bool__(self):
            reads.append("more")
            return bool(self.value)

    make = _loop.epoch_function

    def counted_epoch_function(step):
        run_next, totals = make(step)
        return EpochFunction(lambda iterator: Answer(run_next(iterator)), Counted(totals))

    monkeypatch.setattr(_loop, "epoch_function", counted_epoch_function)
    monkeypatch.setattr(_epoch, "READ_INTERVAL", 1e9)  # no periodic read within this test
    per_epoch = {}
    for batches in (2, 8):
        reads.clear()
        history = fit(
            two_input_classifier(),
            shapes_dataset(16 * batches, batch=16),
            optimizer=keras.optimizers.SGD(0.01),
            loss=crossentropy(),
            progress=False,
        )
        per_epoch[batches] = len(reads)
        assert math.isfinite(history["loss"][0])
    assert per_epoch[2] == per_epoch[8] <= 5, per_epoch  # a few reads at the end, none per step


def test_a_dataset_of_unknown_length_trains_as_the_same_data_of_known_length():
    data = shapes_dataset(100, batch=32)
    unknown = data.filter(lambda x, y: True)
    kwargs = dict(
        optimizer=keras.optimizers.SGD(0.1),
        loss=crossentropy(),
        epochs=2,
        progress=False,
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    known_model, unknown_model = two_input_classifier(), two_input_classifier()
    assert fit(known_model, data, **kwargs) == fit(
        unknown_model, unknown, **kwargs | {"optimizer": keras.optimizers.SGD(0.1)}
    )
    assert max_difference(known_model, unknown_model) == 0.0


@pytest.mark.parametrize("argument", ["dataset", "validation_data"])
@pytest.mark.parametrize("length", ["known", "unknown"])
def test_an_empty_dataset_is_refused_not_reported_as_loss_zero(argument, length):
    empty = (
        regression_data().take(0)
        if length == "known"
        else regression_data().filter(lambda x, y: False)
    )
    data = {"dataset": regression_data(), "validation_data": None} | {argument: empty}
    with pytest.raises(
        ValueError, match=rf"^{argument}: expected at least one (batch|example per epoch), got "
    ):
        fit_regression(dense(2, seed=0), data["dataset"], validation_data=data["validation_data"])


def test_the_epoch_function_unpacks_as_run_next_and_totals():
    function = epoch_function(lambda batch: {"loss": tf.constant(2.0), "examples": 3})
    run_next, totals = function
    assert run_next is function.run_next and totals is function.totals
    assert sorted(totals) == ["bad_step", "examples", "last_loss", "loss", "steps"]
    iterator = iter(tf.data.Dataset.range(2))
    assert [bool(run_next(iterator)) for _ in range(3)] == [True, True, False]
    assert [int(totals[k]) for k in ("steps", "examples", "bad_step")] == [2, 6, 0]
    assert float(totals["loss"]) == 12.0
