"""companion/diagnostics/_tracing.py: count_traces and explain_retrace."""

import numpy as np
import pytest
import tensorflow as tf

from companion.diagnostics import (
    count_traces,
    explain_retrace,
)

X = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")


# ---------------------------------------------------------------- tracing


def test_count_traces_counts_a_retrace_per_python_value():
    scale = count_traces(lambda x, factor: x * factor)
    for factor in (1.0, 2.0, 2.0, 3.0):
        scale(tf.ones((2, 3)), factor)
    assert scale.traces == scale.function.experimental_get_tracing_count() == 3
    assert scale.signatures == [f"x=float32[2, 3], factor={f}" for f in (1.0, 2.0, 3.0)]
    for factor in (1.0, 2.0, 3.0):
        scale(tf.ones((2, 3)), tf.constant(factor))
    assert scale.traces == 4 and scale.signatures[-1] == "x=float32[2, 3], factor=float32[]"


def test_input_signature_and_reduce_retracing_fix_shape_retracing():
    shapes = [(2, 3), (4, 3), (5, 3), (7, 3)]

    @count_traces
    def plain(x):
        return tf.reduce_sum(x)

    @count_traces(reduce_retracing=True)
    def relaxed(x):
        return tf.reduce_sum(x)

    @count_traces(input_signature=[tf.TensorSpec((None, 3), tf.float32)])
    def signed(x):
        return tf.reduce_sum(x)

    for shape in shapes:
        for fn in (plain, relaxed, signed):
            assert float(fn(tf.ones(shape))) == shape[0] * shape[1]
    assert (plain.traces, relaxed.traces, signed.traces) == (4, 2, 1)
    assert relaxed.signatures == ["x=float32[2, 3]", "x=float32[None, 3]"]
    assert signed.signatures == ["x=float32[None, 3]"]
    assert relaxed.traces == relaxed.function.experimental_get_tracing_count()


def test_explain_retrace_names_a_new_shape_dtype_and_python_value():
    scale = count_traces(lambda x, factor: x * factor)
    calls = [
        (tf.ones((2, 3)), 1.0),
        (tf.ones((4, 3)), 1.0),  # a new shape
        (tf.ones((2, 3), tf.float64), 1.0),  # a new dtype
        (tf.ones((2, 3)), 2.5),  # a new Python float
        (tf.ones((2, 3)), 2.5),  # the same call: no trace
        (tf.ones((2, 3)), tf.constant(2.5)),  # a tensor where a Python value was
    ]
    for x, factor in calls:
        scale(x, factor)
    assert scale.traces == 5
    assert [explain_retrace(scale, i) for i in range(1, 5)] == [
        "trace 2 of 5, against trace 1: x: shape [2, 3] -> [4, 3]",
        "trace 3 of 5, against trace 1: x: dtype float32 -> float64",
        "trace 4 of 5, against trace 1: factor: Python value 1.0 -> 2.5",
        "trace 5 of 5, against trace 4: factor: Python value 2.5 -> tensor float32[]",
    ]
    assert explain_retrace(scale) == explain_retrace(scale, 4) == explain_retrace(scale, -1)


def test_explain_retrace_names_nested_arguments_and_several_changes():
    @count_traces
    def step(batch, training):
        return tf.reduce_sum(batch["image"]) * (2.0 if training else 1.0)

    step({"image": tf.ones((2, 3))}, True)
    step({"image": tf.ones((2, 4), tf.float16), "label": tf.ones(2)}, False)
    assert explain_retrace(step) == (
        "trace 2 of 2, against trace 1: batch['image']: dtype float32 -> float16, "
        "shape [2, 3] -> [2, 4]; training: Python value True -> False; "
        "batch['label'] is new"
    )


def test_explain_retrace_with_reduce_retracing_names_the_relaxed_shape():
    relaxed = count_traces(tf.reduce_sum, reduce_retracing=True)
    for rows in (2, 3, 4):
        relaxed(tf.ones((rows, 3)))
    assert relaxed.traces == 2
    assert explain_retrace(relaxed).endswith("shape [2, 3] -> [None, 3]")


def test_explain_retrace_bad_input():
    scale = count_traces(lambda x: x * 2.0)
    scale(tf.ones(3))
    with pytest.raises(ValueError, match="trace: expected the index of a retrace .* got int 0"):
        explain_retrace(scale, 0)
    with pytest.raises(ValueError, match="trace: expected the index of a retrace"):
        explain_retrace(scale)  # one trace: -1 is the first
    scale(tf.ones(4))
    with pytest.raises(ValueError, match="trace: expected an int >= -2 and <= 1, got int 2"):
        explain_retrace(scale, 2)
    with pytest.raises(TypeError, match="trace: expected an int"):
        explain_retrace(scale, 1.0)
    with pytest.raises(TypeError, match="counter: expected a TraceCounter"):
        explain_retrace(scale.function)


def test_count_traces_bad_input():
    with pytest.raises(TypeError, match="fn: expected a callable, got int 3"):
        count_traces(3)
