"""What a companion module's docstring says about the Keras backends it supports, read from its
source (no import, so the same on every backend). The line is one of

    Backends: TensorFlow, JAX, PyTorch.
    Backends: TensorFlow, JAX, PyTorch, except ``name`` (TensorFlow only).
    Backends: TensorFlow only (on JAX use ...; on PyTorch use ...).
"""

import ast
import re
from pathlib import Path

import companion

PACKAGE = Path(companion.__file__).parent
PORTABLE = "Backends: TensorFlow, JAX, PyTorch."
PARTLY = re.compile(r"^Backends: TensorFlow, JAX, PyTorch, except (.+) \(TensorFlow only\)\.$")
TF_ONLY = re.compile(r"^Backends: TensorFlow only \(on JAX use .+; on PyTorch use .+\)\.$")


def public_modules() -> list[tuple[str, Path]]:
    """``(name, source file)`` of every public module and package of the companion."""
    found = [(path.stem, path) for path in PACKAGE.glob("[!_]*.py")]
    found += [(path.parent.name, path) for path in PACKAGE.glob("[!_]*/__init__.py")]
    return sorted(found)


def backends_line(path: Path) -> str | None:
    """The docstring paragraph of ``path`` that starts with "Backends:", on one line."""
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    lines = [" ".join(p.split()) for p in re.split(r"\n\s*\n", docstring)]
    return next((line for line in lines if line.startswith("Backends:")), None)
