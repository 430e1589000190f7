"""Chapter 12's experiments and ``python -m companion.bench`` (``make bench``).

The experiments time calls side by side with the harness of ``companion.timing`` (``compare``)
and return ``Row`` records (name, device, sizes, medians, spreads, reference, ratio and each
round's ratio): the blur through ``py_function`` against ``native_blur`` as an op, inside a
model and in a ``tf.data`` pipeline (``blur_op``, ``blur_in_model``, ``blur_pipeline``, each
taking a mapping of blur methods); eager vs ``tf.function`` vs XLA training steps
(``training_step_modes``); a per-image loop vs ``tf.vectorized_map`` vs batched ops
(``per_example_vs_batched``). Sizes scale with the device (``default_sizes``). ``python -m
companion.bench`` (``make bench``) runs the headline ones with chapters 7 and 9's measures
(``Entry`` records), prints a table and writes ``_build/bench.json``.

The harness's names (``time_call``, ``compare``, ``Timing``, ``fetch``, ``default_device``)
are importable from here too, as the chapters import them.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import statistics
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from companion._checks import (
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_path,
    check_seed,
    check_sequence,
    describe,
)
from companion.notebook import format_table
from companion.timing import (
    MAX_REPEATS,
    Timing,
    check_calls,
    check_repeats,
    compare,
    default_device,
    resolve_device,
    time_call,
)
from companion.timing import fetch as fetch  # re-exported: the chapters import it from here

# TensorFlow, Keras and the modules built on them are imported inside the functions that use
# them: ``python -m companion.bench --help`` (or a bad flag) answers without loading them.

#: Problem sizes per device type (``default_sizes``): modest on a CPU, so that the book's cells
#: and ``make bench`` stay quick on 2 cores; larger on a GPU, where small problems measure
#: only the launch overhead.
SIZES = {
    "CPU": {
        "image_sizes": (32, 64, 128, 256),
        "batch_size": 16,
        "image_size": 64,
        "examples": 256,
        "batch_sizes": (8, 32, 128),
        "per_image_size": 16,
    },
    "GPU": {
        "image_sizes": (64, 128, 256, 512),
        "batch_size": 64,
        "image_size": 128,
        "examples": 2048,
        "batch_sizes": (32, 128, 512),
        "per_image_size": 32,
    },
}
#: Limits that refuse a size that would run for days or exhaust memory, before any work (counts:
#: ``companion.timing.MAX_REPEATS``).
MAX_IMAGE_SIZE = 4096  # image height = width
MAX_BATCH_BYTES = 2**30  # float32 RGB images of one batch (or one pipeline's epoch): 1 GiB
MAX_EPOCHS = 100  # epochs per timed call of ``training_loop_vs_fit``
MAX_EXAMPLES = 65536  # training examples of ``training_loop_vs_fit``
MAX_STEPS = 10_000  # steps per timed repeat of ``adamw_step_time``
#: ``python -m companion.bench --quick``: tiny sizes that check the whole run in seconds.
QUICK_SIZES = {
    "image_sizes": (16, 32),
    "batch_size": 2,
    "image_size": 16,
    "examples": 8,
    "batch_sizes": (4,),
    "per_image_size": 8,
}


class _Record(Mapping[str, Any]):
    """A dataclass that also reads as a mapping of its fields: ``row["ratio"]``, ``dict(row)``."""

    def __getitem__(self, key: str) -> Any:
        if key not in _field_names(type(self)):
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_field_names(type(self)))

    def __len__(self) -> int:
        return len(_field_names(type(self)))


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(cls))


@dataclasses.dataclass(frozen=True, eq=False)
class Row(_Record):
    """One experiment at one size, as the experiments of chapter 12 return it.

    It reads as a mapping too (``row["ratio"]["py_function"]``, ``dict(row)``) and equals a
    dict with the same items.

    Attributes:
        name: The experiment, e.g. ``"blur op"``.
        device: The device string it ran on.
        sizes: Its sizes, e.g. ``{"batch_size": 16, "image_size": 64}``.
        medians: Seconds per call of each method (the figures compared).
        spreads: Each method's interquartile range over its median (0.1 = 10 %).
        reference: The method every ratio divides by.
        ratio: Each method's median divided by the reference's (the reference's is 1.0).
        round_ratios: Each method's ratio in every round: its seconds per call in that round
            divided by the reference's in the same round (the rounds ran side by side, so
            their range is the noise of ``ratio``).
    """

    name: str
    device: str
    sizes: dict[str, Any]
    medians: dict[str, float]
    spreads: dict[str, float]
    reference: str
    ratio: dict[str, float]
    round_ratios: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)

    @classmethod
    def measured(
        cls,
        name: str,
        device: str,
        sizes: Mapping[str, Any],
        timings: Mapping[str, Timing],
        reference: str,
    ) -> Row:
        """The row of ``timings`` (method -> ``Timing``) against the method ``reference``."""
        medians = {method: timing.median for method, timing in timings.items()}
        return cls(
            name=name,
            device=device,
            sizes=dict(sizes),
            medians=medians,
            spreads={method: timing.spread for method, timing in timings.items()},
            reference=reference,
            ratio={method: median / medians[reference] for method, median in medians.items()},
            round_ratios={
                method: tuple(
                    t / r for t, r in zip(timing.times, timings[reference].times, strict=True)
                )
                for method, timing in timings.items()
            },
        )


@dataclasses.dataclass(frozen=True, eq=False)
class Entry(_Record):
    """One measure as ``make bench`` prints it and writes it to its JSON file (``dict(entry)``).

    Like ``Row``, it reads as a mapping too (``entry["ratio"]``).

    Attributes:
        name: What was measured, e.g. ``"py_function / native: blur op (batch 16, 64x64)"``.
        ratio: ``custom_median / reference_median``.
        custom_median: The median of the measured side, in ``unit``.
        reference_median: The median of the side it is divided by, in ``unit``.
        unit: The medians' unit, e.g. ``"ms"`` or ``"examples/s"``.
        device: The device type it ran on, ``"CPU"`` or ``"GPU"``.
        versions: The versions of TensorFlow, Keras and Python.
        settings: The sizes and counts it ran with.
    """

    name: str
    ratio: float
    custom_median: float
    reference_median: float
    unit: str
    device: str
    versions: dict[str, str]
    settings: dict[str, Any]

    @classmethod
    def measured(
        cls,
        name: str,
        custom: float,
        reference: float,
        unit: str,
        settings: Mapping[str, Any],
        device: str | None = None,
    ) -> Entry:
        """The entry of two medians; ``device``: the device string they ran on (``None``:
        TensorFlow's default device)."""
        import keras
        import tensorflow as tf

        kind = tf.DeviceSpec.from_string(device or default_device()).device_type or "CPU"
        return cls(
            name=name,
            ratio=custom / reference,
            custom_median=custom,
            reference_median=reference,
            unit=unit,
            device=kind.upper(),
            versions={
                "tensorflow": tf.__version__,
                "keras": keras.__version__,
                "python": sys.version.split()[0],
            },
            settings=dict(settings),
        )


#: What every experiment row holds (``rows_table`` and ``rows_to_entries`` read them all;
#: ``round_ratios``, which they do not read, may be missing from a row made by hand).
ROW_KEYS = _field_names(Row)[:-1]

#: The models ``training_loop_vs_fit`` trains: ``(examples, batch size)`` by default for each.
LOOP_MODELS = {"chapter 7": (1024, 64), "mlp": (4096, 128)}


def _loop_problem(model: str, examples: int, seed: int) -> tuple[Any, Any, Any]:
    """``(dataset without batching, model maker, loss)`` for one of ``LOOP_MODELS``.

    ``"chapter 7"``: ``companion.models.functional_multimodal`` on ``make_shapes(examples)`` at
    32x32 (softmax output). ``"mlp"``: Dense 256-256-2 (ReLU, logits) on ``examples`` x 64 normal
    inputs labelled by the sign of their first feature: steps of about a millisecond on a CPU,
    where the loop around the step is a large part of the time.
    """
    import keras
    import tensorflow as tf

    from companion.data import make_shapes
    from companion.models import functional_multimodal

    if model == "chapter 7":
        (images, meta), labels = make_shapes(examples, image_size=32, meta_dim=10, seed=seed)
        return (
            tf.data.Dataset.from_tensor_slices(((images, meta), labels)),
            functional_multimodal,
            keras.losses.SparseCategoricalCrossentropy(),
        )
    inputs = np.random.default_rng(seed).normal(size=(examples, 64)).astype("float32")
    layers = keras.layers

    def mlp() -> Any:
        return keras.Sequential(
            [
                keras.Input((64,)),
                layers.Dense(256, activation="relu"),
                layers.Dense(256, activation="relu"),
                layers.Dense(2),
            ]
        )

    return (
        tf.data.Dataset.from_tensor_slices((inputs, (inputs[:, 0] > 0).astype("int32"))),
        mlp,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )


def training_loop_vs_fit(
    *,
    model: str = "chapter 7",
    examples: int | None = None,
    batch_size: int | None = None,
    epochs: int = 5,
    repeats: int = 5,
    seed: int = 0,
) -> Entry:
    """Training throughput (examples per second) of ``companion.training.fit`` and ``model.fit``.

    Both train the same model (one of ``LOOP_MODELS``: chapter 7's two-input classifier, or a
    small MLP whose millisecond steps make the loop's own cost visible) from the same initial
    weights, on the same cached ``tf.data`` pipeline, with Adam, sparse cross-entropy and an
    accuracy metric, no progress output, and the same compilation: a plain ``tf.function``
    (``model.compile(jit_compile=False)``; its default, ``"auto"``, would use XLA on a GPU and
    the ratio would measure XLA, not the loop). Each is called once untimed (tracing), then
    ``repeats`` times in turns (A B, B A, ...: neither always goes first), each call training
    ``epochs`` epochs: the timed calls include everything a repeated call costs (a ``fit`` call
    that traced its step again would show).
    The ratio is custom loop / ``model.fit``: 1.0 means as fast, above 1 faster.

    Args:
        model: ``"chapter 7"`` or ``"mlp"``.
        examples: Training examples per epoch (batch_size to ``MAX_EXAMPLES``); None: the
            model's default (``LOOP_MODELS``).
        batch_size: Examples per step (>= 1); None: the model's default.
        epochs: Epochs per timed call (1 to ``MAX_EPOCHS``).
        repeats: Timed calls of each (1 to ``MAX_REPEATS``); the medians are reported.
        seed: Seed of the data and of the initial weights (0 to ``2**32 - 1``).

    Returns:
        An ``Entry``: ``ratio`` is custom / fit throughput, the medians are examples/s, the
        ``settings`` include ``jit_compile``.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If ``model`` is not one of ``LOOP_MODELS`` or a number is out of range.
    """
    import keras

    from companion.training import fit

    default_examples, default_batch = LOOP_MODELS[check_choice(model, "model", tuple(LOOP_MODELS))]
    batch_size = check_int(
        _setting(batch_size, default_batch), "batch_size", minimum=1, maximum=MAX_EXAMPLES
    )
    examples = check_int(
        _setting(examples, default_examples), "examples", minimum=batch_size, maximum=MAX_EXAMPLES
    )
    epochs = check_int(epochs, "epochs", minimum=1, maximum=MAX_EPOCHS)
    repeats = check_repeats(repeats)
    seed = check_seed(seed)

    data, make_model, loss = _loop_problem(model, examples, seed)
    data = data.batch(batch_size).cache()
    keras.utils.set_random_seed(seed)
    ours, theirs = make_model(), make_model()
    theirs.set_weights(ours.get_weights())
    our_optimizer = keras.optimizers.Adam(1e-3)
    our_metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    theirs.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=loss,
        jit_compile=False,
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    runs = {
        "custom loop": lambda: fit(
            ours,
            data,
            optimizer=our_optimizer,
            loss=loss,
            epochs=epochs,
            metrics=our_metrics,
            progress=False,
        ),
        "model.fit": lambda: theirs.fit(data, epochs=epochs, verbose=0, shuffle=False),
    }
    for run in runs.values():
        run()  # traces the step: a one-off cost
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(repeats):
        # ABBA: neither always first
        for name, run in list(runs.items())[:: 1 if repeat % 2 == 0 else -1]:
            start = time.perf_counter()
            run()
            rates[name].append(epochs * examples / (time.perf_counter() - start))
            print(
                f"  repeat {repeat + 1}/{repeats}, {name} ({model}): "
                f"{rates[name][-1]:,.0f} examples/s",
                flush=True,
            )
    custom, keras_fit = (statistics.median(rates[name]) for name in runs)
    return Entry.measured(
        f"custom training loop / model.fit ({model} model)",
        custom,
        keras_fit,
        "examples/s",
        {
            "model": model,
            "examples": examples,
            "batch_size": batch_size,
            "epochs": epochs,
            "repeats": repeats,
            "jit_compile": False,
        },
    )


def adamw_step_time(
    *, batch_size: int = 64, steps: int = 50, repeats: int = 5, seed: int = 0
) -> Entry:
    """Training-step time with ``companion.optimizers.AdamW`` next to ``keras.optimizers.AdamW``.

    Both train the chapter-7 model (``companion.models.functional_multimodal``, 32x32 images)
    from the same weights with the same settings (learning rate 1e-3, weight decay 0.004,
    biases and normalization parameters excluded from decay on both sides), each with its own
    compiled step (``tf.function``: forward pass, gradients, ``apply_gradients``) on one
    fixed batch. They are timed alternately, ``repeats`` times ``steps`` steps, after a warm-up
    step that traces. The ratio is companion / Keras seconds per step: 1.0 means as fast,
    above 1 slower (the goal is <= 1.10).

    Args:
        batch_size: Examples per step (>= 1, at most ``MAX_BATCH_BYTES`` of 32x32 images).
        steps: Steps per timed repeat (1 to ``MAX_STEPS``).
        repeats: Timed repeats of each (1 to ``MAX_REPEATS``); the medians are reported.
        seed: Seed of the data and of the initial weights (0 to ``2**32 - 1``).

    Returns:
        An ``Entry``: ``ratio`` is companion / Keras step time, the medians are ms per step.

    Raises:
        TypeError: If an argument is not an int.
        ValueError: If it is out of range.
    """
    import keras
    import tensorflow as tf

    from companion.data import make_shapes
    from companion.models import functional_multimodal
    from companion.optimizers import DEFAULT_EXCLUDE, AdamW

    batch_size = _check_batch(batch_size, "batch_size", 32)
    steps = check_int(steps, "steps", minimum=1, maximum=MAX_STEPS)
    repeats = check_repeats(repeats)
    seed = check_seed(seed)

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

    runs = {
        "companion AdamW": make_step(ours, AdamW(1e-3, weight_decay=0.004)),
        "keras AdamW": make_step(theirs, reference),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(repeats):
        for name, step in runs.items():
            timing = time_call(step, repeats=1, number=steps, warmup=1 if repeat == 0 else 0)
            times[name].append(timing.median)
            print(
                f"  repeat {repeat + 1}/{repeats}, {name}: {timing.median_ms:.2f} ms/step",
                flush=True,
            )
    custom, keras_median = (statistics.median(times[name]) * 1e3 for name in runs)
    return Entry.measured(
        "companion AdamW / keras AdamW step time (ch. 9)",
        custom,
        keras_median,
        "ms/step",
        {"batch_size": batch_size, "steps": steps, "repeats": repeats},
    )


# ---------------------------------------------------------------------------------------------
# The experiments of chapter 12. Each returns a list of ``Row`` (one per size or model).


def default_sizes(device: str | None = None) -> dict[str, Any]:
    """The experiments' default problem sizes on ``device``: ``SIZES["GPU"]`` or ``SIZES["CPU"]``.

    Args:
        device: A device string such as ``"/CPU:0"`` or ``"/GPU:0"``; ``None``:
            ``default_device()``.

    Returns:
        A new dict with ``image_sizes``, ``batch_size``, ``image_size``, ``examples``,
        ``batch_sizes`` and ``per_image_size`` (the image size of ``per_example_vs_batched``).

    Raises:
        TypeError, ValueError: If ``device`` is not a device string TensorFlow has.

    Example:
        >>> default_sizes("/CPU:0")["image_sizes"]
        (32, 64, 128, 256)
    """
    import tensorflow as tf

    kind = (tf.DeviceSpec.from_string(resolve_device(device)).device_type or "CPU").upper()
    return dict(SIZES["GPU" if kind == "GPU" else "CPU"])


def _describe_sizes(sizes: Mapping[str, Any]) -> str:
    """``{"batch_size": 16, "image_size": 64}`` -> ``"batch 16, 64x64"``."""
    words = {"batch_size": "batch {}", "image_size": "{0}x{0}", "examples": "{} examples"}
    return ", ".join(words.get(key, key + " {}").format(value) for key, value in sizes.items())


def _measure(
    name: str,
    device: str,
    sizes: dict[str, Any],
    calls: Mapping[str, Callable[[], Any]],
    reference: str,
    *,
    repeats: int,
    progress: bool,
    scope: str | None = None,
) -> Row:
    """Compare ``calls`` (under ``scope``, default ``device``) and build the row; print it if
    ``progress``."""
    row = Row.measured(
        name, device, sizes, compare(calls, repeats=repeats, device=scope or device), reference
    )
    if progress:
        times = ", ".join(
            f"{method} {median * 1e3:.3g} ms" for method, median in row["medians"].items()
        )
        print(f"  {name}, {_describe_sizes(sizes)}: {times}", flush=True)
    return row


def default_blur_methods() -> dict[str, Callable[..., Any]]:
    """The blurs compared by default: ``py_function`` (OpenCV) and ``native`` (TensorFlow ops).

    Both take ``(images, ksize=5, sigma=0.0)`` with NHWC or HWC float images; add another blur
    with the same signature to the returned dict to compare it too.
    """
    from companion.pyfunc import native_blur, py_function_blur

    return {"py_function": py_function_blur, "native": native_blur}


def _check_methods(
    methods: Mapping[str, Callable[..., Any]] | None, reference: str
) -> dict[str, Callable[..., Any]]:
    methods = default_blur_methods() if methods is None else check_calls(methods, "methods")
    check_choice(reference, "reference", tuple(methods))
    return methods


def _check_run(device: str | None, repeats: int, seed: int, progress: bool) -> str:
    """Check the arguments every experiment shares; return the device (``None``:
    ``default_device()``)."""
    check_repeats(repeats)
    check_seed(seed)
    check_bool(progress, "progress")
    return resolve_device(device)


def _resolve_sizes(defaults: Mapping[str, Any], **given: Any) -> dict[str, Any]:
    """The size arguments ``given`` checked by ``_SIZE_CHECKS``, ``defaults[name]`` for ``None``;
    in the order given (the order of a row's ``sizes``)."""
    resolved: dict[str, Any] = {}
    for name, check in _SIZE_CHECKS.items():
        if name in given:
            resolved[name] = check(_setting(given[name], defaults[name]), resolved)
    return {name: resolved[name] for name in given}


def _largest(sizes: Mapping[str, Any]) -> int:
    """The largest image size resolved so far: it bounds a batch (``MAX_BATCH_BYTES``)."""
    return max(sizes["image_sizes"]) if "image_sizes" in sizes else sizes["image_size"]


def _check_image_size(size: Any, name: str) -> int:
    return check_int(size, name, minimum=8, maximum=MAX_IMAGE_SIZE)


def _check_sizes(sizes: Any, name: str) -> tuple[int, ...]:
    what = f"a non-empty list or tuple of ints >= 8 and <= {MAX_IMAGE_SIZE}"
    return check_sequence(sizes, name, what, item=_check_image_size)


def _check_batch(count: Any, name: str, image_size: int, minimum: int = 1) -> int:
    """``count`` images of ``image_size`` (float32 RGB): at least ``minimum``, at most
    ``MAX_BATCH_BYTES``."""
    return check_int(
        count, name, minimum=minimum, maximum=max(minimum, MAX_BATCH_BYTES // (image_size**2 * 12))
    )


def _setting(value: Any, default: Any) -> Any:
    return default if value is None else value


#: How ``_resolve_sizes`` checks each size argument, given the sizes checked before it (in this
#: order: a batch's limit depends on the image size).
_SIZE_CHECKS: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "image_sizes": lambda value, got: _check_sizes(value, "image_sizes"),
    "image_size": lambda value, got: _check_image_size(value, "image_size"),
    "batch_size": lambda value, got: _check_batch(value, "batch_size", _largest(got)),
    "examples": lambda value, got: _check_batch(
        value, "examples", _largest(got), minimum=got["batch_size"]
    ),
    "batch_sizes": lambda value, got: check_sequence(
        value,
        "batch_sizes",
        "a non-empty list or tuple of ints >= 1",
        item=lambda size, name: _check_batch(size, name, _largest(got)),
    ),
}


def _random_images(count: int, size: int, seed: int) -> np.ndarray:
    """``count`` float32 RGB images ``size x size`` in [0, 1) (a blur's time does not depend on
    content)."""
    return np.random.default_rng(seed).random((count, size, size, 3), dtype=np.float32)


def _on(device: str, array: np.ndarray) -> Any:
    """``array`` as a tensor in ``device``'s memory."""
    import tensorflow as tf

    with tf.device(device):
        return tf.identity(array)


#: The arguments the experiments share, documented once. The ``{{shared_args}}`` line in the
#: docstring of a function decorated ``@_shared_args(names)`` becomes these lines (as Keras's
#: optimizers do with ``{{base_optimizer_keyword_args}}``).
SHARED_ARGS = {
    "methods": "Name -> blur ``fn(images)`` (NHWC float32); ``None``: ``default_blur_methods()``.",
    "image_sizes": "Image heights = widths (a list of ints from 8 to ``MAX_IMAGE_SIZE``); "
    "``None``: ``default_sizes(device)``.",
    "batch_size": "Images per batch (>= 1, at most ``MAX_BATCH_BYTES`` of the largest images); "
    "``None``: the device's default.",
    "reference": "The method every ratio divides by.",
    "device": "Device string; ``None``: ``default_device()``.",
    "repeats": "Alternating rounds (1 to ``MAX_REPEATS``).",
    "seed": "Seed of the random images (0 to ``2**32 - 1``).",
    "progress": "Print each row as it is measured (a bool).",
}
RUN_ARGS = ("device", "repeats", "seed", "progress")


def _shared_args(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Replace the ``{{shared_args}}`` line of the docstring by the ``SHARED_ARGS`` of ``names``."""
    lines = "\n".join(
        textwrap.fill(
            f"{name}: {SHARED_ARGS[name]}", 100, initial_indent=" " * 8, subsequent_indent=" " * 12
        )
        for name in names
    )

    def fill(fn: Callable[..., Any]) -> Callable[..., Any]:
        if fn.__doc__:  # None under python -OO
            fn.__doc__ = fn.__doc__.replace(" " * 8 + "{{shared_args}}", lines)
        return fn

    return fill


@_shared_args("methods", "image_sizes", "batch_size", "reference", *RUN_ARGS)
def blur_op(
    methods: Mapping[str, Callable[..., Any]] | None = None,
    *,
    image_sizes: Sequence[int] | None = None,
    batch_size: int | None = None,
    reference: str = "native",
    device: str | None = None,
    repeats: int = 5,
    seed: int = 0,
    progress: bool = False,
) -> list[Row]:
    """Time each blur on one batch of images already in ``device``'s memory, per image size.

    Each method runs as a ``tf.function`` (one call per batch) and its result is fetched to
    the host. ``py_function`` pays the trip into Python and OpenCV's loop over the images;
    on a GPU also the copies of the batch to the host and back.

    Args:
        {{shared_args}}

    Returns:
        One row per image size (name ``"blur op"``); ``ratio[m]`` = median of m / median of
        ``reference``.

    Raises:
        TypeError, ValueError: For a bad method mapping, size, count or device, or an unknown
            ``reference``.

    Example:
        >>> rows = blur_op(image_sizes=[8], batch_size=1, device="/CPU:0", repeats=1)
        >>> rows[0]["ratio"]["native"], sorted(rows[0]["medians"])
        (1.0, ['native', 'py_function'])
    """
    import tensorflow as tf

    device = _check_run(device, repeats, seed, progress)
    methods = _check_methods(methods, reference)
    sizes = _resolve_sizes(default_sizes(device), image_sizes=image_sizes, batch_size=batch_size)
    graphs = {name: tf.function(method) for name, method in methods.items()}
    rows = []
    for size in sizes["image_sizes"]:
        images = _on(device, _random_images(sizes["batch_size"], size, seed))
        calls = {name: functools.partial(graph, images) for name, graph in graphs.items()}
        rows.append(
            _measure(
                "blur op",
                device,
                {"batch_size": sizes["batch_size"], "image_size": size},
                calls,
                reference,
                repeats=repeats,
                progress=progress,
            )
        )
    return rows


def _small_model(kind: str, image_size: int, seed: int) -> Any:
    """A small Keras classifier (``"mlp"`` or ``"cnn"``) of ``image_size`` RGB images into 10
    classes."""
    import keras

    keras.utils.set_random_seed(seed)
    layers = keras.layers
    body = (
        [
            layers.Flatten(),
            layers.Dense(128, activation="relu"),
            layers.Dense(128, activation="relu"),
        ]
        if kind == "mlp"
        else [
            layers.Conv2D(16, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(32, 3, padding="same", activation="relu"),
            layers.GlobalAveragePooling2D(),
        ]
    )
    return keras.Sequential([keras.Input((image_size, image_size, 3)), *body, layers.Dense(10)])


@_shared_args("methods", "image_sizes", "batch_size", "reference", *RUN_ARGS)
def blur_in_model(
    methods: Mapping[str, Callable[..., Any]] | None = None,
    *,
    image_sizes: Sequence[int] | None = None,
    batch_size: int | None = None,
    reference: str = "native",
    device: str | None = None,
    repeats: int = 5,
    seed: int = 0,
    progress: bool = False,
) -> list[Row]:
    """Time a model's forward pass with each blur as its first step, on ``device``, per image size.

    The model (blur, then the small CNN of ``training_step_modes``, the same weights for every
    method) runs as one ``tf.function`` with its input and weights on the device. Here the
    blur's input is the device's tensor: on a GPU, ``py_function`` must wait for the GPU,
    copy the batch to the host, run OpenCV while the GPU idles and copy the result back.

    Args:
        {{shared_args}}

    Returns:
        One row per image size (name ``"blur in model"``).

    Raises:
        TypeError, ValueError: As ``blur_op``.

    Example:
        >>> rows = blur_in_model(
        ...     image_sizes=[8], batch_size=1, device="/CPU:0", repeats=1
        ... )
        >>> rows[0]["name"], rows[0]["sizes"]
        ('blur in model', {'batch_size': 1, 'image_size': 8})
    """
    import tensorflow as tf

    device = _check_run(device, repeats, seed, progress)
    methods = _check_methods(methods, reference)
    sizes = _resolve_sizes(default_sizes(device), image_sizes=image_sizes, batch_size=batch_size)
    rows = []
    for size in sizes["image_sizes"]:
        with tf.device(device):
            head = _small_model("cnn", size, seed)
        images = _on(device, _random_images(sizes["batch_size"], size, seed))
        calls = {
            name: functools.partial(
                tf.function(lambda x, blur=blur: head(blur(x), training=False)), images
            )
            for name, blur in methods.items()
        }
        rows.append(
            _measure(
                "blur in model",
                device,
                {"batch_size": sizes["batch_size"], "image_size": size},
                calls,
                reference,
                repeats=repeats,
                progress=progress,
            )
        )
    return rows


def _train_step(model: Any, mode: str) -> Callable[[Any, Any], Any]:
    """A training step of ``model`` (Adam, cross-entropy on logits): eager, ``tf.function`` or
    XLA."""
    import keras
    import tensorflow as tf

    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            value = loss(y, model(x, training=True))
        optimizer.apply_gradients(
            zip(tape.gradient(value, model.trainable_variables), model.trainable_variables)
        )
        return value

    return step if mode == "eager" else tf.function(step, jit_compile=mode == "XLA")


@_shared_args("methods", "reference", *RUN_ARGS)
def blur_pipeline(
    methods: Mapping[str, Callable[..., Any]] | None = None,
    *,
    image_size: int | None = None,
    examples: int | None = None,
    batch_size: int | None = None,
    reference: str = "native",
    device: str | None = None,
    repeats: int = 5,
    seed: int = 0,
    progress: bool = False,
) -> list[Row]:
    """Time one epoch of a ``tf.data`` pipeline that blurs each image, alone and feeding training.

    The pipeline maps each method over single images, batches and prefetches (``tf.data``
    runs on the CPU whatever the device). Row 1 reads the epoch; row 2 also runs a compiled
    training step of the small CNN (``training_step_modes``) on ``device`` per batch. When
    the training step is the slower part, prefetching hides the blur and the ratio moves
    towards 1: that is where ``py_function``'s cost does not matter.

    Args:
        {{shared_args}}
        image_size: Image height = width (8 to ``MAX_IMAGE_SIZE``); ``None``: the device's default.
        examples: Images per epoch (>= batch_size, at most ``MAX_BATCH_BYTES`` of images);
            ``None``: the device's default.
        batch_size: Images per batch (>= 1); ``None``: the device's default.

    Returns:
        Two rows, ``"tf.data pipeline"`` and ``"pipeline + training step"`` (seconds per epoch).

    Raises:
        TypeError, ValueError: As ``blur_op``, or if ``examples < batch_size``.

    Example:
        >>> rows = blur_pipeline(
        ...     image_size=8, examples=4, batch_size=2, device="/CPU:0", repeats=1
        ... )
        >>> [row["name"] for row in rows]
        ['tf.data pipeline', 'pipeline + training step']
    """
    import tensorflow as tf

    device = _check_run(device, repeats, seed, progress)
    methods = _check_methods(methods, reference)
    settings = _resolve_sizes(
        default_sizes(device), batch_size=batch_size, image_size=image_size, examples=examples
    )
    batch_size, image_size, examples = settings.values()
    images = _random_images(examples, image_size, seed)
    labels = np.random.default_rng(seed).integers(0, 10, examples)
    with tf.device(device):
        step = _train_step(_small_model("cnn", image_size, seed), "tf.function")

    def pipeline(blur: Callable[..., Any]) -> Any:
        data = tf.data.Dataset.from_tensor_slices((images, labels))
        return data.map(lambda x, y: (blur(x), y)).batch(batch_size).prefetch(tf.data.AUTOTUNE)

    def read(data: Any) -> Any:
        for batch in data:
            pass
        return batch

    def train(data: Any) -> Any:
        for x, y in data:
            with tf.device(device):
                value = step(x, y)
        return value

    pipelines = {name: pipeline(blur) for name, blur in methods.items()}
    return [
        _measure(
            name,
            device,
            settings,
            {method: functools.partial(consume, data) for method, data in pipelines.items()},
            reference,
            repeats=repeats,
            progress=progress,
            scope="/CPU:0",
        )
        for name, consume in [("tf.data pipeline", read), ("pipeline + training step", train)]
    ]


#: The modes ``training_step_modes`` compares; ``"tf.function"`` is the reference.
STEP_MODES = ("eager", "tf.function", "XLA")


@_shared_args(*RUN_ARGS)
def training_step_modes(
    *,
    models: Sequence[str] = ("mlp", "cnn"),
    image_size: int | None = None,
    batch_size: int | None = None,
    device: str | None = None,
    repeats: int = 5,
    seed: int = 0,
    progress: bool = False,
) -> list[Row]:
    """Time one training step eagerly, as a ``tf.function`` and compiled with XLA, per model.

    Each mode trains its own copy of the model (same initial weights, Adam, cross-entropy)
    on one batch in ``device``'s memory. An MLP (two ``Dense(128)`` layers) does little work
    per op, so the per-op cost of eager execution dominates; the CNN (two small convolutions)
    does more work per op, and XLA's fusion has less to save there.

    Args:
        models: Which models: a list or tuple of ``"mlp"`` and/or ``"cnn"``.
        image_size: Image height = width (8 to ``MAX_IMAGE_SIZE``); ``None``: the device's default.
        batch_size: Examples per step (>= 1); ``None``: the device's default.
        {{shared_args}}

    Returns:
        One row per model (name ``"<model> training step"``); the reference is ``"tf.function"``.

    Raises:
        TypeError, ValueError: For an unknown model, a bad size, count or device.

    Example:
        >>> rows = training_step_modes(
        ...     models=["mlp"], image_size=8, batch_size=2, device="/CPU:0", repeats=1
        ... )
        >>> list(rows[0]["medians"]), rows[0]["reference"]
        (['eager', 'tf.function', 'XLA'], 'tf.function')
    """
    import tensorflow as tf

    device = _check_run(device, repeats, seed, progress)
    models = check_sequence(
        models,
        "models",
        "a non-empty list or tuple of 'mlp' and 'cnn'",
        item=lambda kind, name: check_choice(kind, name, ("mlp", "cnn")),
    )
    sizes = _resolve_sizes(default_sizes(device), batch_size=batch_size, image_size=image_size)
    batch_size, image_size = sizes.values()
    x = _on(device, _random_images(batch_size, image_size, seed))
    y = _on(device, np.random.default_rng(seed).integers(0, 10, batch_size))
    rows = []
    for kind in models:
        with tf.device(device):
            steps = {
                mode: _train_step(_small_model(kind, image_size, seed), mode) for mode in STEP_MODES
            }
        calls = {mode: functools.partial(step, x, y) for mode, step in steps.items()}
        rows.append(
            _measure(
                f"{kind} training step",
                device,
                sizes,
                calls,
                "tf.function",
                repeats=repeats,
                progress=progress,
            )
        )
    return rows


def _standardize_one(image: Any) -> Any:
    """One image minus its mean, divided by its standard deviation (the per-example function)."""
    import tensorflow as tf

    return (image - tf.reduce_mean(image)) / (tf.math.reduce_std(image) + 1e-6)


def _standardize_loop(images: Any) -> Any:
    """``_standardize_one`` on each image in a Python loop (unrolled: ops per image), stacked."""
    import tensorflow as tf

    return tf.stack([_standardize_one(images[i]) for i in range(images.shape[0])])


def _standardize_vectorized(images: Any) -> Any:
    """``_standardize_one`` vectorised over the batch by ``tf.vectorized_map``."""
    import tensorflow as tf

    return tf.vectorized_map(_standardize_one, images)


def _standardize_batched(images: Any) -> Any:
    """The same, written for the batch: reductions over each image's axes."""
    import tensorflow as tf

    mean = tf.reduce_mean(images, axis=[1, 2, 3], keepdims=True)
    return (images - mean) / (tf.math.reduce_std(images, axis=[1, 2, 3], keepdims=True) + 1e-6)


#: The three ways ``per_example_vs_batched`` compares to standardise a batch of images.
PER_EXAMPLE_METHODS = {
    "Python loop": _standardize_loop,
    "vectorized_map": _standardize_vectorized,
    "batched op": _standardize_batched,
}


@_shared_args(*RUN_ARGS)
def per_example_vs_batched(
    *,
    batch_sizes: Sequence[int] | None = None,
    image_size: int | None = None,
    device: str | None = None,
    repeats: int = 5,
    seed: int = 0,
    progress: bool = False,
) -> list[Row]:
    """Standardise each image of a batch: a Python loop, ``tf.vectorized_map``, batched ops.

    All three run as ``tf.function`` on the same batch in ``device``'s memory and give the
    same numbers (``PER_EXAMPLE_METHODS``). The loop is unrolled into a few ops per image, so
    its op count grows with the batch; ``vectorized_map`` rewrites the per-image function into
    batched ops; the batched version is written that way. The reference is ``"batched op"``.

    Args:
        batch_sizes: Images per batch (a list of ints >= 1); ``None``: the device's default.
        image_size: Image height = width (8 to ``MAX_IMAGE_SIZE``); ``None``: the device's
            default ``per_image_size`` (small images: the per-op cost is what differs between
            the three).
        {{shared_args}}

    Returns:
        One row per batch size (name ``"standardize per image"``).

    Raises:
        TypeError, ValueError: For a bad size, count or device.

    Example:
        >>> rows = per_example_vs_batched(
        ...     batch_sizes=[2], image_size=8, device="/CPU:0", repeats=1
        ... )
        >>> list(rows[0]["ratio"])
        ['Python loop', 'vectorized_map', 'batched op']
    """
    import tensorflow as tf

    device = _check_run(device, repeats, seed, progress)
    defaults = default_sizes(device)
    image_size, batch_sizes = _resolve_sizes(
        {**defaults, "image_size": defaults["per_image_size"]},
        image_size=image_size,
        batch_sizes=batch_sizes,
    ).values()
    graphs = {name: tf.function(method) for name, method in PER_EXAMPLE_METHODS.items()}
    rows = []
    for batch_size in batch_sizes:
        images = _on(device, _random_images(batch_size, image_size, seed))
        calls = {name: functools.partial(graph, images) for name, graph in graphs.items()}
        rows.append(
            _measure(
                "standardize per image",
                device,
                {"batch_size": batch_size, "image_size": image_size},
                calls,
                "batched op",
                repeats=repeats,
                progress=progress,
            )
        )
    return rows


@_shared_args("repeats", "seed", "progress")
def compiled_blur_vs_opencv(
    *,
    image_sizes: Sequence[int] | None = None,
    batch_size: int | None = None,
    repeats: int = 7,
    seed: int = 0,
    progress: bool = False,
) -> list[Row]:
    """Time chapter 13's compiled blur op against ``cv2.GaussianBlur`` called directly, on the CPU.

    Both blur the same batch (5x5, sigma from OpenCV's rule): the op takes it as a tensor,
    OpenCV as a NumPy array, image by image, as ``companion.pyfunc.cv2_blur`` does. Each call
    ends with the blurred batch as a new NumPy array, so both sides pay one copy of it: the op's
    result is fetched (``fetch``: ``.numpy()``), OpenCV's images are stacked. The op is a CPU
    kernel, so this runs on the CPU whatever the machine has. The first call in a process
    loads the op's library (compiling it if it is not cached), before any timing.

    Args:
        image_sizes: Image heights = widths (as ``blur_op``); ``None``: ``default_sizes("/CPU:0")``.
        batch_size: Images per batch (as ``blur_op``); ``None``: the CPU default.
        {{shared_args}}

    Returns:
        One row per image size (name ``"compiled blur"``, reference ``"OpenCV"``); the goal of
        chapter 13 is ``ratio["C++ op"] <= 1.3``.

    Raises:
        TypeError, ValueError: For a bad size or count.
        companion.kernels.BuildError: If the op cannot be built (no ``g++`` or headers).
    """
    from companion.kernels import cpp_blur
    from companion.pyfunc import cv2_blur

    image_sizes, batch_size = _resolve_sizes(
        default_sizes(_check_run("/CPU:0", repeats, seed, progress)),
        image_sizes=image_sizes,
        batch_size=batch_size,
    ).values()
    rows = []
    for size in image_sizes:
        images = _random_images(batch_size, size, seed)
        tensor = _on("/CPU:0", images)
        calls = {
            "C++ op": functools.partial(cpp_blur, tensor),
            "OpenCV": functools.partial(cv2_blur, images),
        }
        rows.append(
            _measure(
                "compiled blur",
                "/CPU:0",
                {"batch_size": batch_size, "image_size": size},
                calls,
                "OpenCV",
                repeats=repeats,
                progress=progress,
            )
        )
    return rows


def _check_rows(rows: Any) -> tuple[Mapping[str, Any], ...]:
    return check_sequence(
        rows, "rows", "a list or tuple of experiment rows", min_length=0, item=_check_row
    )


def _check_row(row: Any, name: str) -> Mapping[str, Any]:
    what = f"an experiment row (a dict with {', '.join(ROW_KEYS)})"
    check_instance(row, name, Mapping, what)
    if not set(ROW_KEYS) <= set(row) or not all(
        isinstance(row[key], Mapping) for key in ("sizes", "medians", "spreads", "ratio")
    ):
        raise ValueError(f"{name}: expected {what}, got {describe(row)}")
    return row


def rows_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Experiment rows as a text table: each row's name and sizes on a line of their own, then
    one line per method: median in ms, spread, ratio.

    Raises:
        TypeError, ValueError: If ``rows`` is not a list or tuple of experiment rows (none is fine).
    """
    rows = _check_rows(rows)
    table = format_table(
        [
            (
                method,
                f"{median * 1e3:.3g}",
                f"{row['spreads'][method]:.0%}",
                f"{row['ratio'][method]:.2f}",
            )
            for row in rows
            for method, median in row["medians"].items()
        ],
        ["method", "median ms", "spread", "ratio"],
    ).splitlines()
    lines = ["  " + line for line in table[:2]]
    methods = iter(table[2:])
    for row in rows:
        lines.append(f"{row['name']} ({_describe_sizes(row['sizes'])})")
        lines += ["  " + next(methods) for _ in row["medians"]]
    return "\n".join(lines)


def rows_to_entries(rows: Sequence[Mapping[str, Any]]) -> list[Entry]:
    """``make bench`` entries from experiment rows: one per method other than the row's reference.

    Raises:
        TypeError, ValueError: If ``rows`` is not a list or tuple of experiment rows (none is fine).
    """
    return [
        Entry.measured(
            f"{method} / {row['reference']}: {row['name']} ({_describe_sizes(row['sizes'])})",
            median * 1e3,
            row["medians"][row["reference"]] * 1e3,
            "ms",
            row["sizes"],
            device=row["device"],
        )
        for row in _check_rows(rows)
        for method, median in row["medians"].items()
        if method != row["reference"]
    ]


def _number(value: float) -> str:
    """A table cell: thousands separators for large numbers, two decimals for small ones."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def main(
    argv: list[str] | None = None, *, blur_methods: Mapping[str, Callable[..., Any]] | None = None
) -> list[Entry]:
    """``python -m companion.bench``: run the benchmarks, print a table, write a JSON file.

    The headline experiments of chapter 12 (the blurs at two image sizes as an op, in a model and
    in a ``tf.data`` pipeline; eager vs ``tf.function`` vs XLA training steps; a per-image loop
    vs ``tf.vectorized_map`` vs batched ops), chapter 13's compiled blur vs OpenCV, then chapter 7's
    custom loop vs ``model.fit`` (on its model and a small MLP) and chapter 9's AdamW vs Keras's.
    Progress is printed as it goes.

    Args:
        argv: Command-line arguments (``--output``, ``--repeats``, ``--examples``, ``--epochs``,
            ``--device``, ``--quick``), a list of str; None reads ``sys.argv``.
        blur_methods: The blurs to compare, name -> ``fn(images)``; ``None``:
            ``default_blur_methods()``. Must include ``"native"``, the reference.

    Returns:
        The entries written to the JSON file, one ``Entry`` per measure.

    Raises:
        TypeError: If ``argv`` is not a list of str or ``blur_methods`` not a mapping of callables.
        ValueError: If ``blur_methods`` is empty or has no ``"native"``.
        SystemExit: For an unknown flag or a bad flag value (argparse's usage and message,
            exit status 2), before anything runs.
    """
    if argv is not None:
        argv = list(
            check_sequence(
                argv,
                "argv",
                "a list or tuple of str (command-line arguments) or None",
                min_length=0,
                item=lambda text, name: check_instance(text, name, str, "a str"),
            )
        )
    if blur_methods is not None:
        blur_methods = check_calls(blur_methods, "blur_methods")
        if "native" not in blur_methods:
            raise ValueError(
                f"blur_methods: expected a mapping of names to blurs that includes 'native' (the "
                f"reference), got {describe(blur_methods)}"
            )
    parser = argparse.ArgumentParser(
        prog="python -m companion.bench", description=main.__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--output",
        default="_build/bench.json",
        type=_flag(lambda text: check_path(text, "--output")),
        help="JSON file to write (default: %(default)s)",
    )
    parser.add_argument(
        "--repeats",
        type=_int_flag("--repeats", 1, MAX_REPEATS),
        default=5,
        help="runs of each side (default: %(default)s)",
    )
    parser.add_argument(
        "--examples",
        type=_int_flag("--examples", max(batch for _, batch in LOOP_MODELS.values()), MAX_EXAMPLES),
        default=None,
        help="training examples of the loop benchmarks (default: 1024 for chapter 7's model, "
        "4096 for the MLP)",
    )
    parser.add_argument(
        "--epochs",
        type=_int_flag("--epochs", 1, MAX_EPOCHS),
        default=5,
        help="epochs per timed fit call (default: %(default)s)",
    )
    parser.add_argument(
        "--device",
        type=_flag(resolve_device),
        default=None,
        help="device string, e.g. /CPU:0 (default: GPU if any, else CPU)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: a smoke test of the whole run"
    )
    args = parser.parse_args(argv)

    device = resolve_device(args.device)
    sizes = dict(QUICK_SIZES) if args.quick else default_sizes(device)
    common = {"device": device, "repeats": args.repeats, "progress": True}
    blurs = {"methods": blur_methods, "batch_size": sizes["batch_size"], **common}
    headline_sizes = list(dict.fromkeys([sizes["image_sizes"][1], sizes["image_sizes"][-1]]))
    one_size = {"image_size": sizes["image_size"], "batch_size": sizes["batch_size"]}
    experiments = [
        (
            "blur as an op (py_function vs native)",
            lambda: blur_op(image_sizes=headline_sizes, **blurs),
        ),
        (
            "blur inside a model's forward pass",
            lambda: blur_in_model(image_sizes=headline_sizes, **blurs),
        ),
        (
            "blur in a tf.data pipeline",
            lambda: blur_pipeline(
                image_size=sizes["image_size"], examples=sizes["examples"], **blurs
            ),
        ),
        (
            "training step: eager vs tf.function vs XLA",
            lambda: training_step_modes(**one_size, **common),
        ),
        (
            "per-image loop vs vectorized_map vs batched op",
            lambda: per_example_vs_batched(
                batch_sizes=sizes["batch_sizes"][-1:], image_size=sizes["per_image_size"], **common
            ),
        ),
        (
            "compiled C++ blur vs OpenCV (chapter 13, CPU)",
            lambda: compiled_blur_vs_opencv(
                image_sizes=headline_sizes,
                batch_size=sizes["batch_size"],
                repeats=args.repeats,
                progress=True,
            ),
        ),
    ]
    print(f"device: {device}", flush=True)
    entries = []
    for number, (title, run) in enumerate(experiments, 1):
        print(f"[{number}/{len(experiments) + 2}] {title}:", flush=True)
        entries += rows_to_entries(run())
    print(
        f"[{len(experiments) + 1}/{len(experiments) + 2}] custom training loop vs model.fit "
        f"(chapter 7's model, a small MLP):",
        flush=True,
    )
    entries += [
        training_loop_vs_fit(
            model=model, examples=args.examples, epochs=args.epochs, repeats=args.repeats
        )
        for model in LOOP_MODELS
    ]
    print(
        f"[{len(experiments) + 2}/{len(experiments) + 2}] "
        "companion AdamW vs keras AdamW (chapter 9):",
        flush=True,
    )
    entries.append(adamw_step_time(repeats=args.repeats))
    # The ratio first: the measures' names are long, and a narrow window should still show it.
    rows = [
        (
            f"{e['ratio']:.2f}",
            _number(e["custom_median"]),
            _number(e["reference_median"]),
            e["unit"],
            e["name"],
        )
        for e in entries
    ]
    print(f"device: {device}; ratio = custom / reference")
    print(format_table(rows, ["ratio", "custom", "reference", "unit", "measure"]))
    output = args.output
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps([dict(entry) for entry in entries], indent=2) + "\n")
    print(f"written to {output}")
    return entries


def _flag(check: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type``: ``check(text)``, a TypeError or ValueError as argparse's error.

    The message loses its leading ``"<name>: "``: argparse says ``argument --flag:`` itself.
    """

    def parse(text: str) -> Any:
        try:
            return check(text)
        except (TypeError, ValueError) as error:
            raise argparse.ArgumentTypeError(str(error).split(": ", 1)[-1]) from error

    return parse


def _int_flag(flag: str, minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse ``type`` for an int flag in ``[minimum, maximum]`` (a word is reported as a
    str)."""

    def check(text: str) -> int:
        value = int(text) if text.strip().lstrip("+-").isdigit() else text
        return check_int(value, flag, minimum=minimum, maximum=maximum)

    return _flag(check)


if __name__ == "__main__":
    main()
