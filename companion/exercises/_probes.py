"""Small experiments that checks of several chapters run on an answer: a ``.keras`` round trip,
a config through JSON, a gradient against central differences."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


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


def central_difference(function: Any, x: np.ndarray, delta: float = 1e-3) -> np.ndarray:
    """The gradient of ``sum(function(x))`` by central differences in float64, entry by entry."""
    x = np.asarray(x, "float64")
    gradient = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[index] = delta
        up = np.sum(np.asarray(function(x + step), "float64"))
        down = np.sum(np.asarray(function(x - step), "float64"))
        gradient[index] = (up - down) / (2 * delta)
    return gradient
