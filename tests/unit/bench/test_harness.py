"""``companion.bench._harness``: default sizes per device, and every size, count, seed and device
checked before any timing work."""

import time

import pytest
import tensorflow as tf

from companion.bench import (
    SIZES,
    blur_in_model,
    blur_op,
    blur_pipeline,
    default_sizes,
    per_example_vs_batched,
    training_step_modes,
)
from companion.bench._harness import resolve_device
from companion.timing import default_device


def test_default_sizes_scale_with_the_device():
    assert default_sizes("/CPU:0") == SIZES["CPU"] and default_sizes("/CPU:0") is not SIZES["CPU"]
    assert max(SIZES["GPU"]["image_sizes"]) > max(SIZES["CPU"]["image_sizes"])
    assert SIZES["GPU"]["batch_size"] > SIZES["CPU"]["batch_size"]
    with pytest.raises(ValueError, match="^device: expected a device string such as"):
        default_sizes("no such device")
    with pytest.raises(TypeError, match="^device: expected a device string"):
        default_sizes(0)
    if not tf.config.list_physical_devices("GPU"):
        with pytest.raises(
            ValueError,
            match=r"^device: expected one of the devices TensorFlow has, .*got str '/GPU:0'$",
        ):
            blur_op(device="/GPU:0", image_sizes=[8], batch_size=1, repeats=1)


def test_no_device_means_the_default_device():
    assert resolve_device(None) == default_device() and resolve_device("cpu:0") == "cpu:0"
    assert default_sizes(None) == default_sizes(default_device())


def test_checks_print_what_arrived_not_only_its_type():
    with pytest.raises(
        TypeError,
        match=r"^device: expected a device string such as '/CPU:0', got list \['/CPU:0'\]$",
    ):
        default_sizes(["/CPU:0"])
    with pytest.raises(
        ValueError, match=r"^device: expected a device string such as '/GPU:0', got str 'no such'$"
    ):
        default_sizes("no such")


def recording_blur(calls):
    """A blur for ``methods`` that records each call (a benchmark that ran would call it)."""
    return lambda images: calls.append(images.shape) or tf.identity(images)


@pytest.mark.parametrize(
    "run",
    [
        lambda m: blur_op(m, image_sizes=[8], batch_size=1, device="/CPU:0", repeats=1, seed=2**32),
        lambda m: blur_in_model(
            m, image_sizes=[8], batch_size=1, device="/CPU:0", repeats=1, seed=10**12
        ),
        lambda m: blur_pipeline(
            m, image_size=8, examples=2, batch_size=1, device="/CPU:0", repeats=1, seed=-1
        ),
        lambda m: blur_op(m, image_sizes=[8], batch_size=1, device="/CPU:0", repeats=1, seed=1.0),
    ],
)
def test_seeds_have_a_maximum_and_are_checked_before_the_benchmark_runs(run):
    calls = []
    with pytest.raises(
        (TypeError, ValueError), match=r"^seed: expected an int >= 0 and <= 4294967295, got "
    ):
        run({"native": recording_blur(calls)})
    assert calls == []


@pytest.mark.parametrize(
    "argument, value",
    [
        ("repeats", 0),
        ("repeats", 10**12),
        ("progress", "yes"),
        ("progress", 1),
        ("batch_size", 0),
        ("image_sizes", [8, 5]),
    ],
)
def test_blur_experiments_check_every_argument_before_any_work(argument, value):
    calls = []
    settings = {
        "image_sizes": [8],
        "batch_size": 1,
        "device": "/CPU:0",
        "repeats": 1,
        argument: value,
    }
    for experiment in (blur_op, blur_in_model):
        with pytest.raises((TypeError, ValueError), match=rf"^{argument}(\[1\])?: expected "):
            experiment({"native": recording_blur(calls)}, **settings)
    assert calls == []


@pytest.mark.parametrize(
    "run, error, match",
    [
        (
            lambda: training_step_modes(models="mlp", device="/CPU:0"),
            TypeError,
            "^models: expected a non-empty list or tuple of 'mlp' and 'cnn', got str 'mlp'$",
        ),
        (
            lambda: training_step_modes(models=[], device="/CPU:0"),
            ValueError,
            r"^models: expected a non-empty list or tuple of 'mlp' and 'cnn', got list \[\]$",
        ),
        (
            lambda: blur_op(image_sizes=[], device="/CPU:0"),
            ValueError,
            r"^image_sizes: expected a non-empty list .*got list \[\]$",
        ),
        (
            lambda: per_example_vs_batched(batch_sizes=(), device="/CPU:0"),
            ValueError,
            r"^batch_sizes: expected a non-empty list .*got tuple \(\)$",
        ),
        (
            lambda: per_example_vs_batched(batch_sizes=[2, "4"], device="/CPU:0"),
            TypeError,
            r"^batch_sizes\[1\]: expected an int >= 1 and <= \d+, got str '4'$",
        ),
        (
            lambda: blur_op(image_sizes=[8.0], device="/CPU:0"),
            TypeError,
            r"^image_sizes\[0\]: expected an int >= 8",
        ),
    ],
)
def test_a_wrong_type_is_a_type_error_and_a_wrong_value_a_value_error(run, error, match):
    with pytest.raises(error, match=match):
        run()


@pytest.mark.parametrize(
    "run, match",
    [
        (
            lambda: blur_op(image_sizes=[10**5], device="/CPU:0"),
            r"^image_sizes\[0\]: expected an int >= 8 and <= 4096",
        ),
        # 1 GiB of 4096x4096 float32 RGB images
        (
            lambda: blur_op(image_sizes=[4096], batch_size=64, device="/CPU:0"),
            r"^batch_size: expected an int >= 1 and <= 5, got int 64$",
        ),
        (
            lambda: blur_pipeline(image_size=8, examples=10**9, batch_size=1, device="/CPU:0"),
            r"^examples: expected an int >= 1 and <= ",
        ),
        (
            lambda: per_example_vs_batched(batch_sizes=[10**9], image_size=8, device="/CPU:0"),
            r"^batch_sizes\[0\]: expected an int >= 1 and <= ",
        ),
        (
            lambda: training_step_modes(image_size=10**4, device="/CPU:0"),
            r"^image_size: expected an int >= 8 and <= 4096",
        ),
        (
            lambda: __import__("companion.bench").bench.training_loop_vs_fit(epochs=10**6),
            r"^epochs: expected an int >= 1 and <= 100, got ",
        ),
        (
            lambda: __import__("companion.bench").bench.training_loop_vs_fit(examples=10**9),
            r"^examples: expected an int >= 64 and <= 65536",
        ),
        (
            lambda: __import__("companion.bench").bench.adamw_step_time(steps=10**9),
            r"^steps: expected an int >= 1 and <= 10000, got ",
        ),
        (
            lambda: __import__("companion.bench").bench.adamw_step_time(batch_size=10**9),
            r"^batch_size: expected an int >= 1 and <= ",
        ),
    ],
)
def test_huge_counts_and_sizes_are_refused_before_running(run, match):
    started = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        run()
    assert time.perf_counter() - started < 5
