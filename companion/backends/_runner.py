"""Run a function under another Keras backend, in a child process, and bring back its result."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from companion._backend import BACKEND_NAMES, BACKENDS
from companion._checks import check_bool, check_choice, check_instance, check_sequence
from companion._subprocess import check_timeout, child_environment
from companion.cluster import worker_source
from companion.devices import JAX_PREALLOCATE, runtime_line
from companion.notebook import run_python

#: What each backend's child gets besides ``KERAS_BACKEND``. JAX: its GPU memory taken as
#: needed, not 75% of it at its first array (the notebook's kernel holds some already).
#: PyTorch: one intra-op thread (``OMP_NUM_THREADS=1``), so that its threads do not compete
#: with each other and with the other processes for the cores of a small shared CPU.
BACKEND_ENV = {"tensorflow": {}, "jax": dict(JAX_PREALLOCATE), "torch": {"OMP_NUM_THREADS": "1"}}

#: The line before the result in the child's output.
RESULT_MARK = "== result of run_on_backend =="
#: The start of the child's line that says where it runs (``pin_runtime``'s result, as JSON).
RUNTIME_MARK = "== runtime of run_on_backend == "
#: What every child runs first: the pins of ``setup()`` (TF32 off, GPU memory as needed, the
#: stand-in when the environment asks), then the line that says where it runs.
PIN_SOURCE = (
    "import json\n"
    "from companion.devices import pin_runtime\n"
    f"print({RUNTIME_MARK!r} + json.dumps(pin_runtime()), flush=True)\n"
)


def check_helpers(helpers: object) -> tuple:
    """``helpers`` as a tuple of def functions (a list or tuple of them, empty too)."""
    return check_sequence(
        helpers,
        "helpers",
        "a list of def functions",
        item=lambda h, n: check_instance(h, n, types.FunctionType, "a def function"),
        min_length=0,
    )


class BackendRunError(RuntimeError):
    """The child process of ``run_on_backend`` failed; the message ends with its traceback.

    Taught in chapter 14, "One process per backend".
    """


def _call_source(function: Callable[..., Any], args: tuple, helpers: Sequence) -> str:
    """The source that defines (or imports) ``function`` after ``helpers``, calls it and prints
    its result."""
    call = f"{function.__name__}(*json.loads({json.dumps(json.dumps(list(args)))}))"
    printing = f"import json\nprint({RESULT_MARK!r})\nprint(json.dumps({call}))\n"
    if function.__module__.startswith("companion.") and "<" not in function.__qualname__:
        importing = f"from {function.__module__} import {function.__name__}\n"
        return worker_source([PIN_SOURCE, *helpers, importing + printing])
    return worker_source([PIN_SOURCE, *helpers, function, printing])  # a notebook's: its source


def check_installed(backend: str) -> str:
    """``backend`` when its package is installed in this Python, else a one-line error.

    Raises:
        ModuleNotFoundError: Naming the backend and the ``pip install`` that adds it.
    """
    if importlib.util.find_spec(backend) is None:
        raise ModuleNotFoundError(
            f"backend: {BACKEND_NAMES[backend]} is not installed in this Python "
            f"({sys.executable}); install it with: pip install {backend}",
            name=backend,
        )
    return backend


def run_on_backend(
    function: Callable[..., Any],
    backend: str,
    *args: Any,
    helpers: Sequence[Callable[..., Any]] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    verbose: bool = False,
) -> Any:
    """``function(*args)`` run in a fresh Python process whose Keras runs on ``backend``.

    Keras fixes its backend when it is first imported, so another backend needs another
    process. The companion's functions are imported there; any other (a notebook's) is sent as
    its source, so it must import what it uses. The arguments and the result go through JSON.

    The child first pins what ``setup()`` pins (``companion.devices.pin_runtime``): on a GPU,
    TF32 off, so that its float32 results compare with a CPU's within 1e-5, and GPU memory taken
    as needed, so that it runs beside the notebook's kernel. It runs on the backend's default
    device: the GPU when there is one.

    Args:
        function: A ``def`` function; its arguments and result must be JSON-able.
        backend: ``"tensorflow"``, ``"jax"`` or ``"torch"``.
        *args: The arguments of the call.
        helpers: ``def`` functions that ``function`` calls, sent as their source before it,
            as ``cluster.run_workers`` sends a worker's helpers.
        env: Extra environment variables for the child, over ``BACKEND_ENV[backend]``.
        timeout: Seconds before the child is killed.
        verbose: Print the line the child says: which device it ran on, and what it pinned
            there (``companion.devices.runtime_line``).

    Returns:
        What ``function`` returned, after a JSON round trip (tuples come back as lists).

    Raises:
        TypeError: If ``function`` or a helper is not a def function, an argument is not
            JSON-able or ``verbose`` not a bool.
        ValueError: If ``backend`` is not one of ``BACKENDS``.
        ModuleNotFoundError: If the backend's package is not installed (one line: the
            ``pip install`` that adds it).
        BackendRunError: If the child fails; the message ends with its traceback.

    Example:
        >>> from companion._backend import backend
        >>> run_on_backend(backend, "jax")  # the running backend's name, asked in a child
        'jax'

    Taught in chapter 14, "One process per backend".
    """
    check_instance(function, "function", types.FunctionType, "a def function")
    backend = check_choice(backend, "backend", BACKENDS)
    timeout = check_timeout(timeout)
    child_environment(env)  # checks env: a mapping of str to str, or None
    helpers = check_helpers(helpers)
    verbose = check_bool(verbose, "verbose")
    check_installed(backend)
    try:
        source = _call_source(function, args, helpers)
    except TypeError as error:
        raise TypeError(f"args: expected JSON-able arguments, got {args!r} ({error})") from None
    child_env = {**BACKEND_ENV[backend], **(env or {}), "KERAS_BACKEND": backend}
    child = run_python(source, timeout=timeout, env=child_env)
    said = child.stdout.split(RESULT_MARK + "\n")
    if child.returncode != 0 or len(said) < 2:
        tail = "\n".join(child.stderr.strip().splitlines()[-12:])
        raise BackendRunError(
            f"{function.__name__} failed under KERAS_BACKEND={backend} "
            f"(exit status {child.returncode}):\n{tail}"
        )
    if verbose:
        print(f"{BACKEND_NAMES[backend]} child {runtime_line(_child_runtime(child.stdout))}")
    return json.loads(said[-1])


def _child_runtime(stdout: str) -> dict:
    """``pin_runtime``'s result, from the child's line that starts with ``RUNTIME_MARK``."""
    line = next(line for line in stdout.splitlines() if line.startswith(RUNTIME_MARK))
    return json.loads(line.removeprefix(RUNTIME_MARK))
