"""Chapter 1, ops, layers and models: a convolution's ops, a layer's second call, retracing,
one trace for every batch size."""

from __future__ import annotations

import numbers

import numpy as np

from companion.exercises._framework import MAPPING, Exercise, Kind, expect, keras_instance

TF_FUNCTION = Kind(
    "a tf.function (what tf.function(fn, ...) returns)",
    lambda answer: (
        hasattr(answer, "experimental_get_tracing_count") and hasattr(answer, "python_function")
    ),
)
OP_NAMES = Kind(
    "a list, tuple or set of op names (each a str, such as 'MatMul')",
    lambda answer: (
        isinstance(answer, (list, tuple, set, frozenset))
        and all(isinstance(name, str) for name in answer)
    ),
)


def _conv_ops(context):
    """The op names ``traced_ops`` finds for ``Conv2D(4, 3)`` on a ``(None, 8, 8, 3)`` input."""
    import keras
    import tensorflow as tf

    from companion.introspection import traced_ops

    def make():
        return set(traced_ops(keras.layers.Conv2D(4, 3), tf.TensorSpec([None, 8, 8, 3])))

    return context.once("conv_ops", make)


def has_conv2d(answer, context):
    """Conv2D, the convolution itself, is among the ops"""
    names = set(answer)
    lower = {name.lower() for name in names}
    if "Conv2D" not in names and "conv2d" in lower:
        expect(
            False, f"expected the op type 'Conv2D', got {sorted(names)} (op types are CamelCase)"
        )
    expect(
        "Conv2D" in names,
        f"expected 'Conv2D' among the ops, got {sorted(names)} (a convolution is one op of its "
        "own, Conv2D, not a MatMul)",
    )


def has_bias_add(answer, context):
    """BiasAdd, the bias, is among the ops"""
    expect(
        "BiasAdd" in set(answer),
        f"expected 'BiasAdd' among the ops, got {sorted(set(answer))} (Conv2D has "
        "use_bias=True by default, and the bias is added by an op of its own)",
    )


def only_traced_ops(answer, context):
    """Every name is an op the traced graph holds (traced_ops of the layer)"""
    traced = _conv_ops(context)
    extra = sorted(set(answer) - traced)
    activations = [name for name in extra if name in {"Relu", "Sigmoid", "Tanh", "Softmax"}]
    expect(
        not activations,
        f"expected no activation op, got {activations} (Conv2D's default activation is None)",
    )
    expect(
        not extra,
        f"expected only ops of the traced graph {sorted(traced)}, got {extra} too "
        "(run traced_ops(layer, tf.TensorSpec([None, 8, 8, 3])) to see them)",
    )


def _built(answer):
    """The answer's weights, after checking that it is built (what the exercise's calls did)."""
    expect(
        answer.built and len(answer.weights) > 0,
        "expected a built layer with its weights, got an unbuilt one with none (pass fresh "
        "from above, after calling it)",
    )
    return list(answer.weights)


def kernel_without_batch(answer, context):
    """fresh is built with kernel (5, 3) and bias (3,): features by units, no batch size"""
    weights = _built(answer)
    shapes = [tuple(weight.shape) for weight in weights]
    expect(
        shapes == [(5, 3), (3,)],
        f"expected the kernel (5, 3) and the bias (3,) of fresh, got {shapes} (7 rows means "
        "an input of shape (7, 5): the batch is axis 0, the 5 features axis -1)",
    )


def no_new_weights(answer, context):
    """More calls, with 7, 2 and 13 rows, create no new weights"""
    import tensorflow as tf

    before = [id(weight) for weight in _built(answer)]
    features = int(answer.weights[0].shape[0])
    for rows in (7, 2, 13):
        out = answer(tf.ones([rows, features]))
        expect(
            tuple(out.shape)[0] == rows,
            f"expected {rows} output rows for {rows} input rows, got shape {tuple(out.shape)}",
        )
        after = [id(weight) for weight in answer.weights]
        expect(
            after == before,
            f"expected the same {len(before)} weights after a call with {rows} rows, got "
            f"{len(after)} others (a layer makes its weights once, in build)",
        )


def _count(answer, key):
    expect(
        isinstance(answer.get(key), numbers.Integral) and not isinstance(answer.get(key), bool),
        f"expected an int at key {key!r} (the dict needs keys 'python_floats' and 'tensors'), "
        f"got {answer.get(key)!r}",
    )
    return int(answer[key])


def _measured_traces(context):
    """The traces a fresh ``tf.function`` adds for three Python floats, then three tensors."""
    import tensorflow as tf

    def make():
        step = tf.function(lambda x: x * 2.0)
        for value in (1.0, 2.0, 3.0):
            step(value)
        floats = step.experimental_get_tracing_count()
        for value in (1.0, 2.0, 3.0):
            step(tf.constant(value))
        return floats, step.experimental_get_tracing_count() - floats

    return context.once("traces", make)


def python_float_traces(answer, context):
    """python_floats: each new Python float retraces (one trace per value)"""
    got = _count(answer, "python_floats")
    expected, _ = _measured_traces(context)
    expect(
        got == expected,
        f"expected {expected} traces for the floats 1.0, 2.0 and 3.0, got {got}"
        + (
            " (a Python float is part of the trace's signature: each new value retraces; "
            "did you pass tensors?)"
            if got < expected
            else ""
        ),
    )


def tensor_traces(answer, context):
    """tensors: three float32 scalar tensors add one trace, then reuse it"""
    got = _count(answer, "tensors")
    floats, expected = _measured_traces(context)
    hints = {
        0: " (graph_step had already traced a float32 scalar above, so it reused that trace: "
        "count on a fresh tf.function)",
        floats + expected: " (that is the running total: count only the traces the tensor "
        "calls added)",
        3: " (tensors of one dtype and shape share a trace, whatever their values)",
    }
    expect(
        got == expected,
        f"expected {expected} trace added by the tensors 1.0, 2.0 and 3.0, got {got}"
        + hints.get(got, ""),
    )


#: Batch sizes the reader has not used, each a new input shape.
NEW_BATCHES = (3, 77, 1000)
FEATURES = 64


def _batches_traced(answer, context):
    """The traces that batches of 3, 77 and 1000 rows add, and the outputs, or the error."""
    import tensorflow as tf

    def make():
        before = answer.experimental_get_tracing_count()
        outputs = []
        for rows in NEW_BATCHES:
            batch = tf.random.stateless_normal([rows, FEATURES], seed=[1, rows])
            try:
                outputs.append((batch, answer(batch)))
            except (TypeError, ValueError) as error:
                expect(
                    False,
                    f"expected a batch of {rows} rows to be accepted, got {type(error).__name__} "
                    "(is the batch axis of the input_signature fixed? write None for it: "
                    f"tf.TensorSpec([None, {FEATURES}]))",
                )
        return answer.experimental_get_tracing_count() - before, outputs

    return context.once("batches", make)


def one_trace_for_new_batches(answer, context):
    """Batches of 3, 77 and 1000 rows add at most one trace"""
    added, _ = _batches_traced(answer, context)
    why = (
        " (one per batch size: tf.function traces every new input shape, unless an "
        "input_signature with None as the batch axis says that any batch fits)"
        if added >= len(NEW_BATCHES)
        else " (an exact trace first, then a relaxed one, as reduce_retracing does; an "
        "input_signature with None as the batch axis gives one trace from the start)"
    )
    expect(
        added <= 1,
        f"expected at most 1 new trace for batches of 3, 77 and 1000 rows, got {added}{why}",
    )


def same_outputs_as_eager(answer, context):
    """Its outputs are the wrapped model's, run eagerly (10 per row)"""
    _, outputs = _batches_traced(answer, context)
    for batch, out in outputs:
        expected = np.asarray(answer.python_function(batch))
        got = np.asarray(out)
        expect(
            got.shape == (batch.shape[0], 10),
            f"expected outputs of shape ({batch.shape[0]}, 10) (mlp's 10 units), got "
            f"{got.shape} (wrap mlp itself)",
        )
        expect(
            np.allclose(got, expected, rtol=1e-4, atol=1e-5),
            f"expected the eager outputs within 1e-5, got a largest difference of "
            f"{float(np.max(np.abs(got - expected))):.3g}",
        )


EXERCISES = (
    Exercise(
        "1.1",
        "Ops of a convolution.",
        OP_NAMES,
        (has_conv2d, has_bias_add, only_traced_ops),
        (
            "Think of what a Dense layer lowered to (a matrix product, then the bias), and "
            "what a convolution replaces.",
            "traced_ops(keras.layers.Conv2D(4, 3), tf.TensorSpec([None, 8, 8, 3])) lists "
            "them; pass that list (or your prediction) to check.",
        ),
    ),
    Exercise(
        "1.2",
        "A second call.",
        keras_instance("layers.Layer"),
        (kernel_without_batch, no_new_weights),
        (
            "A batch of 7 rows of the same 5 features is tf.ones([7, 5]): only axis 0 changes.",
            "build ran once, on the first call, and sized the kernel from the last axis "
            "(features by units): compare fresh.weights before and after the call.",
        ),
    ),
    Exercise(
        "1.3",
        "Retracing.",
        MAPPING,
        (python_float_traces, tensor_traces),
        (
            "experimental_get_tracing_count() is a running total: read it after the floats "
            "and again after the tensors, and subtract.",
            "Start from a fresh tf.function (graph_step has already traced a float32 scalar); "
            "a Python float is part of the signature, a tensor only by dtype and shape.",
        ),
    ),
    Exercise(
        "1.4",
        "One trace for every batch size.",
        TF_FUNCTION,
        (one_trace_for_new_batches, same_outputs_as_eager),
        (
            "A tf.function keys its traces by the shapes and dtypes of its inputs: every new "
            "batch size is a new shape. An input_signature fixes the trace's inputs in advance.",
            "Pass input_signature=[tf.TensorSpec([None, 64], tf.float32)] to tf.function: None "
            "for the batch axis, 64 for mlp's features. One trace then serves every batch.",
        ),
    ),
)
