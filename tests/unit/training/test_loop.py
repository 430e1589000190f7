"""companion.training._loop: fit trains as model.fit does, keeps its traced functions on the model,
builds an unbuilt model, and runs under a MirroredStrategy."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers.small_models import CHILD_ENV, max_difference, shapes_dataset, two_input_classifier
from helpers.training_helpers import crossentropy

from companion.data import NUM_CLASSES
from companion.training import fit, make_eval_step, make_train_step


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
