"""The appendix's exercise checks: a correct answer passes, each likely mistake is named."""

import keras
import tensorflow as tf


class PortedStep(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


class Keras2Step(keras.Model):  # Keras 2's train_step, as written: the shims
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        self.compiled_metrics.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


class AsTheWarningSays(PortedStep):  # the shim's advice: every metric gets (y, y_pred)
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        for metric in self.metrics:
            metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


class PenaltyTwice(PortedStep):  # Keras 2's regularization_losses, added to compute_loss
    def compute_loss(self, *args, **kwargs):
        return super().compute_loss(*args, **kwargs) + sum(self.losses)


class PenaltyMissing(PortedStep):
    def compute_loss(self, x=None, y=None, y_pred=None, **kwargs):
        return keras.ops.mean(keras.losses.mean_squared_error(y, y_pred))


class LossNeverLogged(PortedStep):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        for metric in self.metrics:
            if metric.name != "loss":
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


class NoLogs(PortedStep):
    def train_step(self, data):
        super().train_step(data)


def test_port_a_keras2_train_step(accepted, caught):
    accepted("A.1", PortedStep)
    result = caught("A.1", Keras2Step, r"no deprecation warning, got 2.*compiled_loss")
    assert [f.check for f in result.failures] == [
        "The logged loss equals fit's own in both epochs (rtol 1e-5)",
        "fit gives no warning about Keras 2's compiled_loss or compiled_metrics",
    ]
    caught("A.1", AsTheWarningSays, r"'loss' is a Mean of the loss values.*update_state\(loss\)")
    caught("A.1", PenaltyTwice, r"L2 penalty counted twice.*do not add self.losses")
    caught("A.1", PenaltyMissing, r"L2 penalty is missing")
    caught("A.1", LossNeverLogged, r"nothing was added to loss")
    caught("A.1", NoLogs, r"return the logs, a dict, got None")


class AdamWState(keras.optimizers.Optimizer):
    def __init__(
        self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, decoupled_decay=0.01
    ):
        super().__init__(learning_rate=learning_rate, name="CustomAdamW")
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.decoupled_decay = decoupled_decay

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._m, self._v = self.add_optimizer_variables(var_list, ["m", "v"])


class PortedAdamW(AdamWState):  # the article's algebra
    def update_step(self, gradient, variable, learning_rate):
        lr = keras.ops.cast(learning_rate, variable.dtype)
        index = self._get_variable_index(variable)
        m, v = self._m[index], self._v[index]
        self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * gradient)
        self.assign(v, self.beta_2 * v + (1.0 - self.beta_2) * keras.ops.square(gradient))
        t = keras.ops.cast(self.iterations + 1, variable.dtype)
        m_hat = m / (1.0 - keras.ops.power(self.beta_1, t))
        v_hat = v / (1.0 - keras.ops.power(self.beta_2, t))
        step = lr * m_hat / (keras.ops.sqrt(v_hat) + self.epsilon)
        self.assign_sub(variable, step + lr * self.decoupled_decay * variable)


class KerasAlgebraAdamW(PortedAdamW):
    decay_first = True

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = keras.ops.cast(learning_rate, dtype)
        t = keras.ops.cast(self.iterations + 1, dtype)
        beta_1_power = keras.ops.power(keras.ops.cast(self.beta_1, dtype), t)
        beta_2_power = keras.ops.power(keras.ops.cast(self.beta_2, dtype), t)
        index = self._get_variable_index(variable)
        m, v = self._m[index], self._v[index]
        if self.decay_first:
            self.assign_sub(variable, variable * self.decoupled_decay * lr)
        alpha = lr * keras.ops.sqrt(1 - beta_2_power) / (1 - beta_1_power)
        self.assign_add(m, (gradient - m) * (1 - self.beta_1))
        self.assign_add(v, (keras.ops.square(gradient) - v) * (1 - self.beta_2))
        self.assign_sub(variable, (m * alpha) / (keras.ops.sqrt(v) + self.epsilon))
        if not self.decay_first:
            self.assign_sub(variable, variable * self.decoupled_decay * lr)


class DecayAfterTheStep(KerasAlgebraAdamW):
    decay_first = False


class FixedEpsilon(KerasAlgebraAdamW):
    def __init__(self, learning_rate=0.001, epsilon=1e-7, decoupled_decay=0.01):
        super().__init__(learning_rate, epsilon=1e-3, decoupled_decay=decoupled_decay)


def test_match_adamw(accepted, caught):
    accepted("A.3", KerasAlgebraAdamW)
    caught("A.3", PortedAdamW, r"within 1e-6 of keras.optimizers.AdamW.*m_hat and v_hat")
    caught("A.3", DecayAfterTheStep, r"decay applied after the step")
    caught("A.3", FixedEpsilon, r"epsilon 0.1.*self.epsilon and self.decoupled_decay, not fixed")


class ClippedAdam(keras.optimizers.Adam):
    def __init__(self, clip_norm=1.0, **kwargs):
        super().__init__(**kwargs)
        self.clip_norm = clip_norm

    def apply_gradients(self, grads_and_vars):
        grads, variables = zip(*grads_and_vars)
        clipped, _ = tf.clip_by_global_norm(list(grads), self.clip_norm)
        return super().apply_gradients(zip(clipped, variables))

    def get_config(self):
        return {**super().get_config(), "clip_norm": self.clip_norm}


class GetGradientsClippedAdam(ClippedAdam):  # the Keras 2 override: never called
    def apply_gradients(self, grads_and_vars):
        return keras.optimizers.Adam.apply_gradients(self, grads_and_vars)

    def get_gradients(self, loss, params):
        return [tf.clip_by_norm(g, self.clip_norm) for g in super().get_gradients(loss, params)]


class PerTensorClippedAdam(ClippedAdam):
    def apply_gradients(self, grads_and_vars):
        pairs = [(tf.clip_by_norm(g, self.clip_norm), v) for g, v in grads_and_vars]
        return keras.optimizers.Adam.apply_gradients(self, pairs)


class ClipNormNotInConfig(ClippedAdam):
    def get_config(self):
        return keras.optimizers.Adam.get_config(self)


class UnzipsWrong(ClippedAdam):  # a broken answer: reported, not raised
    def apply_gradients(self, grads_and_vars):
        grads, variables = grads_and_vars
        return super().apply_gradients(zip(grads, variables))


def test_port_clipped_adam(accepted, caught):
    accepted("A.2", ClippedAdam)
    caught("A.2", GetGradientsClippedAdam, r"follows plain Adam.*never calls get_gradients")
    caught("A.2", PerTensorClippedAdam, r"each gradient.*clip_by_global_norm")
    caught("A.2", ClipNormNotInConfig, r"clip_norm 0.5 in get_config\(\), got no clip_norm")
    caught("A.2", UnzipsWrong, r"the answer raised")
