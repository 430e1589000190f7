"""Chapter 12, GPU benchmarks: a third blur, the blur's own cost in the model, the GPU picture."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from companion.exercises._framework import FUNCTION, MAPPING, Exercise, expect

_CPU = "/CPU:0"


def _images():
    return np.random.default_rng(0).random((2, 16, 16, 3), dtype=np.float32)


def _positive_finite(value):
    return isinstance(value, (int, float, np.floating)) and math.isfinite(value) and value > 0


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
        "12.2",
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
        "12.3",
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
