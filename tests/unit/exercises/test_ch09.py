"""Chapter 9's exercise checks: a correct answer passes, each likely mistake is named."""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from companion.optimizers import AdamW, Lookahead


def first_step(optimizer, gradient):
    variable = keras.Variable(np.zeros(tuple(gradient.shape), "float32"))
    optimizer.apply_gradients([(gradient, variable)])
    return -variable.numpy()


def step_as_new_weight(optimizer, gradient):
    return -first_step(optimizer, gradient)


SHARED = keras.Variable(np.zeros(2, "float32"))


def step_from_a_shared_variable(optimizer, gradient):
    optimizer.apply_gradients([(gradient, SHARED)])
    return -SHARED.numpy()


def gradient_and_variable_apart(optimizer, gradient):
    variable = keras.Variable(np.zeros(tuple(gradient.shape), "float32"))
    optimizer.apply_gradients(gradient, variable)
    return -variable.numpy()


def test_epsilon_rescaled(accepted, caught):
    accepted("9.2", first_step)
    caught("9.2", step_as_new_weight, r"\[0.1, -0.2\].*return -variable")
    caught("9.2", step_from_a_shared_variable, r"two calls.*made inside the function")
    result = caught("9.2", gradient_and_variable_apart, r"the answer raised")
    assert result.checks == 4 and len(result.failures) == 4


class MomentumSGD(keras.optimizers.Optimizer):
    def __init__(self, learning_rate=0.01, momentum=0.9, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.momentum = momentum

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.velocities = [self.add_variable_from_reference(v, "velocity") for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        velocity = self.velocities[self._get_variable_index(variable)]
        self.assign(velocity, velocity * self.momentum - gradient * learning_rate)
        self.assign_add(variable, velocity)

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum}


class MovesBeforeVelocity(MomentumSGD):
    def update_step(self, gradient, variable, learning_rate):
        velocity = self.velocities[self._get_variable_index(variable)]
        self.assign_add(variable, velocity)
        self.assign(velocity, velocity * self.momentum - gradient * learning_rate)


class PlusGradient(MomentumSGD):
    def update_step(self, gradient, variable, learning_rate):
        super().update_step(-gradient, variable, learning_rate)


class MomentumNotInConfig(MomentumSGD):
    def get_config(self):
        return keras.optimizers.Optimizer.get_config(self)


class TwoSlotsEach(MomentumSGD):
    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.unused = self.add_optimizer_variables(variables, "unused")


class SlotsInUpdateStep(MomentumSGD):
    def build(self, variables):
        if self.built:
            return
        keras.optimizers.Optimizer.build(self, variables)
        self.by_name = {}

    def update_step(self, gradient, variable, learning_rate):
        if variable.name not in self.by_name:
            self.by_name[variable.name] = self.add_variable_from_reference(variable, "velocity")
        velocity = self.by_name[variable.name]
        self.assign(velocity, velocity * self.momentum - gradient * learning_rate)
        self.assign_add(variable, velocity)


class RateFromInit(MomentumSGD):
    def __init__(self, learning_rate=0.01, momentum=0.9, **kwargs):
        super().__init__(learning_rate=learning_rate, momentum=momentum, **kwargs)
        self.rate = learning_rate

    def update_step(self, gradient, variable, learning_rate):
        super().update_step(gradient, variable, self.rate)


class OldVelocityNegated(MomentumSGD):
    def update_step(self, gradient, variable, learning_rate):
        velocity = self.velocities[self._get_variable_index(variable)]
        self.assign(velocity, -velocity * self.momentum - gradient * learning_rate)
        self.assign_add(variable, velocity)


class SlotsSharedByShape(MomentumSGD):
    def build(self, variables):
        if self.built:
            return
        keras.optimizers.Optimizer.build(self, variables)
        by_shape = {}
        for v in variables:
            if tuple(v.shape) not in by_shape:
                by_shape[tuple(v.shape)] = self.add_variable_from_reference(v, "velocity")
        self.velocities = [by_shape[tuple(v.shape)] for v in variables]


def test_sgd_with_momentum(accepted, caught):
    accepted("9.1", MomentumSGD)
    caught("9.1", MovesBeforeVelocity, r"left the weights at 0.*before the velocity is updated")
    caught("9.1", PlusGradient, r"went uphill")
    caught("9.1", OldVelocityNegated, r"first step agrees.*\+momentum \* velocity")
    caught("9.1", MomentumNotInConfig, r"rebuilt from its config.*momentum in get_config")
    caught("9.1", TwoSlotsEach, r"expected 2 slots.*got \[")
    caught("9.1", SlotsInUpdateStep, r"got \[\] \(build made none: were they made in update_step")
    caught("9.1", RateFromInit, r"schedule as learning_rate, got TypeError \(multiply by the")
    caught("9.1", RateFromInit, r"kept the rate of 0.01")
    caught("9.1", SlotsSharedByShape, r"4 steps of fit.*its own slot")


def train_pruned(model, optimizer, pruning, batches):
    pruning.set_model(model)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = ops.mean((model(x)[:, 0] - y) ** 2)
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))

    for batch, (x, y) in enumerate(batches):
        step(x, y)
        pruning.on_train_batch_end(batch)


def prune_before_the_step(model, optimizer, pruning, batches):
    pruning.set_model(model)
    for batch, (x, y) in enumerate(batches):
        pruning.on_train_batch_end(batch)
        with tf.GradientTape() as tape:
            loss = ops.mean((model(x)[:, 0] - y) ** 2)
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))


def prune_without_training(model, optimizer, pruning, batches):
    pruning.set_model(model)
    for batch, _ in enumerate(batches):
        pruning.on_train_batch_end(batch)


def test_pruning_in_a_custom_loop(accepted, caught):
    accepted("9.3", train_pruned)
    caught("9.3", prune_before_the_step, r"exactly 0 after 10 steps.*after apply_gradients")
    caught("9.3", prune_without_training, r"fall.*apply_gradients")


def train_with_restart(model, dataset, path):
    model.fit(dataset, epochs=1, verbose=0, shuffle=False)
    model.save(path)
    loaded = keras.saving.load_model(path)
    loaded.fit(dataset, epochs=1, verbose=0, shuffle=False)
    return loaded


def compile_after_loading(model, dataset, path):
    model.fit(dataset, epochs=1, verbose=0, shuffle=False)
    model.save(path)
    loaded = keras.saving.load_model(path)
    loaded.compile(Lookahead(AdamW(0.05), sync_period=3), "mse")
    loaded.fit(dataset, epochs=1, verbose=0, shuffle=False)
    return loaded


def return_the_saved_model(model, dataset, path):
    train_with_restart(model, dataset, path)
    model.fit(dataset, epochs=1, verbose=0, shuffle=False)
    return model


def test_lookahead_resumes_exactly(accepted, caught):
    accepted("9.4", train_with_restart)
    caught("9.4", compile_after_loading, r"got 4 \(compiled again after loading")
    caught("9.4", compile_after_loading, r"difference of .*without a new compile")
    caught("9.4", return_the_saved_model, r"got the model that was saved")
