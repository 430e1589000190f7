"""Chapter 5's exercise checks: a correct answer passes, each likely mistake is named."""

import keras
import tensorflow as tf
from keras import ops

from companion.gradients import clipped_identity, gradient_penalty


@tf.custom_gradient
def ste_round(x):
    return tf.round(x), lambda upstream: upstream


@tf.custom_gradient
def ste_round_ones(x):
    return tf.round(x), lambda upstream: tf.ones_like(upstream)


def ste_round_broken(x):
    return tf.round(x, decimals=0)  # tf.round takes no number of digits: raises


def test_straight_through_rounding(accepted, caught):
    accepted("5.1", ste_round)
    accepted("5.1", lambda x: x + tf.stop_gradient(tf.round(x) - x))
    caught("5.1", tf.round, r"got None \(tf.round has no useful gradient")
    caught("5.1", ste_round_ones, r"not ones")
    caught("5.1", ste_round_broken, r"^the answer raised")


def clip_gradient_norm(x, max_norm):
    @tf.custom_gradient
    def identity(x):
        return tf.identity(x), lambda upstream: tf.clip_by_norm(upstream, max_norm)

    return identity(x)


def clip_gradient_value(x, max_norm):
    @tf.custom_gradient
    def identity(x):
        return tf.identity(x), lambda up: tf.clip_by_value(up, -max_norm, max_norm)

    return identity(x)


def rescale_always(x, max_norm):
    @tf.custom_gradient
    def identity(x):
        return tf.identity(x), lambda upstream: upstream * max_norm / tf.norm(upstream)

    return identity(x)


def scale_factor_only(x, max_norm):
    @tf.custom_gradient
    def identity(x):
        return tf.identity(x), lambda up: tf.minimum(tf.cast(1, up.dtype), max_norm / tf.norm(up))

    return identity(x)


def test_gradient_clipping_as_an_op(accepted, caught):
    accepted("5.2", clip_gradient_norm)
    caught("5.2", scale_factor_only, r"x's shape \(4,\), got shape \(\).*not the scale factor")
    caught("5.2", clip_gradient_value, r"tf.clip_by_value clips each entry")
    caught("5.2", rescale_always, r"only when the norm exceeds max_norm")
    caught("5.2", lambda x, m: tf.clip_by_norm(x, m), r"x unchanged.*not x")


class LearnedCeiling(keras.layers.Layer):
    def __init__(self, leak=0.01, **kwargs):
        super().__init__(**kwargs)
        self.leak = float(leak)

    def build(self, input_shape):
        self.ceiling = self.add_weight(shape=(), initializer="ones", name="ceiling")

    def call(self, inputs):
        @tf.custom_gradient
        def clip(x):
            def grad(upstream, variables=None):
                above = x > self.ceiling
                return tf.where(above, self.leak * upstream, upstream), [
                    self.ceiling_sign * tf.reduce_sum(tf.where(above, upstream, 0.0))
                ]

            return tf.minimum(x, self.ceiling), grad

        return clip(tf.convert_to_tensor(inputs, self.compute_dtype))

    ceiling_sign = 1.0


class CeilingOutsideTheOp(LearnedCeiling):
    def call(self, inputs):
        return clipped_identity(inputs, -1e9, self.ceiling, leak=self.leak)


class CeilingGradientFlipped(LearnedCeiling):
    ceiling_sign = -1.0


class LeakIgnored(LearnedCeiling):
    def __init__(self, leak=0.01, **kwargs):
        super().__init__(leak, **kwargs)
        self.leak = 1.0


def test_a_learned_ceiling(accepted, caught):
    accepted("5.3", LearnedCeiling)
    caught("5.3", CeilingOutsideTheOp, r"got None \(the weight is read outside")
    caught("5.3", CeilingGradientFlipped, r"the opposite sign")
    caught("5.3", LeakIgnored, r"leak \* upstream")


def keras_safe_norm(x, axis=-1, expand=True):
    @ops.custom_gradient
    def norm_of(x):
        norm = ops.sqrt(ops.sum(ops.square(x), axis=axis, keepdims=True))

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            upstream = ops.expand_dims(upstream, axis) if expand else upstream[..., None]
            return upstream * x / ops.where(norm > 0, norm, ops.ones_like(norm))

        return ops.squeeze(norm, axis), grad

    return norm_of(ops.convert_to_tensor(x))


def keras_safe_norm_no_upstream(x, axis=-1):
    @ops.custom_gradient
    def norm_of(x):
        norm = ops.sqrt(ops.sum(ops.square(x), axis=axis, keepdims=True))

        def grad(*args, upstream=None):
            return x / ops.where(norm > 0, norm, ops.ones_like(norm))

        return ops.squeeze(norm, axis), grad

    return norm_of(ops.convert_to_tensor(x))


def test_safe_norm_in_keras_ops(accepted, caught):
    accepted("5.4", keras_safe_norm)
    caught("5.4", keras_safe_norm_no_upstream, r"without the upstream gradient")
    plain = lambda x, axis=-1: ops.sqrt(ops.sum(ops.square(x), axis=axis))  # noqa: E731
    caught("5.4", plain, r"0 \* inf = NaN")
    caught("5.4", lambda x, axis=-1: keras_safe_norm(x, axis, expand=False), r"along axis")


def hvp(f, x, v):
    with tf.autodiff.ForwardAccumulator(primals=x, tangents=v) as accumulator:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        gradient = tape.gradient(y, x)
    return accumulator.jvp(gradient)


def hvp_gradient_outside(f, x, v):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    gradient = tape.gradient(y, x)
    with tf.autodiff.ForwardAccumulator(primals=x, tangents=v) as accumulator:
        pass
    return accumulator.jvp(gradient)


def directional_derivative(f, x, v):
    with tf.autodiff.ForwardAccumulator(primals=x, tangents=v) as accumulator:
        y = f(x)
    return accumulator.jvp(y)


def test_hessian_vector_products(accepted, caught):
    accepted("5.5", hvp)
    caught("5.5", hvp_gradient_outside, r"got None \(compute the gradient inside")
    caught("5.5", directional_derivative, r"directional derivative of f")


def untrained(critic, real, fake):
    with tf.GradientTape() as tape:
        penalty = gradient_penalty(critic, real, fake, seed=0)
    weights = critic.trainable_variables
    return [w for w, g in zip(weights, tape.gradient(penalty, weights)) if g is None]


def output_bias(critic, real, fake):
    return [critic.trainable_variables[-1]]


def untrained_of_output(critic, real, fake):
    with tf.GradientTape() as tape:
        scores = critic(real)
    weights = critic.trainable_variables
    return [w.path for w, g in zip(weights, tape.gradient(scores, weights)) if g is None]


def test_what_the_penalty_does_not_train(accepted, caught):
    accepted("5.6", untrained)
    accepted("5.6", lambda c, r, f: [w.path for w in untrained(c, r, f)])
    caught("5.6", output_bias, r"hidden bias.*output bias.*for a linear critic")
    caught("5.6", untrained_of_output, r"got none.*gradient_penalty alone")
