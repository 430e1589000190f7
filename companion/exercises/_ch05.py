"""Chapter 5, custom gradients: STE, clipping op, learned ceiling, safe_norm, HVP, the penalty."""

from __future__ import annotations

import numpy as np

from companion.exercises._framework import FUNCTION, LAYER_CLASS, Exercise, Failed, expect


def _weighted_gradient(function, x, upstream):
    """``function(x)`` and the gradient of ``sum(upstream * function(x))`` (NumPy, or None)."""
    import tensorflow as tf

    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = function(x)
        loss = tf.reduce_sum(tf.cast(upstream, y.dtype) * y)
    gradient = tape.gradient(loss, x)
    return np.asarray(y), None if gradient is None else np.asarray(gradient)


_ROUNDED = np.array([-1.7, -0.7, 0.4, 1.4, 2.6, 0.5, -2.5], "float32")
_UPSTREAM = np.array([1.0, -2.0, 0.5, 3.0, -1.0, 0.25, 2.0], "float32")


def ste_forward(answer, context):
    """The forward pass equals tf.round"""
    import tensorflow as tf

    value = np.asarray(answer(tf.constant(_ROUNDED)))
    expected = np.round(_ROUNDED)  # half to even, as tf.round
    expect(
        np.array_equal(value, expected),
        f"expected tf.round's {expected.tolist()}, got {value.tolist()}",
    )


def ste_gradient_is_one(answer, context):
    """The gradient is 1 everywhere (tf.round's is None)"""
    import tensorflow as tf

    _, gradient = _weighted_gradient(answer, tf.constant(_ROUNDED), np.ones_like(_ROUNDED))
    expect(
        gradient is not None and np.any(gradient),
        f"expected a gradient of 1 everywhere, got {gradient if gradient is None else 'zeros'} "
        "(tf.round has no useful gradient: wrap it in tf.custom_gradient and pass the "
        "upstream gradient through)",
    )
    expect(
        np.array_equal(gradient, np.ones_like(_ROUNDED)),
        f"expected a gradient of 1 everywhere, got {gradient.tolist()}",
    )


def ste_passes_upstream(answer, context):
    """The backward pass returns the upstream gradient unchanged"""
    import tensorflow as tf

    _, gradient = _weighted_gradient(answer, tf.constant(_ROUNDED), _UPSTREAM)
    expect(gradient is not None, "expected the upstream gradient, got None")
    expect(
        np.array_equal(gradient, _UPSTREAM),
        f"expected the upstream {_UPSTREAM.tolist()}, got {gradient.tolist()}"
        + (
            " (return the upstream gradient itself, not ones)"
            if np.array_equal(gradient, np.ones_like(_UPSTREAM))
            else ""
        ),
    )


_X4 = np.array([1.0, -2.0, 0.5, 3.0])
_UPSTREAM4 = np.array([3.0, 4.0, 0.0, 0.0])  # norm 5


def _clipped(answer, max_norm):
    import tensorflow as tf

    return _weighted_gradient(lambda t: answer(t, max_norm), tf.constant(_X4), _UPSTREAM4)


def clip_forward_identity(answer, context):
    """The forward pass is the identity"""
    import tensorflow as tf

    for dtype in (tf.float64, tf.float32):
        x = tf.constant(_X4, dtype)
        value = np.asarray(answer(x, 2.0))
        expect(
            np.array_equal(value, x.numpy()),
            f"expected x unchanged in {dtype.name}, got {value.tolist()} (clip the gradient "
            "in the backward pass, not x)",
        )


def clip_rescales(answer, context):
    """An upstream gradient of norm 5 is rescaled to norm 2 (max_norm=2), direction kept"""
    _, gradient = _clipped(answer, 2.0)
    expected = [1.2, 1.6, 0.0, 0.0]
    expect(gradient is not None, "expected a gradient, got None")
    expect(
        gradient.shape == _X4.shape,
        f"expected a gradient of x's shape {_X4.shape}, got shape {gradient.shape} (return the "
        "upstream gradient rescaled, a tensor of its shape, not the scale factor alone)",
    )
    if np.allclose(gradient, [2.0, 2.0, 0.0, 0.0]):
        expect(
            False,
            f"expected {expected}, got {gradient.tolist()} (tf.clip_by_value clips each entry "
            "and turns the direction: rescale the whole tensor by its norm)",
        )
    expect(
        np.allclose(gradient, expected, rtol=1e-12),
        f"expected {expected}, got {np.round(gradient, 12).tolist()}",
    )


def clip_keeps_small(answer, context):
    """An upstream gradient within max_norm (10) passes unchanged"""
    _, gradient = _clipped(answer, 10.0)
    expect(gradient is not None, "expected a gradient, got None")
    expect(
        np.allclose(gradient, _UPSTREAM4, rtol=1e-12),
        f"expected the upstream {_UPSTREAM4.tolist()} unchanged, got "
        f"{np.round(gradient, 12).tolist()} (rescale only when the norm exceeds max_norm)",
    )


def clip_gradient_error(answer, context):
    """gradient_error is 0 for max_norm >= 1 and 1 - max_norm below (one-hot upstreams)"""
    import tensorflow as tf

    from companion.gradients import gradient_error

    x = tf.constant(_X4)
    for max_norm, expected in [(2.0, 0.0), (1.0, 0.0), (0.25, 0.75)]:
        error = gradient_error(lambda t, m=max_norm: answer(t, m), x)
        expect(
            abs(error - expected) < 1e-9,
            f"expected gradient_error {expected} for max_norm={max_norm}, got {error:.3g} "
            "(each backward pass of the checker has a one-hot upstream, of norm 1)",
        )


_INPUTS3 = np.random.default_rng(4).uniform(-4.0, 4.0, size=(256, 1))
_TARGETS3 = np.minimum(_INPUTS3, 2.5)


def _ceiling_layer(answer, **kwargs):
    layer = answer(dtype="float64", **kwargs)
    layer.build(_INPUTS3.shape)
    weights = list(layer.trainable_weights)
    expect(
        len(weights) == 1,
        f"expected one trainable weight (the ceiling) after build, got {len(weights)}",
    )
    expect(
        float(np.asarray(weights[0])) == 1.0,
        f"expected the ceiling to start at 1, got {np.asarray(weights[0]).tolist()}",
    )
    return layer, weights[0]


def ceiling_weight(answer, context):
    """build makes one trainable weight, the ceiling, starting at 1"""
    _ceiling_layer(answer)


def ceiling_forward(answer, context):
    """The forward pass is min(x, ceiling), with the current ceiling"""
    layer, ceiling = _ceiling_layer(answer)
    ceiling.assign(0.3)
    got = np.asarray(layer(_INPUTS3))
    expect(
        np.array_equal(got, np.minimum(_INPUTS3, 0.3)),
        "expected min(x, 0.3) after assigning 0.3 to the ceiling, got a largest difference "
        f"of {float(np.max(np.abs(got - np.minimum(_INPUTS3, 0.3)))):.3g}",
    )


def ceiling_input_gradient(answer, context):
    """The input gradient is 1 below the ceiling and leak above it"""
    import tensorflow as tf

    layer, _ = _ceiling_layer(answer, leak=0.1)
    x = tf.constant([[-1.0], [0.5], [1.5], [3.0]], tf.float64)
    _, gradient = _weighted_gradient(layer, x, np.ones((4, 1)))
    expected = [[1.0], [1.0], [0.1], [0.1]]
    expect(gradient is not None, "expected an input gradient, got None")
    expect(
        np.allclose(gradient, expected, rtol=1e-12),
        f"expected {expected} with leak=0.1 and the ceiling at 1, got {gradient.tolist()} "
        "(above the ceiling the input gradient is leak * upstream)",
    )


def _loss(layer):
    import tensorflow as tf

    return tf.reduce_mean(tf.square(layer(_INPUTS3) - _TARGETS3))


def ceiling_gradient(answer, context):
    """The ceiling's gradient matches a finite difference of an MSE loss"""
    import tensorflow as tf

    from companion.gradients import default_delta

    layer, ceiling = _ceiling_layer(answer)
    x = tf.constant(_INPUTS3)
    with tf.GradientTape() as tape:
        tape.watch(x)  # x on the tape, as in any model
        loss = tf.reduce_mean(tf.square(layer(x) - _TARGETS3))
    analytic = tape.gradient(loss, ceiling)
    expect(
        analytic is not None,
        "expected a gradient for the ceiling, got None (the weight is read outside the "
        "custom-gradient function, as clipped_identity does: read it inside, and return "
        "its gradient through grad's variables=)",
    )
    analytic = float(np.asarray(analytic))
    h = default_delta("float64")
    sides = []
    for value in (1.0 + h, 1.0 - h):
        ceiling.assign(value)
        sides.append(float(_loss(layer)))
    ceiling.assign(1.0)
    numeric = (sides[0] - sides[1]) / (2 * h)
    flipped = abs(analytic + numeric) < 1e-6 < abs(numeric)
    expect(
        abs(analytic - numeric) < 1e-6,
        f"expected d loss / d ceiling = {numeric:.6f} (finite difference), got {analytic:.6f}"
        + (" (the opposite sign)" if flipped else ""),
    )


def ceiling_trains(answer, context):
    """40 SGD steps on targets min(x, 2.5) move the ceiling to 2.5"""
    import keras
    import tensorflow as tf

    layer, ceiling = _ceiling_layer(answer)
    optimizer = keras.optimizers.SGD(1.0)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = _loss(layer)
        weights = layer.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))

    for _ in range(40):
        step()
    value = float(np.asarray(ceiling))
    expect(
        abs(value - 2.5) < 1e-3,
        f"expected the ceiling at 2.5 ± 1e-3 after 40 steps, got {value:.6f}",
    )


_BATCH4 = np.random.default_rng(5).normal(size=(4, 3))
_BATCH4[0] = 0.0  # the zero vector
_UPSTREAM_NORM = {-1: np.array([1.0, -2.0, 0.5, 3.0]), 0: np.array([2.0, -1.0, 0.5])}


def _norm_gradients(answer, context, axis):
    """The answer's and safe_norm's weighted gradients along ``axis``."""

    def make():
        import tensorflow as tf

        from companion.gradients import safe_norm

        x, upstream = tf.constant(_BATCH4), _UPSTREAM_NORM[axis]
        _, ours = _weighted_gradient(lambda t: answer(t, axis=axis), x, upstream)
        _, theirs = _weighted_gradient(lambda t: safe_norm(t, axis=axis), x, upstream)
        return ours, theirs

    return context.once(f"gradients {axis}", make)


def norm_values(answer, context):
    """Values equal the companion's safe_norm along axis -1 and 0"""
    import tensorflow as tf

    from companion.gradients import safe_norm

    for axis in (-1, 0):
        value = np.asarray(answer(tf.constant(_BATCH4), axis=axis))
        expected = safe_norm(_BATCH4, axis=axis).numpy()
        expect(
            value.shape == expected.shape and np.allclose(value, expected, rtol=1e-12),
            f"expected {np.round(expected, 6).tolist()} for axis={axis}, got "
            f"{np.round(value, 6).tolist()}",
        )


def norm_zero_vector(answer, context):
    """The gradient at the zero vector is 0, not NaN"""
    gradient, _ = _norm_gradients(answer, context, -1)
    expect(gradient is not None, "expected a gradient, got None")
    expect(
        np.array_equal(gradient[0], [0.0, 0.0, 0.0]),
        f"expected [0, 0, 0] at the zero row, got {gradient[0].tolist()} (autodiff of sqrt "
        "gives 0 * inf = NaN there: write the gradient x / norm with a safe divisor)",
    )


def norm_gradients(answer, context):
    """Gradients with an uneven upstream equal safe_norm's along axis -1 and 0"""
    along = "(is upstream expanded along axis, not always the last one?)"
    for axis in (-1, 0):
        try:
            gradient, expected = _norm_gradients(answer, context, axis)
        except Exception as error:
            if axis == -1:
                raise
            raise Failed(
                f"expected safe_norm's gradient for axis=0, got {type(error).__name__} {along}"
            ) from error
        expect(gradient is not None, f"expected a gradient for axis={axis}, got None")
        norm = np.linalg.norm(_BATCH4, axis=axis, keepdims=True)
        plain = _BATCH4 / np.where(norm > 0, norm, 1)
        expect(
            not np.allclose(gradient, plain),
            f"expected safe_norm's gradient for axis={axis}, got x / norm without the "
            "upstream gradient (multiply by upstream, expanded along axis)",
        )
        expect(
            np.allclose(gradient, expected, rtol=1e-12, atol=1e-15),
            f"expected safe_norm's gradient for axis={axis}, got a largest difference of "
            f"{float(np.max(np.abs(gradient - expected))):.3g} {along}",
        )


def norm_gradient_error(answer, context):
    """gradient_error on the non-zero rows is below 1e-8"""
    from companion.gradients import gradient_error

    error = gradient_error(answer, _BATCH4[1:])
    expect(error < 1e-8, f"expected gradient_error below 1e-8, got {error:.3g}")


_W5 = np.random.default_rng(7).normal(size=(4, 3))


def _tanh_f(x):
    import tensorflow as tf

    return tf.reduce_sum(tf.tanh(x @ tf.constant(_W5)))


def _hvp_result(answer, f, x, v):
    import tensorflow as tf

    got = answer(f, tf.constant(x), tf.constant(v))
    expect(
        got is not None,
        "expected H v, got None (compute the gradient inside the ForwardAccumulator's with "
        "block, so that the accumulator sees it)",
    )
    got = np.asarray(got)
    expect(
        got.shape == np.shape(x),
        f"expected H v of x's shape {np.shape(x)}, got shape {got.shape}"
        + (
            " (a scalar is the directional derivative of f, first order: take the jvp of "
            "the gradient, not of f)"
            if got.ndim == 0
            else ""
        ),
    )
    return got


def hvp_tanh(answer, context):
    """H v of sum(tanh(x @ w)) equals the full Hessian (jacobian of the gradient) @ v"""
    import tensorflow as tf

    x = np.random.default_rng(8).normal(size=(1, 4))
    v = np.random.default_rng(13).normal(size=(1, 4))
    got = _hvp_result(answer, _tanh_f, x, v)
    xt = tf.constant(x)
    with tf.GradientTape() as outer:
        outer.watch(xt)
        with tf.GradientTape() as inner:
            inner.watch(xt)
            y = _tanh_f(xt)
        gradient = inner.gradient(y, xt)
    hessian = tf.reshape(outer.jacobian(gradient, xt), [4, 4]).numpy()
    expected = (hessian @ v.reshape(4)).reshape(1, 4)
    expect(
        np.allclose(got, expected, rtol=1e-12, atol=1e-14),
        f"expected H v = {np.round(expected, 6).tolist()}, got {np.round(got, 6).tolist()}",
    )


def hvp_cubic(answer, context):
    """For sum(x ** 3) on a (2, 3) input, H v is 6 x v"""
    import tensorflow as tf

    x = np.arange(-3.0, 3.0).reshape(2, 3) / 2
    v = np.array([[1.0, -1.0, 2.0], [0.5, 3.0, -2.0]])
    got = _hvp_result(answer, lambda t: tf.reduce_sum(t**3), x, v)
    expected = 6 * x * v
    expect(
        np.allclose(got, expected, rtol=1e-12, atol=1e-14),
        f"expected 6 x v = {expected.tolist()}, got {np.round(got, 6).tolist()}",
    )


def _critic_check(answer, layers, expected_names, what):
    import keras

    keras.utils.set_random_seed(1)
    critic = keras.Sequential([keras.Input((2,)), *layers()])
    rng = np.random.default_rng(0)
    real = rng.normal(size=(16, 2)).astype("float32")
    fake = rng.normal(size=(16, 2)).astype("float32")
    found = answer(critic, real, fake)
    expect(
        isinstance(found, (list, tuple)),
        f"expected a list of the critic's variables, got {type(found).__name__}",
    )
    names = {id(v): n for v, n in zip(critic.trainable_variables, _labels(critic))}
    paths = {v.path: n for v, n in zip(critic.trainable_variables, _labels(critic))}
    got = sorted(
        names.get(id(item)) or (paths.get(item) if isinstance(item, str) else None) or repr(item)
        for item in found
    )
    expected = sorted(expected_names)
    message = f"expected {expected or 'none'} for {what}, got {got or 'none'}"
    if not got:
        message += " (is the tape around gradient_penalty alone, the critic's output left out?)"
    elif "hidden bias" in set(got) - set(expected):
        message += (
            " (the hidden bias shifts where tanh' is taken, so the input gradient depends on it)"
        )
    expect(got == expected, message)


def _labels(critic):
    labels = []
    for index, layer in enumerate(critic.layers):
        place = "output" if index == len(critic.layers) - 1 else "hidden"
        labels += [f"{place} {weight.path.rsplit('/', 1)[-1]}" for weight in layer.weights]
    return labels


def penalty_tanh_critic(answer, context):
    """A tanh critic (Dense(8, tanh), Dense(1)): only the output bias gets None"""
    import keras

    _critic_check(
        answer,
        lambda: [keras.layers.Dense(8, "tanh"), keras.layers.Dense(1)],
        ["output bias"],
        "the tanh critic",
    )


def penalty_linear_critic(answer, context):
    """A linear critic (Dense(8), Dense(1)): both biases get None"""
    import keras

    _critic_check(
        answer,
        lambda: [keras.layers.Dense(8), keras.layers.Dense(1)],
        ["hidden bias", "output bias"],
        "a linear critic (its input gradient is the product of the kernels)",
    )


def penalty_no_output_bias(answer, context):
    """A critic without an output bias: every weight gets a gradient"""
    import keras

    _critic_check(
        answer,
        lambda: [keras.layers.Dense(8, "tanh"), keras.layers.Dense(1, use_bias=False)],
        [],
        "a tanh critic without an output bias",
    )


EXERCISES = (
    Exercise(
        "5.1",
        "Straight-through rounding.",
        FUNCTION,
        (ste_forward, ste_gradient_is_one, ste_passes_upstream),
        (
            "tf.custom_gradient lets the forward and the backward pass differ: the forward "
            "can round while the backward pretends nothing happened.",
            "Decorate ste_round with @tf.custom_gradient and return tf.round(x) together with "
            "a grad function that returns its upstream argument as it is.",
        ),
    ),
    Exercise(
        "5.2",
        "Gradient clipping as an op.",
        FUNCTION,
        (clip_forward_identity, clip_rescales, clip_keeps_small, clip_gradient_error),
        (
            "The forward pass is tf.identity; all the work is in the grad function, which "
            "sees the upstream gradient.",
            "Inside clip_gradient_norm, define a @tf.custom_gradient function of x alone that "
            "closes over max_norm and returns tf.clip_by_norm(upstream, max_norm) as its "
            "gradient.",
        ),
    ),
    Exercise(
        "5.3",
        "A learned ceiling as a Keras layer.",
        LAYER_CLASS,
        (
            ceiling_weight,
            ceiling_forward,
            ceiling_input_gradient,
            ceiling_gradient,
            ceiling_trains,
        ),
        (
            "A variable that a custom-gradient function reads inside gets its gradient only "
            "if grad accepts variables= and returns one gradient per variable.",
            "Define the @tf.custom_gradient function inside call; its grad(upstream, "
            "variables=None) returns the input gradient (leak above the ceiling) and "
            "[sum of upstream where x > ceiling].",
        ),
    ),
    Exercise(
        "5.4",
        "`safe_norm` in `keras.ops`.",
        FUNCTION,
        (norm_values, norm_zero_vector, norm_gradients, norm_gradient_error),
        (
            "keras.ops.custom_gradient works like tf.custom_gradient; on the zero vector the "
            "gradient x / ||x|| needs a divisor that is never 0.",
            "In grad(*args, upstream=None), take upstream from args when the keyword is None "
            "(TensorFlow passes it positionally); the gradient is upstream, expanded along "
            "axis, times x over the norm, with ops.where putting 1 where the norm is 0.",
        ),
    ),
    Exercise(
        "5.5",
        "Hessian-vector products.",
        FUNCTION,
        (hvp_tanh, hvp_cubic),
        (
            "The gradient of f is a function of x; H v is its directional derivative along "
            "v, which forward mode gives in one pass.",
            "Open tf.autodiff.ForwardAccumulator(primals=x, tangents=v), take a tape's "
            "gradient of f(x) inside it, and return accumulator.jvp(gradient).",
        ),
    ),
    Exercise(
        "5.6",
        "What the penalty does not train.",
        FUNCTION,
        (penalty_tanh_critic, penalty_linear_critic, penalty_no_output_bias),
        (
            "The penalty depends on the critic only through its gradient with respect to "
            "the input: which weights can change that gradient?",
            "Under a tape, compute gradient_penalty(critic, real, fake); take tape.gradient "
            "for critic.trainable_variables and keep the variables whose gradient is None.",
        ),
    ),
)
