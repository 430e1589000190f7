"""Custom Keras layers (custom-op path 3): a Dense layer written from scratch, a layer that
behaves differently in training, and a layer built from sublayers. Chapter 4 builds each one.

All three are registered with ``@keras.saving.register_keras_serializable(package="companion")``,
so a ``.keras`` file that contains them loads in any process that has imported this module,
without ``custom_objects``.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

from companion._checks import (
    check_bool,
    check_callable,
    check_instance,
    check_int,
    check_real,
    check_seed,
    describe,
)

__all__ = [
    "AdditiveGaussianNoise",
    "CustomDense",
    "MAX_UNITS",
    "ResidualBlock",
    "fresh_initializer",
]


#: The widest layer (``units``) the companion builds: a wider kernel would not fit in memory.
MAX_UNITS = 2**20

_ACTIVATION = "None, a callable or a Keras activation name such as 'relu'"
_INITIALIZER = (
    "an initializer (a name such as 'glorot_uniform', a config dict, an Initializer or a callable)"
)
_REGULARIZER = (
    "None or a regularizer (a name such as 'l2', a config dict, a Regularizer or a callable)"
)


def _keras_object(module: Any, value: Any, name: str, what: str, *, allow_none: bool = True) -> Any:
    """``module.get(value)`` for ``keras.activations``, ``.initializers`` or ``.regularizers``.

    Keras's own error ("Could not interpret initializer identifier: 3") does not say which
    argument held the value; this one does, and keeps Keras's on its next line: for a config
    dict it names the cause ("Could not locate function 'scaled_tanh'": not registered).

    Raises:
        TypeError: Naming ``name``, if ``value`` is ``None`` (unless ``allow_none``) or of a type
            Keras cannot interpret.
        ValueError: Naming ``name``, if ``value`` is a name or config dict Keras does not know.
    """
    if value is None and not allow_none:
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    try:
        return module.get(value)
    except (TypeError, ValueError) as error:
        error_type = ValueError if isinstance(value, (str, dict)) else TypeError
        raise error_type(f"{name}: expected {what}, got {describe(value)}\n{error}") from error


def _check_units(value: Any, name: str = "units") -> int:
    return check_int(value, name, minimum=1, maximum=MAX_UNITS)


def _initializer(value: Any, name: str) -> Any:
    return _keras_object(keras.initializers, value, name, _INITIALIZER, allow_none=False)


def _regularizer(value: Any, name: str) -> Any:
    return _keras_object(keras.regularizers, value, name, _REGULARIZER)


#: Spreads a seeded initializer's seed over a composite layer's sublayers
#: (see ``fresh_initializer``).
_SEED_STRIDE = 1_000_003


def fresh_initializer(initializer: Any, index: int = 0) -> Any:
    """A new initializer, made from ``initializer``, for sublayer ``index`` of a composite layer.

    In Keras 3 an initializer instance fixes its seed when it is created (an unseeded one draws
    a random seed then), so one instance shared by several same-shaped sublayers gives them
    identical starting kernels. This returns an instance of its own for each sublayer:

    - unseeded: a clone, which draws a new seed;
    - seeded with an int: a clone seeded with ``(seed * 1_000_003 + index) % 2**31``, so the
      sublayers differ from each other (and from a neighbouring block seeded ``seed + 1``), yet
      a block built twice with the same seed starts from the same kernels;
    - seeded with a ``keras.random.SeedGenerator``: the instance itself, since its generator
      advances on every call (a clone would restart it and repeat the values);
    - not a ``keras.initializers.Initializer`` (a plain function): returned as is, it has no seed.

    Cloning uses the class's own ``get_config``/``from_config``, so unregistered initializer
    classes work too.

    Args:
        initializer: What ``keras.initializers.get`` returned: an ``Initializer`` or a callable.
        index: The sublayer's position in the composite layer (a non-negative int).

    Returns:
        The initializer to give that sublayer.

    Raises:
        TypeError: If ``initializer`` is not callable or ``index`` is not an int.
        ValueError: If ``index`` is negative.

    Example:
        >>> import numpy as np
        >>> shared = keras.initializers.GlorotUniform()
        >>> bool(np.array_equal(shared((3, 3)), shared((3, 3))))  # same seed every call
        True
        >>> a, b = fresh_initializer(shared, 0), fresh_initializer(shared, 1)
        >>> bool(np.array_equal(a((3, 3)), b((3, 3))))
        False

    Taught in chapter 4, "One initializer object for several sublayers".
    """
    check_callable(initializer, "initializer", "a keras.initializers.Initializer or a callable")
    index = check_int(index, "index", minimum=0)
    if not isinstance(initializer, keras.initializers.Initializer):
        return initializer
    seed = getattr(initializer, "seed", None)
    if isinstance(seed, keras.random.SeedGenerator):
        return initializer
    config = initializer.get_config()
    if isinstance(config.get("seed"), int) and not isinstance(config["seed"], bool):
        config["seed"] = (config["seed"] * _SEED_STRIDE + index) % 2**31
    return type(initializer).from_config(config)


@keras.saving.register_keras_serializable(package="companion")
class CustomDense(keras.layers.Layer):
    """A fully connected layer, ``activation(inputs @ kernel + bias)``, written from scratch.

    It computes exactly what ``keras.layers.Dense`` computes: given the same weights, the
    outputs agree. Weights are created in ``build``, when the input's last dimension is known,
    and an ``InputSpec`` then rejects inputs whose last dimension differs.

    Args:
        units: Number of output features (a positive int).
        activation: ``None`` (linear), an activation name such as ``"relu"``, or a callable.
        use_bias: Whether to add a bias vector.
        kernel_initializer: Initializer (name, instance or config dict) for the kernel.
        bias_initializer: Initializer for the bias.
        kernel_regularizer: Optional regularizer for the kernel; its penalty appears in
            ``layer.losses``.
        bias_regularizer: Optional regularizer for the bias.
        **kwargs: Base-layer arguments (``name``, ``dtype``, ``trainable``, ...).

    Raises:
        TypeError: If ``units`` is not an int, ``use_bias`` not a bool, or an activation,
            initializer or regularizer is of a type Keras cannot interpret (``None`` is no
            initializer).
        ValueError: If ``units`` is not in ``[1, MAX_UNITS]`` or a name or config is unknown to
            Keras; at build time, if the input has rank < 2 or an undefined last dimension.

    Example:
        >>> import numpy as np
        >>> layer = CustomDense(3, activation="relu")
        >>> tuple(layer(np.ones((2, 4), "float32")).shape)
        (2, 3)
        >>> [tuple(w.shape) for w in layer.weights]
        [(4, 3), (3,)]

    Taught in chapter 4, "The companion's `CustomDense`".
    """

    def __init__(
        self,
        units: int,
        activation: Any = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.units = _check_units(units)
        self.activation = _keras_object(keras.activations, activation, "activation", _ACTIVATION)
        self.use_bias = check_bool(use_bias, "use_bias")
        self.kernel_initializer = _initializer(kernel_initializer, "kernel_initializer")
        self.bias_initializer = _initializer(bias_initializer, "bias_initializer")
        self.kernel_regularizer = _regularizer(kernel_regularizer, "kernel_regularizer")
        self.bias_regularizer = _regularizer(bias_regularizer, "bias_regularizer")
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        input_dim = input_shape[-1]
        if input_dim is None:
            raise ValueError(
                f"input_shape: expected a defined last dimension, got {tuple(input_shape)}"
            )
        self.kernel = self.add_weight(
            shape=(input_dim, self.units),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            name="kernel",
        )
        self.bias = (
            self.add_weight(
                shape=(self.units,),
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                name="bias",
            )
            if self.use_bias
            else None
        )
        # From now on Keras checks every input against the width the kernel was built for.
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: input_dim})

    def call(self, inputs: Any) -> Any:
        outputs = ops.matmul(inputs, self.kernel)
        if self.bias is not None:
            outputs = ops.add(outputs, self.bias)
        return self.activation(outputs)

    def compute_output_shape(self, input_shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            units=self.units,
            activation=keras.activations.serialize(self.activation),
            use_bias=self.use_bias,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            bias_regularizer=keras.regularizers.serialize(self.bias_regularizer),
        )
        return config


def _generator_seed(seed: int | None) -> int | None:
    """``seed`` (0 to ``2**32 - 1``) as the running backend's ``SeedGenerator`` holds it: PyTorch
    keeps seed state in int32 (it has no uint32), so a seed from ``2**31`` on becomes the int32
    with the same 32 bits; TensorFlow and JAX keep uint32 and take it unchanged."""
    if seed is None or seed < 2**31 or keras.backend.backend() != "torch":
        return seed
    return seed - 2**32


@keras.saving.register_keras_serializable(package="companion")
class AdditiveGaussianNoise(keras.layers.Layer):
    """Add zero-mean Gaussian noise in training; pass inputs through unchanged in inference.

    A regulariser like ``keras.layers.GaussianNoise``: ``inputs + stddev * N(0, 1)`` when
    called with ``training=True`` (``fit`` does this), ``inputs`` otherwise (``predict``,
    ``evaluate``, a plain call). The noise comes from a ``keras.random.SeedGenerator``, so
    two layers with the same ``seed`` draw the same noise sequence.

    Args:
        stddev: Standard deviation of the noise: a non-negative number that the layer's compute
            dtype holds (at most 65504 under ``mixed_float16``).
        seed: Optional int seed in ``[0, 2**32 - 1]`` for the layer's own random generator.
        **kwargs: Base-layer arguments (``name``, ``dtype``, ...).

    Raises:
        TypeError: If ``stddev`` is not a real number or ``seed`` is not an int or None; at call
            time, if ``training`` is not a bool or None.
        ValueError: If ``stddev`` is negative or beyond the compute dtype, or ``seed`` is out of
            range.

    Example:
        >>> import numpy as np
        >>> noise = AdditiveGaussianNoise(0.5, seed=1)
        >>> x = np.zeros((2, 3), "float32")
        >>> bool(keras.ops.all(noise(x) == x))  # inference: identity
        True
        >>> bool(keras.ops.any(noise(x, training=True) == x))  # training: noisy
        False

    Taught in chapter 4, "A layer that behaves differently in training".
    """

    def __init__(self, stddev: float, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stddev = check_real(stddev, "stddev", minimum=0, dtype=self.compute_dtype)
        self.seed = check_seed(seed, allow_none=True)
        self.seed_generator = keras.random.SeedGenerator(_generator_seed(self.seed))
        self.supports_masking = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Checked before Keras's __call__, which rewrites errors raised in ``call``.
        check_instance(
            kwargs.get("training"), "training", (bool, np.bool_, type(None)), "a bool or None"
        )
        return super().__call__(*args, **kwargs)

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        if not training or self.stddev == 0:
            return inputs
        noise = keras.random.normal(
            ops.shape(inputs),
            stddev=self.stddev,
            dtype=self.compute_dtype,
            seed=self.seed_generator,
        )
        return inputs + noise  # ops.add takes a (0, n) operand for a bias: "Biases must be 1D"

    def compute_output_shape(self, input_shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
        return tuple(input_shape)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(stddev=self.stddev, seed=self.seed)
        return config


@keras.saving.register_keras_serializable(package="companion")
class ResidualBlock(keras.layers.Layer):
    """A residual MLP block: ``Dense(hidden) -> activation -> Dense(units)`` plus a shortcut.

    The shortcut is the input itself when its width equals ``units``, otherwise a learned
    linear projection (a ``CustomDense`` without bias). The projection can only be decided
    once the input width is known, so ``build`` creates it and builds every sublayer with
    its exact input shape; the block's weights therefore exist right after ``build``.

    Args:
        units: Output width (a positive int).
        hidden_units: Width of the inner layer; defaults to ``units``.
        activation: Activation between the two dense layers (name, callable or None).
        kernel_initializer: Initializer for the kernels. Each sublayer gets its own instance
            (``fresh_initializer``), so their starting kernels differ, also when the
            initializer is seeded.
        kernel_regularizer: Optional regularizer for all kernels.
        **kwargs: Base-layer arguments (``name``, ``dtype``, ...). A ``dtype`` policy such as
            ``"mixed_float16"`` is also the sublayers' policy.

    Raises:
        TypeError: If ``units`` or ``hidden_units`` is not an int, or the activation,
            initializer or regularizer is of a type Keras cannot interpret.
        ValueError: If a width is not in ``[1, MAX_UNITS]`` or a name or config is unknown to Keras.

    Example:
        >>> import numpy as np
        >>> block = ResidualBlock(8, hidden_units=16)
        >>> tuple(block(np.ones((2, 4), "float32")).shape)
        (2, 8)
        >>> block.projection is not None   # 4 != 8: the shortcut is projected
        True

    Taught in chapter 4, "A layer made of layers: a residual block".
    """

    def __init__(
        self,
        units: int,
        hidden_units: int | None = None,
        activation: Any = "relu",
        kernel_initializer: Any = "glorot_uniform",
        kernel_regularizer: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.units = _check_units(units)
        self.hidden_units = (
            self.units if hidden_units is None else _check_units(hidden_units, "hidden_units")
        )
        self.activation = _keras_object(keras.activations, activation, "activation", _ACTIVATION)
        self.kernel_initializer = _initializer(kernel_initializer, "kernel_initializer")
        self.kernel_regularizer = _regularizer(kernel_regularizer, "kernel_regularizer")
        self.hidden = CustomDense(
            self.hidden_units, activation=self.activation, name="hidden", **self._dense_args(0)
        )
        self.output_dense = CustomDense(self.units, name="output", **self._dense_args(1))
        self.projection: CustomDense | None = None
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    def _dense_args(self, index: int) -> dict[str, Any]:
        """Initializer, regularizer and dtype arguments for sublayer ``index`` (its own
        initializer)."""
        return dict(
            kernel_initializer=fresh_initializer(self.kernel_initializer, index),
            kernel_regularizer=self.kernel_regularizer,
            # The block's own policy (``dtype="mixed_float16"``), not the global one: a sublayer
            # computing in float32 would meet a float16 shortcut in the sum.
            dtype=self.dtype_policy,
        )

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        input_shape = tuple(input_shape)
        self.hidden.build(input_shape)
        self.output_dense.build(input_shape[:-1] + (self.hidden_units,))
        if input_shape[-1] != self.units:
            self.projection = CustomDense(
                self.units, use_bias=False, name="projection", **self._dense_args(2)
            )
            self.projection.build(input_shape)

    def call(self, inputs: Any) -> Any:
        shortcut = inputs if self.projection is None else self.projection(inputs)
        # not ops.add: see AdditiveGaussianNoise
        return self.output_dense(self.hidden(inputs)) + shortcut

    def compute_output_shape(self, input_shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            units=self.units,
            hidden_units=self.hidden_units,
            activation=keras.activations.serialize(self.activation),
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
        )
        return config
