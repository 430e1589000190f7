import math
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers.small_models import (
    CHILD_ENV,
    IMAGE,
    META,
    dense,
    max_difference,
    one_weight,
    shapes_dataset,
    two_input_classifier,
)

from companion import training
from companion.data import NUM_CLASSES, make_shapes
from companion.training import NonFiniteError, fit, make_eval_step, make_train_step


def crossentropy(**kwargs):
    return keras.losses.SparseCategoricalCrossentropy(**kwargs)


def test_fit_lowers_the_loss_and_beats_chance_on_shapes_data():
    train, validation = shapes_dataset(768, seed=0), shapes_dataset(256, seed=1)
    model = two_input_classifier()
    history = fit(
        model,
        train,
        optimizer=keras.optimizers.Adam(0.01),
        loss=crossentropy(),
        epochs=12,
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        validation_data=validation,
        progress=False,
    )
    assert sorted(history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert all(len(values) == 12 for values in history.values())
    assert history["loss"][-1] < 0.7 * history["loss"][0]
    assert history["val_accuracy"][-1] > 2.5 / NUM_CLASSES  # chance is 1/6


def test_fit_equals_model_fit_with_sgd():
    # Same initial weights, the same batches in the same order (a dataset: fit never shuffles
    # it), SGD, the same mean-over-batch loss: only float rounding may differ.
    train, validation = shapes_dataset(200, batch=48), shapes_dataset(64, batch=48, seed=1)
    ours, reference = two_input_classifier(), two_input_classifier(seed=2)
    reference.set_weights(ours.get_weights())
    history = fit(
        ours,
        train,
        optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
        loss=crossentropy(),
        epochs=3,
        validation_data=validation,
        progress=False,
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    reference.compile(
        optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
        loss=crossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    keras_history = reference.fit(
        train, epochs=3, validation_data=validation, shuffle=False, verbose=0
    ).history
    assert max_difference(ours, reference) < 1e-6
    for name in ["loss", "accuracy", "val_loss", "val_accuracy"]:
        np.testing.assert_allclose(history[name], keras_history[name], rtol=1e-6)


def test_the_step_is_traced_once_not_once_per_epoch():
    data = shapes_dataset(100, batch=32)  # 3 full batches and one of 4: two shapes
    traces = []

    def counting_loss(y_true, y_pred):
        traces.append(None)  # Python runs only while tracing
        return keras.losses.sparse_categorical_crossentropy(y_true, y_pred)

    fit(
        two_input_classifier(),
        data,
        optimizer=keras.optimizers.SGD(0.01),
        loss=counting_loss,
        epochs=3,
        progress=False,
    )
    assert len(traces) == 1

    step = make_train_step(
        two_input_classifier(),
        optimizer=keras.optimizers.SGD(0.01),
        loss=crossentropy(),
        element_spec=data.element_spec,
    )
    for _ in range(3):
        for batch in data:
            step(batch)
    assert step.experimental_get_tracing_count() == 1
    unsigned = make_train_step(
        two_input_classifier(), optimizer=keras.optimizers.SGD(0.01), loss=crossentropy()
    )
    for _ in range(3):
        for batch in data:
            unsigned(batch)
    assert unsigned.experimental_get_tracing_count() == 2  # the last, smaller batch retraces once


def read_scalars(log_dir):
    """Every scalar in the TensorBoard event files of ``log_dir``, read back without tensorboard."""
    scalars = {}
    for name in sorted(os.listdir(log_dir)):
        for record in tf.data.TFRecordDataset(os.path.join(log_dir, name)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append(
                    (event.step, float(tf.make_ndarray(value.tensor)))
                )
    return scalars


def test_tensorboard_scalars_are_written_per_epoch(tmp_path):
    data = shapes_dataset(96)
    history = fit(
        two_input_classifier(),
        data,
        optimizer=keras.optimizers.SGD(0.05),
        loss=crossentropy(),
        epochs=3,
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        validation_data=data,
        log_dir=tmp_path / "logs",
        progress=False,
    )
    assert [p.name.startswith("events.out.tfevents") for p in (tmp_path / "logs").iterdir()] == [
        True
    ]
    scalars = read_scalars(tmp_path / "logs")
    assert sorted(scalars) == sorted(history)
    for name, values in history.items():
        assert [step for step, _ in scalars[name]] == [1, 2, 3]
        np.testing.assert_allclose([value for _, value in scalars[name]], values, rtol=1e-6)


@pytest.mark.parametrize(
    "length, read_interval", [("known", training.READ_INTERVAL), ("unknown", 0.0)]
)
def test_a_non_finite_loss_stops_naming_epoch_and_step_and_keeps_the_previous_weights(
    length, read_interval, monkeypatch
):
    # Known length: the loop reads the device at the end of the epoch only. Unknown length (after
    # filter), reading after every step: it asks the iterator for more and stops as soon as it sees.
    monkeypatch.setattr(training, "READ_INTERVAL", read_interval)
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


PAIRS = r"^{}: expected a tf.data.Dataset of \(inputs, targets\) pairs"


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"dataset": "images"}, TypeError, PAIRS.format("dataset") + ", got str"),
        (
            {"dataset": "unpaired"},
            ValueError,
            PAIRS.format("dataset") + ", got elements TensorSpec",
        ),
        (
            {"dataset": "triples"},
            ValueError,
            r"^dataset: expected .* pairs, got elements \(.*map it to pairs first",
        ),
        (
            {"dataset": "infinite"},
            ValueError,
            r"^dataset: expected a finite dataset \(an epoch is one pass",
        ),
        (
            {"validation_data": "unpaired"},
            ValueError,
            r"^validation_data: expected a tf.data.Dataset of \(inputs",
        ),
        ({"epochs": 0}, ValueError, r"^epochs: expected an int >= 1 and <= 1000000, got int 0"),
        (
            {"epochs": 2.0},
            TypeError,
            r"^epochs: expected an int >= 1 and <= 1000000, got float 2.0",
        ),
        (
            {"epochs": 10**12},
            ValueError,
            r"^epochs: expected an int >= 1 and <= 1000000, got int 1000000000000",
        ),
        (
            {"clip_norm": 0.0},
            ValueError,
            r"^clip_norm: expected a finite number > 0 and <= 3.40282e\+38, got float 0.0",
        ),
        (
            {"clip_norm": -1},
            ValueError,
            r"^clip_norm: expected a finite number > 0 and <= 3.40282e\+38, got int -1",
        ),
        (
            {"optimizer": "sgd"},
            TypeError,
            r"^optimizer: expected a keras.optimizers.Optimizer, got str",
        ),
        ({"loss": 3}, TypeError, r"^loss: expected a callable"),
        (
            {"metrics": ["accuracy"]},
            TypeError,
            r"^metrics\[0\]: expected a keras.metrics.Metric, got str",
        ),
        ({"progress": 1}, TypeError, r"^progress: expected a bool, got int 1"),
        (
            {"strategy": "mirrored"},
            TypeError,
            r"^strategy: expected a tf.distribute.Strategy or None",
        ),
    ],
)
def test_bad_input_is_rejected_before_training(change, error, match):
    (images, meta), labels = make_shapes(8, image_size=IMAGE, meta_dim=META)
    datasets = {
        "images": "images",
        "unpaired": tf.data.Dataset.from_tensor_slices(images).batch(4),
        "triples": tf.data.Dataset.from_tensor_slices(((images, meta), labels, labels)).batch(4),
        "infinite": shapes_dataset(8).repeat(),
    }
    model = two_input_classifier()
    before = model.get_weights()
    arguments = {
        "dataset": shapes_dataset(8),
        "optimizer": keras.optimizers.SGD(0.1),
        "loss": crossentropy(),
        "progress": False,
    }
    arguments.update(
        {k: datasets.get(v, v) if isinstance(v, str) else v for k, v in change.items()}
    )
    with pytest.raises(error, match=match):
        fit(model, **arguments)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


def test_global_norm_clipping_bounds_the_update():
    data = shapes_dataset(32)
    model = two_input_classifier()
    before = model.get_weights()
    fit(
        model,
        data,
        optimizer=keras.optimizers.SGD(1.0),
        loss=crossentropy(),
        clip_norm=1e-3,
        progress=False,
    )
    update = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(before, model.get_weights())))
    assert update == pytest.approx(1e-3, rel=1e-4)  # SGD with rate 1 moves by the clipped gradient


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


def test_progress_prints_clean_lines_per_epoch_off_a_terminal(capsys):
    history = fit(
        two_input_classifier(),
        shapes_dataset(64),
        optimizer=keras.optimizers.SGD(0.1),
        loss=crossentropy(),
        epochs=2,
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        validation_data=shapes_dataset(32, seed=1),
    )
    lines = capsys.readouterr().out.splitlines()
    counts = [line.split(" - ")[0] for line in lines]
    assert counts == ["Epoch 1/2", "2/2", "1/1", "Epoch 2/2", "2/2", "1/1"]
    # training and validation on lines of their own, each within the book's 88 columns
    assert all(
        line.endswith(f" - loss: {loss:.4f} - accuracy: {accuracy:.4f}")
        for line, loss, accuracy in zip(lines[1::3], history["loss"], history["accuracy"])
    )
    assert all(
        line.endswith(f" - val_loss: {loss:.4f} - val_accuracy: {accuracy:.4f}")
        for line, loss, accuracy in zip(lines[2::3], history["val_loss"], history["val_accuracy"])
    )
    assert max(map(len, lines)) <= 88
    assert not any("\r" in line or "\b" in line or "\x1b" in line for line in lines)


def test_on_epoch_end_and_eval_step():
    data = shapes_dataset(64)
    seen = []
    model = two_input_classifier()
    history = fit(
        model,
        data,
        optimizer=keras.optimizers.SGD(0.1),
        loss=crossentropy(),
        epochs=2,
        progress=False,
        on_epoch_end=lambda epoch, logs: seen.append((epoch, logs["loss"])),
    )
    assert seen == [(1, history["loss"][0]), (2, history["loss"][1])]
    step = make_eval_step(model, loss=crossentropy(reduction=None))
    outputs = [step(batch) for batch in data]
    total = sum(float(out["loss"]) * int(out["examples"]) for out in outputs)
    model.compile(loss=crossentropy())
    assert total / 64 == pytest.approx(model.evaluate(data, verbose=0), rel=1e-6)


def test_repeated_fit_calls_reuse_their_traced_functions():
    data = shapes_dataset(64)
    traces = []

    def counting_loss(y_true, y_pred):
        traces.append(None)  # Python runs only while tracing
        return keras.losses.sparse_categorical_crossentropy(y_true, y_pred)

    model, optimizer = two_input_classifier(), keras.optimizers.SGD(0.01)
    metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    kwargs = dict(
        loss=counting_loss,
        metrics=metrics,
        validation_data=shapes_dataset(32, seed=1),
        progress=False,
    )
    histories = [fit(model, data, optimizer=optimizer, **kwargs) for _ in range(3)]
    assert len(traces) == 2  # the training step once, the validation step once
    assert histories[2]["loss"][0] < histories[0]["loss"][0]  # the same model, trained on
    fit(model, data, optimizer=keras.optimizers.SGD(0.01), **kwargs)
    assert len(traces) == 3  # another optimizer: the training step again, validation reused
    model.get_layer("conv").trainable = False
    fit(model, data, optimizer=keras.optimizers.SGD(0.01), **kwargs)
    assert len(traces) == 4  # other trainable variables: traced again


def test_an_epoch_of_known_length_reads_the_device_once_at_its_end_not_per_step(monkeypatch):
    """What keeps the host from waiting for each step (a GPU would idle): no read per step."""
    reads = []

    class Counted(dict):
        def __getitem__(self, key):
            reads.append(key)
            return super().__getitem__(key)

    class Answer:  # what run_next returns; the loop converts it only when the length is unknown
        def __init__(self, value):
            self.value = value

        def __bool__(self):
            reads.append("more")
            return bool(self.value)

    make = training._epoch_function

    def counted_epoch_function(step):
        run_next, totals = make(step)
        return (lambda iterator: Answer(run_next(iterator))), Counted(totals)

    monkeypatch.setattr(training, "_epoch_function", counted_epoch_function)
    monkeypatch.setattr(training, "READ_INTERVAL", 1e9)  # no periodic read within this test
    per_epoch = {}
    for batches in (2, 8):
        reads.clear()
        history = fit(
            two_input_classifier(),
            shapes_dataset(16 * batches, batch=16),
            optimizer=keras.optimizers.SGD(0.01),
            loss=crossentropy(),
            progress=False,
        )
        per_epoch[batches] = len(reads)
        assert math.isfinite(history["loss"][0])
    assert per_epoch[2] == per_epoch[8] <= 5, per_epoch  # a few reads at the end, none per step


def test_fit_builds_a_model_without_input_from_the_dataset():
    x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices(
        (x, x @ np.array([[1.0], [-2.0], [0.5]], "float32"))
    ).batch(16)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(1)])
    history = fit(
        model,
        data,
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.MeanSquaredError(),
        epochs=5,
        progress=False,
    )
    assert model.built and tuple(model.layers[0].kernel.shape) == (3, 1)
    assert history["loss"][-1] < 0.05 * history["loss"][0]
    with pytest.raises(
        ValueError, match=r"^model: expected a built model, got an unbuilt Sequential; call it"
    ):
        make_train_step(
            keras.Sequential([keras.layers.Dense(1)]),
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.MeanSquaredError(),
        )
    frozen = two_input_classifier()
    frozen.trainable = False
    with pytest.raises(
        ValueError, match=r"^model: expected trainable variables, got none in Functional"
    ):
        fit(
            frozen,
            shapes_dataset(8),
            optimizer=keras.optimizers.SGD(0.1),
            loss=crossentropy(),
            progress=False,
        )


def test_a_dataset_of_unknown_length_trains_as_the_same_data_of_known_length():
    data = shapes_dataset(100, batch=32)
    unknown = data.filter(lambda x, y: True)
    kwargs = dict(
        optimizer=keras.optimizers.SGD(0.1),
        loss=crossentropy(),
        epochs=2,
        progress=False,
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    known_model, unknown_model = two_input_classifier(), two_input_classifier()
    assert fit(known_model, data, **kwargs) == fit(
        unknown_model, unknown, **kwargs | {"optimizer": keras.optimizers.SGD(0.1)}
    )
    assert max_difference(known_model, unknown_model) == 0.0


def test_a_live_bar_in_a_terminal_reads_the_running_loss(capsys, monkeypatch):
    monkeypatch.setattr(training, "READ_INTERVAL", 0.0)  # read after every step
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    history = fit(
        two_input_classifier(),
        shapes_dataset(64),
        optimizer=keras.optimizers.SGD(0.1),
        loss=crossentropy(),
    )
    printed = capsys.readouterr().out
    assert printed.startswith("Epoch 1/1\n") and ("\r" in printed or "\x1b" in printed)
    assert "2/2" in printed and f"loss: {history['loss'][0]:.4f}" in printed


# ---------------------------------------------------------------- mixed precision


@pytest.fixture
def mixed_float16():
    """The dtype policy ``mixed_float16`` for one test (float16 compute, float32 variables)."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def constant_data(value, steps, targets=None):
    targets = (
        np.zeros((steps, 1), "float32")
        if targets is None
        else np.array(targets, "float32").reshape(-1, 1)
    )
    return tf.data.Dataset.from_tensor_slices(
        (np.full((steps, 1), value, "float32"), targets)
    ).batch(1)


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


def test_mixed_precision_one_step_equals_model_fit(mixed_float16):
    # Kernel 1, input 0.5, target 0: loss (w/2)^2, gradient 0.5; one SGD(0.1) step gives 0.95.
    # Without the loss scaled first, the optimizer would divide an unscaled gradient by its scale,
    # 2**15.
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
    reference.compile(optimizer=keras.optimizers.SGD(0.1), loss=crossentropy())  # compile wraps it
    assert isinstance(reference.optimizer, keras.optimizers.LossScaleOptimizer)
    keras_history = reference.fit(data, shuffle=False, verbose=0).history
    assert max_difference(ours, reference) < 1e-6
    np.testing.assert_allclose(history["loss"], keras_history["loss"], rtol=1e-6)


def test_an_overflowing_step_is_skipped_by_the_loss_scale_optimizer_and_training_goes_on(
    mixed_float16,
):
    # Input 1: the scaled float16 gradient 2 * 2**15 overflows. The optimizer skips that step and
    # halves its scale; the second step applies: 1 - 0.1 * 2 = 0.8, as with model.fit.
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


MIRRORED = """
from companion.notebook import split_cpu
split_cpu(2)
import numpy as np, tensorflow as tf, keras
from helpers import small_models as s
from companion.training import fit
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
data = s.shapes_dataset(100, batch=24)  # the last batch of 4 splits 2 + 2
crossentropy = keras.losses.SparseCategoricalCrossentropy
for loss in [crossentropy(reduction=None), crossentropy()]:  # per example; Keras's mean
    with strategy.scope():
        model = s.two_input_classifier(regularizer=keras.regularizers.L2(1e-3))
        optimizer = keras.optimizers.Adam(0.01)
    single = s.two_input_classifier(seed=3, regularizer=keras.regularizers.L2(1e-3))
    single.set_weights(model.get_weights())
    kwargs = dict(loss=loss, epochs=2, clip_norm=1.0, validation_data=data, progress=False)
    history = fit(model, data, optimizer=optimizer, strategy=strategy, **kwargs)
    reference = fit(single, data, optimizer=keras.optimizers.Adam(0.01), **kwargs)
    replicas = [np.max(np.abs(v.value.values[0].numpy() - v.value.values[1].numpy()))
                for v in model.variables + optimizer.variables]
    print(len(replicas), max(replicas), s.max_difference(model, single) < 1e-5,
          all(np.allclose(history[k], reference[k], rtol=1e-5) for k in ["loss", "val_loss"]))


def mean_loss(y_true, y_pred):  # a hand-written mean: not divided by the replicas
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y_true, y_pred))


for bad in [dict(loss=mean_loss), dict(loss=crossentropy(), model=single)]:
    try:
        fit(bad.pop("model", model), data, optimizer=optimizer, strategy=strategy,
            progress=False, **bad)
    except ValueError as error:
        print(str(error).split(";")[0])
"""


@pytest.mark.slow
def test_mirrored_strategy_replicas_agree_and_match_one_device():
    from companion.notebook import run_python

    result = run_python(MIRRORED, env=CHILD_ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()[-4:]
    for line in lines[:2]:  # per-example losses, then a Keras loss with its default reduction
        count, difference, close_weights, close_histories = line.split()
        assert (
            int(count) > 10
            and float(difference) == 0.0
            and close_weights == close_histories == "True"
        )
    assert lines[2] == (
        "loss: expected per-example losses (shape (batch,)) or a keras.losses.Loss under a "
        "strategy with 2 replicas, got a scalar from 'mean_loss'"
    )
    assert lines[3].startswith(
        "strategy: expected the model and optimizer to be created under strategy.scope()"
    )


# ------------------------------------------------------- issue 16: bad input, silent results


def regression_data(n=8, batch=4, targets=None):
    x = np.random.default_rng(0).normal(size=(n, 2)).astype("float32")
    y = (
        np.ones((n, 1), "float32")
        if targets is None
        else np.asarray(targets, "float32").reshape(n, 1)
    )
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def fit_regression(model, data, **kwargs):
    kwargs = {
        "optimizer": keras.optimizers.SGD(0.1),
        "loss": keras.losses.MeanSquaredError(),
        "progress": False,
    } | kwargs
    return fit(model, data, **kwargs)


@pytest.mark.parametrize("argument", ["dataset", "validation_data"])
@pytest.mark.parametrize("length", ["known", "unknown"])
def test_an_empty_dataset_is_refused_not_reported_as_loss_zero(argument, length):
    empty = (
        regression_data().take(0)
        if length == "known"
        else regression_data().filter(lambda x, y: False)
    )
    data = {"dataset": regression_data(), "validation_data": None} | {argument: empty}
    with pytest.raises(
        ValueError, match=rf"^{argument}: expected at least one (batch|example per epoch), got "
    ):
        fit_regression(dense(2, seed=0), data["dataset"], validation_data=data["validation_data"])


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


@pytest.mark.parametrize("clip_norm", [1e300, 1e39, 1e-300, math.inf])
def test_a_clip_norm_float32_cannot_hold_is_refused(clip_norm):
    with pytest.raises(
        ValueError,
        match=r"^clip_norm: expected a finite number (> 0|>= 1.17549e-38)"
        r".* and <= 3.40282e\+38",
    ):
        fit_regression(dense(2, seed=0), regression_data(), clip_norm=clip_norm)
    with pytest.raises(ValueError, match=r"^clip_norm: expected"):
        make_train_step(
            dense(2, seed=0),
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.MeanSquaredError(),
            clip_norm=clip_norm,
        )


def test_the_largest_clip_norm_leaves_the_gradients_as_they_are(mixed_float16):
    # Under loss scaling the limit used to be multiplied by the scale (2**15): 3e38 became inf,
    # every gradient NaN, and the loss-scale optimizer skipped every step. Kernel 1, input 0.5:
    # 1 -> 0.95.
    model = one_weight()
    fit(
        model,
        constant_data(0.5, steps=1),
        optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
        loss=keras.losses.MeanSquaredError(),
        clip_norm=3e38,
        progress=False,
    )
    assert float(model.layers[0].kernel.numpy()[0, 0]) == pytest.approx(0.95, abs=1e-7)


def test_a_clip_norm_above_the_gradient_norm_changes_nothing_even_near_the_float32_limit():
    # tf.clip_by_global_norm(g, 3e38) multiplies by 3e38 * (1 / 3e38), and float32 flushes that tiny
    # reciprocal to 0: the gradients used to be zeroed and the weights never moved.
    clipped, unclipped = dense(2, seed=0), dense(2, seed=0)
    assert fit_regression(clipped, regression_data(), clip_norm=3e38) == fit_regression(
        unclipped, regression_data()
    )
    assert (
        max_difference(clipped, unclipped) == 0.0
        and max_difference(clipped, dense(2, seed=0)) > 0.01
    )


def test_an_empty_log_dir_or_a_file_is_refused(tmp_path):
    with pytest.raises(
        ValueError, match=r"^log_dir: expected a non-empty path \(str or os.PathLike\), got str ''"
    ):
        fit_regression(dense(2, seed=0), regression_data(), log_dir="")
    (tmp_path / "a_file").write_text("")
    with pytest.raises(
        ValueError, match=r"^log_dir: expected a folder for TensorBoard's files, got PosixPath"
    ):
        fit_regression(dense(2, seed=0), regression_data(), log_dir=tmp_path / "a_file")


@pytest.mark.parametrize("how", ["model.trainable", "every layer"])
def test_a_fully_frozen_model_is_refused_before_training(how):
    model = two_input_classifier()
    for layer in [model] if how == "model.trainable" else model.layers:
        layer.trainable = False
    frozen = (
        r"^model: expected trainable variables, got none in Functional .*"
        r"\(is every layer frozen\?\)"
    )
    with pytest.raises(ValueError, match=frozen):
        fit(
            model,
            shapes_dataset(8),
            optimizer=keras.optimizers.SGD(0.1),
            loss=crossentropy(),
            progress=False,
        )
    with pytest.raises(ValueError, match=frozen):
        make_train_step(model, optimizer=keras.optimizers.SGD(0.1), loss=crossentropy())


def test_metrics_whose_names_clash_or_whose_keys_are_not_outputs_are_refused():
    mae = keras.metrics.MeanAbsoluteError
    for metrics, match in [
        ([mae(name="m"), keras.metrics.MeanSquaredError(name="m")], r"clash on 'm'"),
        ([mae(name="loss")], r"clash on 'loss'"),
        (
            {"nope": mae()},
            r"^metrics: expected keys of the model's outputs \(none: a single tensor\)",
        ),
    ]:
        with pytest.raises(ValueError, match=match):
            fit_regression(dense(2, seed=0), regression_data(), metrics=metrics)


def test_clip_by_global_norm_takes_what_a_tape_gives():
    from companion.training import clip_by_global_norm

    embedding = tf.IndexedSlices(tf.constant([[3.0, 0.0]]), tf.constant([1]), tf.constant([4, 2]))
    dense = tf.constant([0.0, 4.0])
    clipped = clip_by_global_norm([embedding, None, dense], clip_norm=1.0)
    assert isinstance(clipped[0], tf.IndexedSlices) and clipped[1] is None
    np.testing.assert_allclose(clipped[0].values.numpy(), [[0.6, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(clipped[2].numpy(), [0.0, 0.8], rtol=1e-6)
    # Gradients of a loss scaled by 1024 are clipped as the unscaled ones are, and stay scaled.
    scaled = clip_by_global_norm([dense * 1024], clip_norm=1.0, loss_scale=1024.0)
    np.testing.assert_allclose(scaled[0].numpy(), [0.0, 1024.0], rtol=1e-6)
    assert clip_by_global_norm([None], clip_norm=1.0) == [None]


def test_clip_by_global_norm_keeps_each_dtype_and_takes_the_norm_in_float64_if_one_is():
    from companion.training import clip_by_global_norm

    # float64 to float64's precision (a float32 norm would be off by about 1e-8)
    gradient = np.array([1.0, 2.0, 3.0]) / 7
    wide = clip_by_global_norm([tf.constant(gradient)], clip_norm=0.1)
    assert wide[0].dtype == tf.float64
    np.testing.assert_allclose(
        wide[0].numpy(), gradient * 0.1 / np.linalg.norm(gradient), rtol=1e-15
    )
    # float16, whose squares here (250000 in all) would overflow float16 to inf: in float32
    half = clip_by_global_norm([tf.constant([300.0, 400.0], tf.float16)], clip_norm=1.0)
    assert half[0].dtype == tf.float16
    np.testing.assert_allclose(half[0].numpy(), [0.6, 0.8], rtol=1e-3)
    # variables of two dtypes: one norm over both, each gradient in its own dtype
    mixed = clip_by_global_norm(
        [tf.constant([3.0]), tf.constant([4.0], tf.float64)], clip_norm=1.0, loss_scale=2.0
    )
    assert [g.dtype for g in mixed] == [tf.float32, tf.float64]
    np.testing.assert_allclose([float(mixed[0][0]), float(mixed[1][0])], [1.2, 1.6], rtol=1e-7)


def float64_regression(how):
    """A model that computes in float64 (by floatx or by its layers' dtype), data and a loss."""
    keras.utils.set_random_seed(0)
    dtype = None if how == "floatx" else "float64"
    model = keras.Sequential(
        [
            keras.Input((2,), dtype="float64"),
            keras.layers.Dense(4, activation="tanh", dtype=dtype),
            keras.layers.Dense(1, dtype=dtype),
        ]
    )
    x = np.random.default_rng(0).normal(size=(8, 2))
    data = tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True) * 10)).batch(8)
    return model, data, keras.losses.MeanSquaredError(dtype="float64")


def clipped_sgd_step(how, clip_norm, rate):
    """The weights one SGD step with ``tf.clip_by_global_norm`` (in float64) gives, and the
    gradient's norm: the reference for a float64 model's clipped step."""
    model, data, loss = float64_regression(how)
    ((x, y),) = data
    with tf.GradientTape() as tape:
        value = loss(y, model(x))
    gradients = tape.gradient(value, model.trainable_variables)
    assert all(g.dtype == tf.float64 for g in gradients)
    clipped, norm = tf.clip_by_global_norm(gradients, clip_norm)
    weights = [v.numpy() - rate * g.numpy() for v, g in zip(model.trainable_variables, clipped)]
    return weights, float(norm)


@pytest.mark.parametrize("how", ["floatx", "layer dtype"])
def test_clip_norm_clips_a_float64_model(how, request):
    # The norm of float64 gradients used to be divided by a float32 loss scale: TypeError.
    if how == "floatx":
        request.getfixturevalue("float64_floatx")
    expected, norm = clipped_sgd_step(how, clip_norm=0.01, rate=1.0)
    assert norm > 1.0  # the clip acts
    model, data, loss = float64_regression(how)
    fit(model, data, optimizer=keras.optimizers.SGD(1.0), loss=loss, clip_norm=0.01, progress=False)
    assert all(v.dtype == "float64" for v in model.trainable_variables)
    for variable, weights in zip(model.trainable_variables, expected):
        np.testing.assert_allclose(variable.numpy(), weights, rtol=1e-12, atol=1e-15)
    # and it trains: several epochs of clipped steps, the loss falling, every weight finite
    history = fit(
        model,
        data,
        optimizer=keras.optimizers.SGD(0.1),
        loss=loss,
        epochs=5,
        clip_norm=1.0,
        progress=False,
    )
    assert history["loss"][-1] < history["loss"][0]
    assert all(np.isfinite(v.numpy()).all() for v in model.trainable_variables)


# ---------------------------------------------------------------- checkpoints and resuming


def crashing(data, at):
    """``data``, whose pipeline raises when it reads its ``at``-th batch (counted over epochs)."""
    read = {"batches": 0}

    def count(x):
        read["batches"] += 1
        if read["batches"] == at:
            raise RuntimeError("the machine is gone")
        return x

    def through(x, y):
        x = tf.ensure_shape(tf.py_function(count, [x], x.dtype), x.shape)
        return x, y

    return data.map(through)


def resumable_run(directory, data, epochs=3, **kwargs):
    """A fresh model, optimizer and metric (as a restarted process has), trained by ``fit``."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((2,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)]
    )
    optimizer = kwargs.pop("optimizer", None) or keras.optimizers.Adam(0.05)
    history = fit(
        model,
        data,
        optimizer=optimizer,
        loss=keras.losses.MeanSquaredError(),
        metrics=[keras.metrics.MeanAbsoluteError(name="mae")],
        epochs=epochs,
        checkpoint_dir=directory,
        **({"progress": False} | kwargs),
    )
    return model, optimizer, history


def test_a_run_that_crashed_mid_epoch_resumes_to_the_weights_of_one_that_did_not(tmp_path, capsys):
    data = regression_data(n=40, batch=4, targets=np.arange(40) / 10)
    validation = regression_data(n=8, batch=4)
    model, optimizer, history = resumable_run(tmp_path / "whole", data, validation_data=validation)
    with pytest.raises(tf.errors.OpError, match="the machine is gone"):
        resumable_run(
            tmp_path / "cut", crashing(data, at=17), checkpoint_every=3, validation_data=validation
        )
    again, again_optimizer, again_history = resumable_run(
        tmp_path / "cut", data, checkpoint_every=3, validation_data=validation, progress=True
    )
    printed = capsys.readouterr().out
    # batch 17 is epoch 2's seventh: the newest checkpoint holds epoch 2 up to step 6
    assert printed.startswith("Resumed from ckpt-6 (epoch 2, after step 6)\nEpoch 2/3\n")
    assert "Epoch 1/3" not in printed
    # the history, metrics included, and every bit of every weight are those of the whole run
    assert again_history == history
    assert variables_equal(model.weights, again.weights)
    assert variables_equal(optimizer.variables, again_optimizer.variables)
    assert int(again_optimizer.iterations) == 30


def variables_equal(first, second):
    return len(first) == len(second) and all(
        np.array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
        for a, b in zip(first, second)
    )


def test_a_finished_run_is_not_trained_again_and_more_epochs_carry_on(tmp_path, capsys):
    data = regression_data(n=16, batch=4, targets=np.arange(16) / 4)
    longer, _, longer_history = resumable_run(tmp_path / "five", data, epochs=5)
    model, _, history = resumable_run(tmp_path / "resumed", data, epochs=3)
    weights = [w.copy() for w in model.get_weights()]
    again, _, again_history = resumable_run(tmp_path / "resumed", data, epochs=3, progress=True)
    assert capsys.readouterr().out == "Resumed from ckpt-3 (after epoch 3)\n"
    assert again_history == history and variables_equal(weights, again.get_weights())
    more, _, more_history = resumable_run(tmp_path / "resumed", data, epochs=5)
    assert more_history == longer_history and variables_equal(longer.weights, more.weights)


def test_mixed_precision_resumes_with_its_loss_scale(tmp_path, mixed_float16):
    # Input 1 overflows the first scaled gradient, so the loss scale halves to 2**14 in step 1;
    # a resumed run that lost it would skip another step and end elsewhere.
    data = constant_data(1.0, steps=4, targets=[0.0, 0.2, 0.1, 0.3])

    def run(directory, data):
        model = one_weight()
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
        fit(
            model,
            data,
            optimizer=optimizer,
            loss=keras.losses.MeanSquaredError(),
            epochs=2,
            checkpoint_dir=directory,
            checkpoint_every=2,
            progress=False,
        )
        return model, optimizer

    model, optimizer = run(tmp_path / "whole", data)
    with pytest.raises(tf.errors.OpError):
        run(tmp_path / "cut", crashing(data, at=7))
    again, again_optimizer = run(tmp_path / "cut", data)
    assert float(again_optimizer.dynamic_scale) == float(optimizer.dynamic_scale) == 2.0**14
    assert variables_equal(model.weights, again.weights)


def test_checkpoints_of_another_model_or_a_file_are_refused(tmp_path):
    resumable_run(tmp_path / "other", regression_data(), epochs=1)
    with pytest.raises(
        ValueError, match=r"^checkpoint_dir: expected checkpoints of this model, optimizer and"
    ):
        fit_regression(dense(2, seed=0), regression_data(), checkpoint_dir=tmp_path / "other")
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ValueError, match=r"^checkpoint_dir: expected a folder for checkpoints"):
        fit_regression(dense(2, seed=0), regression_data(), checkpoint_dir=tmp_path / "a_file")
    with pytest.raises(ValueError, match=r"^checkpoint_every: expected None without a check"):
        fit_regression(dense(2, seed=0), regression_data(), checkpoint_every=2)
    assert not (tmp_path / "a_file").read_text()


@pytest.mark.parametrize(
    "every, states",
    [
        (2, [(0, 2), (1, 0), (1, 2), (2, 0)]),  # divides the epoch's 4 steps (it wrote 6)
        (3, [(0, 3), (1, 0), (1, 3), (2, 0)]),  # does not
        (1, [(0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0)]),  # (it wrote 10)
    ],
)
def test_each_state_is_checkpointed_once(tmp_path, monkeypatch, every, states):
    # After the epoch's last step fit used to save twice: (epoch - 1, its length) and then
    # (epoch, 0), the same weights: 2 epochs of 4 steps with checkpoint_every=2 wrote 6.
    saved = []
    save = training.TrainingCheckpoint.save

    def spy(self, epoch, step, history):
        saved.append((epoch, step))
        save(self, epoch, step, history)

    monkeypatch.setattr(training.TrainingCheckpoint, "save", spy)
    data = regression_data(n=16, batch=4)
    resumable_run(tmp_path, data, epochs=2, checkpoint_every=every)
    assert saved == states
    # the manager numbers its checkpoints by the saves written
    assert os.path.basename(tf.train.latest_checkpoint(tmp_path)) == f"ckpt-{len(states)}"


MIRRORED_RESUME = """
from companion.notebook import split_cpu
split_cpu(2)
import os, tempfile
import numpy as np, tensorflow as tf, keras
from companion.cluster import variables_digest
from companion.training import fit

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True))).batch(8)
read = [0]

def crash_at_12(x):
    read[0] += 1
    if read[0] == 12:
        raise RuntimeError("the machine is gone")
    return x

def run(folder, data):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"),
                                  keras.layers.Dense(1)])
        optimizer, mae = keras.optimizers.Adam(0.05), keras.metrics.MeanAbsoluteError()
    history = fit(model, data, optimizer=optimizer, loss=keras.losses.MeanSquaredError(),
                  metrics=[mae], epochs=2, strategy=strategy, progress=False,
                  checkpoint_dir=folder, checkpoint_every=3)
    return variables_digest(model), history

scratch = tempfile.TemporaryDirectory()  # removed when the script ends
whole = run(os.path.join(scratch.name, "whole"), data)
folder = os.path.join(scratch.name, "resumed")
try:
    run(folder, data.map(lambda x, y: (
        tf.ensure_shape(tf.py_function(crash_at_12, [x], x.dtype), x.shape), y)))
except tf.errors.OpError:
    print("crashed")
resumed = run(folder, data)
print(whole[0] == resumed[0], whole[1]["loss"] == resumed[1]["loss"])
print(np.allclose(whole[1]["mean_absolute_error"], resumed[1]["mean_absolute_error"],
                  rtol=1e-6, atol=0))
"""


@pytest.mark.slow
def test_two_replicas_resume_to_the_same_weights_and_history(tmp_path):
    # A metric's variables are summed over the replicas when saved and restored as one total,
    # so its later sums may round differently (last bit); weights and loss come back exactly.
    from companion.notebook import run_python

    result = run_python(MIRRORED_RESUME)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["crashed", "True", "True", "True"], result.stdout


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


def test_an_unbuilt_sequential_is_built_and_trained_as_model_fit_does():
    # Keras's model.fit builds an unbuilt Sequential from the data and trains it; fit does too
    # (the probe saw "no weights changed" by comparing the empty weight list before).
    x = np.random.default_rng(0).normal(size=(32, 2)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1] * 3.0)).batch(8)
    models = []
    for _ in range(3):
        keras.utils.set_random_seed(0)
        models.append(keras.Sequential([keras.layers.Dense(1)]))
    untrained, ours, theirs = models
    untrained.build((None, 2))
    fit(
        ours,
        data,
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.MeanSquaredError(),
        epochs=2,
        progress=False,
    )
    theirs.compile(keras.optimizers.SGD(0.1), keras.losses.MeanSquaredError())
    theirs.fit(data, epochs=2, verbose=0, shuffle=False)
    assert ours.built and max_difference(ours, untrained) > 1e-2
    assert max_difference(ours, theirs) < 1e-5
