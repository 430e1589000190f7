"""The headline measures of chapters 7 and 9 that ``make bench`` runs after chapter 12's.

``training_loop_vs_fit``: the throughput of ``companion.training.fit`` against ``model.fit``;
``adamw_step_time``: the step time of ``companion.optimizers.AdamW`` against Keras's. Each returns
one ``Entry``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from companion._checks import check_choice, check_int, check_seed
from companion.bench._harness import check_image_count, check_repeats, setting
from companion.bench._records import Entry
from companion.timing import time_call

#: Limits that refuse a run that would last for days, before any work.
MAX_EPOCHS = 100  # epochs per timed call of ``training_loop_vs_fit``
MAX_EXAMPLES = 65536  # training examples of ``training_loop_vs_fit``
MAX_STEPS = 10_000  # steps per timed repeat of ``adamw_step_time``

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

    Taught in chapter 7, "How fast is the loop?".
    """
    model, examples, batch_size = _check_loop_problem(model, examples, batch_size)
    epochs = check_int(epochs, "epochs", minimum=1, maximum=MAX_EPOCHS)
    repeats = check_repeats(repeats)
    seed = check_seed(seed)

    data, make_model, loss = _loop_problem(model, examples, seed)
    runs = _loop_runs(make_model, data.batch(batch_size).cache(), loss, epochs, seed)
    rates = _alternating_rates(runs, repeats, epochs * examples, model)
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


def _check_loop_problem(model: Any, examples: Any, batch_size: Any) -> tuple[str, int, int]:
    """``(model, examples, batch_size)`` of ``training_loop_vs_fit`` checked, ``None`` sizes
    replaced by the model's defaults (``LOOP_MODELS``)."""
    default_examples, default_batch = LOOP_MODELS[check_choice(model, "model", tuple(LOOP_MODELS))]
    batch_size = check_int(
        setting(batch_size, default_batch), "batch_size", minimum=1, maximum=MAX_EXAMPLES
    )
    examples = check_int(
        setting(examples, default_examples), "examples", minimum=batch_size, maximum=MAX_EXAMPLES
    )
    return model, examples, batch_size


def _loop_runs(
    make_model: Callable[[], Any], data: Any, loss: Any, epochs: int, seed: int
) -> dict[str, Callable[[], Any]]:
    """``"custom loop"`` and ``"model.fit"``: each trains its own copy of one model (same initial
    weights, Adam, ``loss``, an accuracy metric, no XLA) for ``epochs`` epochs on ``data``."""
    import keras

    from companion.training import fit

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
    return {
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


def _alternating_rates(
    runs: dict[str, Callable[[], Any]], repeats: int, examples: int, model: str
) -> dict[str, list[float]]:
    """Examples per second of each of ``runs`` (each call trains ``examples`` examples): one
    untimed call each (tracing), then ``repeats`` timed calls in turns, A B, B A, ... (neither
    always first); each printed as it is measured, with the name of the ``model`` trained."""
    for run in runs.values():
        run()  # traces the step: a one-off cost
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(repeats):
        for name, run in list(runs.items())[:: 1 if repeat % 2 == 0 else -1]:
            start = time.perf_counter()
            run()
            rates[name].append(examples / (time.perf_counter() - start))
            print(
                f"  repeat {repeat + 1}/{repeats}, {name} ({model}): "
                f"{rates[name][-1]:,.0f} examples/s",
                flush=True,
            )
    return rates


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

    Taught in chapter 9, "The Keras 3 optimizer class, step by step".
    """
    import keras
    import tensorflow as tf

    from companion.data import make_shapes
    from companion.models import functional_multimodal
    from companion.optimizers import DEFAULT_EXCLUDE, AdamW

    batch_size = check_image_count(batch_size, "batch_size", 32)
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
