"""Chapter 2's exercise checks: a correct answer passes, each likely mistake is named."""

import keras
import numpy as np
import tensorflow as tf

from companion.ops import softplus, swish


def entropy(p, axis=-1):
    positive = p > 0
    safe = tf.where(positive, p, tf.ones_like(p))
    return -tf.reduce_sum(tf.where(positive, p * tf.math.log(safe), tf.zeros_like(p)), axis)


def entropy_single_where(p, axis=-1):
    return -tf.reduce_sum(tf.where(p > 0, p * tf.math.log(p), tf.zeros_like(p)), axis)


def entropy_with_epsilon(p, axis=-1):
    return -tf.reduce_sum(p * tf.math.log(p + 1e-12), axis)


def entropy_naive(p, axis=-1):
    return -tf.reduce_sum(p * tf.math.log(p), axis)


def entropy_broken(p, axis=-1):
    return -tf.reduce_sum(tf.math.xlogy(p), axis)  # xlogy needs two arguments: raises


def test_entropy_that_trains(accepted, caught):
    accepted("2.1", entropy)
    caught("2.1", entropy_single_where, r"finite gradient.*double-where trap")
    caught("2.1", entropy_with_epsilon, r"epsilon inside log")
    caught("2.1", entropy_naive, r"0 \* log 0 is NaN")
    caught("2.1", entropy_broken, r"^the answer raised TypeError")


class LearnableSwish(keras.layers.Layer):
    def build(self, input_shape):
        self.beta = self.add_weight(shape=(), initializer="ones", name="beta")

    def call(self, inputs):
        return swish(inputs, self.beta)


class BetaIgnored(LearnableSwish):
    def call(self, inputs):
        return swish(inputs)


class BetaNotAWeight(LearnableSwish):
    def build(self, input_shape):
        self.beta = tf.constant(1.0)


def test_learnable_beta_in_a_layer(accepted, caught):
    accepted("2.3", LearnableSwish)
    caught("2.3", BetaIgnored, r"beta 1 \(does call pass self.beta")
    caught("2.3", BetaIgnored, r"unchanged at 1 \(does the output depend on self.beta")
    caught("2.3", BetaNotAWeight, r"one trainable weight after build, got 0.*add_weight")


def log_cosh(x):
    a = tf.abs(x)
    return a + softplus(-2.0 * a) - tf.constant(np.log(2.0), x.dtype)


def log_cosh_naive(x):
    return tf.math.log(tf.math.cosh(x))


def log_cosh_without_log_2(x):
    return tf.abs(x) + softplus(-2.0 * tf.abs(x))


def test_log_cosh_without_overflow(accepted, caught):
    accepted("2.2", log_cosh)
    caught("2.2", log_cosh_naive, r"overflows float32 once \|x\| > 89.4")
    caught("2.2", log_cosh_without_log_2, r"shifted by \+0.6931.*- log 2 term")
