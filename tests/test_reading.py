"""What a reader of each chapter page faces: a short core, short teaching cells, checks collapsed.

The page shows a code cell open unless it is tagged ``hide-input``, ``hide-cell``,
``remove-input`` or ``remove-cell``. The core of a chapter is everything before its first
heading containing "Going deeper" (the optional sections); a reader who stops there has a whole
chapter. Directive blocks (``:::{note} ... :::``) and code are not prose.
"""

import re
from pathlib import Path

import nbformat
import pytest

BOOK = Path(__file__).resolve().parent.parent / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
HIDDEN = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
#: Formatting done inline that belongs to one helper of ``companion.notebook``.
PLUMBING = re.compile(
    r"textwrap\.|\bre\.(?:sub|search|match|findall|split)\(|describe_error|format_table|"
    r"json\.dumps|strip_ansi"
)
#: Words for the maintainers, not the reader.
ASIDE = re.compile(
    r"nbval|\bCI\b|tests/|\bmake (?:test|check|book|bench|execute|kernels|lint|unit|notebooks|"
    r"stamp|pdf)\b|Keras 3\.1[05]|(?:TF|TensorFlow) 2\.(?:19|21)|this machine"
)
DEEPER = re.compile(r"^#+ .*going deeper", re.I | re.M)
MAX_CORE_WORDS, MAX_CORE_LINES, MAX_CELL_LINES, MAX_SENTENCE_WORDS = 2500, 300, 30, 50


def prose(markdown: str) -> str:
    """The words a reader reads: no code, no directive blocks, link text only."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"^:::.*?^:::", " ", text, flags=re.S | re.M)
    text = re.sub(r"`[^`]*`", "x", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[#>*_|]", " ", text)


def words(text: str) -> int:
    return len(re.findall(r"\w+", text))


def visible(cell) -> bool:
    tags = set(cell.metadata.get("tags", []))
    return cell.cell_type == "code" and not tags & HIDDEN and cell.source.strip() != ""


def chapter(path):
    """(core prose, core visible code lines, prose per cell, visible code cells) of a notebook."""
    notebook = nbformat.read(path, as_version=4)
    core, core_prose, core_lines, all_prose, cells = True, [], 0, [], []
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            core = core and not DEEPER.search(cell.source)
            all_prose.append(prose(cell.source))
            if core:
                core_prose.append(all_prose[-1])
        elif visible(cell):
            cells.append(cell.source)
            core_lines += len(cell.source.rstrip("\n").split("\n")) if core else 0
    return "\n".join(core_prose), core_lines, all_prose, cells


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_core_is_a_short_chapter(path):
    core_prose, core_lines, _, _ = chapter(path)
    assert words(core_prose) <= MAX_CORE_WORDS, (
        f"{words(core_prose)} words before 'Going deeper' (at most {MAX_CORE_WORDS})"
    )
    assert core_lines <= MAX_CORE_LINES, (
        f"{core_lines} visible code lines before 'Going deeper' (at most {MAX_CORE_LINES})"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_visible_cells_teach_and_leave_checks_and_display_to_helpers(path):
    for source in chapter(path)[3]:
        where = f"visible cell {source[:60]!r}..."
        lines = len(source.rstrip("\n").split("\n"))
        assert lines <= MAX_CELL_LINES, f"{where}: {lines} lines (at most {MAX_CELL_LINES})"
        found = PLUMBING.search(source)
        assert not found, f"{where}: {found.group()} (use a companion.notebook helper)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_prose_is_plain_and_for_the_reader(path):
    cells = chapter(path)[2]
    text = "\n".join(cells)
    pieces = [piece for cell in cells for piece in re.split(r"(?<=[.!?])\s+", cell)]
    sentences = [piece for piece in pieces if words(piece) >= 3]
    long = [" ".join(s.split())[:80] for s in sentences if words(s) > MAX_SENTENCE_WORDS]
    assert not long, f"sentences over {MAX_SENTENCE_WORDS} words: {long}"
    mean = sum(map(words, sentences)) / len(sentences)
    assert mean <= 20, f"mean sentence length {mean:.1f} words"
    asides = sorted(set(ASIDE.findall(text)))
    assert not asides, f"maintainer words in the prose: {asides} (a Version note holds versions)"
    articles = len(re.findall(r"\bthe articles?\b", text, re.I))
    assert articles <= 2, f"'the article' {articles} times (name it once or twice, linked)"


def test_the_measures_see_what_they_measure():
    assert words(prose("Two `code spans` and [a link](x.md) count\n:::{note}\nskip me\n:::")) == 6
    assert DEEPER.search("## Going deeper: saving") and not DEEPER.search("going deeper")
    assert PLUMBING.search("print(textwrap.fill(x))") and not PLUMBING.search("show_table(rows)")
    assert ASIDE.search("runs in CI") and not ASIDE.search("CIFAR")
