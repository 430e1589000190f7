"""Chapter 4's exercise checks: a correct answer passes, each likely mistake is named."""

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
    accepted("4.3", NormResidualBlock)
    caught("4.3", NormsTheShortcutToo, r"shortcut left unnormalised")
    caught("4.3", NormNotBuilt, r"expected 7 weights after build.*built in build")
    caught("4.3", NormNotInConfig, r"norm=True after from_config")
