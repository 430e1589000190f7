"""Chapter 10, multi-worker training: each replica's share of the loss, resume, predict a
restart, RMSNorm, padded batches."""

from __future__ import annotations

import functools
import tempfile

import numpy as np

from companion.exercises._framework import FUNCTION, LAYER_CLASS, Exercise, Failed, expect

GLOBAL_BATCH = 32  # the loss exercise's batch: two replicas of 16 examples


def _targets():
    """A batch of 32 targets and predictions with 3 outputs each (seeded, float32)."""
    rng = np.random.default_rng(5)
    y_true = rng.normal(size=(GLOBAL_BATCH, 3)).astype("float32")
    return y_true, (y_true + rng.normal(size=(GLOBAL_BATCH, 3))).astype("float32")


def _batch_mean(y_true, y_pred):
    """Keras's mean squared error of the whole batch (the one-device loss)."""
    import keras
    import tensorflow as tf

    with tf.device("/CPU:0"):
        return float(keras.losses.MeanSquaredError()(y_true, y_pred))


def _two_replicas():
    """A MirroredStrategy over two logical CPU devices, or a Failed that says how to get them."""
    import tensorflow as tf

    devices = [device.name for device in tf.config.list_logical_devices("CPU")]
    expect(
        len(devices) >= 2,
        f"expected two logical CPU devices for a two-replica MirroredStrategy, got "
        f"{len(devices)} (run split_cpu(2) from companion.notebook right after setup(), in a "
        "fresh kernel, as this chapter does)",
    )
    return tf.distribute.MirroredStrategy(devices[:2])


def _on_replicas(strategy, fn, batch):
    """``strategy.run(fn, args=batch)`` in a tf.function, as a training step runs it; an answer
    that needs eager tensors (NumPy) fails with a message that says so."""
    import tensorflow as tf

    try:
        return tf.function(lambda *args: strategy.run(fn, args=args))(*batch)
    except (TypeError, ValueError, NotImplementedError) as error:
        last = str(error).strip().splitlines()[-1].removeprefix(f"{type(error).__name__}: ")
        first = last[:70] + ("..." if len(last) > 70 else "")
        raise Failed(
            f"expected a loss made of TensorFlow ops inside a tf.function step, got "
            f"{type(error).__name__}: {first} (compute it with TensorFlow or keras.ops on "
            "y_pred, not NumPy)"
        ) from error


def _share_mistake(got, expected):
    """A hint for a loss ``got`` where ``expected`` was due, when the ratio names a mistake."""
    ratio = got / expected if expected else float("nan")
    if abs(ratio - 2.0) < 1e-3:
        return " (divided by each replica's batch, 16, not by global_batch_size, 32)"
    if abs(ratio - 3.0) < 1e-3:
        return " (the squared errors summed over the 3 outputs: take their mean per example)"
    if abs(ratio - GLOBAL_BATCH) < 1e-2:
        return " (the sum of the per-example losses: divide it by global_batch_size)"
    return ""


def whole_batch_share(answer, context):
    """With the whole batch on one replica it equals keras.losses.MeanSquaredError"""
    import tensorflow as tf

    y_true, y_pred = _targets()
    with tf.device("/CPU:0"):
        got = float(answer(tf.constant(y_true), tf.constant(y_pred), GLOBAL_BATCH))
    expected = _batch_mean(y_true, y_pred)
    expect(
        abs(got - expected) <= 1e-5 * abs(expected),
        f"expected {expected:.6f} for the whole batch of {GLOBAL_BATCH}, got {got:.6f}"
        + _share_mistake(got, expected),
    )


def shares_add_up(answer, context):
    """On two replicas of 16 examples the shares add up to the batch's mean"""
    import tensorflow as tf

    strategy = _two_replicas()
    y_true, y_pred = _targets()
    batches = tf.data.Dataset.from_tensor_slices((y_true, y_pred)).batch(GLOBAL_BATCH)
    batch = next(iter(strategy.experimental_distribute_dataset(batches)))
    shares = _on_replicas(strategy, lambda y, p: answer(y, p, GLOBAL_BATCH), batch)
    got = float(strategy.reduce(tf.distribute.ReduceOp.SUM, shares, axis=None))
    expected = _batch_mean(y_true, y_pred)
    expect(
        abs(got - expected) <= 1e-5 * abs(expected),
        f"expected the two shares to add up to the batch's mean, {expected:.6f}, got "
        f"{got:.6f}" + _share_mistake(got, expected),
    )


def same_update(answer, context):
    """One SGD step on two replicas gives the one-device step's weights"""
    import keras
    import tensorflow as tf

    strategy = _two_replicas()
    rng = np.random.default_rng(6)
    x = rng.normal(size=(GLOBAL_BATCH, 4)).astype("float32")
    y = rng.normal(size=(GLOBAL_BATCH, 3)).astype("float32")
    start = [rng.normal(size=(4, 3)).astype("float32"), np.zeros(3, "float32")]
    with tf.device("/CPU:0"):  # the one-device reference: Keras's mean over the whole batch
        kernel = tf.Variable(start[0])
        with tf.GradientTape() as tape:
            loss = keras.losses.MeanSquaredError()(y, x @ kernel + start[1])
        expected = start[0] - 0.1 * tape.gradient(loss, kernel).numpy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.set_weights(start)
        optimizer = keras.optimizers.SGD(0.1)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            share = answer(y, model(x, training=True), GLOBAL_BATCH)
        gradients = tape.gradient(share, model.trainable_variables)
        expect(
            all(gradient is not None for gradient in gradients),
            "expected gradients for the weights, got None (compute the loss with TensorFlow or "
            "keras.ops on y_pred, not NumPy)",
        )
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))

    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    batch = next(iter(strategy.experimental_distribute_dataset(batches)))
    _on_replicas(strategy, replica_step, batch)
    got = model.get_weights()[0]
    gap = float(np.max(np.abs(got - expected)))
    step = float(np.max(np.abs(expected - start[0])))
    moved = float(np.max(np.abs(got - start[0])))
    expect(
        gap < 1e-5,
        f"expected the one-device SGD step within 1e-5, got a gap of {gap:.2g}"
        + _share_mistake(moved, step),
    )


def _small():
    """256 examples of the chapter's linear problem in 8 batches of 32."""
    import tensorflow as tf

    x = np.random.default_rng(0).normal(size=(256, 4)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(32)


def _crashing(dataset, at):
    """``dataset`` whose pipeline raises at its ``at``-th batch (a tf.py_function in a map)."""
    import tensorflow as tf

    count = [0]

    def read(x):
        count[0] += 1
        if count[0] == at:
            raise RuntimeError("the machine is gone")
        return x

    return dataset.map(
        lambda x, y: (tf.ensure_shape(tf.py_function(read, [x], x.dtype), x.shape), y)
    )


def _resumed(answer, context):
    """Digests of two uninterrupted runs and of a run that crashed and restarted."""
    import tensorflow as tf

    from companion.cluster import variables_digest

    def make():
        digests = {}
        with tf.device("/CPU:0"):  # bits are compared
            for name in ("whole", "again"):
                with tempfile.TemporaryDirectory() as folder:
                    digests[name] = variables_digest(answer(folder, _small()))
            with tempfile.TemporaryDirectory() as folder:
                crashed = False
                try:
                    answer(folder, _crashing(_small(), 7))
                except tf.errors.OpError:
                    crashed = True
                digests["checkpoint"] = tf.train.latest_checkpoint(folder) or _any_file(folder)
                digests["restarted"] = variables_digest(answer(folder, _small()))
        return digests, crashed

    return context.once("resumed", make)


def _any_file(folder):
    from pathlib import Path

    return next((str(path) for path in Path(folder).rglob("*") if path.is_file()), None)


def seeded(answer, context):
    """Two uninterrupted runs give the same weights, bit for bit"""
    digests, _ = _resumed(answer, context)
    expect(
        digests["whole"] == digests["again"],
        "expected the same weights from two runs, got different ones (seed the model with "
        "keras.utils.set_random_seed before building it, in the function)",
    )


def crash_leaves_checkpoint(answer, context):
    """The run that crashed at batch 7 raised, and left a checkpoint in the folder"""
    digests, crashed = _resumed(answer, context)
    expect(crashed, "expected the pipeline's error (a tf.errors.OpError) to reach you, got none")
    expect(
        digests["checkpoint"] is not None,
        "expected a checkpoint in the folder after a crash in the first epoch, got an empty "
        "folder (pass checkpoint_dir=folder and checkpoint_every=2 to fit)",
    )


def restart_equals_whole(answer, context):
    """The restarted run ends with the uninterrupted run's weights, bit for bit"""
    digests, _ = _resumed(answer, context)
    expect(
        digests["restarted"] == digests["whole"],
        "expected the restarted run's weights to equal the uninterrupted run's, got "
        "different ones (the same seed, optimizer and data in every run, and the same folder "
        "for the crash and the restart)",
    )


CASES = ((3, 14), (5, 7), (2, 19))  # (save_freq, crash_at): 8 batches per epoch, 3 epochs


def _real_restarts(context):
    """Optimizer steps of real restarts with BackupAndRestore, one per case (run once)."""
    return _real_restart_steps()


@functools.cache
def _real_restart_steps():
    """The step counts of ``_real_restarts``: they do not depend on the answer."""
    import keras
    import tensorflow as tf

    class CrashAt(keras.callbacks.Callback):
        def __init__(self, at):
            super().__init__()
            self.at, self.batches = at, 0

        def on_train_batch_end(self, batch, logs=None):
            self.batches += 1
            if self.batches == self.at:
                raise RuntimeError("the machine is gone")

    def model():
        keras.utils.set_random_seed(0)
        built = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        built.compile(keras.optimizers.Adam(0.01), "mse", jit_compile=False)
        return built

    def make():
        steps = {}
        with tf.device("/CPU:0"):
            for save_freq, crash_at in CASES:
                with tempfile.TemporaryDirectory() as folder:
                    backup = keras.callbacks.BackupAndRestore(folder, save_freq=save_freq)
                    try:
                        model().fit(
                            _small(),
                            epochs=3,
                            verbose=0,
                            shuffle=False,
                            callbacks=[backup, CrashAt(crash_at)],
                        )
                    except RuntimeError:
                        pass
                    again = model()
                    again.fit(_small(), epochs=3, verbose=0, shuffle=False, callbacks=[backup])
                    steps[save_freq, crash_at] = int(again.optimizer.iterations)
        return steps

    return make()


def _restart_check(answer, context, case):
    real = _real_restarts(context)[case]
    save_freq, crash_at = case
    got = answer(save_freq, crash_at)
    backup = crash_at // save_freq * save_freq
    likely = ""
    if got == real - backup:
        likely = " (the backup restores optimizer.iterations too: count the steps before it)"
    elif got == 24:
        likely = " (the restart does not go on from the backup's batch: it runs the backup's "
        likely += "epoch again from its first batch)"
    expect(
        got == real,
        f"expected {real} steps for save_freq={save_freq} and a crash at batch {crash_at}, got "
        f"{got}{likely}",
    )


def restart_3_14(answer, context):
    """save_freq=3, crash at batch 14: the step count of a real restart"""
    _restart_check(answer, context, CASES[0])


def restart_5_7(answer, context):
    """save_freq=5, crash at batch 7: the step count of a real restart"""
    _restart_check(answer, context, CASES[1])


def restart_2_19(answer, context):
    """save_freq=2, crash at batch 19: the step count of a real restart"""
    _restart_check(answer, context, CASES[2])


def _norms(answer, context):
    def make():
        rng = np.random.default_rng(3)
        large = (300.0 * rng.normal(size=(4, 8))).astype("float32")
        mixed, full = answer(dtype="mixed_float16"), answer()
        out_mixed, out_full = mixed(large), full(large)
        return mixed, full, large, out_mixed, out_full

    return context.once("norms", make)


def float32_formula(answer, context):
    """In float32 it is scale * x / sqrt(mean(x**2) + eps) over the last axis"""
    import keras

    rng = np.random.default_rng(4)
    x = rng.normal(size=(5, 6)).astype("float32")
    layer = answer()
    layer.build((None, 6))
    scale = rng.uniform(0.5, 2.0, size=6).astype("float32")
    expect(
        len(layer.weights) == 1 and tuple(layer.weights[0].shape) == (6,),
        f"expected one weight, scale, of shape (6,), got shapes "
        f"{[tuple(w.shape) for w in layer.weights]}",
    )
    layer.set_weights([scale])
    expected = scale * x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + 1e-6)
    gap = float(np.max(np.abs(keras.ops.convert_to_numpy(layer(x)) - expected)))
    expect(
        gap < 1e-4,
        f"expected scale * x / sqrt(mean(x**2) + eps) within 1e-4, got an error of {gap:.2g} "
        "(the mean over the last axis, keepdims=True)",
    )


def float16_out_float32_scale(answer, context):
    """Under mixed_float16 the output is float16 and scale float32"""
    import keras

    mixed, _, _, out_mixed, _ = _norms(answer, context)
    got = keras.backend.standardize_dtype(out_mixed.dtype)
    expect(
        got == "float16",
        f"expected a float16 output, got {got} (cast the result back to self.compute_dtype)",
    )
    kept = keras.backend.standardize_dtype(mixed.scale.dtype)
    expect(
        kept == "float32",
        f"expected scale in float32, got {kept} (let add_weight use the variable dtype)",
    )


def finite_for_large_inputs(answer, context):
    """Finite for inputs near 300, within 1e-2 of the float32 layer"""
    _, _, _, out_mixed, out_full = _norms(answer, context)
    mixed = np.asarray(out_mixed, "float32")
    expect(
        np.isfinite(mixed).all(),
        f"expected a finite output, got {int(np.sum(~np.isfinite(mixed)))} NaN or inf "
        "entries (square and average in float32: cast the inputs to float32 first)",
    )
    gap = float(np.max(np.abs(mixed - np.asarray(out_full))))
    expect(
        gap < 1e-2,
        f"expected the float32 layer's output within 1e-2, got a gap of {gap:.2g} (a square "
        "in float16 overflows above 256: cast the inputs to float32 first)",
    )


def _scores(x):
    import tensorflow as tf

    return tf.reduce_sum(tf.nn.relu(x @ tf.transpose(x)) ** 2, axis=1)


def _padded(answer, context, size):
    import tensorflow as tf

    def make():
        features = np.random.default_rng(size).normal(size=(size, 16)).astype("float32")
        compiled = tf.function(_scores, jit_compile=True)
        with tf.device("/CPU:0"):  # no TF32 matmuls: the comparison holds on every machine
            result = np.asarray(answer(compiled, features))
            reference = np.concatenate(
                [_scores(features[i : i + 32]).numpy() for i in range(0, size, 32)]
            )
        return result, reference, compiled.experimental_get_tracing_count()

    return context.once(f"padded {size}", make)


def _one_trace(answer, context, size):
    _, _, traces = _padded(answer, context, size)
    expect(
        traces == 1,
        f"expected 1 trace for {size} examples in batches of 32, got {traces} (pad the last "
        "batch to 32 rows of the same dtype)",
    )


def _same_results(answer, context, size):
    result, reference, _ = _padded(answer, context, size)
    expect(
        result.shape == reference.shape,
        f"expected results of shape {reference.shape}, got {result.shape} (drop the padding "
        "rows from the last batch's result)",
    )
    expect(
        np.allclose(result, reference, rtol=1e-5),
        "expected the unpadded results within rtol 1e-5, got others (pad with zeros: this "
        "function mixes rows, through x @ transpose(x))",
    )


def one_trace_100(answer, context):
    """100 examples (a last batch of 4): the function traces once"""
    _one_trace(answer, context, 100)


def same_results_100(answer, context):
    """100 examples: the results equal the unpadded ones"""
    _same_results(answer, context, 100)


def one_trace_70(answer, context):
    """70 examples (a last batch of 6): one trace, the unpadded results"""
    _one_trace(answer, context, 70)
    _same_results(answer, context, 70)


EXERCISES = (
    Exercise(
        "10.1",
        "Each replica's share of the loss.",
        FUNCTION,
        (whole_batch_share, shares_add_up, same_update),
        (
            "Each replica sees only its share of the global batch. The optimizer sums the "
            "replicas' gradients, so each share must be a part of the batch's mean, not a mean "
            "of its own.",
            "Take Keras's per-example loss (keras.losses.mean_squared_error: the mean over the "
            "last axis), sum it over this replica's examples with tf.reduce_sum, and divide the "
            "sum by global_batch_size.",
        ),
    ),
    Exercise(
        "10.2",
        "Resume in one process.",
        FUNCTION,
        (seeded, crash_leaves_checkpoint, restart_equals_whole),
        (
            "The companion's fit restores the newest checkpoint in checkpoint_dir when it "
            "starts: a restart is the same call again with the same folder.",
            "In the function: keras.utils.set_random_seed(0), build the model, call fit(model, "
            "dataset, ..., checkpoint_dir=folder, checkpoint_every=2) and return the model; "
            "catch tf.errors.OpError around the crashing call.",
        ),
    ),
    Exercise(
        "10.3",
        "Predict a restart.",
        FUNCTION,
        (restart_3_14, restart_5_7, restart_2_19),
        (
            "BackupAndRestore(save_freq=n) saves after every n-th batch, counted over epochs, "
            "and restores the weights, the optimizer (its iterations too) and the epoch.",
            "The last backup is at the largest multiple of save_freq up to the crash; the "
            "restart begins that backup's epoch again from its first batch and runs to the end.",
        ),
    ),
    Exercise(
        "10.4",
        "A layer that reduces in float32.",
        LAYER_CLASS,
        (float32_formula, float16_out_float32_scale, finite_for_large_inputs),
        (
            "90000 is above float16's largest value (65504): the square must not be taken in "
            "float16. The layer's compute_dtype is float16, its variable_dtype float32.",
            "In call: cast the inputs to float32, multiply by keras.ops.rsqrt(mean(square) + "
            "epsilon) over axis -1 with keepdims, cast back to self.compute_dtype, then "
            "multiply by scale.",
        ),
    ),
    Exercise(
        "10.5",
        "One compilation for every batch.",
        FUNCTION,
        (one_trace_100, same_results_100, one_trace_70),
        (
            "A compiled function is traced (and compiled) once per input shape: give every "
            "call the same shape.",
            "Append rows of zeros (float32, np.zeros) to a batch shorter than 32, and keep "
            "only as many rows of fn's result as the batch had before padding.",
        ),
    ),
)
