"""The per-user cache of compiled code: chapter 13's TensorFlow op and chapter 14's PyTorch
extension build into it, one subfolder per build key. Imports neither framework.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The folder that holds one subfolder per build key: ``$WHITE_BOX_TF_CACHE``, else
    ``white-box-tf/kernels`` in ``$XDG_CACHE_HOME`` (default ``~/.cache``).

    Taught in chapter 13, "The build cache and its manifest".
    """
    if os.environ.get("WHITE_BOX_TF_CACHE"):
        return Path(os.environ["WHITE_BOX_TF_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "white-box-tf" / "kernels"
