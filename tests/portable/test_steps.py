"""Chapter 14's steps, hand-written loop and gradient on this backend: each trains the ordinary
model (an L2 regularizer, an add_loss term, Dropout, BatchNormalization, sample weights, an
unweighted and a weighted metric) as Keras's own ``fit`` and ``evaluate`` do."""

import keras
import numpy as np
import pytest

from companion.backends import (
    TEST_STEPS,
    TRAIN_STEPS,
    CustomStepModel,
    gradient,
    ordinary_data,
    ordinary_model,
    step_gaps,
    step_losses,
    train_by_hand,
)

BACKEND = keras.backend.backend()
#: float32 rounding: the steps run the operations of Keras's own steps in the same order
#: (measured 0.0 on a CPU on all three backends); 1e-5 leaves room for another device's kernels.
BOUND = 1e-5


def test_the_custom_steps_equal_kerass_under_fit_and_evaluate():
    gaps = step_gaps(CustomStepModel, epochs=2)
    assert gaps["weights"] <= BOUND, gaps  # every weight, BatchNormalization's statistics too
    assert gaps["history"] <= BOUND, gaps  # loss, mae and weighted_mae of both epochs
    assert gaps["evaluate"] <= BOUND, gaps
    assert gaps["moved"] > 1e-2, gaps  # training moved the weights: the gaps mean something


class WithoutSampleWeights(keras.Model):
    """The backend's step, handed the batch without its sample weights: a step to catch."""

    def train_step(self, *args):
        *state, data = args
        x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
        return TRAIN_STEPS[BACKEND](self, *state, (x, y))


def test_a_step_that_drops_the_sample_weights_is_seen():
    gaps = step_gaps(WithoutSampleWeights, epochs=1)
    assert gaps["weights"] > 1e-3 and gaps["history"] > 1e-3, gaps


def test_evaluate_runs_the_custom_test_step():
    calls = []

    class Counted(keras.Model):
        train_step = TRAIN_STEPS[BACKEND]

        def test_step(self, *args):
            calls.append(len(args))  # JAX traces it once; the others call it per batch
            return TEST_STEPS[BACKEND](self, *args)

    x, y, weights = ordinary_data()
    logs = [
        model.evaluate(x, y, sample_weight=weights, batch_size=16, verbose=0, return_dict=True)
        for model in (ordinary_model(Counted), ordinary_model())
    ]
    assert calls and sorted(logs[0]) == sorted(logs[1]) == ["loss", "mae", "weighted_mae"]
    for name, value in logs[1].items():
        assert logs[0][name] == pytest.approx(value, rel=BOUND, abs=0), name
    assert logs[1]["mae"] != pytest.approx(logs[1]["weighted_mae"], rel=1e-3)


def test_train_by_hand_twice_equals_two_epochs_of_fit():
    x, y, weights = ordinary_data()
    looped, fitted = ordinary_model(), ordinary_model()
    start = [keras.ops.convert_to_numpy(w) for w in looped.weights]
    for _ in range(2):  # the second call goes on from the first: Adam's state included
        train_by_hand(looped, x, y, sample_weight=weights)
    fitted.fit(x, y, sample_weight=weights, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert int(looped.optimizer.iterations) == int(fitted.optimizer.iterations) == 10
    for ours, theirs in zip(looped.optimizer.variables, fitted.optimizer.variables):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=BOUND, err_msg=ours.path)
    assert len(looped.weights) == len(fitted.weights) == 12
    for ours, theirs, before in zip(looped.weights, fitted.weights, start):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=BOUND, err_msg=ours.path)
        assert np.max(np.abs(keras.ops.convert_to_numpy(ours) - before)) > 1e-4, ours.path


def test_train_by_hand_follows_the_regularizers_gradient():
    kernel = keras.regularizers.L2(1.0)
    layer = keras.layers.Dense(
        1, use_bias=False, kernel_initializer="ones", kernel_regularizer=kernel
    )
    model = keras.Sequential([keras.Input((1,)), layer])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    zeros = np.zeros((4, 1), "float32")  # the data's gradient is 0
    train_by_hand(model, zeros, zeros, batch_size=4)
    # L2(1.0)'s gradient at w = 1 is 2: one step of SGD(0.1) gives 1 - 0.1 * 2
    assert float(keras.ops.convert_to_numpy(layer.kernel)[0, 0]) == pytest.approx(0.8, abs=1e-6)


def test_stepmodel_trains_as_kerass_step():
    np.testing.assert_allclose(step_losses(True), step_losses(False), rtol=BOUND)


def test_gradient_is_this_backends_autodiff():
    x = np.array([-1.0, 0.5, 2.0], "float32")
    got = gradient(lambda t: keras.ops.sin(t) * t, x)
    np.testing.assert_allclose(got, np.cos(x) * x + np.sin(x), atol=1e-6)


def test_gradient_of_float64_is_float32_on_jax_without_x64():
    x = np.array([1.0, -3.0])  # float64
    got = gradient(lambda t: t * t, x)
    x64 = BACKEND == "jax" and __import__("jax").config.jax_enable_x64
    assert got.dtype == ("float32" if BACKEND == "jax" and not x64 else "float64")
    np.testing.assert_allclose(got, 2 * x)
