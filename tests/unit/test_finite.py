"""``companion._finite``: NaN and infinity found in any nest of values, eagerly and in a graph."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from companion._finite import has_nonfinite, nonfinite_flag

FINITE = [1.5, np.ones(3, "float32"), tf.ones([2, 2]), {"a": [None, tf.zeros(1)]}, np.arange(3)]
NONFINITE = [
    math.nan,
    np.array([1.0, np.inf], "float32"),
    tf.constant([-np.inf]),
    {"a": [None, tf.constant([0.0, np.nan])]},
    keras.Variable([1.0, np.nan]),
]


@pytest.mark.parametrize("value", FINITE)
def test_finite_values_are_finite_eagerly_and_in_a_graph(value):
    assert not has_nonfinite(value)
    assert float(nonfinite_flag(value)) == 0.0


@pytest.mark.parametrize("value", NONFINITE)
def test_nan_and_infinity_are_found_eagerly_and_in_a_graph(value):
    assert has_nonfinite(value)
    assert float(nonfinite_flag(value)) == 1.0


def test_the_flag_works_inside_a_compiled_function():
    flag = tf.function(lambda x: nonfinite_flag([x, None]), jit_compile=True)
    assert float(flag(tf.constant([1.0, 2.0]))) == 0.0
    assert float(flag(tf.constant([1.0, np.nan]))) == 1.0


def test_integer_leaves_are_never_nonfinite():
    assert not has_nonfinite([np.array([2**31 - 1]), 3, tf.constant([7])])


def test_bfloat16_values_are_checked_too():
    # Used to be skipped: NumPy does not count bfloat16 as floating.
    nan = tf.constant([1.0, np.nan], tf.bfloat16)
    assert has_nonfinite(nan) and float(nonfinite_flag(nan)) == 1.0
    assert not has_nonfinite(tf.ones(2, tf.bfloat16))
