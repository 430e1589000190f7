"""Chapter 14's exercise checks: a correct answer passes, each likely mistake is named."""

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

    trainable, non_trainable, optimizer_variables, metric_variables = state
    x, y = data

    def loss_of(trainable):
        y_pred, new_non_trainable = self.stateless_call(trainable, non_trainable, x)
        return self.compute_loss(x, y, y_pred), (y_pred, new_non_trainable)

    (loss, (y_pred, non_trainable)), grads = jax.value_and_grad(loss_of, has_aux=True)(trainable)
    trainable, optimizer_variables = self.optimizer.stateless_apply(
        optimizer_variables, grads, trainable
    )
    logs, new_metric_variables = {}, []
    for metric in self.metrics:
        mine = metric_variables[len(new_metric_variables) :][: len(metric.variables)]
        if metric.name == "loss":
            mine = metric.stateless_update_state(mine, loss)
        else:
            mine = metric.stateless_update_state(mine, y, y_pred)
        logs[metric.name] = metric.stateless_result(mine)
        new_metric_variables += mine
    return logs, (trainable, non_trainable, optimizer_variables, new_metric_variables)


def step_without_state(self, state, data):
    import jax

    trainable, non_trainable, optimizer_variables, metric_variables = state
    x, y = data

    def loss_of(trainable):
        y_pred, _ = self.stateless_call(trainable, non_trainable, x)
        return self.compute_loss(x, y, y_pred)

    loss, grads = jax.value_and_grad(loss_of)(trainable)
    self.optimizer.stateless_apply(optimizer_variables, grads, trainable)
    return {"loss": loss}


def step_with_old_weights(self, state, data):
    import jax

    trainable, non_trainable, optimizer_variables, metric_variables = state
    x, y = data

    def loss_of(trainable):
        y_pred, _ = self.stateless_call(trainable, non_trainable, x)
        return self.compute_loss(x, y, y_pred)

    loss, grads = jax.value_and_grad(loss_of)(trainable)
    metric = self.metrics[0]
    mine = metric.stateless_update_state(metric_variables[: len(metric.variables)], loss)
    mine += metric_variables[len(metric.variables) :]
    logs = {"loss": metric.stateless_result(mine[: len(metric.variables)])}
    return logs, (trainable, non_trainable, optimizer_variables, mine)


def test_a_jax_step_that_returns_its_state(accepted, caught):
    accepted("14.2", train_step)
    caught("14.2", step_without_state, r"return \(logs, state\)")
    caught("14.2", step_with_old_weights, r"the loss never falls")
