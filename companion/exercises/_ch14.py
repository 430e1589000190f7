"""Chapter 14, beyond TensorFlow: a custom gradient every backend calls, a JAX step that
trains an ordinary model (a regularizer, an add_loss term, Dropout, BatchNormalization, sample
weights) as Keras's own step does, and NumPy code registered as a PyTorch operator that
``torch.compile`` keeps in one graph with its gradient."""

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


#: How close the answer's step must come to Keras's: float32 rounding (measured 0.0 on a CPU:
#: the same operations in the same order).
WEIGHT_ATOL, LOG_RTOL = 1e-5, 1e-5
LOSS_AND_UPDATES = (
    "compute the loss with self.compute_loss_and_updates(..., training=True), which adds the "
    "regularizer's penalty and the add_loss terms, stateless"
)


def _error(error: Exception) -> str:
    first = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {first}"


def run_answer_source(source: str, namespace: dict) -> None:
    """Define the reader's function from ``source`` in ``namespace``, as the notebook did: under
    the reader's own ``__future__`` imports, not this module's (whose postponed annotations
    would turn ``x: torch.Tensor`` into a str that ``torch.library.custom_op`` rejects)."""
    exec(compile(source, "<answer>", "exec", dont_inherit=True), namespace)


def runs_against_fit(source: str) -> dict:
    """Run on JAX by exercise 14.2: ``ordinary_run`` (two epochs of ``fit``, then
    ``evaluate``) with the ``train_step`` defined in ``source``, and with Keras's own step:
    ``{"answer": run, "keras": run}``, or the answer's error as a str and no Keras run."""
    import keras

    from companion.backends._steps import ordinary_run

    namespace: dict = {}
    run_answer_source(source, namespace)
    answer_class = type("AnswerModel", (keras.Model,), {"train_step": namespace["train_step"]})
    try:
        answer = ordinary_run(answer_class)
    except Exception as error:  # noqa: BLE001 - reported to the reader by the check
        return {"answer": _error(error), "keras": None}
    return {"answer": answer, "keras": ordinary_run(keras.Model)}


def _in_child(answer, context, name: str, probe, backend: str):
    """``probe(source)`` run once under ``backend`` in a fresh process, ``source`` the reader's
    function defined under ``name`` (whatever the reader called it)."""

    def make():
        from companion.backends import run_on_backend

        source = textwrap.dedent(inspect.getsource(answer))
        if answer.__name__ != name:
            source += f"\n{name} = {answer.__name__}\n"
        return run_on_backend(probe, backend, source)

    return context.once(backend, make)


def _runs(answer, context):
    return _in_child(answer, context, "train_step", runs_against_fit, "jax")


def _answer_run(answer, context):
    runs = _runs(answer, context)
    expect(isinstance(runs["answer"], dict), "expected fit to run on JAX (see the check above)")
    return runs["answer"], runs["keras"]


def trains_on_jax(answer, context):
    """Under JAX, fit runs with this train_step(self, state, data)"""
    result = _runs(answer, context)["answer"]
    why = ""
    if isinstance(result, str) and "NoneType" in result:
        why = (
            f" ({LOSS_AND_UPDATES}: JAX's fit takes the variables' values out of the model, and "
            "self.compute_loss reads the regularizer's variables there)"
        )
    elif isinstance(result, str) and ("unpack" in result or "tuple" in result):
        why = " (return (logs, state): JAX's trainer takes the new variables from the step)"
    expect(isinstance(result, dict), f"expected fit to run on JAX, got {result}{why}")


def _weight(run, name):
    """The weight whose path ends with ``name`` (e.g. "moving_mean") in ``run``."""
    (index,) = [i for i, path in enumerate(run["paths"]) if path.endswith(name)]
    return np.array(run["weights"][index]), np.array(run["start"][index])


def trains_in_training_mode(answer, context):
    """BatchNormalization's moving statistics move as in Keras's step (training=True)"""
    ours, keras_run = _answer_run(answer, context)
    mean, start = _weight(ours, "moving_mean")
    expected, _ = _weight(keras_run, "moving_mean")
    expect(
        not np.array_equal(mean, start),
        "expected BatchNormalization's moving mean to move, got its initial values after two "
        "epochs: run the model with training=True (Dropout and BatchNormalization train only "
        "then)",
    )
    expect(
        np.allclose(mean, expected, rtol=0, atol=WEIGHT_ATOL),
        f"expected the moving mean of Keras's step, got a gap of "
        f"{np.max(np.abs(mean - expected)):.3g}",
    )


def _log_gap(ours, theirs):
    return float(np.max(np.abs(np.divide(ours, theirs) - 1)))


def loss_like_fit(answer, context):
    """Its epoch losses equal those of Keras's step (the penalties included)"""
    ours, keras_run = _answer_run(answer, context)
    expected = np.array(keras_run["history"]["loss"])
    got = np.array(ours["history"].get("loss", [np.nan] * len(expected)))
    why = ""
    if np.allclose(got, got[0]):
        why = " (the loss never falls: return the new trainable and optimizer variables)"
    elif np.all(got < expected):
        why = (
            " (below Keras's: the loss lacks the L2 regularizer's penalty or the add_loss KL "
            f"term: {LOSS_AND_UPDATES})"
        )
    expect(
        np.allclose(got, expected, rtol=LOG_RTOL, atol=0),
        f"expected the losses {np.round(expected, 4).tolist()}, got "
        f"{np.round(got, 4).tolist()}{why}",
    )


def metrics_like_fit(answer, context):
    """Its mae and weighted_mae equal Keras's (sample weights reach the weighted one only)"""
    ours, keras_run = _answer_run(answer, context)
    for name in ["mae", "weighted_mae"]:
        expected = np.array(keras_run["history"][name])
        got = np.array(ours["history"].get(name, [np.nan] * len(expected)))
        expect(
            np.allclose(got, expected, rtol=LOG_RTOL, atol=0),
            f"expected the {name} of Keras's step, {np.round(expected, 4).tolist()}, got "
            f"{np.round(got, 4).tolist()} (update the metrics with self.compute_metrics(x, y, "
            "y_pred, sample_weight) in a keras.StatelessScope)",
        )


def weights_like_fit(answer, context):
    """Every weight ends within float32 rounding of Keras's step's"""
    ours, keras_run = _answer_run(answer, context)
    gaps = [
        float(np.max(np.abs(np.subtract(a, b))))
        for a, b in zip(ours["weights"], keras_run["weights"])
    ]
    worst = int(np.argmax(gaps))
    expect(
        gaps[worst] <= WEIGHT_ATOL,
        f"expected every weight within {WEIGHT_ATOL:g} of Keras's step's, got "
        f"{keras_run['paths'][worst]} {gaps[worst]:.3g} away",
    )


#: Exercise 14.3's inputs (none near 0, where the cube root's slope is infinite), the
#: upstream weights of its loss ``sum(cube_root(2 x) * w)`` and that loss's gradient.
CUBE_INPUTS = np.array([-4.0, 0.0625, 0.5, 13.5], "float32")
CUBE_WEIGHTS = np.array([1.0, -2.0, 0.5, 3.0], "float32")
CUBE_GRADIENT = 2 * CUBE_WEIGHTS / (3 * np.cbrt(2 * CUBE_INPUTS) ** 2)


def cube_root_report(source: str) -> dict:
    """Run on PyTorch by exercise 14.3: call ``register_cube_root()`` from ``source``, then
    ``torch.ops.exercise.cube_root`` eagerly, under ``torch.compile(fullgraph=True)`` without a
    gradient, and with one. Each stage's result, or its error as a str, under its name; a
    stage after a failed one is left out."""
    import torch

    namespace: dict = {}
    run_answer_source(source, namespace)
    try:
        namespace["register_cube_root"]()
        cube_root = torch.ops.exercise.cube_root
    except Exception as error:  # noqa: BLE001 - reported to the reader by the check
        return {"registered": _error(error)}
    report: dict = {"registered": True}
    weights = torch.from_numpy(CUBE_WEIGHTS)

    def loss(t):
        return (cube_root(2 * t) * weights).sum()

    stages = {
        "value": lambda: cube_root(torch.from_numpy(CUBE_INPUTS)).tolist(),
        "compiled": lambda: float(
            torch.compile(loss, fullgraph=True, backend="aot_eager")(torch.from_numpy(CUBE_INPUTS))
        ),
    }
    for name, stage in stages.items():
        try:
            report[name] = stage()
        except Exception as error:  # noqa: BLE001 - reported to the reader by the check
            report[name] = _error(error)
            return report
    t = torch.tensor(CUBE_INPUTS, requires_grad=True)
    try:
        total = torch.compile(loss, fullgraph=True, backend="aot_eager")(t)
        report["requires_grad"] = total.requires_grad
        if total.requires_grad:
            total.backward()
            report["gradient"] = t.grad.tolist()
    except Exception as error:  # noqa: BLE001 - reported to the reader by the check
        report["gradient"] = _error(error)
    return report


def _cube_report(answer, context):
    return _in_child(answer, context, "register_cube_root", cube_root_report, "torch")


def _cube_stage(answer, context, name, needs):
    report = _cube_report(answer, context)
    expect(name in report, f"expected {needs} first (see the check above)")
    return report[name]


def registers_the_operator(answer, context):
    """register_cube_root() registers torch.ops.exercise.cube_root"""
    registered = _cube_report(answer, context)["registered"]
    expect(
        registered is True,
        "expected register_cube_root() to register the operator exercise::cube_root, with "
        f'@torch.library.custom_op("exercise::cube_root", mutates_args=()), got {registered}',
    )


def value_is_numpys(answer, context):
    """torch.ops.exercise.cube_root(x) equals np.cbrt(x)"""
    value = _cube_stage(answer, context, "value", "the operator registered")
    expect(not isinstance(value, str), f"expected the operator to run on a tensor, got {value}")
    expected = np.cbrt(CUBE_INPUTS)
    expect(
        np.allclose(value, expected, rtol=1e-6, atol=0),
        f"expected np.cbrt(x) = {expected.tolist()}, got {value}",
    )


def one_graph_under_compile(answer, context):
    """torch.compile(fullgraph=True) traces a loss that calls it"""
    compiled = _cube_stage(answer, context, "compiled", "the operator to run eagerly")
    expect(
        not isinstance(compiled, str),
        f"expected torch.compile(fullgraph=True) to trace the loss, got {compiled} (Dynamo "
        "runs the operator on fake tensors, which carry only a shape and a dtype: register "
        "one with @cube_root.register_fake, returning torch.empty_like(x))",
    )


def gradient_through_compile(answer, context):
    """The compiled loss's gradient is upstream * 2 / (3 cbrt(2x)^2)"""
    report = _cube_report(answer, context)
    expect(
        "compiled" in report and not isinstance(report["compiled"], str),
        "expected the loss to compile first (see the checks above)",
    )
    expect(
        report.get("requires_grad", True),
        "expected the loss to require a gradient, got a result cut off from its input: "
        "the operator's output has no gradient until register_autograd gives it one",
    )
    gradient = report["gradient"]
    expect(
        not isinstance(gradient, str),
        f"expected backward() to run, got {gradient} (give the operator its gradient with "
        "cube_root.register_autograd(backward, setup_context=setup_context))",
    )
    expect(
        np.allclose(gradient, CUBE_GRADIENT, rtol=1e-5, atol=0),
        f"expected the gradient {np.round(CUBE_GRADIENT, 4).tolist()}, got "
        f"{np.round(gradient, 4).tolist()} (d cbrt(x)/dx = 1 / (3 cbrt(x)^2), times the "
        "upstream gradient)",
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
        (trains_on_jax, trains_in_training_mode, loss_like_fit, metrics_like_fit, weights_like_fit),
        (
            "On JAX the variables live outside the model: the step gets them in state and "
            "must hand back the new ones with the logs. The loss must be stateless too: a "
            "regularizer reads the weights, and inside the step they are in state.",
            "Take the gradient of self.compute_loss_and_updates with jax.value_and_grad "
            "(has_aux=True, training=True); apply it with self.optimizer.stateless_apply; "
            "update the metrics in a keras.StatelessScope over self.metrics_variables: the "
            "metric named loss with the loss, then self.compute_metrics; return the logs and "
            "the four lists of variables.",
        ),
    ),
    Exercise(
        "14.3",
        "NumPy code as a PyTorch operator.",
        FUNCTION,
        (
            registers_the_operator,
            value_is_numpys,
            one_graph_under_compile,
            gradient_through_compile,
        ),
        (
            "torch.library.custom_op turns a Python function with type annotations into an "
            "operator that torch.compile calls without looking inside. Dynamo traces with fake "
            "tensors, so the operator needs a fake implementation; and autograd needs its "
            "gradient.",
            "Decorate cube_root(x: torch.Tensor) -> torch.Tensor with "
            '@torch.library.custom_op("exercise::cube_root", mutates_args=()) and compute it '
            "with np.cbrt(x.numpy(force=True)); register_fake returns torch.empty_like(x); "
            "setup_context saves the output, and backward returns upstream / (3 * y**2).",
        ),
    ),
)
