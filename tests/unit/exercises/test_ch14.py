"""Chapter 14's exercise checks: a correct answer passes, each likely mistake is named."""

import pytest
from keras import ops


def log1p_exp(x):
    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        return upstream * ops.sigmoid(x)

    return ops.softplus(x), grad


def log1p_exp_for_tensorflow_only(x):
    def grad(upstream):
        return upstream * ops.sigmoid(x)

    return ops.softplus(x), grad


def log1p_exp_wrong_gradient(x):
    def grad(*args, upstream=None):
        upstream = args[0] if upstream is None else upstream
        return upstream * ops.sigmoid(-x)

    return ops.softplus(x), grad


def test_a_custom_gradient_every_backend_calls(accepted, caught):
    accepted("14.1", log1p_exp)
    caught("14.1", log1p_exp_for_tensorflow_only, r"def grad\(\*args, upstream=None\)")
    caught("14.1", log1p_exp_wrong_gradient, r"upstream \* sigmoid\(x\)")


def train_step(self, state, data):
    import jax
    import keras

    trainable, non_trainable, opt_vars, metric_vars = state
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    grad_fn = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)
    (_, (loss, y_pred, non_trainable, metric_vars)), grads = grad_fn(
        trainable, non_trainable, metric_vars, x, y, sample_weight,
        training=True, optimizer_variables=opt_vars,
    )  # fmt: skip
    trainable, opt_vars = self.optimizer.stateless_apply(opt_vars, grads, trainable)
    with keras.StatelessScope(list(zip(self.metrics_variables, metric_vars))) as scope:
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss, sample_weight=len(y))
        logs = self.compute_metrics(x, y, y_pred, sample_weight)
    metric_vars = [scope.get_current_value(v) for v in self.metrics_variables]
    return logs, (trainable, non_trainable, opt_vars, metric_vars)


def step_without_the_regularizer(self, state, data):
    import jax
    import keras

    trainable, non_trainable, opt_vars, metric_vars = state
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)

    def loss_of(trainable):  # the compiled loss alone: no L2 penalty, no add_loss term
        y_pred, new_non_trainable = self.stateless_call(trainable, non_trainable, x, training=True)
        loss = keras.losses.MeanSquaredError()(y, y_pred, sample_weight)
        return loss, (y_pred, new_non_trainable)

    (loss, (y_pred, non_trainable)), grads = jax.value_and_grad(loss_of, has_aux=True)(trainable)
    trainable, opt_vars = self.optimizer.stateless_apply(opt_vars, grads, trainable)
    with keras.StatelessScope(list(zip(self.metrics_variables, metric_vars))) as scope:
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss, sample_weight=len(y))
        logs = self.compute_metrics(x, y, y_pred, sample_weight)
    metric_vars = [scope.get_current_value(v) for v in self.metrics_variables]
    return logs, (trainable, non_trainable, opt_vars, metric_vars)


def step_in_inference_mode(self, state, data):
    import jax
    import keras

    trainable, non_trainable, opt_vars, metric_vars = state
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    grad_fn = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)
    (_, (loss, y_pred, non_trainable, metric_vars)), grads = grad_fn(
        trainable, non_trainable, metric_vars, x, y, sample_weight,
        training=False, optimizer_variables=opt_vars,
    )  # fmt: skip
    trainable, opt_vars = self.optimizer.stateless_apply(opt_vars, grads, trainable)
    with keras.StatelessScope(list(zip(self.metrics_variables, metric_vars))) as scope:
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss, sample_weight=len(y))
        logs = self.compute_metrics(x, y, y_pred, sample_weight)
    metric_vars = [scope.get_current_value(v) for v in self.metrics_variables]
    return logs, (trainable, non_trainable, opt_vars, metric_vars)


def step_with_a_stateful_loss(self, state, data):  # the chapter's first version
    import jax

    trainable, non_trainable, opt_vars, metric_vars = state
    x, y = data[:2]

    def loss_of(trainable):
        y_pred, new_non_trainable = self.stateless_call(trainable, non_trainable, x)
        return self.compute_loss(x, y, y_pred), (y_pred, new_non_trainable)

    (loss, (y_pred, non_trainable)), grads = jax.value_and_grad(loss_of, has_aux=True)(trainable)
    trainable, opt_vars = self.optimizer.stateless_apply(opt_vars, grads, trainable)
    return {"loss": loss}, (trainable, non_trainable, opt_vars, metric_vars)


def step_without_state(self, state, data):
    import jax

    trainable, non_trainable, optimizer_variables, metric_variables = state
    x, y = data[:2]

    def loss_of(trainable):
        y_pred, _ = self.stateless_call(trainable, non_trainable, x)
        return self.compute_loss(x, y, y_pred)

    loss, grads = jax.value_and_grad(loss_of)(trainable)
    self.optimizer.stateless_apply(optimizer_variables, grads, trainable)
    return {"loss": loss}


@pytest.mark.slow  # four JAX children, each training the ordinary model under fit
def test_a_jax_step_that_trains_an_ordinary_model(accepted, caught):
    accepted("14.2", train_step)
    caught("14.2", step_without_the_regularizer, r"regularizer's penalty")
    caught("14.2", step_in_inference_mode, r"training=True")
    caught("14.2", step_with_a_stateful_loss, r"NoneType.*compute_loss_and_updates")


def register_cube_root():
    import numpy as np
    import torch

    @torch.library.custom_op("exercise::cube_root", mutates_args=())
    def cube_root(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.cbrt(x.numpy(force=True))).to(x.device)

    @cube_root.register_fake
    def _(x):
        return torch.empty_like(x)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    def backward(ctx, upstream):
        (y,) = ctx.saved_tensors
        return upstream / (3 * y**2)

    cube_root.register_autograd(backward, setup_context=setup_context)


def a_plain_function():  # NumPy through Dynamo, but no operator: nothing is registered
    import numpy as np
    import torch

    return lambda x: torch.from_numpy(np.cbrt(x.numpy(force=True)))


def an_operator_without_a_fake():
    import numpy as np
    import torch

    @torch.library.custom_op("exercise::cube_root", mutates_args=())
    def cube_root(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.cbrt(x.numpy(force=True))).to(x.device)


def an_operator_without_a_gradient():
    import numpy as np
    import torch

    @torch.library.custom_op("exercise::cube_root", mutates_args=())
    def cube_root(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.cbrt(x.numpy(force=True))).to(x.device)

    cube_root.register_fake(lambda x: torch.empty_like(x))


def an_operator_with_the_gradient_at_the_input():  # 1 / (3 x^2): the cube's, not the root's
    import numpy as np
    import torch

    @torch.library.custom_op("exercise::cube_root", mutates_args=())
    def cube_root(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.cbrt(x.numpy(force=True))).to(x.device)

    cube_root.register_fake(lambda x: torch.empty_like(x))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    cube_root.register_autograd(
        lambda ctx, upstream: upstream / (3 * ctx.saved_tensors[0] ** 2),
        setup_context=setup_context,
    )


@pytest.mark.slow  # five PyTorch children, each compiling a loss
def test_numpy_code_as_a_pytorch_operator(accepted, caught):
    accepted("14.3", register_cube_root)
    caught("14.3", a_plain_function, r"custom_op\(\"exercise::cube_root\"")
    caught("14.3", an_operator_without_a_fake, r"register_fake")
    caught("14.3", an_operator_without_a_gradient, r"register_autograd")
    caught("14.3", an_operator_with_the_gradient_at_the_input, r"1 / \(3 cbrt\(x\)\^2\)")
