"""Chapter 7's exercise checks: a correct answer passes, each likely mistake is named."""

import keras
import tensorflow as tf


def make_train(training=True, penalties=True, weighted=True, reset=True):
    """A loop like model.fit's, or with one likely mistake."""

    def train(model, optimizer, loss_fn, dataset, epochs):
        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=training))
                if penalties:
                    loss += sum(model.losses)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply(gradients, model.trainable_variables)
            return loss

        history, total, count = [], 0.0, 0
        for _ in range(epochs):
            if reset:
                total, count = 0.0, 0
            for x, y in dataset:
                size = int(tf.shape(y)[0]) if weighted else 1
                total += float(step(x, y)) * size
                count += size
            history.append(total / count)
        return history

    return train


def eager_train(model, optimizer, loss_fn, dataset, epochs):
    history = []
    for _ in range(epochs):
        mean = keras.metrics.Mean()
        for x, y in dataset:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True)) + sum(model.losses)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            mean.update_state(loss, sample_weight=tf.shape(y)[0])
        history.append(mean.result())
    return history


def drops_the_last_batch(model, optimizer, loss_fn, dataset, epochs):
    return make_train()(model, optimizer, loss_fn, dataset.take(3), epochs)


def test_a_loop_that_matches_fit(accepted, caught):
    accepted("7.1", make_train())
    accepted("7.1", eager_train)  # eager, a keras Mean, tensors returned: all fine
    caught("7.1", make_train(training=False), r"moving mean never moved: .*training=True")
    caught("7.1", make_train(penalties=False), r"without the L2 penalty: add sum\(model.losses\)")
    caught("7.1", make_train(weighted=False), r"plain mean of the batch means")
    caught("7.1", make_train(reset=False), r"never reset")
    caught("7.1", drops_the_last_batch, r"got 9 \(the last batch, of 4 examples, left out")


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
    accepted("7.2", make_two_rate_step)
    caught("7.2", one_rate_step, r"image branch\) to move by 0.005 x its gradient, got 0.05")
    caught("7.2", lambda model: make_two_rate_step(model, 0.05, 0.005), r"got 0.005 x")


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
    accepted("7.3", accumulated_step)
    caught("7.3", summed_step, r"don't add them")
    caught("7.3", step_per_half, r"got 2 \(accumulate")
    # a broken answer (wrong signature) is reported, not raised
    caught("7.3", lambda model, x, y: None, r"raised TypeError")


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
    accepted("7.4", skip_epoch)
    caught("7.4", stops_at_nan, r"don't break")
    caught("7.4", records_every_loss, r"skipped batch's loss recorded")
