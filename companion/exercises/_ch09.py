"""Chapter 9, custom optimizers: momentum SGD, epsilon rescaled, pruning in a loop, Lookahead."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np

from companion.exercises._framework import FUNCTION, OPTIMIZER_CLASS, Exercise, Failed, expect


def _least_squares():
    """The chapter's least-squares problem: ``X`` (64 x 4) and ``y``, from seed 0."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    return x, (x @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.7).astype("float32")


def _first_step(answer, make_optimizer, gradient):
    """The answer's step for a fresh optimizer and ``gradient`` (float32), as float64."""
    from keras import ops

    step = answer(make_optimizer(), ops.convert_to_tensor(np.asarray(gradient, "float32")))
    return np.asarray(step, "float64").reshape(-1)


SIGN = " (return -variable: the step is how far the weight moved down)"


def _likely(got, expected, otherwise):
    """The sign hint when ``got`` is ``-expected``, else ``otherwise``."""
    return SIGN if np.allclose(got, -np.asarray(expected), rtol=1e-4, atol=1e-6) else otherwise


def gives_sgd_step(answer, context):
    """The step of SGD(0.1) is 0.1 * gradient: the distance moved down the gradient"""
    import keras

    got = _first_step(answer, lambda: keras.optimizers.SGD(0.1), [1.0, -2.0])
    expect(
        np.allclose(got, [0.1, -0.2], atol=1e-6),
        f"expected the step [0.1, -0.2] for SGD(0.1) and gradient [1, -2], got {got.round(6)}"
        + _likely(got, [0.1, -0.2], ""),
    )


def starts_from_zero(answer, context):
    """Every call starts from a new zero variable: two calls take the same step"""
    import keras

    steps = [_first_step(answer, lambda: keras.optimizers.Adam(0.1), [1.0, 1.0]) for _ in "ab"]
    expect(
        np.allclose(steps[0], 0.1, atol=1e-6) and np.allclose(steps[1], 0.1, atol=1e-6),
        f"expected Adam(0.1)'s first step 0.1 on two calls, got {steps[0].round(6)} and "
        f"{steps[1].round(6)}"
        + _likely(
            steps[0],
            [0.1, 0.1],
            " (is the variable made inside the function, at zero, on each call?)",
        ),
    )


def _placements(answer, context):
    def make():
        from companion.optimizers import AdamW

        gradient = [1e-7, 1e-5]
        paper = _first_step(
            answer,
            lambda: AdamW(0.1, epsilon=1e-7, weight_decay=0.0, epsilon_placement="paper"),
            gradient,
        )
        rescaled = _first_step(
            answer,
            lambda: AdamW(0.1, epsilon=1e-7 * np.sqrt(1 - 0.999), weight_decay=0.0),
            gradient,
        )
        return paper, rescaled

    return context.once("placements", make)


def placements_agree(answer, context):
    """The paper placement and the rescaled Keras placement take the same step (rtol 1e-5)"""
    paper, rescaled = _placements(answer, context)
    expect(
        np.allclose(paper, rescaled, rtol=1e-5, atol=0),
        f"expected equal steps for gradients [1e-7, 1e-5], got {paper} (paper) and {rescaled} "
        "(Keras, epsilon 1e-7 * sqrt(1 - 0.999))",
    )


def half_step_at_epsilon(answer, context):
    """At g = epsilon the paper placement steps lr / 2 = 0.05"""
    paper, _ = _placements(answer, context)
    expect(
        abs(paper[0] - 0.05) < 1e-6,
        f"expected a step of 0.05 (lr * g / (g + eps) with g = eps) for g = 1e-7, got "
        f"{paper[0]:.6g}"
        + _likely(paper[0], 0.05, " (does the function step with the optimizer it is given?)"),
    )


def _trajectory(optimizer, steps=100, lowered_at=None):
    """Weights after each step of ``optimizer`` on the least-squares problem, from 0, on the CPU
    (the same float32 ops as Keras's SGD compare to the bit there); with ``lowered_at``, the
    learning rate is set to 0.001 before that step, as ``ReduceLROnPlateau`` does."""
    import keras
    import tensorflow as tf
    from keras import ops

    x, y = _least_squares()
    with tf.device("/CPU:0"):
        w = keras.Variable(np.zeros(4, "float32"), name="kernel")
        b = keras.Variable(np.zeros((), "float32"), name="bias")

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = ops.mean((ops.matmul(x, w) + b - y) ** 2)
            optimizer.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))

        path = []
        for i in range(steps):
            if i == lowered_at:
                optimizer.learning_rate = 0.001
            step()
            path.append(np.concatenate([w.numpy(), [b.numpy()]]))
    return np.array(path)


def _gap(ours, theirs):
    return float(np.max(np.abs(np.asarray(ours) - np.asarray(theirs))))


def _follows(ours, theirs, what):
    """Fail unless two trajectories agree within 1e-6, naming the likely mistake."""
    gap = _gap(ours, theirs)
    likely = ""
    if not np.any(ours[0]):
        likely = (
            " (the first step left the weights at 0: is w += velocity applied before the "
            "velocity is updated?)"
        )
    elif np.allclose(ours[0], -theirs[0], rtol=1e-4):
        likely = " (the first step went uphill: velocity = momentum * velocity - lr * g)"
    elif np.allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-7):
        likely = (
            " (the first step agrees, later ones do not: does the old velocity enter as "
            "+momentum * velocity, with the momentum the optimizer was given?)"
        )
    expect(
        gap <= 1e-6,
        f"expected the weights of {what} within 1e-6 over 100 steps, got a largest difference "
        f"of {gap:.2g}{likely}",
    )


def _rate(schedule):
    """Learning rate 0.01, or an ExponentialDecay schedule from 0.01 (halving every 20 steps)."""
    import keras

    if schedule:
        return keras.optimizers.schedules.ExponentialDecay(0.01, decay_steps=20, decay_rate=0.5)
    return 0.01


@functools.lru_cache(maxsize=None)
def _keras_sgd(momentum=0.9, schedule=False, lowered_at=None):
    """The trajectory of keras.optimizers.SGD with ``momentum`` (read only: cached)."""
    import keras

    optimizer = keras.optimizers.SGD(_rate(schedule), momentum=momentum)
    path = _trajectory(optimizer, lowered_at=lowered_at)
    path.flags.writeable = False
    return path


def follows_keras_sgd(answer, context):
    """It follows keras.optimizers.SGD(0.01, momentum=0.9) within 1e-6 over 100 steps"""
    ours = _trajectory(answer(0.01))
    _follows(ours, _keras_sgd(), "SGD(0.01, momentum=0.9)")
    expect(
        np.max(np.abs(ours[-1])) > 0.5,
        f"expected the weights to move by more than 0.5 in 100 steps, got at most "
        f"{np.max(np.abs(ours[-1])):.3g}",
    )


LEARNING_RATE_ARGUMENT = (
    "multiply by the learning_rate argument of update_step, which carries the schedule's "
    "value and any change to optimizer.learning_rate; a number kept from __init__ does not"
)


def one_slot_per_variable(answer, context):
    """build makes one slot per variable, shaped like it"""
    import keras

    variables = [keras.Variable(np.zeros((4, 3), "float32")), keras.Variable(np.zeros(3))]
    optimizer = answer(0.01)
    optimizer.build(variables)
    own = {id(optimizer.iterations), id(getattr(optimizer, "_learning_rate", None))}
    slots = [tuple(v.shape) for v in optimizer.variables if id(v) not in own]
    likely = "one add_variable_from_reference per variable, in build"
    if not slots:
        likely = (
            "build made none: were they made in update_step? Make them in build, which runs "
            "before the first step and before a saved optimizer's variables are restored"
        )
    expect(
        sorted(slots) == [(3,), (4, 3)],
        f"expected 2 slots of shapes (4, 3) and (3,) for a kernel and a bias, got {slots} "
        f"({likely})",
    )


def follows_a_schedule(answer, context):
    """With a learning-rate schedule it follows SGD(momentum=0.9) with the same schedule"""
    try:
        ours = _trajectory(answer(_rate(schedule=True)))
    except Exception as error:  # noqa: BLE001 - the likely mistake is named in the message
        raise Failed(
            f"expected it to train with an ExponentialDecay schedule as learning_rate, got "
            f"{type(error).__name__} ({LEARNING_RATE_ARGUMENT})"
        ) from error
    gap = _gap(ours, _keras_sgd(schedule=True))
    expect(
        gap <= 1e-6,
        f"expected the weights of SGD(momentum=0.9) with an ExponentialDecay schedule within "
        f"1e-6, got a largest difference of {gap:.2g} ({LEARNING_RATE_ARGUMENT})",
    )


def follows_a_lowered_rate(answer, context):
    """After optimizer.learning_rate = 0.001 mid-training its steps shrink as SGD's do"""
    ours = _trajectory(answer(0.01), lowered_at=50)
    gap = _gap(ours, _keras_sgd(lowered_at=50))
    kept = _gap(ours, _keras_sgd()) <= 1e-6
    expect(
        gap <= 1e-6,
        f"expected the weights of SGD(momentum=0.9) within 1e-6 after optimizer.learning_rate "
        f"= 0.001 at step 50 (what ReduceLROnPlateau does), got a largest difference of "
        f"{gap:.2g}"
        + (f" (the steps kept the rate of 0.01: {LEARNING_RATE_ARGUMENT})" if kept else ""),
    )


def momentum_through_config(answer, context):
    """momentum=0.5 follows SGD(0.01, momentum=0.5), also after from_config(get_config())"""
    optimizer = answer(0.01, momentum=0.5)
    theirs = _keras_sgd(momentum=0.5)
    _follows(_trajectory(optimizer), theirs, "SGD(0.01, momentum=0.5)")
    rebuilt = type(optimizer).from_config(optimizer.get_config())
    gap = float(np.max(np.abs(_trajectory(rebuilt) - theirs)))
    expect(
        gap <= 1e-6,
        f"expected the optimizer rebuilt from its config to follow momentum=0.5 within 1e-6, "
        f"got a largest difference of {gap:.2g} (is momentum in get_config?)",
    )


def _two_layer_model(optimizer):
    """Two Dense layers of the same shapes (4 -> 4 -> 4), compiled with ``optimizer``, MSE,
    without XLA (compared to the bit on the CPU)."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(4, activation="tanh"),
            keras.layers.Dense(4),
        ]
    )
    model.compile(optimizer, "mse", jit_compile=False)
    return model


def _saved_and_resumed(answer, context):
    """Keras's SGD(0.05, momentum=0.5) and the answer, each fit one epoch (4 steps) on the CPU,
    the answer's model then saved to .keras, loaded and fit one more epoch: the weights after
    each epoch, and the loaded optimizer."""

    def make():
        import keras
        import tensorflow as tf

        x, _ = _least_squares()
        target = x[:, ::-1] * np.array([1.0, -2.0, 0.5, 3.0], "float32")

        def epoch(model):
            model.fit(x, target, batch_size=16, epochs=1, verbose=0, shuffle=False)
            return [w.copy() for w in model.get_weights()]

        with tf.device("/CPU:0"):
            keras_model = _two_layer_model(keras.optimizers.SGD(0.05, momentum=0.5))
            theirs = [epoch(keras_model), epoch(keras_model)]
            model = _two_layer_model(answer(0.05, momentum=0.5))
            first = epoch(model)
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "momentum.keras"
                model.save(path)
                loaded = keras.saving.load_model(path, custom_objects={answer.__name__: answer})
            second = epoch(loaded)
        return theirs, [first, second], loaded.optimizer

    return context.once("resumed", make)


def trains_a_model_under_fit(answer, context):
    """Under fit, a model of two layers of the same shapes follows SGD(momentum=0.5), 4 steps"""
    theirs, ours, _ = _saved_and_resumed(answer, context)
    gap = max(_gap(a, b) for a, b in zip(ours[0], theirs[0]))
    expect(
        gap <= 1e-6,
        f"expected the weights of SGD(0.05, momentum=0.5) within 1e-6 after 4 steps of fit, "
        f"got a largest difference of {gap:.2g} (does each variable have its own slot, found "
        "with self._get_variable_index(variable)? Two layers have variables of one shape)",
    )


def resumes_from_a_keras_file(answer, context):
    """Saved to .keras and loaded, it goes on as SGD(momentum=0.5) does, 4 more steps"""
    theirs, ours, loaded = _saved_and_resumed(answer, context)
    steps = int(loaded.iterations)
    expect(
        steps == 8,
        f"expected 8 steps on the loaded optimizer's counter after 4 + 4 steps, got {steps}",
    )
    gap = max(_gap(a, b) for a, b in zip(ours[1], theirs[1]))
    expect(
        gap <= 1e-6,
        f"expected the loaded model to go on as SGD(0.05, momentum=0.5) within 1e-6, got a "
        f"largest difference of {gap:.2g} (is momentum in get_config, and are the slots made "
        "in build, so that load_model restores the velocities?)",
    )


def _batches(count):
    """``count`` batches of 16 of the least-squares data, in order, repeating every 4."""
    import tensorflow as tf

    x, y = _least_squares()
    rows = [slice(16 * (i % 4), 16 * (i % 4) + 16) for i in range(count)]
    return [(tf.constant(x[r]), tf.constant(y[r])) for r in rows]


def _pruning_model():
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(64, activation="relu", name="hidden"),
            keras.layers.Dense(1, name="out"),
        ]
    )


def _loss(model):
    x, y = _least_squares()
    return float(np.mean((np.asarray(model(x))[:, 0] - y) ** 2))


def _pruned(answer, context):
    """The answer's loop run on 10, 10 and 20 batches, with the kernels after each run."""

    def make():
        import keras

        from companion.optimizers import MagnitudePruning

        model = _pruning_model()
        optimizer = keras.optimizers.Adam(0.01)
        pruning = MagnitudePruning(0.5, begin_step=0, end_step=20, frequency=5)
        batches, before, kernels = _batches(40), _loss(model), []
        for start, stop in [(0, 10), (10, 20), (20, 40)]:
            answer(model, optimizer, pruning, batches[start:stop])
            kernels.append([layer.kernel.numpy().copy() for layer in model.layers])
        return kernels, before, _loss(model)

    return context.once("pruned", make)


def _zero_counts(kernels, fraction, when):
    for name, kernel in zip(("hidden", "out"), kernels):
        expected, got = round(fraction * kernel.size), int(np.sum(kernel == 0))
        expect(
            got == expected,
            f"expected {expected} of the {kernel.size} entries of the {name} kernel exactly 0 "
            f"{when}, got {got} (is on_train_batch_end called once per step, after "
            "apply_gradients, so that the mask is applied last?)",
        )


def schedule_followed(answer, context):
    """After 10 steps each kernel has the schedule's sparsity, s(10) = 0.4375"""
    from companion.optimizers import polynomial_sparsity

    kernels, _, _ = _pruned(answer, context)
    level = polynomial_sparsity(10, target_sparsity=0.5, begin_step=0, end_step=20)
    _zero_counts(kernels[0], level, "after 10 steps")


def half_zero_at_the_end(answer, context):
    """After 40 steps exactly half of each kernel is zero"""
    kernels, _, _ = _pruned(answer, context)
    _zero_counts(kernels[2], 0.5, "after 40 steps")


def zeros_stay_zero(answer, context):
    """The zeros of step 20 are still zero at step 40"""
    kernels, _, _ = _pruned(answer, context)
    for name, at_20, at_40 in zip(("hidden", "out"), kernels[1], kernels[2]):
        revived = int(np.sum((at_20 == 0) & (at_40 != 0)))
        expect(
            revived == 0,
            f"expected the {name} kernel's zeros of step 20 to stay 0, got {revived} non-zero "
            "at step 40 (the mask must be applied after every step, not only when it changes)",
        )


def loop_trains(answer, context):
    """The loop trains: the loss falls by half over the 40 steps"""
    _, before, after = _pruned(answer, context)
    expect(
        after < before / 2,
        f"expected the mean squared error to fall from {before:.3g} to below half, got "
        f"{after:.3g} (does every step call optimizer.apply_gradients with the loss's "
        "gradients?)",
    )


def _regression_model():
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(16, activation="relu", name="hidden"),
            keras.layers.LayerNormalization(name="norm"),
            keras.layers.Dense(1, name="out"),
        ]
    )


def _lookahead_model():
    from companion.optimizers import AdamW, Lookahead

    model = _regression_model()
    model.compile(Lookahead(AdamW(0.05), sync_period=3), "mse")
    return model


def _restarted(answer, context):
    """An uninterrupted two-epoch run, the model handed to the answer and what it returned."""

    def make():
        import tensorflow as tf

        x, y = _least_squares()
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
        straight = _lookahead_model()
        straight.fit(data, epochs=2, verbose=0, shuffle=False)
        given = _lookahead_model()
        with tempfile.TemporaryDirectory() as folder:
            result = answer(given, data, Path(folder) / "restart.keras")
        return straight, given, result

    return context.once("restarted", make)


def _returned_model(answer, context):
    import keras

    straight, given, result = _restarted(answer, context)
    expect(
        isinstance(result, keras.Model),
        f"expected the function to return the loaded model, got {type(result).__name__}",
    )
    return straight, given, result


def returns_loaded_copy(answer, context):
    """It returns the loaded copy, whose optimizer is the Lookahead, 8 steps in"""
    _, given, result = _returned_model(answer, context)
    expect(
        result is not given,
        "expected the model loaded from the file, got the model that was saved (return what "
        "keras.saving.load_model gave)",
    )
    name = type(result.optimizer).__name__
    expect(
        name == "Lookahead",
        f"expected the loaded model's optimizer to be the Lookahead, got {name} (load_model "
        "restores the compiled optimizer: no compile after loading)",
    )
    steps = int(result.optimizer.iterations)
    expect(
        steps == 8,
        f"expected 8 optimizer steps after 1 + 1 epochs of 4 batches, got {steps}"
        + (
            " (compiled again after loading? compile makes a new optimizer: the step counter, "
            "slots and slow weights start over)"
            if steps == 4
            else ""
        ),
    )


def resumes_exactly(answer, context):
    """The resumed run ends with the uninterrupted run's weights (within 1e-6)"""
    straight, _, result = _returned_model(answer, context)
    gap = max(
        float(np.max(np.abs(a - b))) for a, b in zip(result.get_weights(), straight.get_weights())
    )
    expect(
        gap <= 1e-6,
        f"expected the weights of an uninterrupted two-epoch run within 1e-6, got a largest "
        f"difference of {gap:.2g} (does the file hold the optimizer, and is the loaded model "
        "trained as it comes, without a new compile?)",
    )


EXERCISES = (
    Exercise(
        "9.1",
        "SGD with momentum, in the Keras 3 API.",
        OPTIMIZER_CLASS,
        (
            one_slot_per_variable,
            follows_keras_sgd,
            follows_a_schedule,
            follows_a_lowered_rate,
            momentum_through_config,
            trains_a_model_under_fit,
            resumes_from_a_keras_file,
        ),
        (
            "The chapter's InlineAdamW has every piece: __init__, build with slots, update_step "
            "with self.assign*, get_config. Momentum needs one slot per variable, not two, and "
            "the step size is the learning_rate that update_step is given.",
            "In build, add_variable_from_reference(v, name='velocity') for each variable; in "
            "update_step find the variable's own slot with the private _get_variable_index, "
            "assign the new velocity first, then assign_add it to the variable. Put momentum in "
            "get_config.",
        ),
    ),
    Exercise(
        "9.2",
        "Epsilon, rescaled.",
        FUNCTION,
        (gives_sgd_step, starts_from_zero, placements_agree, half_step_at_epsilon),
        (
            "A variable that starts at 0 is minus the step after one apply_gradients, so one "
            "step of a fresh optimizer shows the whole update.",
            "Make the variable inside the function, at zero with the gradient's shape, so "
            "that every call starts afresh; after one apply_gradients([(gradient, variable)]) "
            "the step is minus its value. Give both AdamW weight_decay=0.0.",
        ),
    ),
    Exercise(
        "9.3",
        "Pruning in a custom loop.",
        FUNCTION,
        (schedule_followed, half_zero_at_the_end, zeros_stay_zero, loop_trains),
        (
            "The callback counts its own steps, one per on_train_batch_end call, and multiplies "
            "the weights by the mask each time: the order within a step matters.",
            "For each (x, y): one GradientTape step of the MSE and apply_gradients, then "
            "pruning.on_train_batch_end(step). Call pruning.set_model(model) before the first "
            "step.",
        ),
    ),
    Exercise(
        "9.4",
        "Lookahead resumes exactly.",
        FUNCTION,
        (returns_loaded_copy, resumes_exactly),
        (
            "A .keras file holds the compiled optimizer and all its variables: the step "
            "counter, AdamW's slots and Lookahead's slow weights.",
            "fit one epoch with shuffle=False, model.save(path), then "
            "keras.saving.load_model(path) and fit the loaded model one more epoch as it is: "
            "compiling it again would start a new optimizer.",
        ),
    ),
)
