"""Timing harness for the book's measurements: warm-up, repeats, median and spread.

Chapters time things side by side in one run and report ratios, because absolute times on
a shared machine vary. ``time_call`` is the one way they do it. The result of every timed
call is fetched to the host (``.numpy()``), so asynchronous GPU work is counted, and the
device is an argument: the GPU path is the CPU path with another device string.
"""

from __future__ import annotations

import statistics
import sys
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


def _epoch_end_times(run: Callable[[Callable[[], None]], Any]) -> list[float]:
    """``run(mark)`` trains, calling ``mark()`` after each epoch; the clock reading of each call."""
    times: list[float] = []
    run(lambda: times.append(time.perf_counter()))
    return times


def training_loop_vs_fit(
    *, examples: int = 1024, batch_size: int = 64, epochs: int = 5, repeats: int = 5, seed: int = 0
) -> dict[str, Any]:
    """Training throughput of ``companion.training.fit`` next to ``model.fit`` (examples per second).

    Both train the chapter-7 model (``companion.models.functional_multimodal`` on
    ``make_shapes(examples)`` at 32x32, batches of ``batch_size``, Adam, sparse cross-entropy,
    an accuracy metric, no progress output) from the same initial weights, on the same
    ``tf.data`` pipeline, alternately, ``repeats`` times. Each run lasts ``epochs`` epochs and
    is timed from the end of its first epoch to the end of its last, so one-off costs (tracing
    the step, which the custom loop does on every call and ``model.fit`` on its first) are left
    out: what remains is the steady-state cost of the steps, the loop around them and the
    metrics. The ratio is custom loop / ``model.fit``: 1.0 means as fast, above 1 faster.

    Args:
        examples: Training examples per epoch (>= batch_size).
        batch_size: Examples per step (>= 1).
        epochs: Epochs per run (>= 2: the first is not timed).
        repeats: Runs of each (>= 1); the medians are reported.
        seed: Seed of the data and of the initial weights.

    Returns:
        A dict with ``name``, ``ratio`` (custom / fit throughput), ``custom_median`` and
        ``reference_median`` (``model.fit``'s; examples/s), ``unit``, ``device``, ``versions``
        and the ``settings``.
    """
    import keras
    import tensorflow as tf

    from companion.data import make_shapes
    from companion.models import functional_multimodal
    from companion.training import fit

    batch_size = check_int(batch_size, "batch_size", minimum=1)
    examples = check_int(examples, "examples", minimum=batch_size)
    epochs = check_int(epochs, "epochs", minimum=2)
    repeats = check_int(repeats, "repeats", minimum=1)
    seed = check_int(seed, "seed", minimum=0)

    (images, meta), labels = make_shapes(examples, image_size=32, meta_dim=10, seed=seed)
    data = tf.data.Dataset.from_tensor_slices(((images, meta), labels)).batch(batch_size).cache()
    keras.utils.set_random_seed(seed)
    ours, theirs = functional_multimodal(), functional_multimodal()
    theirs.set_weights(ours.get_weights())
    our_optimizer = keras.optimizers.Adam(1e-3)
    our_metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    theirs.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(),
                   metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])

    class Mark(keras.callbacks.Callback):
        def __init__(self, mark: Callable[[], None]) -> None:
            super().__init__()
            self.mark = mark

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.mark()

    runs = {
        "custom loop": lambda mark: fit(ours, data, optimizer=our_optimizer, epochs=epochs, metrics=our_metrics,
                                        loss=keras.losses.SparseCategoricalCrossentropy(), progress=False,
                                        on_epoch_end=lambda epoch, logs: mark()),
        "model.fit": lambda mark: theirs.fit(data, epochs=epochs, verbose=0, shuffle=False,
                                              callbacks=[Mark(mark)]),
    }
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(repeats):
        for name, run in runs.items():
            times = _epoch_end_times(run)
            rates[name].append((epochs - 1) * examples / (times[-1] - times[0]))
            print(f"  repeat {repeat + 1}/{repeats}, {name}: {rates[name][-1]:,.0f} examples/s", flush=True)
    custom, keras_fit = (statistics.median(rates[name]) for name in runs)
    return _entry("custom training loop / model.fit (ch. 7 model)", custom, keras_fit, "examples/s",
                  {"examples": examples, "batch_size": batch_size, "epochs": epochs, "repeats": repeats})


def adamw_step_time(*, batch_size: int = 64, steps: int = 50, repeats: int = 5, seed: int = 0) -> dict[str, Any]:
    """Training-step time with ``companion.optimizers.AdamW`` next to ``keras.optimizers.AdamW``.

    Both train the chapter-7 model (``companion.models.functional_multimodal``, 32x32 images)
    from the same weights with the same settings (learning rate 1e-3, weight decay 0.004,
    biases and normalization parameters excluded from decay on both sides), each with its own
    compiled step (``tf.function``: forward pass, gradients, ``apply_gradients``) on one
    fixed batch. They are timed alternately, ``repeats`` times ``steps`` steps, after a warm-up
    step that traces. The ratio is companion / Keras seconds per step: 1.0 means as fast,
    above 1 slower (the goal is <= 1.10).

    Args:
        batch_size: Examples per step (>= 1).
        steps: Steps per timed repeat (>= 1).
        repeats: Timed repeats of each (>= 1); the medians are reported.
        seed: Seed of the data and of the initial weights.

    Returns:
        A dict with ``name``, ``ratio`` (companion / Keras step time), ``custom_median`` and
        ``reference_median`` (ms per step), ``unit``, ``device``, ``versions`` and ``settings``.
    """
    import keras
    import tensorflow as tf

    from companion.data import make_shapes
    from companion.models import functional_multimodal
    from companion.optimizers import DEFAULT_EXCLUDE, AdamW

    batch_size = check_int(batch_size, "batch_size", minimum=1)
    steps = check_int(steps, "steps", minimum=1)
    repeats = check_int(repeats, "repeats", minimum=1)
    seed = check_int(seed, "seed", minimum=0)

    (images, meta), labels = make_shapes(batch_size, image_size=32, meta_dim=10, seed=seed)
    batch = ((tf.constant(images), tf.constant(meta)), tf.constant(labels))
    keras.utils.set_random_seed(seed)
    ours, theirs = functional_multimodal(), functional_multimodal()
    theirs.set_weights(ours.get_weights())
    reference = keras.optimizers.AdamW(1e-3, weight_decay=0.004)
    reference.exclude_from_weight_decay(var_names=list(DEFAULT_EXCLUDE))
    loss = keras.losses.SparseCategoricalCrossentropy()

    def make_step(model: Any, optimizer: Any) -> Callable[[], Any]:
        variables = model.trainable_variables
        optimizer.build(variables)

        @tf.function
        def step() -> Any:
            (x, y) = batch
            with tf.GradientTape() as tape:
                value = loss(y, model(x, training=True))
            optimizer.apply_gradients(zip(tape.gradient(value, variables), variables))
            return value

        return step

    runs = {"companion AdamW": make_step(ours, AdamW(1e-3, weight_decay=0.004)),
            "keras AdamW": make_step(theirs, reference)}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(repeats):
        for name, step in runs.items():
            timing = time_call(step, repeats=1, number=steps, warmup=1 if repeat == 0 else 0)
            times[name].append(timing.median)
            print(f"  repeat {repeat + 1}/{repeats}, {name}: {timing.median_ms:.2f} ms/step", flush=True)
    custom, keras_median = (statistics.median(times[name]) * 1e3 for name in runs)
    return _entry("companion AdamW / keras AdamW step time (ch. 8)", custom, keras_median, "ms/step",
                  {"batch_size": batch_size, "steps": steps, "repeats": repeats})


def _entry(name: str, custom: float, reference: float, unit: str, settings: dict[str, Any]) -> dict[str, Any]:
    """One measure as ``make bench`` reports it (and writes to ``_build/bench.json``)."""
    import keras
    import tensorflow as tf

    from companion.notebook import gpu_available

    return {
        "name": name,
        "ratio": custom / reference,
        "custom_median": custom,
        "reference_median": reference,
        "unit": unit,
        "device": "GPU" if gpu_available() else "CPU",
        "versions": {"tensorflow": tf.__version__, "keras": keras.__version__, "python": sys.version.split()[0]},
        "settings": settings,
    }


def _number(value: float) -> str:
    """A table cell: thousands separators for large numbers, two decimals for small ones."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """``python -m companion.bench``: run the benchmarks, print a table, write ``_build/bench.json``.

    Args:
        argv: Command-line arguments (``--output``, ``--repeats``, ``--examples``, ``--epochs``);
            None reads ``sys.argv``.

    Returns:
        The entries written to the JSON file, one per measure.
    """
    import argparse
    import json
    from pathlib import Path

    from companion.notebook import format_table

    parser = argparse.ArgumentParser(prog="python -m companion.bench", description=main.__doc__.splitlines()[0])
    parser.add_argument("--output", default="_build/bench.json", help="JSON file to write (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each side (default: %(default)s)")
    parser.add_argument("--examples", type=int, default=1024, help="training examples (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=5,
                        help="epochs per run, the first untimed (default: %(default)s)")
    args = parser.parse_args(argv)

    print("custom training loop vs model.fit (chapter 7):", flush=True)
    entries = [training_loop_vs_fit(examples=args.examples, epochs=args.epochs, repeats=args.repeats)]
    print("companion AdamW vs keras.optimizers.AdamW (chapter 8):", flush=True)
    entries.append(adamw_step_time(repeats=args.repeats))
    rows = [(e["name"], _number(e["custom_median"]), _number(e["reference_median"]),
             e["unit"], f"{e['ratio']:.2f}", e["device"]) for e in entries]
    print(format_table(rows, ["measure", "custom", "reference", "unit", "ratio", "device"]))
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(entries, indent=2) + "\n")
    print(f"written to {output}")
    return entries


if __name__ == "__main__":
    main()
