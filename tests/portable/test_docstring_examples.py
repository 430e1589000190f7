"""The docstring examples of every module that says it runs on all three backends, run on the
backend this process has (``make test`` runs them under TensorFlow through --doctest-modules too;
``make test-backends`` runs them here under JAX and PyTorch)."""

import doctest
import importlib
import pkgutil

import pytest
from helpers.backend_support import PORTABLE, backends_line, public_modules


def portable_modules():
    """Dotted names of the portable public modules and of every file of a portable package."""
    names = []
    for name, path in public_modules():
        if backends_line(path) != PORTABLE:
            continue
        names.append(f"companion.{name}")
        if path.name == "__init__.py":
            names += [
                f"companion.{name}.{info.name}" for info in pkgutil.iter_modules([path.parent])
            ]
    return names


@pytest.mark.parametrize("module", portable_modules())
def test_the_examples_run_on_this_backend(module):
    result = doctest.testmod(
        importlib.import_module(module), optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {module} failed"
