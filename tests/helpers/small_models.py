"""The small Keras models and datasets the tests share: fast to build, trace and train.

A test that needs a particular architecture (a gradient that overflows at a known layer, two named
branches, the layer under test) builds it where it tests it; the rest take one of these.
"""

import os

import keras
import numpy as np
import tensorflow as tf

from companion.data import NUM_CLASSES, make_shapes
from helpers.repo_tools import TESTS

#: The environment of a child process (``companion.notebook.run_python``) that imports these
#: helpers: tests/ on its path, and not the working folder (``python -c`` would put it first), so
#: that it imports the installed companion, as its parent does on Colab's stack.
CHILD_ENV = {
    "PYTHONPATH": os.pathsep.join([str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]),
    "PYTHONSAFEPATH": "1",
}

#: The image side and metadata width of ``two_input_classifier`` and ``shapes_dataset``.
IMAGE, META = 16, 4


def dense(inputs=3, units=1, *, activation=None, seed=None, functional=False):
    """``Input((inputs,))`` → ``Dense(units)``: Sequential, or Functional if ``functional``."""
    if seed is not None:
        keras.utils.set_random_seed(seed)
    layer = keras.layers.Dense(units, activation=activation)
    if functional:
        features = keras.Input((inputs,))
        return keras.Model(features, layer(features))
    return keras.Sequential([keras.Input((inputs,)), layer])


def one_weight():
    """y = w·x with w = 1 and no bias: each step's effect on w can be worked out by hand."""
    return keras.Sequential(
        [keras.Input((1,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")]
    )


def regressor(seed=0):
    """4 → Dense(8, relu) → LayerNormalization → 1: hidden units and a normalisation layer."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.LayerNormalization(),
            keras.layers.Dense(1),
        ]
    )


def regressor_data(n=64, batch=16):
    """``(x, y, dataset)`` for ``regressor``: y is a fixed linear function of x's 4 features."""
    x = np.random.default_rng(0).normal(size=(n, 4)).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], "float32"))[:, None]
    return x, y, tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def two_input_classifier(seed=1, regularizer=None):
    """An image and a metadata input (``IMAGE``, ``META``), a softmax over the shapes' classes."""
    keras.utils.set_random_seed(seed)
    image, meta = keras.Input((IMAGE, IMAGE, 3), name="image"), keras.Input((META,), name="meta")
    a = keras.layers.Conv2D(8, 3, strides=2, activation="relu", name="conv")(image)
    a = keras.layers.GlobalAveragePooling2D()(a)
    b = keras.layers.Dense(
        16, activation="relu", name="meta_dense", kernel_regularizer=regularizer
    )(meta)
    joined = keras.layers.Dense(32, activation="relu", name="joined")(
        keras.layers.Concatenate()([a, b])
    )
    return keras.Model(
        [image, meta], keras.layers.Dense(NUM_CLASSES, activation="softmax", name="head")(joined)
    )


def shapes_dataset(n, batch=32, seed=0):
    """``n`` labelled ((image, meta), label) examples for ``two_input_classifier``, batched."""
    (images, meta), labels = make_shapes(n, image_size=IMAGE, meta_dim=META, seed=seed)
    return tf.data.Dataset.from_tensor_slices(((images, meta), labels)).batch(batch)


def max_difference(a, b):
    """The largest absolute difference between two models' weights."""
    return max(float(np.max(np.abs(p - q))) for p, q in zip(a.get_weights(), b.get_weights()))
