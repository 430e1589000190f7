"""Chapter 2, composing ops: entropy that trains, a stable log-cosh, a learnable swish beta."""

from __future__ import annotations

import numpy as np

from companion.exercises._framework import FUNCTION, LAYER_CLASS, Exercise, expect

_PROBABILITIES = [[0.0, 0.25, 0.75], [1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3], [0.5, 0.5, 0.0]]


def _value_and_gradient(function, x):
    """``function(x)`` and the gradient of its sum with respect to ``x``, as NumPy arrays."""
    import tensorflow as tf

    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = function(x)
    gradient = tape.gradient(y, x)
    return np.asarray(y), None if gradient is None else np.asarray(gradient)


def _entropies(answer, context):
    """For axis -1 and 0: the answer's and xlogy's values and gradients, in float64."""
    import tensorflow as tf

    def make():
        p = tf.constant(_PROBABILITIES, tf.float64)
        found = {}
        for axis in (-1, 0):
            ours = _value_and_gradient(lambda q, axis=axis: answer(q, axis=axis), p)
            reference = _value_and_gradient(
                lambda q, axis=axis: -tf.reduce_sum(tf.math.xlogy(q, q), axis=axis), p
            )
            found[axis] = ours, reference
        return found

    return context.once("entropies", make)


def entropy_values(answer, context):
    """Values equal -sum(xlogy(p, p)) along axis -1 and 0, exact zeros included"""
    for axis, ((value, _), (reference, _)) in _entropies(answer, context).items():
        expect(
            np.shape(value) == np.shape(reference),
            f"expected shape {np.shape(reference)} for axis={axis}, got {np.shape(value)} "
            "(is the sum taken over the axis argument?)",
        )
        expect(
            np.isfinite(value).all(),
            f"expected finite entropies for axis={axis}, got {value.tolist()} "
            "(0 * log 0 is NaN: select 0 with tf.where where p == 0)",
        )
        expect(
            np.allclose(value, reference, rtol=1e-12, atol=1e-15),
            f"expected {np.round(reference, 6).tolist()} for axis={axis}, got "
            f"{np.round(value, 6).tolist()}",
        )


def entropy_gradient_finite(answer, context):
    """The gradient is finite at exact zeros"""
    for axis, ((_, gradient), _) in _entropies(answer, context).items():
        expect(gradient is not None, f"expected a gradient for axis={axis}, got None")
        bad = int(np.sum(~np.isfinite(gradient)))
        expect(
            bad == 0,
            f"expected a finite gradient for axis={axis}, got {bad} "
            "NaN or inf entries, at the zeros (the double-where trap: the unselected "
            "p * log(p) still gets gradient 0 * inf = NaN; give log a safe input where p == 0)",
        )


def entropy_gradient_matches(answer, context):
    """The gradient equals xlogy's, zeros included"""
    for axis, ((_, gradient), (_, reference)) in _entropies(answer, context).items():
        expect(gradient is not None, f"expected a gradient for axis={axis}, got None")
        error = float(np.max(np.abs(gradient - reference)))
        expect(
            np.allclose(gradient, reference, rtol=1e-12, atol=1e-12),
            f"expected xlogy's gradient for axis={axis}, got a largest difference of "
            f"{error:.3g} (an epsilon inside log changes the gradient at the zeros)",
        )


def _swish_layer(answer):
    layer = answer()
    layer.build((None, 1))
    weights = list(layer.trainable_weights)
    expect(
        len(weights) == 1,
        f"expected one trainable weight after build, got {len(weights)} (is beta made with "
        "self.add_weight in build, not a float or a tf.constant?)",
    )
    beta = weights[0]
    expect(
        tuple(beta.shape) == (),
        f"expected a scalar beta (shape ()), got shape {tuple(beta.shape)}",
    )
    expect(
        getattr(layer, "beta", None) is beta,
        "expected the trainable weight at layer.beta, got "
        f"{type(getattr(layer, 'beta', None)).__name__}",
    )
    return layer


def one_scalar_weight(answer, context):
    """build creates one trainable scalar weight, layer.beta"""
    _swish_layer(answer)


def output_is_swish(answer, context):
    """call gives swish(x, beta) = x * sigmoid(beta * x) with the current beta"""
    layer = _swish_layer(answer)
    x = np.linspace(-4, 4, 17, dtype="float32").reshape(-1, 1)
    layer.beta.assign(1.7)
    got = np.asarray(layer(x))
    expected = x / (1 + np.exp(-1.7 * x))
    silu = x / (1 + np.exp(-x))
    expect(
        not np.allclose(got, silu, atol=1e-5),
        "expected swish with beta 1.7, got swish with beta 1 (does call pass self.beta to swish?)",
    )
    error = float(np.max(np.abs(got - expected)))
    expect(
        error < 1e-5,
        f"expected x * sigmoid(1.7 x) with beta set to 1.7, got an error of {error:.3g}",
    )


def beta_grows_under_fit(answer, context):
    """fit on y = relu(x) makes beta grow to more than twice its start"""
    import keras

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).uniform(-4, 4, size=(512, 1)).astype("float32")
    layer = answer()
    model = keras.Sequential([keras.Input((1,)), layer])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    start = float(np.asarray(layer.beta))
    unchanged = (
        f"expected beta to move under fit, got it unchanged at {start:.3g} (does the output "
        "depend on self.beta, so that the gradient reaches it?)"
    )
    try:
        model.fit(x, np.maximum(x, 0.0), epochs=20, batch_size=64, verbose=0)
    except ValueError as error:
        expect("No gradients" not in str(error), unchanged + f": fit raised {error}")
        raise
    end = float(np.asarray(layer.beta))
    expect(end != start, unchanged)
    expect(
        end > 2 * start > 0,
        f"expected beta to grow from a positive start to more than twice it, got {start:.3g} "
        f"-> {end:.3g}",
    )


def log_cosh_float64(answer, context):
    """Equals np.log(np.cosh(x)) in float64 on [-80, 80]"""
    import tensorflow as tf

    grid = np.linspace(-80.0, 80.0, 1601)
    got = np.asarray(answer(tf.constant(grid)))
    expected = np.log(np.cosh(grid))
    expect(
        np.shape(got) == grid.shape and np.isfinite(got).all(),
        f"expected {grid.size} finite values, got shape {np.shape(got)} with "
        f"{int(np.sum(~np.isfinite(got)))} not finite",
    )
    offset = float(np.median(got - expected))
    expect(
        not np.isclose(abs(offset), np.log(2.0), rtol=1e-6),
        f"expected log(cosh(x)), got it shifted by {offset:+.4f} everywhere (cosh(x) = "
        "exp(|x|) (1 + exp(-2|x|)) / 2: the / 2 is a - log 2 term)",
    )
    error = float(np.max(np.abs(got - expected) / np.maximum(np.abs(expected), 1e-2)))
    expect(
        np.allclose(got, expected, rtol=1e-12, atol=1e-14),
        f"expected np.log(np.cosh(x)) within rtol 1e-12, got a relative error of {error:.3g}",
    )


def log_cosh_finite_float32(answer, context):
    """Finite in float32 at ±100 and ±1000, where cosh overflows: |x| - log 2 there"""
    import tensorflow as tf

    points = np.array([100.0, -100.0, 1000.0, -1000.0], "float32")
    got = np.asarray(answer(tf.constant(points)))
    bad = points[~np.isfinite(got)]
    expect(
        bad.size == 0,
        f"expected finite values in float32, got inf or NaN at x = {bad.tolist()} "
        "(cosh(x) overflows float32 once |x| > 89.4: rewrite with softplus of -2|x|)",
    )
    expected = np.abs(points) - np.float32(np.log(2.0))
    expect(
        np.allclose(got, expected, rtol=1e-6),
        f"expected |x| - log 2 = {expected.tolist()}, got {got.tolist()}",
    )


def log_cosh_gradient(answer, context):
    """The gradient is tanh(x) at 0, ±50 and ±1000, in float32 and float64"""
    import tensorflow as tf

    points = np.array([0.0, 50.0, -50.0, 1000.0, -1000.0])
    for dtype in (tf.float32, tf.float64):
        _, gradient = _value_and_gradient(answer, tf.constant(points, dtype))
        expect(gradient is not None, f"expected a gradient in {dtype.name}, got None")
        expect(
            np.allclose(gradient, np.tanh(points), atol=1e-7),
            f"expected tanh(x) = {np.tanh(points).tolist()} in {dtype.name}, got "
            f"{gradient.tolist()}",
        )


EXERCISES = (
    Exercise(
        "2.1",
        "Entropy that trains.",
        FUNCTION,
        (entropy_values, entropy_gradient_finite, entropy_gradient_matches),
        (
            "Where p == 0 the term p * log(p) should be 0, but the gradient of an unselected "
            "tf.where branch still flows: NaN there poisons it.",
            "Use tf.where twice: once to give log a safe input (1 where p == 0), once to "
            "select 0 for those terms; then reduce_sum over axis and negate.",
        ),
    ),
    Exercise(
        "2.2",
        "log-cosh without overflow.",
        FUNCTION,
        (log_cosh_float64, log_cosh_finite_float32, log_cosh_gradient),
        (
            "Take the log of cosh(x) = exp(|x|) (1 + exp(-2|x|)) / 2 term by term: no "
            "exponential of a large number is left.",
            "log(cosh(x)) = |x| + log(1 + exp(-2|x|)) - log 2; the middle term is "
            "softplus(-2|x|), and log 2 needs the input's dtype.",
        ),
    ),
    Exercise(
        "2.3",
        "Learnable beta in a layer.",
        LAYER_CLASS,
        (one_scalar_weight, output_is_swish, beta_grows_under_fit),
        (
            "A weight that fit trains is made with self.add_weight; the layer needs no "
            "constructor arguments.",
            "In build, make beta with self.add_weight (shape (), an 'ones' initializer) and "
            "keep it as self.beta; in call, pass self.beta as swish's second argument.",
        ),
    ),
)
