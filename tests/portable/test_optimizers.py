"""``companion.optimizers`` on the running backend: against Keras's own optimizers in ``fit``."""

import keras
import numpy as np
import pytest
from keras import ops

from companion.optimizers import (
    AdamW,
    ClipGlobalNorm,
    GaussianNoise,
    Lookahead,
    MagnitudePruning,
    TopK,
    TransformGradients,
    UpdateNormLogger,
    WarmupCosine,
    sparsity,
)


def data(rows=64):
    x = np.random.default_rng(0).normal(size=(rows, 8)).astype("float32")
    return x, x[:, :4] * 3.0


def trained(optimizer, *, epochs=2, callbacks=(), jit_compile="auto"):
    """A Dense(16) → Dense(4) model from seed 0, fitted with ``optimizer``; its weights."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(4)]
    )
    model.compile(optimizer, "mse", jit_compile=jit_compile)
    x, y = data()
    model.fit(x, y, batch_size=8, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks)
    return model


def max_difference(first, second):
    return max(
        float(np.max(np.abs(a - b))) for a, b in zip(first.get_weights(), second.get_weights())
    )


def test_adamw_trains_as_keras_adamw_with_the_biases_excluded():
    ours = trained(AdamW(0.01, weight_decay=0.1))
    reference = keras.optimizers.AdamW(0.01, weight_decay=0.1)
    reference.exclude_from_weight_decay(var_names=["bias"])
    theirs = trained(reference)
    # The same operations in the same order: 0.0 on TensorFlow and JAX; PyTorch's Keras AdamW is
    # its own _foreach implementation, 2.4e-7 here after 16 steps (weights of size ~1: a few
    # float32 ulps, 1.2e-7 each).
    bound = 1e-6 if keras.backend.backend() == "torch" else 0.0
    assert max_difference(ours, theirs) <= bound


def test_adamw_decays_the_kernels_it_should():
    without = trained(AdamW(0.01, weight_decay=0.0))
    decayed = trained(AdamW(0.01, weight_decay=0.5))
    kernels = [w for w, v in zip(decayed.get_weights(), decayed.weights) if "kernel" in v.path]
    plain = [w for w, v in zip(without.get_weights(), without.weights) if "kernel" in v.path]
    assert sum(np.abs(k).sum() for k in kernels) < sum(np.abs(k).sum() for k in plain)


def test_a_nonfinite_learning_rate_leaves_the_weights_unchanged_off_tensorflow():
    variable = keras.Variable([1.0, 2.0])
    optimizer = AdamW(learning_rate=lambda: float("nan"))
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf  # the eager check stops the step with a clear error

        with pytest.raises(tf.errors.InvalidArgumentError, match="learning_rate"):
            optimizer.apply_gradients([(ops.array([1.0, 1.0]), variable)])
    else:
        optimizer.apply_gradients([(ops.array([1.0, 1.0]), variable)])
    np.testing.assert_array_equal(ops.convert_to_numpy(variable), [1.0, 2.0])


def test_warmup_cosine_equals_keras_cosine_decay_with_warmup_bit_for_bit():
    ours = WarmupCosine(0.1, warmup_steps=5, decay_steps=10, alpha=0.1, warmup_start=0.01)
    keras_schedule = keras.optimizers.schedules.CosineDecay(
        0.01, 10, alpha=0.1, warmup_target=0.1, warmup_steps=5
    )
    for step in range(20):
        assert float(ops.convert_to_numpy(ours(step))) == float(
            ops.convert_to_numpy(keras_schedule(step))
        )


def test_warmup_cosine_drives_an_optimizer_inside_fit():
    schedule = WarmupCosine(0.01, warmup_steps=4, decay_steps=8)
    keras_schedule = keras.optimizers.schedules.CosineDecay(
        0.0, 8, warmup_target=0.01, warmup_steps=4
    )
    ours = trained(keras.optimizers.Adam(schedule))
    theirs = trained(keras.optimizers.Adam(keras_schedule))
    assert max_difference(ours, theirs) == 0.0


def test_magnitude_pruning_prunes_inside_fit():
    # On JAX fit detaches the values from the variables during an epoch: a callback that kept the
    # variables from on_train_begin read None there ("'NoneType' object is not callable").
    pruning = MagnitudePruning(0.75, begin_step=0, end_step=4, frequency=2)
    model = trained("adam", epochs=1, callbacks=[pruning])
    assert sparsity(model) == 0.75
    first = model.layers[0].kernel
    assert np.count_nonzero(ops.convert_to_numpy(first)) == round(0.25 * 8 * 16)


def test_lookahead_syncing_every_step_halfway_is_sgd_at_half_the_rate():
    # k = 1, alpha = 0.5: the slow weights move to w - lr * g / 2 and the fast ones follow.
    ours = trained(Lookahead(keras.optimizers.SGD(0.1), sync_period=1, slow_step_size=0.5))
    theirs = trained(keras.optimizers.SGD(0.05))
    assert max_difference(ours, theirs) < 1e-6  # w + 0.5 * (w - 0.1 g - w) against w - 0.05 g


def test_lookahead_resets_the_fast_weights_every_k_steps():
    variable = keras.Variable([0.0])
    optimizer = Lookahead(keras.optimizers.SGD(1.0), sync_period=2, slow_step_size=0.5)
    values = []
    for _ in range(4):
        optimizer.apply_gradients([(ops.array([-1.0]), variable)])
        values.append(float(ops.convert_to_numpy(variable)[0]))
    # fast 0 → 1 → 2, slow 0 → 1 (halfway), fast reset to 1; fast 1 → 2 → 3, slow 1 → 2
    assert values == [1.0, 1.0, 2.0, 2.0]


def test_clip_global_norm_transform_trains_as_global_clipnorm():
    ours = trained(TransformGradients(keras.optimizers.SGD(0.1), [ClipGlobalNorm(0.5)]))
    theirs = trained(keras.optimizers.SGD(0.1, global_clipnorm=0.5))
    # Keras scales by clip / max(norm, clip), the companion by 1 / max(norm / clip, 1)
    assert max_difference(ours, theirs) < 1e-6


def test_recorded_update_norms_reach_the_logs():
    optimizer = TransformGradients(
        keras.optimizers.SGD(0.1), [TopK(0.5), GaussianNoise(0.01, seed=2**32 - 1)],
        record_update_norms=True,
    )  # fmt: skip
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile(optimizer, "mse")
    x, y = data()
    before = model.get_weights()
    history = model.fit(
        x, y, batch_size=64, epochs=1, verbose=0, callbacks=[UpdateNormLogger(optimizer)]
    ).history
    change = np.linalg.norm(model.get_weights()[0] - before[0])  # one step: one update
    logged = history[f"update_norm/{model.layers[0].kernel.path}"][0]
    assert logged == pytest.approx(change, rel=1e-5)
    assert 0 < float(ops.convert_to_numpy(optimizer.transforms[0].kept)) < 1


def test_gaussian_noise_is_a_function_of_the_seed_and_the_step():
    def noisy(seed, step):
        gradients = [ops.zeros((3, 2)), None]
        return ops.convert_to_numpy(GaussianNoise(1.0, seed=seed)(gradients, [None] * 2, step)[0])

    np.testing.assert_array_equal(noisy(7, 3), noisy(7, 3))
    assert not np.array_equal(noisy(7, 3), noisy(7, 4))
    assert not np.array_equal(noisy(7, 3), noisy(8, 3))
    assert 0.1 < np.std(noisy(2**32 - 1, 0)) < 10  # the largest seed works on every backend
