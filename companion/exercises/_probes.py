"""Small experiments that checks of several chapters run on an answer: a ``.keras`` round trip
and a config through JSON."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any


def custom_objects(*classes: type) -> dict[str, type]:
    """``classes`` under both names Keras may look them up by (class name, registered name)."""
    import keras

    found = {}
    for cls in classes:
        found[cls.__name__] = cls
        found[keras.saving.get_registered_name(cls)] = cls
    return found


def save_and_reload(model: Any, *classes: type) -> Any:
    """``model`` saved to a ``.keras`` file and loaded back (``classes`` as custom objects)."""
    import keras

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "answer.keras"
        model.save(path)
        return keras.saving.load_model(path, custom_objects=custom_objects(*classes))


def config_through_json(layer: Any) -> Any:
    """A new layer of ``layer``'s class, made from its config after a trip through JSON."""
    return type(layer).from_config(json.loads(json.dumps(layer.get_config())))
