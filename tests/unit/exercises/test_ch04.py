"""Chapter 4's exercise checks: a correct answer passes, each likely mistake is named."""

import re

import keras

from companion.layers import CustomDense, ResidualBlock


class ConstrainedDense(CustomDense):
    def __init__(self, units, kernel_constraint=None, **kwargs):
        super().__init__(units, **kwargs)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)

    def build(self, input_shape):
        self.kernel = self.add_weight(
            shape=(input_shape[-1], self.units),
            initializer=self.kernel_initializer,
            constraint=self.kernel_constraint,
            name="kernel",
        )
        self.bias = self.add_weight(shape=(self.units,), initializer="zeros", name="bias")

    def get_config(self):
        config = super().get_config()
        return {**config, "kernel_constraint": keras.constraints.serialize(self.kernel_constraint)}


class ConstraintNotPassed(ConstrainedDense):
    def build(self, input_shape):
        CustomDense.build(self, input_shape)


class ConstraintNotSerialized(ConstrainedDense):
    def get_config(self):
        return CustomDense.get_config(self)


def test_a_kernel_constraint(accepted, caught):
    accepted("4.1", ConstrainedDense)
    caught("4.1", ConstraintNotPassed, r"entry >= 0 after fit.*add_weight\(constraint")
    caught("4.1", ConstraintNotSerialized, r"NonNeg after reloading, got NoneType")


class InvertedDropout(keras.layers.Layer):
    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate, self.seed = float(rate), seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, inputs, training=None):
        if not training:
            return inputs
        keep = keras.random.uniform(keras.ops.shape(inputs), seed=self.seed_generator) >= self.rate
        return keras.ops.where(keep, inputs / (1.0 - self.rate), 0.0)

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}


class DropsAtInference(InvertedDropout):
    def call(self, inputs, training=None):
        return super().call(inputs, training=True)


class ScaledByRate(InvertedDropout):
    def call(self, inputs, training=None):
        out = super().call(inputs, training)
        return out * (1.0 - self.rate) * self.rate if training else out


class RateNotInConfig(InvertedDropout):
    def get_config(self):
        return keras.layers.Layer.get_config(self)

    @classmethod
    def from_config(cls, config):
        return cls(0.5, **config)


def test_inverted_dropout(accepted, caught):
    accepted("4.2", InvertedDropout)
    caught("4.2", DropsAtInference, r"input unchanged with training=None")
    caught("4.2", ScaledByRate, r"survivors of 1 / \(1 - 0.3\).*not by rate")
    caught("4.2", RateNotInConfig, r"rate 0.3 after from_config\(get_config\(\)\), got 0.5")


# The fresh process of 4.3 imports this module (its folder is on the parent's path) to find them.
@keras.saving.register_keras_serializable(package="test_ch04")
class RBF(keras.layers.Layer):
    def __init__(self, units, gamma=1.0, **kwargs):
        super().__init__(**kwargs)
        self.units, self.gamma = units, gamma

    def build(self, input_shape):
        self.centers = self.add_weight(shape=(input_shape[-1], self.units), name="centers")

    def call(self, inputs):
        difference = keras.ops.expand_dims(inputs, -1) - self.centers
        return keras.ops.exp(-self.gamma * keras.ops.sum(difference**2, axis=1))

    def get_config(self):
        return {**super().get_config(), "units": self.units, "gamma": self.gamma}


class RBFNotRegistered(RBF):
    pass


@keras.saving.register_keras_serializable(package="test_ch04")
class RBFGammaNotInConfig(RBF):
    def get_config(self):
        return {**keras.layers.Layer.get_config(self), "units": self.units}


@keras.saving.register_keras_serializable(package="test_ch04")
class RBFWeightsInInit(RBF):
    def __init__(self, units, gamma=1.0, input_dim=4, **kwargs):
        super().__init__(units, gamma, **kwargs)
        self.centers = self.add_weight(shape=(input_dim, units), name="centers")

    def build(self, input_shape):
        pass


@keras.saving.register_keras_serializable(package="test_ch04")
class RBFWeightsInCall(RBF):
    def build(self, input_shape):
        pass

    def call(self, inputs):
        self.centers = self.add_weight(shape=(inputs.shape[-1], self.units), name="centers")
        return super().call(inputs)


#: As a class written in a notebook cell: registered, but in ``__main__``.
RBFInMain = keras.saving.register_keras_serializable(package="test_ch04")(
    type("RBFInMain", (RBF,), {"__module__": "__main__"})
)


def test_a_layer_that_survives_a_fresh_process_reload(accepted, caught):
    accepted("4.3", RBF)
    caught("4.3", RBFNotRegistered, r"unregistered.*register_keras_serializable")
    module = re.escape(RBFNotRegistered.__module__)  # test_ch04, or tests.exercises.test_ch04
    caught("4.3", RBFNotRegistered, rf"fresh process that imports {module}, got .*RBFNotReg")
    caught("4.3", RBFGammaNotInConfig, r"default gamma=1\.0: is gamma in get_config")
    caught("4.3", RBFGammaNotInConfig, r"max \|difference\| .*gamma too, in get_config")
    caught("4.3", RBFWeightsInInit, r"no weights before .* got 1 \(created in __init__")
    caught("4.3", RBFWeightsInCall, r"got none \(created in call")
    caught("4.3", RBFInMain, r"defined in the notebook itself \(__main__")


class NormResidualBlock(ResidualBlock):
    def __init__(self, units, norm=True, **kwargs):
        super().__init__(units, **kwargs)
        self.norm = bool(norm)
        self.layer_norm = keras.layers.LayerNormalization() if self.norm else None

    def build(self, input_shape):
        super().build(input_shape)
        if self.layer_norm is not None:
            self.layer_norm.build(input_shape)

    def call(self, inputs):
        shortcut = inputs if self.projection is None else self.projection(inputs)
        normed = inputs if self.layer_norm is None else self.layer_norm(inputs)
        return self.output_dense(self.hidden(normed)) + shortcut

    def get_config(self):
        return {**super().get_config(), "norm": self.norm}


class NormsTheShortcutToo(NormResidualBlock):
    def call(self, inputs):
        return super().call(self.layer_norm(inputs))


class NormNotBuilt(NormResidualBlock):
    def build(self, input_shape):
        ResidualBlock.build(self, input_shape)


class NormNotInConfig(NormResidualBlock):
    def get_config(self):
        return {**ResidualBlock.get_config(self)}

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "norm": False})


def test_a_normalised_residual_block(accepted, caught):
    accepted("4.4", NormResidualBlock)
    caught("4.4", NormsTheShortcutToo, r"shortcut left unnormalised")
    caught("4.4", NormNotBuilt, r"expected 7 weights after build.*built in build")
    caught("4.4", NormNotInConfig, r"norm=True after from_config")
