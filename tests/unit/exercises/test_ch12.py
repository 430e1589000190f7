"""Chapter 12's exercise checks: a correct answer passes, each likely mistake is named."""

import time

import numpy as np
import tensorflow as tf

from companion.bench import blur_in_model, default_blur_methods
from companion.pyfunc import native_blur, numpy_function_blur


def first_and_steady(call, repeats=5):
    start = time.perf_counter()
    call().numpy()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call().numpy()
        times.append(time.perf_counter() - start)
    return first, float(np.median(times))


def no_warm_up(call, repeats=5):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call().numpy()
        times.append(time.perf_counter() - start)
    return times[0], float(np.median(times))


def no_wait(call, repeats=5):
    start = time.perf_counter()
    result = call()
    first = time.perf_counter() - start
    result.numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
        result.numpy()
    return first, float(np.median(times))


def total_time(call, repeats=5):
    first, steady = first_and_steady(call, repeats)
    return first, steady * repeats


def in_ms(call, repeats=5):
    first, steady = first_and_steady(call, repeats)
    return first * 1e3, steady * 1e3


def test_the_first_call_and_the_steady_ones(accepted, caught):
    accepted("12.1", first_and_steady)
    caught("12.1", no_warm_up, r"the first call is among the timed ones: time it apart")
    caught("12.1", no_wait, r"call .numpy\(\) on what call\(\) returns before stopping")
    caught("12.1", total_time, r"the median of the calls, not their sum")
    caught("12.1", in_ms, r"in seconds, not ms")
    caught("12.1", lambda call, repeats=5: 0.1, r"a pair \(first, steady\) of seconds")


def test_a_third_blur(accepted, caught):
    accepted("12.2", {**default_blur_methods(), "numpy_function": numpy_function_blur})
    caught("12.2", {"numpy_function": numpy_function_blur}, r"got \['numpy_function'\]")
    unblurred = {**default_blur_methods(), "numpy_function": tf.identity}
    caught("12.2", unblurred, r"'numpy_function' within 1e-5 of native_blur")
    called = {
        **default_blur_methods(),
        "numpy_function": numpy_function_blur(tf.ones((1, 8, 8, 3))),
    }
    caught("12.2", called, r"a blur function")


WITH_NONE = {**default_blur_methods(), "no blur": tf.identity}


def own_cost(row):
    return {m: row["medians"][m] - row["medians"]["no blur"] for m in ("py_function", "native")}


def own_cost_ms(row):
    return {m: 1e3 * cost for m, cost in own_cost(row).items()}


def own_cost_ratio(row):
    return {m: row["medians"][m] / row["medians"]["no blur"] for m in ("py_function", "native")}


def own_cost_every_key(row):
    return {m: row["medians"][m] - row["medians"]["no blur"] for m in row["medians"]}


def test_the_blurs_own_cost(accepted, caught):
    accepted("12.3", {"methods": WITH_NONE, "own_cost": own_cost})
    caught("12.3", {"methods": WITH_NONE, "own_cost": own_cost_ms}, r"not ms")
    caught("12.3", {"methods": WITH_NONE, "own_cost": own_cost_ratio}, r"not a ratio")
    caught("12.3", {"methods": WITH_NONE, "own_cost": own_cost_every_key}, r"not 'no blur'")
    blurred = {**default_blur_methods(), "no blur": native_blur}
    caught("12.3", {"methods": blurred, "own_cost": own_cost}, r"input unchanged")
    caught("12.3", {"methods": WITH_NONE, "own_cost": len}, r"the answer raised")


def model_row(device, image_size):
    return blur_in_model(image_sizes=[image_size], batch_size=2, device=device, repeats=1)[0]


def largest_only(device, image_size):
    return blur_in_model(image_sizes=[32], batch_size=2, device=device, repeats=1)[0]


def every_row(device, image_size):
    return blur_in_model(image_sizes=[image_size], batch_size=2, device=device, repeats=1)


def test_the_gpu_picture(accepted, caught):
    accepted("12.4", model_row)
    caught("12.4", largest_only, r"image size 16, got 32")
    caught("12.4", every_row, r"one row of blur_in_model")
