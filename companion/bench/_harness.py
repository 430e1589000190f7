"""The sizing harness of chapter 12's experiments.

Default sizes per device (``default_sizes``), the checks every experiment shares (sizes, counts,
device, seed), random images placed on a device, the shared ``Args`` lines of their docstrings
(``shared_args``), and ``measure``, which times calls side by side (``companion.timing.compare``)
into a ``Row``.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from companion._checks import check_bool, check_device, check_int, check_seed, check_sequence
from companion.bench._records import Row, describe_sizes
from companion.timing import MAX_REPEATS, compare, default_device

# TensorFlow is imported inside the functions that use it: ``python -m companion.bench --help``
# (or a bad flag) answers without loading it.


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
#: ``companion.timing.MAX_REPEATS``; epochs, examples and steps: ``companion.bench._headline``).
MAX_IMAGE_SIZE = 4096  # image height = width
MAX_BATCH_BYTES = 2**30  # float32 RGB images of one batch (or one pipeline's epoch): 1 GiB


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

    Taught in chapter 12, "The device and the sizes".
    """
    import tensorflow as tf

    kind = (tf.DeviceSpec.from_string(resolve_device(device)).device_type or "CPU").upper()
    return dict(SIZES["GPU" if kind == "GPU" else "CPU"])


def measure(
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
        print(f"  {name}, {describe_sizes(sizes)}: {times}", flush=True)
    return row


def resolve_device(device: str | None) -> str:
    """``device`` checked against the devices TensorFlow has; ``None``: ``default_device()``.

    Raises:
        TypeError: If ``device`` is neither None nor a str.
        ValueError: If it is not a device string, or names a device TensorFlow does not have.

    Example:
        >>> resolve_device("cpu:0")
        'cpu:0'
    """
    return default_device() if device is None else check_device(device)


def check_repeats(repeats: Any) -> int:
    """``repeats`` if it is an int from 1 to ``MAX_REPEATS`` (TypeError, ValueError otherwise)."""
    return check_int(repeats, "repeats", minimum=1, maximum=MAX_REPEATS)


def check_run(device: str | None, repeats: int, seed: int, progress: bool) -> str:
    """Check the arguments every experiment shares; return the device (``None``:
    ``default_device()``)."""
    check_repeats(repeats)
    check_seed(seed)
    check_bool(progress, "progress")
    return resolve_device(device)


def resolve_sizes(defaults: Mapping[str, Any], **given: Any) -> dict[str, Any]:
    """The size arguments ``given`` checked by ``_SIZE_CHECKS``, ``defaults[name]`` for ``None``;
    in the order given (the order of a row's ``sizes``)."""
    resolved: dict[str, Any] = {}
    for name, check in _SIZE_CHECKS.items():
        if name in given:
            resolved[name] = check(setting(given[name], defaults[name]), resolved)
    return {name: resolved[name] for name in given}


def _largest(sizes: Mapping[str, Any]) -> int:
    """The largest image size resolved so far: it bounds a batch (``MAX_BATCH_BYTES``)."""
    return max(sizes["image_sizes"]) if "image_sizes" in sizes else sizes["image_size"]


def _check_image_size(size: Any, name: str) -> int:
    return check_int(size, name, minimum=8, maximum=MAX_IMAGE_SIZE)


def _check_sizes(sizes: Any, name: str) -> tuple[int, ...]:
    what = f"a non-empty list or tuple of ints >= 8 and <= {MAX_IMAGE_SIZE}"
    return check_sequence(sizes, name, what, item=_check_image_size)


def check_image_count(count: Any, name: str, image_size: int, minimum: int = 1) -> int:
    """``count`` images of ``image_size`` (float32 RGB): at least ``minimum``, at most
    ``MAX_BATCH_BYTES``."""
    return check_int(
        count, name, minimum=minimum, maximum=max(minimum, MAX_BATCH_BYTES // (image_size**2 * 12))
    )


def setting(value: Any, default: Any) -> Any:
    """``value``, or ``default`` when it is None (a size left to its default)."""
    return default if value is None else value


#: How ``resolve_sizes`` checks each size argument, given the sizes checked before it (in this
#: order: a batch's limit depends on the image size).
_SIZE_CHECKS: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "image_sizes": lambda value, got: _check_sizes(value, "image_sizes"),
    "image_size": lambda value, got: _check_image_size(value, "image_size"),
    "batch_size": lambda value, got: check_image_count(value, "batch_size", _largest(got)),
    "examples": lambda value, got: check_image_count(
        value, "examples", _largest(got), minimum=got["batch_size"]
    ),
    "batch_sizes": lambda value, got: check_sequence(
        value,
        "batch_sizes",
        "a non-empty list or tuple of ints >= 1",
        item=lambda size, name: check_image_count(size, name, _largest(got)),
    ),
}


def random_images(count: int, size: int, seed: int) -> np.ndarray:
    """``count`` float32 RGB images ``size x size`` in [0, 1) (a blur's time does not depend on
    content)."""
    return np.random.default_rng(seed).random((count, size, size, 3), dtype=np.float32)


def on_device(device: str, array: np.ndarray) -> Any:
    """``array`` as a tensor in ``device``'s memory."""
    import tensorflow as tf

    with tf.device(device):
        return tf.identity(array)


#: The arguments the experiments share, documented once. The ``{{shared_args}}`` line in the
#: docstring of a function decorated ``@shared_args(names)`` becomes these lines (as Keras's
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


def shared_args(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Replace the ``{{shared_args}}`` line of the docstring by the ``SHARED_ARGS`` of ``names``.

    The line keeps the placeholder's indentation: 8 spaces as written, 4 on Python 3.13, which
    strips a docstring's common indentation when it compiles it.
    """

    def lines(match: re.Match[str]) -> str:
        indent = match.group(1)
        return "\n".join(
            textwrap.fill(
                f"{name}: {SHARED_ARGS[name]}",
                100,
                initial_indent=indent,
                subsequent_indent=indent + " " * 4,
            )
            for name in names
        )

    def fill(fn: Callable[..., Any]) -> Callable[..., Any]:
        if fn.__doc__:  # None under python -OO
            fn.__doc__ = re.sub(r"^( *)\{\{shared_args\}\}$", lines, fn.__doc__, flags=re.M)
        return fn

    return fill
