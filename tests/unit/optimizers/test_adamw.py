"""companion.optimizers._adamw: AdamW against Keras's AdamW and Adam, the papers, and the base
optimizer's features (gradient accumulation, EMA, loss scaling)."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers.optimizer_helpers import fitted, make_optimizers, trajectory
from helpers.small_models import max_difference, regressor, regressor_data

from companion.optimizers import (
    AdamW,
    TaskWeights,
    TransformGradients,
    WarmupCosine,
)
from companion.training import fit


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
    model = regressor()
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
    x, y, data = regressor_data(128)
    model = regressor()
    model.compile(AdamW(0.02), "mse")
    history = model.fit(data, epochs=4, verbose=0, shuffle=False).history["loss"]
    custom = fit(
        regressor(),
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
        x, y, data = regressor_data()
        model = regressor()
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


@pytest.mark.parametrize("name", list(make_optimizers()))
def test_keras_file_and_checkpoint_round_trips_continue_identically(name, tmp_path):
    make = make_optimizers()[name]
    x, y, data = regressor_data()
    model = regressor()
    model.compile(make(), "mse")
    model.fit(data, epochs=1, verbose=0, shuffle=False)
    model.save(tmp_path / "model.keras")
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(str(tmp_path / "ckpt"))

    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert type(loaded.optimizer) is type(model.optimizer)
    restored = regressor(seed=1)
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
    x, y, data = regressor_data()
    model = regressor()
    model.compile(AdamW(NanAfterOneStep()), "mse")
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="learning_rate: expected a finite number"
    ):
        model.fit(data, epochs=1, verbose=0, shuffle=False)
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())


def test_a_nan_learning_rate_skips_the_step_where_errors_cannot_be_raised_xla():
    x, y, data = regressor_data()
    model = regressor()
    optimizer = AdamW(0.01)
    model.compile(optimizer, "mse", jit_compile=True)
    model.fit(data.take(1), epochs=1, verbose=0, shuffle=False)
    optimizer.learning_rate = float(
        "nan"
    )  # the variable is assigned: no check at construction sees it
    before = model.get_weights()
    model.fit(data, epochs=1, verbose=0, shuffle=False)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


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


def test_use_ema_under_fit_ends_on_the_average_also_through_transform_gradients():
    alone = fitted(AdamW(0.01, use_ema=True))
    wrapped = fitted(TransformGradients(AdamW(0.01, use_ema=True), [TaskWeights({"dense": 1.0})]))
    assert max_difference(alone, wrapped) == 0.0
    assert max_difference(alone, fitted(AdamW(0.01))) > 1e-3  # fit ended on the average


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
    ],
)
def test_bad_input_is_rejected_naming_the_argument_adamw(make, error, match):
    with pytest.raises(error, match=match):
        make()
