"""Chapter 8, customising fit: a callback that stops at a target, temperature scaling, a loss."""

from __future__ import annotations

import numpy as np

from companion.exercises._framework import (
    CALLBACK_CLASS,
    FUNCTION,
    Exercise,
    Failed,
    expect,
    keras_subclass,
)

TARGET = 3.5  # the regressor's epoch losses: ... 3.99, 3.68, 3.35, ...: first below at epoch 9


def _stopped(answer, context):
    """The loss history of the regressor fit for up to 50 epochs with the answer(TARGET)."""
    import keras
    import tensorflow as tf

    def make():
        rng = np.random.default_rng(0)
        features = rng.normal(size=(64, 3)).astype("float32")
        targets = 5 * features @ np.array([[1.0], [2.0], [3.0]], "float32")
        data = tf.data.Dataset.from_tensor_slices((features, targets)).batch(8)
        with tf.device("/CPU:0"):  # the same losses on every machine: no TF32, no XLA
            keras.utils.set_random_seed(0)
            inputs = keras.Input((3,))
            hidden = keras.layers.Dense(16, activation="relu")(inputs)
            model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
            model.compile(keras.optimizers.SGD(0.01), "mse", jit_compile=False)
            history = model.fit(
                data, epochs=50, verbose=0, shuffle=False, callbacks=[answer(TARGET)]
            ).history
        return [float(loss) for loss in history["loss"]], int(model.optimizer.iterations)

    return context.once("stopped", make)


def stops_early(answer, context):
    """fit(epochs=50) ran fewer than 50 epochs"""
    losses, _ = _stopped(answer, context)
    expect(
        len(losses) < 50,
        f"expected fewer than 50 epochs with target {TARGET}, got 50 (set "
        "self.model.stop_training = True in on_epoch_end)",
    )


def ends_below(answer, context):
    """The last epoch's loss is below the target"""
    losses, _ = _stopped(answer, context)
    expect(
        losses[-1] < TARGET,
        f"expected the last epoch's loss below {TARGET}, got {losses[-1]:.3f} after "
        f"{len(losses)} epoch(s) (is the comparison the right way round, on the epoch's "
        "logs['loss'] in on_epoch_end, not a batch's?)",
    )


def first_epoch_below(answer, context):
    """It stopped at the first epoch below the target, not later"""
    losses, _ = _stopped(answer, context)
    late = [i + 1 for i, loss in enumerate(losses[:-1]) if loss < TARGET]
    expect(
        not late,
        f"expected to stop after epoch {late[0] if late else '?'}, the first below {TARGET}, "
        f"got {len(losses)} epochs (stop at the end of the first epoch below the target)",
    )


def whole_epochs(answer, context):
    """Every epoch ran its 8 batches: training stopped at an epoch's end"""
    losses, steps = _stopped(answer, context)
    expect(
        steps == 8 * len(losses),
        f"expected {8 * len(losses)} optimizer steps for {len(losses)} epochs of 8 batches, "
        f"got {steps} (stop in on_epoch_end, not a batch's callback: stop_training set "
        "after a batch cuts its epoch short)",
    )


def _softmax(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _ece(labels, logits, temperature):
    from companion.fitting import ExpectedCalibrationError

    metric = ExpectedCalibrationError(num_bins=15)
    metric.update_state(labels, _softmax(logits / temperature).astype("float32"))
    return float(metric.result())


def _overconfident(seed, size, drawn_at):
    """Logits whose labels were drawn at temperature ``drawn_at`` (the chapter's: 2, 2000, 2)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.0, size=(size, 5))
    labels = np.array([rng.choice(5, p=p) for p in _softmax(logits / drawn_at)])
    return logits, labels


def _temperature(answer, logits, labels):
    found = answer(logits.copy(), labels.copy())
    expect(
        np.ndim(found) == 0 and np.isfinite(float(found)),
        f"expected the function to return one temperature (a float), got {found!r}",
    )
    return float(found)


def _temperature_check(answer, seed, size, drawn_at, low, high):
    logits, labels = _overconfident(seed, size, drawn_at)
    found = _temperature(answer, logits, labels)
    likely = ""
    if found <= 1.0:
        likely = " (divide the logits by T, don't multiply: T > 1 softens)"
    elif found >= 3.95:
        likely = " (the grid's largest T: the argmax of the ECE taken, not the argmin?)"
    expect(
        low <= found <= high,
        f"expected T between {low} and {high} for labels drawn at {drawn_at}, got "
        f"{found:g}{likely}",
    )
    before, after = _ece(labels, logits, 1.0), _ece(labels, logits, found)
    expect(
        after < before / 2,
        f"expected the ECE at T={found:g} under half the ECE at T=1 ({before:.3f}), got "
        f"{after:.3f}",
    )


def chapter_temperature(answer, context):
    """On the chapter's predictions T is in [1.5, 3] and the ECE falls by more than half"""
    _temperature_check(answer, 2, 2000, 2.0, 1.5, 3.0)


def other_temperature(answer, context):
    """On labels drawn at T=3 (4,000 examples) T is in [2.5, 3.6]"""
    _temperature_check(answer, 5, 4000, 3.0, 2.5, 3.6)


def _smoothing_gaps(answer, classes, smoothing):
    import keras

    rng = np.random.default_rng(classes)
    logits = rng.normal(size=(64, classes))
    probabilities = _softmax(logits).astype("float32")
    labels = rng.integers(0, classes, size=64)
    weights = rng.uniform(0, 2, size=64).astype("float32")
    loss = answer(classes, smoothing)
    gaps = []
    for w in (None, weights):
        ours = float(loss(labels, probabilities, w))
        theirs = keras.losses.CategoricalCrossentropy(label_smoothing=smoothing)(
            np.eye(classes)[labels], probabilities, w
        )
        gaps.append(abs(ours - float(theirs)))
    return gaps, loss, labels, probabilities


def matches_keras(answer, context):
    """Equals CategoricalCrossentropy(label_smoothing=s) within 1e-5, s = 0.1 and 0.25"""
    for classes, smoothing in ((5, 0.1), (3, 0.25)):
        (plain, _), _, _, _ = _smoothing_gaps(answer, classes, smoothing)
        expect(
            plain < 1e-5,
            f"expected Keras's loss within 1e-5 for {classes} classes, s={smoothing}, got a "
            f"difference of {plain:.2g} (1 - s on the true class, s / classes added to "
            "every class, the true one included)",
        )


def weights_like_keras(answer, context):
    """With sample weights it equals Keras's within 1e-5 too"""
    (_, weighted), _, _, _ = _smoothing_gaps(answer, 5, 0.1)
    expect(
        weighted < 1e-5,
        f"expected Keras's weighted loss within 1e-5, got a difference of {weighted:.2g} "
        "(return one loss per example from call: the base class applies the weights "
        "and the mean)",
    )


def config_round_trip(answer, context):
    """from_config(get_config()) gives the same loss"""
    _, loss, labels, probabilities = _smoothing_gaps(answer, 3, 0.25)
    try:
        rebuilt = type(loss).from_config(loss.get_config())
    except TypeError as error:
        raise Failed(
            f"expected from_config(get_config()) to rebuild the loss, got TypeError: {error} "
            "(are classes and smoothing in get_config?)"
        ) from error
    same = float(rebuilt(labels, probabilities)), float(loss(labels, probabilities))
    expect(
        abs(same[0] - same[1]) < 1e-6,
        f"expected the same loss after from_config(get_config()), got {same[0]:.4f} instead "
        f"of {same[1]:.4f} (are classes and smoothing in get_config?)",
    )


EXERCISES = (
    Exercise(
        "8.1",
        "Stop at a target.",
        CALLBACK_CLASS,
        (stops_early, ends_below, first_epoch_below, whole_epochs),
        (
            "fit checks model.stop_training after every epoch; a callback can set it.",
            "Store target in __init__; in on_epoch_end(self, epoch, logs=None) compare "
            "logs['loss'] with it and set self.model.stop_training = True when it is below.",
        ),
    ),
    Exercise(
        "8.2",
        "Temperature scaling.",
        FUNCTION,
        (chapter_temperature, other_temperature),
        (
            "softmax(logits / T) for every T of a grid such as 1.0, 1.1, ..., 4.0; measure "
            "each with a fresh ExpectedCalibrationError.",
            "Collect the ECE of each T in a list and return the grid's entry at "
            "np.argmin of that list, as a float.",
        ),
    ),
    Exercise(
        "8.3",
        "A loss with label smoothing.",
        keras_subclass("losses.Loss"),
        (matches_keras, weights_like_keras, config_round_trip),
        (
            "Implement call(y_true, y_pred) returning one loss per example; the base class "
            "applies sample weights and the reduction.",
            "ops.one_hot the integer labels, mix them as one_hot * (1 - s) + s / classes, "
            "and return -ops.sum(smoothed * ops.log(clipped y_pred), axis=-1); put classes "
            "and smoothing in get_config.",
        ),
    ),
)
