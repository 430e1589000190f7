"""The companion's shape, read from its source: small files, short simple functions, and names that
show the boundary between what a file keeps to itself and what other files use.

- No file over 600 lines.
- No function over 60 lines of code: from ``def`` to its end, without blank lines, comment lines
  and the docstring.
- No function over complexity 12: 1, plus one for each ``if`` (statement or expression), loop,
  ``except``, ``with``, ``assert``, comprehension and ``match`` case, plus each extra operand of
  ``and``/``or``. A nested function's branches count for the function around it too.
- A name another file imports is not ``_``-private to its own: it is public, in a module that may
  itself be private (``optimizers/_shared.py``'s ``path``, optax's ``_src`` rule).
- tests/ keeps its test files in its four folders, none at its root.
"""

import ast
from pathlib import Path

import pytest
from helpers.repo_tools import TESTS

import companion

PACKAGE = Path(companion.__file__).parent
SOURCES = sorted(PACKAGE.rglob("*.py"))
MAX_FILE_LINES, MAX_FUNCTION_LINES, MAX_COMPLEXITY = 600, 60, 12
BRANCHES = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.ExceptHandler, ast.With)
BRANCHES += (ast.AsyncWith, ast.Assert, ast.comprehension, ast.match_case)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def complexity(function: ast.AST) -> int:
    """1 plus each branch of ``function`` (nested functions included) and each extra and/or."""
    count = 1
    for node in ast.walk(function):
        if isinstance(node, BRANCHES):
            count += 1
        elif isinstance(node, ast.BoolOp):
            count += len(node.values) - 1
    return count


def code_lines(function: ast.AST, lines: list[str]) -> int:
    """Lines from ``def`` to the end, without blank lines, comment lines and the docstring."""
    skipped = set()
    first = function.body[0]
    if isinstance(first, ast.Expr) and isinstance(getattr(first.value, "value", None), str):
        skipped = set(range(first.lineno, first.end_lineno + 1))
    return sum(
        1
        for number in range(function.lineno, function.end_lineno + 1)
        if number not in skipped and lines[number - 1].strip()[:1] not in ("", "#")
    )


def functions():
    """(``file:function``, node, source lines) for every function of the package."""
    for path in SOURCES:
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, FUNCTIONS):
                yield f"{path.relative_to(PACKAGE.parent)}:{node.name}", node, lines


def imported_private_names(path: Path) -> list[str]:
    """``module.name`` for each ``_name`` that ``path`` imports from another companion file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if not (node.level or (node.module or "").split(".")[0] == "companion"):
            continue
        folder = _folder_of(path, node)
        for alias in node.names:
            module = (folder / alias.name).with_suffix(".py").exists() or (
                folder / alias.name
            ).is_dir()
            if alias.name.startswith("_") and not alias.name.startswith("__") and not module:
                found.append(f"{'.' * node.level}{node.module or ''}.{alias.name}")
    return found


def _folder_of(path: Path, node: ast.ImportFrom) -> Path:
    """The folder whose files ``from <module> import <file>`` would name."""
    base = path.parents[node.level - 1] if node.level else PACKAGE.parent
    return base.joinpath(*(node.module or "").split("."))


def test_the_complexity_count_follows_its_definition():
    source = """
def f(x, items):
    if x and x > 1 or not x:
        for item in items:
            with open(item) as f:
                pass
    try:
        assert [i for i in items if i]
    except ValueError:
        return 1 if x else 2
    def inner():
        while x:
            pass
"""
    function = ast.parse(source).body[0]
    # if, and/or (2 extra operands), for, with, assert, comprehension, except, if-expression, while
    assert complexity(function) == 1 + 1 + 2 + 1 + 1 + 1 + 1 + 1 + 1 + 1
    assert code_lines(function, source.splitlines()) == 12


def test_the_import_reader_finds_private_names_however_imported(tmp_path):
    path = tmp_path / "example.py"
    path.write_text(
        "from companion.timing import _check_calls, compare\n"
        "from ._shared import path, _replicas\n"
        "from companion import __version__, _kernels\n"
        "def later():\n    from companion.notebook import _check_env\n"
    )
    found = imported_private_names(path)
    assert found == [
        "companion.timing._check_calls",
        "._shared._replicas",
        "companion.notebook._check_env",
    ]


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_no_file_is_over_600_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_FILE_LINES, f"{path.name}: {lines} lines"


def test_no_function_is_long_or_branchy():
    problems = []
    for name, node, lines in functions():
        length, branches = code_lines(node, lines), complexity(node)
        if length > MAX_FUNCTION_LINES:
            problems.append(f"{name}: {length} lines of code")
        if branches > MAX_COMPLEXITY:
            problems.append(f"{name}: complexity {branches}")
    assert not problems, "\n".join(problems)


def test_no_file_imports_a_private_name_of_another():
    problems = {
        str(path.relative_to(PACKAGE.parent)): imported_private_names(path) for path in SOURCES
    }
    problems = {path: names for path, names in problems.items() if names}
    assert not problems, problems


def test_tests_keep_their_files_in_four_folders():
    assert not sorted(path.name for path in TESTS.glob("test_*.py"))
    kinds = {path.parent.relative_to(TESTS).parts[0] for path in TESTS.rglob("test_*.py")}
    assert kinds == {"unit", "portable", "suites", "book"}
