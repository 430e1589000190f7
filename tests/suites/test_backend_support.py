"""Each public companion module says which Keras backends it supports (the forms:
tests/helpers/backend_support.py), and its imports keep the promise: a portable module imports no
TensorFlow at its top (a JAX user may not have it installed); a TensorFlow-only one calls
``require_tensorflow`` before it imports TensorFlow, so that another backend gets the project's
error rather than TensorFlow's.
"""

import ast
import re
from pathlib import Path

import pytest
from helpers.backend_support import PARTLY, PORTABLE, TF_ONLY, backends_line, public_modules


def top_level_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of the imports at a file's top level (not inside functions)."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
    return found


def files_of(path: Path) -> list[Path]:
    return sorted(path.parent.glob("*.py")) if path.name == "__init__.py" else [path]


@pytest.mark.parametrize("name, path", public_modules(), ids=[n for n, _ in public_modules()])
def test_the_module_says_which_backends_it_supports(name, path):
    line = backends_line(path)
    assert line is not None, f"companion.{name}: its docstring has no 'Backends:' paragraph"
    assert line == PORTABLE or PARTLY.match(line) or TF_ONLY.match(line), line


@pytest.mark.parametrize("name, path", public_modules(), ids=[n for n, _ in public_modules()])
def test_a_portable_module_imports_no_tensorflow_at_its_top(name, path):
    if TF_ONLY.match(backends_line(path) or ""):
        pytest.skip(f"companion.{name} is TensorFlow only")
    for file in files_of(path):
        imports = [module for _, module in top_level_imports(file)]
        assert not [m for m in imports if m.split(".")[0] == "tensorflow"], file.name


@pytest.mark.parametrize("name, path", public_modules(), ids=[n for n, _ in public_modules()])
def test_a_tensorflow_only_module_raises_the_projects_error_first(name, path):
    if not TF_ONLY.match(backends_line(path) or ""):
        pytest.skip(f"companion.{name} supports every backend")
    source = path.read_text()
    guard = re.search(r"^require_tensorflow\(", source, re.M)
    assert guard, f"companion.{name} never calls require_tensorflow at its top"
    guard_line = source[: guard.start()].count("\n") + 1
    tensorflow = [line for line, m in top_level_imports(path) if m.split(".")[0] == "tensorflow"]
    assert all(line > guard_line for line in tensorflow), (name, guard_line, tensorflow)
