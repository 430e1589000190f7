"""Check your answers to the book's exercises: ``check``, ``hint`` and ``list_exercises``.

Each chapter ends with exercises, numbered by chapter (``"4.1"`` is chapter 4's first; the
appendix's are ``"A.1"`` to ``"A.3"``). Write the answer the exercise asks for (a layer class,
a function, a model, ...), then::

    from companion.exercises import check, hint
    check("4.1", ConstrainedDense)   # one line per check, then a verdict
    hint("4.1")                      # a nudge; hint("4.1", level=2) says more

``check`` runs behavioural checks on the answer (a gradient against finite differences, a
``.keras`` round trip, agreement with a Keras built-in, ...), never a comparison with the
solution's source. A wrong answer, or one that raises, is reported, never raised.

Backends: TensorFlow, JAX, PyTorch, except the checks of chapters 1 to 13 and the appendix
(TensorFlow only).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from companion._checks import check_int
from companion.exercises._framework import CheckFailure, CheckResult, run
from companion.exercises._registry import exercises, find_exercise
from companion.notebook import print_wrapped

__all__ = ["CheckFailure", "CheckResult", "ExerciseEntry", "check", "hint", "list_exercises"]


class ExerciseEntry(NamedTuple):
    """An exercise as the book prints it: ``id`` (``"4.1"``) and ``title``.

    Taught in every chapter, "Exercises".
    """

    id: str
    title: str


def list_exercises() -> list[ExerciseEntry]:
    """Every exercise in the book, in order: ``ExerciseEntry(id, title)``.

    Example:
        >>> list_exercises()[0]
        ExerciseEntry(id='1.1', title='Ops of a convolution.')

    Taught in every chapter, "Exercises".
    """
    return [ExerciseEntry(exercise.id, exercise.title) for exercise in exercises().values()]


def check(exercise_id: str, answer: Any) -> CheckResult:
    """Run exercise ``exercise_id``'s checks on ``answer`` and print one line per check.

    Args:
        exercise_id: The exercise, as the chapter numbers it (a str such as ``"4.1"``).
        answer: What the exercise asks you to write (its text says: a layer class, a
            function, a model, ...).

    Returns:
        A ``CheckResult``: ``passed`` (True when every check passed) and ``failures`` (each
        a ``CheckFailure`` with the check and what was expected and what came). A wrong
        answer, or one that raises inside a check, is a failure here, never an exception.

    Raises:
        TypeError: If ``exercise_id`` is not a str, or ``answer`` is not the kind of thing
            the exercise asks for (the message names the kind).
        ValueError: If there is no exercise ``exercise_id`` (the message lists the ids).

    Taught in every chapter, "Exercises".
    """
    return run(find_exercise(exercise_id), answer)


def hint(exercise_id: str, level: int = 1) -> None:
    """Print hint ``level`` for an exercise: 1 is a nudge, higher levels say more.

    Args:
        exercise_id: The exercise, as the chapter numbers it (a str such as ``"4.1"``).
        level: Which hint (an int from 1 to the exercise's number of hints).

    Raises:
        TypeError: If ``exercise_id`` is not a str, or ``level`` not an int.
        ValueError: If there is no such exercise, or no such hint.

    Taught in every chapter, "Exercises".
    """
    exercise = find_exercise(exercise_id)
    level = check_int(level, "level", minimum=1, maximum=len(exercise.hints))
    print_wrapped(
        f"Hint {level} of {len(exercise.hints)} for {exercise.id} ({exercise.title}) "
        f"{exercise.hints[level - 1]}"
    )
