"""companion.training._step: the training step with penalties, frozen layers, a multi-task loss,
mixed precision, and a loss that returns no floats."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers.small_models import (
    IMAGE,
    META,
    dense,
    max_difference,
    one_weight,
    shapes_dataset,
    two_input_classifier,
)
from helpers.training_helpers import constant_data, crossentropy, mixed_float16

from companion.data import NUM_CLASSES, make_shapes
from companion.training import NonFiniteError, fit, make_eval_step, make_train_step


def test_l2_penalties_from_model_losses_are_added_to_the_loss():
    data = shapes_dataset(32)
    model = two_input_classifier(regularizer=keras.regularizers.L2(0.5))
    penalty = 0.5 * float(np.sum(model.get_layer("meta_dense").kernel.numpy() ** 2))
    ((x, y),) = data
    data_loss = float(crossentropy()(y, model(x)))
    history = fit(
        model, data, optimizer=keras.optimizers.SGD(0.0), loss=crossentropy(), progress=False
    )
    assert history["loss"][0] == pytest.approx(data_loss + penalty, rel=1e-6)
    assert penalty > 0.1 * data_loss  # large enough that a missing penalty would fail


def test_frozen_layers_keep_their_weights():
    model = two_input_classifier()
    model.get_layer("conv").trainable = False
    frozen = [w.copy() for w in model.get_layer("conv").get_weights()]
    head = model.get_layer("head").get_weights()[0].copy()
    fit(
        model,
        shapes_dataset(64),
        optimizer=keras.optimizers.Adam(0.01),
        loss=crossentropy(),
        progress=False,
    )
    assert all(np.array_equal(a, b) for a, b in zip(frozen, model.get_layer("conv").get_weights()))
    assert not np.array_equal(head, model.get_layer("head").get_weights()[0])


def test_a_multi_task_loss_trains_two_heads():
    (images, meta), labels = make_shapes(256, image_size=IMAGE, meta_dim=META)
    targets = {"label": labels, "meta_sum": meta.sum(axis=1, keepdims=True)}
    data = tf.data.Dataset.from_tensor_slices(((images, meta), targets)).batch(32)
    base = two_input_classifier()
    features = base.get_layer("joined").output
    outputs = {
        "label": keras.layers.Dense(NUM_CLASSES, activation="softmax", name="label")(features),
        "meta_sum": keras.layers.Dense(1, name="meta_sum")(features),
    }
    model = keras.Model(base.inputs, outputs)
    ce, mse = crossentropy(), keras.losses.MeanSquaredError()

    def multi_task(y_true, y_pred):
        return ce(y_true["label"], y_pred["label"]) + 0.5 * mse(
            y_true["meta_sum"], y_pred["meta_sum"]
        )

    metrics = {
        "label": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        "meta_sum": keras.metrics.MeanAbsoluteError(name="mae"),
    }
    history = fit(
        model,
        data,
        optimizer=keras.optimizers.Adam(0.01),
        loss=multi_task,
        metrics=metrics,
        epochs=6,
        progress=False,
    )
    assert sorted(history) == ["label_accuracy", "loss", "meta_sum_mae"]
    assert history["meta_sum_mae"][-1] < 0.5 * history["meta_sum_mae"][0]
    assert history["loss"][-1] < history["loss"][0]


def train_both_ways(data, loss_scale_optimizer):
    """The kernels after ``model.fit`` and the companion's ``fit``, and the latter's optimizer."""
    kernels = {}
    for kind in ["model.fit", "fit"]:
        model, optimizer = one_weight(), loss_scale_optimizer()
        assert (model.layers[0].compute_dtype, model.layers[0].kernel.dtype) == (
            "float16",
            "float32",
        )
        if kind == "model.fit":
            model.compile(optimizer=optimizer, loss=keras.losses.MeanSquaredError())
            model.fit(data, shuffle=False, verbose=0)
        else:
            fit(
                model,
                data,
                optimizer=optimizer,
                loss=keras.losses.MeanSquaredError(),
                progress=False,
            )
        kernels[kind] = float(model.layers[0].kernel.numpy()[0, 0])
    return kernels, optimizer


def test_mixed_precision_one_step_equals_model_fit():
    # Kernel 1, input 0.5, target 0: loss (w/2)^2, gradient 0.5; one SGD(0.1) step gives 0.95.
    # Without the loss scaled first, the optimizer would divide an unscaled gradient by its scale,
    # 2**15.
    with mixed_float16():
        kernels, optimizer = train_both_ways(
            constant_data(0.5, steps=1),
            lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
        )
        assert kernels["fit"] == kernels["model.fit"] == pytest.approx(0.95, abs=1e-7)
        assert int(optimizer.iterations) == 1

        data = shapes_dataset(64)
        ours, reference = two_input_classifier(), two_input_classifier(seed=2)
        reference.set_weights(ours.get_weights())
        history = fit(
            ours,
            data,
            optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
            loss=crossentropy(),
            progress=False,
        )
        # compile wraps it
        reference.compile(optimizer=keras.optimizers.SGD(0.1), loss=crossentropy())
        assert isinstance(reference.optimizer, keras.optimizers.LossScaleOptimizer)
        keras_history = reference.fit(data, shuffle=False, verbose=0).history
        assert max_difference(ours, reference) < 1e-6
        np.testing.assert_allclose(history["loss"], keras_history["loss"], rtol=1e-6)


def test_an_overflowing_step_is_skipped_by_the_loss_scale_optimizer_and_training_goes_on():
    # Input 1: the scaled float16 gradient 2 * 2**15 overflows. The optimizer skips that step and
    # halves its scale; the second step applies: 1 - 0.1 * 2 = 0.8, as with model.fit.
    with mixed_float16():
        kernels, optimizer = train_both_ways(
            constant_data(1.0, steps=2),
            lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
        )
        assert kernels["fit"] == kernels["model.fit"] == pytest.approx(0.8, abs=1e-7)
        assert float(optimizer.dynamic_scale) == 2.0**14 and int(optimizer.iterations) == 1

        # clipping applies to the unscaled gradients: 0.1 * 0.5 moves by 0.05
        clipped = one_weight()
        fit(
            clipped,
            constant_data(0.5, steps=1),
            optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
            loss=keras.losses.MeanSquaredError(),
            clip_norm=0.1,
            progress=False,
        )
        assert float(clipped.layers[0].kernel.numpy()[0, 0]) == pytest.approx(0.99, abs=1e-7)

        # a non-finite loss is still ours
        nan_target = constant_data(0.5, steps=3, targets=[0.0, np.nan, 0.0])
        with pytest.raises(NonFiniteError, match=r"^loss is nan at epoch 1, step 2"):
            fit(
                one_weight(),
                nan_target,
                optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
                loss=keras.losses.MeanSquaredError(),
                progress=False,
            )


@pytest.mark.parametrize("returned", ["abc", 3, np.array([1, 2])], ids=["str", "int", "ints"])
def test_a_loss_that_returns_no_floats_is_refused_when_the_step_is_traced(returned):
    x, y = np.ones((4, 2), "float32"), np.ones((4, 1), "float32")
    batch = next(iter(tf.data.Dataset.from_tensor_slices((x, y)).batch(2)))
    model = dense(2)
    pattern = r"^loss: expected a callable returning float losses, got function .*, which returned"
    with pytest.raises(TypeError, match=pattern):
        make_eval_step(model, loss=lambda y, p: returned)(batch)
    step = make_train_step(model, optimizer=keras.optimizers.SGD(0.1), loss=lambda y, p: returned)
    with pytest.raises(TypeError, match=pattern):
        step(batch)
