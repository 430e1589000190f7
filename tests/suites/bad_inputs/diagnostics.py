"""Bad inputs for ``companion.diagnostics``: a layer (a Dense built on width 3) and batches it
accepts. Arguments are checked before any saving or tracing; an input the layer cannot take is
named after the one call that shows it (cheap for a Dense)."""

import keras
import numpy as np
from helpers.badinput import Bool, Callable_, Case, Instance, Int, Kind, Real

from companion import diagnostics

EXEMPT = {"RoundtripReport": "the result of check_roundtrip, built by it (a dataclass)"}


def _dense() -> keras.layers.Dense:
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    return layer


DENSE = _dense()
X = np.ones((2, 3), "float32")
Y = np.zeros((2, 2), "float32")
NAN_X = np.full((2, 3), np.nan, "float32")
LAYER = Instance(keras.layers.Layer, what="a Keras layer or model")


def _batch(width: int, *, minimum: int = 1, finite: bool = True, extra_bad: tuple = ()) -> Kind:
    """Arrays of shape (n, width), n >= minimum (finite ones when ``finite``)."""
    return Kind(
        f"an array of shape (n >= {minimum}, {width})",
        lambda v: (
            isinstance(v, np.ndarray)
            and v.dtype.kind in "fi"
            and v.ndim == 2
            and v.shape[0] >= minimum
            and v.shape[1] == width
            and (not finite or np.isfinite(v).all())
        ),
        extra_bad=(
            np.ones((2, width + 1), "float32"),
            {"x": np.ones((2, width), "float32")},
            np.array([["a"] * width] * 2),
            *extra_bad,
        ),
    )


INPUTS = _batch(3, extra_bad=(NAN_X,))
TARGETS = _batch(
    2,
    minimum=2,  # exactly 2 rows, the batch of X: (3, 2) is bad
    extra_bad=(
        np.full((2, 2), np.inf, "float32"),
        np.zeros((3, 2), "float32"),
        np.zeros(2, "float32"),  # the loss would broadcast these against the (2, 2) output
        np.zeros((2, 1), "float32"),
    ),
)
SAMPLE = _batch(3, finite=False).or_none()  # NaN in a sample is data to compare, not an error


def _retraced() -> diagnostics.TraceCounter:
    counter = diagnostics.count_traces(lambda x, factor: x * factor)
    counter(np.ones(2, "float32"), 1.0)
    counter(np.ones(2, "float32"), 2.0)
    return counter


CASES = [
    Case(
        "check_roundtrip",
        diagnostics.check_roundtrip,
        {"obj": DENSE, "sample_input": X, "fresh_process": False, "atol": 1e-6, "timeout": 60.0},
        {
            "obj": Instance(keras.layers.Layer, keras.optimizers.Optimizer),
            "sample_input": SAMPLE,
            "fresh_process": Bool(),
            "atol": Real(0),
            "timeout": Real(above=0, maximum=9e9),
        },
    ),
    Case(
        "check_variable_batch",
        diagnostics.check_variable_batch,
        {"layer": DENSE, "sample_input": X},
        {
            "layer": Callable_(),
            "sample_input": _batch(3, minimum=2, finite=False, extra_bad=(X[:1],)),
        },
    ),
    Case(
        "first_nonfinite",
        diagnostics.first_nonfinite,
        {"model": DENSE, "inputs": X, "training": False},
        {"model": LAYER, "inputs": INPUTS, "training": Bool()},
    ),
    Case(
        "gradient_norms",
        diagnostics.gradient_norms,
        {
            "model": DENSE,
            "inputs": X,
            "targets": Y,
            "loss": keras.losses.MeanSquaredError(),
            "training": True,
        },
        {
            "model": LAYER,
            "inputs": INPUTS,
            "targets": TARGETS,
            "loss": Callable_(),
            "training": Bool(),
        },
    ),
    Case(
        "first_nonfinite_gradient",
        diagnostics.first_nonfinite_gradient,
        {
            "model": DENSE,
            "inputs": X,
            "targets": Y,
            "loss": keras.losses.MeanSquaredError(),
            "training": True,
        },
        {
            "model": LAYER,
            "inputs": INPUTS,
            "targets": TARGETS,
            "loss": Callable_(),
            "training": Bool(),
        },
    ),
    Case(
        "count_traces",
        lambda fn: diagnostics.count_traces(fn),
        {"fn": None},
        {"fn": Kind("a callable or None", lambda v: v is None or callable(v))},
    ),
    Case("TraceCounter", diagnostics.TraceCounter, {"fn": abs}, {"fn": Callable_()}),
    Case(
        "explain_retrace",
        diagnostics.explain_retrace,
        {"counter": _retraced(), "trace": 1},
        {
            "counter": Instance(diagnostics.TraceCounter),
            # two traces: only the second (1 or -1) is a retrace
            "trace": Kind("1 or -1", lambda v: Int(-1, 1).accepts(v) and v != 0, (2, -2)),
        },
    ),
]
