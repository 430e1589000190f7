"""The pytest arguments of `make check NB=book/<chapter>.ipynb`: what one chapter's loop runs.

The chapter's modules are every `companion.<module>` named in its row of the chapter table in
book/intro.md. For each: its unit tests (tests/unit/test_<module>.py, or the folder
tests/unit/<module>/ of a package) and its docstring examples; then the chapter's exercise checks
(tests/unit/exercises/test_chNN.py), and the shared suites of tests/suites/, which conftest.py
narrows to the cases of those modules with --chapter-modules: bad inputs, conformance and the GPU
code paths.

    python tools/chapter_tests.py book/10_multi_worker.ipynb
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = [f"tests/suites/test_{name}.py" for name in ("bad_inputs", "conformance", "gpu_paths")]


def chapter_modules(notebook: Path) -> list[str]:
    """The companion modules the chapter's row of book/intro.md names, in order."""
    rows = [
        line
        for line in (ROOT / "book" / "intro.md").read_text().splitlines()
        if line.startswith("| [") and f"]({notebook.name})" in line
    ]
    return re.findall(r"`companion\.([a-z_]+)`", rows[0]) if rows else []


def module_paths(module: str) -> list[str]:
    """The module's tests and its source (for the docstring examples)."""
    package = ROOT / "companion" / module
    source = f"companion/{module}" if package.is_dir() else f"companion/{module}.py"
    unit = ROOT / "tests" / "unit"
    tests = f"tests/unit/{module}" if (unit / module).is_dir() else f"tests/unit/test_{module}.py"
    return [path for path in (tests, source) if (ROOT / path).exists()]


def arguments(notebook: Path) -> list[str]:
    modules = chapter_modules(notebook)
    paths = [path for module in modules for path in module_paths(module)]
    match = re.match(r"(\d\d|a\d)_", notebook.name)
    chapter = match.group(1) if match else ""
    name = "a1" if chapter.startswith("a") else f"ch{chapter}"
    exercises = f"tests/unit/exercises/test_{name}.py"
    if (ROOT / exercises).exists():
        paths.append(exercises)
    if modules:
        paths += SHARED + [f"--chapter-modules={','.join(modules)}"]
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():
        sys.exit("usage: python tools/chapter_tests.py book/<chapter>.ipynb")
    print(" ".join(arguments(Path(sys.argv[1]))))
