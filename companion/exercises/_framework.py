"""The pieces every chapter's exercise checks are made of: kinds of answer, checks, results.

A chapter's file (``_ch04.py`` …) lists its exercises as ``Exercise`` records. Each check is a
plain function of the answer (and a ``Context`` that caches work several checks share) that
raises ``Failed`` with what was expected and what came; ``run`` turns that, or any exception the
answer raises, into one printed line per check and a ``CheckResult``.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from companion._checks import describe
from companion.notebook import PAGE_WIDTH, describe_error


class Failed(AssertionError):
    """Raised by a check: the answer does not do what the exercise asks (message says why)."""


def expect(condition: object, message: str) -> None:
    """Raise ``Failed(message)`` unless ``condition`` holds."""
    if not condition:
        raise Failed(message)


@dataclass(frozen=True)
class Kind:
    """What an exercise asks the reader to write: ``what`` names it in messages."""

    what: str
    accepts: Callable[[Any], bool]


def keras_subclass(path: str) -> Kind:
    """A kind of answer: a subclass of ``keras.<path>`` (the class itself, not an instance)."""

    def accepts(answer: Any) -> bool:
        import keras

        return isinstance(answer, type) and issubclass(answer, attrgetter(path)(keras))

    return Kind(f"a keras.{path} subclass (the class, not an instance)", accepts)


def keras_instance(path: str) -> Kind:
    """A kind of answer: an instance of ``keras.<path>``."""

    def accepts(answer: Any) -> bool:
        import keras

        return isinstance(answer, attrgetter(path)(keras))

    return Kind(f"a keras.{path} instance", accepts)


LAYER_CLASS = keras_subclass("layers.Layer")
MODEL_CLASS = keras_subclass("Model")
OPTIMIZER_CLASS = keras_subclass("optimizers.Optimizer")
CALLBACK_CLASS = keras_subclass("callbacks.Callback")
MODEL = keras_instance("Model")
FUNCTION = Kind(
    "a function (a callable that is not a class)",
    lambda answer: callable(answer) and not isinstance(answer, type),
)
CLASS = Kind("a class", lambda answer: isinstance(answer, type))
MAPPING = Kind("a dict", lambda answer: isinstance(answer, dict))


@dataclass
class Context:
    """Work several checks of one answer share, done once: ``once(name, make)``."""

    answer: Any
    _cache: dict[str, Any] = field(default_factory=dict)

    def once(self, name: str, make: Callable[[], Any]) -> Any:
        """``make()``, called the first time ``name`` is asked for; its result or error after."""
        if name not in self._cache:
            try:
                self._cache[name] = (True, make())
            except Exception as error:  # noqa: BLE001 - reported by every check that needs it
                self._cache[name] = (False, error)
        ok, value = self._cache[name]
        if not ok:
            raise value
        return value


Check = Callable[[Any, Context], None]


@dataclass(frozen=True)
class Exercise:
    """One exercise: its id and title as the chapter prints them, the kind of answer it asks
    for, its checks (each a function whose docstring's first line says what it checks) and its
    hints, from a nudge to a near-answer, none of them the solution."""

    id: str
    title: str
    kind: Kind
    checks: tuple[Check, ...]
    hints: tuple[str, ...]


@dataclass(frozen=True)
class CheckFailure:
    """One failed check: what it checks, and what was expected and what came.

    Taught in every chapter, "Exercises".
    """

    check: str
    message: str


@dataclass(frozen=True)
class CheckResult:
    """What ``check`` found: ``passed`` is True when every check passed; ``failures`` lists the
    others (``CheckFailure``: ``check`` and ``message``).

    Taught in every chapter, "Exercises".
    """

    exercise_id: str
    checks: int
    failures: tuple[CheckFailure, ...]

    @property
    def passed(self) -> bool:
        return not self.failures


def check_name(check: Check) -> str:
    """The first line of a check's docstring: what it checks."""
    doc = inspect.getdoc(check) or check.__name__.replace("_", " ")
    return doc.splitlines()[0].rstrip(".")


def _failure_message(error: Exception) -> str:
    if isinstance(error, Failed):
        return str(error)
    return "the answer raised " + describe_error(error)


def run(exercise: Exercise, answer: Any) -> CheckResult:
    """Run ``exercise``'s checks on ``answer``, print one line per check and a verdict."""
    if not exercise.kind.accepts(answer):
        raise TypeError(
            f"answer: expected {exercise.kind.what} for exercise {exercise.id} "
            f"({exercise.title}), got {describe(answer)}"
        )
    context = Context(answer)
    failures = []
    for check in exercise.checks:
        name = check_name(check)
        try:
            check(answer, context)
        except Exception as error:  # noqa: BLE001 - a wrong or broken answer is a result
            failures.append(CheckFailure(name, _failure_message(error)))
            _print_line(f"✗ {name}: {failures[-1].message}")
        else:
            _print_line(f"✓ {name}")
    total = len(exercise.checks)
    verdict = "correct" if not failures else "not yet"
    _print_line(f"{exercise.id} {verdict}: {total - len(failures)} of {total} checks passed.")
    return CheckResult(exercise.id, total, tuple(failures))


def _print_line(text: str) -> None:
    print(textwrap.fill(text, PAGE_WIDTH, subsequent_indent="    ", break_on_hyphens=False))
