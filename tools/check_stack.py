"""Check that the running Python has exactly the versions a stack file pins (``name==version``).

    python tools/check_stack.py requirements-colab.txt

`make test-colab` runs it after installing the companion the way Colab's setup cell does,
so a companion release that would replace Colab's TensorFlow, Keras or NumPy fails there.
It also checks the Python version named in a ``# python: X.Y`` comment.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PIN = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#]+)")
PYTHON = re.compile(r"^#\s*python:\s*(\d+\.\d+)")


def differences(stack_file: Path) -> list[str]:
    """One line per pinned package (or the Python version) that differs from what is running."""
    problems = []
    for line in stack_file.read_text(encoding="utf-8").splitlines():
        if python := PYTHON.match(line):
            running = f"{sys.version_info.major}.{sys.version_info.minor}"
            if running != python.group(1):
                problems.append(
                    f"python: {stack_file.name} names {python.group(1)}, running {running}"
                )
        elif pin := PIN.match(line):
            name, wanted = pin.groups()
            try:
                installed = version(name)
            except PackageNotFoundError:
                installed = "not installed"
            if installed != wanted:
                problems.append(f"{name}: {stack_file.name} pins {wanted}, installed {installed}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    problems = differences(Path(argv[0]))
    print("\n".join(problems) or f"stack as pinned in {argv[0]}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
