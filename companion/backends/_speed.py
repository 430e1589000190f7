"""Chapter 8's step timed on each backend, in interleaved rounds of child processes."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

from companion._backend import BACKENDS
from companion._checks import check_int
from companion.backends._runner import run_on_backend
from companion.backends._steps import step_data, step_model
from companion.backends._table import check_backends


def step_times(repeats: int = 5, steps: int = 64) -> list[float]:
    """Milliseconds per step of ``StepModel``'s ``fit`` (batches of 16), one figure per repeat:
    each the mean over an epoch of ``steps`` steps, after one epoch of warm-up (compiling).

    Taught in chapter 14, "Speed, side by side".
    """
    x, y = step_data(16 * steps)
    model = step_model(custom_step=True)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)  # traces and compiles the step
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        times.append(1000 * (time.perf_counter() - start) / steps)
    return times


def compare_step_speed(
    rounds: int = 2, backends: Sequence[str] = BACKENDS, *, repeats: int = 5
) -> dict[str, dict[str, float]]:
    """Time chapter 8's step on each backend: ``rounds`` rounds, each one child per backend in
    turn (so that a slow moment of the machine hits every backend alike).

    Args:
        rounds: Rounds of children (an int >= 1).
        backends: The backends, the first being the reference of the ratios.
        repeats: Timed epochs in each child (an int >= 1).

    Returns:
        A dict by backend name, each with ``median`` ms per step over every repeat of every
        round, ``low`` and ``high`` (the smallest and largest figure) and ``ratio`` (median
        over the first backend's median).

    Raises:
        TypeError: If ``rounds`` or ``repeats`` is not an int, ``backends`` not a list.
        ValueError: If a number is below 1 or a backend unknown.

    Taught in chapter 14, "Speed, side by side".
    """
    rounds = check_int(rounds, "rounds", minimum=1)
    repeats = check_int(repeats, "repeats", minimum=1)
    backends = check_backends(backends)
    figures: dict[str, list[float]] = {b: [] for b in backends}
    for _ in range(rounds):
        for b in backends:
            figures[b] += run_on_backend(step_times, b, repeats)
    reference = statistics.median(figures[backends[0]])
    return {
        b: {
            "median": statistics.median(times),
            "low": min(times),
            "high": max(times),
            "ratio": statistics.median(times) / reference,
        }
        for b, times in figures.items()
    }
