"""Shared by the test files: TensorFlow's C++ log level; chapters 3 and 13's blur references;
floatx float64 for one test."""

import os

# pytest imports this file before any test module, so before TensorFlow.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import cv2
import numpy as np
import pytest

#: (ksize, sigma): odd sizes with OpenCV's default sigma, and explicit sigmas.
BLUR_CASES = [(1, 0.0), (3, 0.0), (5, 0.0), (7, 0.0), (9, 0.0), (11, 0.0)] + [
    (5, 1.1),
    (7, 0.5),
    (9, 3.0),
    (15, 2.5),
]


@pytest.fixture(params=BLUR_CASES, ids=lambda case: f"ksize{case[0]}-sigma{case[1]}")
def blur_case(request):
    """One (ksize, sigma) of ``BLUR_CASES``: every blur of the book is checked on all of them."""
    return request.param


@pytest.fixture
def random_images():
    """``random_images(shape, seed=0, dtype=np.float32)``: seeded uniform values in [0, 1)."""

    def make(shape, seed=0, dtype=np.float32):
        return np.random.default_rng(seed).random(shape).astype(dtype)

    return make


@pytest.fixture
def opencv_blur():
    """``opencv_blur(images, ksize, sigma)``: the independent reference, cv2 image by image."""

    def blur(images, ksize, sigma):
        blurred = [cv2.GaussianBlur(i, (ksize, ksize), sigma).reshape(i.shape) for i in images]
        return np.stack(blurred)

    return blur


@pytest.fixture
def float64_floatx():
    """floatx float64 for one test (chapter 5's setting for gradient checks), the dtype policy too.

    Keras 3 fixes its global dtype policy the first time it is read (to floatx then), so after
    any layer was made ``set_floatx`` alone no longer changes the dtype of new layers.
    """
    import keras  # here: a session that does not use this fixture need not load TensorFlow

    floatx, policy = keras.config.floatx(), keras.config.dtype_policy()
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    try:
        yield
    finally:
        keras.config.set_floatx(floatx)
        keras.config.set_dtype_policy(policy)
