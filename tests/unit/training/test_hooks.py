"""companion.training._hooks: fit's bookkeeping: TensorBoard scalars, the progress lines and each
pass's progress bar, the saves within an epoch."""

import os
import sys

import keras
import numpy as np
import tensorflow as tf
from helpers.small_models import shapes_dataset, two_input_classifier
from helpers.training_helpers import crossentropy

from companion.training import _epoch, fit
from companion.training._hooks import PassBar, SaveWithin


def read_scalars(log_dir):
    """Every scalar in the TensorBoard event files of ``log_dir``, read back without tensorboard."""
    scalars = {}
    for name in sorted(os.listdir(log_dir)):
        for record in tf.data.TFRecordDataset(os.path.join(log_dir, name)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append(
                    (event.step, float(tf.make_ndarray(value.tensor)))
                )
    return scalars


def test_tensorboard_scalars_are_written_per_epoch(tmp_path):
    data = shapes_dataset(96)
    history = fit(
        two_input_classifier(),
        data,
        optimizer=keras.optimizers.SGD(0.05),
        loss=crossentropy(),
        epochs=3,
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        validation_data=data,
        log_dir=tmp_path / "logs",
        progress=False,
    )
    assert [p.name.startswith("events.out.tfevents") for p in (tmp_path / "logs").iterdir()] == [
        True
    ]
    scalars = read_scalars(tmp_path / "logs")
    assert sorted(scalars) == sorted(history)
    for name, values in history.items():
        assert [step for step, _ in scalars[name]] == [1, 2, 3]
        np.testing.assert_allclose([value for _, value in scalars[name]], values, rtol=1e-6)


def test_progress_prints_clean_lines_per_epoch_off_a_terminal(capsys):
    history = fit(
        two_input_classifier(),
        shapes_dataset(64),
        optimizer=keras.optimizers.SGD(0.1),
        loss=crossentropy(),
        epochs=2,
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        validation_data=shapes_dataset(32, seed=1),
    )
    lines = capsys.readouterr().out.splitlines()
    counts = [line.split(" - ")[0] for line in lines]
    assert counts == ["Epoch 1/2", "2/2", "1/1", "Epoch 2/2", "2/2", "1/1"]
    # training and validation on lines of their own, each within the book's 88 columns
    assert all(
        line.endswith(f" - loss: {loss:.4f} - accuracy: {accuracy:.4f}")
        for line, loss, accuracy in zip(lines[1::3], history["loss"], history["accuracy"])
    )
    assert all(
        line.endswith(f" - val_loss: {loss:.4f} - val_accuracy: {accuracy:.4f}")
        for line, loss, accuracy in zip(lines[2::3], history["val_loss"], history["val_accuracy"])
    )
    assert max(map(len, lines)) <= 88
    assert not any("\r" in line or "\b" in line or "\x1b" in line for line in lines)


def test_a_live_bar_in_a_terminal_reads_the_running_loss(capsys, monkeypatch):
    monkeypatch.setattr(_epoch, "READ_INTERVAL", 0.0)  # read after every step
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    history = fit(
        two_input_classifier(),
        shapes_dataset(64),
        optimizer=keras.optimizers.SGD(0.1),
        loss=crossentropy(),
    )
    printed = capsys.readouterr().out
    assert printed.startswith("Epoch 1/1\n") and ("\r" in printed or "\x1b" in printed)
    assert "2/2" in printed and f"loss: {history['loss'][0]:.4f}" in printed


class ReadCounted(dict):
    """A pass's totals that count how often they are read (a read of the device)."""

    reads = 0

    def __getitem__(self, key):
        self.reads += 1
        return super().__getitem__(key)


def totals(loss, examples):
    return ReadCounted(
        loss=tf.Variable(loss, dtype=tf.float64), examples=tf.Variable(examples, dtype=tf.int64)
    )


def test_a_silent_pass_bar_prints_and_reads_nothing(capsys):
    bar, running = PassBar(4, ["loss"], shown=False), totals(2.0, 4)
    bar.update(1, running)
    bar.finish(4, {"loss": 0.5})
    assert (bar.progbar, bar.live, running.reads, capsys.readouterr().out) == (None, False, 0, "")


def test_a_pass_bar_off_a_terminal_reads_nothing_and_prints_one_finished_line(capsys):
    bar, running = PassBar(None, ["loss", "mae"]), totals(2.0, 4)  # unknown length
    assert not bar.live and bar.progbar.verbose == 2
    bar.update(1, running)
    assert running.reads == 0 and capsys.readouterr().out == ""
    bar.finish(3, {"loss": 0.5, "mae": 0.25})
    printed = capsys.readouterr().out
    assert bar.progbar.target == 3 and printed.count("\n") == 1 and "\r" not in printed
    assert "loss: 0.5000" in printed and "mae: 0.2500" in printed


def test_a_live_pass_bar_shows_the_running_loss_unless_not_refreshed(capsys, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    bar, running = PassBar(4, ["loss"]), totals(6.0, 4)  # the sum of loss x examples
    assert bar.live
    bar.update(2, running)
    assert running.reads == 2 and "loss: 1.5000" in capsys.readouterr().out
    quiet, running = PassBar(4, ["val_loss"], refreshed=False), totals(6.0, 4)
    quiet.update(2, running)
    assert not quiet.live and running.reads == 0 and capsys.readouterr().out == ""
    quiet.finish(4, {"val_loss": 1.5})
    assert "val_loss: 1.5000" in capsys.readouterr().out


def test_a_save_within_an_epoch_unpacks_and_is_due_every_so_many_steps_but_not_the_last():
    saved = []
    every, save = within = SaveWithin(2, saved.append)
    assert every == 2 and save == saved.append
    assert [step for step in range(1, 7) if within.due(step, steps=6)] == [2, 4]
    assert [step for step in range(1, 7) if within.due(step, steps=None)] == [2, 4, 6]
