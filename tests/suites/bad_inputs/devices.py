"""Bad inputs for ``companion.devices``: the CPU split into replicas, the XLA error reader and
the line a child says about its runtime."""

from helpers.badinput import Case, Instance, Int

from companion.devices import MAX_CPU_DEVICES, missing_xla_kernel, runtime_line, split_cpu

CASES = [
    Case("split_cpu", split_cpu, {"devices": 2}, {"devices": Int(1, MAX_CPU_DEVICES)}),
    Case(
        "missing_xla_kernel",
        missing_xla_kernel,
        {"error": "no XLA error"},
        {"error": Instance(BaseException, str, what="an exception or a str")},
    ),
    Case(
        "runtime_line",
        runtime_line,
        {"info": {"backend": "jax", "device": "CPU"}},
        {"info": Instance(dict, what="pin_runtime's result (a dict)")},
    ),
]
