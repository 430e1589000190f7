"""Appendix, Keras 2 to Keras 3: AdamW with Keras's algebra (A.1), a ported ClippedAdam (A.2)."""

from __future__ import annotations

import numpy as np

from companion.exercises._framework import OPTIMIZER_CLASS, Exercise, expect

_W0 = np.array([-1.0, 1.0], "float32")


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
)
