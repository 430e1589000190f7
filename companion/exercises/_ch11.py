"""Chapter 11, pitfalls: a config that forgets, counted traces, NaN-free standardizing, retraces."""

from __future__ import annotations

import numpy as np

from companion.exercises._framework import (
    FUNCTION,
    LAYER_CLASS,
    MAPPING,
    Exercise,
    expect,
)


def _temperature_report(answer, context):
    """``check_roundtrip`` (in this process) on ``answer(4.0)`` and the layer's outputs."""

    def make():
        from companion.diagnostics import check_roundtrip

        layer = answer(4.0, name="temperature")
        x = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")
        return layer, x, check_roundtrip(layer, x, fresh_process=False)

    return context.once("report", make)


def divides_by_temperature(answer, context):
    """The layer divides its input by temperature"""
    layer, x, _ = _temperature_report(answer, context)
    got = np.asarray(layer(x))
    expect(
        np.allclose(got, x / 4.0, atol=1e-6),
        f"expected TemperatureScale(4.0)(x) == x / 4, got a max |difference| of "
        f"{float(np.max(np.abs(got - x / 4.0))):.3g}",
    )


def roundtrip_clean(answer, context):
    """check_roundtrip finds no problem: temperature is in get_config"""
    _, _, report = _temperature_report(answer, context)
    problems = "; ".join(report.problems)
    why = " (does get_config add 'temperature' to the base layer's keys?)"
    expect(
        report.ok,
        "expected check_roundtrip to find no problem, got: "
        + problems
        + (why if "'temperature'" in problems else ""),
    )


def _step_calls(answer, context):
    """The reader's ``fixed`` run on a counting ``train_step`` and the chapter's batches."""

    def make():
        import tensorflow as tf

        runs = tf.Variable(0)
        total = tf.Variable(0.0)

        def train_step(batch, epoch):
            runs.assign_add(1)
            value = tf.reduce_sum(batch) * tf.cast(epoch, tf.float32)
            total.assign_add(value)
            return value

        batches = [tf.ones((size, 3)) for size in (32, 32, 32, 4)]
        counter = answer["fixed"](train_step, batches)
        return counter, int(runs.numpy()), float(total.numpy())

    return context.once("fixed", make)


def _tracing_count(function):
    """The traces of a ``tf.function`` (or of a ``count_traces`` counter), or ``None``."""
    from companion.diagnostics import TraceCounter

    if isinstance(function, TraceCounter):
        return function.traces
    counting = getattr(function, "experimental_get_tracing_count", None)
    return counting() if callable(counting) else None


def prediction_right(answer, context):
    """The prediction equals the traces tf.function makes as written"""
    import tensorflow as tf

    def train_step(batch, epoch):
        return tf.reduce_sum(batch) * tf.cast(epoch, tf.float32)

    as_written = tf.function(train_step)
    for epoch in range(3):
        for size in (32, 32, 32, 4):
            as_written(tf.ones((size, 3)), epoch)
    traces = as_written.experimental_get_tracing_count()
    predicted = answer.get("predicted")
    expect(
        predicted == traces,
        f"expected predicted == {traces} (what experimental_get_tracing_count() counts for the "
        f"12 calls as written), got {predicted!r} (each new Python int epoch is a new trace, "
        "and in each epoch the batch of 4 rows is a new shape)",
    )


def traces_once(answer, context):
    """fixed(train_step, batches) returns the tf.function, traced once"""
    from companion.diagnostics import TraceCounter, explain_retrace

    function, _, _ = _step_calls(answer, context)
    traces = _tracing_count(function)
    expect(
        traces is not None,
        "expected fixed to return its tf.function (or its count_traces counter), got "
        f"{type(function).__name__}",
    )
    if isinstance(function, TraceCounter):
        why = f" ({explain_retrace(function, 1)})" if traces > 1 else ""
    elif getattr(function, "input_signature", None) is None:
        why = (
            " (without an input_signature, each new Python epoch and each new batch shape "
            "traces again)"
        )
    else:
        why = ""
    expect(
        traces == 1,
        f"expected 1 trace for the 12 calls, got {traces} traces{why} (a tensor epoch, and an "
        "input_signature whose batch dimension is None)",
    )


def every_call_runs(answer, context):
    """The step runs 12 times, with each epoch's value"""
    _, runs, total = _step_calls(answer, context)
    expect(runs == 12, f"expected 12 runs of the step (3 epochs x 4 batches), got {runs}")
    expected = (0 + 1 + 2) * 3 * (32 + 32 + 32 + 4)
    expect(
        abs(total - expected) < 1e-3,
        f"expected the steps' results to sum to {expected} (epochs 0, 1, 2), got {total:g} "
        "(is the epoch passed as tf.constant(epoch)?)",
    )


def _constant_feature_batch():
    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    x[:, 1] = 5.0
    return x


def _fixed_layer(answer):
    """The fixed layer of a ``{"op": ..., "layer": ...}`` answer."""
    import keras

    layer = answer.get("layer")
    expect(
        isinstance(layer, keras.layers.Layer),
        f"expected answer['layer'] to be the fixed layer (an instance), got {type(layer).__name__}",
    )
    return layer


#: The op type ``(x - mean) / std`` divides with, as TensorFlow names it (``keras.ops.divide``,
#: ``tf.divide`` and ``/`` on float tensors all create it); ``Div`` is its older spelling.
_DIVISIONS = ("RealDiv", "Div")


def names_the_op(answer, context):
    """The op is the one enable_check_numerics names"""
    op = answer.get("op")
    text = str(op)
    if text.lower() in ("truediv", "div_no_nan") or "/" in text:
        why = " (that is a node's name; the op's type is in quotes after 'graph op')"
    elif text.lower() in ("standardize", "classifier", "dense"):
        why = " (that is a layer; enable_check_numerics names the op inside it)"
    elif text in ("Sqrt", "Mean", "Sub", "SquaredDifference"):
        why = (
            " (the std of a constant feature is 0, a finite number: the NaN comes from the "
            "op that divides by it)"
        )
    else:
        why = ""
    expect(
        op in _DIVISIONS,
        f"expected the op type enable_check_numerics names for the first NaN, got {op!r}{why}",
    )


def no_layer_blamed(answer, context):
    """first_nonfinite blames no layer when a feature is constant"""
    import keras

    from companion.diagnostics import first_nonfinite

    layer = _fixed_layer(answer)
    x = _constant_feature_batch()
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((3,)), layer, keras.layers.Dense(2, name="dense")], name="classifier"
    )
    blamed = first_nonfinite(model, x)
    expect(
        blamed is None,
        f"expected no non-finite output, got first_nonfinite -> {blamed!r} (the constant "
        "feature's std is 0, and 0 / 0 is NaN: keep the denominator away from zero)",
    )


def still_standardizes(answer, context):
    """The other features still come out with mean 0 and std 1 (within 1e-2)"""
    layer = _fixed_layer(answer)
    x = _constant_feature_batch()
    out = np.asarray(layer(x), "float64")
    expect(out.shape == x.shape, f"expected an output of shape {x.shape}, got {out.shape}")
    columns = [0, 2]
    mean, std = out[:, columns].mean(0), out[:, columns].std(0)
    expect(
        np.all(np.abs(mean) < 1e-2) and np.all(np.abs(std - 1) < 1e-2),
        f"expected features 0 and 2 with mean 0 and std 1, got means {np.round(mean, 3)} and "
        f"stds {np.round(std, 3)} (over the batch, axis=0, and a small epsilon such as 1e-6)",
    )


def _normalize_calls(answer, context):
    """The reader's ``fixed`` run on a recording ``normalize`` and the exercise's three calls."""

    def make():
        import tensorflow as tf

        runs = tf.Variable(0)
        total = tf.Variable(0.0, dtype=tf.float64)

        def normalize(batch, scale):
            runs.assign_add(1)
            out = (batch - tf.reduce_mean(batch)) * scale
            total.assign_add(tf.reduce_sum(tf.square(tf.cast(out, tf.float64))))
            return out

        rng = np.random.default_rng(0)
        calls = [
            (rng.normal(size=(8, 3)).astype("float32"), 1.0),
            (rng.normal(size=(8, 3)).astype("float64"), 1.0),
            (rng.normal(size=(8, 3)).astype("float32"), 0.5),
        ]
        expected = sum(float(np.sum(((b - b.mean()) * s) ** 2)) for b, s in calls)
        counter = answer(normalize, calls)
        return counter, int(runs.numpy()), float(total.numpy()), expected

    return context.once("fixed", make)


def normalize_traces_once(answer, context):
    """fixed(normalize, calls) returns the counter, traced once"""
    from companion.diagnostics import TraceCounter, explain_retrace

    counter, _, _, _ = _normalize_calls(answer, context)
    expect(
        isinstance(counter, TraceCounter),
        f"expected fixed to return its count_traces counter, got {type(counter).__name__}",
    )
    why = f" ({explain_retrace(counter)})" if counter.traces > 1 else ""
    expect(
        counter.traces == 1,
        f"expected 1 trace for the 3 calls, got {counter.traces}{why} (pass the batch as "
        "float32 and the scale as a float32 tensor)",
    )


def same_results(answer, context):
    """Each call runs once and gives the same values as the calls as written"""
    _, runs, total, expected = _normalize_calls(answer, context)
    expect(runs == 3, f"expected 3 runs of normalize, got {runs}")
    expect(
        abs(total - expected) <= 1e-4 * expected,
        f"expected sum(output**2) over the calls of {expected:.4f}, got {total:.4f} "
        "(the same batches and scales, only their types changed)",
    )


EXERCISES = (
    Exercise(
        "11.1",
        "A config that forgets.",
        LAYER_CLASS,
        (divides_by_temperature, roundtrip_clean),
        (
            "Save a model holding the layer, load it with keras.saving.load_model and compare "
            "the outputs and the attributes; check_roundtrip(layer, x, fresh_process=False) "
            "names every constructor argument that get_config does not store.",
            "get_config returns super().get_config() with 'temperature' added; from_config "
            "then passes it back to __init__.",
        ),
    ),
    Exercise(
        "11.2",
        "Count the traces of a training step.",
        MAPPING,
        (prediction_right, traces_once, every_call_runs),
        (
            "A trace is keyed by each tensor's dtype and shape and by each Python argument's "
            "value. A tf.function's experimental_get_tracing_count() counts them.",
            "Make the epoch a tensor (tf.constant(epoch)) and give tf.function an "
            "input_signature: tf.TensorSpec((None, 3), tf.float32) and tf.TensorSpec((), "
            "tf.int32).",
        ),
    ),
    Exercise(
        "11.3",
        "Standardize without NaN.",
        MAPPING,
        (names_the_op, no_layer_blamed, still_standardizes),
        (
            "With tf.debugging.enable_check_numerics() on, the first NaN raises an error that "
            "names the op in quotes; switch it off after. What is the std of a feature that is "
            "the same in every row?",
            "The NaN comes from a division, 0 / 0. Divide by std + epsilon with a small epsilon "
            "(1e-6): a constant feature then gives 0 / epsilon = 0.",
        ),
    ),
    Exercise(
        "11.4",
        "Why did it trace again?",
        FUNCTION,
        (normalize_traces_once, same_results),
        (
            "explain_retrace(counter, trace) says which argument changed: a dtype, a shape or "
            "a Python value.",
            "In fixed, cast each batch with tf.cast(batch, tf.float32) and pass the scale as "
            "tf.constant(scale, tf.float32).",
        ),
    ),
)
