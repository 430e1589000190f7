"""The subprocess runner: Python source in a fresh interpreter, its output captured."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping

from companion._checks import check_instance
from companion._subprocess import check_timeout, child_environment


def run_python(
    code: str, *, timeout: float = 300, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    r"""Run ``code`` in a fresh Python process (this kernel's interpreter) and capture its output.

    The honest test of "does this saved model load elsewhere?": the child has imported
    nothing and registered nothing. TensorFlow's C++ start-up logs are silenced in it
    (``TF_CPP_MIN_LOG_LEVEL=3``) so that ``stderr`` holds only real errors. The child sees
    the same GPUs as the notebook (``setup`` lets the notebook's share of GPU memory grow).

    Args:
        code: Python source to run with ``python -c``.
        timeout: Seconds before the child is killed (``subprocess.TimeoutExpired``): a finite
            number > 0, at most ``MAX_TIMEOUT`` (a day).
        env: Extra environment variables for the child, on top of this process's: a mapping
            of str to str, or None.

    Returns:
        The ``subprocess.CompletedProcess`` with ``returncode``, ``stdout`` and ``stderr`` as text.

    Raises:
        TypeError: If ``code`` is not a str, ``timeout`` not a number or ``env`` not a mapping
            of str to str.
        ValueError: If ``timeout`` is not > 0, NaN, infinite or above ``MAX_TIMEOUT``.

    Example:
        >>> run_python("print(6 * 7)").stdout
        '42\n'

    Taught in chapter 2, "What composing gives you for free".
    """
    check_instance(code, "code", str, "Python source as a str")
    timeout = check_timeout(timeout)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_environment(env),
    )
