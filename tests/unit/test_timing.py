import statistics
import time

import numpy as np
import pytest
import tensorflow as tf

from companion.timing import Timing, compare, default_device, fetch, time_call


def recorded(call, durations):
    """``call``, appending the seconds each of its calls took (measured inside) to ``durations``."""

    def timed(*args):
        start = time.perf_counter()
        call(*args)
        durations.append(time.perf_counter() - start)

    return timed


# The harness is checked against the durations the calls measured themselves, side by side in the
# same run, never against a wall-clock bound: a loaded machine stretches both alike.
def test_a_sleep_is_measured_as_long_as_the_call_measured_itself():
    durations = []
    timing = time_call(recorded(time.sleep, durations), 0.02, repeats=5, warmup=0)
    assert isinstance(timing, Timing) and timing.repeats == 5 and timing.number == 1
    assert len(durations) == 5 and len(timing.times) == 5
    # Each repeat spans its one call: never shorter than the call, and not much longer.
    assert all(repeat >= call for repeat, call in zip(timing.times, durations))
    assert timing.median < statistics.median(durations) * 1.5
    assert timing.best <= timing.median and min(timing.times) == timing.best
    assert timing.median_ms == pytest.approx(timing.median * 1e3)


def test_number_divides_the_repeat_time_and_warmup_is_not_timed():
    durations = []
    slow_first_call = recorded(lambda: time.sleep(0.2 if not durations else 0.002), durations)

    timing = time_call(slow_first_call, repeats=3, number=4, warmup=1)
    assert len(durations) == 1 + 3 * 4
    warmup, timed = durations[0], durations[1:]
    per_call = [sum(timed[i : i + 4]) / 4 for i in range(0, len(timed), 4)]
    # Seconds per call: a repeat's time divided by its 4 calls, not their sum.
    assert all(repeat >= call * 0.999 for repeat, call in zip(timing.times, per_call))
    assert timing.median < statistics.median(per_call) * 1.5
    assert max(timing.times) < warmup / 4  # no repeat holds the slow warm-up call


def test_results_are_fetched_to_the_host():
    fetched = fetch({"a": tf.constant([1.0, 2.0]), "b": [tf.constant(3), "text"]})
    assert isinstance(fetched["a"], np.ndarray)
    assert fetched["b"][0] == 3 and fetched["b"][1] == "text"


def test_device_argument_places_the_ops():
    placed = []
    time_call(lambda: placed.append(tf.ones(2).device), repeats=1, warmup=0, device="/CPU:0")
    assert placed and placed[0].endswith("CPU:0")
    assert time_call(lambda: None, repeats=2, device="/CPU:0").device == "/CPU:0"


def test_the_default_device_is_the_gpu_when_there_is_one():
    expected = "/GPU:0" if tf.config.list_physical_devices("GPU") else "/CPU:0"
    assert default_device() == expected


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"repeats": 0}, ValueError, "^repeats: expected an int >= 1"),
        ({"number": 1.5}, TypeError, "^number: expected an int >= 1"),
        ({"warmup": -1}, ValueError, "^warmup: expected an int >= 0"),
        ({"device": "/TPU:7"}, ValueError, "^device: expected one of the devices"),
        (
            {"device": 0},
            TypeError,
            "^device: expected a device string such as '/CPU:0', got int 0$",
        ),
        ({"device": "/TPU:7"}, ValueError, "got str '/TPU:7'$"),
        ({"device": ""}, ValueError, "^device: expected a device string"),
    ],
)
def test_bad_input_is_rejected_naming_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        time_call(lambda: None, **kwargs)
    with pytest.raises(TypeError, match="^fn: expected a callable, got str 'not callable'$"):
        time_call("not callable")


def busy_wait(seconds, durations=None):
    """Spin for ``seconds`` of wall-clock time; append the time it really took to ``durations``."""
    start = time.perf_counter()
    while time.perf_counter() < start + seconds:
        pass
    if durations is not None:
        durations.append(time.perf_counter() - start)


# A loaded machine can stretch a busy wait (the process is descheduled mid-spin), so the harness
# is checked against the durations the calls themselves measured, not against the nominal ones.
def test_a_busy_loop_is_measured_within_tolerance():
    durations = []
    timing = time_call(busy_wait, 0.01, durations, repeats=5, warmup=0)
    assert len(durations) == 5 and timing.best >= 0.01
    # Not faster than the calls themselves, and not much slower: no calls lost, none counted twice.
    measured = statistics.median(durations)
    assert measured * 0.999 <= timing.median < measured * 1.5


def test_compare_alternates_and_keeps_the_ratio_of_known_durations():
    order, durations = [], {"short": [], "long": []}

    def wait(name, seconds):
        order.append(name)
        busy_wait(seconds, durations[name])

    timings = compare(
        {"short": lambda: wait("short", 0.002), "long": lambda: wait("long", 0.006)},
        repeats=4,
        target=0.006,
    )
    assert list(timings) == ["short", "long"]
    short, long = timings["short"].number, timings["long"].number
    assert 1 <= short <= 3 and long == 1 and timings["long"].repeats == 4  # about 6 ms per turn
    assert timings["short"].best >= 0.002 and timings["long"].best >= 0.006
    assert all(len(timing.times) == 4 for timing in timings.values())
    timed = {name: calls[2:] for name, calls in durations.items()}  # after warm-up and calibration
    for name, timing in timings.items():
        per_round = [
            sum(timed[name][i : i + timing.number]) / timing.number
            for i in range(0, len(timed[name]), timing.number)
        ]
        assert statistics.median(per_round) * 0.999 <= timing.median
        assert timing.median < statistics.median(per_round) * 1.5
    # warm-up, calibration, then rounds that alternate: short x3, long x1, short x3, ...
    assert order[:4] == ["short", "long", "short", "long"]
    assert order[4:] == (["short"] * short + ["long"] * long) * 4


@pytest.mark.parametrize(
    "calls, kwargs, error, match",
    [
        (
            {},
            {},
            ValueError,
            r"^calls: expected a non-empty mapping of names to callables, got dict \{\}$",
        ),
        (
            [lambda: None],
            {},
            TypeError,
            "^calls: expected a non-empty mapping of names to callables, got list",
        ),
        ({"a": 1}, {}, TypeError, r"^calls\['a'\]: expected a callable, got int 1$"),
        ({1: print}, {}, TypeError, r"^calls\[1\]: expected a str name, got int 1$"),
        ({"a": lambda: None}, {"target": 0}, ValueError, "^target: expected a finite number > 0"),
        ({"a": lambda: None}, {"repeats": 0}, ValueError, "^repeats: expected an int >= 1"),
        (
            {"a": lambda: None},
            {"device": "/CPU:9"},
            ValueError,
            "^device: expected one of the devices",
        ),
    ],
)
def test_compare_rejects_bad_input(calls, kwargs, error, match):
    with pytest.raises(error, match=match):
        compare(calls, **kwargs)


@pytest.mark.parametrize(
    "run, match",
    [
        (
            lambda: time_call(abs, 1, repeats=10**12),
            r"^repeats: expected an int >= 1 and <= 1000, got int 1000000000000$",
        ),
        (
            lambda: time_call(abs, 1, number=10**12),
            r"^number: expected an int >= 1 and <= 1000000, got int ",
        ),
        (
            lambda: time_call(abs, 1, warmup=10**12),
            r"^warmup: expected an int >= 0 and <= 1000, got int ",
        ),
        (
            lambda: compare({"a": lambda: None}, target=1e300),
            r"^target: expected a finite number > 0 and <= 60, got ",
        ),
    ],
)
def test_huge_counts_are_refused_before_running(run, match):
    started = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        run()
    assert time.perf_counter() - started < 5
