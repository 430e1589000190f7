"""Appendix, Keras 2 to Keras 3: a ported train_step (A.1), a ported ClippedAdam (A.2), AdamW
with Keras's algebra (A.3)."""

from __future__ import annotations

import warnings

import numpy as np

from companion._checks import describe
from companion.exercises._framework import MODEL_CLASS, OPTIMIZER_CLASS, Exercise, Failed, expect

_W0 = np.array([-1.0, 1.0], "float32")

EPOCHS, WEIGHT_ATOL, LOG_RTOL = 2, 1e-6, 1e-5
#: The first words of Keras 3's warnings for the Keras 2 shims of a train_step.
SHIMS = ("`model.compiled_loss()`", "`model.compiled_metrics()`", "`model.loss()`")


def _step_data():
    """64 examples of 3 features and a target, in 8 batches of 8 (equal sizes: fit's loss mean
    weights each batch by its size)."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5]]) + 0.1 * rng.normal(size=(64, 1))).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(8)


def _step_model(model_class, l2=0.01, start=None):
    """``model_class(inputs, outputs)``: 3 -> Dense(4, relu, an L2 penalty) -> Dense(1),
    compiled with SGD(0.05), MSE and metrics=["mae"], without XLA, from the weights ``start``."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    regularizer = keras.regularizers.L2(l2) if l2 else None
    hidden = keras.layers.Dense(4, activation="relu", kernel_regularizer=regularizer)
    model = model_class(inputs, keras.layers.Dense(1)(hidden(inputs)))
    if start is not None:
        model.set_weights(start)
    model.compile(keras.optimizers.SGD(0.05), "mse", metrics=["mae"], jit_compile=False)
    return model


def _fitted(model_class, start, l2=0.01):
    """(history, weights, warnings) of EPOCHS epochs of fit on the CPU, in the data's order."""
    import tensorflow as tf

    with tf.device("/CPU:0"):  # the same numbers on every machine: no TF32, no GPU kernels
        model = _step_model(model_class, l2, start)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            history = model.fit(_step_data(), epochs=EPOCHS, verbose=0, shuffle=False).history
        return history, model.get_weights(), [str(w.message) for w in caught]


def _start(answer, context):
    """The initial weights of the answer's model, which every run starts from."""
    import tensorflow as tf

    def make():
        with tf.device("/CPU:0"):
            return _step_model(answer).get_weights()

    return context.once("start", make)


def _ours(answer, context):
    def make():
        try:
            return _fitted(answer, _start(answer, context))
        except Exception:  # noqa: BLE001 - diagnosed, or reported as it came
            _diagnose(answer, _start(answer, context))
            raise

    return context.once("ours", make)


def _diagnose(answer, start):
    """Raise Failed naming the mistake if one direct call of the step returns no logs."""
    try:
        logs = _step_model(answer, start=start).train_step(next(iter(_step_data())))
    except Exception:  # noqa: BLE001 - it fails on its own: fit's error is reported
        return
    expect(
        isinstance(logs, dict),
        f"expected train_step to return the logs, a dict, got {describe(logs)} (return "
        "{m.name: m.result() for m in self.metrics})",
    )


def _keras(answer, context, l2=0.01):
    """fit's own step (a plain keras.Model) from the answer's initial weights, with ``l2``."""
    import keras

    return context.once(f"keras {l2}", lambda: _fitted(keras.Model, _start(answer, context), l2))


def _weight_gap(ours, theirs):
    return max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs))


def _logged(history, name):
    expect(
        name in history,
        f"expected the logs to hold {name!r}, got {sorted(history)} (return a dict of each "
        "metric's result: {m.name: m.result() for m in self.metrics})",
    )
    return np.asarray(history[name], "float64")


def step_logs_loss_and_mae(answer, context):
    """fit runs the step; its logs hold loss and mae"""
    history, _, _ = _ours(answer, context)
    for name in ("loss", "mae"):
        _logged(history, name)


def step_weights_like_fit(answer, context):
    """After 2 epochs the weights equal those of fit's own step within 1e-6"""
    _, ours, _ = _ours(answer, context)
    gap = _weight_gap(ours, _keras(answer, context)[1])
    if gap < WEIGHT_ATOL:
        return
    likely = (
        "compute the loss with self.compute_loss(x=x, y=y, y_pred=y_pred) and apply its "
        "gradients to self.trainable_variables"
    )
    if _weight_gap(ours, _start(answer, context)) == 0:
        likely = "the weights never moved: apply the gradients with self.optimizer"
    elif _weight_gap(ours, _keras(answer, context, l2=0.02)[1]) < WEIGHT_ATOL:
        likely = (
            "the L2 penalty counted twice: self.compute_loss already adds the model's losses, "
            "so do not add self.losses (Keras 2's regularization_losses) again"
        )
    elif _weight_gap(ours, _keras(answer, context, l2=0.0)[1]) < WEIGHT_ATOL:
        likely = (
            "the L2 penalty is missing: self.compute_loss adds the model's losses, a loss "
            "function called on its own does not"
        )
    raise Failed(
        f"expected the weights of fit's own step within 1e-6 after {EPOCHS} epochs, got a "
        f"difference of {gap:.3g} ({likely})"
    )


def _log_check(answer, context, name):
    history, ours, _ = _ours(answer, context)
    logged = _logged(history, name)
    theirs_history, theirs, _ = _keras(answer, context)
    expected = np.asarray(theirs_history[name], "float64")
    if np.allclose(logged, expected, rtol=LOG_RTOL, atol=0.0):
        return
    right_weights = _weight_gap(ours, theirs) < WEIGHT_ATOL
    if not np.any(logged):
        likely = f"nothing was added to {name}: update_state it in every step"
    elif name == "loss" and right_weights:
        likely = (
            "the weights are right: the metric named 'loss' is a Mean of the loss values, so "
            "update it with update_state(loss); only the other metrics take (y, y_pred)"
        )
    elif right_weights:
        likely = (
            "the weights are right: update every metric but the loss with (y, y_pred), and "
            "return its result(), the mean over the epoch so far"
        )
    else:
        likely = "the weights differ too: see the check on the weights"
    shown = ", ".join(f"{value:.4f}" for value in expected)
    got = ", ".join(f"{value:.4f}" for value in logged)
    raise Failed(
        f"expected the logged {name} of fit's own step in the {EPOCHS} epochs ({shown}) within "
        f"rtol 1e-5, got {got} ({likely})"
    )


def step_loss_logged_like_fit(answer, context):
    """The logged loss equals fit's own in both epochs (rtol 1e-5)"""
    _log_check(answer, context, "loss")


def step_mae_logged_like_fit(answer, context):
    """The logged MAE equals fit's own in both epochs (rtol 1e-5)"""
    _log_check(answer, context, "mae")


def step_without_shims(answer, context):
    """fit gives no warning about Keras 2's compiled_loss or compiled_metrics"""
    _, _, said = _ours(answer, context)
    shims = sorted({shim for shim in SHIMS for message in said if message.startswith(shim)})
    expect(
        not shims,
        f"expected no deprecation warning, got {len(shims)}, about {', '.join(shims)} (Keras 3 "
        "keeps them as shims: compute the loss with self.compute_loss and update each metric "
        "of self.metrics yourself)",
    )


def _problem():
    """The appendix's least-squares problem: features, targets."""
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(64, 2)) @ [[1.0, 0.0], [0.8, 0.3]]).astype("float32")
    y = (x @ [1.5, -2.0] + 0.1 * rng.normal(size=64)).astype("float32")
    return x, y


def _trajectory(optimizer, steps=100):
    """The weights after each step of ``optimizer`` on the appendix's problem from W0."""
    import keras
    import tensorflow as tf

    x, y = _problem()
    with tf.device("/CPU:0"):  # the same kernels on every machine
        variable = keras.Variable(_W0)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.linalg.matvec(x, variable) - y))
        optimizer.apply_gradients([(tape.gradient(loss, variable), variable)])

    path = [variable.numpy().copy()]
    with tf.device("/CPU:0"):
        for _ in range(steps):
            step()
            path.append(variable.numpy().copy())
    return np.array(path)


def _adamw_gap(answer, epsilon, decay):
    import keras

    ours = _trajectory(answer(0.05, epsilon=epsilon, decoupled_decay=decay))
    theirs = _trajectory(keras.optimizers.AdamW(0.05, epsilon=epsilon, weight_decay=decay))
    return float(np.abs(ours - theirs).max())


def _adamw_message(gap, epsilon, decay, likely):
    return (
        f"expected the 100-step trajectory within 1e-6 of keras.optimizers.AdamW's (epsilon "
        f"{epsilon:g}, decay {decay:g}), got a max |difference| of {gap:.2g} ({likely})"
    )


_ALGEBRA = (
    "likely the article's algebra: bias-corrected m_hat and v_hat with epsilon added to "
    "sqrt(v_hat), or the decay applied after the step instead of before it"
)


def matches_adamw(answer, context):
    """The trajectory equals keras.optimizers.AdamW's at epsilon 1e-3 (within 1e-6)"""
    gap = context.once("gap", lambda: _adamw_gap(answer, 1e-3, 0.01))
    expect(gap <= 1e-6, _adamw_message(gap, 1e-3, 0.01, _ALGEBRA))


def matches_adamw_elsewhere(answer, context):
    """It still does at epsilon 0.1 and decay 0.1"""
    try:
        first_ok = context.once("gap", lambda: _adamw_gap(answer, 1e-3, 0.01)) <= 1e-6
    except Exception:  # noqa: BLE001 - the first check reports it
        first_ok = False
    likely = (
        "use self.epsilon and self.decoupled_decay, not fixed numbers" if first_ok else _ALGEBRA
    )
    gap = _adamw_gap(answer, 0.1, 0.1)
    expect(gap <= 1e-6, _adamw_message(gap, 0.1, 0.1, likely))


_GRADIENTS = [  # (gradient of a, gradient of b): very different sizes from step to step
    ([10.0, 0.0], [0.5]),
    ([0.1, 0.2], [0.05]),
    ([-50.0, 5.0], [20.0]),
    ([0.3, -0.1], [-0.2]),
]


def _adam_path(optimizer):
    """Two variables after ``optimizer`` applies ``_GRADIENTS`` to them, eagerly."""
    import keras
    import tensorflow as tf

    with tf.device("/CPU:0"):  # the same kernels on every machine
        a, b = keras.Variable([1.0, -1.0]), keras.Variable([0.5])
        for grad_a, grad_b in _GRADIENTS:
            optimizer.apply_gradients(
                [(tf.constant(grad_a, "float32"), a), (tf.constant(grad_b, "float32"), b)]
            )
    return np.concatenate([a.numpy(), b.numpy()])


def _clip_message(path, clip_norm, otherwise=""):
    import keras

    gap = float(
        np.abs(path - _adam_path(keras.optimizers.Adam(0.1, global_clipnorm=clip_norm))).max()
    )
    plain = _adam_path(keras.optimizers.Adam(0.1))
    per_tensor = _adam_path(keras.optimizers.Adam(0.1, clipnorm=clip_norm))
    why = otherwise
    if np.allclose(path, plain, atol=1e-6):
        why = (
            " (it follows plain Adam: nothing clips; Keras 3 never calls get_gradients, so "
            "clip in apply_gradients)"
        )
    elif np.allclose(path, per_tensor, atol=1e-6):
        why = (
            " (it clips each gradient to the norm on its own: clip them together, "
            "tf.clip_by_global_norm)"
        )
    return gap, (
        f"expected the weights within 1e-6 of Adam(global_clipnorm={clip_norm:g})'s after 4 "
        f"steps, got a max |difference| of {gap:.2g}{why}"
    )


def follows_global_clipnorm(answer, context):
    """It follows Adam(global_clipnorm=1.0) on two variables, not plain Adam"""
    path = _adam_path(answer(clip_norm=1.0, learning_rate=0.1))
    gap, message = _clip_message(path, 1.0)
    expect(gap <= 1e-6, message)


def clip_norm_in_config(answer, context):
    """from_config(get_config()) keeps clip_norm=0.5 and follows global_clipnorm=0.5"""
    import json

    config = json.loads(json.dumps(answer(clip_norm=0.5, learning_rate=0.1).get_config()))
    expect(
        config.get("clip_norm") == 0.5,
        f"expected clip_norm 0.5 in get_config(), got {config.get('clip_norm', 'no clip_norm')} "
        "(add it to the base class's config)",
    )
    path = _adam_path(answer.from_config(config))
    gap, message = _clip_message(path, 0.5, " (is self.clip_norm what you clip to?)")
    expect(gap <= 1e-6, message)


EXERCISES = (
    Exercise(
        "A.1",
        "Port a Keras 2 `train_step`.",
        MODEL_CLASS,
        (
            step_logs_loss_and_mae,
            step_weights_like_fit,
            step_loss_logged_like_fit,
            step_mae_logged_like_fit,
            step_without_shims,
        ),
        (
            "Keras 3 computes the whole loss, the L2 penalties included, in self.compute_loss, "
            "and self.metrics lists the loss tracker (a Mean named 'loss') with the compiled "
            "metrics.",
            "Replace the compiled_loss call by self.compute_loss(x=x, y=y, y_pred=y_pred). Then "
            "loop over self.metrics: update_state(loss) for the one named 'loss', "
            "update_state(y, y_pred) for the others, and return each result() by its name.",
        ),
    ),
    Exercise(
        "A.2",
        "Port the optimizer article's `ClippedAdam`.",
        OPTIMIZER_CLASS,
        (follows_global_clipnorm, clip_norm_in_config),
        (
            "In Keras 3 every step goes through apply_gradients(grads_and_vars); "
            "get_gradients is never called.",
            "Unzip grads_and_vars, clip with tf.clip_by_global_norm(list(grads), "
            "self.clip_norm), zip the clipped gradients back with the variables for "
            "super().apply_gradients, and add clip_norm to get_config.",
        ),
    ),
    Exercise(
        "A.3",
        "Match `keras.optimizers.AdamW` bit for bit.",
        OPTIMIZER_CLASS,
        (matches_adamw, matches_adamw_elsewhere),
        (
            "Keep PortedAdamW's constructor; only update_step changes. Read the order of "
            "operations in the exercise: decay, then alpha, then the moments, then the step.",
            "self.assign_sub(variable, variable * self.decoupled_decay * lr) first; then "
            "self.assign_add(m, (gradient - m) * (1 - self.beta_1)), likewise v, and divide "
            "m * alpha by sqrt(v) + epsilon (no m_hat, no v_hat).",
        ),
    ),
)
