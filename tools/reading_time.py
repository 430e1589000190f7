"""Reading times by one rule, written into each chapter's opening line and the intro's table.

The rule, as the intro states it: a reader reads prose at 200 words a minute and code at 20
visible lines a minute (3 seconds a line); the sum is rounded to the nearest 5 minutes, and is
never under 5. Prose is the words of the markdown cells, without code, directive blocks (notes,
admonitions) or link targets. Visible code is every line of a code cell the page shows open (not
tagged ``hide-input``, ``hide-cell``, ``remove-input`` or ``remove-cell``). The core is
everything before the chapter's first heading that contains "Going deeper".

Usage: python tools/reading_time.py [--check] [NOTEBOOK ...]
  writes the times into the notebooks' opening lines and book/intro.md's chapter table;
  --check only lists the places whose stated time differs from the rule (exit 1 if any).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
INTRO = BOOK / "intro.md"
HIDDEN = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
DEEPER = re.compile(r"^#+ .*going deeper", re.I | re.M)
WORDS_PER_MINUTE, LINES_PER_MINUTE, ROUND_TO = 200, 20, 5
#: A chapter's line on time: ``*About 20 minutes to read the core, 85 the whole page; 1 minute
#: to run. Builds on chapter 7.*`` (the older form ``*About 12 minutes to read, 1 minute to run.``
#: is read too, so that the first stamp can rewrite it).
OPENING = re.compile(
    r"\*About (?P<core>\d+) minutes to read(?: the core, (?P<page>\d+) the whole page;|,) "
    r"(?P<run>\d+) (?:minutes? )?to run\."
)


class Counts(NamedTuple):
    """What a reader faces: prose words and visible code lines, in the core and on the page."""

    core_words: int
    core_lines: int
    words: int
    lines: int


def prose(markdown: str) -> str:
    """The words a reader reads: no code, no directive blocks, link text only."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"^:::.*?^:::", " ", text, flags=re.S | re.M)
    text = re.sub(r"`[^`]*`", "x", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[#>*_|]", " ", text)


def words(text: str) -> int:
    """The number of words in ``text``."""
    return len(re.findall(r"\w+", text))


def visible_lines(cell: dict) -> int:
    """The lines of code the page shows open for ``cell`` (0 for markdown or hidden code)."""
    source = "".join(cell.get("source", ""))
    tags = set(cell.get("metadata", {}).get("tags", []))
    if cell["cell_type"] != "code" or tags & HIDDEN or not source.strip():
        return 0
    return len(source.rstrip("\n").split("\n"))


def counts(path: Path) -> Counts:
    """The core's and the whole page's prose words and visible code lines of a notebook."""
    core, core_words, core_lines, all_words, all_lines = True, 0, 0, 0, 0
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"])
            core = core and not DEEPER.search(source)
            found = words(prose(source))
            all_words += found
            core_words += found if core else 0
        lines = visible_lines(cell)
        all_lines += lines
        core_lines += lines if core else 0
    return Counts(core_words, core_lines, all_words, all_lines)


def minutes(words_read: int, lines_read: int) -> int:
    """The rule: 200 words and 20 code lines a minute, to the nearest 5 minutes, at least 5."""
    exact = words_read / WORDS_PER_MINUTE + lines_read / LINES_PER_MINUTE
    return max(ROUND_TO, ROUND_TO * round(exact / ROUND_TO))


def times(path: Path) -> tuple[int, int]:
    """``(core minutes, whole-page minutes)`` of a notebook, by the rule."""
    found = counts(path)
    return minutes(found.core_words, found.core_lines), minutes(found.words, found.lines)


def opening_line(core: int, page: int, run: int) -> str:
    """The time part of a chapter's opening line."""
    return (
        f"*About {core} minutes to read the core, {page} the whole page; "
        f"{run} minute{'s' if run != 1 else ''} to run."
    )


def intro_cell(core: int, page: int) -> str:
    """The intro table's reading-time cell."""
    return f"| {core} / {page} min |"


INTRO_CELL = re.compile(r"\| \d+(?: / \d+)? min \|")


def stamp(path: Path, write: bool) -> list[str]:
    """Bring a notebook's opening line and its intro row to the rule; what was stale."""
    core, page = times(path)
    stale = []
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"][:4]:
        source = "".join(cell["source"])
        found = OPENING.search(source) if cell["cell_type"] == "markdown" else None
        if found:
            wanted = opening_line(core, page, int(found.group("run")))
            if found.group() != wanted:
                stale.append(f"{path.name}: {found.group()!r} -> {wanted!r}")
                stamped = source[: found.start()] + wanted + source[found.end() :]
                cell["source"] = stamped.splitlines(keepends=True)
            break
    else:
        stale.append(f"{path.name}: no '*About N minutes to read ...' line in the opening")
    if write and stale:
        text = json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"
        path.write_text(text, encoding="utf-8")
    intro = INTRO.read_text(encoding="utf-8").splitlines(keepends=True)
    for i, line in enumerate(intro):
        if line.startswith("| [") and f"]({path.name})" in line:
            fixed = INTRO_CELL.sub(intro_cell(core, page), line)
            if fixed != line:
                stale.append(f"intro.md, row of {path.name}: -> {intro_cell(core, page)}")
                intro[i] = fixed
    if write and "".join(intro) != INTRO.read_text(encoding="utf-8"):
        INTRO.write_text("".join(intro), encoding="utf-8")
    return stale


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [Path(a) for a in argv if not a.startswith("--")] or sorted(BOOK.glob("*.ipynb"))
    stale = [line for path in paths for line in stamp(path.resolve(), write=not check)]
    print("\n".join(stale) or f"reading times follow the rule in {len(paths)} notebooks")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
