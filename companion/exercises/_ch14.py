"""Chapter 14, beyond TensorFlow: a custom gradient every backend calls, a JAX step that
returns its state."""

from __future__ import annotations

import inspect
import textwrap

import numpy as np

from companion.exercises._framework import FUNCTION, Exercise, expect

_X = np.array([-2.0, 0.0, 3.0], "float32")
_SIGMOID = 1 / (1 + np.exp(-_X))
_UPSTREAM = np.array([1.0, 2.0, -1.0], "float32")


def _forward(answer):
    """``answer(x)``: the value and the ``grad`` function, as ``keras.ops.custom_gradient``
    wants them."""
    result = answer(_X)
    expect(
        isinstance(result, tuple) and len(result) == 2 and callable(result[1]),
        "expected (value, grad) from the function, the pair keras.ops.custom_gradient wants, "
        f"got {type(result).__name__}",
    )
    return result


def _near(got, what):
    from keras import ops

    got = ops.convert_to_numpy(got)
    error = float(np.max(np.abs(got - _UPSTREAM * _SIGMOID)))
    expect(error < 1e-6, f"expected upstream * sigmoid(x) from {what}, got {got} ({error:.3g})")


def value_is_softplus(answer, context):
    """The value is log(1 + e^x)"""
    from keras import ops

    value = ops.convert_to_numpy(_forward(answer)[0])
    expect(
        np.allclose(value, np.log1p(np.exp(_X)), atol=1e-6),
        f"expected log(1 + e^x) = {np.log1p(np.exp(_X))}, got {value}",
    )


def tensorflow_and_jax_call(answer, context):
    """grad(upstream), as TensorFlow and JAX call it, gives upstream * sigmoid(x)"""
    _near(_forward(answer)[1](_UPSTREAM), "grad(upstream)")


def torch_call(answer, context):
    """grad(x, upstream=upstream), as PyTorch calls it, gives upstream * sigmoid(x)"""
    grad = _forward(answer)[1]
    try:
        got = grad(_X, upstream=_UPSTREAM)
    except TypeError as error:
        expect(
            False,
            f"expected grad to take PyTorch's call grad(*inputs, upstream=...), got TypeError: "
            f"{error} (write def grad(*args, upstream=None) and take args[0] when upstream is "
            "None)",
        )
    _near(got, "grad(x, upstream=upstream)")


def step_losses_with(source: str) -> object:
    """Train ``StepModel`` with the ``train_step`` defined in ``source`` for 5 epochs (run on
    JAX by exercise 14.2): its epoch losses, or the error it raised as a str."""
    from companion.backends import StepModel
    from companion.backends._steps import initial_weights, step_data

    namespace: dict = {}
    exec(source, namespace)  # the reader's own function, in the reader's own process
    model = type("AnswerModel", (StepModel,), {"train_step": namespace["train_step"]})()
    model(np.zeros((1, 4), "float32"))
    model.set_weights(initial_weights())
    import keras

    model.compile(keras.optimizers.Adam(0.01), "mse")
    x, y = step_data()
    try:
        history = model.fit(x, y, batch_size=16, epochs=5, shuffle=False, verbose=0)
    except Exception as error:  # noqa: BLE001 - reported to the reader by the check
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return {name: [float(v) for v in values] for name, values in history.history.items()}


def _jax_run(answer, context):
    def make():
        from companion.backends import run_on_backend

        source = textwrap.dedent(inspect.getsource(answer))
        if answer.__name__ != "train_step":
            source += f"\ntrain_step = {answer.__name__}\n"
        return run_on_backend(step_losses_with, "jax", source)

    return context.once("jax", make)


def trains_on_jax(answer, context):
    """Under JAX, fit runs with this train_step(self, state, data)"""
    result = _jax_run(answer, context)
    why = ""
    if isinstance(result, str) and ("unpack" in result or "tuple" in result):
        why = " (return (logs, state): JAX's trainer takes the new variables from the step)"
    expect(isinstance(result, dict), f"expected fit to run on JAX, got {result}{why}")


def losses_like_fit(answer, context):
    """Its epoch losses equal those of Keras's own step within 1e-5 (relative)"""
    from companion.backends import step_losses

    result = _jax_run(answer, context)
    expect(isinstance(result, dict), "expected fit to run on JAX (see the check above)")
    expected = np.array(step_losses(custom_step=False))
    got = np.array(result.get("loss", [np.nan] * len(expected)))
    why = ""
    if np.allclose(got, got[0]):
        why = " (the loss never falls: return the new trainable and optimizer variables)"
    expect(
        np.allclose(got, expected, rtol=1e-5),
        f"expected the losses {np.round(expected, 4).tolist()}, got "
        f"{np.round(got, 4).tolist()}{why}",
    )


EXERCISES = (
    Exercise(
        "14.1",
        "A custom gradient every backend calls.",
        FUNCTION,
        (value_is_softplus, tensorflow_and_jax_call, torch_call),
        (
            "TensorFlow and JAX call the gradient function with the upstream gradient alone; "
            "PyTorch passes the saved inputs first and the upstream gradient by keyword.",
            "Give grad any positional arguments and a keyword upstream that defaults to None. "
            "When upstream is None, the upstream gradient is the first positional argument; "
            "either way, multiply it by ops.sigmoid(x).",
        ),
    ),
    Exercise(
        "14.2",
        "A JAX step that returns its state.",
        FUNCTION,
        (trains_on_jax, losses_like_fit),
        (
            "On JAX the variables live outside the model: the step gets them in state and "
            "must hand back the new ones with the logs.",
            "Unpack state into trainable, non-trainable, optimizer and metric variables; use "
            "stateless_call, jax.value_and_grad, optimizer.stateless_apply and "
            "metric.stateless_update_state; return logs, (trainable, non_trainable, "
            "optimizer_variables, metric_variables).",
        ),
    ),
)
