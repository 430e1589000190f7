"""Chapter 7, custom training loops: a loop that matches model.fit, per-layer learning rates,
gradient accumulation, skipping."""

from __future__ import annotations

import numpy as np

from companion.exercises._framework import FUNCTION, Exercise, expect

SIDE, META, CLASSES = 16, 10, 6
#: The loop exercise: 100 examples in batches of 32 (the last holds 4), 3 epochs of SGD.
FEATURES, EXAMPLES, BATCH, EPOCHS, RATE = 6, 100, 32, 3, 0.1
SIZES = (32, 32, 32, 4)


def _fit_model(penalty=0.01):
    """A small classifier with an L2 penalty and a BatchNormalization layer: the same initial
    weights with or without the penalty (a regularizer draws no random numbers)."""
    import keras

    keras.utils.set_random_seed(0)
    regularizer = keras.regularizers.L2(penalty) if penalty else None
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(16, kernel_regularizer=regularizer, name="hidden"),
            keras.layers.BatchNormalization(name="norm"),
            keras.layers.Activation("relu"),
            keras.layers.Dense(3, activation="softmax", name="classes"),
        ],
        name="classifier",
    )


def _fit_data():
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(EXAMPLES, FEATURES)).astype("float32")
    y = np.argmax(x[:, :3] + 0.5 * x[:, 3:], axis=1)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)


def _keras_fit(context, penalty=0.01):
    """model.fit's final weights, history['loss'] and each batch's loss (from its running
    means), from the answer's initial weights."""
    import keras
    import tensorflow as tf

    class RunningMeans(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.means = []

        def on_epoch_begin(self, epoch, logs=None):
            self.means.append([])

        def on_train_batch_end(self, batch, logs=None):
            self.means[-1].append(float(logs["loss"]))

    def make():
        with tf.device("/CPU:0"):  # the same arithmetic on every machine: no TF32, no XLA
            model = _fit_model(penalty)
            model.compile(
                keras.optimizers.SGD(RATE),
                keras.losses.SparseCategoricalCrossentropy(),
                jit_compile=False,
            )
            running = RunningMeans()
            history = model.fit(
                _fit_data(), epochs=EPOCHS, shuffle=False, verbose=0, callbacks=[running]
            ).history
        counts = np.cumsum(SIZES)
        batch_losses = [
            [(m * n - p * q) / s for m, n, p, q, s in zip(e, counts, [0, *e], [0, *counts], SIZES)]
            for e in running.means
        ]
        return model.get_weights(), [float(v) for v in history["loss"]], batch_losses

    return context.once(f"keras_fit_{penalty}", make)


def _trained(answer, context):
    """The model the answer trained, its optimizer, and the losses it returned."""
    import keras
    import tensorflow as tf

    def make():
        with tf.device("/CPU:0"):
            model, optimizer = _fit_model(), keras.optimizers.SGD(RATE)
            losses = answer(
                model, optimizer, keras.losses.SparseCategoricalCrossentropy(), _fit_data(), EPOCHS
            )
        return model, optimizer, losses

    return context.once("trained", make)


def one_step_per_batch(answer, context):
    """The optimizer took 12 steps: 3 epochs of 4 batches, the smaller last batch included"""
    _, optimizer, _ = _trained(answer, context)
    steps = int(optimizer.iterations)
    likely = ""
    if steps == 0:
        likely = " (apply the gradients with the optimizer passed in)"
    elif steps == EPOCHS * (len(SIZES) - 1):
        likely = " (the last batch, of 4 examples, left out?)"
    elif steps == len(SIZES):
        likely = " (one epoch only: loop over range(epochs))"
    expect(steps == EPOCHS * len(SIZES), f"expected 12 optimizer steps, got {steps}{likely}")


def _largest_gap(weights, reference):
    return max(float(np.max(np.abs(u - v))) for u, v in zip(weights, reference))


def same_weights_as_fit(answer, context):
    """The weights (the moving statistics too) equal model.fit's within 1e-5"""
    model, _, _ = _trained(answer, context)
    reference, _, _ = _keras_fit(context)
    gaps = [float(np.max(np.abs(u - v))) for u, v in zip(model.get_weights(), reference)]
    if max(gaps) < 1e-5:
        return
    where = model.weights[int(np.argmax(gaps))].path
    likely = ""
    if not np.any(model.get_layer("norm").moving_mean.numpy()):
        likely = (
            " (BatchNormalization's moving mean never moved: call the model with "
            "training=True in the training step)"
        )
    elif _largest_gap(model.get_weights(), _keras_fit(context, penalty=0)[0]) < 1e-5:
        likely = (
            " (they equal model.fit's without the L2 penalty: add sum(model.losses) to the "
            "loss inside the tape)"
        )
    expect(
        False,
        f"expected model.fit's weights within 1e-5, got a gap of {max(gaps):.2g} in "
        f"{where}{likely}",
    )


def same_losses_as_fit(answer, context):
    """The losses it returns equal model.fit's history['loss'] within 1e-5"""
    _, _, losses = _trained(answer, context)
    _, expected, batch_losses = _keras_fit(context)
    expect(
        isinstance(losses, (list, tuple)) and len(losses) == EPOCHS,
        f"expected a list of {EPOCHS} losses, one per epoch, got {type(losses).__name__}"
        + (f" of {len(losses)}" if isinstance(losses, (list, tuple)) else ""),
    )
    got = [float(loss) for loss in losses]
    if max(abs(a - b) for a, b in zip(got, expected)) < 1e-5:
        return
    shown = ", ".join(f"{v:.4f}" for v in got)
    expect(
        False,
        f"expected {', '.join(f'{v:.4f}' for v in expected)}, got {shown}"
        f"{_likely_slip(got, expected, batch_losses)}",
    )


def _likely_slip(got, expected, batch_losses):
    """The slip that most likely gave the epoch losses ``got`` instead of ``expected``, as a note
    in parentheses; ``""`` if none fits."""

    def near(values):
        return max(abs(a - b) for a, b in zip(got, values)) < 1e-4

    if near([float(np.mean(epoch)) for epoch in batch_losses]):
        return (
            " (a plain mean of the batch means: the last batch holds 4 examples, so weight "
            "each batch's loss by its size, as model.fit does)"
        )
    if near([float(np.mean(expected[: e + 1])) for e in range(EPOCHS)]):
        return " (a running mean never reset: start it again at every epoch)"
    if all(a < b - 1e-4 for a, b in zip(got, expected)):
        return " (model.fit's loss includes the L2 penalty, sum(model.losses))"
    return ""


def _model(seed=0):
    """The chapter's two-input model, small: the same weights for the same seed."""
    import keras

    from companion.models import functional_multimodal

    keras.utils.set_random_seed(seed)
    return functional_multimodal((SIDE, SIDE, 3), meta_dim=META, num_classes=CLASSES)


def _batch(size, seed=7):
    rng = np.random.default_rng(seed)
    images = rng.uniform(size=(size, SIDE, SIDE, 3)).astype("float32")
    meta = rng.normal(size=(size, META)).astype("float32")
    return (images, meta), rng.integers(0, CLASSES, size=size)


def _gradients(model, x, y):
    import keras
    import tensorflow as tf

    with tf.GradientTape() as tape:
        loss = keras.losses.SparseCategoricalCrossentropy()(y, model(x, training=True))
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


def _two_rates(answer, context):
    """Each variable's step divided by its gradient, after one call of the answer's step."""

    def make():
        model = _model()
        x, y = _batch(32)
        gradients = _gradients(model, x, y)
        before = [v.numpy() for v in model.trainable_variables]
        step = answer(model)
        step(x, y)
        image = {id(v) for v in model.get_layer("image_branch").trainable_variables}
        rows = []
        for v, b, g in zip(model.trainable_variables, before, gradients):
            moved = b - v.numpy()
            rate = float(np.sum(moved * g) / max(float(np.sum(g * g)), 1e-30))
            error = float(np.max(np.abs(moved - rate * g)))
            rows.append((v.path, id(v) in image, rate, error))
        return rows

    return context.once("rates", make)


def _rate_check(answer, context, in_image, expected, part):
    for path, image, rate, error in _two_rates(answer, context):
        if image != in_image:
            continue
        likely = ""
        if abs(rate) < 1e-9:
            likely = " (is the variable in one of the optimizers' lists?)"
        elif abs(rate - 0.05 - 0.005) < 1e-4:
            likely = " (is it in both optimizers' lists?)"
        elif rate < 0:
            likely = " (an update with the wrong sign: apply_gradients subtracts)"
        expect(
            abs(rate - expected) < 1e-4 and error < 1e-6,
            f"expected {path} ({part}) to move by {expected} x its gradient, got "
            f"{rate:.3g} x its gradient{likely}",
        )


def image_branch_slow(answer, context):
    """Every image-branch variable moves by 0.005 x its gradient"""
    _rate_check(answer, context, True, 0.005, "image branch")


def the_rest_fast(answer, context):
    """Every other variable moves by 0.05 x its gradient"""
    _rate_check(answer, context, False, 0.05, "not the image branch")


def _accumulated(answer, context):
    """The answer's accumulated step and one full-batch step, from the same weights."""
    import keras

    def make():
        model, full = _model(), _model()
        x, y = _batch(64)
        optimizer = keras.optimizers.SGD(0.05)
        before = [v.numpy() for v in model.trainable_variables]
        answer(model, optimizer, x, y)
        keras.optimizers.SGD(0.05).apply_gradients(
            zip(_gradients(full, x, y), full.trainable_variables)
        )
        return model, full, before, optimizer

    return context.once("accumulated", make)


def applied_once(answer, context):
    """The optimizer applied one update (iterations == 1)"""
    _, _, _, optimizer = _accumulated(answer, context)
    steps = int(optimizer.iterations)
    expect(
        steps == 1,
        f"expected 1 optimizer step for the batch of 64, got {steps} (accumulate the two "
        "halves' gradients, then call apply_gradients once)",
    )


def same_as_full_batch(answer, context):
    """The weights equal those of one SGD step on the full batch of 64, within 1e-6"""
    model, full, before, _ = _accumulated(answer, context)
    gap, along, length = 0.0, 0.0, 0.0
    for v, w, b in zip(model.trainable_variables, full.trainable_variables, before):
        ours, theirs = b - v.numpy(), b - w.numpy()
        gap = max(gap, float(np.max(np.abs(ours - theirs))))
        along, length = along + float(np.sum(ours * theirs)), length + float(np.sum(theirs**2))
    ratio = along / max(length, 1e-30)
    likely = ""
    if abs(ratio - 2) < 0.05:
        likely = " (average the halves' gradients, don't add them)"
    elif abs(ratio - 0.5) < 0.05:
        likely = " (only one half's gradients applied?)"
    expect(
        gap < 1e-6,
        f"expected the full batch's weights within 1e-6, got a gap of {gap:.2g}; the step "
        f"was {ratio:.2f} times the full batch's{likely}",
    )


def _skipping(answer, context):
    """The answer run on one epoch of 5 batches whose third holds a NaN."""
    import keras
    import tensorflow as tf

    from companion.training import make_train_step

    def make():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        rng = np.random.default_rng(0)
        x = rng.normal(size=(40, 4)).astype("float32")
        x[2 * 8 + 3, 1] = np.nan
        y = rng.integers(0, 3, size=40)
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
        optimizer = keras.optimizers.Adam(3e-3)
        step = make_train_step(
            model,
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            element_spec=dataset.element_spec,
        )
        return answer(step, dataset), model, optimizer

    return context.once("skipping", make)


def _pair(result):
    expect(
        isinstance(result, tuple) and len(result) == 2,
        f"expected the function to return (skipped, losses), got {type(result).__name__}",
    )
    return result


def one_skipped(answer, context):
    """One batch of five was skipped, and the count says 1"""
    result, _, _ = _skipping(answer, context)
    skipped, losses = _pair(result)
    expect(
        skipped == 1,
        f"expected 1 skipped batch, got {skipped} (count a batch when its 'applied' is False)",
    )
    expect(
        len(losses) == 4,
        f"expected the losses of the 4 applied batches, got {len(losses)}"
        + (" (continue after a skipped batch, don't break)" if len(losses) < 4 else "")
        + (" (a skipped batch's loss recorded?)" if len(losses) > 4 else ""),
    )


def finite_after_skip(answer, context):
    """The losses and the weights are finite, and the optimizer took 4 steps"""
    result, model, optimizer = _skipping(answer, context)
    _, losses = _pair(result)
    expect(
        all(np.isfinite(float(loss)) for loss in losses),
        "expected only finite losses, got a NaN (a skipped batch's loss recorded?)",
    )
    expect(
        all(np.isfinite(w).all() for w in model.get_weights()),
        "expected finite weights, got a NaN or an infinity",
    )
    steps = int(optimizer.iterations)
    expect(steps == 4, f"expected 4 optimizer steps (5 batches, 1 skipped), got {steps}")


EXERCISES = (
    Exercise(
        "7.1",
        "A loop that matches `model.fit`.",
        FUNCTION,
        (one_step_per_batch, same_weights_as_fit, same_losses_as_fit),
        (
            "model.fit's step runs the model in training mode, adds the layers' penalties to "
            "the loss inside the tape, and applies the gradients once per batch. Its "
            "history['loss'] is each epoch's mean loss per example, started afresh every epoch.",
            "Inside the tape, the loss is loss_fn(y, model(x, training=True)) + "
            "sum(model.losses). For each epoch, start a total and a count at 0; for every "
            "batch add float(loss) times the batch's size to the total and the size to the "
            "count; append total / count at the epoch's end.",
        ),
    ),
    Exercise(
        "7.2",
        "Per-layer learning rates.",
        FUNCTION,
        (image_branch_slow, the_rest_fast),
        (
            "An optimizer only updates the variables you hand to apply_gradients: two "
            "optimizers can share one gradient computation.",
            "Split model.trainable_variables by membership in "
            "model.get_layer('image_branch').trainable_variables (compare id(v)), take one "
            "tape.gradient of both lists, and give each part to its own SGD.",
        ),
    ),
    Exercise(
        "7.3",
        "Gradient accumulation.",
        FUNCTION,
        (applied_once, same_as_full_batch),
        (
            "The loss is a mean over the batch: the full batch's gradient is the mean of the "
            "halves' gradients when the halves are equal.",
            "Slice x with tf.nest.map_structure(lambda t: t[i : i + 32], x), take each "
            "half's gradients with its own tape, average them entry by entry and call "
            "optimizer.apply_gradients once.",
        ),
    ),
    Exercise(
        "7.4",
        "Skip instead of stop.",
        FUNCTION,
        (one_skipped, finite_after_skip),
        (
            "The step's output dict says whether it applied the update; your loop decides "
            "what to do with a batch it did not.",
            "Loop over the dataset and call the step on each batch; read bool() of its "
            "'applied' output: count the batches where it is False and move on, keep the "
            "loss of the others, and return both.",
        ),
    ),
)
