"""A chapter's child Python processes: the environment they start with and how long they may run.

``notebook.run_python`` starts one child, ``cluster.run_workers`` one per worker; both take their
environment and their time limit from here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from companion._checks import check_instance, check_real

#: The longest a child process (``run_python``) or a job of workers (``run_workers``) may run, in
#: seconds: one day. No Colab runtime lives longer (12 hours, 24 with Colab Pro), so no job a
#: reader can run meets the limit, while a timeout written in milliseconds (``300_000`` for five
#: minutes) is refused instead of holding the kernel for days.
MAX_TIMEOUT = 86_400.0

#: The variables every child process of a chapter gets, to keep TensorFlow's C++ start-up logs
#: off and tracebacks plain. An IPython kernel sets ``FORCE_COLOR=1``, which Python 3.13 obeys in
#: a child (its tracebacks then carry colour codes onto the page); ``PYTHON_COLORS=0`` wins.
CHILD_DEFAULTS = {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHON_COLORS": "0"}


def check_timeout(timeout: object) -> float:
    """``timeout`` as a float: seconds for a child process, > 0 and at most ``MAX_TIMEOUT``."""
    return check_real(timeout, "timeout", above=0, maximum=MAX_TIMEOUT)


def child_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a chapter's child process: this one's, ``CHILD_DEFAULTS``, then ``env``.

    Args:
        env: Extra variables, which win over the rest: a mapping of str to str, or None.

    Returns:
        A new dict; ``os.environ`` is left as it was.

    Raises:
        TypeError: If ``env`` is not a mapping of str to str.

    Example:
        >>> child_environment({"KERAS_BACKEND": "jax"})["PYTHON_COLORS"]
        '0'

    Taught in chapter 2, "What composing gives you for free".
    """
    if env is not None:
        check_instance(env, "env", Mapping, "a mapping of str to str or None")
        for key, value in env.items():
            check_instance(key, f"env[{key!r}]", str, "a str name")
            check_instance(value, f"env[{key!r}]", str, "a str value")
    return {**os.environ, **CHILD_DEFAULTS, **(env or {})}
