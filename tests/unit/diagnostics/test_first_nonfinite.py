"""companion/diagnostics/_nonfinite.py: first_nonfinite names the first layer gone NaN."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from companion.diagnostics import (
    first_nonfinite,
)
from companion.layers import ResidualBlock

X = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")


# ---------------------------------------------------------------- non-finite values


class Log(keras.layers.Layer):
    def call(self, inputs):
        return keras.ops.log(inputs)


def _negative_dense(name):
    layer = keras.layers.Dense(3, name=name, kernel_initializer=keras.initializers.Constant(-1.0))
    return layer


def test_first_nonfinite_names_the_layer_in_a_sequential_model_like_a_manual_walk():
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(3, activation="relu", name="ok"),
            _negative_dense("negative"),
            Log(name="log"),
            keras.layers.Dense(2, name="after"),
        ]
    )
    x = np.abs(X) + 0.1
    manual, h = None, x
    for layer in model.layers:  # the inline version: feed the batch through layer by layer
        h = layer(h)
        if manual is None and not np.isfinite(np.asarray(h)).all():
            manual = layer.name
    assert first_nonfinite(model, x) == manual == "log"


def test_first_nonfinite_in_functional_branches_and_nested_layers():
    inputs = keras.Input((3,))
    left = keras.layers.Dense(4, name="left")(inputs)
    block = ResidualBlock(4, name="block")
    right = block(inputs)
    model = keras.Model(inputs, keras.layers.Add(name="add")([left, right]))
    assert first_nonfinite(model, X) is None
    block.hidden.kernel.assign(np.full(block.hidden.kernel.shape, np.nan, "float32"))
    assert first_nonfinite(model, X) == "block/hidden"


class SubclassedWithRawOp(keras.Model):
    def __init__(self, raw_log=False, **kwargs):
        super().__init__(**kwargs)
        self.raw_log = raw_log
        self.first = keras.layers.Dense(
            3, name="first", kernel_initializer=keras.initializers.Constant(-1.0)
        )
        self.log = Log(name="log")
        self.second = keras.layers.Dense(2, name="second")

    def call(self, inputs):
        h = self.first(inputs)
        h = keras.ops.log(h) if self.raw_log else self.log(h)
        return self.second(h)


def test_first_nonfinite_in_a_subclassed_model():
    x = np.abs(X) + 0.1
    assert first_nonfinite(SubclassedWithRawOp(name="sub"), x) == "log"
    assert (
        first_nonfinite(SubclassedWithRawOp(raw_log=True, name="sub"), x)
        == "sub.call, before 'second'"
    )


def test_first_nonfinite_restores_the_layers_even_after_an_error():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="d")])
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
        first_nonfinite(model, np.ones((2, 5), "float32"))  # wrong width: the call raises
    assert all("call" not in vars(layer) for layer in model.layers)
    assert first_nonfinite(model, X) is None


def test_first_nonfinite_bad_input():
    with pytest.raises(TypeError, match="model: expected a Keras layer or model, got str 'm'"):
        first_nonfinite("m", X)
    with pytest.raises(ValueError, match="inputs: expected finite values, got NaN or Inf"):
        first_nonfinite(keras.layers.Dense(2), np.array([[np.nan, 1.0, 2.0]], "float32"))
