"""Every chapter's exercises by id, read once from the chapter files (``_ch*``, ``_a*``)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any

from companion._checks import describe
from companion.exercises._framework import Exercise

_REGISTRY: dict[str, Exercise] | None = None


def _sort_key(exercise_id: str) -> tuple[int, int]:
    chapter, number = exercise_id.split(".")
    return (1000 if chapter == "A" else int(chapter), int(number))


def exercises() -> dict[str, Exercise]:
    """Every chapter's exercises by id, in the book's order (read once, from ``_ch*``/``_a*``)."""
    global _REGISTRY
    if _REGISTRY is None:
        found = {}
        for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
            if info.name.startswith(("_ch", "_a")):
                module = importlib.import_module(f"{__package__}.{info.name}")
                found.update({exercise.id: exercise for exercise in module.EXERCISES})
        _REGISTRY = {key: found[key] for key in sorted(found, key=_sort_key)}
    return _REGISTRY


def find_exercise(exercise_id: Any) -> Exercise:
    """The exercise ``exercise_id`` (a str such as ``"4.1"``).

    Raises:
        TypeError: If ``exercise_id`` is not a str.
        ValueError: If there is no such exercise (the message lists the ids).
    """
    registry = exercises()
    if not isinstance(exercise_id, str):
        raise TypeError(
            f"exercise_id: expected an exercise id as a str, such as '4.1', got "
            f"{describe(exercise_id)}"
        )
    if exercise_id not in registry:
        raise ValueError(
            f"exercise_id: expected one of {', '.join(registry)}, got {describe(exercise_id)}"
        )
    return registry[exercise_id]
