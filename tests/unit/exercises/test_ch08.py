"""Chapter 8's exercise checks: a correct answer passes, each likely mistake is named."""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from companion.fitting import ExpectedCalibrationError


class InlineModel(keras.Model):
    """The chapter's model with its own step: the loss is weighted, the MAE is not."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(1)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae = keras.metrics.MeanAbsoluteError(name="mae")

    def call(self, x):
        return self.out(self.hidden(x))

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae]

    def weighted(self, data):
        """(x, y, sample_weight) of a batch and the gradients of its loss."""
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight)
        return x, y, sample_weight, y_pred, loss, tape.gradient(loss, self.trainable_variables)

    def train_step(self, data):
        x, y, _, y_pred, loss, gradients = self.weighted(data)
        self.optimizer.apply(gradients, self.trainable_variables)
        self.loss_tracker.update_state(loss)
        self.mae.update_state(y, y_pred)
        return {metric.name: metric.result() for metric in self.metrics}


class WeightedModel(InlineModel):
    def train_step(self, data):
        x, y, sample_weight, y_pred, loss, gradients = self.weighted(data)
        self.optimizer.apply(gradients, self.trainable_variables)
        self.loss_tracker.update_state(loss)
        self.mae.update_state(y, y_pred, sample_weight)
        return {metric.name: metric.result() for metric in self.metrics}


class CompiledMetrics(keras.Model):
    """keras.io's way: the compiled metrics, found in self.metrics."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(1)

    def call(self, x):
        return self.out(self.hidden(x))

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(gradients, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred, sample_weight)
        return {metric.name: metric.result() for metric in self.metrics}


class IgnoresWeights(InlineModel):
    def train_step(self, data):
        x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
        return super().train_step((x, y))


class TakesTwoParts(InlineModel):
    def train_step(self, data):
        x, y = data
        return super().train_step((x, y))


class UpdatesNoMetric(InlineModel):
    def train_step(self, data):
        _, _, _, _, _, gradients = self.weighted(data)
        self.optimizer.apply(gradients, self.trainable_variables)
        return {metric.name: metric.result() for metric in self.metrics}


class ReturnsNoLogs(WeightedModel):
    def train_step(self, data):
        super().train_step(data)


class TrainsTheLastLayer(InlineModel):
    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight)
        variables = self.out.trainable_variables
        self.optimizer.apply(tape.gradient(loss, variables), variables)
        self.loss_tracker.update_state(loss)
        self.mae.update_state(y, y_pred, sample_weight)
        return {metric.name: metric.result() for metric in self.metrics}


def test_a_step_that_honours_sample_weights(accepted, caught):
    accepted("8.1", WeightedModel)
    accepted("8.1", CompiledMetrics)
    caught("8.1", InlineModel, r"MAE is not weighted: pass sample_weight to its update_state")
    caught("8.1", IgnoresWeights, r"as if every sample weight were 1")
    caught("8.1", TakesTwoParts, r"unpack_x_y_sample_weight")
    caught("8.1", UpdatesNoMetric, r"nothing was added to the metric")
    caught("8.1", ReturnsNoLogs, r"return the logs")
    caught("8.1", TrainsTheLastLayer, r"never moved: pass self\.trainable_variables")


class ClippedModel(WeightedModel):
    def __init__(self, clip_norm=1.0, **kwargs):
        super().__init__(**kwargs)
        self.clip_norm = clip_norm

    def clip(self, gradients):
        return tf.clip_by_global_norm(gradients, self.clip_norm)[0]

    def train_step(self, data):
        x, y, sample_weight, y_pred, loss, gradients = self.weighted(data)
        self.optimizer.apply(self.clip(gradients), self.trainable_variables)
        self.loss_tracker.update_state(loss)
        self.mae.update_state(y, y_pred, sample_weight)
        return {metric.name: metric.result() for metric in self.metrics}


class ClipsEachGradient(ClippedModel):
    def clip(self, gradients):
        return [tf.clip_by_norm(g, self.clip_norm) for g in gradients]


class DropsTheClipped(ClippedModel):
    def clip(self, gradients):
        tf.clip_by_global_norm(gradients, self.clip_norm)
        return gradients


class ClipsToAHalf(ClippedModel):
    def clip(self, gradients):
        return tf.clip_by_global_norm(gradients, 0.5)[0]


def test_clip_the_global_norm(accepted, caught):
    accepted("8.2", ClippedModel)
    caught("8.2", ClipsEachGradient, r"clipped to 0\.5 on its own")
    caught("8.2", DropsTheClipped, r"not clipped")
    caught("8.2", ClipsToAHalf, r"clip to self\.clip_norm")


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
    accepted("8.3", StopBelow)
    caught("8.3", StopsAbove, r"right way round")
    caught("8.3", StopsLate, r"first epoch below the target")
    caught("8.3", NeverStops, r"fewer than 50 epochs")
    caught("8.3", StopsOnABatch, r"not a batch's")


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
    accepted("8.4", best_temperature)
    caught("8.4", multiplies, r"don't multiply")
    # a broken answer (it returns the grid) is reported, not raised
    caught("8.4", lambda logits, labels: [1.0, 2.0], r"one temperature")


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
    accepted("8.5", SmoothedSparseCrossentropy)
    caught("8.5", SpreadOverTheOthers, r"the true one included")
    caught("8.5", MeanInCall, r"one loss per example from call")
    caught("8.5", NoConfig, r"classes and smoothing in get_config")
