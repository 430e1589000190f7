"""Chapter 10's exercise checks: a correct answer passes, each likely mistake is named."""

import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf
from helpers.small_models import dense

from companion.notebook import split_cpu
from companion.training import fit

try:  # before TensorFlow's first op: 10.1 runs on a two-replica MirroredStrategy
    split_cpu(2)
    TWO_CPUS = True
except RuntimeError:  # another test module ran TensorFlow first: 10.1 runs in a fresh process
    TWO_CPUS = False


def replica_loss(y_true, y_pred, global_batch_size):
    per_example = keras.losses.mean_squared_error(y_true, y_pred)
    return tf.reduce_sum(per_example) / global_batch_size


def per_replica_mean(y_true, y_pred, global_batch_size):
    return tf.reduce_mean(keras.losses.mean_squared_error(y_true, y_pred))


def sums_the_outputs(y_true, y_pred, global_batch_size):
    return tf.reduce_sum(tf.square(y_true - y_pred)) / global_batch_size


def through_numpy(y_true, y_pred, global_batch_size):
    return np.sum(np.mean((np.asarray(y_true) - np.asarray(y_pred)) ** 2, axis=-1)) / 32


def test_each_replicas_share_of_the_loss(accepted, caught):
    if not TWO_CPUS:
        name = "test_each_replicas_share_of_the_loss"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", f"{__file__}::{name}"]
        run = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-3000:]
        return
    accepted("10.1", replica_loss)
    # Keras's own helper, which infers the global batch inside a replica, is right as well
    accepted(
        "10.1",
        lambda y, p, size: tf.nn.compute_average_loss(
            keras.losses.mean_squared_error(y, p), global_batch_size=size
        ),
    )
    caught("10.1", per_replica_mean, r"each replica's batch, 16, not by global_batch_size")
    caught("10.1", sums_the_outputs, r"summed over the 3 outputs")
    caught("10.1", through_numpy, r"not NumPy")


def _resumable(folder, data, seed=True, checkpoint_every=2):
    model = dense(4, seed=0 if seed else None)
    fit(
        model,
        data,
        optimizer=keras.optimizers.Adam(0.05),
        loss=keras.losses.MeanSquaredError(),
        epochs=2,
        progress=False,
        checkpoint_dir=folder,
        checkpoint_every=checkpoint_every,
    )
    return model


def resumable(folder, data):
    return _resumable(folder, data)


def unseeded(folder, data):
    return _resumable(folder, data, seed=False)


def epoch_checkpoints_only(folder, data):
    return _resumable(folder, data, checkpoint_every=None)


def test_resume_in_one_process(accepted, caught):
    accepted("10.2", resumable)
    caught("10.2", unseeded, r"set_random_seed")
    caught("10.2", epoch_checkpoints_only, r"checkpoint_every=2")


def restart_steps(save_freq, crash_at):
    backup = crash_at // save_freq * save_freq
    begun = (backup - 1) // 8 * 8  # steps before the backup's epoch
    return backup + (24 - begun)


def steps_after_restart(save_freq, crash_at):
    return restart_steps(save_freq, crash_at) - crash_at // save_freq * save_freq


def test_predict_a_restart(accepted, caught):
    accepted("10.3", restart_steps)
    caught("10.3", steps_after_restart, r"restores optimizer.iterations too")
    caught("10.3", lambda save_freq, crash_at: 24, r"runs the backup's epoch again")


class RMSNorm(keras.layers.Layer):
    def __init__(self, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="scale")

    def call(self, inputs):
        x = keras.ops.cast(inputs, "float32")
        normed = x * keras.ops.rsqrt(
            keras.ops.mean(keras.ops.square(x), axis=-1, keepdims=True) + self.epsilon
        )
        return keras.ops.cast(normed, self.compute_dtype) * self.scale


class SquaresInFloat16(RMSNorm):
    def call(self, inputs):
        mean = keras.ops.mean(keras.ops.square(inputs), axis=-1, keepdims=True)
        return inputs * keras.ops.rsqrt(mean + self.epsilon) * self.scale


class StaysInFloat32(RMSNorm):
    def call(self, inputs):
        return keras.ops.cast(super().call(inputs), "float32") * 1.0


class MeanOverBatch(RMSNorm):
    def call(self, inputs):
        x = keras.ops.cast(inputs, "float32")
        normed = x * keras.ops.rsqrt(
            keras.ops.mean(keras.ops.square(x), axis=0, keepdims=True) + self.epsilon
        )
        return keras.ops.cast(normed, self.compute_dtype) * self.scale


def test_a_layer_that_reduces_in_float32(accepted, caught):
    accepted("10.4", RMSNorm)
    caught("10.4", SquaresInFloat16, r"cast the inputs to float32 first")
    caught("10.4", StaysInFloat32, r"float16 output, got float32")
    caught("10.4", MeanOverBatch, r"over the last axis")


def _run_padded(fn, features, drop=True, fill=np.zeros):
    results = []
    for start in range(0, len(features), 32):
        batch = features[start : start + 32]
        size = len(batch)
        if size < 32:
            batch = np.concatenate([batch, fill((32 - size, batch.shape[1]), "float32")])
        results.append(fn(batch).numpy()[:size] if drop else fn(batch).numpy())
    return np.concatenate(results)


def run_padded(fn, features):
    return _run_padded(fn, features)


def keeps_the_padding(fn, features):
    return _run_padded(fn, features, drop=False)


def pads_with_ones(fn, features):
    return _run_padded(fn, features, fill=np.ones)


def unpadded(fn, features):
    return np.concatenate([fn(features[i : i + 32]).numpy() for i in range(0, len(features), 32)])


def test_one_compilation_for_every_batch(accepted, caught):
    accepted("10.5", run_padded)
    caught("10.5", unpadded, r"got 2 \(pad the last batch")
    caught("10.5", keeps_the_padding, r"drop the padding")
    caught("10.5", pads_with_ones, r"pad with zeros")
    # a broken answer (it forgets to return) is reported, not raised
    caught("10.5", lambda fn, features: None, r"results of shape")
