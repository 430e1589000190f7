"""Tests of the portable companion, run under TensorFlow, JAX and PyTorch (a package: its file
names repeat those of tests/unit/, e.g. test_timing.py)."""
