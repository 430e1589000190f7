"""Chapter 7's exercise checks: a correct answer passes, each likely mistake is named."""

import keras
import tensorflow as tf


def make_two_rate_step(model, slow_rate=0.005, fast_rate=0.05):
    image_ids = {id(v) for v in model.get_layer("image_branch").trainable_variables}
    image_vars = [v for v in model.trainable_variables if id(v) in image_ids]
    other_vars = [v for v in model.trainable_variables if id(v) not in image_ids]
    slow, fast = keras.optimizers.SGD(slow_rate), keras.optimizers.SGD(fast_rate)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = keras.losses.SparseCategoricalCrossentropy()(y, model(x, training=True))
        gradients = tape.gradient(loss, image_vars + other_vars)
        slow.apply_gradients(zip(gradients[: len(image_vars)], image_vars))
        fast.apply_gradients(zip(gradients[len(image_vars) :], other_vars))

    return step


def one_rate_step(model):
    return make_two_rate_step(model, 0.05, 0.05)


def test_per_layer_learning_rates(accepted, caught):
    accepted("7.1", make_two_rate_step)
    caught("7.1", one_rate_step, r"image branch\) to move by 0.005 x its gradient, got 0.05")
    caught("7.1", lambda model: make_two_rate_step(model, 0.05, 0.005), r"got 0.005 x")


def _gradients(model, x, y):
    with tf.GradientTape() as tape:
        loss = keras.losses.SparseCategoricalCrossentropy()(y, model(x, training=True))
    return tape.gradient(loss, model.trainable_variables)


def _halves(model, x, y):
    return [
        _gradients(model, tf.nest.map_structure(lambda t: t[i : i + 32], x), y[i : i + 32])
        for i in (0, 32)
    ]


def accumulated_step(model, optimizer, x, y):
    first, second = _halves(model, x, y)
    optimizer.apply_gradients(
        zip([(a + b) / 2 for a, b in zip(first, second)], model.trainable_variables)
    )


def summed_step(model, optimizer, x, y):
    first, second = _halves(model, x, y)
    optimizer.apply_gradients(
        zip([a + b for a, b in zip(first, second)], model.trainable_variables)
    )


def step_per_half(model, optimizer, x, y):
    for i in (0, 32):
        half = tf.nest.map_structure(lambda t: t[i : i + 32], x)
        optimizer.apply_gradients(
            zip(_gradients(model, half, y[i : i + 32]), model.trainable_variables)
        )


def test_gradient_accumulation(accepted, caught):
    accepted("7.2", accumulated_step)
    caught("7.2", summed_step, r"don't add them")
    caught("7.2", step_per_half, r"got 2 \(accumulate")
    # a broken answer (wrong signature) is reported, not raised
    caught("7.2", lambda model, x, y: None, r"raised TypeError")


def skip_epoch(step, dataset):
    skipped, losses = 0, []
    for batch in dataset:
        out = step(batch)
        if not bool(out["applied"]):
            skipped += 1
            continue
        losses.append(float(out["loss"]))
    return skipped, losses


def stops_at_nan(step, dataset):
    losses = []
    for batch in dataset:
        out = step(batch)
        if not bool(out["applied"]):
            return 1, losses
        losses.append(float(out["loss"]))
    return 0, losses


def records_every_loss(step, dataset):
    skipped, losses = 0, []
    for batch in dataset:
        out = step(batch)
        skipped += not bool(out["applied"])
        losses.append(float(out["loss"]))
    return skipped, losses


def test_skip_instead_of_stop(accepted, caught):
    accepted("7.3", skip_epoch)
    caught("7.3", stops_at_nan, r"don't break")
    caught("7.3", records_every_loss, r"skipped batch's loss recorded")
