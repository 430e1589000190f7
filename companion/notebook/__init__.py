"""Notebook helpers: reproducible set-up, plain-text tables, error messages without terminal
colours, and a fresh Python process for "does it load elsewhere?".

Every chapter starts with ``setup()``. The display helpers keep a chapter's visible cells to
the code being taught: ``show_error`` (an error as Python shows it, short), ``show_table``
(a small table), ``print_wrapped`` (text wrapped to ``PAGE_WIDTH``, the page column's 88
characters) and ``show_json`` (a config or other JSON data, one line per key), one home each.
``run_python`` gives its child ``CHILD_DEFAULTS`` and at most ``MAX_TIMEOUT`` seconds (a day).

The device helpers the chapters import from here, ``gpu_available``, ``enable_gpu_memory_growth``
and ``split_cpu`` (up to ``MAX_CPU_DEVICES``), live in :mod:`companion.devices`, documented there.

Backends: TensorFlow, JAX, PyTorch, except ``enable_gpu_memory_growth`` and ``split_cpu``
(TensorFlow only).
"""

from companion._subprocess import CHILD_DEFAULTS as CHILD_DEFAULTS
from companion._subprocess import MAX_TIMEOUT as MAX_TIMEOUT
from companion._subprocess import child_environment
from companion._text import strip_ansi
from companion.devices import MAX_CPU_DEVICES as MAX_CPU_DEVICES
from companion.devices import enable_gpu_memory_growth as enable_gpu_memory_growth
from companion.devices import gpu_available as gpu_available
from companion.devices import split_cpu as split_cpu
from companion.notebook._display import PAGE_WIDTH as PAGE_WIDTH
from companion.notebook._display import (
    CaughtError,
    describe_error,
    format_table,
    print_wrapped,
    show_error,
    show_json,
    show_table,
)
from companion.notebook._run_python import run_python
from companion.notebook._setup import in_colab, setup

__all__ = [
    "CaughtError",
    "child_environment",
    "describe_error",
    "format_table",
    "in_colab",
    "print_wrapped",
    "run_python",
    "setup",
    "show_error",
    "show_json",
    "show_table",
    "strip_ansi",
]
