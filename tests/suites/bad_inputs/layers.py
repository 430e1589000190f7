"""Bad inputs for ``companion.layers``: constructor arguments, and what the noise layer gets."""

import keras
import numpy as np
from helpers.badinput import Bool, Callable_, Case, Int, Kind, Real

from companion.layers import AdditiveGaussianNoise, CustomDense, ResidualBlock, fresh_initializer

X = np.ones((2, 4), "float32")
FLOAT32_MAX = float(np.finfo("float32").max)
UNITS = Int(1, 2**20)
SEED = Int(0, 2**32 - 1).or_none()


def _keras_kind(module, what, *, none=False):
    """What ``module.get`` resolves (a name, config, instance or callable); ``None`` if ``none``."""

    def accepts(value):
        if value is None:
            return none
        if isinstance(value, (bool, int, float, bytes, list, tuple)):
            return False
        try:
            return module.get(value) is not None
        except (TypeError, ValueError):
            return False

    return Kind(what, accepts)


ACTIVATION = Kind(
    "None, a callable or a Keras activation name",
    lambda v: v is None or callable(v) or v in ("relu", "tanh", "sigmoid", "linear"),
)
INITIALIZER = _keras_kind(keras.initializers, "an initializer")
REGULARIZER = _keras_kind(keras.regularizers, "a regularizer or None", none=True)


def _noise_call(inputs, training):
    return AdditiveGaussianNoise(0.1, seed=1)(inputs, training=training)


CASES = [
    Case(
        "CustomDense",
        CustomDense,
        {
            "units": 3,
            "activation": None,
            "use_bias": True,
            "kernel_initializer": "glorot_uniform",
            "bias_initializer": "zeros",
            "kernel_regularizer": None,
            "bias_regularizer": None,
        },
        {
            "units": UNITS,
            "activation": ACTIVATION,
            "use_bias": Bool(),
            "kernel_initializer": INITIALIZER,
            "bias_initializer": INITIALIZER,
            "kernel_regularizer": REGULARIZER,
            "bias_regularizer": REGULARIZER,
        },
    ),
    Case(
        "AdditiveGaussianNoise",
        AdditiveGaussianNoise,
        {"stddev": 0.1, "seed": None},
        {"stddev": Real(0, FLOAT32_MAX), "seed": SEED},
    ),
    Case(
        "AdditiveGaussianNoise.__call__",
        _noise_call,
        {"inputs": X, "training": True},
        {"training": Bool().or_none()},
    ),
    Case(
        "ResidualBlock",
        ResidualBlock,
        {
            "units": 3,
            "hidden_units": None,
            "activation": "relu",
            "kernel_initializer": "glorot_uniform",
            "kernel_regularizer": None,
        },
        {
            "units": UNITS,
            "hidden_units": UNITS.or_none(),
            "activation": ACTIVATION,
            "kernel_initializer": INITIALIZER,
            "kernel_regularizer": REGULARIZER,
        },
    ),
    Case(
        "fresh_initializer",
        fresh_initializer,
        {"initializer": keras.initializers.GlorotUniform(), "index": 0},
        {"initializer": Callable_(), "index": Int(0)},
    ),
]
