"""Shared by the test files: TensorFlow's C++ log level; chapters 3 and 13's blur references;
floatx float64 for one test.

Nothing here imports OpenCV, TensorFlow or Keras at the top: ``tests/portable`` runs where only
the portable modules' imports are installed (``make test-backends``), and a fixture imports what
it needs when a test asks for it."""

import os

# pytest imports this file before any test module, so before TensorFlow.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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
    import cv2  # here: only the blur tests need OpenCV

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


#: The suites that cover every module at once; ``--chapter-modules`` narrows them to some.
SHARED_SUITES = {"test_bad_inputs.py", "test_conformance.py", "test_gpu_paths.py"}


def pytest_addoption(parser):
    parser.addoption(
        "--chapter-modules",
        default="",
        help="comma-separated companion modules (make check): run only their cases of the "
        "bad-input, conformance and GPU-path suites",
    )


def _belongs_to(case_id, modules, names):
    """A shared suite's case id (``layers.CustomDense.units``, ``CustomDense``, ``layers``) names
    one of ``modules`` or one of their public names."""
    head = case_id.split(".")[0].split("-")[0]
    return head in modules or head in names


def pytest_collection_modifyitems(config, items):
    modules = [m for m in config.getoption("--chapter-modules").split(",") if m]
    if not modules:
        return
    from importlib import import_module

    names = set()
    for module in modules:
        home = f"companion.{module}"
        names |= {
            name
            for name, value in vars(import_module(home)).items()
            if name[:1] != "_" and (getattr(value, "__module__", None) or "").startswith(home)
        }
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        shared = item.path.name in SHARED_SUITES and callspec is not None
        keep = not shared or _belongs_to(callspec.id, modules, names)
        (kept if keep else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
