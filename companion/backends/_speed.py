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
from companion.devices import pin_runtime


def step_times(repeats: int = 5, steps: int = 64) -> dict:
    """Milliseconds per step of ``StepModel``'s ``fit`` (batches of 16), one figure per repeat
    (``times``): each the mean over an epoch of ``steps`` steps, after one epoch of warm-up
    (compiling); and the ``device`` it ran on (``pin_runtime``'s).

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
    return {"times": times, "device": pin_runtime()["device"]}


def compare_step_speed(
    rounds: int = 2, backends: Sequence[str] = BACKENDS, *, repeats: int = 5
) -> dict[str, dict[str, float | str]]:
    """Time chapter 8's step on each backend: ``rounds`` rounds, each one child per backend in
    turn (so that a slow moment of the machine hits every backend alike).

    Args:
        rounds: Rounds of children (an int >= 1).
        backends: The backends, the first being the reference of the ratios.
        repeats: Timed epochs in each child (an int >= 1).

    Returns:
        A dict by backend name, each with ``median`` ms per step over every repeat of every
        round, ``low`` and ``high`` (the smallest and largest figure), ``ratio`` (median
        over the first backend's median) and ``device``, where its children ran (``"CPU"``,
        ``"GPU"`` or ``"GPU stand-in"``).

    Raises:
        TypeError: If ``rounds`` or ``repeats`` is not an int, ``backends`` not a list.
        ValueError: If a number is below 1 or a backend unknown.

    Taught in chapter 14, "Speed, side by side".
    """
    rounds = check_int(rounds, "rounds", minimum=1)
    repeats = check_int(repeats, "repeats", minimum=1)
    backends = check_backends(backends)
    figures: dict[str, list[float]] = {b: [] for b in backends}
    devices = {}
    for _ in range(rounds):
        for b in backends:
            timed = run_on_backend(step_times, b, repeats)
            figures[b] += timed["times"]
            devices[b] = timed["device"]
    reference = statistics.median(figures[backends[0]])
    return {
        b: {
            "median": statistics.median(times),
            "low": min(times),
            "high": max(times),
            "ratio": statistics.median(times) / reference,
            "device": devices[b],
        }
        for b, times in figures.items()
    }
