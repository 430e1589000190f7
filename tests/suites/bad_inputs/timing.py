"""Bad inputs for ``companion.timing``: every bad value is refused before any timing work.

Every public name has a case (``default_device`` takes no argument; ``Timing`` is exempt). The
checks shared with ``bench`` (``companion._checks``'s ``check_calls`` and ``check_device``, and
``MAX_REPEATS``) are exercised through the public names that call them, here and in ``bench``'s
table, which shares the kinds of a device, a count of repeats and a mapping of calls.
"""

from collections.abc import Mapping

from helpers.badinput import Anything, Callable_, Case, Int, Kind, Real

from companion.timing import compare, default_device, fetch, time_call

REPEATS = Int(1, 1000)
DEVICE = Kind(
    "None or a device string TensorFlow has",
    lambda v: v is None or v in ("/CPU:0", "CPU:0", "/cpu:0"),
    extra_bad=("/TPU:7", "/CPU:99", "no such device"),
)


def calls_kind(*required):
    """A non-empty mapping of str names to callables, with the ``required`` names."""
    return Kind(
        "a mapping of str to callables" + (f" with {required}" if required else ""),
        lambda v: (
            isinstance(v, Mapping)
            and len(v) > 0
            and set(required) <= set(v)
            and all(isinstance(k, str) and callable(f) for k, f in v.items())
        ),
        extra_bad=({"a": print, 2: print}, {"a": print, "b": "text"}),
    )


CASES = [
    Case("fetch", fetch, {"result": [1.0]}, {"result": Anything()}),
    Case(
        "time_call",
        time_call,
        {"fn": abs, "repeats": 1, "number": 1, "warmup": 0, "device": None},
        {
            "fn": Callable_(),
            "repeats": REPEATS,
            "number": Int(1, 10**6),
            "warmup": Int(0, 1000),
            "device": DEVICE,
        },
    ),
    Case(
        "compare",
        compare,
        {"calls": {"a": abs}, "repeats": 1, "device": None, "target": 1e-4},
        {
            "calls": calls_kind(),
            "repeats": REPEATS,
            "device": DEVICE,
            "target": Real(above=0, maximum=60),
        },
    ),
    Case("default_device", default_device, {}, {}),  # no argument: nothing to make bad
]

EXEMPT = {
    "Timing": "a frozen result dataclass that time_call and compare build; "
    "users read it, not make it"
}
