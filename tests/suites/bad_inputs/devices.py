"""Bad inputs for ``companion.devices``: the XLA error reader."""

from helpers.badinput import Case, Instance

from companion.devices import missing_xla_kernel

CASES = [
    Case(
        "missing_xla_kernel",
        missing_xla_kernel,
        {"error": "no XLA error"},
        {"error": Instance(BaseException, str, what="an exception or a str")},
    ),
]
