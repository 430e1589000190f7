"""Notebook helpers: reproducible set-up, environment checks, plain-text tables, error
messages without terminal colours, and a fresh Python process for "does it load elsewhere?".

Every chapter starts with ``setup()``. The display helpers keep a chapter's visible cells to
the code being taught: ``show_error`` (an error as Python shows it, short), ``show_table``
(a small table), ``print_wrapped`` (text wrapped to the page column) and ``show_json``
(a config or other JSON data, one line per key), one home each.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from companion._checks import (
    check_bool,
    check_instance,
    check_int,
    check_real,
    check_seed,
    check_sequence,
    describe,
    shorten,
)
from companion._text import strip_ansi  # noqa: F401 - public here too

#: The most logical CPU devices ``split_cpu`` makes (replicas for ``tf.distribute`` tests,
#: not cores).
MAX_CPU_DEVICES = 256
#: The longest ``run_python`` waits for its child: one week, in seconds.
MAX_TIMEOUT = 7 * 24 * 3600.0
#: The width of the book's page column in characters, which the display helpers wrap to.
PAGE_WIDTH = 88


def in_colab() -> bool:
    """Return True when running inside a Google Colab kernel.

    Taught in chapter 1, "Ops: the atoms".
    """
    return "google.colab" in sys.modules


def gpu_available() -> bool:
    """Return True when TensorFlow can see at least one GPU.

    Taught in chapter 1, "Ops: the atoms".
    """
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def enable_gpu_memory_growth() -> list[str]:
    """Let TensorFlow take GPU memory as it needs it instead of all of it at start-up.

    By default the first TensorFlow op maps nearly all GPU memory into the process. A
    notebook that then starts a child Python process with TensorFlow (chapters 3 and 4 reload
    saved models in one) would leave the child nothing. With memory growth the parent holds
    only what it uses, so the child can use the same GPU. Must run before the first op
    touches the GPU; afterwards TensorFlow refuses, and the GPU is left as it is.

    Returns:
        The names of the GPUs now growing their memory (empty on a CPU-only runtime).

    Taught in chapter 2, "What composing gives you for free".
    """
    import tensorflow as tf

    configured = []
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # the GPU is already initialised: its memory is already mapped
            continue
        configured.append(gpu.name)
    return configured


def split_cpu(devices: int = 2) -> list[str]:
    """Split the CPU into ``devices`` logical devices: ``tf.distribute`` replicas on one machine.

    ``tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])`` then runs two replicas in this
    process: the same code that runs one replica per GPU, testable without GPUs. Call it once,
    before TensorFlow runs its first op (right after ``setup()``, which runs none); calling it
    again with the same number is harmless.

    Args:
        devices: Number of logical CPU devices (an int from 1 to ``MAX_CPU_DEVICES``).

    Returns:
        The logical CPU device names, e.g. ``["/device:CPU:0", "/device:CPU:1"]``.

    Raises:
        TypeError: If ``devices`` is not an int.
        ValueError: If ``devices`` is below 1 or above ``MAX_CPU_DEVICES``.
        RuntimeError: If TensorFlow has already started with another number of CPU devices
            (restart the kernel and call it earlier).

    Taught in chapter 7, "The same loop on two replicas: MirroredStrategy".
    """
    devices = check_int(devices, "devices", minimum=1, maximum=MAX_CPU_DEVICES)
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if len(current or [None]) != devices:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * devices
            )
        except RuntimeError as error:
            running = len(tf.config.list_logical_devices("CPU"))
            raise RuntimeError(
                f"devices: TensorFlow already runs with {running} CPU device(s) and cannot "
                f"switch to {devices}; call split_cpu before the first TensorFlow op "
                "(restart the kernel)"
            ) from error
    return [device.name for device in tf.config.list_logical_devices("CPU")]


def setup(seed: int = 42, *, verbose: bool = True) -> dict[str, object]:
    """Seed Python, NumPy and TensorFlow, quiet TensorFlow's logs, describe the runtime.

    Call it once at the top of a notebook (before building models). Two runs of the same
    small CPU training after ``setup(seed)`` give identical weights. On a GPU runtime it
    also turns on memory growth (``enable_gpu_memory_growth``), so that a child Python
    process started by the notebook can use the GPU too.

    It turns TF32 off (``tf.config.experimental.enable_tensor_float_32_execution(False)``):
    A100, L4 and later GPUs otherwise run float32 matrix products and convolutions with a
    10-bit mantissa, and the book's comparisons with NumPy, Keras built-ins or a CPU run would
    miss their bounds there. It changes nothing on a CPU or a T4. Chapter 12 turns TF32 back on
    where it times matrix products.

    When the environment variable ``WHITE_BOX_TF_GPU_STAND_IN`` is ``"1"``, it also starts the
    GPU stand-in (``companion.devices.start_gpu_stand_in``): Keras and TensorFlow see a GPU and
    make a GPU's choices, while the ops run on the CPU.

    Args:
        seed: Integer seed for ``random``, NumPy and TensorFlow, from 0 to ``2**32 - 1``.
        verbose: Print the versions, the device, TF32 and whether this is Colab (a bool).

    Returns:
        A dict with keys ``tensorflow``, ``keras``, ``python``, ``device`` (``"GPU"``,
        ``"GPU stand-in"`` or ``"CPU"``), ``colab``, ``seed``, ``tf32`` (False) and
        ``gpu_memory_growth`` (the GPUs set to grow their memory).

    Raises:
        TypeError: If ``seed`` is not an int or ``verbose`` not a bool.
        ValueError: If ``seed`` is negative or above ``2**32 - 1``.

    Example:
        >>> from companion.notebook import setup
        >>> info = setup(seed=0, verbose=False)
        >>> info["seed"], info["tf32"]
        (0, False)

    Taught in chapter 1, "Ops: the atoms".
    """
    seed = check_seed(seed)
    verbose = check_bool(verbose, "verbose")

    # Must be set before TensorFlow's C++ runtime loads to silence its start-up chatter.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    from companion import devices

    tf.get_logger().setLevel("ERROR")
    growing = enable_gpu_memory_growth()
    if devices.stand_in_requested():
        devices.start_gpu_stand_in()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    keras.utils.set_random_seed(seed)  # seeds random, NumPy and TensorFlow together

    device = "CPU"
    if gpu_available():
        device = "GPU stand-in" if devices.gpu_stand_in_active() else "GPU"
    info: dict[str, object] = {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "python": sys.version.split()[0],
        "device": device,
        "colab": in_colab(),
        "seed": seed,
        "tf32": tf.config.experimental.tensor_float_32_execution_enabled(),
        "gpu_memory_growth": growing,
    }
    if verbose:
        print(f"TensorFlow {info['tensorflow']}, Keras {info['keras']}, Python {info['python']}")
        print(f"device: {device}, Colab: {'yes' if info['colab'] else 'no'}, seed: {seed}")
        print("TF32: off (float32 matmuls are exact float32 on A100/L4 too)")
    return info


def format_table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> str:
    """Format rows as a fixed-width text table (deterministic, so nbval can check it).

    Args:
        rows: A list or tuple (or 2-D array) of rows, each a list, tuple or array with one value
            per header; none at all gives the header alone. Floats are shown with 4 significant
            digits.
        headers: Column titles: a non-empty list or tuple of str.

    Returns:
        The table as a string, header and a rule line first.

    Raises:
        TypeError: If ``rows``, a row or ``headers`` is not a list or tuple (a str, a dict, a
            generator ...), or a header is not a str.
        ValueError: If ``headers`` is empty or a row's length differs from the number of headers.

    Example:
        >>> print(format_table([("kernel", (3, 2))], ["name", "shape"]))
        name    shape
        ------  ------
        kernel  (3, 2)

    Taught in chapter 9, "Combining optimizers: Lookahead".
    """
    headers = check_sequence(
        headers,
        "headers",
        "a non-empty list or tuple of str",
        item=lambda header, name: check_instance(header, name, str, "a str"),
    )
    rows = check_sequence(
        rows,
        "rows",
        "a list or tuple of rows",
        min_length=0,
        item=lambda row, name: _check_row(row, name, len(headers)),
    )
    cells = [list(headers)] + [
        [f"{v:.4g}" if isinstance(v, float) else str(v) for v in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _check_row(row: object, name: str, length: int) -> tuple[object, ...]:
    """``row`` as a tuple of ``length`` values (one per header)."""
    what = f"a list or tuple of {length} values (one per header)"
    values = check_sequence(row, name, what, min_length=0)
    if len(values) != length:
        raise ValueError(f"{name}: expected {what}, got {describe(row)}")
    return values


def describe_error(error: BaseException, lines: int = 1, *, width: int | None = None) -> str:
    r"""``"TypeName: first line"`` of an exception: colour codes and blank lines dropped.

    Args:
        error: The exception (usually the one caught by ``except ... as error``).
        lines: How many non-blank lines of its message to keep (joined by an indented newline).
        width: None keeps each line whole. An int (at least 20) puts the type name alone on
            the first line and the message under it, indented by 4 and wrapped so that no
            line is longer than ``width``: an error that fits a page column.

    Raises:
        TypeError: If ``error`` is not an exception, or ``lines`` or ``width`` not an int.
        ValueError: If ``lines < 1`` or ``width < 20``.

    Example:
        >>> describe_error(ValueError("\x1b[1mbad\x1b[0m width\n\nmore detail"))
        'ValueError: bad width'
        >>> error = ValueError("units: expected an int >= 1, got 0")
        >>> print(describe_error(error, width=24))
        ValueError:
            units: expected an
            int >= 1, got 0

    Taught in chapter 1, "When are the weights created?".
    """
    check_instance(error, "error", BaseException, "an exception")
    lines = check_int(lines, "lines", minimum=1)
    if width is not None:
        width = check_int(width, "width", minimum=20)
    kept = [line.strip() for line in strip_ansi(str(error)).splitlines() if line.strip()][:lines]
    name = type(error).__name__
    if width is None:
        return f"{name}: " + "\n    ".join(kept)
    indent = " " * 4
    wrapped = [
        textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent) for line in kept
    ]
    return "\n".join([f"{name}:", *wrapped])


def run_python(
    code: str, *, timeout: float = 300, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    r"""Run ``code`` in a fresh Python process (this kernel's interpreter) and capture its output.

    The honest test of "does this saved model load elsewhere?": the child has imported
    nothing and registered nothing. TensorFlow's C++ start-up logs are silenced in it
    (``TF_CPP_MIN_LOG_LEVEL=3``) so that ``stderr`` holds only real errors. The child sees
    the same GPUs as the notebook (``setup`` lets the notebook's share of GPU memory grow).

    Args:
        code: Python source to run with ``python -c``.
        timeout: Seconds before the child is killed (``subprocess.TimeoutExpired``): a finite
            number > 0, at most ``MAX_TIMEOUT`` (a week).
        env: Extra environment variables for the child, on top of this process's: a mapping
            of str to str, or None.

    Returns:
        The ``subprocess.CompletedProcess`` with ``returncode``, ``stdout`` and ``stderr`` as text.

    Raises:
        TypeError: If ``code`` is not a str, ``timeout`` not a number or ``env`` not a mapping
            of str to str.
        ValueError: If ``timeout`` is not > 0, NaN, infinite or above ``MAX_TIMEOUT``.

    Example:
        >>> run_python("print(6 * 7)").stdout
        '42\n'

    Taught in chapter 2, "What composing gives you for free".
    """
    check_instance(code, "code", str, "Python source as a str")
    timeout = check_real(timeout, "timeout", above=0, maximum=MAX_TIMEOUT)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_environment(env),
    )


#: The variables every child process of a chapter gets, to keep TensorFlow's C++ start-up logs
#: off and tracebacks plain. An IPython kernel sets ``FORCE_COLOR=1``, which Python 3.13 obeys in
#: a child (its tracebacks then carry colour codes onto the page); ``PYTHON_COLORS=0`` wins.
CHILD_DEFAULTS = {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHON_COLORS": "0"}


def child_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a chapter's child process: this one's, ``CHILD_DEFAULTS``, then ``env``.

    Args:
        env: Extra variables, which win over the rest: a mapping of str to str, or None.

    Returns:
        A new dict; ``os.environ`` is left as it was.

    Raises:
        TypeError: If ``env`` is not a mapping of str to str.

    Example:
        >>> child_environment({"KERAS_BACKEND": "jax"})["PYTHON_COLORS"]
        '0'

    Taught in chapter 2, "What composing gives you for free".
    """
    if env is not None:
        check_instance(env, "env", Mapping, "a mapping of str to str or None")
        for key, value in env.items():
            check_instance(key, f"env[{key!r}]", str, "a str name")
            check_instance(value, f"env[{key!r}]", str, "a str value")
    return {**os.environ, **CHILD_DEFAULTS, **(env or {})}


def show_table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> None:
    """Print ``format_table(rows, headers)``: a small table in a chapter's output.

    Args:
        rows: The rows, as ``format_table`` takes them.
        headers: The column titles, as ``format_table`` takes them.

    Raises:
        TypeError, ValueError: As ``format_table`` does.

    Example:
        >>> show_table([("kernel", (3, 2))], ["name", "shape"])
        name    shape
        ------  ------
        kernel  (3, 2)

    Taught in chapter 1, "When are the weights created?".
    """
    print(format_table(rows, headers))


def print_wrapped(text: str, *, width: int = PAGE_WIDTH, indent: int = 0) -> None:
    r"""Print ``text`` wrapped to the page column, colour codes removed.

    Each line of ``text`` is wrapped on its own (blank lines are kept); continuation lines are
    indented by ``indent + 4`` spaces, so a wrapped line reads as one.

    Args:
        text: What to print (a str).
        width: The longest line, in characters (an int, at least 20).
        indent: Spaces before every line (an int from 0 to ``width - 10``).

    Raises:
        TypeError: If ``text`` is not a str, or ``width`` or ``indent`` not an int.
        ValueError: If ``width < 20`` or ``indent`` is outside 0 to ``width - 10``.

    Example:
        >>> print_wrapped("first ops: Placeholder, MatMul, BiasAdd, Relu", width=24)
        first ops: Placeholder,
            MatMul, BiasAdd,
            Relu

    Taught in chapter 2, "Which ops have which gradient".
    """
    check_instance(text, "text", str, "a str")
    width = check_int(width, "width", minimum=20)
    indent = check_int(indent, "indent", minimum=0, maximum=width - 10)
    for line in strip_ansi(text).splitlines() or [""]:
        print(
            textwrap.fill(
                line,
                width,
                initial_indent=" " * indent,
                subsequent_indent=" " * (indent + 4),
                break_on_hyphens=False,
            )
            if line.strip()
            else ""
        )


def show_json(data: object, *, keys: Sequence[str] | None = None, width: int = PAGE_WIDTH) -> None:
    """Print JSON data (a layer's ``get_config()``, a saved file's config) one key per line.

    What ``json.dumps`` accepts is printed as it would be saved; a value it refuses raises its
    ``TypeError``, which is what a ``.keras`` file would meet too. Long values wrap to ``width``.

    Args:
        data: A JSON-serialisable value; with ``keys``, a mapping.
        keys: None prints all of ``data``; a list or tuple of str prints only those keys of the
            mapping, in that order.
        width: The longest line, in characters (an int, at least 20).

    Raises:
        TypeError: If ``data`` is not JSON-serialisable, ``keys`` is given for something that is
            not a mapping, or ``keys`` or ``width`` has the wrong type.
        ValueError: If a key is missing from ``data`` or ``width < 20``.

    Example:
        >>> show_json({"units": 4, "activation": "relu", "name": "dense"}, keys=["units"])
        {
          "units": 4
        }

    Taught in chapter 3, "Inside a model".
    """
    width = check_int(width, "width", minimum=20)
    if keys is not None:
        check_instance(data, "data", Mapping, "a mapping (keys were given)")
        keys = check_sequence(
            keys,
            "keys",
            "None or a list or tuple of str",
            item=lambda key, name: check_instance(key, name, str, "a str"),
            min_length=0,
        )
        missing = [key for key in keys if key not in data]
        if missing:
            raise ValueError(f"keys: expected keys of data, got {missing} (data has {list(data)})")
        data = {key: data[key] for key in keys}
    print_wrapped(json.dumps(data, indent=2), width=width)


@dataclass
class CaughtError:
    """What ``show_error`` caught: ``error`` (the exception) and ``shown`` (the printed text).

    Taught in chapter 1, "When are the weights created?".
    """

    error: BaseException | None = None
    shown: str = ""


def show_error(
    *expected: type[BaseException], match: str | None = None, width: int = PAGE_WIDTH
) -> contextlib.AbstractContextManager[CaughtError]:
    r"""Run a block that must fail, and print its error as Python shows it, short.

    The block's exception, if it is one of ``expected``, is printed as ``TypeName: message``
    (the message's first non-blank line, or what ``match`` finds in it), colour codes removed
    and wrapped to ``width``; then the notebook goes on. A block that raises nothing, or a
    ``match`` that finds nothing, is an ``AssertionError``: the failure the chapter shows is
    checked every time it runs. Any other exception propagates unchanged.

    Args:
        *expected: The exception types the block must raise (default: ``Exception``).
        match: None shows the message's first line; a regular expression shows its first match
            in the whole message (searched with ``re.DOTALL``).
        width: The longest printed line, in characters (an int, at least 20).

    Returns:
        A context manager giving a ``CaughtError``, filled in when the block has failed
        (``.error`` for a closer look).

    Raises:
        TypeError: If an ``expected`` is not an exception type, ``match`` not a str or None,
            or ``width`` not an int.
        ValueError: If ``width < 20``.
        AssertionError: If the block raised nothing, or ``match`` is not in the message.

    Example:
        >>> with show_error(ValueError):
        ...     int("seven")
        ValueError: invalid literal for int() with base 10: 'seven'
        >>> with show_error(KeyError, match=r"'\w+'"):
        ...     {}["units"]
        KeyError: 'units'

    Taught in chapter 1, "When are the weights created?".
    """
    types = expected or (Exception,)
    for kind in types:
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise TypeError(f"expected: expected exception types, got {describe(kind)}")
    if match is not None:
        check_instance(match, "match", str, "None or a regular expression (a str)")
    width = check_int(width, "width", minimum=20)
    return _shown_error(types, match, width)


@contextlib.contextmanager
def _shown_error(
    types: tuple[type[BaseException], ...], match: str | None, width: int
) -> Iterator[CaughtError]:
    """``show_error``'s context manager, its arguments checked."""
    caught = CaughtError()
    names = " or ".join(kind.__name__ for kind in types)
    try:
        yield caught
    except types as error:
        caught.error = error
        message = strip_ansi(str(error))
        if match is None:
            text = next((line.strip() for line in message.splitlines() if line.strip()), "")
        else:
            found = re.search(match, message, re.DOTALL)
            if found is None:
                raise AssertionError(
                    f"show_error: {match!r} is not in the {type(error).__name__}'s message: "
                    f"{shorten(message, 300)!r}"
                ) from error
            text = " ".join(found.group(0).split())
        caught.shown = f"{type(error).__name__}: {text}"
        print_wrapped(caught.shown, width=width)
    else:
        raise AssertionError(f"show_error: expected {names}, but the block raised nothing")
