"""The companion's layering, read from the imports of its source (imports inside functions too).

Floors, from the ground up: ``_checks`` (imports nothing of the package); the helpers
(``notebook``, ``data``, ``timing``, ``cluster``: only helpers); the chapter modules (chapters
1-5 never import chapters 6-9; none imports ``bench``); ``bench`` (chapter 12's experiments and
the command line) and ``exercises`` (the checker of every chapter's exercises) on top. A package
counts as one module, importing what any of its files imports. A new module must be placed on a
floor here before its test passes.
"""

import ast
from pathlib import Path

import pytest

import companion

PACKAGE = Path(companion.__file__).parent
CHECKS = {"_checks"}
HELPERS = CHECKS | {"_finite", "notebook", "devices", "data", "timing", "cluster"}
HELPERS |= {"_kernels"}  # chapter 13's build system
HELPERS |= {"_text", "_clipping", "_subprocess"}  # text, global-norm clipping, child processes
HELPERS |= {"_backend"}  # which Keras backend runs; the error of TensorFlow-only pieces
HELPERS |= {"_cache"}  # the per-user cache of compiled code (chapters 13 and 14)
HELPERS |= {"_lr_finder"}  # chapter 8's range test: its inputs, callback and suggestion
EARLY_CHAPTERS = {"introspection", "ops", "pyfunc", "tflite", "layers", "gradients"}  # chapters 1-5
MIDDLE_CHAPTERS = {"models", "training", "fitting", "optimizers"}  # chapters 6-9
CHAPTERS = EARLY_CHAPTERS | MIDDLE_CHAPTERS | {"diagnostics", "kernels"}
TOP = {"bench", "backends", "exercises", "__init__"}  # backends: chapter 14, over the others
MODULES = sorted(
    [path.stem for path in PACKAGE.glob("*.py")]
    + [path.parent.name for path in PACKAGE.glob("*/__init__.py")]
)


def companion_imports(source: str) -> set[str]:
    """The companion modules ``source`` imports by bare name (``"layers"``), wherever they stand."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {
                alias.name.split(".")[1]
                for alias in node.names
                if alias.name.startswith("companion.")
            }
        elif isinstance(node, ast.ImportFrom):
            module = "companion." + (node.module or "") if node.level else node.module or ""
            if module in ("companion", "companion."):
                found |= {alias.name for alias in node.names}
            elif module.startswith("companion."):
                found.add(module.split(".")[1])
    return found


def imports_of(module: str) -> set[str]:
    """The companion modules ``module`` imports (a package: any of its files)."""
    folder = PACKAGE / module
    files = sorted(folder.glob("*.py")) if folder.is_dir() else [PACKAGE / f"{module}.py"]
    return set().union(*(companion_imports(path.read_text()) for path in files)) - {module}


def test_the_import_reader_sees_every_form_of_import():
    source = """
import companion.layers
from companion.models import functional_multimodal
from companion import training, bench as b
from . import data
from .timing import compare
import numpy, companionship


def later():
    from companion.optimizers import AdamW
"""
    expected = {"layers", "models", "training", "bench", "data", "timing", "optimizers"}
    assert companion_imports(source) == expected


def test_every_module_stands_on_a_floor():
    unplaced = set(MODULES) - HELPERS - CHAPTERS - TOP
    assert not unplaced, f"place these modules in tests/suites/test_layering.py: {sorted(unplaced)}"


def test_checks_imports_nothing_of_the_package():
    for module in CHECKS:
        assert imports_of(module) == set(), module


@pytest.mark.parametrize("module", sorted((HELPERS - CHECKS) & set(MODULES)))
def test_helpers_import_only_helpers(module):
    assert imports_of(module) <= HELPERS, f"{module} imports {sorted(imports_of(module) - HELPERS)}"


@pytest.mark.parametrize("module", sorted(CHAPTERS))
def test_chapter_modules_never_import_bench(module):
    assert "bench" not in imports_of(module)


@pytest.mark.parametrize("module", sorted(EARLY_CHAPTERS))
def test_chapters_1_to_5_never_import_chapters_6_to_9(module):
    later = imports_of(module) & MIDDLE_CHAPTERS
    assert not later, f"{module} imports {sorted(later)}"
