"""Write requirements-colab.txt from Colab's own published package list.

Colab publishes its runtime in the repository googlecolab/backend-info. A copy of its GPU files
(pip-freeze.gpu.txt, os-info-gpu.txt) lives in tools/colab/, with the commit and date it was
taken from in tools/colab/source.txt. This script picks the book's packages and Python out of it.

    python tools/colab_stack.py                 # write requirements-colab.txt from the copy
    python tools/colab_stack.py --check         # exit 1 if requirements-colab.txt disagrees
    python tools/colab_stack.py --update DIR    # copy the files from DIR (a backend-info clone
                                                # or git directory) first, recording its commit

To follow Colab when it upgrades: fetch googlecolab/backend-info, run `--update` on it, then
`make test-colab` (README.md, "Follow Colab when it upgrades").
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPY = ROOT / "tools" / "colab"
STACK_FILE = ROOT / "requirements-colab.txt"
FILES = ("pip-freeze.gpu.txt", "os-info-gpu.txt")

#: The book's packages, as requirements.txt names them.
PACKAGES = (
    "tensorflow",
    "keras",
    "tf-keras",
    "tensorboard",
    "numpy",
    "opencv-python-headless",
    "matplotlib",
    "jax",
    "torch",
)

FREEZE_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)")
PYTHON_LINE = re.compile(r"^Python (\d+)\.(\d+)\.\d+\s*$")


def normalized(name: str) -> str:
    """A package name as PyPI compares them (PEP 503): ``tf_keras`` and ``tf-keras`` agree."""
    return re.sub(r"[-_.]+", "-", name).lower()


def freeze_pins(text: str) -> dict[str, str]:
    """``{normalized name: version}`` of every ``name==version`` line of a pip freeze."""
    pins = {}
    for line in text.splitlines():
        if pin := FREEZE_PIN.match(line.strip()):
            pins[normalized(pin.group(1))] = pin.group(2)
    return pins


def python_version(os_info: str) -> str:
    """The ``MAJOR.MINOR`` of the ``Python X.Y.Z`` line of Colab's os-info file."""
    for line in os_info.splitlines():
        if match := PYTHON_LINE.match(line.strip()):
            return f"{match.group(1)}.{match.group(2)}"
    raise ValueError("os-info-gpu.txt has no 'Python X.Y.Z' line")


def source_fields(text: str) -> dict[str, str]:
    """The ``key: value`` lines of tools/colab/source.txt."""
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def render(copy: Path = COPY) -> str:
    """The text of requirements-colab.txt for the copy of Colab's files in ``copy``."""
    pins = freeze_pins((copy / "pip-freeze.gpu.txt").read_text(encoding="utf-8"))
    missing = [name for name in PACKAGES if normalized(name) not in pins]
    if missing:
        raise ValueError(f"Colab's pip-freeze.gpu.txt lists no {', '.join(missing)}")
    python = python_version((copy / "os-info-gpu.txt").read_text(encoding="utf-8"))
    source = source_fields((copy / "source.txt").read_text(encoding="utf-8"))
    lines = [
        "# The stack Google Colab ships, what `make test-colab` tests the book on. Written by",
        "# tools/colab_stack.py from Colab's own list (tools/colab/), taken from",
        f"# {source['repository']} at {source['commit'][:12]} ({source['date']}):",
        "# do not edit; run `python tools/colab_stack.py --update DIR` when Colab upgrades.",
        f"# python: {python}",
    ]
    for name in PACKAGES:
        pin = pins[normalized(name)]
        public, _, local = pin.partition("+")
        if local:  # e.g. torch 2.11.0+cu128, from PyTorch's own index; PyPI has 2.11.0
            lines.append(f"# Colab has {name} {pin} (a local build); PyPI's release is {public}")
        lines.append(f"{name}=={public}")
    return "\n".join(lines) + "\n"


def update(source_dir: Path, copy: Path = COPY) -> None:
    """Copy Colab's files from a backend-info checkout or git directory, recording its commit."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(source_dir), *args], check=True, capture_output=True, text=True
        ).stdout

    for name in FILES:
        (copy / name).write_text(git("show", f"HEAD:{name}"), encoding="utf-8")
    commit, date, subject = git("log", "-1", "--format=%H%n%ad%n%s", "--date=short").splitlines()
    (copy / "source.txt").write_text(
        f"repository: googlecolab/backend-info\ncommit: {commit}\ndate: {date}\n"
        f"subject: {subject}\nfiles: {', '.join(FILES)}\n",
        encoding="utf-8",
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--update", type=Path, metavar="DIR", help="copy Colab's files first")
    args = parser.parse_args(argv)
    if args.update:
        update(args.update)
    wanted = render()
    if args.check:
        if STACK_FILE.read_text(encoding="utf-8") != wanted:
            print(f"{STACK_FILE.name} disagrees with tools/colab/: run tools/colab_stack.py")
            return 1
        print(f"{STACK_FILE.name} agrees with Colab's list in tools/colab/")
        return 0
    STACK_FILE.write_text(wanted, encoding="utf-8")
    print(f"wrote {STACK_FILE.name}:\n{wanted}", end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
