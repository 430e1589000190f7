"""Chapter 12, GPU benchmarks: a first call and the steady ones, a third blur, the blur's own cost
in the model, the GPU picture."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

import numpy as np

from companion._checks import describe
from companion.exercises._framework import FUNCTION, MAPPING, Exercise, expect

_CPU = "/CPU:0"


def _images():
    return np.random.default_rng(0).random((2, 16, 16, 3), dtype=np.float32)


def _positive_finite(value):
    return isinstance(value, (int, float, np.floating)) and math.isfinite(value) and value > 0


#: How long the stand-ins below take: tracing, a result's wait, a call's own work (seconds).
TRACE_SECONDS, PENDING_SECONDS, BUSY_SECONDS = 0.3, 0.02, 0.005


def _spin(seconds):
    """Busy-wait ``seconds`` (a loop, not a sleep: it holds the CPU as work does)."""
    start = time.perf_counter()
    while time.perf_counter() < start + seconds:
        pass


def _timed(answer, call, repeats):
    """``answer(call, repeats=repeats)``: two positive, finite numbers of seconds."""
    got = answer(call, repeats=repeats)
    expect(
        isinstance(got, (tuple, list)) and len(got) == 2,
        f"expected a pair (first, steady) of seconds, got {describe(got)}",
    )
    bad = [value for value in got if not _positive_finite(value)]
    expect(not bad, f"expected two positive, finite numbers of seconds, got {tuple(got)}")
    return float(got[0]), float(got[1])


def first_call_apart(answer, context):
    """The first call, which traces the tf.function, is timed apart from the steady calls"""
    import tensorflow as tf

    @tf.function
    def traced(x):
        time.sleep(TRACE_SECONDS)  # Python code runs while tracing only
        return x + 1.0

    x = tf.constant(1.0)
    first, steady = _timed(answer, lambda: traced(x), repeats=2)
    expect(
        first >= TRACE_SECONDS,
        f"expected the first call to take at least the {TRACE_SECONDS} s of tracing, got "
        f"{first:.3g} s (time the very first call of call(), before any other)",
    )
    expect(
        steady < TRACE_SECONDS / 3,
        f"expected the steady median well below the {TRACE_SECONDS} s of tracing, got "
        f"{steady:.3g} s (the first call is among the timed ones: time it apart, then "
        "`repeats` more calls)",
    )


class _Pending:
    """A result as a GPU call returns it: at once, before the work is done. ``.numpy()`` (or
    ``np.asarray``) waits for the work, here a busy loop of ``PENDING_SECONDS``."""

    def numpy(self):
        _spin(PENDING_SECONDS)
        return np.float32(0.0)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.numpy(), dtype)


def waits_for_the_result(answer, context):
    """Each timed call waits for its result (.numpy()) before the clock stops"""
    first, steady = _timed(answer, _Pending, repeats=3)
    for name, seconds in (("first", first), ("steady", steady)):
        expect(
            seconds >= PENDING_SECONDS,
            f"expected the {name} time to include the {PENDING_SECONDS} s the result takes to "
            f"be ready, got {seconds:.3g} s (call .numpy() on what call() returns before "
            "stopping the clock: a GPU call returns before its work is done)",
        )


def seconds_per_call(answer, context):
    """The steady time is the median seconds of one call, not a total and not ms"""
    import tensorflow as tf

    spun = []

    def busy():
        start = time.perf_counter()
        _spin(BUSY_SECONDS)
        spun.append(time.perf_counter() - start)
        return tf.constant(0.0)

    _, steady = _timed(answer, busy, repeats=5)
    own = float(np.median(spun[1:] or spun))  # a load can stretch the loop: its own time
    why = ""
    if steady > 100 * own:
        why = " (in seconds, not ms)"
    elif steady > 2 * own:
        why = " (the time of one call: the median of the calls, not their sum)"
    expect(
        0.999 * own <= steady <= 2 * own,
        f"expected about {own:.3g} s, the median of a call that spins {BUSY_SECONDS} s, got "
        f"{steady:.3g} s{why}",
    )


def keeps_defaults_adds_numpy_function(answer, context):
    """The methods are py_function, native and numpy_function, in that order"""
    names = list(answer)
    expect(
        names == ["py_function", "native", "numpy_function"],
        f"expected the keys ['py_function', 'native', 'numpy_function'], got {names} (add "
        "to default_blur_methods(): {**default_blur_methods(), 'numpy_function': ...})",
    )


def every_method_blurs(answer, context):
    """Each method blurs like native_blur (within 1e-5)"""
    import tensorflow as tf

    from companion.pyfunc import native_blur

    images = _images()
    with tf.device(_CPU):  # no TF32 convolutions
        expected = np.asarray(native_blur(tf.constant(images)))
    for name, method in answer.items():
        expect(callable(method), f"expected {name!r} to be a blur function, got {method!r}")
        with tf.device(_CPU):
            got = np.asarray(tf.function(method)(tf.constant(images)))
        error = float(np.max(np.abs(got - expected))) if got.shape == expected.shape else math.inf
        expect(
            error < 1e-5,
            f"expected {name!r} within 1e-5 of native_blur, got a max |difference| of "
            f"{error:.3g} (pass the function itself, companion.pyfunc.numpy_function_blur)",
        )


def blur_op_measures_them(answer, context):
    """blur_op runs them at two sizes: native's ratio is 1, the others' positive and finite"""
    from companion.bench import blur_op

    rows = blur_op(answer, image_sizes=[8, 16], batch_size=2, device=_CPU, repeats=1)
    for row in rows:
        expect(
            row["ratio"].get("native") == 1.0, f"expected native's ratio 1.0, got {row['ratio']}"
        )
        bad = {name: r for name, r in row["ratio"].items() if not _positive_finite(r)}
        expect(not bad, f"expected positive, finite ratios, got {bad}")


_ROW = {  # a blur-in-model row, in seconds
    "name": "blur in model",
    "medians": {"py_function": 0.0125, "native": 0.0075, "no blur": 0.005},
}


def no_blur_is_identity(answer, context):
    """methods holds py_function, native and "no blur", which returns its input"""
    import tensorflow as tf

    methods = answer.get("methods", {})
    expect(
        set(methods) == {"py_function", "native", "no blur"},
        f"expected methods with keys py_function, native and 'no blur', got {sorted(methods)}",
    )
    images = _images()
    got = np.asarray(tf.function(methods["no blur"])(tf.constant(images)))
    expect(
        got.shape == images.shape and np.array_equal(got, images),
        "expected 'no blur' to return its input unchanged (tf.identity), got other values",
    )


def own_cost_subtracts(answer, context):
    """own_cost(row) is each blur's median minus the no-blur median, in seconds"""
    own = answer["own_cost"](_ROW)
    expect(
        isinstance(own, dict) and set(own) == {"py_function", "native"},
        f"expected a dict with keys py_function and native (not 'no blur'), got {own!r}",
    )
    expected = {"py_function": 0.0075, "native": 0.0025}
    for name, value in expected.items():
        got = own[name]
        why = ""
        if math.isclose(got, value * 1e3):
            why = " (in seconds, the rows' unit, not ms)"
        elif math.isclose(got, -value):
            why = " (the blur's median minus the no-blur one, not the other way round)"
        elif math.isclose(got, _ROW["medians"][name] / _ROW["medians"]["no blur"]):
            why = " (a difference, not a ratio)"
        expect(
            math.isclose(got, value, rel_tol=1e-9),
            f"expected {name}: {_ROW['medians'][name]} - 0.005 = {value} s, got {got!r}{why}",
        )


def own_cost_of_a_measured_row(answer, context):
    """On a row blur_in_model measures with your methods, own_cost gives finite numbers"""
    from companion.bench import blur_in_model

    rows = blur_in_model(answer["methods"], image_sizes=[8], batch_size=2, device=_CPU, repeats=1)
    own = answer["own_cost"](rows[0])
    bad = {name: v for name, v in own.items() if not math.isfinite(v)}
    expect(set(own) == {"py_function", "native"} and not bad, f"expected finite costs, got {own}")


def model_row_on_the_device(answer, context):
    """model_row("/CPU:0", 16) is a blur-in-model row for that device and size"""
    row = context.once("row", lambda: answer(_CPU, 16))
    expect(
        isinstance(row, Mapping) and row.get("name") == "blur in model",
        f"expected one row of blur_in_model (named 'blur in model'), got "
        f"{type(row).__name__} {row.get('name') if isinstance(row, Mapping) else ''}",
    )
    expect(
        row["device"] == _CPU,
        f"expected the row's device {_CPU}, got {row['device']} (pass device= to blur_in_model)",
    )
    expect(
        row["sizes"].get("image_size") == 16,
        f"expected image size 16, got {row['sizes'].get('image_size')} "
        "(pass image_sizes=[image_size])",
    )


def model_row_ratio(answer, context):
    """Its py_function / native ratio is a positive, finite number"""
    row = context.once("row", lambda: answer(_CPU, 16))
    ratio = row["ratio"].get("py_function")
    expect(_positive_finite(ratio), f"expected a positive, finite ratio, got {ratio!r}")


EXERCISES = (
    Exercise(
        "12.1",
        "The first call and the steady ones.",
        FUNCTION,
        (first_call_apart, waits_for_the_result, seconds_per_call),
        (
            "The first call of a tf.function traces it (and XLA compiles it): time that call on "
            "its own. A call can return before its work is done: the clock stops only after "
            "the result's .numpy().",
            "Start a perf_counter, call call() and its .numpy(), stop: that is first. Then do "
            "the same `repeats` times in a loop, keeping each duration, and return first with "
            "the median of the durations.",
        ),
    ),
    Exercise(
        "12.2",
        "A third blur.",
        MAPPING,
        (keeps_defaults_adds_numpy_function, every_method_blurs, blur_op_measures_them),
        (
            "default_blur_methods() returns a dict of the blurs blur_op compares; every "
            "method has the signature (images, ksize=5, sigma=0.0).",
            "Unpack the defaults into a new dict and add one key, numpy_function, whose value "
            "is companion.pyfunc.numpy_function_blur itself (not a call of it).",
        ),
    ),
    Exercise(
        "12.3",
        "The blur's own cost in the model.",
        MAPPING,
        (no_blur_is_identity, own_cost_subtracts, own_cost_of_a_measured_row),
        (
            "A row's medians hold one time per method, in seconds; the no-blur model runs "
            "everything but the blur.",
            "own_cost(row) returns {m: row['medians'][m] - row['medians']['no blur']} for m in "
            "py_function and native.",
        ),
    ),
    Exercise(
        "12.4",
        "The GPU picture.",
        FUNCTION,
        (model_row_on_the_device, model_row_ratio),
        (
            "blur_in_model returns one row per image size; its device and sizes say where and "
            "what it measured.",
            "Call blur_in_model(image_sizes=[image_size], device=device, repeats=3) and return "
            "its only row.",
        ),
    ),
)
