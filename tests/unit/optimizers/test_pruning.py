"""companion.optimizers._pruning: the sparsity schedule, the sparsity measure, magnitude pruning."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers.small_models import regressor, regressor_data

from companion.optimizers import (
    MagnitudePruning,
    polynomial_sparsity,
    sparsity,
)


def test_pruning_reaches_the_target_with_exact_zeros_that_stay_zero():
    x, y, data = regressor_data(256, batch=16)
    model = regressor()
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
        ({"begin_step": 10, "end_step": 10}, "begin_step", ValueError),  # the pair out of order
        ({"begin_step": 10, "end_step": 5}, "begin_step", ValueError),
        ({"begin_step": 11}, "begin_step", ValueError),  # only begin_step given: it is named
        ({"end_step": 0}, "end_step", ValueError),
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
    model = regressor()
    kernel = model.layers[0].kernel
    kernel.assign(np.zeros(kernel.shape, "float32"))
    assert sparsity(kernel) == 1.0 and sparsity(np.array([0.0, 1.0, 2.0, 0.0])) == 0.5
    assert sparsity(model.layers[0]) == 1.0 and sparsity(model) == pytest.approx(32 / 40)


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


@pytest.mark.parametrize(
    "make, error, match",
    [
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
            r"^begin_step: expected an int >= 0 and < end_step \(5\), got int 10",
        ),
    ],
)
def test_bad_input_is_rejected_naming_the_argument_pruning(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_magnitude_pruning_names_begin_step_when_only_it_passes_the_default_end_step():
    with pytest.raises(
        ValueError, match=r"^begin_step: expected an int >= 0 and < end_step \(1000\)"
    ):
        MagnitudePruning(0.5, begin_step=5000)


@pytest.mark.parametrize(
    "value", [[np.array([np.nan, 1.0])], np.array([0.0, np.inf]), keras.Variable([np.nan])]
)
def test_sparsity_refuses_non_finite_weights(value):
    with pytest.raises(ValueError, match=r"^variables: expected weights that are all finite, got"):
        sparsity(value)
    model = regressor()
    model.layers[0].kernel.assign(np.full(model.layers[0].kernel.shape, np.nan, "float32"))
    with pytest.raises(ValueError, match=r"^variables: expected weights that are all finite"):
        sparsity(model)


def test_sparsity_of_a_dense_layer_is_its_kernels_fraction_of_zeros():
    """A built Dense layer without zeros is 0.0 sparse: a right answer, not a bad input accepted
    (its bias is not counted, as no pruning schedule prunes it); an unbuilt one has no weights."""
    dense = keras.layers.Dense(3)
    with pytest.raises(ValueError, match=r"^variables: expected .* with at least one weight"):
        sparsity(dense)
    dense.build((None, 2))
    assert sparsity(dense) == 0.0
    dense.kernel.assign([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]])
    assert sparsity(dense) == 0.5
