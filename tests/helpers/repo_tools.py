"""Where things are (the repository, tests/), and the maintainers' scripts in ``tools/``,
imported by the tests that check what they write."""

import importlib.util
from pathlib import Path

#: The repository's root, and its tests/ folder.
ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def load(name: str):
    """The module ``tools/<name>.py``, imported fresh."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
