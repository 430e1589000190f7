"""companion.fitting: GuardedModel against Keras's own fit and the chapter-7 loop."""

import inspect
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers.small_models import CHILD_ENV, max_difference

from companion.fitting import (
    ExpectedCalibrationError,
    GuardedModel,
    LearningRateRange,
    find_learning_rate,
)
from companion.notebook import run_python
from companion.training import fit

NAN_BATCH = 3


def regression_data(nan_batch=None, batch=8):
    """64 examples of a linear target, batches of 8; ``nan_batch`` gets one NaN input."""
    x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
    y = (x @ np.array([[1.0], [2.0], [3.0]], "float32")) * 5
    if nan_batch is not None:
        x[nan_batch * batch, 0] = np.nan
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def without_batch(dataset, index):
    kept = dataset.enumerate().filter(lambda i, _: i != index).map(lambda _, batch: batch)
    # A filter hides the length: Keras then warns about shuffle even with shuffle=False.
    return kept.apply(tf.data.experimental.assert_cardinality(len(dataset) - 1))


def functional(cls=GuardedModel, **kwargs):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    return cls(inputs=inputs, outputs=keras.layers.Dense(1)(inputs), **kwargs)


def train(model, dataset, epochs=1, **kwargs):
    """``model.fit`` quietly, in the dataset's order; returns the history's logs."""
    return model.fit(dataset, epochs=epochs, verbose=0, shuffle=False, **kwargs).history


@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_clip_norm_reaches_the_weights_of_sgd_global_clipnorm(jit_compile):
    # jit_compile=True is what "auto" chooses on a GPU.
    guarded = functional(clip_norm=0.5)
    guarded.compile(keras.optimizers.SGD(0.1), "mse", jit_compile=jit_compile)
    reference = functional(keras.Model)
    reference.compile(
        keras.optimizers.SGD(0.1, global_clipnorm=0.5), "mse", jit_compile=jit_compile
    )
    history = train(guarded, regression_data(), epochs=2)
    expected = train(reference, regression_data(), epochs=2)
    # Keras scales by clip / max(norm, clip), the companion by 1 / max(norm / clip, 1).
    assert max_difference(guarded, reference) < 1e-6
    np.testing.assert_allclose(history["loss"], expected["loss"], rtol=1e-6)
    assert history["skipped_steps"] == [0.0, 0.0]


@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_a_nan_batch_is_skipped_as_if_it_were_not_there(jit_compile):
    guarded, clean = functional(), functional()
    for model in guarded, clean:
        model.compile(keras.optimizers.SGD(0.1), "mse", jit_compile=jit_compile)
    history = train(guarded, regression_data(NAN_BATCH), epochs=2)
    expected = train(clean, without_batch(regression_data(), NAN_BATCH), epochs=2)
    assert max_difference(guarded, clean) == 0.0
    assert int(guarded.optimizer.iterations) == int(clean.optimizer.iterations) == 14
    assert history["loss"] == expected["loss"]  # the skipped batch is not in the mean either
    assert history["skipped_steps"] == [1.0, 1.0]


def test_adam_state_is_untouched_by_a_skipped_step():
    guarded, clean = functional(), functional()
    for model in guarded, clean:
        model.compile(keras.optimizers.Adam(0.01), "mse")
    train(guarded, regression_data(NAN_BATCH))
    train(clean, without_batch(regression_data(), NAN_BATCH))
    assert max_difference(guarded, clean) == 0.0
    for mine, theirs in zip(guarded.optimizer.variables, clean.optimizer.variables):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def test_steps_per_execution_changes_nothing():
    one, four = functional(clip_norm=0.5), functional(clip_norm=0.5)
    one.compile(keras.optimizers.SGD(0.1), "mse")
    four.compile(keras.optimizers.SGD(0.1), "mse", steps_per_execution=4)
    logs = train(one, regression_data(NAN_BATCH), epochs=2)
    assert train(four, regression_data(NAN_BATCH), epochs=2) == logs
    assert max_difference(one, four) == 0.0


def test_equals_the_chapter_7_loop():
    guarded, looped = functional(clip_norm=0.5), functional(keras.Model)
    guarded.compile(keras.optimizers.SGD(0.1), "mse")
    train(guarded, regression_data(), epochs=2)
    fit(
        looped,
        regression_data(),
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.MeanSquaredError(),
        epochs=2,
        clip_norm=0.5,
        progress=False,
    )
    assert max_difference(guarded, looped) < 1e-6


def float64_guarded(how, clip_norm):
    """A GuardedModel computing in float64, by floatx or by its layers' dtype."""
    keras.utils.set_random_seed(0)
    dtype = None if how == "floatx" else "float64"
    inputs = keras.Input((3,), dtype="float64")
    hidden = keras.layers.Dense(4, activation="tanh", dtype=dtype)(inputs)
    outputs = keras.layers.Dense(1, dtype=dtype)(hidden)
    return GuardedModel(inputs=inputs, outputs=outputs, clip_norm=clip_norm)


@pytest.mark.parametrize("how", ["floatx", "layer dtype"])
def test_clip_norm_clips_a_float64_model(how, request):
    # The norm of float64 gradients used to be divided by a float32 loss scale: TypeError.
    if how == "floatx":
        request.getfixturevalue("float64_floatx")
    x = np.random.default_rng(0).normal(size=(64, 3))
    y = x @ np.array([[1.0], [2.0], [3.0]]) * 5
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    loss = keras.losses.MeanSquaredError(dtype="float64")
    # the reference: one SGD(1.0) step with tf.clip_by_global_norm, in float64
    reference = float64_guarded(how, None)
    with tf.GradientTape() as tape:
        value = loss(y[:8], reference(x[:8]))
    gradients = tape.gradient(value, reference.trainable_variables)
    clipped, norm = tf.clip_by_global_norm(gradients, 0.01)
    assert float(norm) > 1.0 and all(g.dtype == tf.float64 for g in clipped)  # the clip acts
    model = float64_guarded(how, 0.01)
    model.compile(keras.optimizers.SGD(1.0), loss)
    assert train(model, data.take(1))["skipped_steps"] == [0.0]
    for variable, start, gradient in zip(
        model.trainable_variables, reference.trainable_variables, clipped
    ):
        assert variable.dtype == "float64"
        expected = start.numpy() - gradient.numpy()
        np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-12, atol=1e-15)
    # and it trains: epochs of clipped steps, none skipped, the loss falling, the weights finite
    model.compile(keras.optimizers.SGD(0.05), loss)
    history = train(model, data, epochs=5)
    assert history["skipped_steps"] == [0.0] * 5 and history["loss"][-1] < history["loss"][0]
    assert all(np.isfinite(v.numpy()).all() for v in model.trainable_variables)


class Regularised(GuardedModel):
    """The subclassing form, with an ``add_loss`` term that the step must include."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        outputs = self.dense(x)
        self.add_loss(1e-3 * tf.reduce_sum(tf.square(outputs)))
        return outputs


def test_the_functional_form_leaves_the_class_for_subclasses():
    model = functional(clip_norm=1.0)
    assert isinstance(model, GuardedModel) and type(model).__name__ == "GuardedModel"
    assert GuardedModel.__bases__ == (keras.Model,)  # Keras would have made it (Functional,)
    assert Regularised(clip_norm=1.0)(tf.ones((2, 3))).shape == (2, 1)
    inputs = keras.Input((3,))
    with pytest.raises(TypeError, match=r"^Regularised: expected no inputs and outputs"):
        Regularised(inputs=inputs, outputs=keras.layers.Dense(1)(inputs))
    assert GuardedModel.__bases__ == (keras.Model,)


def test_the_functional_init_mirrors_keras_model_init():
    # GuardedModel's functional form makes keras.Model.__init__'s two calls itself
    # (fitting._init_functional): if Keras changes that __init__, this fails and says so.
    source = inspect.getsource(keras.Model.__init__)
    for call in (
        "Trainer.__init__(self)",
        "inject_functional_model_class(self.__class__)",
        "functional.Functional.__init__(self, *args, **kwargs)",
    ):
        assert call in source, (
            f"keras.Model.__init__ changed ({call} is gone): see _init_functional"
        )
    assert keras.Model.__bases__[0].__name__ == "TensorFlowTrainer"
    inputs = keras.Input((3,))
    outputs = keras.layers.Dense(1)(inputs)
    plain, guarded = keras.Model(inputs, outputs), GuardedModel(inputs, outputs)
    assert set(vars(guarded)) - {"clip_norm", "skipped_steps"} == set(vars(plain))
    assert type(plain) in type(guarded).__mro__


def test_subclass_form_with_add_loss_callbacks_and_evaluate():
    keras.utils.set_random_seed(0)
    model = Regularised(clip_norm=1.0)
    model.compile(keras.optimizers.SGD(0.01), "mse", metrics=["mae"])
    seen = []
    callback = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(logs))
    history = train(model, regression_data(NAN_BATCH), epochs=2, callbacks=[callback])
    assert [logs["skipped_steps"] for logs in seen] == [1.0, 1.0]
    assert sorted(history) == ["loss", "mae", "skipped_steps"]
    assert history["loss"][1] < history["loss"][0]
    scores = model.evaluate(regression_data(), verbose=0, return_dict=True)
    mse = float(keras.losses.MeanSquaredError()(*_targets_and_predictions(model)))
    assert scores["loss"] > mse  # the add_loss penalty is part of the loss
    assert scores["skipped_steps"] == 0.0


def _targets_and_predictions(model):
    x, y = next(iter(regression_data(batch=64)))
    return y, model(x)


def test_mixed_float16_nan_loss_skips_without_touching_the_loss_scale():
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        model = functional(clip_norm=1.0)
        model.compile(keras.optimizers.SGD(0.01), "mse")
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    optimizer = model.optimizer
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    x, y = next(iter(regression_data(batch=8)))
    model.train_on_batch(x, y)  # the first steps overflow float16: the optimizer lowers its scale
    scale = float(optimizer.dynamic_scale)
    weights = model.get_weights()
    nan_x = x.numpy().copy()
    nan_x[0, 0] = np.nan
    model.reset_metrics()  # train_on_batch resets them on Keras 3.15, not on 3.13
    logs = model.train_on_batch(nan_x, y, return_dict=True)
    assert logs["skipped_steps"] == 1.0
    assert float(optimizer.dynamic_scale) == scale  # a NaN loss is not a loss-scale overflow
    assert max_difference(model, _with_weights(model, weights)) == 0.0


def _with_weights(model, weights):
    clone = keras.models.clone_model(model)
    clone.set_weights(weights)
    return clone


def test_clip_norm_is_checked_before_the_model_is_built():
    with pytest.raises(TypeError, match=r"^clip_norm: expected .*, got str 'big'"):
        functional(clip_norm="big")
    with pytest.raises(ValueError, match=r"^clip_norm: expected .*, got float -1.0"):
        functional(clip_norm=-1.0)


SAVED = """
import keras, numpy as np
model = keras.saving.load_model({path!r})
print(type(model).__name__, model.clip_norm)
print(float(np.max(np.abs(model.predict(np.ones((2, 3), "float32"), verbose=0)))))
"""


def test_keras_file_loads_in_a_fresh_process_with_its_clip_norm(tmp_path):
    model = functional(clip_norm=0.25)
    model.compile(keras.optimizers.SGD(0.1), "mse")
    train(model, regression_data())
    path = str(tmp_path / "guarded.keras")
    model.save(path)
    result = run_python("import companion.fitting\n" + SAVED.format(path=path))
    assert result.returncode == 0, result.stderr[-2000:]
    name_and_clip, output = result.stdout.splitlines()[-2:]
    assert name_and_clip == "GuardedModel 0.25"
    expected = float(np.max(np.abs(model.predict(np.ones((2, 3), "float32"), verbose=0))))
    assert float(output) == pytest.approx(expected, rel=1e-6)


MIRRORED = """
from companion.notebook import split_cpu
split_cpu(2)
import keras, numpy as np, tensorflow as tf
import test_fitting as t
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    two = t.functional(clip_norm=0.5)
    two.compile(keras.optimizers.Adam(0.01), "mse")
one = t.functional(clip_norm=0.5)
one.compile(keras.optimizers.Adam(0.01), "mse")
logs = t.train(two, t.regression_data(t.NAN_BATCH), epochs=2)
t.train(one, t.regression_data(t.NAN_BATCH), epochs=2)
labels, probabilities, _ = t.classifier_outputs()
with strategy.scope():  # batches of 32 split 16 + 16 between the replicas
    inputs = keras.Input((5,))
    softmax = keras.Model(inputs, keras.layers.Softmax()(inputs * 1.0))
    softmax.compile(loss="sparse_categorical_crossentropy", metrics=[t.ExpectedCalibrationError()])
scored = tf.data.Dataset.from_tensor_slices((np.log(probabilities), labels)).batch(32)
ece = softmax.evaluate(scored, verbose=0, return_dict=True)["expected_calibration_error"]
print(abs(ece - t.calibration_error(labels, probabilities)) < 1e-5)
kernel = two.layers[-1].kernel.value.values
print(np.array_equal(kernel[0].numpy(), kernel[1].numpy()), t.max_difference(one, two) < 1e-6,
      logs["skipped_steps"])
"""


@pytest.mark.slow
def test_two_replicas_agree_skip_together_match_one_device_and_score_alike():
    here = {"PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), CHILD_ENV["PYTHONPATH"]])}
    result = run_python(MIRRORED, env={**CHILD_ENV, **here})  # the child imports this file
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-2:] == ["True", "True True [1.0, 1.0]"]


# ------------------------------------------------------------------ ExpectedCalibrationError


def calibration_error(labels, probabilities, weights=None, bins=15):
    """The definition, in NumPy, over the whole data at once."""
    confidence = probabilities.max(axis=1)
    correct = (probabilities.argmax(axis=1) == labels).astype(float)
    weights = np.ones_like(confidence) if weights is None else weights
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = which == b
        if weights[inside].sum() > 0:
            accuracy = np.average(correct[inside], weights=weights[inside])
            mean_confidence = np.average(confidence[inside], weights=weights[inside])
            total += weights[inside].sum() / weights.sum() * abs(accuracy - mean_confidence)
    return total


def classifier_outputs(n=200, classes=5, seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=3.0, size=(n, classes))
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return rng.integers(0, classes, n), probabilities.astype("float32"), rng.uniform(0, 2, n)


@pytest.mark.parametrize("splits", [[200], [64, 64, 64, 8], [7, 50, 143]], ids=str)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_calibration_error_equals_numpy_however_the_data_is_split(splits, weighted):
    labels, probabilities, weights = classifier_outputs()
    metric = ExpectedCalibrationError(num_bins=10)
    start = 0
    for size in splits:
        part = slice(start, start + size)
        metric.update_state(labels[part], probabilities[part], weights[part] if weighted else None)
        start += size
    expected = calibration_error(labels, probabilities, weights if weighted else None, bins=10)
    assert float(metric.result()) == pytest.approx(expected, rel=1e-5)
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_a_confidence_of_one_falls_in_the_last_bin():
    metric = ExpectedCalibrationError(num_bins=4)
    metric.update_state(np.array([[1], [0]]), [[0.0, 1.0], [0.0, 1.0]])  # (batch, 1) labels
    assert float(metric.result()) == pytest.approx(0.5)  # accuracy 1/2, confidence 1
    assert metric.totals["weight"].numpy().tolist() == [0, 0, 0, 2]


RESCORED = """
import keras, numpy as np, companion.fitting
model = keras.saving.load_model("{folder}/calibrated.keras")
data = np.load("{folder}/data.npz")
scores = model.evaluate(data["x"], data["y"], batch_size=32, verbose=0, return_dict=True)
print(scores["expected_calibration_error"])
"""


def test_calibration_error_in_evaluate_and_after_a_keras_round_trip(tmp_path):
    labels, probabilities, _ = classifier_outputs()
    keras.utils.set_random_seed(0)
    inputs = keras.Input((5,))
    model = keras.Model(inputs, keras.layers.Softmax()(inputs * 1.0))
    model.compile(loss="sparse_categorical_crossentropy", metrics=[ExpectedCalibrationError(7)])
    data = tf.data.Dataset.from_tensor_slices((np.log(probabilities), labels)).batch(32)
    scores = model.evaluate(data, verbose=0, return_dict=True)
    expected = calibration_error(labels, probabilities, bins=7)
    assert scores["expected_calibration_error"] == pytest.approx(expected, rel=1e-5)
    assert calibration_error(labels, probabilities, bins=15) != pytest.approx(expected, rel=1e-3)
    model.save(tmp_path / "calibrated.keras")
    np.savez(tmp_path / "data.npz", x=np.log(probabilities), y=labels)
    result = run_python(RESCORED.format(folder=str(tmp_path)))  # a fresh process
    assert result.returncode == 0, result.stderr[-2000:]
    assert float(result.stdout.splitlines()[-1]) == pytest.approx(expected, rel=1e-5)
    config = keras.metrics.serialize(ExpectedCalibrationError(7, name="ece"))
    assert keras.metrics.deserialize(config).get_config()["num_bins"] == 7


def test_calibration_error_refuses_bad_input_clearly():
    with pytest.raises(ValueError, match=r"^num_bins: expected an int >= 1"):
        ExpectedCalibrationError(num_bins=0)
    with pytest.raises(ValueError, match=r"^y_pred: expected probabilities of shape"):
        ExpectedCalibrationError().update_state([0, 1], [0.3, 0.9])


# ------------------------------------------------------------------------ find_learning_rate


def compiled_regression(optimizer=None):
    model = functional(keras.Model)
    model.compile(optimizer or keras.optimizers.SGD(0.01), "mse")
    return model


def test_range_test_grows_the_rate_records_batch_losses_and_undoes_everything():
    model = compiled_regression(keras.optimizers.Adam(0.003))
    model.optimizer.build(model.trainable_variables)
    before = [v.numpy().copy() for v in model.variables + model.optimizer.variables]
    first_batch = next(iter(regression_data()))
    first_loss = float(model.evaluate(*first_batch, verbose=0))
    found = find_learning_rate(model, regression_data(), min_lr=1e-4, max_lr=1e-1, steps=20)
    assert len(found.learning_rates) == len(found.losses) == 20 and not found.diverged
    assert found.learning_rates[0] == pytest.approx(1e-4)
    assert found.learning_rates[-1] == pytest.approx(1e-1)
    ratios = np.diff(np.log(found.learning_rates))
    np.testing.assert_allclose(ratios, ratios[0], rtol=1e-9)  # geometric
    assert found.losses[0] == pytest.approx(first_loss, rel=1e-5)  # this batch's, not a mean
    assert 1e-4 <= found.suggestion <= 1e-1
    after = [v.numpy() for v in model.variables + model.optimizer.variables]
    for old, new in zip(before, after, strict=True):
        np.testing.assert_array_equal(old, new)
    assert float(model.optimizer.learning_rate) == pytest.approx(0.003)


def test_range_test_stops_when_the_loss_diverges():
    found = find_learning_rate(
        compiled_regression(), regression_data(), min_lr=1e-3, max_lr=1e3, steps=60
    )
    assert found.diverged and len(found.losses) < 60
    assert found.suggestion < found.learning_rates[-1]
    assert found.plot().get_xscale() == "log"


def test_range_test_refuses_what_it_cannot_run():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    with pytest.raises(ValueError, match=r"^model: expected an optimizer with a plain"):
        find_learning_rate(compiled_regression(keras.optimizers.SGD(schedule)), regression_data())
    with pytest.raises(ValueError, match=r"^model: expected a compiled model"):
        find_learning_rate(functional(keras.Model), regression_data())
    with pytest.raises(ValueError, match=r"^max_lr: expected a finite number > 0.1"):
        find_learning_rate(compiled_regression(), regression_data(), min_lr=0.1, max_lr=0.1)


def test_range_test_steps_each_batch_under_steps_per_execution():
    # Keras calls batch hooks once per execution: the test must still set a rate per step.
    model = functional(keras.Model)
    model.compile(keras.optimizers.SGD(0.01), "mse", steps_per_execution=4)
    reference = compiled_regression()
    found = find_learning_rate(model, regression_data(), min_lr=1e-4, max_lr=1e-1, steps=20)
    expected = find_learning_rate(reference, regression_data(), min_lr=1e-4, max_lr=1e-1, steps=20)
    assert len(found.losses) == 20 and found.learning_rates[-1] == pytest.approx(1e-1)
    np.testing.assert_allclose(found.losses, expected.losses, rtol=1e-6)
    assert model.steps_per_execution == 4  # restored: fit runs four steps a call again
    calls = []
    callback = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: calls.append(batch)
    )
    train(model, regression_data(), callbacks=[callback])
    assert len(calls) == 2 and int(model.optimizer.iterations) == 8


@pytest.mark.filterwarnings("error::UserWarning")  # not "Your input ran out of data"
def test_range_test_cycles_a_dataset_of_unknown_length_and_numpy_arrays_alike():
    # 8 batches for 20 steps: each kind is read again from its start, in the same order.
    expected = find_learning_rate(compiled_regression(), regression_data(), steps=20, max_lr=0.1)
    unknown = regression_data().filter(lambda x, y: True)  # cardinality unknown: no len()
    found = find_learning_rate(compiled_regression(), unknown, steps=20, max_lr=0.1)
    x, y = (np.concatenate(parts) for parts in zip(*regression_data().as_numpy_iterator()))
    arrays = find_learning_rate(compiled_regression(), (x, y), steps=20, max_lr=0.1, batch_size=8)
    assert len(expected.losses) == 20 and not expected.diverged
    np.testing.assert_array_equal(found.losses, expected.losses)
    np.testing.assert_allclose(arrays.losses, expected.losses, rtol=1e-6)


def test_a_range_made_by_hand_is_checked_and_plot_takes_only_axes():
    made = LearningRateRange([1e-3, 1e-2], [1.0, float("nan")], 1e-4, True)
    assert made.losses[1] != made.losses[1]  # NaN: a diverged test records it
    with pytest.raises(ValueError, match=r"^losses: expected one loss per learning rate \(2\)"):
        LearningRateRange([1e-3, 1e-2], [1.0], 1e-4, False)
    with pytest.raises(ValueError, match=r"^learning_rates\[0\]: expected"):
        LearningRateRange([0.0], [1.0], 1e-4, False)
    with pytest.raises(TypeError, match=r"^ax: expected a matplotlib Axes or None, got str"):
        made.plot(ax="axes")
