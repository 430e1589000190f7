"""Several workers on one machine: chapter 10's harness.

``run_workers`` starts the same Python source in several fresh processes, each with the
``TF_CONFIG`` of one task of a cluster on 127.0.0.1 (free ports, one per worker), as a cluster
manager would on several machines. ``tf.distribute.MultiWorkerMirroredStrategy`` reads that
variable, so the source trains exactly as it would on a real cluster, and a test can check what
each worker ended with (``variables_digest`` prints a short fingerprint of a model's weights).
When one worker fails or the time runs out, every worker is killed, with any process it started.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from companion._checks import (
    check_instance,
    check_int,
    check_real,
    check_sequence,
    check_str,
    describe,
)
from companion.notebook import child_environment

__all__ = ["MAX_WORKERS", "WorkerError", "WorkerResult", "run_workers", "variables_digest"]

#: The most workers ``run_workers`` starts: each is a TensorFlow process of its own.
MAX_WORKERS = 16
#: The longest ``timeout`` (a day): a job that needs more is not one for this harness.
MAX_TIMEOUT = 86_400.0
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
    return "\n".join(text.rstrip().splitlines()[-TAIL_LINES:]) or "(empty)"


def run_workers(
    source: str,
    num_workers: int = 2,
    *,
    timeout: float = 300.0,
    env: Mapping[str, str] | None = None,
) -> list[WorkerResult]:
    """Run ``source`` in ``num_workers`` fresh Python processes, as the workers of one cluster.

    Worker ``i`` gets ``TF_CONFIG`` for task ``i`` of a cluster of free ports on 127.0.0.1, this
    interpreter, and the environment of :func:`companion.notebook.child_environment`. The
    call returns when every worker has exited 0. If one exits otherwise, or ``timeout`` seconds
    pass, every worker still running is killed (its process group: nothing is left behind) and
    :class:`WorkerError` names the worker and quotes the end of its stderr.

    Args:
        source: Python source, run with ``python -c`` in every worker.
        num_workers: How many workers, an int from 1 to ``MAX_WORKERS``.
        timeout: Seconds for the whole job: > 0, at most ``MAX_TIMEOUT``.
        env: Extra environment variables (str to str), or None.

    Returns:
        One :class:`WorkerResult` per worker, in task order.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If ``source`` is empty or a number is out of range.
        WorkerError: If a worker fails or the job times out.

    Example:
        >>> results = run_workers("import json, os; "
        ...     "print(json.loads(os.environ['TF_CONFIG'])['task']['index'])")
        >>> [r.stdout.strip() for r in results]
        ['0', '1']

    Taught in chapter 10, "A cluster on one machine".
    """
    source = check_str(source, "source", "non-empty Python source (a str)")
    num_workers = check_int(num_workers, "num_workers", minimum=1, maximum=MAX_WORKERS)
    timeout = check_real(timeout, "timeout", above=0, maximum=MAX_TIMEOUT)
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
