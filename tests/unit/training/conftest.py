"""Shared by the training tests: the ``mixed_float16`` dtype policy for one test."""

import keras
import pytest


@pytest.fixture
def mixed_float16():
    """The dtype policy ``mixed_float16`` for one test (float16 compute, float32 variables)."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)
