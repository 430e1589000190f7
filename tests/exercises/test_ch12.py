"""Chapter 12's exercise checks: a correct answer passes, each likely mistake is named."""

import tensorflow as tf

from companion.bench import blur_in_model, default_blur_methods
from companion.pyfunc import native_blur, numpy_function_blur


def test_a_third_blur(accepted, caught):
    accepted("12.1", {**default_blur_methods(), "numpy_function": numpy_function_blur})
    caught("12.1", {"numpy_function": numpy_function_blur}, r"got \['numpy_function'\]")
    unblurred = {**default_blur_methods(), "numpy_function": tf.identity}
    caught("12.1", unblurred, r"'numpy_function' within 1e-5 of native_blur")
    called = {
        **default_blur_methods(),
        "numpy_function": numpy_function_blur(tf.ones((1, 8, 8, 3))),
    }
    caught("12.1", called, r"a blur function")


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
    accepted("12.2", {"methods": WITH_NONE, "own_cost": own_cost})
    caught("12.2", {"methods": WITH_NONE, "own_cost": own_cost_ms}, r"not ms")
    caught("12.2", {"methods": WITH_NONE, "own_cost": own_cost_ratio}, r"not a ratio")
    caught("12.2", {"methods": WITH_NONE, "own_cost": own_cost_every_key}, r"not 'no blur'")
    blurred = {**default_blur_methods(), "no blur": native_blur}
    caught("12.2", {"methods": blurred, "own_cost": own_cost}, r"input unchanged")
    caught("12.2", {"methods": WITH_NONE, "own_cost": len}, r"the answer raised")


def model_row(device, image_size):
    return blur_in_model(image_sizes=[image_size], batch_size=2, device=device, repeats=1)[0]


def largest_only(device, image_size):
    return blur_in_model(image_sizes=[32], batch_size=2, device=device, repeats=1)[0]


def every_row(device, image_size):
    return blur_in_model(image_sizes=[image_size], batch_size=2, device=device, repeats=1)


def test_the_gpu_picture(accepted, caught):
    accepted("12.3", model_row)
    caught("12.3", largest_only, r"image size 16, got 32")
    caught("12.3", every_row, r"one row of blur_in_model")
