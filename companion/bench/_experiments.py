"""Chapter 12's experiments: each times methods side by side and returns a list of ``Row``.

The blur through ``py_function`` against ``native_blur`` as an op, inside a model and in a
``tf.data`` pipeline (``blur_op``, ``blur_in_model``, ``blur_pipeline``, each taking a mapping of
blur methods); eager vs ``tf.function`` vs XLA training steps (``training_step_modes``); a
per-image loop vs ``tf.vectorized_map`` vs batched ops (``per_example_vs_batched``); and
chapter 13's compiled blur against OpenCV (``compiled_blur_vs_opencv``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from companion._checks import check_calls, check_choice, check_sequence
from companion.bench._harness import (
    RUN_ARGS,
    check_run,
    default_sizes,
    measure,
    on_device,
    random_images,
    resolve_sizes,
    shared_args,
)
from companion.bench._records import Row


def default_blur_methods() -> dict[str, Callable[..., Any]]:
    """The blurs compared by default: ``py_function`` (OpenCV) and ``native`` (TensorFlow ops).

    Both take ``(images, ksize=5, sigma=0.0)`` with NHWC or HWC float images; add another blur
    with the same signature to the returned dict to compare it too.

    Taught in chapter 12, "The blur as an op".
    """
    from companion.pyfunc import native_blur, py_function_blur

    return {"py_function": py_function_blur, "native": native_blur}


def _check_methods(
    methods: Mapping[str, Callable[..., Any]] | None, reference: str
) -> dict[str, Callable[..., Any]]:
    methods = default_blur_methods() if methods is None else check_calls(methods, "methods")
    check_choice(reference, "reference", tuple(methods))
    return methods


@shared_args("methods", "image_sizes", "batch_size", "reference", *RUN_ARGS)
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

    Taught in chapter 12, "The blur as an op".
    """
    import tensorflow as tf

    device = check_run(device, repeats, seed, progress)
    methods = _check_methods(methods, reference)
    sizes = resolve_sizes(default_sizes(device), image_sizes=image_sizes, batch_size=batch_size)
    graphs = {name: tf.function(method) for name, method in methods.items()}
    rows = []
    for size in sizes["image_sizes"]:
        images = on_device(device, random_images(sizes["batch_size"], size, seed))
        calls = {name: functools.partial(graph, images) for name, graph in graphs.items()}
        rows.append(
            measure(
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


@shared_args("methods", "image_sizes", "batch_size", "reference", *RUN_ARGS)
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

    Taught in chapter 12, "Inside a model's forward pass".
    """
    import tensorflow as tf

    device = check_run(device, repeats, seed, progress)
    methods = _check_methods(methods, reference)
    sizes = resolve_sizes(default_sizes(device), image_sizes=image_sizes, batch_size=batch_size)
    rows = []
    for size in sizes["image_sizes"]:
        with tf.device(device):
            head = _small_model("cnn", size, seed)
        images = on_device(device, random_images(sizes["batch_size"], size, seed))
        calls = {
            name: functools.partial(
                tf.function(lambda x, blur=blur: head(blur(x), training=False)), images
            )
            for name, blur in methods.items()
        }
        rows.append(
            measure(
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


def _train_step_in_mode(model: Any, mode: str) -> Callable[[Any, Any], Any]:
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


@shared_args("methods", "reference", *RUN_ARGS)
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

    Taught in chapter 12, "In a tf.data pipeline".
    """
    import tensorflow as tf

    device = check_run(device, repeats, seed, progress)
    methods = _check_methods(methods, reference)
    settings = resolve_sizes(
        default_sizes(device), batch_size=batch_size, image_size=image_size, examples=examples
    )
    batch_size, image_size, examples = settings.values()
    images = random_images(examples, image_size, seed)
    labels = np.random.default_rng(seed).integers(0, 10, examples)
    with tf.device(device):
        step = _train_step_in_mode(_small_model("cnn", image_size, seed), "tf.function")

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
        measure(
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


@shared_args(*RUN_ARGS)
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

    Taught in chapter 12, "What tf.function and XLA buy".
    """
    import tensorflow as tf

    device = check_run(device, repeats, seed, progress)
    models = check_sequence(
        models,
        "models",
        "a non-empty list or tuple of 'mlp' and 'cnn'",
        item=lambda kind, name: check_choice(kind, name, ("mlp", "cnn")),
    )
    sizes = resolve_sizes(default_sizes(device), batch_size=batch_size, image_size=image_size)
    batch_size, image_size = sizes.values()
    x = on_device(device, random_images(batch_size, image_size, seed))
    y = on_device(device, np.random.default_rng(seed).integers(0, 10, batch_size))
    rows = []
    for kind in models:
        with tf.device(device):
            steps = {
                mode: _train_step_in_mode(_small_model(kind, image_size, seed), mode)
                for mode in STEP_MODES
            }
        calls = {mode: functools.partial(step, x, y) for mode, step in steps.items()}
        rows.append(
            measure(
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
    """One image ``(H, W, C)`` (exactly one: the per-example function) minus its mean, divided by
    its standard deviation."""
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


@shared_args(*RUN_ARGS)
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

    Taught in chapter 12, "A loop, tf.vectorized_map, or a batched op".
    """
    import tensorflow as tf

    device = check_run(device, repeats, seed, progress)
    defaults = default_sizes(device)
    image_size, batch_sizes = resolve_sizes(
        {**defaults, "image_size": defaults["per_image_size"]},
        image_size=image_size,
        batch_sizes=batch_sizes,
    ).values()
    graphs = {name: tf.function(method) for name, method in PER_EXAMPLE_METHODS.items()}
    rows = []
    for batch_size in batch_sizes:
        images = on_device(device, random_images(batch_size, image_size, seed))
        calls = {name: functools.partial(graph, images) for name, graph in graphs.items()}
        rows.append(
            measure(
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


@shared_args("repeats", "seed", "progress")
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

    Taught in chapter 13, "The same blur four ways, timed".
    """
    from companion.kernels import cpp_blur
    from companion.pyfunc import cv2_blur

    image_sizes, batch_size = resolve_sizes(
        default_sizes(check_run("/CPU:0", repeats, seed, progress)),
        image_sizes=image_sizes,
        batch_size=batch_size,
    ).values()
    rows = []
    for size in image_sizes:
        images = random_images(batch_size, size, seed)
        tensor = on_device("/CPU:0", images)
        calls = {
            "C++ op": functools.partial(cpp_blur, tensor),
            "OpenCV": functools.partial(cv2_blur, images),
        }
        rows.append(
            measure(
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
