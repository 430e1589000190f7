"""Run a function under another Keras backend, in a child process, and bring back its result."""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from companion._backend import BACKENDS
from companion._checks import check_choice, check_instance, check_sequence
from companion._subprocess import check_timeout, child_environment
from companion.cluster import worker_source
from companion.notebook import run_python

#: What each backend's child gets besides ``KERAS_BACKEND``. PyTorch on a small shared CPU runs
#: its intra-op threads against each other: one thread made chapter 8's step 16 times faster
#: here (62 ms against 4 ms a step); JAX and TensorFlow did not need it.
BACKEND_ENV = {"tensorflow": {}, "jax": {}, "torch": {"OMP_NUM_THREADS": "1"}}

#: The line before the result in the child's output.
RESULT_MARK = "== result of run_on_backend =="


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
        return worker_source([*helpers, importing + printing])
    return worker_source([*helpers, function, printing])  # a notebook's: sent as source


def run_on_backend(
    function: Callable[..., Any],
    backend: str,
    *args: Any,
    helpers: Sequence[Callable[..., Any]] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 300.0,
) -> Any:
    """``function(*args)`` run in a fresh Python process whose Keras runs on ``backend``.

    Keras fixes its backend when it is first imported, so another backend needs another
    process. The companion's functions are imported there; any other (a notebook's) is sent as
    its source, so it must import what it uses. The arguments and the result go through JSON.

    Args:
        function: A ``def`` function; its arguments and result must be JSON-able.
        backend: ``"tensorflow"``, ``"jax"`` or ``"torch"``.
        *args: The arguments of the call.
        helpers: ``def`` functions that ``function`` calls, sent as their source before it,
            as ``cluster.run_workers`` sends a worker's helpers.
        env: Extra environment variables for the child, over ``BACKEND_ENV[backend]``.
        timeout: Seconds before the child is killed.

    Returns:
        What ``function`` returned, after a JSON round trip (tuples come back as lists).

    Raises:
        TypeError: If ``function`` or a helper is not a def function, or an argument is not
            JSON-able.
        ValueError: If ``backend`` is not one of ``BACKENDS``.
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
    return json.loads(said[-1])
