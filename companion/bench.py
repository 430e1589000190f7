"""Timing harness for the book's measurements: warm-up, repeats, median and spread.

Chapters time things side by side in one run and report ratios, because absolute times on
a shared machine vary. ``time_call`` is the one way they do it. The result of every timed
call is fetched to the host (``.numpy()``), so asynchronous GPU work is counted, and the
device is an argument: the GPU path is the CPU path with another device string.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from companion._checks import check_int


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one timed function (each repeat runs it ``number`` times).

    Attributes:
        median: Median over the repeats, the figure to compare.
        best: Fastest repeat (the least disturbed by other work on the machine).
        spread: Interquartile range of the repeats divided by the median (0.1 = 10 %).
        repeats: How many repeats were measured.
        number: Calls per repeat.
        device: The device string the calls ran under (``None``: TensorFlow's choice).
    """

    median: float
    best: float
    spread: float
    repeats: int
    number: int
    device: str | None

    @property
    def median_ms(self) -> float:
        """The median in milliseconds."""
        return self.median * 1e3


def fetch(result: Any) -> Any:
    """Copy every tensor in ``result`` (nested lists, tuples, dicts) to the host as NumPy.

    Waiting for the values is what makes a timing include the device's work.
    """
    import tensorflow as tf

    return tf.nest.map_structure(lambda value: value.numpy() if hasattr(value, "numpy") else value, result)


def time_call(
    fn: Callable[..., Any],
    *args: Any,
    repeats: int = 5,
    number: int = 1,
    warmup: int = 1,
    device: str | None = None,
) -> Timing:
    """Time ``fn(*args)``: ``warmup`` untimed calls, then ``repeats`` timed batches of ``number`` calls.

    The warm-up calls absorb one-off costs (tracing a ``tf.function``, XLA compilation,
    the first memory allocation), which are not what a per-call time should show.

    Args:
        fn: The function to time.
        *args: Its arguments (the same for every call).
        repeats: Timed repeats (>= 1); the median over them is the result.
        number: Calls per repeat (>= 1); raise it for calls far below a millisecond.
        warmup: Untimed calls first (>= 0).
        device: A TensorFlow device string such as ``"/CPU:0"`` or ``"/GPU:0"`` to run under
            (``tf.device``); ``None`` leaves placement to TensorFlow.

    Returns:
        A ``Timing`` with seconds per call.

    Raises:
        TypeError: If ``fn`` is not callable or a count is not an int.
        ValueError: If a count is out of range, or ``device`` names no device TensorFlow has.

    Example:
        >>> import time
        >>> timing = time_call(time.sleep, 0.001, repeats=3)
        >>> timing.median >= 0.001, timing.repeats
        (True, 3)
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")
    repeats = check_int(repeats, "repeats", minimum=1)
    number = check_int(number, "number", minimum=1)
    warmup = check_int(warmup, "warmup", minimum=0)
    with _device_scope(device):
        for _ in range(warmup):
            fetch(fn(*args))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(number):
                fetch(fn(*args))
            times.append((time.perf_counter() - start) / number)
    median = statistics.median(times)
    quartiles = statistics.quantiles(times, n=4, method="inclusive") if repeats > 1 else [median] * 3
    spread = (quartiles[2] - quartiles[0]) / median if median > 0 else 0.0
    return Timing(median, min(times), spread, repeats, number, device)


def _device_scope(device: str | None) -> Any:
    """``tf.device(device)`` after checking that TensorFlow has that device; a no-op for None."""
    import contextlib

    if device is None:
        return contextlib.nullcontext()
    if not isinstance(device, str):
        raise TypeError(f"device: expected a device string such as '/CPU:0', got {type(device).__name__}")
    import tensorflow as tf

    known = [tf.DeviceSpec.from_string(d.name) for d in tf.config.list_logical_devices()]
    try:
        wanted = tf.DeviceSpec.from_string(device if device.startswith("/") else "/" + device)
    except ValueError as error:
        raise ValueError(f"device: expected a device string such as '/GPU:0', got {device!r}") from error
    if not any(
        (k.device_type or "").upper() == (wanted.device_type or "").upper()
        and wanted.device_index in (None, k.device_index)
        for k in known
    ):
        names = [k.to_string() for k in known]
        raise ValueError(f"device: expected one of the devices TensorFlow has, {names}, got {device!r}")
    return tf.device(device)
