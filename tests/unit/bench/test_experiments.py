"""``companion.bench._experiments``: chapter 12's experiments and the rows they return."""

import inspect
import re

import numpy as np
import pytest
import tensorflow as tf

from companion.bench import (
    PER_EXAMPLE_METHODS,
    STEP_MODES,
    blur_in_model,
    blur_op,
    blur_pipeline,
    compiled_blur_vs_opencv,
    per_example_vs_batched,
    training_step_modes,
)
from companion.pyfunc import native_blur, py_function_blur


def test_the_harness_is_imported_from_timing_not_from_bench():
    import companion.bench
    import companion.timing

    for name in ("Timing", "time_call", "compare", "fetch", "default_device"):
        assert hasattr(companion.timing, name) and not hasattr(companion.bench, name), name


@pytest.mark.parametrize(
    "experiment",
    [
        blur_op,
        blur_in_model,
        blur_pipeline,
        training_step_modes,
        per_example_vs_batched,
        compiled_blur_vs_opencv,
    ],
)
def test_every_experiment_documents_each_of_its_arguments_once(experiment):
    # inspect.getdoc: the same text on Python 3.11 and on 3.13, which strips indentation itself
    args = inspect.getdoc(experiment).split("Args:")[1].split("Returns:")[0]
    documented = re.findall(r"^ {4}(\w+): ", args, re.M)
    assert sorted(documented) == sorted(inspect.signature(experiment).parameters)
    assert "{{" not in experiment.__doc__


def check_rows(rows, name, reference, methods, sizes):
    assert [row["name"] for row in rows] == [name] * len(sizes)
    for row, size in zip(rows, sizes):
        keys = "name device sizes medians spreads reference ratio round_ratios"
        assert set(row) == set(keys.split())
        assert list(row["round_ratios"]) == list(methods)
        rounds = row["round_ratios"][reference]
        assert rounds and all(ratio == 1.0 for ratio in rounds)
        assert all(len(r) == len(rounds) and min(r) > 0 for r in row["round_ratios"].values())
        assert row["device"] == "/CPU:0" and row["reference"] == reference and row["sizes"] == size
        assert list(row["medians"]) == list(methods) == list(row["ratio"]) == list(row["spreads"])
        assert all(median > 0 for median in row["medians"].values())
        assert row["ratio"][reference] == 1.0
        for method, median in row["medians"].items():
            assert row["ratio"][method] == pytest.approx(median / row["medians"][reference])


def test_blur_op_rows_per_image_size_with_any_methods():
    rows = blur_op(image_sizes=[8, 12], batch_size=2, device="/CPU:0", repeats=2)
    check_rows(
        rows,
        "blur op",
        "native",
        ["py_function", "native"],
        [{"batch_size": 2, "image_size": 8}, {"batch_size": 2, "image_size": 12}],
    )
    calls = []
    methods = {"native": native_blur, "identity": lambda x: calls.append(x.shape) or tf.identity(x)}
    rows = blur_op(
        methods, image_sizes=[8], batch_size=3, device="/CPU:0", repeats=1, reference="identity"
    )
    check_rows(rows, "blur op", "identity", methods, [{"batch_size": 3, "image_size": 8}])
    assert calls == [(3, 8, 8, 3)]  # traced once as a tf.function, then run as a graph


def test_blur_in_model_rows():
    rows = blur_in_model(image_sizes=[8], batch_size=2, device="/CPU:0", repeats=1)
    check_rows(
        rows,
        "blur in model",
        "native",
        ["py_function", "native"],
        [{"batch_size": 2, "image_size": 8}],
    )


def test_blur_pipeline_rows():
    rows = blur_pipeline(
        image_size=8,
        examples=6,
        batch_size=3,
        device="/CPU:0",
        repeats=1,
        methods={"py_function": py_function_blur, "native": native_blur, "none": tf.identity},
    )
    settings = {"batch_size": 3, "image_size": 8, "examples": 6}
    check_rows(
        rows[:1], "tf.data pipeline", "native", ["py_function", "native", "none"], [settings]
    )
    check_rows(
        rows[1:],
        "pipeline + training step",
        "native",
        ["py_function", "native", "none"],
        [settings],
    )


def test_training_step_modes_rows():
    rows = training_step_modes(
        models=["mlp", "cnn"], image_size=8, batch_size=2, device="/CPU:0", repeats=1
    )
    assert [row["name"] for row in rows] == ["mlp training step", "cnn training step"]
    for row in rows:
        check_rows(
            [row], row["name"], "tf.function", STEP_MODES, [{"batch_size": 2, "image_size": 8}]
        )


def test_per_example_vs_batched_rows_and_the_three_methods_agree():
    rows = per_example_vs_batched(batch_sizes=[2, 4], image_size=8, device="/CPU:0", repeats=1)
    check_rows(
        rows,
        "standardize per image",
        "batched op",
        PER_EXAMPLE_METHODS,
        [{"batch_size": 2, "image_size": 8}, {"batch_size": 4, "image_size": 8}],
    )
    images = np.random.default_rng(1).random((5, 8, 8, 3), dtype=np.float32)
    expected = np.stack([(x - x.mean()) / (x.std() + 1e-6) for x in images.astype(np.float64)])
    for method in PER_EXAMPLE_METHODS.values():
        np.testing.assert_allclose(
            tf.function(method)(tf.constant(images)).numpy(), expected, atol=1e-5
        )


@pytest.mark.parametrize(
    "run, error, match",
    [
        (
            lambda: blur_op(image_sizes=[4], device="/CPU:0"),
            ValueError,
            r"^image_sizes\[0\]: expected an int >= 8 and <= 4096, got int 4$",
        ),
        (
            lambda: blur_op(image_sizes=64, device="/CPU:0"),
            TypeError,
            "^image_sizes: expected a non-empty list",
        ),
        (
            lambda: blur_op(batch_size=0, device="/CPU:0"),
            ValueError,
            "^batch_size: expected an int >= 1",
        ),
        (
            lambda: blur_op(reference="opencv", device="/CPU:0"),
            ValueError,
            r"^reference: expected one of 'py_function', 'native', got str 'opencv'$",
        ),
        (
            lambda: blur_in_model({"x": "not callable"}, device="/CPU:0"),
            TypeError,
            r"^methods\['x'\]: expected a callable, got str 'not callable'$",
        ),
        (
            lambda: blur_pipeline(examples=2, batch_size=4, device="/CPU:0"),
            ValueError,
            "^examples: expected an int >= 4",
        ),
        (
            lambda: training_step_modes(models=["rnn"], device="/CPU:0"),
            ValueError,
            r"^models\[0\]: expected one of 'mlp', 'cnn', got str 'rnn'$",
        ),
        (
            lambda: per_example_vs_batched(batch_sizes="8", device="/CPU:0"),
            TypeError,
            "^batch_sizes: expected a non-empty list",
        ),
        (
            lambda: per_example_vs_batched(batch_sizes=[8], image_size=2.0, device="/CPU:0"),
            TypeError,
            "^image_size: expected an int >= 8",
        ),
    ],
)
def test_experiments_reject_bad_input(run, error, match):
    with pytest.raises(error, match=match):
        run()


def test_compiled_blur_vs_opencv_rows_divide_by_opencv():
    rows = compiled_blur_vs_opencv(image_sizes=[16, 24], batch_size=2, repeats=1)
    assert [row["sizes"] for row in rows] == [
        {"batch_size": 2, "image_size": 16},
        {"batch_size": 2, "image_size": 24},
    ]
    for row in rows:
        assert (
            row["name"] == "compiled blur"
            and row["reference"] == "OpenCV"
            and row["device"] == "/CPU:0"
        )
        assert list(row["medians"]) == ["C++ op", "OpenCV"] and all(
            m > 0 for m in row["medians"].values()
        )
        assert row["ratio"]["OpenCV"] == 1.0
        assert row["ratio"]["C++ op"] == pytest.approx(
            row["medians"]["C++ op"] / row["medians"]["OpenCV"]
        )
    with pytest.raises(
        ValueError, match=r"^image_sizes\[0\]: expected an int >= 8 and <= 4096, got int 4$"
    ):
        compiled_blur_vs_opencv(image_sizes=[4])
