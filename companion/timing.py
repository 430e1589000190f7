"""Timing harness for the book's measurements: warm-up, repeats, median and spread.

Chapters time things side by side in one run and report ratios, because absolute times on a
shared machine vary: ``time_call`` times one function, ``compare`` several in turns. The result
of every timed call is fetched to the host (``fetch``: ``keras.ops.convert_to_numpy``, which waits
for the value), so asynchronous work is counted (a GPU's, and JAX's on any device), and the device
is an argument: the GPU path is the CPU path with another device string (``default_device`` picks
the GPU when there is one, in the running backend's spelling).

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from companion._checks import (
    check_callable,
    check_calls,
    check_device,
    check_int,
    check_real,
    check_str,
    describe,
)

# Keras (and TensorFlow, JAX or torch behind it) is imported in the functions that use it:
# importing the harness stays cheap (``python -m companion.bench --help`` answers without them).

#: Limits that refuse a count that would run for days, before any work.
MAX_REPEATS = 1000  # timed repeats, rounds and warm-up calls
MAX_CALLS = 10**6  # calls per repeat (``time_call``'s ``number``), for calls of a microsecond
MAX_TARGET = 60.0  # seconds one round of a call may last (``compare``)


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one timed function (each repeat runs it ``number`` times).

    Attributes:
        median: Median over the repeats, the figure to compare.
        best: Fastest repeat (the least disturbed by other work on the machine).
        spread: Interquartile range of the repeats divided by the median (0.1 = 10 %).
        repeats: How many repeats were measured.
        number: Calls per repeat.
        device: The device string the calls ran under (``None``: the backend's choice).
        times: Seconds per call of each repeat, in the order they ran (in ``compare``, repeat
            ``i`` of every call ran in the same round, side by side).

    Taught in chapter 1, "Going deeper: why the graph is faster".
    """

    median: float
    best: float
    spread: float
    repeats: int
    number: int
    device: str | None
    times: tuple[float, ...] = ()

    @property
    def median_ms(self) -> float:
        """The median in milliseconds.

        Taught in chapter 3, "Speed".
        """
        return self.median * 1e3


def fetch(result: Any) -> Any:
    """Copy every tensor in ``result`` (nested lists, tuples, dicts) to the host as NumPy.

    Waiting for the values is what makes a timing include the device's work: JAX returns before
    it has computed, and so does a GPU. Tensors and ``keras.Variable`` s of the running backend go
    through ``keras.ops.convert_to_numpy``; anything else is returned as it is.

    Example:
        >>> import keras
        >>> fetch({"a": keras.ops.ones(2), "b": [3, "text"]})
        {'a': array([1., 1.], dtype=float32), 'b': [3, 'text']}

    Taught in chapter 12, "Timing without fooling yourself".
    """
    import keras

    def to_host(value: Any) -> Any:
        if isinstance(value, keras.Variable) or keras.ops.is_tensor(value):
            return keras.ops.convert_to_numpy(value)
        return value

    return keras.tree.map_structure(to_host, result)


def time_call(
    fn: Callable[..., Any],
    *args: Any,
    repeats: int = 5,
    number: int = 1,
    warmup: int = 1,
    device: str | None = None,
) -> Timing:
    """Time ``fn(*args)``: ``warmup`` untimed calls, then ``repeats`` timed batches of ``number``.

    The warm-up calls absorb one-off costs (tracing a ``tf.function``, XLA compilation,
    the first memory allocation), which are not what a per-call time should show.

    Args:
        fn: The function to time.
        *args: Its arguments (the same for every call).
        repeats: Timed repeats (1 to ``MAX_REPEATS``); the median over them is the result.
        number: Calls per repeat (1 to ``MAX_CALLS``); raise it for calls far below a millisecond.
        warmup: Untimed calls first (0 to ``MAX_REPEATS``).
        device: A device string such as ``"/CPU:0"`` or ``"/GPU:0"`` to run under (``tf.device``
            on TensorFlow, ``keras.device`` on JAX and PyTorch, where ``"cpu:0"``, ``"gpu:0"``
            are the usual spelling); ``None`` leaves placement to the backend.

    Returns:
        A ``Timing`` with seconds per call.

    Raises:
        TypeError: If ``fn`` is not callable or a count is not an int.
        ValueError: If a count is out of range, or ``device`` names no device the backend has.

    Example:
        >>> timing = time_call(time.sleep, 0.001, repeats=3)
        >>> timing.median >= 0.001, timing.repeats
        (True, 3)

    Taught in chapter 3, "Speed".
    """
    check_callable(fn, "fn")
    repeats = check_int(repeats, "repeats", minimum=1, maximum=MAX_REPEATS)
    number = check_int(number, "number", minimum=1, maximum=MAX_CALLS)
    warmup = check_int(warmup, "warmup", minimum=0, maximum=MAX_REPEATS)
    with _device_scope(device):
        for _ in range(warmup):
            fetch(fn(*args))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(number):
                fetch(fn(*args))
            times.append((time.perf_counter() - start) / number)
    return _timing(times, number, device)


def compare(
    calls: Mapping[str, Callable[[], Any]],
    *,
    repeats: int = 5,
    device: str | None = None,
    target: float = 0.02,
) -> dict[str, Timing]:
    """Time several calls side by side, alternating: each round runs every call once in turn.

    On a shared machine the load changes from second to second; alternating spreads it over
    all the calls alike, so their ratios are steadier than their times. Each call gets one
    untimed warm-up (tracing, compilation), then one timed call that sets how many calls make
    one round of it (about ``target`` seconds, between 1 and 1000), then ``repeats`` rounds.
    Results are fetched to the host (``fetch``).

    Args:
        calls: Method name -> function of no arguments (close over the inputs).
        repeats: Rounds (1 to ``MAX_REPEATS``); each call's median is over them.
        device: Device string to run under (as ``time_call``); ``None``: the backend's choice.
        target: Seconds one round of a call should last (> 0, at most ``MAX_TARGET``).

    Returns:
        Method name -> ``Timing`` (seconds per call), in the order of ``calls``.

    Raises:
        TypeError: If ``calls`` is not a mapping of callables or a setting has the wrong type.
        ValueError: If ``calls`` is empty, a setting is out of range or the device is unknown.

    Example:
        >>> timings = compare({"short": lambda: time.sleep(0.001),
        ...                    "long": lambda: time.sleep(0.003)}, repeats=3)
        >>> timings["long"].median > timings["short"].median
        True

    Taught in chapter 1, "Going deeper: why the graph is faster".
    """
    calls = check_calls(calls, "calls")
    repeats = check_int(repeats, "repeats", minimum=1, maximum=MAX_REPEATS)
    target = check_real(target, "target", above=0, maximum=MAX_TARGET)
    with _device_scope(device):
        for call in calls.values():
            fetch(call())
        numbers = {name: _calls_per_round(call, target) for name, call in calls.items()}
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(repeats):
            for name, call in calls.items():
                start = time.perf_counter()
                for _ in range(numbers[name]):
                    fetch(call())
                times[name].append((time.perf_counter() - start) / numbers[name])
    return {name: _timing(times[name], numbers[name], device) for name in calls}


def default_device() -> str:
    """The GPU when the running backend can place work on one, else the CPU, in its spelling.

    TensorFlow: ``"/GPU:0"`` or ``"/CPU:0"``. It asks for the logical devices, where ops run:
    under the GPU stand-in (``companion.devices``) a GPU is listed but every op runs on the CPU,
    and so do the timings. JAX and PyTorch: ``"gpu:0"`` or ``"cpu:0"`` (``keras.device``'s form).

    Example:
        >>> default_device() in ("/GPU:0", "/CPU:0", "gpu:0", "cpu:0")
        True

    Taught in chapter 12, "The device and the sizes".
    """
    from companion._backend import backend

    devices = _DEVICE_LISTS[backend()]()
    return (
        _GPU_NAMES[backend()]
        if any(d.startswith("gpu") for d in devices)
        else _CPU_NAMES[backend()]
    )


def _timing(times: list[float], number: int, device: str | None) -> Timing:
    """The ``Timing`` of repeats that took ``times`` seconds per call each."""
    median = statistics.median(times)
    if len(times) > 1:
        quartiles = statistics.quantiles(times, n=4, method="inclusive")
    else:
        quartiles = [median] * 3
    spread = (quartiles[2] - quartiles[0]) / median if median > 0 else 0.0
    return Timing(median, min(times), spread, len(times), number, device, tuple(times))


def _calls_per_round(call: Callable[[], Any], target: float) -> int:
    """How many calls of ``call`` last about ``target`` seconds (one timed call decides)."""
    start = time.perf_counter()
    fetch(call())
    return max(1, min(1000, round(target / max(time.perf_counter() - start, 1e-9))))


def _tensorflow_devices() -> list[str]:
    """TensorFlow's logical devices as ``"gpu:0"``, ``"cpu:0"``."""
    import tensorflow as tf

    return [
        f"{d.device_type.lower()}:{d.name.rsplit(':', 1)[1]}"
        for d in tf.config.list_logical_devices()
    ]


def _jax_devices() -> list[str]:
    """JAX's devices, with the CPU always among them (``keras.device`` can place on it)."""
    import jax

    devices = [f"{d.platform}:{d.id}" for d in jax.devices()]
    return devices + [f"cpu:{d.id}" for d in jax.devices("cpu") if f"cpu:{d.id}" not in devices]


def _torch_devices() -> list[str]:
    """The CPU, and each CUDA GPU torch sees as ``"gpu:i"`` (Keras's name for ``"cuda:i"``)."""
    import torch

    return ["cpu:0"] + [f"gpu:{i}" for i in range(torch.cuda.device_count())]


#: How each backend lists its devices, and spells the default GPU and CPU.
_DEVICE_LISTS = {"tensorflow": _tensorflow_devices, "jax": _jax_devices, "torch": _torch_devices}
_GPU_NAMES = {"tensorflow": "/GPU:0", "jax": "gpu:0", "torch": "gpu:0"}
_CPU_NAMES = {"tensorflow": "/CPU:0", "jax": "cpu:0", "torch": "cpu:0"}


def _device_scope(device: str | None) -> Any:
    """A scope that places work on ``device`` after checking the backend has it; no-op for None.

    TensorFlow: ``tf.device``. JAX and PyTorch: ``keras.device``, with ``"/CPU:0"`` read as
    ``"cpu:0"`` and ``"cuda"`` as ``"gpu"``, so one device string serves every backend.
    """
    from companion._backend import backend

    if device is None:
        return contextlib.nullcontext()
    if backend() == "tensorflow":
        import tensorflow as tf

        return tf.device(check_device(device))
    import keras

    return keras.device(_keras_device(device, _DEVICE_LISTS[backend()]()))


def _keras_device(device: Any, known: list[str]) -> str:
    """``device`` as ``keras.device`` spells it (``"gpu:0"``), if it is one of ``known``."""
    from companion._backend import BACKEND_NAMES, backend

    check_str(device, "device", "a device string such as '/CPU:0'")
    spelled = device.lower().lstrip("/").replace("cuda", "gpu")
    kind, _, index = spelled.partition(":")
    if kind not in ("cpu", "gpu", "tpu") or not (index == "" or index.isdigit()):
        raise ValueError(
            f"device: expected a device string such as '/GPU:0', got {describe(device)}"
        )
    matches = [d for d in known if d.split(":")[0] == kind and index in ("", d.split(":")[1])]
    if not matches:
        raise ValueError(
            f"device: expected one of the devices {BACKEND_NAMES[backend()]} has, {known}, "
            f"got {describe(device)}"
        )
    return matches[0]
