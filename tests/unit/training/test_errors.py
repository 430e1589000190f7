"""companion.training._errors: a non-finite loss, gradient, learning rate, weight or validation loss
stops fit, naming the cause, the epoch and the step, with the weights the message promises."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers.small_models import (
    IMAGE,
    META,
    dense,
    max_difference,
    shapes_dataset,
    two_input_classifier,
)
from helpers.training_helpers import crossentropy, fit_regression, regression_data

from companion.data import make_shapes
from companion.training import NonFiniteError, _epoch, fit, make_train_step


@pytest.mark.parametrize(
    "length, read_interval", [("known", _epoch.READ_INTERVAL), ("unknown", 0.0)]
)
def test_a_non_finite_loss_stops_naming_epoch_and_step_and_keeps_the_previous_weights(
    length, read_interval, monkeypatch
):
    # Known length: the loop reads the device at the end of the epoch only. Unknown length (after
    # filter), reading after every step: it asks the iterator for more and stops as soon as it sees.
    monkeypatch.setattr(_epoch, "READ_INTERVAL", read_interval)
    data = shapes_dataset(128)  # 4 steps per epoch
    if length == "unknown":
        data = data.filter(lambda x, y: True)
        assert int(data.cardinality()) == tf.data.UNKNOWN_CARDINALITY

    def nan_at_iteration(optimizer, iteration):
        def loss(y_true, y_pred):
            value = crossentropy()(y_true, y_pred)
            return tf.where(optimizer.iterations == iteration, tf.constant(math.nan), value)

        return loss

    model, optimizer = two_input_classifier(), keras.optimizers.Adam(0.01)
    with pytest.raises(
        NonFiniteError, match=r"^loss is nan at epoch 2, step 2: training stopped"
    ) as info:
        # iteration 5, counted from 0, is the 6th step: epoch 2, step 2
        fit(
            model,
            data,
            optimizer=optimizer,
            loss=nan_at_iteration(optimizer, 5),
            epochs=3,
            progress=False,
        )
    assert isinstance(info.value, FloatingPointError)
    assert (info.value.epoch, info.value.step) == (2, 2) and len(info.value.history["loss"]) == 1
    assert int(optimizer.iterations) == 5  # the bad step was not applied

    reference, reference_optimizer = two_input_classifier(), keras.optimizers.Adam(0.01)
    step = make_train_step(
        reference,
        optimizer=reference_optimizer,
        loss=nan_at_iteration(reference_optimizer, 5),
        element_spec=data.element_spec,
    )
    for batch in shapes_dataset(128).repeat(2).take(5):
        step(batch)
    assert max_difference(model, reference) == 0.0


def masked_crossentropy(y_true, y_pred):
    """Cross-entropy that leaves out examples with a non-finite prediction (loss 0 for them).

    A NaN input then gives a finite loss but NaN gradients (its zero upstream gradient times the
    NaN input in the first layer's kernel gradient), on every device. Some CPUs hide a NaN the
    same way by themselves (oneDNN's fused MatMul+BiasAdd+ReLU outputs 0 for it); others, and
    GPUs, do not.
    """
    finite = tf.reduce_all(tf.math.is_finite(y_pred), axis=-1)
    safe = tf.where(finite[:, None], y_pred, tf.fill(tf.shape(y_pred), 0.5))
    per_example = crossentropy(reduction=None)(y_true, safe)
    return tf.reduce_mean(tf.where(finite, per_example, 0.0))


def test_a_nan_input_hidden_by_the_loss_still_stops_training():
    (images, meta), labels = make_shapes(96, image_size=IMAGE, meta_dim=META)
    meta[40, 1] = np.nan  # in the second batch of 32
    data = tf.data.Dataset.from_tensor_slices(((images, meta), labels)).batch(32)
    model = two_input_classifier()
    step = make_train_step(
        model,
        optimizer=keras.optimizers.SGD(0.1),
        loss=masked_crossentropy,
        element_spec=data.element_spec,
    )
    outputs = [step(batch) for batch in data]
    assert [bool(out["applied"]) for out in outputs] == [True, False, True]
    assert math.isfinite(float(outputs[1]["loss"]))
    assert all(np.isfinite(w).all() for w in model.get_weights())
    with pytest.raises(
        NonFiniteError, match=r"^gradients are not finite \(loss [0-9.]+\) at epoch 1, step 2: "
    ):
        fit(
            two_input_classifier(),
            data,
            optimizer=keras.optimizers.SGD(0.1),
            loss=masked_crossentropy,
            progress=False,
        )


def test_nan_in_the_validation_data_stops_naming_it_not_a_silent_nan_val_loss():
    targets = np.ones(8)
    targets[5] = np.nan  # in the second validation batch of 4
    model, reference = dense(2, seed=0), dense(2, seed=0)
    with pytest.raises(
        NonFiniteError,
        match=r"^val_loss is nan on validation_data at epoch 1, validation step 2: "
        r"check validation_data",
    ) as info:
        fit_regression(
            model, regression_data(), validation_data=regression_data(targets=targets), epochs=2
        )
    assert info.value.cause == "val_loss" and (info.value.epoch, info.value.step) == (1, 2)
    assert isinstance(info.value, FloatingPointError) and info.value.history == {}
    # the message is true: the model keeps epoch 1's weights
    fit_regression(reference, regression_data())
    assert max_difference(model, reference) == 0.0


def test_a_nan_learning_rate_is_refused_up_front_and_never_reaches_the_weights():
    with pytest.raises(
        ValueError,
        match=r"^optimizer: expected a finite learning rate, got SGD with learning_rate nan",
    ):
        make_train_step(
            dense(2, seed=0),
            optimizer=keras.optimizers.SGD(learning_rate=math.nan),
            loss=keras.losses.MeanSquaredError(),
        )
    with pytest.raises(ValueError, match=r"^optimizer: expected a finite learning rate"):
        fit_regression(
            dense(2, seed=0),
            regression_data(),
            optimizer=keras.optimizers.SGD(learning_rate=math.inf),
        )

    # A rate that turns NaN later (set on the variable after the step was made): the step skips
    # the update.
    model, optimizer = dense(2, seed=0), keras.optimizers.SGD(0.1)
    step = make_train_step(model, optimizer=optimizer, loss=keras.losses.MeanSquaredError())
    before = model.get_weights()
    optimizer.learning_rate.assign(math.nan)
    out = step(next(iter(regression_data())))
    assert (
        not bool(out["applied"])
        and bool(out["weights_finite"])
        and math.isfinite(float(out["loss"]))
    )
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


class NanAfterFirstStep(keras.optimizers.schedules.LearningRateSchedule):
    """0.1 for the first step, then NaN: a broken schedule."""

    def __call__(self, step):
        return tf.where(step >= 1, tf.constant(math.nan), tf.constant(0.1))


def test_a_schedule_turning_nan_stops_fit_before_the_update_with_a_true_message():
    model, optimizer = dense(2, seed=0), keras.optimizers.SGD(NanAfterFirstStep())
    with pytest.raises(
        NonFiniteError,
        match=r"^the learning rate is not finite \(loss [0-9.]+\) at epoch 1, step 2: "
        r"training stopped before applying",
    ) as info:
        fit_regression(model, regression_data(), optimizer=optimizer)
    assert info.value.cause == "learning_rate" and int(optimizer.iterations) == 1
    reference = dense(2, seed=0)
    fit_regression(reference, regression_data().take(1))  # the one good step, with the same rate
    assert max_difference(model, reference) == 0.0


def test_an_update_that_makes_the_weights_nan_is_noticed_and_fit_says_so():
    # SGD's momentum check lets NaN through (NaN < 0 is False): the first update turns every
    # weight NaN.
    model = dense(2, seed=0)
    step = make_train_step(
        model,
        optimizer=keras.optimizers.SGD(0.1, momentum=math.nan),
        loss=keras.losses.MeanSquaredError(),
    )
    out = step(next(iter(regression_data())))
    assert (
        bool(out["applied"])
        and not bool(out["weights_finite"])
        and math.isfinite(float(out["loss"]))
    )

    model = dense(2, seed=0)
    with pytest.raises(
        NonFiniteError,
        match=r"^weights are not finite after the update \(loss [0-9.]+\) at epoch 1, "
        r"step 1: .*the model holds those non-finite weights",
    ) as info:
        fit_regression(
            model,
            regression_data(),
            optimizer=keras.optimizers.SGD(0.1, momentum=math.nan),
            epochs=2,
        )
    assert info.value.cause == "weights"
    assert not all(np.isfinite(w).all() for w in model.get_weights())  # what the message says
