"""Chapter 13's exercise checks: a correct answer passes, each likely mistake is named."""

import numpy as np
import tensorflow as tf

from companion.kernels import cpp_blur, load_blur_op


def box_blur(images, k):
    return load_blur_op().gaussian_blur(images, np.ones(k, np.float32) / k)


def box_blur_unnormalised(images, k):
    return load_blur_op().gaussian_blur(images, np.ones(k, np.float32))


def box_blur_by_area(images, k):
    return load_blur_op().gaussian_blur(images, np.ones(k, np.float32) / (k * k))


def test_a_box_blur(accepted, caught):
    accepted("13.1", box_blur)
    caught("13.1", box_blur_unnormalised, r"within 1e-5 of cv2.blur.*np.ones\(k\) / k")
    caught("13.1", box_blur_by_area, r"divide by k, not k \* k")


def adjoint_gap(forward, adjoint, shape):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(shape), rng.standard_normal(shape)
    left = np.vdot(np.asarray(forward(x)), y)
    return abs(left - np.vdot(x, np.asarray(adjoint(y)))) / abs(left)


def gap_with_ones(forward, adjoint, shape):
    x = y = np.ones(shape)
    left = np.vdot(np.asarray(forward(x)), y)
    return abs(left - np.vdot(x, np.asarray(adjoint(y)))) / abs(left)


def gap_wrong_way(forward, adjoint, shape):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(shape), rng.standard_normal(shape)
    left = np.vdot(np.asarray(forward(x)), y)
    return abs(left - np.vdot(np.asarray(adjoint(x)), y)) / abs(left)


def gap_in_float32(forward, adjoint, shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.standard_normal(shape).astype(np.float32)
    left = np.vdot(np.asarray(forward(x), np.float32), y)
    return float(abs(left - np.vdot(x, np.asarray(adjoint(y), np.float32))) / abs(left))


def test_the_dot_product_test(accepted, caught):
    accepted("13.2", adjoint_gap)
    result = caught("13.2", gap_with_ones, r"With constant vectors")
    assert len(result.failures) == 2  # the matrix and the blur
    caught("13.2", gap_wrong_way, r"the adjoint is applied to y, and the result is paired with x")
    caught("13.2", gap_in_float32, r"float32 rounding alone")


@tf.custom_gradient
def self_adjoint_blur(x):
    return cpp_blur(x, 5), lambda upstream: cpp_blur(upstream, 5)


@tf.custom_gradient
def right_blur(x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = cpp_blur(x, 5)
    return y, lambda upstream: tape.gradient(y, x, output_gradients=upstream)


WRONG = np.ones((9, 10), bool)
WRONG[3:6, 3:7] = False


def test_the_wrong_gradient(accepted, caught):
    accepted("13.3", {"blur": self_adjoint_blur, "wrong": WRONG})
    caught("13.3", {"blur": right_blur, "wrong": WRONG}, r"this is the right gradient")
    caught("13.3", {"blur": self_adjoint_blur, "wrong": ~WRONG}, r"True at the right ones")
    caught("13.3", {"blur": self_adjoint_blur, "wrong": WRONG[None, :, :, None]}, r"\[0, :, :, 0\]")
    border = np.zeros((9, 10), bool)
    border[[0, -1]], border[:, [0, -1]] = True, True
    caught("13.3", {"blur": self_adjoint_blur, "wrong": border}, r"within 2 of an edge")


TIMING = """
import numpy as np
from companion.timing import time_call
from companion.data import make_shapes
from companion.kernels import cpp_blur
from companion.pyfunc import cv2_blur
(batch, _), _ = make_shapes(8, image_size=32, seed=1)
tensor = tf.constant(batch)
ratio = time_call(cpp_blur, tensor, repeats=3).median / time_call(cv2_blur, batch, repeats=3).median
print(f"{ratio:.2f}")
"""
ONE_CORE = """
import tensorflow as tf, cv2
tf.config.threading.set_intra_op_parallelism_threads(1)
cv2.setNumThreads(1)
"""


def test_one_core_each(accepted, caught):
    accepted("13.4", ONE_CORE + TIMING)
    caught("13.4", "import tensorflow as tf, cv2\n" + TIMING, r"1 intra-op thread, got \d+")
    too_late = "import tensorflow as tf, cv2\ntf.constant(1.0) + 1\n" + ONE_CORE[30:] + TIMING
    caught("13.4", too_late, r"before any TensorFlow op runs")
