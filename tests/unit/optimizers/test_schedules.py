"""companion.optimizers._schedules: WarmupCosine against Keras's CosineDecay, saved and resumed."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers.small_models import max_difference, regressor, regressor_data

from companion.optimizers import (
    AdamW,
    TaskWeights,
    TransformGradients,
    WarmupCosine,
)

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

    x, y, data = regressor_data()
    model = regressor()
    model.compile(AdamW(WarmupCosine(0.01, 3, 10, alpha=0.1)), "mse")
    model.fit(data, epochs=1, verbose=0, shuffle=False)  # 4 steps: into the decay
    path = tmp_path / "model.keras"
    model.save(path)
    result = run_python(FRESH_SCHEDULE.format(path=str(path)))
    assert result.returncode == 0, result.stderr[-3000:]
    kind, rate = result.stdout.splitlines()[-2:]
    assert kind == "WarmupCosine 4"
    expected = (float(model.optimizer.learning_rate), float(WarmupCosine(0.01, 3, 10, 0.1)(9)))
    assert tuple(float(r) for r in rate.split()) == expected


def checkpoint_run(tmp_path, steps, stop=None):
    """Weights after ``steps`` steps of AdamW(WarmupCosine); with ``stop``, the run is saved at
    step ``stop`` and continued by a new model and optimizer restored from the checkpoint."""
    x, y, _ = regressor_data()

    def new():
        model = regressor(seed=1)
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
    model.set_weights(regressor().get_weights())
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
    assert max_difference(whole, regressor()) > 0.01  # it trained


def test_per_layer_rates_follow_the_schedule_exactly():
    """SGD(WarmupCosine) behind TaskWeights: the weighted layer moves by exactly 0.1 x rate x g."""
    schedule = WarmupCosine(0.5, 3, 5, alpha=0.2, warmup_start=0.05)
    optimizer = TransformGradients(keras.optimizers.SGD(schedule), [TaskWeights({"head": 0.1})])
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, name="body"), keras.layers.Dense(1, name="head")]
    )
    x, y, _ = regressor_data()
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
