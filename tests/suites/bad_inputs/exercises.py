"""Bad inputs for ``companion.exercises``: the exercise checker and its hints."""

import keras
from helpers.badinput import Case, Int, Kind

from companion.exercises import check, hint, list_exercises

IDS = [entry.id for entry in list_exercises()]
EXERCISE_ID = Kind("an exercise id of the book", lambda v: isinstance(v, str) and v in IDS)
LAYER_CLASS = Kind(
    "a keras.layers.Layer subclass",
    lambda v: isinstance(v, type) and issubclass(v, keras.layers.Layer),
)

CASES = [
    Case(
        "check",
        check,
        {"exercise_id": "4.2", "answer": keras.layers.Dropout},
        {"exercise_id": EXERCISE_ID, "answer": LAYER_CLASS},
    ),
    Case(
        "hint",
        hint,
        {"exercise_id": "4.1", "level": 1},
        {"exercise_id": EXERCISE_ID, "level": Int(1, 2)},
    ),
]

EXEMPT = {
    "CheckResult": "a record check returns; users never build one",
    "CheckFailure": "a record inside CheckResult; users never build one",
    "ExerciseEntry": "a record list_exercises returns; users never build one",
}
