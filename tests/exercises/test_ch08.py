"""Chapter 8's exercise checks: a correct answer passes, each likely mistake is named."""

import keras
import numpy as np
from keras import ops

from companion.fitting import ExpectedCalibrationError


class StopBelow(keras.callbacks.Callback):
    def __init__(self, target):
        super().__init__()
        self.target = target

    def on_epoch_end(self, epoch, logs=None):
        if logs["loss"] < self.target:
            self.model.stop_training = True


class StopsAbove(StopBelow):
    def on_epoch_end(self, epoch, logs=None):
        if logs["loss"] > self.target:
            self.model.stop_training = True


class StopsOnABatch(StopBelow):
    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        if logs["loss"] < self.target:
            self.model.stop_training = True


class NeverStops(StopBelow):
    def on_epoch_end(self, epoch, logs=None):
        pass


class StopsLate(StopBelow):
    def on_epoch_end(self, epoch, logs=None):
        if getattr(self, "seen", False):
            self.model.stop_training = True
        self.seen = logs["loss"] < self.target


def test_stop_at_a_target(accepted, caught):
    accepted("8.1", StopBelow)
    caught("8.1", StopsAbove, r"right way round")
    caught("8.1", StopsLate, r"first epoch below the target")
    caught("8.1", NeverStops, r"fewer than 50 epochs")
    caught("8.1", StopsOnABatch, r"not a batch's")


def _softmax(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _grid_errors(logits, labels, scale):
    grid = np.round(np.arange(1.0, 4.01, 0.1), 1)
    errors = []
    for t in grid:
        metric = ExpectedCalibrationError(num_bins=15)
        metric.update_state(labels, _softmax(scale(logits, t)).astype("float32"))
        errors.append(float(metric.result()))
    return grid, errors


def best_temperature(logits, labels):
    grid, errors = _grid_errors(logits, labels, lambda z, t: z / t)
    return float(grid[int(np.argmin(errors))])


def multiplies(logits, labels):
    grid, errors = _grid_errors(logits, labels, lambda z, t: z * t)
    return float(grid[int(np.argmin(errors))])


def test_temperature_scaling(accepted, caught):
    accepted("8.2", best_temperature)
    caught("8.2", multiplies, r"don't multiply")
    # a broken answer (it returns the grid) is reported, not raised
    caught("8.2", lambda logits, labels: [1.0, 2.0], r"one temperature")


class SmoothedSparseCrossentropy(keras.losses.Loss):
    def __init__(self, classes, smoothing=0.1, name="smoothed", **kwargs):
        super().__init__(name=name, **kwargs)
        self.classes, self.smoothing = classes, smoothing

    def call(self, y_true, y_pred):
        one_hot = ops.one_hot(ops.cast(ops.reshape(y_true, (-1,)), "int32"), self.classes)
        smoothed = one_hot * (1 - self.smoothing) + self.smoothing / self.classes
        return -ops.sum(smoothed * ops.log(ops.clip(y_pred, 1e-7, 1.0)), axis=-1)

    def get_config(self):
        return {**super().get_config(), "classes": self.classes, "smoothing": self.smoothing}


class SpreadOverTheOthers(SmoothedSparseCrossentropy):
    def call(self, y_true, y_pred):
        one_hot = ops.one_hot(ops.cast(ops.reshape(y_true, (-1,)), "int32"), self.classes)
        smoothed = one_hot * (1 - self.smoothing) + (1 - one_hot) * self.smoothing / (
            self.classes - 1
        )
        return -ops.sum(smoothed * ops.log(ops.clip(y_pred, 1e-7, 1.0)), axis=-1)


class MeanInCall(SmoothedSparseCrossentropy):
    def call(self, y_true, y_pred):
        return ops.mean(super().call(y_true, y_pred))


class NoConfig(SmoothedSparseCrossentropy):
    def get_config(self):
        return keras.losses.Loss.get_config(self)


def test_a_loss_with_label_smoothing(accepted, caught):
    accepted("8.3", SmoothedSparseCrossentropy)
    caught("8.3", SpreadOverTheOthers, r"the true one included")
    caught("8.3", MeanInCall, r"one loss per example from call")
    caught("8.3", NoConfig, r"classes and smoothing in get_config")
