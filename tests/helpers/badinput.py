"""The project's own fuzzer: every public name of the companion, one argument at a time made bad.

Each module has a table, ``tests/suites/bad_inputs/<module>.py``, with one :class:`Case` per public
name: a call that works (``valid``) and, for each argument, the :class:`Kind` of value it takes. The
fuzzer replaces one argument at a time by every value of :data:`POOL` (and the kind's own extra
bad values) that the kind does not accept, and requires the project's promise of a clean error::

    <argument>: expected <what>, got <type> <value>

as a TypeError or ValueError whose message starts with that argument's name (or one of the names
the case lists for it: a pair of bounds may name either). ``python tests/helpers/badinput.py``
prints the share of each outcome per module instead of asserting it (the closing note of issue 16
quotes it).
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

NAN = math.nan
INF = math.inf


class _Opaque:
    """An object no argument takes."""

    def __repr__(self) -> str:
        return "<opaque>"


#: Values tried for every argument (those its kind accepts are skipped).
POOL: tuple[Any, ...] = (
    None,
    True,
    "3",
    "",
    b"x",
    2.5,
    0,
    -1,
    1,
    10**12,
    1e300,
    -1e300,
    NAN,
    INF,
    -INF,
    [],
    (),
    {},
    [None],
    {"a": 1},
    _Opaque(),
    np.array([[1.0, 2.0]], "float32"),
)


@dataclass(frozen=True)
class Kind:
    """What one argument takes: ``accepts(value)`` is True for every value it must accept."""

    what: str
    accepts: Callable[[Any], bool]
    extra_bad: tuple[Any, ...] = ()  # bad values ``accepts`` cannot tell (NaN inside an array, ...)

    def bad_values(self) -> list[Any]:
        return [value for value in POOL if not _safe_accepts(self, value)] + list(self.extra_bad)

    def or_none(self) -> Kind:
        return Kind(f"{self.what} or None", lambda v: v is None or self.accepts(v), self.extra_bad)


def _safe_accepts(kind: Kind, value: Any) -> bool:
    try:
        return bool(kind.accepts(value))
    except Exception:
        return False


def is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_real(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def Int(minimum: int | None = None, maximum: int | None = None) -> Kind:
    """An int in ``[minimum, maximum]``."""
    return Kind(
        f"int [{minimum}, {maximum}]",
        lambda v: (
            is_int(v) and (minimum is None or v >= minimum) and (maximum is None or v <= maximum)
        ),
    )


def Real(
    minimum: float | None = None, maximum: float | None = None, *, above: float | None = None
) -> Kind:
    """A finite real number in range (bounds as in ``companion._checks.check_real``)."""
    return Kind(
        f"real [{minimum}, {maximum}] > {above}",
        lambda v: (
            is_real(v)
            and math.isfinite(v)
            and (minimum is None or v >= minimum)
            and (maximum is None or v <= maximum)
            and (above is None or v > above)
        ),
    )


def Bool() -> Kind:
    return Kind("bool", lambda v: isinstance(v, (bool, np.bool_)))


def Str(*choices: str) -> Kind:
    """A non-empty str (one of ``choices`` when given)."""
    return Kind(
        f"str in {choices}" if choices else "str",
        lambda v: isinstance(v, str) and v != "" and (not choices or v in choices),
        extra_bad=("not-a-choice",) if choices else (),
    )


def Instance(*types: type, what: str = "") -> Kind:
    return Kind(what or f"instance of {types}", lambda v: isinstance(v, types))


def Callable_() -> Kind:
    return Kind("callable", callable)


def Array(
    *, ranks: Sequence[int] = (), floating: bool = True, extra_bad: Sequence[Any] = ()
) -> Kind:
    """An array-like of one of ``ranks`` (any rank when empty), floating point when ``floating``."""

    def accepts(value: Any) -> bool:
        if isinstance(value, (str, bytes, Mapping)) or value is None or isinstance(value, _Opaque):
            return False
        array = np.asarray(value)
        if array.dtype == object:
            return False
        if floating and not np.issubdtype(array.dtype, np.floating):
            return False
        return not ranks or array.ndim in ranks

    return Kind(f"array of rank {tuple(ranks)}", accepts, tuple(extra_bad))


def Seq(item: Kind, *, min_length: int = 1) -> Kind:
    """A list or tuple of at least ``min_length`` items, each of kind ``item``."""
    return Kind(
        f"sequence of {item.what}",
        lambda v: (
            isinstance(v, (list, tuple))
            and len(v) >= min_length
            and all(_safe_accepts(item, e) for e in v)
        ),
    )


def Anything() -> Kind:
    """An argument that takes any value (listed so that coverage sees it was considered)."""
    return Kind("anything", lambda v: True)


@dataclass
class Case:
    """One public name under the fuzzer.

    Args:
        name: The public name (``"swish"``, ``"GaussianBlur"``, ``"GaussianBlur.__call__"``).
        call: Calls the name with keyword arguments.
        valid: Keyword arguments of a call that works; each is replaced in turn.
        kinds: The kind of each argument that is fuzzed.
        names: For an argument whose bad values may be reported under another name (a pair of
            bounds), the names the message may start with.
    """

    name: str
    call: Callable[..., Any]
    valid: Mapping[str, Any] | Callable[[], Mapping[str, Any]]
    kinds: Mapping[str, Kind]
    names: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def arguments(self) -> Mapping[str, Any]:
        return self.valid() if callable(self.valid) else self.valid


CLEAN, OTHER_ARGUMENT, FOREIGN_ERROR, ACCEPTED = (
    "clean",
    "names another argument",
    "other error",
    "accepted",
)
TIMED_OUT = "timed out"  # only with report()'s time limit: a huge value accepted and still running
_PROJECT_FORM = re.compile(r"^([\w.\[\]'\"-]+): expected .+, got ", re.S)


def outcome(case: Case, argument: str, value: Any) -> tuple[str, str]:
    """Call ``case`` with ``argument=value``; return (outcome, detail)."""
    arguments = {**case.arguments(), argument: value}
    try:
        case.call(**arguments)
    except _TimeLimit:
        return TIMED_OUT, "still running"
    except (TypeError, ValueError) as error:
        message = str(error)
        match = _PROJECT_FORM.match(message)
        if not match:
            return FOREIGN_ERROR, f"{type(error).__name__}: {message[:200]}"
        named = re.split(r"[\[.]", match.group(1))[0]
        allowed = case.names.get(argument, (argument,))
        if named in allowed:
            return CLEAN, message
        return OTHER_ARGUMENT, f"{type(error).__name__}: {message[:200]}"
    except (Exception, SystemExit) as error:  # noqa: BLE001 - every other error is what the fuzzer reports
        return FOREIGN_ERROR, f"{type(error).__name__}: {str(error)[:200]}"
    return ACCEPTED, "no error"


class _TimeLimit(BaseException):
    """Raised by report()'s alarm in a call that runs too long.

    A BaseException, so that no `except Exception` in the code under test catches it.
    """


def _time_limit(signum: int, frame: Any) -> None:
    raise _TimeLimit


def load_tables() -> dict[str, list[Case]]:
    """Every module's cases, keyed by companion module name."""
    from suites import bad_inputs

    tables = {}
    for info in pkgutil.iter_modules(bad_inputs.__path__):
        tables[info.name] = importlib.import_module(f"suites.bad_inputs.{info.name}").CASES
    return tables


def exemptions() -> dict[str, dict[str, str]]:
    """Per module, public names the tables leave out, each with its reason."""
    from suites import bad_inputs

    return {
        info.name: getattr(importlib.import_module(f"suites.bad_inputs.{info.name}"), "EXEMPT", {})
        for info in pkgutil.iter_modules(bad_inputs.__path__)
    }


def report(seconds: int = 10) -> None:
    """Print the share of each outcome per module (no asserts).

    Each call gets ``seconds`` to finish.
    """
    import signal

    signal.signal(signal.SIGALRM, _time_limit)
    kinds = (CLEAN, OTHER_ARGUMENT, FOREIGN_ERROR, ACCEPTED, TIMED_OUT)
    totals: Counter = Counter()
    for module, cases in sorted(load_tables().items()):
        counts: Counter = Counter()
        for case in cases:
            for argument, kind in case.kinds.items():
                for value in kind.bad_values():
                    signal.alarm(seconds)
                    result, detail = outcome(case, argument, value)
                    signal.alarm(0)
                    counts[result] += 1
                    if result != CLEAN and "-v" in sys.argv:
                        print(
                            f"  {module}.{case.name}({argument}={value!r:.40}): "
                            f"{result}: {detail[:120]}"
                        )
        totals.update(counts)
        calls = sum(counts.values())
        print(f"{module:14} {calls:5} calls, {counts[CLEAN] / max(1, calls):6.1%} clean")
    total = sum(totals.values())
    print(
        f"{'all':14} {total:5} calls: " + ", ".join(f"{totals[k] / total:.1%} {k}" for k in kinds)
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parents[1]))
    report()
