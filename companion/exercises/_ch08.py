"""Chapter 8, customising fit: a step with sample weights, a step that clips the global norm,
a callback that stops at a target, temperature scaling, a loss."""

from __future__ import annotations

import numpy as np

from companion._checks import describe
from companion.exercises._framework import (
    CALLBACK_CLASS,
    FUNCTION,
    MODEL_CLASS,
    Exercise,
    Failed,
    expect,
    keras_subclass,
)
from companion.notebook import describe_error

EPOCHS = 2  # two: a metric that fit does not reset shows in the second epoch's logs
WEIGHT_ATOL, LOG_RTOL = 1e-6, 1e-5
STEP = (
    "compute the loss with self.compute_loss(x, y, y_pred, sample_weight) and apply its "
    "gradients to self.trainable_variables"
)
CLIP = "scale all the gradients by min(1, clip_norm / their global norm) before applying them"
IGNORED_WEIGHTS = (
    "it trained as if every sample weight were 1: pass sample_weight to self.compute_loss"
)


def _regressor_data(weighted=False):
    """The chapter's 64 examples in batches of 8, with a sample weight each if ``weighted``."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    features = rng.normal(size=(64, 3)).astype("float32")
    targets = 5 * features @ np.array([[1.0], [2.0], [3.0]], "float32")
    weights = np.random.default_rng(1).uniform(0, 2, size=64).astype("float32")
    arrays = (features, targets, weights) if weighted else (features, targets)
    return tf.data.Dataset.from_tensor_slices(arrays).batch(8)


def _built(answer, kwargs, start=None):
    """``answer(**kwargs)``, built for 3 features, with the weights ``start`` if given."""
    import keras

    keras.utils.set_random_seed(0)
    model = answer(**kwargs)
    model(np.zeros((1, 3), "float32"))
    if start is not None:
        model.set_weights(start)
    return model


def _fit(model, optimizer, weighted, **metrics):
    """(history, weights) after EPOCHS epochs of fit, in the data's order, without XLA."""
    model.compile(optimizer, "mse", jit_compile=False, **metrics)
    data = _regressor_data(weighted)
    history = model.fit(data, epochs=EPOCHS, verbose=0, shuffle=False).history
    return history, model.get_weights()


def _kwargs(clip_norm):
    return {} if clip_norm is None else {"clip_norm": clip_norm}


def _start(answer, context, clip_norm):
    """The initial weights of every run with this ``clip_norm``: the answer's and Keras's."""
    import tensorflow as tf

    def make():
        with tf.device("/CPU:0"):
            return _built(answer, _kwargs(clip_norm)).get_weights()

    return context.once(f"start {clip_norm}", make)


def _ours(answer, context, clip_norm=None):
    """(history, {path: weight}, {path: initial weight}) of the answer's own step under fit."""

    def make():
        import keras
        import tensorflow as tf

        kwargs, start = _kwargs(clip_norm), _start(answer, context, clip_norm)
        with tf.device("/CPU:0"):  # the same numbers on every machine: no TF32, no GPU kernels
            model = _built(answer, kwargs, start)
            try:
                history, weights = _fit(
                    model, keras.optimizers.SGD(0.01), True, weighted_metrics=["mae"]
                )
            except Exception as error:  # noqa: BLE001 - diagnosed, or reported as it came
                _diagnose(answer, kwargs)
                raise error
        paths = [w.path for w in model.weights]
        return history, dict(zip(paths, weights)), dict(zip(paths, start))

    return context.once(f"ours {clip_norm}", make)


def _diagnose(answer, kwargs):
    """Raise Failed naming the mistake if one direct call of the step shows it: it takes only
    (x, y) batches, or returns no logs."""
    import keras

    def step(weighted):
        model = _built(answer, kwargs)
        model.compile(keras.optimizers.SGD(0.01), "mse", weighted_metrics=["mae"])
        return model.train_step(next(iter(_regressor_data(weighted))))  # eagerly, once

    try:
        logs = step(True)
    except Exception as error:  # noqa: BLE001 - the answer's own error, reported
        try:
            step(False)
        except Exception:  # noqa: BLE001 - it fails either way: fit's error is reported
            return
        raise Failed(
            f"expected the step to take batches of (x, y, sample_weight), got "
            f"{describe_error(error)}, while (x, y) batches run (unpack each batch with "
            "keras.utils.unpack_x_y_sample_weight)"
        ) from None
    expect(
        isinstance(logs, dict) and {"loss", "mae"} <= set(logs),
        f"expected train_step to return the logs, a dict with 'loss' and 'mae', got "
        f"{describe(logs)} (return each metric's result by its name)",
    )


def _keras(answer, context, clip_norm=None, weighted=True, **clipping):
    """(history, weights) of Keras's own step (a plain ``keras.Model`` around a copy of the
    answer's network, from the same weights) with ``SGD(0.01, **clipping)``. Its logs hold
    ``mae`` (unweighted, as ``metrics=`` logs it) and ``weighted_mae``."""

    def make():
        import keras
        import tensorflow as tf

        kwargs, start = _kwargs(clip_norm), _start(answer, context, clip_norm)
        with tf.device("/CPU:0"):
            network = _built(answer, kwargs, start)
            inputs = keras.Input((3,))
            model = keras.Model(inputs, network(inputs))  # keras.Model's train_step
            optimizer = keras.optimizers.SGD(0.01, **clipping)
            mae = keras.metrics.MeanAbsoluteError
            return _fit(
                model,
                optimizer,
                weighted,
                metrics=[mae(name="mae")],
                weighted_metrics=[mae(name="weighted_mae")],
            )

    return context.once(f"keras {clip_norm} {weighted} {sorted(clipping.items())}", make)


def _gap(ours, theirs):
    return max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs))


def _weights_check(answer, context, clip_norm, reference, what, mistakes, otherwise=STEP):
    """The answer's weights against Keras's step with ``SGD(0.01, **reference)``.

    ``mistakes`` are ``(clipping, weighted, mistake)``: Keras's step that a likely mistake
    reproduces, and the mistake's name; ``otherwise`` is said when none of them does.
    """
    _, weights, before = _ours(answer, context, clip_norm)
    _, theirs = _keras(answer, context, clip_norm, **reference)
    gap = _gap(weights.values(), theirs)
    if gap < WEIGHT_ATOL:
        return
    frozen = [path for path, value in weights.items() if np.array_equal(value, before[path])]
    likely = otherwise
    if frozen:
        likely = (
            f"{', '.join(frozen)} never moved: pass self.trainable_variables to tape.gradient "
            "and to self.optimizer.apply"
        )
    else:
        for clipping, weighted, mistake in mistakes:
            _, other = _keras(answer, context, clip_norm, weighted, **clipping)
            if _gap(weights.values(), other) < WEIGHT_ATOL:
                likely = mistake
                break
    raise Failed(
        f"expected the weights of {what} within 1e-6 after {EPOCHS} epochs, got a "
        f"difference of {gap:.3g} ({likely})"
    )


def _logged(history, name):
    expect(
        name in history,
        f"expected the logs to hold {name!r}, got {sorted(history)} (return a dict of each "
        "metric's result, by the metric's name)",
    )
    return np.asarray(history[name], "float64")


def _close(ours, theirs):
    return np.allclose(ours, theirs, rtol=LOG_RTOL, atol=0.0)


def _log_check(answer, context, clip_norm, reference, ours, keras_name):
    """The answer's logged ``ours`` against Keras's ``keras_name`` under ``SGD(**reference)``."""
    history, weights, _ = _ours(answer, context, clip_norm)
    logged = _logged(history, ours)
    keras_history, theirs = _keras(answer, context, clip_norm, **reference)
    expected = np.asarray(keras_history[keras_name], "float64")
    if _close(logged, expected):
        return
    right_weights = _gap(weights.values(), theirs) < WEIGHT_ATOL
    if not np.any(logged):
        likely = "nothing was added to the metric: update_state it in every step"
    elif ours == "mae" and _close(logged, keras_history["mae"]):
        likely = "the MAE is not weighted: pass sample_weight to its update_state"
    elif right_weights and _close(logged[:1], expected[:1]):
        likely = (
            "the first epoch is right: list the metric in the metrics property, which fit resets"
        )
    elif right_weights:
        likely = (
            "the weights are right: return a metric's result, the mean over the epoch so far, "
            "not the last batch's value"
        )
    elif ours == "loss" and _close(
        logged, _keras(answer, context, clip_norm, False, **reference)[0]["loss"]
    ):
        likely = IGNORED_WEIGHTS
    else:
        likely = "the weights differ too: see the check on the weights"
    shown = ", ".join(f"{value:.4f}" for value in expected)
    got = ", ".join(f"{value:.4f}" for value in logged)
    raise Failed(
        f"expected the logged {ours} of Keras's step in the {EPOCHS} epochs ({shown}) within "
        f"rtol 1e-5, got {got} ({likely})"
    )


def logs_loss_and_mae(answer, context):
    """fit runs the step on batches of (x, y, sample_weight); its logs hold loss and mae"""
    history, _, _ = _ours(answer, context)
    for name in ("loss", "mae"):
        _logged(history, name)


def step_weights_like_keras(answer, context):
    """After 2 epochs the weights equal those of Keras's own step within 1e-6"""
    _weights_check(
        answer,
        context,
        None,
        {},
        "Keras's step (keras.Model, SGD(0.01))",
        [({}, False, IGNORED_WEIGHTS)],
    )


def loss_like_keras(answer, context):
    """The logged loss equals Keras's in both epochs (rtol 1e-5)"""
    _log_check(answer, context, None, {}, "loss", "loss")


def mae_weighted_like_keras(answer, context):
    """The logged MAE is weighted, as compile(weighted_metrics=["mae"]) logs it"""
    _log_check(answer, context, None, {}, "mae", "weighted_mae")


def _clip_mistakes(clip_norm):
    return [
        (
            {"clipnorm": clip_norm},
            True,
            f"each gradient was clipped to {clip_norm} on its own, as SGD(clipnorm={clip_norm}) "
            "does: clip their global norm with tf.clip_by_global_norm",
        ),
        ({}, True, "the gradients were not clipped: apply the list tf.clip_by_global_norm returns"),
        ({"global_clipnorm": clip_norm}, False, IGNORED_WEIGHTS),
    ]


def clips_like_keras(answer, context):
    """With clip_norm=0.5 the weights equal those of SGD(global_clipnorm=0.5) within 1e-6"""
    _weights_check(
        answer,
        context,
        0.5,
        {"global_clipnorm": 0.5},
        "keras.Model with SGD(0.01, global_clipnorm=0.5)",
        _clip_mistakes(0.5),
        CLIP,
    )


def follows_clip_norm(answer, context):
    """With clip_norm=2.0 they equal those of SGD(global_clipnorm=2.0)"""
    _, low, _ = _ours(answer, context, 0.5)
    _, high, _ = _ours(answer, context, 2.0)
    if _gap(low.values(), high.values()) == 0:
        _, unclipped = _keras(answer, context, 2.0)
        expect(
            _gap(high.values(), unclipped) < WEIGHT_ATOL,
            "expected different weights for clip_norm=0.5 and clip_norm=2.0, got the same "
            "(clip to self.clip_norm, the value the model was made with, not to a number of "
            "your own)",
        )
    _weights_check(
        answer,
        context,
        2.0,
        {"global_clipnorm": 2.0},
        "keras.Model with SGD(0.01, global_clipnorm=2.0)",
        _clip_mistakes(2.0),
        CLIP,
    )


def clipped_logs_like_keras(answer, context):
    """With clip_norm=0.5 the logged loss and weighted MAE equal Keras's (rtol 1e-5)"""
    _log_check(answer, context, 0.5, {"global_clipnorm": 0.5}, "loss", "loss")
    _log_check(answer, context, 0.5, {"global_clipnorm": 0.5}, "mae", "weighted_mae")


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
        "A step that honours sample weights.",
        MODEL_CLASS,
        (logs_loss_and_mae, step_weights_like_keras, loss_like_keras, mae_weighted_like_keras),
        (
            "fit hands train_step each batch as one tuple; with sample weights it holds three "
            "parts. Every place that uses y_pred with y can take the weights too.",
            "Unpack the batch with keras.utils.unpack_x_y_sample_weight, pass sample_weight to "
            "self.compute_loss and to the MAE's update_state, and return each metric's result "
            "by its name, as InlineModel does.",
        ),
    ),
    Exercise(
        "8.2",
        "Clip the global norm.",
        MODEL_CLASS,
        (clips_like_keras, follows_clip_norm, clipped_logs_like_keras),
        (
            "Store clip_norm in __init__. The global norm is the norm of all the gradients "
            "taken as one long vector, and one factor scales them all.",
            "Between tape.gradient and self.optimizer.apply, replace the gradients by the "
            "first value tf.clip_by_global_norm(gradients, self.clip_norm) returns; keep the "
            "sample weights and the metrics of exercise 8.1.",
        ),
    ),
    Exercise(
        "8.3",
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
        "8.4",
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
        "8.5",
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
