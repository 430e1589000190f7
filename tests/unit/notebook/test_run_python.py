"""``companion.notebook.run_python``: Python source in a fresh interpreter."""

import sys

import pytest

from companion.notebook import run_python


def test_run_python_uses_a_fresh_interpreter_without_this_process_state(tmp_path):
    sys_modules_marker = "companion.notebook" in sys.modules
    result = run_python("import sys; print('companion.notebook' in sys.modules, sys.executable)")
    assert sys_modules_marker and result.returncode == 0
    printed, executable = result.stdout.split()
    assert printed == "False" and executable == sys.executable
    failing = run_python("raise SystemExit('boom')")
    assert failing.returncode == 1 and "boom" in failing.stderr
    assert (
        run_python("import os; print(os.environ['EXTRA'])", env={"EXTRA": "yes"}).stdout == "yes\n"
    )
    with pytest.raises(
        TypeError, match=r"^code: expected Python source as a str, got list \['print\(1\)'\]$"
    ):
        run_python(["print(1)"])


def test_run_python_returns_tracebacks_without_colour_codes_from_a_kernel():
    """An IPython kernel sets FORCE_COLOR=1; on Python 3.13 a child's traceback was coloured."""
    failing = run_python(
        "raise ValueError('plain')", env={"FORCE_COLOR": "1", "TERM": "xterm-color"}
    )
    assert failing.returncode == 1
    assert failing.stderr.rstrip().endswith("ValueError: plain")
    assert "\x1b" not in failing.stderr


@pytest.mark.parametrize(
    "timeout, error",
    [
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        (0, ValueError),
        (-1, ValueError),
        (10**12, ValueError),
        (2 * 86_400, ValueError),  # two days: over the limit
        (None, TypeError),
        ("10", TypeError),
    ],
)
def test_run_python_timeout_is_a_positive_finite_number_of_seconds_up_to_a_day(timeout, error):
    with pytest.raises(error, match=r"^timeout: expected a finite number > 0 and <= 86400, got "):
        run_python("print(1)", timeout=timeout)


@pytest.mark.parametrize(
    "env, error, match",
    [
        ("A=1", TypeError, r"^env: expected a mapping of str to str or None, got str 'A=1'$"),
        ([("A", "1")], TypeError, r"^env: expected a mapping of str to str or None, got list "),
        ({"A": 1}, TypeError, r"^env\['A'\]: expected a str value, got int 1$"),
        ({"A": None}, TypeError, r"^env\['A'\]: expected a str value, got NoneType None$"),
        ({1: "x"}, TypeError, r"^env\[1\]: expected a str name, got int 1$"),
    ],
)
def test_run_python_env_is_a_mapping_of_str_to_str(env, error, match):
    with pytest.raises(error, match=match):
        run_python("print(1)", env=env)
