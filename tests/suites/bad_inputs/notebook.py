"""Bad inputs for ``companion.notebook``: the set-up cell and the chapters' small helpers (the
device helpers it re-exports have their rows in ``devices.py``)."""

from collections.abc import Mapping

import numpy as np
from helpers.badinput import Bool, Case, Instance, Int, Kind, Real

from companion.notebook import (
    MAX_TIMEOUT,
    child_environment,
    describe_error,
    format_table,
    print_wrapped,
    run_python,
    setup,
    show_error,
    show_json,
    show_table,
    strip_ansi,
)


def _row_of(count):
    return lambda row: isinstance(row, (list, tuple, np.ndarray)) and len(row) == count


TEXT = Kind("a str ('' too)", lambda v: isinstance(v, str))
ROWS = Kind(
    "a list, tuple or 2-D array of rows of 2 values",
    lambda v: (
        (isinstance(v, (list, tuple)) and all(_row_of(2)(row) for row in v))
        or (isinstance(v, np.ndarray) and v.ndim == 2 and v.shape[1] == 2)
    ),
    extra_bad=([(1, 2), (3,)], [(1, 2), "ab"], [{"a": 1, "b": 2}]),
)
HEADERS = Kind(
    "a non-empty list or tuple of str",
    lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(isinstance(h, str) for h in v),
    extra_bad=(["a", 2], "ab"),
)
KEYS = Kind(
    "None or a list or tuple of keys of {'units': 4}",
    lambda v: v is None or (isinstance(v, (list, tuple)) and all(k == "units" for k in v)),
    extra_bad=(["scale"], ["units", 2], "units"),
)
ENV = Kind(
    "None or a mapping of str to str",
    lambda v: (
        v is None
        or (
            isinstance(v, Mapping)
            and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())
        )
    ),
    extra_bad=({1: "x"}, {"A": None}, {"A": 1.5}),
)

CASES = [
    Case(
        "setup",
        setup,
        {"seed": 0, "verbose": False},
        {"seed": Int(0, 2**32 - 1), "verbose": Bool()},
    ),
    Case(
        "format_table",
        format_table,
        {"rows": [("x", 1.5)], "headers": ["a", "b"]},
        {"rows": ROWS, "headers": HEADERS},
    ),
    Case(
        "show_table",
        show_table,
        {"rows": [("x", 1.5)], "headers": ["a", "b"]},
        {"rows": ROWS, "headers": HEADERS},
    ),
    Case(
        "print_wrapped",
        print_wrapped,
        {"text": "some words", "width": 40, "indent": 0},
        {"text": TEXT, "width": Int(20), "indent": Int(0, 30)},
    ),
    Case(
        "show_json",
        show_json,
        {"data": {"units": 4}, "keys": ["units"], "width": 40},
        {"keys": KEYS, "width": Int(20)},
    ),
    Case(
        "show_error",
        lambda match, width: show_error(ValueError, match=match, width=width),
        {"match": "bad", "width": 40},
        {"match": TEXT.or_none(), "width": Int(20)},
    ),
    Case("strip_ansi", strip_ansi, {"text": "\x1b[1mbold\x1b[0m"}, {"text": TEXT}),
    Case(
        "describe_error",
        describe_error,
        {"error": ValueError("bad"), "lines": 1, "width": None},
        {"error": Instance(BaseException), "lines": Int(1), "width": Int(20).or_none()},
    ),
    Case(
        "run_python",
        run_python,
        {"code": "pass", "timeout": 60, "env": None},
        {"code": TEXT, "timeout": Real(above=0, maximum=MAX_TIMEOUT), "env": ENV},
    ),
    Case("child_environment", child_environment, {"env": None}, {"env": ENV}),
]

EXEMPT = {"CaughtError": "what show_error yields, filled in by it (a dataclass)"}
