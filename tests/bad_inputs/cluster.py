"""Bad inputs for ``companion.cluster``: the job's arguments and what a digest takes."""

from badinput import Case, Int, Kind, Real, Str

from companion.cluster import MAX_TIMEOUT, MAX_WORKERS, run_workers, variables_digest

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

CASES = [
    Case(
        "run_workers",
        run_workers,
        {"source": "pass", "num_workers": 1, "timeout": 60.0, "env": None},
        {
            "source": Str(),
            "num_workers": Int(1, MAX_WORKERS),
            "timeout": Real(above=0, maximum=MAX_TIMEOUT),
            "env": ENV,
        },
    ),
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
]

EXEMPT = {
    "WorkerResult": "a frozen result record that run_workers builds; users read it",
    "WorkerError": "an exception class (raised, not called with user input)",
    "MAX_WORKERS": "a constant",
}
