"""Remove the execution timestamps nbclient stores in every code cell (``metadata.execution``).

    python tools/strip_timestamps.py book/01_ops_layers_models.ipynb ...   # in place

``make execute`` runs it after each notebook: a re-run then changes only what the cells print,
and a diff shows those changes instead of hundreds of timestamps.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat


def strip(path: Path) -> bool:
    """Drop ``metadata.execution`` from every cell of ``path``; True if the file changed."""
    notebook = nbformat.read(path, as_version=4)
    changed = False
    for cell in notebook.cells:
        changed |= cell.metadata.pop("execution", None) is not None
    if changed:
        nbformat.write(notebook, path)
    return changed


if __name__ == "__main__":
    for argument in sys.argv[1:]:
        strip(Path(argument))
