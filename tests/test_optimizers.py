import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from companion.optimizers import (
    AdamW,
    ClipGlobalNorm,
    GaussianNoise,
    Lookahead,
    MagnitudePruning,
    TaskWeights,
    TopK,
    TransformGradients,
    UpdateNormLogger,
    WarmupCosine,
    polynomial_sparsity,
    sparsity,
)
from companion.training import fit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def small_model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.LayerNormalization(),
            keras.layers.Dense(1),
        ]
    )


def regression_data(n=64, batch=16):
    x = np.random.default_rng(0).normal(size=(n, 4)).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], "float32"))[:, None]
    return x, y, tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def trajectory(optimizer, steps=100, seed=0):
    """Weights after each of ``steps`` manual steps (MSE on a fixed batch) with ``optimizer``."""
    model = small_model(seed)
    x, y, _ = regression_data()
    optimizer.build(model.trainable_variables)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = keras.losses.MeanSquaredError()(y, model(x))
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        )

    path = []
    for _ in range(steps):
        step()
        path.append(np.concatenate([w.ravel() for w in model.get_weights()]))
    return np.array(path)


def max_difference(a, b):
    return max(float(np.max(np.abs(p - q))) for p, q in zip(a.get_weights(), b.get_weights()))


# ---------------------------------------------------------------- AdamW: numerics


def test_adamw_trajectory_equals_keras_adamw_over_100_steps():
    ours = trajectory(AdamW(0.01, weight_decay=0.05, exclude_from_decay=()))
    keras_path = trajectory(keras.optimizers.AdamW(0.01, weight_decay=0.05))
    assert np.max(np.abs(ours - keras_path)) <= 1e-6
    assert np.max(np.abs(ours[-1] - ours[0])) > 0.1  # it moved


def test_default_exclusion_equals_keras_adamw_excluding_the_same_names():
    reference = keras.optimizers.AdamW(0.01, weight_decay=0.05)
    reference.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    assert (
        np.max(np.abs(trajectory(AdamW(0.01, weight_decay=0.05)) - trajectory(reference))) <= 1e-6
    )


def test_without_decay_it_equals_keras_adam():
    ours = trajectory(AdamW(0.01, weight_decay=0.0), steps=50)
    assert np.max(np.abs(ours - trajectory(keras.optimizers.Adam(0.01), steps=50))) <= 1e-6


def test_learning_rate_schedule_matches_keras():
    def schedule():
        return keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=10, decay_rate=0.5)

    ours = trajectory(AdamW(schedule(), exclude_from_decay=()), steps=40)
    theirs = trajectory(keras.optimizers.AdamW(schedule()), steps=40)
    assert np.max(np.abs(ours - theirs)) <= 1e-6
    late = np.abs(np.diff(ours[-3:], axis=0)).max()
    assert late < np.abs(np.diff(ours[:3], axis=0)).max() / 10  # the schedule shrank the steps


# Keras's published test values (keras/src/optimizers/adamw_test.py).
def test_keras_published_single_step():
    variable = keras.Variable([1.0, 2.0, 3.0, 4.0])
    AdamW(learning_rate=0.5).apply_gradients(
        zip([keras.ops.array([1.0, 6.0, 7.0, 2.0])], [variable])
    )
    np.testing.assert_allclose(
        variable.numpy(), [0.4980, 1.4960, 2.494, 3.492], rtol=1e-4, atol=1e-4
    )


def test_keras_published_weight_decay_and_exclusion():
    grads = keras.ops.zeros(())
    var1, var2, var3, var4 = (
        keras.Variable(2.0),
        keras.Variable(2.0, name="exclude"),
        keras.Variable(2.0),
        keras.Variable(2.0, name="also_excluded"),
    )
    AdamW(learning_rate=1.0, weight_decay=0.004).apply_gradients(zip([grads], [var1]))
    optimizer_2 = AdamW(learning_rate=1.0, weight_decay=0.004)
    optimizer_2.exclude_from_weight_decay(var_names=["exclude"])  # the base-class API still works
    optimizer_2.apply_gradients(zip([grads, grads], [var1, var2]))
    optimizer_3 = AdamW(learning_rate=1.0, weight_decay=0.004)
    optimizer_3.exclude_from_weight_decay(var_list=[var3])
    optimizer_3.apply_gradients(zip([grads, grads], [var1, var3]))
    optimizer_4 = AdamW(learning_rate=1.0, weight_decay=0.004, exclude_from_decay=["also"])  # ours
    optimizer_4.apply_gradients(zip([grads], [var4]))
    assert float(var1.numpy()) == pytest.approx(1.9760959, abs=1e-6)  # 2 * (1 - 0.004) ** 3
    assert float(var2.numpy()) == float(var3.numpy()) == float(var4.numpy()) == 2.0


def test_keras_published_golden_values():
    optimizer = AdamW(learning_rate=1.0, weight_decay=0.5, epsilon=2)
    x = keras.Variable(np.ones([10], dtype="float32"))
    grads = keras.ops.arange(0.1, 1.1, 0.1)
    golden = np.array(
        [
            [0.4998, 0.4998, 0.4998, 0.4998, 0.4998, 0.4998, 0.4998, 0.4998, 0.4998, 0.4998],
            [0.2486, 0.2475, 0.2463, 0.2451, 0.244, 0.2428, 0.2417, 0.2405, 0.2394, 0.2382],
            [0.1223, 0.1198, 0.1174, 0.1149, 0.1124, 0.11, 0.1075, 0.1051, 0.1027, 0.1003],
            [0.0586, 0.0549, 0.0512, 0.0475, 0.0439, 0.0402, 0.0366, 0.033, 0.0294, 0.0258],
            [0.0263, 0.0215, 0.0167, 0.012, 0.0073, 0.0026, -0.0021, -0.0067, -0.0113, -0.0159],
        ]
    )
    optimizer.apply_gradients(zip([keras.ops.full((10,), 0.01)], [x]))
    for row in golden:
        np.testing.assert_allclose(x.numpy(), row, rtol=5e-4, atol=5e-4)
        optimizer.apply_gradients(zip([grads], [x]))


def test_default_exclusion_leaves_biases_and_norms_undecayed():
    model = small_model()
    for variable in model.trainable_variables:
        variable.assign(keras.ops.ones_like(variable))
    optimizer = AdamW(0.1, weight_decay=0.5)
    optimizer.apply_gradients([(keras.ops.zeros_like(v), v) for v in model.trainable_variables])
    decayed = {v.path: float(np.max(v.numpy())) for v in model.trainable_variables}
    assert {path for path, value in decayed.items() if value < 1.0} == {
        path for path in decayed if path.endswith("kernel")
    }
    assert all(
        value == pytest.approx(0.95) for path, value in decayed.items() if path.endswith("kernel")
    )


@pytest.mark.parametrize("owner", ["beta_vae", "normalizing_flow", "unbiased_head"])
def test_default_exclusion_matches_the_variables_own_name_not_its_layers_path(owner):
    """A kernel in a layer or model named like an exclusion word is still decayed (Keras's rule)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3, name=owner)(inputs), name=owner)
    for variable in model.trainable_variables:
        variable.assign(keras.ops.ones_like(variable))
    AdamW(0.1, weight_decay=0.5).apply_gradients(
        [(keras.ops.zeros_like(v), v) for v in model.trainable_variables]
    )
    after = {v.name: float(np.max(v.numpy())) for v in model.trainable_variables}
    assert all(owner in v.path for v in model.trainable_variables)
    assert after == {"kernel": pytest.approx(0.95), "bias": 1.0}


def numpy_adam_paper(gradients, w, lr, beta_1, beta_2, epsilon):
    """Algorithm 1 of Kingma & Ba in float64: epsilon added to the bias-corrected sqrt(v_hat)."""
    m = v = np.zeros_like(w)
    for t, g in enumerate(gradients, start=1):
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g**2
        w = w - lr * (m / (1 - beta_1**t)) / (np.sqrt(v / (1 - beta_2**t)) + epsilon)
    return w


def test_paper_epsilon_placement_matches_algorithm_1_and_differs_from_keras():
    gradients = np.random.default_rng(1).normal(size=(20, 5)) * 1e-3
    finals = {}
    for placement in ("keras", "paper"):
        variable = keras.Variable(np.zeros(5, "float32"))
        optimizer = AdamW(0.01, epsilon=1e-3, weight_decay=0.0, epsilon_placement=placement)
        for g in gradients:
            optimizer.apply_gradients(
                [(keras.ops.convert_to_tensor(g.astype("float32")), variable)]
            )
        finals[placement] = variable.numpy()
    reference = numpy_adam_paper(gradients, np.zeros(5), 0.01, 0.9, 0.999, 1e-3)
    np.testing.assert_allclose(finals["paper"], reference, rtol=1e-4, atol=1e-7)
    assert np.max(np.abs(finals["paper"] - finals["keras"])) > 1e-3


# ---------------------------------------------------------------- AdamW: Keras integration


def test_config_round_trip_and_registration():
    optimizer = AdamW(
        0.5,
        beta_1=0.5,
        beta_2=0.67,
        epsilon=1e-5,
        weight_decay=0.008,
        epsilon_placement="paper",
        exclude_from_decay=["bias"],
        global_clipnorm=1.0,
    )
    config = optimizer.get_config()
    clone = AdamW.from_config(config)
    assert clone.get_config() == config and config["weight_decay"] == 0.008
    assert keras.saving.get_registered_name(AdamW) == "companion>AdamW"
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(restored, AdamW) and restored.epsilon_placement == "paper"


def test_compile_fit_and_the_companion_custom_loop_train():
    x, y, data = regression_data(128)
    model = small_model()
    model.compile(AdamW(0.02), "mse")
    history = model.fit(data, epochs=4, verbose=0, shuffle=False).history["loss"]
    custom = fit(
        small_model(),
        data,
        optimizer=AdamW(0.02),
        loss=keras.losses.MeanSquaredError(),
        epochs=4,
        progress=False,
    )["loss"]
    assert history[-1] < history[0] / 2 and custom[-1] < custom[0] / 2
    np.testing.assert_allclose(history, custom, rtol=1e-4)


def test_mixed_float16_keeps_float32_slots_and_trains():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        x, y, data = regression_data()
        model = small_model()
        model.compile(AdamW(0.02), "mse")
        history = model.fit(data, epochs=3, verbose=0, shuffle=False).history["loss"]
    finally:
        keras.config.set_dtype_policy(previous)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert isinstance(model.optimizer.inner_optimizer, AdamW)
    assert {v.dtype for v in model.optimizer.inner_optimizer.variables if "momentum" in v.path} == {
        "float32"
    }
    assert np.all(np.isfinite(history)) and history[-1] < history[0]


def make_optimizers():
    """AdamW alone, and every wrapper at once: Lookahead around transforms around AdamW."""
    return {
        "adamw": lambda: AdamW(0.01),
        "composed": lambda: Lookahead(
            TransformGradients(
                AdamW(0.01),
                [ClipGlobalNorm(5.0), GaussianNoise(0.01, seed=1), TopK(0.5)],
                record_update_norms=True,
            ),
            sync_period=3,
        ),
    }


@pytest.mark.parametrize("name", list(make_optimizers()))
def test_keras_file_and_checkpoint_round_trips_continue_identically(name, tmp_path):
    make = make_optimizers()[name]
    x, y, data = regression_data()
    model = small_model()
    model.compile(make(), "mse")
    model.fit(data, epochs=1, verbose=0, shuffle=False)
    model.save(tmp_path / "model.keras")
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(str(tmp_path / "ckpt"))

    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert type(loaded.optimizer) is type(model.optimizer)
    restored = small_model(seed=1)
    restored.compile(make(), "mse")
    restored.optimizer.build(restored.trainable_variables)
    tf.train.Checkpoint(model=restored, optimizer=restored.optimizer).read(path).assert_consumed()
    for copy in (loaded, restored):
        assert int(copy.optimizer.iterations) == 4
        assert all(
            np.array_equal(a.numpy(), b.numpy())
            for a, b in zip(model.optimizer.variables, copy.optimizer.variables)
        )
    for each in (model, loaded, restored):
        each.fit(data, epochs=2, verbose=0, shuffle=False)
    assert max_difference(model, loaded) == 0.0 and max_difference(model, restored) == 0.0


# ---------------------------------------------------------------- transforms


def apply_once(transform, gradients, variables=None, optimizer=None):
    variables = variables or [
        keras.Variable(np.zeros(np.shape(g), "float32"), name=f"v{i}")
        for i, g in enumerate(gradients)
    ]
    wrapper = TransformGradients(optimizer or keras.optimizers.SGD(1.0), [transform])
    before = [v.numpy().copy() for v in variables]
    wrapper.apply_gradients(
        [
            (keras.ops.convert_to_tensor(np.asarray(g, "float32")), v)
            for g, v in zip(gradients, variables)
        ]
    )
    return [
        b - v.numpy() for b, v in zip(before, variables)
    ], wrapper  # the applied gradients (SGD, lr 1)


def test_clip_global_norm_scales_to_the_norm_and_leaves_small_gradients():
    applied, _ = apply_once(ClipGlobalNorm(1.0), [[3.0, 0.0], [0.0, 4.0]])
    np.testing.assert_allclose(np.concatenate(applied), [0.6, 0.0, 0.0, 0.8], rtol=1e-6)
    transform = ClipGlobalNorm(10.0)
    applied, _ = apply_once(transform, [[3.0, 0.0], [0.0, 4.0]])
    np.testing.assert_allclose(np.concatenate(applied), [3.0, 0.0, 0.0, 4.0])
    assert float(transform.norm) == pytest.approx(5.0)


def test_gaussian_noise_is_seeded_and_its_stddev_decays():
    zeros = np.zeros(20_000, "float32")
    first, _ = apply_once(GaussianNoise(0.1, decay=0.55, seed=3), [zeros])
    again, _ = apply_once(GaussianNoise(0.1, decay=0.55, seed=3), [zeros])
    other, _ = apply_once(GaussianNoise(0.1, decay=0.55, seed=4), [zeros])
    assert np.array_equal(first[0], again[0]) and not np.array_equal(first[0], other[0])
    assert np.std(first[0]) == pytest.approx(0.1, rel=0.03)
    sgd = keras.optimizers.SGD(1.0)
    sgd.iterations.assign(99)
    late, _ = apply_once(GaussianNoise(0.1, decay=0.55, seed=3), [zeros], optimizer=sgd)
    assert np.std(late[0]) == pytest.approx(0.1 / 100**0.275, rel=0.03)


def test_top_k_keeps_the_largest_fraction_and_reports_it():
    gradient = np.arange(1, 101, dtype="float32") * np.where(np.arange(100) % 2, -1, 1)
    transform = TopK(0.1)
    applied, _ = apply_once(transform, [gradient, [0.5, -2.0]])
    kept = np.flatnonzero(applied[0])
    assert set(kept) == set(range(90, 100)) and np.array_equal(applied[0][kept], gradient[kept])
    assert np.array_equal(applied[1], [0.0, -2.0])  # ceil(0.1 * 2) = 1 entry kept
    assert float(transform.kept) == pytest.approx(11 / 102)


def test_task_weights_scale_each_heads_gradients_only():
    variables = [keras.Variable([0.0], name=name) for name in ("trunk", "head_a", "head_b")]
    applied, _ = apply_once(
        TaskWeights({"head_a": 2.0, "head_b": 0.0}), [[1.0], [1.0], [1.0]], variables
    )
    assert np.concatenate(applied).tolist() == [1.0, 2.0, 0.0]
    with pytest.raises(
        ValueError, match="^weights: expected keys found in variable paths, got 'head_c'"
    ):
        apply_once(TaskWeights({"head_c": 1.0}), [[1.0]])


def test_transforms_run_under_fit_and_the_update_norms_are_recorded():
    x, y, data = regression_data()
    model = small_model()
    optimizer = TransformGradients(AdamW(0.01), [ClipGlobalNorm(1.0)], record_update_norms=True)
    model.compile(optimizer, "mse")
    before = [w.copy() for w in model.get_weights()]

    class LastStep(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.before = [w.copy() for w in model.get_weights()]

    last = LastStep()
    history = model.fit(
        data, epochs=2, verbose=0, shuffle=False, callbacks=[last, UpdateNormLogger(optimizer)]
    ).history
    norms = optimizer.update_norms()
    assert list(norms) == [v.path for v in model.trainable_variables]
    expected = [float(np.linalg.norm(a - b)) for a, b in zip(model.get_weights(), last.before)]
    np.testing.assert_allclose(list(norms.values()), expected, rtol=1e-5)
    assert history["update_norm/" + model.trainable_variables[0].path][-1] == pytest.approx(
        expected[0]
    )
    assert float(optimizer.transforms[0].norm) > 0
    assert any(np.any(a != b) for a, b in zip(before, model.get_weights()))


def test_overriding_get_gradients_is_silently_ignored_in_keras_3():
    class Clipped(keras.optimizers.SGD):
        def get_gradients(self, loss, params):  # the Keras 2 hook of the article
            raise AssertionError("never called")

    variable = keras.Variable([0.0])
    Clipped(1.0).apply_gradients([(keras.ops.array([100.0]), variable)])
    assert float(variable.numpy()[0]) == -100.0  # no clipping happened, and no error either


# ---------------------------------------------------------------- pruning, Lookahead


def test_pruning_reaches_the_target_with_exact_zeros_that_stay_zero():
    x, y, data = regression_data(256, batch=16)
    model = small_model()
    model.compile(keras.optimizers.Adam(0.01), "mse")
    pruning = MagnitudePruning(0.6, begin_step=2, end_step=20, frequency=4)

    class Zeros(keras.callbacks.Callback):
        seen: list = []

        def on_train_batch_end(self, batch, logs=None):
            self.seen.append(model.layers[0].kernel.numpy() == 0)

    zeros = Zeros()
    model.fit(data, epochs=2, verbose=0, shuffle=False, callbacks=[pruning, zeros])
    kernels = [layer.kernel.numpy() for layer in (model.layers[0], model.layers[2])]
    assert [int(np.sum(k == 0)) for k in kernels] == [
        round(0.6 * k.size) for k in kernels
    ]  # 19 of 32, 5 of 8
    assert sparsity(model) == pytest.approx(24 / 40)
    assert float(np.mean(model.layers[0].bias.numpy() == 0)) < 1  # biases are not pruned
    pruned_once = np.zeros_like(zeros.seen[0])
    for mask in zeros.seen:
        assert np.all(mask[pruned_once])  # a weight once zero stays zero
        pruned_once |= mask
    assert pruning.step == 32


def test_polynomial_sparsity_rises_monotonically_to_the_target():
    levels = [
        polynomial_sparsity(t, target_sparsity=0.9, begin_step=10, end_step=110)
        for t in range(0, 130)
    ]
    assert levels[0] == levels[10] == 0.0 and levels[-1] == levels[110] == pytest.approx(0.9)
    assert all(b >= a for a, b in zip(levels, levels[1:]))


def test_lookahead_matches_a_numpy_reference():
    gradients = np.random.default_rng(2).normal(size=(10, 3)).astype("float32")
    variable = keras.Variable(np.zeros(3, "float32"))
    optimizer = Lookahead(keras.optimizers.SGD(0.1), sync_period=4, slow_step_size=0.25)
    fast, slow = np.zeros(3), np.zeros(3)
    for t, g in enumerate(gradients, start=1):
        optimizer.apply_gradients([(keras.ops.convert_to_tensor(g), variable)])
        fast = fast - 0.1 * g
        if t % 4 == 0:
            slow = slow + 0.25 * (fast - slow)
            fast = slow.copy()
        np.testing.assert_allclose(variable.numpy(), fast, rtol=1e-5, atol=1e-6)
    assert Lookahead.from_config(optimizer.get_config()).get_config() == optimizer.get_config()


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "make, error, match",
    [
        (
            lambda: AdamW(beta_1=1.0),
            ValueError,
            r"^beta_1: expected a finite number >= 0 and < 1, got float 1.0",
        ),
        (lambda: AdamW(beta_1=-0.1), ValueError, r"^beta_1: expected a finite number >= 0"),
        (lambda: AdamW(beta_2=1.5), ValueError, r"^beta_2: expected a finite number >= 0 and < 1"),
        (
            lambda: AdamW(epsilon=-1e-7),
            ValueError,
            r"^epsilon: expected a finite number >= 1\.17549e-38 and <=",
        ),
        (
            lambda: AdamW(weight_decay=-0.1),
            ValueError,
            r"^weight_decay: expected a finite number >= 0",
        ),
        (lambda: AdamW(beta_1="0.9"), TypeError, r"^beta_1: expected a finite number"),
        (
            lambda: AdamW(epsilon_placement="pytorch"),
            ValueError,
            r"^epsilon_placement: expected one of 'keras'",
        ),
        (
            lambda: AdamW(exclude_from_decay="bias"),
            TypeError,
            r"^exclude_from_decay: expected a list or tuple",
        ),
        (
            lambda: MagnitudePruning(1.0),
            ValueError,
            r"^target_sparsity: expected a finite number >= 0 and < 1",
        ),
        (
            lambda: MagnitudePruning(-0.5),
            ValueError,
            r"^target_sparsity: expected a finite number >= 0",
        ),
        (
            lambda: MagnitudePruning(0.5, begin_step=10, end_step=5),
            ValueError,
            r"^end_step: expected an int >= 11",
        ),
        (lambda: TopK(0.0), ValueError, r"^fraction: expected a finite number > 0"),
        (lambda: TopK(1.5), ValueError, r"^fraction: expected a finite number > 0 and <= 1"),
        (
            lambda: ClipGlobalNorm(0),
            ValueError,
            r"^clip_norm: expected a finite number >= 1\.17549e-38",
        ),
        (lambda: GaussianNoise(-1.0), ValueError, r"^stddev: expected a finite number >= 0"),
        (
            lambda: Lookahead("adam"),
            TypeError,
            r"^optimizer: expected a keras.optimizers.Optimizer",
        ),
        (
            lambda: Lookahead(AdamW(), sync_period=0),
            ValueError,
            r"^sync_period: expected an int >= 1",
        ),
        (
            lambda: TransformGradients(AdamW(), ClipGlobalNorm(1.0)),
            TypeError,
            r"^transforms: expected a list or tuple",
        ),
        (
            lambda: UpdateNormLogger(TransformGradients(AdamW())),
            ValueError,
            r"^optimizer: expected a Transform",
        ),
        (
            lambda: UpdateNormLogger(AdamW()),
            TypeError,
            r"^optimizer: expected a TransformGradients",
        ),
    ],
)
def test_bad_input_is_rejected_naming_the_argument(make, error, match):
    with pytest.raises(error, match=match):
        make()


# ---------------------------------------------------------------- MirroredStrategy (fresh process)

MIRRORED = """
from companion.notebook import split_cpu
split_cpu(2)
import numpy as np, tensorflow as tf, keras
import tests.test_optimizers as t
from companion.training import fit
from companion.optimizers import ClipGlobalNorm, TransformGradients
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
x, y, data = t.regression_data()
for name in ["composed"]:  # AdamW inside TransformGradients inside Lookahead
    make = t.make_optimizers()[name]
    single = t.small_model()
    single.compile(make(), "mse")
    single.fit(data, epochs=2, verbose=0, shuffle=False)
    with strategy.scope():
        model = t.small_model()
        model.compile(make(), "mse")
    model.fit(data, epochs=2, verbose=0, shuffle=False)
    with strategy.scope():
        custom, optimizer = t.small_model(), make()
    fit(custom, data, optimizer=optimizer, loss=keras.losses.MeanSquaredError(reduction=None),
        epochs=2, strategy=strategy, progress=False)
    for trained, used in ((model, model.optimizer), (custom, optimizer)):
        variables = trained.variables + used.variables
        replicas = max(float(np.max(np.abs(v.value.values[0].numpy() - v.value.values[1].numpy())))
                       for v in variables)
        print(name, len(variables), replicas, t.max_difference(trained, single) < 1e-5)
# Global clipping on two replicas whose gradients are orthogonal: Keras clips each replica's part
x2, y2 = np.array([[100.0, 0.0], [0.0, 100.0]], "float32"), np.zeros((2, 1), "float32")
pair = tf.data.Dataset.from_tensor_slices((x2, y2)).batch(2)
norms = []
for make in (lambda: keras.optimizers.SGD(1.0, global_clipnorm=1.0),
             lambda: TransformGradients(keras.optimizers.SGD(1.0), [ClipGlobalNorm(1.0)])):
    with strategy.scope():
        dense = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
        linear = keras.Sequential([keras.Input((2,)), dense])
        linear.compile(make(), "mse")
    linear.fit(pair, epochs=1, verbose=0)
    norms.append(float(np.linalg.norm(linear.get_weights()[0] - 1.0)))
print("clip", *norms)
"""


@pytest.mark.slow
def test_mirrored_strategy_replicas_agree_match_one_device_and_clip_the_global_gradient():
    from companion.notebook import run_python

    result = run_python(
        MIRRORED, env={"PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    *lines, clip = result.stdout.splitlines()[-3:]
    assert [line.split()[0] for line in lines] == ["composed"] * 2
    for line in lines:
        _, count, replicas, close = line.split()
        assert int(count) > 10 and float(replicas) == 0.0 and close == "True"
    # Keras's global_clipnorm clips each replica's part (sqrt 2); ClipGlobalNorm clips the sum (1)
    _, keras_norm, ours = clip.split()
    assert float(keras_norm) == pytest.approx(2**0.5, abs=1e-4) and float(ours) == pytest.approx(
        1.0, abs=1e-5
    )


# ------------------------------------------------------ bad values that used to pass (issue 16)

F32_MAX = float(np.finfo("float32").max)


@pytest.mark.parametrize(
    "arguments, argument, error",
    [
        ({"step": float("nan")}, "step", TypeError),
        ({"step": 2.5}, "step", TypeError),
        ({"step": -1}, "step", ValueError),
        ({"target_sparsity": 1.5}, "target_sparsity", ValueError),
        ({"target_sparsity": -1}, "target_sparsity", ValueError),
        ({"target_sparsity": 1e300}, "target_sparsity", ValueError),
        ({"target_sparsity": float("nan")}, "target_sparsity", ValueError),
        ({"initial_sparsity": 1.0}, "initial_sparsity", ValueError),
        ({"begin_step": 10, "end_step": 10}, "end_step", ValueError),
        ({"begin_step": 10, "end_step": 5}, "end_step", ValueError),
        ({"power": -1}, "power", ValueError),
        ({"power": 0}, "power", ValueError),
        ({"power": float("inf")}, "power", ValueError),
    ],
)
def test_polynomial_sparsity_checks_every_argument(arguments, argument, error):
    call = {"step": 5, "target_sparsity": 0.8, "begin_step": 0, "end_step": 10, **arguments}
    with pytest.raises(error, match=rf"^{argument}: expected .*, got "):
        polynomial_sparsity(call.pop("step"), **call)


def test_polynomial_sparsity_takes_the_optimizers_step_inside_tf_function():
    optimizer = keras.optimizers.SGD()
    optimizer.iterations.assign(5)
    level = tf.function(
        lambda: polynomial_sparsity(
            optimizer.iterations, target_sparsity=0.8, begin_step=0, end_step=10
        )
    )()
    assert float(level) == pytest.approx(
        polynomial_sparsity(5, target_sparsity=0.8, begin_step=0, end_step=10)
    )
    assert polynomial_sparsity(
        np.int64(10), target_sparsity=0.8, begin_step=0, end_step=10
    ) == pytest.approx(0.8)


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), float("-inf"), 1e300, 3.5e38, -0.001]
)
def test_adamw_refuses_learning_rates_that_would_make_the_weights_nan(value):
    with pytest.raises(
        ValueError, match=r"^learning_rate: expected a finite number >= 0 and <= 3\.40282e\+38, got"
    ):
        AdamW(learning_rate=value)


@pytest.mark.parametrize("value", ["0.01", None, [0.01], keras.Variable(0.01)])
def test_adamw_learning_rate_is_a_number_a_schedule_or_a_callable(value):
    with pytest.raises(
        TypeError, match=r"^learning_rate: expected a number, a LearningRateSchedule or a callable"
    ):
        AdamW(learning_rate=value)


def test_adamw_takes_any_real_learning_rate_as_a_float():
    assert (
        float(AdamW(1).learning_rate) == 1.0 and float(AdamW(np.float32(0.5)).learning_rate) == 0.5
    )


@pytest.mark.parametrize(
    "arguments, argument",
    [
        ({"beta_1": float("nan")}, "beta_1"),
        ({"beta_2": float("inf")}, "beta_2"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": 1e-45}, "epsilon"),
        ({"epsilon": 1e300}, "epsilon"),
        ({"weight_decay": 1e300}, "weight_decay"),
    ],
)
def test_adamw_numbers_are_checked_against_float32(arguments, argument):
    with pytest.raises(ValueError, match=rf"^{argument}: expected a finite number"):
        AdamW(**arguments)


class NanAfterOneStep(keras.optimizers.schedules.LearningRateSchedule):
    """A schedule gone wrong: fine at step 0, NaN from step 1."""

    def __call__(self, step):
        return tf.where(step < 1, 0.01, float("nan"))

    def get_config(self):
        return {}


def test_a_schedule_returning_nan_stops_fit_with_a_clear_error_and_finite_weights():
    x, y, data = regression_data()
    model = small_model()
    model.compile(AdamW(NanAfterOneStep()), "mse")
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="learning_rate: expected a finite number"
    ):
        model.fit(data, epochs=1, verbose=0, shuffle=False)
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())


def test_a_nan_learning_rate_skips_the_step_where_errors_cannot_be_raised_xla():
    x, y, data = regression_data()
    model = small_model()
    optimizer = AdamW(0.01)
    model.compile(optimizer, "mse", jit_compile=True)
    model.fit(data.take(1), epochs=1, verbose=0, shuffle=False)
    optimizer.learning_rate = float(
        "nan"
    )  # the variable is assigned: no check at construction sees it
    before = model.get_weights()
    model.fit(data, epochs=1, verbose=0, shuffle=False)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


def test_clip_global_norm_just_below_float32_max_lets_gradients_through():
    applied, _ = apply_once(
        ClipGlobalNorm(3e38), [[3.0, 4.0]]
    )  # 1 / 3e38 is below float32's normal range
    np.testing.assert_array_equal(applied[0], [3.0, 4.0])
    applied, _ = apply_once(
        ClipGlobalNorm(F32_MAX), [[3e38, 3e38]]
    )  # the norm overflows, the clip does not
    assert np.all(
        np.isnan(applied[0])
    )  # a non-finite norm is reported as NaN (tf.clip_by_global_norm's rule)
    applied, _ = apply_once(ClipGlobalNorm(1.0), [np.zeros(2)])
    np.testing.assert_array_equal(applied[0], [0.0, 0.0])
    with pytest.raises(
        ValueError, match=r"^clip_norm: expected a finite number >= 1\.17549e-38 and <= 3\.40282e"
    ):
        ClipGlobalNorm(1e300)


def test_gaussian_noise_stddev_is_capped_where_the_noise_stays_finite():
    with pytest.raises(
        ValueError, match=r"^stddev: expected a finite number >= 0 and <= 4\.25353e\+37, got"
    ):
        GaussianNoise(1e300)
    with pytest.raises(ValueError, match=r"^stddev: expected"):
        GaussianNoise(F32_MAX / 7)
    with pytest.raises(ValueError, match=r"^decay: expected"):
        GaussianNoise(0.1, decay=1e300)
    with pytest.raises(ValueError, match=r"^seed: expected an int >= 0 and <= 4294967295"):
        GaussianNoise(0.1, seed=10**12)
    applied, _ = apply_once(GaussianNoise(F32_MAX / 8, seed=1), [np.zeros(100_000)])
    assert np.all(np.isfinite(applied[0]))


@pytest.mark.parametrize(
    "value, error",
    [
        ("abc", TypeError),
        ({"w": np.zeros(2)}, TypeError),
        ([None], TypeError),
        (None, TypeError),
        ([], ValueError),
        (np.zeros(0), ValueError),
        (["a"], TypeError),
    ],
)
def test_sparsity_refuses_what_is_not_weights(value, error):
    with pytest.raises(error, match=r"^variables(\[0\])?: expected"):
        sparsity(value)


def test_sparsity_of_a_variable_an_array_a_layer_and_a_model():
    model = small_model()
    kernel = model.layers[0].kernel
    kernel.assign(np.zeros(kernel.shape, "float32"))
    assert sparsity(kernel) == 1.0 and sparsity(np.array([0.0, 1.0, 2.0, 0.0])) == 0.5
    assert sparsity(model.layers[0]) == 1.0 and sparsity(model) == pytest.approx(32 / 40)


def test_task_weights_refuse_an_empty_key_that_would_match_every_variable():
    with pytest.raises(ValueError, match=r"^weights: expected .*non-empty str"):
        TaskWeights({"": 0.0})
    with pytest.raises(
        ValueError, match=r"^weights\['head'\]: expected a finite number >= 0 and <= 3\.40282e"
    ):
        TaskWeights({"head": 1e300})


def test_transforms_refuse_a_string():
    with pytest.raises(
        TypeError, match=r"^transforms: expected a list or tuple of GradientTransform"
    ):
        TransformGradients(AdamW(), "")


@pytest.mark.parametrize(
    "make",
    [
        lambda name: Lookahead(AdamW(), name=name),
        lambda name: TransformGradients(AdamW(), name=name),
    ],
)
def test_wrapper_names_are_checked(make):
    with pytest.raises(TypeError, match=r"^name: expected a non-empty str or None, got int 3"):
        make(3)
    with pytest.raises(
        ValueError, match=r"^name: expected a non-empty str or None, got an empty str"
    ):
        make("")


def layer_named_kernel_net():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    outputs = keras.layers.Dense(1, name="out")(keras.layers.Dense(8, name="kernel_net")(inputs))
    return keras.Model(inputs, outputs, name="kernel_model")


def test_pruning_by_default_prunes_kernels_not_the_weights_of_a_layer_named_kernel():
    model = layer_named_kernel_net()
    model.compile(keras.optimizers.SGD(0.01), "mse")
    x = np.random.default_rng(0).normal(size=(32, 8)).astype("float32")
    pruning = MagnitudePruning(0.5, begin_step=0, end_step=2, frequency=1)
    model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0, callbacks=[pruning])
    assert [v.path.split("/")[-2:] for v in pruning.pruned] == [
        ["kernel_net", "kernel"],
        ["out", "kernel"],
    ]
    assert sorted(path.split("/")[-2] for path in pruning.masks) == ["kernel_net", "out"]
    assert sparsity(model) == pytest.approx(36 / 72)  # the two kernels only


def test_pruning_include_with_a_slash_selects_by_path():
    model = layer_named_kernel_net()
    pruning = MagnitudePruning(0.5, include=["out/kernel"])
    pruning.set_model(model)
    pruning.on_train_begin()
    assert [v.path.split("/")[-2:] for v in pruning.pruned] == [["out", "kernel"]]
    unmatched = MagnitudePruning(0.5, include=["nothing"])
    unmatched.set_model(model)
    with pytest.raises(ValueError, match=r"^include: expected .*, got tuple \('nothing',\)"):
        unmatched.on_train_begin()


# ---------------------------------------------------------------- WarmupCosine (issue 18)

SCHEDULES = [  # base_lr, warmup_steps, decay_steps, alpha, warmup_start
    (0.1, 10, 50, 0.0, 0.0),
    (1e-3, 0, 100, 0.1, 0.0),  # no warmup
    (0.05, 7, 13, 0.25, 0.01),
    (0.7, 3, 1000, 0.0, 0.9),  # a warmup that goes down
    (3e-4, 1, 1, 1.0, 0.0),  # alpha 1: constant after the warmup
]


def keras_cosine(base_lr, warmup_steps, decay_steps, alpha, warmup_start):
    return keras.optimizers.schedules.CosineDecay(
        warmup_start, decay_steps, alpha=alpha, warmup_target=base_lr, warmup_steps=warmup_steps
    )


@pytest.mark.parametrize("settings", SCHEDULES)
def test_warmup_cosine_equals_keras_cosine_decay_bit_for_bit(settings):
    """Exactly equal, eager and in a tf.function: the same float32 operations in the same order
    (and a conditional, as Keras's; with ``ops.where`` graph optimization changes the last bits).
    """
    base_lr, warmup, decay, alpha, start = settings
    ours, theirs = WarmupCosine(*settings), keras_cosine(*settings)
    steps = range(warmup + decay + 11)
    eager = np.array([float(ours(t)) for t in steps])
    assert np.array_equal(eager, [float(theirs(t)) for t in steps])
    step = tf.Variable(0, dtype=tf.int64)  # what an optimizer passes: its int64 counter
    ours_graph, theirs_graph = tf.function(ours.__call__), tf.function(theirs.__call__)
    for t in steps:
        step.assign(t)
        assert float(ours_graph(step)) == float(theirs_graph(step)) == eager[t]
    # and the formula in float64, within float32 rounding
    s = np.minimum(np.arange(len(steps)), warmup + decay)
    cosine = 0.5 * (1 + np.cos(np.pi * (s - warmup) / decay))
    exact = np.where(
        s < warmup,
        start + (base_lr - start) * s / max(warmup, 1),
        base_lr * ((1 - alpha) * cosine + alpha),
    )
    # float32 rounding: relative to the rate, and absolute where the cosine nears 0
    np.testing.assert_allclose(eager, exact, rtol=1e-6, atol=1e-7 * max(base_lr, start))
    assert eager[0] == np.float32(start if warmup else base_lr)
    assert eager[warmup] == pytest.approx(base_lr, rel=1e-6)
    assert np.all(eager[warmup + decay :] == eager[-1])  # constant after the decay
    assert eager[-1] == pytest.approx(alpha * base_lr, rel=1e-6, abs=1e-12)


def test_warmup_cosine_serializes_and_deserializes():
    schedule = WarmupCosine(0.05, 7, 13, alpha=0.25, warmup_start=0.01)
    config = keras.optimizers.schedules.serialize(schedule)
    assert config["registered_name"] == "companion>WarmupCosine"
    copy = keras.optimizers.schedules.deserialize(json.loads(json.dumps(config)))
    assert type(copy) is WarmupCosine and copy.get_config() == schedule.get_config()
    assert [float(copy(t)) for t in range(25)] == [float(schedule(t)) for t in range(25)]


FRESH_SCHEDULE = """
import keras
import companion.optimizers  # registers WarmupCosine and AdamW, as a reader's script would
optimizer = keras.saving.load_model({path!r}).optimizer
print(type(optimizer._learning_rate).__name__, int(optimizer.iterations))
print(repr(float(optimizer.learning_rate)), repr(float(optimizer._learning_rate(9))))
"""


def test_warmup_cosine_in_a_keras_file_gives_the_same_rate_in_a_fresh_process(tmp_path):
    from companion.notebook import run_python

    x, y, data = regression_data()
    model = small_model()
    model.compile(AdamW(WarmupCosine(0.01, 3, 10, alpha=0.1)), "mse")
    model.fit(data, epochs=1, verbose=0, shuffle=False)  # 4 steps: into the decay
    path = tmp_path / "model.keras"
    model.save(path)
    result = run_python(
        FRESH_SCHEDULE.format(path=str(path)),
        env={"PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    kind, rate = result.stdout.splitlines()[-2:]
    assert kind == "WarmupCosine 4"
    expected = (float(model.optimizer.learning_rate), float(WarmupCosine(0.01, 3, 10, 0.1)(9)))
    assert tuple(float(r) for r in rate.split()) == expected


def checkpoint_run(tmp_path, steps, stop=None):
    """Weights after ``steps`` steps of AdamW(WarmupCosine); with ``stop``, the run is saved at
    step ``stop`` and continued by a new model and optimizer restored from the checkpoint."""
    x, y, _ = regression_data()

    def new():
        model = small_model(seed=1)
        optimizer = AdamW(WarmupCosine(0.02, 4, 12, alpha=0.05))
        optimizer.build(model.trainable_variables)
        return model, optimizer

    def train(model, optimizer, count):
        for _ in range(count):
            with tf.GradientTape() as tape:
                loss = keras.losses.MeanSquaredError()(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

    model, optimizer = new()
    model.set_weights(small_model().get_weights())
    if stop is None:
        train(model, optimizer, steps)
        return model
    train(model, optimizer, stop)
    path = tf.train.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "ck"))
    resumed, resumed_optimizer = new()  # other initial weights, a fresh step counter
    tf.train.Checkpoint(model=resumed, optimizer=resumed_optimizer).read(path).assert_consumed()
    assert int(resumed_optimizer.iterations) == stop
    train(resumed, resumed_optimizer, steps - stop)
    return resumed


def test_resuming_a_warmup_cosine_run_from_a_checkpoint_continues_exactly(tmp_path):
    whole = checkpoint_run(tmp_path, 20)
    for stop in (2, 9):  # inside the warmup, inside the decay
        assert max_difference(whole, checkpoint_run(tmp_path / str(stop), 20, stop)) == 0.0
    assert max_difference(whole, small_model()) > 0.01  # it trained


def test_per_layer_rates_follow_the_schedule_exactly():
    """SGD(WarmupCosine) behind TaskWeights: the weighted layer moves by exactly 0.1 x rate x g."""
    schedule = WarmupCosine(0.5, 3, 5, alpha=0.2, warmup_start=0.05)
    optimizer = TransformGradients(keras.optimizers.SGD(schedule), [TaskWeights({"head": 0.1})])
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, name="body"), keras.layers.Dense(1, name="head")]
    )
    x, y, _ = regression_data()
    for t in range(12):
        with tf.GradientTape() as tape:
            loss = keras.losses.MeanSquaredError()(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        before = [v.numpy() for v in model.trainable_variables]
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        rate = np.float32(schedule(t))
        for variable, old, g in zip(model.trainable_variables, before, grads):
            factor = np.float32(0.1 if "/head/" in variable.path else 1.0)
            expected = old - g.numpy() * factor * rate  # SGD: w -= lr * g, in float32
            assert np.array_equal(variable.numpy(), expected), (t, variable.path)
    assert int(optimizer.iterations) == 12


# ------------------------------------------- the base class's features with our update_step


GRADIENTS = [
    np.array([0.3, -1.2, 2.0], "float32"),
    np.array([-0.7, 0.4, 1.1], "float32"),
    np.array([1.5, 0.2, -0.3], "float32"),
    np.array([0.1, -0.9, 0.6], "float32"),
]


def steps_on_one_variable(optimizer, gradients):
    variable = keras.Variable(np.array([1.0, -2.0, 0.5], "float32"), name="kernel")
    for gradient in gradients:
        optimizer.apply_gradients([(keras.ops.convert_to_tensor(gradient), variable)])
    return variable.numpy()


def means_of_pairs(gradients):
    return [(a + b) / 2 for a, b in zip(gradients[::2], gradients[1::2])]


@pytest.mark.parametrize("wrapped", [False, True])
def test_gradient_accumulation_equals_one_step_on_the_mean_gradient(wrapped):
    def make(**kwargs):
        adamw = AdamW(0.1, weight_decay=0.1, **kwargs)
        return TransformGradients(adamw, [TaskWeights({"kernel": 0.5})]) if wrapped else adamw

    accumulating = make(gradient_accumulation_steps=2)
    result = steps_on_one_variable(accumulating, GRADIENTS)
    assert np.array_equal(result, steps_on_one_variable(make(), means_of_pairs(GRADIENTS)))
    # iterations counts updates (it drives AdamW's bias correction); the schedule's step does not
    inner = accumulating.inner_optimizer if wrapped else accumulating
    assert int(accumulating.iterations) == 2 and int(inner._iterations) == 4


def test_with_gradient_accumulation_a_schedule_counts_micro_batches():
    schedule = WarmupCosine(1.0, 4, 4)
    seen = []

    class Recording(keras.optimizers.SGD):
        def update_step(self, gradient, variable, learning_rate):
            seen.append(float(learning_rate))
            super().update_step(gradient, variable, learning_rate)

    steps_on_one_variable(Recording(schedule, gradient_accumulation_steps=2), GRADIENTS)
    assert seen == [float(schedule(1)), float(schedule(3))]  # not schedule(0), schedule(1)


def test_use_ema_keeps_the_moving_average_a_hand_computation_gives():
    optimizer = AdamW(0.1, use_ema=True, ema_momentum=0.9)
    variable = keras.Variable(np.array([1.0, -2.0, 0.5], "float32"))
    average, momentum = None, np.float32(0.9)
    for gradient in GRADIENTS:
        optimizer.apply_gradients([(keras.ops.convert_to_tensor(gradient), variable)])
        weights = variable.numpy()
        # the first step copies the weights; then average = m * average + (1 - m) * weights
        average = weights if average is None else momentum * average + (1 - momentum) * weights
        assert np.array_equal(optimizer._model_variables_moving_average[0].numpy(), average)
    assert not np.array_equal(variable.numpy(), average)
    optimizer.finalize_variable_values([variable])
    assert np.array_equal(variable.numpy(), average)


def fitted(optimizer, epochs=2):
    _, _, data = regression_data()
    model = small_model()
    model.compile(optimizer, "mse")
    model.fit(data, epochs=epochs, verbose=0, shuffle=False)
    return model


def test_use_ema_under_fit_ends_on_the_average_also_through_transform_gradients():
    alone = fitted(AdamW(0.01, use_ema=True))
    wrapped = fitted(TransformGradients(AdamW(0.01, use_ema=True), [TaskWeights({"dense": 1.0})]))
    assert max_difference(alone, wrapped) == 0.0
    assert max_difference(alone, fitted(AdamW(0.01))) > 1e-3  # fit ended on the average


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: AdamW(0.01, **kw),
        lambda **kw: TransformGradients(
            AdamW(0.01, **kw), [TaskWeights({"layer_normalization": 0.5})]
        ),
        lambda **kw: Lookahead(AdamW(0.01, **kw), sync_period=3),
    ],
    ids=["AdamW", "TransformGradients", "Lookahead"],
)
def test_loss_scale_factor_gives_the_same_weights_as_no_scaling(make):
    """fit scales the loss by 1024 and the optimizer divides the gradients by it: exact for a
    power of two. Wrappers pass scale_loss on to the optimizer they hold (without that, fit did
    not scale and the gradients came out 1024 times too small)."""
    scaled = make(loss_scale_factor=1024.0)
    assert float(scaled.scale_loss(tf.constant(1.0))) == 1024.0
    assert max_difference(fitted(make()), fitted(scaled)) == 0.0


def test_transforms_see_the_unscaled_gradient():
    clipped = TransformGradients(keras.optimizers.SGD(0.01), [ClipGlobalNorm(1.0)])
    scaled = TransformGradients(
        keras.optimizers.SGD(0.01, loss_scale_factor=1024.0), [ClipGlobalNorm(1.0)]
    )
    a, b = fitted(clipped), fitted(scaled)
    assert float(clipped.transforms[0].norm) == pytest.approx(float(scaled.transforms[0].norm))
    assert float(scaled.transforms[0].norm) > 1.0  # the clip was active
    # exact outside fit (eager and tf.function); inside fit's step at most a float32 rounding
    assert max_difference(a, b) <= 1e-7
