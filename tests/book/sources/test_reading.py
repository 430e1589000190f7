"""What a reader of each chapter page faces: a short core, short teaching cells, checks collapsed.

The page shows a code cell open unless it is tagged ``hide-input``, ``hide-cell``,
``remove-input`` or ``remove-cell``. The core of a chapter is everything before its first
heading containing "Going deeper" (the optional sections); a reader who stops there has a whole
chapter. Directive blocks (``:::{note} ... :::``) and code are not prose.
"""

import re

import nbformat
import pytest
from helpers import repo_tools

reading_time = repo_tools.load("reading_time")
prose, words, DEEPER = reading_time.prose, reading_time.words, reading_time.DEEPER

NOTEBOOKS = sorted((repo_tools.ROOT / "book").glob("*.ipynb"))
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
MAX_CORE_WORDS, MAX_CORE_LINES, MAX_CELL_LINES, MAX_SENTENCE_WORDS = 2500, 300, 30, 50


def chapter(path):
    """(core prose, prose per cell, visible code cells) of a notebook."""
    notebook = nbformat.read(path, as_version=4)
    core, core_prose, all_prose, cells = True, [], [], []
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            core = core and not DEEPER.search(cell.source)
            all_prose.append(prose(cell.source))
            if core:
                core_prose.append(all_prose[-1])
        elif reading_time.visible_lines(cell):
            cells.append(cell.source)
    return "\n".join(core_prose), all_prose, cells


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_core_is_a_short_chapter(path):
    found = reading_time.counts(path)
    assert found.core_words <= MAX_CORE_WORDS, (
        f"{found.core_words} words before 'Going deeper' (at most {MAX_CORE_WORDS})"
    )
    assert found.core_lines <= MAX_CORE_LINES, (
        f"{found.core_lines} visible code lines before 'Going deeper' (at most {MAX_CORE_LINES})"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_core_teaches_keras_not_its_sources(path):
    """The core talks about Keras and TF; the articles and the ledger stay in notes at most once."""
    core_prose = chapter(path)[0]
    for source in (r"\bthe articles?\b", r"\bledger rows?\b"):
        found = len(re.findall(source, core_prose, re.I))
        assert found <= 1, f"{source} {found} times before 'Going deeper' (at most once)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_visible_cells_teach_and_leave_checks_and_display_to_helpers(path):
    for source in chapter(path)[2]:
        where = f"visible cell {source[:60]!r}..."
        lines = len(source.rstrip("\n").split("\n"))
        assert lines <= MAX_CELL_LINES, f"{where}: {lines} lines (at most {MAX_CELL_LINES})"
        found = PLUMBING.search(source)
        assert not found, f"{where}: {found.group()} (use a companion.notebook helper)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_prose_is_plain_and_for_the_reader(path):
    cells = chapter(path)[1]
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
