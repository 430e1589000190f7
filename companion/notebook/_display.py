"""Text display for a chapter's output: tables, wrapped text, JSON, and errors shown short.

Text, JSON and errors are wrapped to ``PAGE_WIDTH``, the page's code column, with their terminal
colour codes removed, so that a stored output reads the same on the page, in Colab and under nbval.
"""

from __future__ import annotations

import contextlib
import json
import re
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from companion._checks import check_instance, check_int, check_sequence, describe, shorten
from companion._text import strip_ansi

#: The width of the book's page column in characters, which the display helpers wrap to.
PAGE_WIDTH = 88


def format_table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> str:
    """Format rows as a fixed-width text table (deterministic, so nbval can check it).

    Args:
        rows: A list or tuple (or 2-D array) of rows, each a list, tuple or array with one value
            per header; none at all gives the header alone. Floats are shown with 4 significant
            digits.
        headers: Column titles: a non-empty list or tuple of str.

    Returns:
        The table as a string, header and a rule line first.

    Raises:
        TypeError: If ``rows``, a row or ``headers`` is not a list or tuple (a str, a dict, a
            generator ...), or a header is not a str.
        ValueError: If ``headers`` is empty or a row's length differs from the number of headers.

    Example:
        >>> print(format_table([("kernel", (3, 2))], ["name", "shape"]))
        name    shape
        ------  ------
        kernel  (3, 2)

    Taught in chapter 9, "Combining optimizers: Lookahead".
    """
    headers = check_sequence(
        headers,
        "headers",
        "a non-empty list or tuple of str",
        item=lambda header, name: check_instance(header, name, str, "a str"),
    )
    rows = check_sequence(
        rows,
        "rows",
        "a list or tuple of rows",
        min_length=0,
        item=lambda row, name: _check_row(row, name, len(headers)),
    )
    cells = [list(headers)] + [
        [f"{v:.4g}" if isinstance(v, float) else str(v) for v in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _check_row(row: object, name: str, length: int) -> tuple[object, ...]:
    """``row`` as a tuple of ``length`` values (one per header)."""
    what = f"a list or tuple of {length} values (one per header)"
    values = check_sequence(row, name, what, min_length=0)
    if len(values) != length:
        raise ValueError(f"{name}: expected {what}, got {describe(row)}")
    return values


def describe_error(error: BaseException, lines: int = 1, *, width: int | None = None) -> str:
    r"""``"TypeName: first line"`` of an exception: colour codes and blank lines dropped.

    Args:
        error: The exception (usually the one caught by ``except ... as error``).
        lines: How many non-blank lines of its message to keep (joined by an indented newline).
        width: None keeps each line whole. An int (at least 20) puts the type name alone on
            the first line and the message under it, indented by 4 and wrapped so that no
            line is longer than ``width``: an error that fits a page column.

    Raises:
        TypeError: If ``error`` is not an exception, or ``lines`` or ``width`` not an int.
        ValueError: If ``lines < 1`` or ``width < 20``.

    Example:
        >>> describe_error(ValueError("\x1b[1mbad\x1b[0m width\n\nmore detail"))
        'ValueError: bad width'
        >>> error = ValueError("units: expected an int >= 1, got 0")
        >>> print(describe_error(error, width=24))
        ValueError:
            units: expected an
            int >= 1, got 0

    Taught in chapter 1, "When are the weights created?".
    """
    check_instance(error, "error", BaseException, "an exception")
    lines = check_int(lines, "lines", minimum=1)
    if width is not None:
        width = check_int(width, "width", minimum=20)
    kept = [line.strip() for line in strip_ansi(str(error)).splitlines() if line.strip()][:lines]
    name = type(error).__name__
    if width is None:
        return f"{name}: " + "\n    ".join(kept)
    indent = " " * 4
    wrapped = [
        textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent) for line in kept
    ]
    return "\n".join([f"{name}:", *wrapped])


def show_table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> None:
    """Print ``format_table(rows, headers)``: a small table in a chapter's output.

    Args:
        rows: The rows, as ``format_table`` takes them.
        headers: The column titles, as ``format_table`` takes them.

    Raises:
        TypeError, ValueError: As ``format_table`` does.

    Example:
        >>> show_table([("kernel", (3, 2))], ["name", "shape"])
        name    shape
        ------  ------
        kernel  (3, 2)

    Taught in chapter 1, "When are the weights created?".
    """
    print(format_table(rows, headers))


def print_wrapped(text: str, *, width: int = PAGE_WIDTH, indent: int = 0) -> None:
    r"""Print ``text`` wrapped to the page column, colour codes removed.

    Each line of ``text`` is wrapped on its own (blank lines are kept); continuation lines are
    indented by ``indent + 4`` spaces, so a wrapped line reads as one.

    Args:
        text: What to print (a str).
        width: The longest line, in characters (an int, at least 20).
        indent: Spaces before every line (an int from 0 to ``width - 10``).

    Raises:
        TypeError: If ``text`` is not a str, or ``width`` or ``indent`` not an int.
        ValueError: If ``width < 20`` or ``indent`` is outside 0 to ``width - 10``.

    Example:
        >>> print_wrapped("first ops: Placeholder, MatMul, BiasAdd, Relu", width=24)
        first ops: Placeholder,
            MatMul, BiasAdd,
            Relu

    Taught in chapter 2, "Which ops have which gradient".
    """
    check_instance(text, "text", str, "a str")
    width = check_int(width, "width", minimum=20)
    indent = check_int(indent, "indent", minimum=0, maximum=width - 10)
    for line in strip_ansi(text).splitlines() or [""]:
        print(
            textwrap.fill(
                line,
                width,
                initial_indent=" " * indent,
                subsequent_indent=" " * (indent + 4),
                break_on_hyphens=False,
            )
            if line.strip()
            else ""
        )


def show_json(data: object, *, keys: Sequence[str] | None = None, width: int = PAGE_WIDTH) -> None:
    """Print JSON data (a layer's ``get_config()``, a saved file's config) one key per line.

    What ``json.dumps`` accepts is printed as it would be saved; a value it refuses raises its
    ``TypeError``, which is what a ``.keras`` file would meet too. Long values wrap to ``width``.

    Args:
        data: A JSON-serialisable value; with ``keys``, a mapping.
        keys: None prints all of ``data``; a list or tuple of str prints only those keys of the
            mapping, in that order.
        width: The longest line, in characters (an int, at least 20).

    Raises:
        TypeError: If ``data`` is not JSON-serialisable, ``keys`` is given for something that is
            not a mapping, or ``keys`` or ``width`` has the wrong type.
        ValueError: If a key is missing from ``data`` or ``width < 20``.

    Example:
        >>> show_json({"units": 4, "activation": "relu", "name": "dense"}, keys=["units"])
        {
          "units": 4
        }

    Taught in chapter 3, "Inside a model".
    """
    width = check_int(width, "width", minimum=20)
    if keys is not None:
        check_instance(data, "data", Mapping, "a mapping (keys were given)")
        keys = check_sequence(
            keys,
            "keys",
            "None or a list or tuple of str",
            item=lambda key, name: check_instance(key, name, str, "a str"),
            min_length=0,
        )
        missing = [key for key in keys if key not in data]
        if missing:
            raise ValueError(f"keys: expected keys of data, got {missing} (data has {list(data)})")
        data = {key: data[key] for key in keys}
    print_wrapped(json.dumps(data, indent=2), width=width)


@dataclass
class CaughtError:
    """What ``show_error`` caught: ``error`` (the exception) and ``shown`` (the printed text).

    Taught in chapter 1, "When are the weights created?".
    """

    error: BaseException | None = None
    shown: str = ""


def show_error(
    *expected: type[BaseException], match: str | None = None, width: int = PAGE_WIDTH
) -> contextlib.AbstractContextManager[CaughtError]:
    r"""Run a block that must fail, and print its error as Python shows it, short.

    The block's exception, if it is one of ``expected``, is printed as ``TypeName: message``
    (the message's first non-blank line, or what ``match`` finds in it), colour codes removed
    and wrapped to ``width``; then the notebook goes on. A block that raises nothing, or a
    ``match`` that finds nothing, is an ``AssertionError``: the failure the chapter shows is
    checked every time it runs. Any other exception propagates unchanged.

    Args:
        *expected: The exception types the block must raise (default: ``Exception``).
        match: None shows the message's first line; a regular expression shows its first match
            in the whole message (searched with ``re.DOTALL``).
        width: The longest printed line, in characters (an int, at least 20).

    Returns:
        A context manager giving a ``CaughtError``, filled in when the block has failed
        (``.error`` for a closer look).

    Raises:
        TypeError: If an ``expected`` is not an exception type, ``match`` not a str or None,
            or ``width`` not an int.
        ValueError: If ``width < 20``.
        AssertionError: If the block raised nothing, or ``match`` is not in the message.

    Example:
        >>> with show_error(ValueError):
        ...     int("seven")
        ValueError: invalid literal for int() with base 10: 'seven'
        >>> with show_error(KeyError, match=r"'\w+'"):
        ...     {}["units"]
        KeyError: 'units'

    Taught in chapter 1, "When are the weights created?".
    """
    types = expected or (Exception,)
    for kind in types:
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise TypeError(f"expected: expected exception types, got {describe(kind)}")
    if match is not None:
        check_instance(match, "match", str, "None or a regular expression (a str)")
    width = check_int(width, "width", minimum=20)
    return _shown_error(types, match, width)


@contextlib.contextmanager
def _shown_error(
    types: tuple[type[BaseException], ...], match: str | None, width: int
) -> Iterator[CaughtError]:
    """``show_error``'s context manager, its arguments checked."""
    caught = CaughtError()
    names = " or ".join(kind.__name__ for kind in types)
    try:
        yield caught
    except types as error:
        caught.error = error
        message = strip_ansi(str(error))
        if match is None:
            text = next((line.strip() for line in message.splitlines() if line.strip()), "")
        else:
            found = re.search(match, message, re.DOTALL)
            if found is None:
                raise AssertionError(
                    f"show_error: {match!r} is not in the {type(error).__name__}'s message: "
                    f"{shorten(message, 300)!r}"
                ) from error
            text = " ".join(found.group(0).split())
        caught.shown = f"{type(error).__name__}: {text}"
        print_wrapped(caught.shown, width=width)
    else:
        raise AssertionError(f"show_error: expected {names}, but the block raised nothing")
