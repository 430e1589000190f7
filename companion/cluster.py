"""Several workers on one machine: chapter 10's harness.

``run_workers`` starts the same Python source (or a function, sent as its source) in several
fresh processes, each with the ``TF_CONFIG`` of one task of a cluster on 127.0.0.1 (free ports,
one per worker), as a cluster manager would on several machines.
``tf.distribute.MultiWorkerMirroredStrategy`` reads that variable, so the source trains exactly
as it would on a real cluster, and a test can check what each worker ended with
(``variables_digest`` prints a short fingerprint of a model's weights). When one worker fails or
the time runs out, every worker is killed, with any process it started.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from companion._checks import (
    check_instance,
    check_int,
    check_sequence,
    check_str,
    describe,
)
from companion._subprocess import MAX_TIMEOUT as MAX_TIMEOUT
from companion._subprocess import check_timeout, child_environment

__all__ = [
    "MAX_WORKERS",
    "WorkerError",
    "WorkerResult",
    "run_workers",
    "variables_digest",
    "worker_source",
]

#: The most workers ``run_workers`` starts: each is a TensorFlow process of its own.
MAX_WORKERS = 16
#: Lines of a failed worker's stderr quoted in the error.
TAIL_LINES = 20


@dataclass(frozen=True)
class WorkerResult:
    """What one worker left: its task index, exit status and output.

    Raises:
        TypeError: If ``index`` or ``returncode`` is not an int, or ``stdout`` or ``stderr``
            not a str.
        ValueError: If ``index`` is outside 0 to ``MAX_WORKERS - 1``.

    Taught in chapter 10, "A cluster on one machine".
    """

    index: int
    returncode: int
    stdout: str
    stderr: str

    def __post_init__(self) -> None:
        check_int(self.index, "index", minimum=0, maximum=MAX_WORKERS - 1)
        check_int(self.returncode, "returncode")
        check_instance(self.stdout, "stdout", str, "a str")
        check_instance(self.stderr, "stderr", str, "a str")


class WorkerError(RuntimeError):
    """A worker failed or the job ran out of time; every worker has been killed.

    Attributes:
        results: What each worker left (a killed worker's ``returncode`` is ``-9``).

    Raises:
        TypeError: If ``message`` is not a str or ``results`` not a list of ``WorkerResult``.
        ValueError: If ``message`` is empty.

    Taught in chapter 10, "When a worker dies".
    """

    def __init__(self, message: str, results: list[WorkerResult]) -> None:
        message = check_str(message, "message", "a non-empty str")
        results = check_sequence(
            results,
            "results",
            "a list of WorkerResult",
            item=lambda result, name: check_instance(result, name, WorkerResult, "a WorkerResult"),
            min_length=0,
        )
        super().__init__(message)
        self.results = list(results)


def _free_ports(count: int) -> list[int]:
    """``count`` ports that are free on 127.0.0.1 now (held open together, so distinct)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _tf_config(ports: list[int], index: int) -> str:
    workers = [f"127.0.0.1:{port}" for port in ports]
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})


def _kill(process: subprocess.Popen) -> None:
    """SIGKILL the worker's whole process group (it runs in a session of its own)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _tail(text: str) -> str:
    """The last ``TAIL_LINES`` lines of ``text``, more if needed to hold its last exception whole
    (from the exception's first line after the last ``Traceback`` header)."""
    lines = text.rstrip().splitlines()
    start = max(len(lines) - TAIL_LINES, 0)
    headers = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if headers:
        after = range(headers[-1] + 1, len(lines))
        raised = next((i for i in after if lines[i] and not lines[i][0].isspace()), start)
        start = min(start, raised)
    return "\n".join(lines[start:]) or "(empty)"


def _function_source(function: Callable[[], object], name: str) -> str:
    """The definition of a module-level function, dedented, for a worker to run."""
    if not isinstance(function, types.FunctionType) or function.__name__ == "<lambda>":
        raise TypeError(
            f"{name}: expected Python source (a str) or a def function, got {describe(function)}"
        )
    if function.__code__.co_freevars:
        raise ValueError(
            f"{name}: {function.__name__} uses variables of an enclosing function "
            f"({', '.join(function.__code__.co_freevars)}); a worker gets only its source, so "
            "define it at the top level and import or pass what it needs"
        )
    try:
        return textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError) as error:
        raise ValueError(
            f"{name}: the source of {function.__name__} cannot be read ({error}); define it in "
            "a file or a notebook cell, or pass its source as a str"
        ) from error


def worker_source(
    source: str | Callable[[], object] | Sequence[str | Callable[[], object]],
) -> str:
    """The Python source each worker runs, from a str, a function, or a list of them.

    A str is used as is. A function is replaced by its definition (``inspect.getsource``): it
    runs in a fresh process, so it imports what it uses and reads no variable of this one. The
    pieces are joined in order; when the last is a function, a call to it (no arguments)
    follows, so the others are the helpers it calls.

    Args:
        source: A str of Python source, a function defined with ``def`` at the top level of a
            file or a notebook cell, or a non-empty list or tuple of these.

    Returns:
        The source, ready for ``python -c``.

    Raises:
        TypeError: If a piece is neither a str nor such a function, or ``source`` is another
            type.
        ValueError: If a str is empty, the list is empty, a function is a closure, or its
            source cannot be read.

    Example:
        >>> def hello():
        ...     print("hello")
        >>> worker_source(hello).splitlines()[-1]  # the definition, then the call
        'hello()'

    Taught in chapter 10, "A cluster on one machine".
    """
    pieces = source if isinstance(source, (list, tuple)) else [source]
    if not pieces:
        raise ValueError(
            "source: expected Python source, a function or a non-empty list of "
            "them, got an empty list"
        )
    texts = []
    for index, piece in enumerate(pieces):
        name = "source" if pieces is not source else f"source[{index}]"
        if isinstance(piece, str):
            texts.append(check_str(piece, name, "non-empty Python source (a str)"))
        else:
            texts.append(_function_source(piece, name))
    if not isinstance(pieces[-1], str):
        texts.append(f"{pieces[-1].__name__}()\n")
    return "\n\n".join(text.rstrip("\n") + "\n" for text in texts)


def run_workers(
    source: str | Callable[[], object] | Sequence[str | Callable[[], object]],
    num_workers: int = 2,
    *,
    timeout: float = 300.0,
    env: Mapping[str, str] | None = None,
) -> list[WorkerResult]:
    """Run ``source`` in ``num_workers`` fresh Python processes, as the workers of one cluster.

    ``source`` is Python source, or a function (or a list of pieces) that
    :func:`worker_source` turns into source: ``run_workers(train, 2)`` runs ``train()`` in two
    workers.

    Worker ``i`` gets ``TF_CONFIG`` for task ``i`` of a cluster of free ports on 127.0.0.1, this
    interpreter, and the environment of :func:`companion.notebook.child_environment`. The
    call returns when every worker has exited 0. If one exits otherwise, or ``timeout`` seconds
    pass, every worker still running is killed (its process group: nothing is left behind) and
    :class:`WorkerError` names the worker and quotes the end of its stderr.

    Args:
        source: Python source, a function or a list of them (see :func:`worker_source`), run
            with ``python -c`` in every worker.
        num_workers: How many workers, an int from 1 to ``MAX_WORKERS``.
        timeout: Seconds for the whole job: > 0, at most ``MAX_TIMEOUT`` (a day, as for
            :func:`companion.notebook.run_python`).
        env: Extra environment variables (str to str), or None.

    Returns:
        One :class:`WorkerResult` per worker, in task order.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If ``source`` is empty or a function's source cannot be sent (see
            :func:`worker_source`), or a number is out of range.
        WorkerError: If a worker fails or the job times out; its message quotes the end of
            the failed worker's stderr, with the worker's last exception whole.

    Example:
        >>> results = run_workers("import json, os; "
        ...     "print(json.loads(os.environ['TF_CONFIG'])['task']['index'])")
        >>> [r.stdout.strip() for r in results]
        ['0', '1']

    Taught in chapter 10, "A cluster on one machine".
    """
    source = worker_source(source)
    num_workers = check_int(num_workers, "num_workers", minimum=1, maximum=MAX_WORKERS)
    timeout = check_timeout(timeout)
    base_env = child_environment(env)
    ports = _free_ports(num_workers)
    with tempfile.TemporaryDirectory() as folder:
        outputs, processes = [], []
        try:
            for index in range(num_workers):
                out, err = (open(f"{folder}/{index}.{kind}", "w+") for kind in ("out", "err"))
                outputs.append((out, err))
                worker_env = base_env | {"TF_CONFIG": _tf_config(ports, index)}
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-c", source],
                        stdout=out,
                        stderr=err,
                        env=worker_env,
                        start_new_session=True,
                    )
                )
            failure = _wait(processes, time.monotonic() + timeout, timeout)
        finally:
            for process in processes:
                if process.poll() is None:
                    _kill(process)
        results = []
        for index, (process, (out, err)) in enumerate(zip(processes, outputs)):
            out.seek(0)
            err.seek(0)
            results.append(WorkerResult(index, process.returncode, out.read(), err.read()))
            out.close()
            err.close()
    if failure is not None:
        index, reason = failure
        stderr = "" if index is None else f"; its stderr ends:\n{_tail(results[index].stderr)}"
        raise WorkerError(reason + stderr, results)
    return results


def _wait(
    processes: list[subprocess.Popen], deadline: float, timeout: float
) -> tuple[int | None, str] | None:
    """Wait for every process; the first failure as ``(index, reason)``, or None."""
    while True:
        running = False
        for index, process in enumerate(processes):
            code = process.poll()
            if code is None:
                running = True
            elif code != 0:
                return index, f"worker {index} of {len(processes)} exited with status {code}"
        if not running:
            return None
        if time.monotonic() > deadline:
            stuck = [i for i, p in enumerate(processes) if p.poll() is None]
            return stuck[0], f"timeout: workers {stuck} still running after {timeout:g} s"
        time.sleep(0.05)


def variables_digest(variables: Any) -> str:
    """A 16-hex-digit fingerprint of variables' values, shapes and dtypes, in order.

    Workers print it to show they hold the same weights (equal digests: equal bits).

    Args:
        variables: A Keras model or layer (its ``variables``), or a list of variables or arrays.

    Raises:
        TypeError: If ``variables`` is none of these.

    Example:
        >>> import numpy as np
        >>> variables_digest([np.zeros(3, "float32")]) == variables_digest([np.zeros(3)])
        False

    Taught in chapter 10, "One training script, one worker and two".
    """
    import numpy as np

    values = getattr(variables, "variables", variables)
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, (list, tuple)):
        raise TypeError(
            f"variables: expected a Keras model or layer, or a list of variables or arrays, "
            f"got {describe(variables)}"
        )
    digest = hashlib.sha256()
    for index, value in enumerate(values):
        try:
            array = np.asarray(value)
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"variables[{index}]: expected a variable or array, got {describe(value)}"
            ) from error
        if array.dtype == object:
            raise TypeError(
                f"variables[{index}]: expected a variable or array, got {describe(value)}"
            )
        digest.update(f"{array.shape}{array.dtype}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]
