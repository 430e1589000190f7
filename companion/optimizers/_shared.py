"""What the optimizer families share: Keras registration, the step limit, which variables a
list of words selects, and how many replicas run in sync (1 off TensorFlow).

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras

from companion._checks import (
    check_sequence,
    check_str,
)

register = keras.saving.register_keras_serializable(package="companion")

#: The largest step count (Keras counts ``iterations`` in int64).
MAX_STEP = 2**63 - 1


def variable_path(variable: Any) -> str:
    """A Keras variable's path (``dense/kernel``), or a ``tf.Variable``'s name."""
    return getattr(variable, "path", None) or variable.name


def _own_name(variable: Any) -> str:
    """A variable's own name (``kernel``): a Keras variable's name, a tf.Variable's last part."""
    return variable.name.split("/")[-1].split(":")[0]


def name_matches(variable: Any, words: Sequence[str]) -> bool:
    """True if one of ``words`` is part of the variable's own name (``bias`` in ``dense/bias``)."""
    name = _own_name(variable)
    return any(word in name for word in words)


def selects(variable: Any, words: Sequence[str]) -> bool:
    """A word with ``/`` is part of the variable's path; a word without, part of its own name."""
    return any(
        word in (variable_path(variable) if "/" in word else _own_name(variable)) for word in words
    )


def check_words(words: Any, name: str, *, min_length: int = 0) -> tuple[str, ...]:
    """A list or tuple of non-empty strings (an empty one would match every variable)."""
    return check_sequence(
        words, name, "a list or tuple of non-empty str", item=check_str, min_length=min_length
    )


def replicas_in_sync() -> int:
    """How many replicas run this code in sync (1 outside ``strategy.run``, with no strategy, or
    on JAX and PyTorch, where ``keras.distribution`` shards one program instead of replicating
    the step)."""
    if keras.backend.backend() != "tensorflow":
        return 1
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    return 1 if context is None else context.num_replicas_in_sync
