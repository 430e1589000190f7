"""Which Keras backend runs, and the one error a TensorFlow-only piece raises on another.

Keras 3 picks its backend once, when it is first imported (``KERAS_BACKEND``, or
``~/.keras/keras.json``). The companion's portable modules work on all three; the TensorFlow-only
ones (``tf.py_function``, ``tf.distribute``, compiled TF ops, TFLite, ``tf.function`` tracing)
call ``require_tensorflow`` before they import TensorFlow, so that a JAX or PyTorch user gets a
sentence naming what to use instead, not a traceback from inside TensorFlow (or a
``ModuleNotFoundError`` where TensorFlow is not installed).

    >>> from companion._backend import BACKENDS, backend
    >>> backend() in BACKENDS
    True
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

#: The Keras backends the book runs on, in the order its tables list them.
BACKENDS = ("tensorflow", "jax", "torch")
#: How the book names each backend in prose.
BACKEND_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}


class TensorFlowRequired(ImportError):
    """A TensorFlow-only piece of the companion was used under another Keras backend.

    An ``ImportError``, so that ``import companion.pyfunc`` under JAX fails the way a missing
    package does, with a message that says what to use instead. Import it from
    ``companion.backends``.

    Taught in chapter 14, "What stays TensorFlow-only".
    """


def backend() -> str:
    """The Keras backend's name: ``"tensorflow"``, ``"jax"``, ``"torch"`` or ``"numpy"``.

    Once Keras is imported, the one it runs; before, the one it will pick, read as Keras reads it
    (``KERAS_BACKEND``, else ``keras.json`` in ``KERAS_HOME`` or ``~/.keras``, else TensorFlow)
    without importing it, so that a command line can answer ``--help`` before TensorFlow loads.
    """
    if "keras" in sys.modules:
        return sys.modules["keras"].backend.backend()
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = Path(os.environ.get("KERAS_HOME", Path.home() / ".keras"))
    try:
        return json.loads((home / "keras.json").read_text()).get("backend", "tensorflow")
    except (OSError, ValueError):
        return "tensorflow"


def require_tensorflow(what: str, instead: Mapping[str, str]) -> None:
    """Raise ``TensorFlowRequired`` unless Keras runs on TensorFlow.

    Args:
        what: The piece, as a reader imports it (``"companion.pyfunc"``,
            ``"companion.gradients.gradient_error"``).
        instead: What to write on each other backend, by backend name
            (``{"jax": "jax.pure_callback", "torch": "the Python function itself"}``).

    Raises:
        TensorFlowRequired: Naming ``what``, the running backend and its replacement.
    """
    running = backend()
    if running == "tensorflow":
        return
    name = BACKEND_NAMES.get(running, running)
    advice = instead.get(running)
    tail = f" On {name} use {advice}." if advice else ""
    raise TensorFlowRequired(
        f"{what} needs the TensorFlow backend: Keras is running on {name} "
        f"(KERAS_BACKEND={running!r}).{tail} Chapter 14 of the book shows each replacement."
    )
