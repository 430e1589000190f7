"""Notebook helpers: reproducible set-up, environment checks and plain-text tables.

Every chapter starts with ``setup()``; the other helpers are small conveniences the
chapters share.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence


def in_colab() -> bool:
    """Return True when running inside a Google Colab kernel."""
    return "google.colab" in sys.modules


def gpu_available() -> bool:
    """Return True when TensorFlow can see at least one GPU."""
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def setup(seed: int = 42, *, verbose: bool = True) -> dict[str, object]:
    """Seed Python, NumPy and TensorFlow, quiet TensorFlow's logs, describe the runtime.

    Call it once at the top of a notebook (before building models). Two runs of the same
    small CPU training after ``setup(seed)`` give identical weights.

    Args:
        seed: Non-negative integer seed for ``random``, NumPy and TensorFlow.
        verbose: Print the versions, the device and whether this is Colab.

    Returns:
        A dict with keys ``tensorflow``, ``keras``, ``python``, ``device``, ``colab``, ``seed``.

    Raises:
        TypeError: If ``seed`` is not an int.
        ValueError: If ``seed`` is negative.

    Example:
        >>> from companion.notebook import setup
        >>> info = setup(seed=0, verbose=False)
        >>> info["seed"]
        0
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected a non-negative int, got {type(seed).__name__} {seed!r}")
    if seed < 0:
        raise ValueError(f"seed: expected a non-negative int, got {seed}")

    # Must be set before TensorFlow's C++ runtime loads to silence its start-up chatter.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    keras.utils.set_random_seed(seed)  # seeds random, NumPy and TensorFlow together

    info: dict[str, object] = {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "python": sys.version.split()[0],
        "device": "GPU" if gpu_available() else "CPU",
        "colab": in_colab(),
        "seed": seed,
    }
    if verbose:
        print(f"TensorFlow {info['tensorflow']}, Keras {info['keras']}, Python {info['python']}")
        print(f"device: {info['device']}, Colab: {'yes' if info['colab'] else 'no'}, seed: {seed}")
    return info


def format_table(rows: Iterable[Sequence[object]], headers: Sequence[str]) -> str:
    """Format rows as a fixed-width text table (deterministic, so nbval can check it).

    Args:
        rows: Sequences with one value per header. Floats are shown with 4 significant digits.
        headers: Column titles.

    Returns:
        The table as a string, header and a rule line first.

    Raises:
        ValueError: If a row's length differs from the number of headers.

    Example:
        >>> print(format_table([("kernel", (3, 2))], ["name", "shape"]))
        name    shape
        ------  ------
        kernel  (3, 2)
    """
    cells = [[str(h) for h in headers]]
    for index, row in enumerate(rows):
        row = list(row)
        if len(row) != len(headers):
            raise ValueError(
                f"rows[{index}]: expected {len(headers)} values (one per header), got {len(row)}"
            )
        cells.append([f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
