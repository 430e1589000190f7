"""Bad inputs for ``companion.cluster``: the job's arguments, what a digest takes, and the records
a job leaves (a worker's result, the error of a failed job)."""

from helpers.badinput import Case, Int, Kind, Real, Str

from companion.cluster import (
    MAX_TIMEOUT,
    MAX_WORKERS,
    WorkerError,
    WorkerResult,
    run_workers,
    variables_digest,
    worker_source,
)

ENV = Kind(
    "None or a mapping of str to str",
    lambda v: (
        v is None
        or (
            isinstance(v, dict)
            and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())
        )
    ),
    extra_bad=({"A": 1}, {1: "a"}),
)

#: What ``run_workers`` and ``worker_source`` run: Python source, a def function, or a non-empty
#: list of them (no function is in the pool: a bad value is never one).
SOURCE = Kind(
    "Python source, a def function or a non-empty list of them",
    lambda v: (
        (isinstance(v, str) and v != "")
        or (isinstance(v, (list, tuple)) and v and all(isinstance(p, str) and p for p in v))
    ),
    extra_bad=(["pass", ""], [print], lambda: None),
)

TEXT = Kind("a str (empty too)", lambda v: isinstance(v, str))
RESULT = WorkerResult(index=0, returncode=1, stdout="", stderr="Traceback ...")

CASES = [
    Case(
        "run_workers",
        run_workers,
        {"source": "pass", "num_workers": 1, "timeout": 60.0, "env": None},
        {
            "source": SOURCE,
            "num_workers": Int(1, MAX_WORKERS),
            "timeout": Real(above=0, maximum=MAX_TIMEOUT),
            "env": ENV,
        },
    ),
    Case("worker_source", worker_source, {"source": "pass"}, {"source": SOURCE}),
    Case(
        "variables_digest",
        variables_digest,
        {"variables": [[1.0, 2.0]]},
        {
            "variables": Kind(
                "a list of arrays",
                lambda v: (
                    isinstance(v, (list, tuple)) and all(isinstance(x, (list, float)) for x in v)
                ),
                extra_bad=([object()], [{"a": 1}]),
            )
        },
    ),
    Case(
        "WorkerResult",
        WorkerResult,
        {"index": 0, "returncode": 0, "stdout": "", "stderr": ""},
        {
            "index": Int(0, MAX_WORKERS - 1),
            "returncode": Int(),
            "stdout": TEXT,
            "stderr": TEXT,
        },
    ),
    Case(
        "WorkerError",
        WorkerError,
        {"message": "worker 0 of 2 exited with status 1", "results": [RESULT]},
        {
            "message": Str(),
            "results": Kind(
                "a list of WorkerResult",
                lambda v: (
                    isinstance(v, (list, tuple)) and all(isinstance(r, WorkerResult) for r in v)
                ),
            ),
        },
    ),
]

EXEMPT = {"MAX_WORKERS": "a constant"}
