"""The book as a whole: table of contents, notebooks, setup cell, versions, built pages."""

import functools
import json
import re

import nbformat
import pytest
import yaml
from helpers import repo_tools
from helpers.repo_tools import ROOT

BOOK = ROOT / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
#: (name on the testing page, package in the requirement files) for the versions it states.
#: Exercise difficulty marks (book/intro.md explains them).
DIFFICULTY = "(★☆☆|★★☆|★★★)"
PACKAGES = [
    ("TensorFlow", "tensorflow"),
    ("Keras", "keras"),
    ("JAX", "jax"),
    ("PyTorch", "torch"),
    ("NumPy", "numpy"),
    ("OpenCV", "opencv-python-headless"),
]


def _template():
    return repo_tools.load("notebook_template")


reading_time = repo_tools.load("reading_time")


def toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def test_every_notebook_is_in_the_toc_and_every_toc_entry_exists():
    listed = toc_files()
    assert sorted(f"book/{nb.stem}" for nb in NOTEBOOKS) == sorted(
        f for f in listed if (ROOT / f"{f}.ipynb").exists()
    )
    for entry in listed:
        assert any((ROOT / f"{entry}{suffix}").exists() for suffix in (".md", ".ipynb")), entry


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_committed_executed_in_order_without_errors(path):
    notebook = nbformat.read(path, as_version=4)
    cells = [c for c in notebook.cells if c.cell_type == "code" and c.source.strip()]
    counts = [c.execution_count for c in cells]
    assert None not in counts, "run `make execute NB=...` and commit the outputs"
    assert counts == list(range(1, len(cells) + 1)), (
        "cells were not run top to bottom in one kernel"
    )
    assert not [o for c in cells for o in c.outputs if o.output_type == "error"]
    stamped = sum("execution" in c.metadata for c in notebook.cells)
    assert not stamped, f"{stamped} cells keep execution timestamps: `make execute` strips them"
    assert any("nbval-check-output" in c.metadata.get("tags", []) for c in cells), (
        "no checked result"
    )
    assert notebook.cells[-1].cell_type != "code" or "hide" in str(notebook.cells[-1].metadata)
    headings = [c.source for c in notebook.cells if c.cell_type == "markdown"]
    assert any("## Summary" in h for h in headings) and any("## Exercises" in h for h in headings)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_opens_with_its_outcomes_and_reading_times_by_the_intros_rule(path):
    notebook = nbformat.read(path, as_version=4)
    opening = "\n".join(c.source for c in notebook.cells[:4] if c.cell_type == "markdown")
    assert "**After this chapter you can:**" in opening, "open with the reader's outcomes"
    assert reading_time.stamp(path, write=False) == [], "run `make stamp`"


def test_the_reading_time_rule_is_the_one_the_intro_states():
    intro = " ".join((BOOK / "intro.md").read_text().split())
    assert "200 words a minute of prose plus 20 lines of code a minute" in intro
    assert "nearest 5 minutes" in intro
    assert [reading_time.minutes(w, n) for w, n in [(0, 0), (1154, 250), (6602, 1047)]] == [
        5,
        20,
        85,
    ]


def exercises_and_solutions(path):
    """The items of a chapter's Practice and Exercises sections (``- **4.1** ★☆☆ **Title.**
    ...``), by their number within the chapter, and its solution cells by number
    (``# Solution to exercise 4.1``)."""
    notebook = nbformat.read(path, as_version=4)
    sections = [
        c.source
        for c in notebook.cells
        if c.cell_type == "markdown" and c.source.startswith(("## Practice", "## Exercises"))
    ]
    items = [
        item
        for section in sections
        for item in re.findall(r"^- \*\*(?:\d+|A)\.(\d+)\*\* (.*)$", section, re.MULTILINE)
    ]
    solutions = {}
    for cell in notebook.cells:
        if cell.cell_type == "code" and (
            match := re.match(r"# Solution to exercise (?:(?:\d+|A)\.)?(\d+)\b", cell.source)
        ):
            solutions[match.group(1)] = cell
    return items, solutions


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_exercise_has_a_difficulty_and_a_hidden_tested_solution(path):
    items, solutions = exercises_and_solutions(path)
    assert len(items) >= 2, "a chapter ends with 2-3 exercises"
    for number, text in items:
        assert re.match(rf"{DIFFICULTY} \*\*", text), (
            f"exercise {number}: start with a difficulty ({DIFFICULTY})"
        )
        cell = solutions.get(number)
        assert cell is not None, (
            f"exercise {number}: no cell starting '# Solution to exercise {number}'"
        )
        assert "hide-cell" in cell.metadata.get("tags", []), f"solution {number}: tag it hide-cell"
        assert "assert" in cell.source, f"solution {number}: assert what the exercise asks for"
    assert sorted(solutions) == sorted(number for number, _ in items)


#: What an output-checked cell must not show, as it changes with the machine or its load: a
#: time (``2.01 ms``, ``examples/s``), and a rounding-level figure printed as ``1.2e-07`` (one
#: decimal, an exponent of -5 or below: a measured difference near a dtype's epsilon, which
#: another CPU rounds differently). Print the verdict of the bound instead (``within 2 eps:
#: True``).
TIMING_CALL = re.compile(r"\b(perf_counter|time_call|timeit)\(")
TIMING_FIGURE = re.compile(r"\d(\.\d+)? ?(ms|µs|us|ns)\b|examples/s\b")
ROUNDING_FIGURE = re.compile(r"(?<![\d.])\d\.\de-(0[5-9]|[1-9]\d)\b")


def test_the_output_guard_catches_timings_and_rounding_figures():
    assert TIMING_FIGURE.search("6 ms  6.013") and TIMING_FIGURE.search("1,024 examples/s")
    assert ROUNDING_FIGURE.search("float32  0.0e+00  1.2e-07") and ROUNDING_FIGURE.search("1.1e-16")
    assert not ROUNDING_FIGURE.search(
        "atol 1e-06, softplus(-20) = 2.061e-09, 2**-17 = 7.62939453125e-06"
    )
    assert not TIMING_FIGURE.search("4 items, terms, 10 seconds")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_output_checked_cells_hold_no_timings_or_rounding_figures(path):
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if "nbval-check-output" not in cell.metadata.get("tags", []):
            continue
        text = "".join(
            o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in cell.outputs
        )
        where = f"an nbval-check-output cell ({cell.source[:50]!r}...)"
        assert not TIMING_CALL.search(cell.source), (
            f"{where} times something: tag it nbval-ignore-output"
        )
        for pattern in (TIMING_FIGURE, ROUNDING_FIGURE):
            found = pattern.search(text)
            assert not found, (
                f"{where} shows {found.group()!r}, which another machine prints differently"
            )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_outputs_hold_no_terminal_colour_codes(path):
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            text = output.get("text", "") + str(output.get("data", {}).get("text/plain", ""))
            assert "\x1b[" not in text, f"ANSI codes in the output of: {cell.source[:60]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_starts_with_the_current_setup_cell(path):
    assert _template().problem(path) is None, "run `make stamp`, then `make execute`"


def test_setup_cell_installs_from_the_configured_repository():
    assert CONFIG["repository"]["url"] in _template().setup_source()


#: Run before the setup cell: a Colab kernel (google.colab imported) without the companion.
_AS_IN_COLAB = """\
import importlib.util, sys, types
sys.modules["google.colab"] = types.ModuleType("google.colab")
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "companion" else _find_spec(name, *a)
"""


def test_setup_cell_in_colab_says_what_failed_when_pip_cannot_install(tmp_path):
    import subprocess
    import sys

    unreachable = (tmp_path / "no-such-repository").as_uri()
    source = _template().SETUP_CELL.format(url=unreachable)
    child = subprocess.run(
        [sys.executable, "-c", _AS_IN_COLAB + source],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode != 0
    *_, raised, advice = child.stderr.strip().splitlines()
    tried = f"RuntimeError: pip could not install white-box-tf @ git+{unreachable}: "
    assert raised.startswith(tried) and len(raised) > len(tried)  # then pip's last line
    assert advice.startswith("Check that this runtime reaches github.com")


def _pinned(requirement_file, package, operator):
    text = (ROOT / requirement_file).read_text()
    return re.search(rf"^{re.escape(package)}{operator}(\d+\.\d+)", text, re.MULTILINE).group(1)


def test_the_testing_page_states_both_tested_stacks():
    page = (BOOK / "testing.md").read_text()
    colab_python = re.search(
        r"^# python: (\d+\.\d+)", (ROOT / "requirements-colab.txt").read_text(), re.M
    )
    stacks = {
        "pinned": [
            (name, _pinned("requirements.txt", package, "(?:>=|==)")) for name, package in PACKAGES
        ],
        "Colab": [
            (name, _pinned("requirements-colab.txt", package, "==")) for name, package in PACKAGES
        ]
        + [("Python", colab_python.group(1))],
    }
    for stack, versions in stacks.items():
        for name, version in versions:
            assert f"**{name} {version}**" in page, (
                f"testing.md should name {name} {version} ({stack} stack)"
            )


def test_the_running_stack_is_one_the_testing_page_names():
    import cv2
    import keras
    import numpy
    import tensorflow as tf

    page = (BOOK / "testing.md").read_text()
    for name, module in [("TensorFlow", tf), ("Keras", keras), ("NumPy", numpy), ("OpenCV", cv2)]:
        major_minor = ".".join(module.__version__.split(".")[:2])
        assert f"**{name} {major_minor}**" in page, f"testing.md should say {name} {major_minor}"


def test_intro_links_every_chapter():
    intro = (BOOK / "intro.md").read_text()
    missing = [nb.name for nb in NOTEBOOKS if f"]({nb.name})" not in intro]
    assert not missing, f"book/intro.md's chapter map should link {missing}"


def test_a_solutions_toggle_names_its_exercise_by_its_whole_id():
    template = _template()
    for first_line, label in [
        ("# Solution to exercise 8.1", "8.1"),
        ("# Solution to exercise A.2", "A.2"),
        ("# Solution to exercise 3", "3"),
    ]:
        cell = nbformat.v4.new_code_cell(f"{first_line}\nanswer = 1")
        prompts = template.solution_prompts(cell)
        assert prompts["code_prompt_show"] == f"Show the solution to exercise {label}"


def test_stamp_rewrites_the_books_own_links_and_leaves_colabs_package_list_alone():
    template = _template()
    url = CONFIG["repository"]["url"]
    text = "https://github.com/old/home and https://github.com/googlecolab/backend-info"
    assert template.stamped_doc(text) == f"{url} and https://github.com/googlecolab/backend-info"


def test_readme_and_intro_quote_the_configured_repository():
    template = _template()
    assert template.stale_docs() == [], "run `make stamp`"
    assert all(CONFIG["repository"]["url"] in doc.read_text() for doc in template.DOCS)


CLAIMS = BOOK / "claims.md"
VERDICTS = {"holds", "outdated", "wrong", "depends", "not tested"}
CLAIM_ROW = re.compile(r"^\| (\d+) \| (.+?) \| (\w+(?: \w+)?) \| (.+?) \| (.+) \|$")
CHAPTER_LINK = re.compile(r"\]\(([\w.-]+?)\.(ipynb|md)(#[\w-]+)?\)")


def claim_rows():
    """The ledger's table rows as (number, claim, verdict, why, shown in)."""
    lines = [line for line in CLAIMS.read_text().splitlines() if re.match(r"^\| \d+ \|", line)]
    rows = [CLAIM_ROW.match(line) for line in lines]
    assert all(rows), [line for line, row in zip(lines, rows) if not row][:3]
    return [row.groups() for row in rows]


def test_a_ledger_row_may_say_not_tested():
    row = "| 7 | A claim. | not tested | No cell can run it. | [6 · Saving](06_x.ipynb#saving) |"
    assert CLAIM_ROW.match(row).group(3) == "not tested" in VERDICTS
    assert CLAIM_ROW.match(row.replace("not tested", "not quite tested")) is None


def test_claims_ledger_is_in_the_toc_and_numbered():
    assert "book/claims" in toc_files()
    rows = claim_rows()
    assert len(rows) >= 30, (
        f"the ledger has {len(rows)} rows; it must list every claim (at least 30)"
    )
    assert [int(number) for number, *_ in rows] == list(range(1, len(rows) + 1)), (
        "number the rows 1, 2, 3, ..."
    )


#: Versions a ledger row may quote without a package name before them (``≥ 2.8``, ``< 2.11``):
#: the article's example bound, the releases where the optimizer API and ``tf.keras`` changed,
#: and the Keras of each tested stack. A version after a package name (``TensorFlow 2.16``,
#: ``Keras 3``) is never taken for a figure (``REFERENCE``).
NOT_MEASURED = {
    "2.8",
    "2.10",
    "2.11",
    "2.15",
    "2.16",
    _pinned("requirements.txt", "keras", ">="),
    _pinned("requirements-colab.txt", "keras", "=="),
}

#: Integers a row quotes that are inputs it states, not results a cell printed (the logits of an
#: example), by row. Keep it short: a figure a cell printed is quoted as the cell printed it, and a
#: row can often say the same without the input.
ROW_INPUTS = {
    "74": {"20"},  # the example's logits [0, 20, 120]
}

#: A number as a whole token: an optional minus sign (not a hyphen after a word or a number, as in
#: ``0.91-1.70``), digits, an optional fraction and an optional exponent (``1.5e-2``, ``3.63e+07``).
#: It starts after no letter, digit, underscore or point, and ends before no digit and no point
#: followed by a digit: ``7.6`` is not a token of ``7.655``, ``17.6``, ``7.6.1`` or ``7.6e-3``.
#: Digits grouped by commas are one number (``47,365`` is 47365, never 47), unless the comma
#: follows a digit that starts a list (``[0,20,120]`` is 0, 20 and 120).
#: A unit or sign may follow (``6.54 ms``, ``3.02×``, ``5.65x``), and a sentence's full stop
#: (``gives 12.1016.``).
NUMBER = re.compile(
    r"(?<![\w.])(?:[-\u2212](?=\d))?(?:(?<!\d,)\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
    r"(?:[eE][-+]?\d+)?(?!\d|\.\d)"
)

#: What a row's "why" names that is not a figure: references to rows, chapters, sections and
#: exercises (``row 108``, ``chapter 12``, ``§5.1``, ``exercise 2``), and versions after a package
#: name (``Keras 3``, ``TensorFlow 2.16``, ``Python 3.13``).
REFERENCE = re.compile(
    r"\b(?:[Rr]ows?|[Cc]hapters?|[Ee]xercises?)\s\d+(?:(?:,\s|\sand\s|\sor\s)\d+)*|§\s?[\d.]+\d"
    r"|\b(?:Keras|TensorFlow|TF|Python|NumPy|OpenCV|tf_keras|tf-keras)\s\d+(?:\.\d+)*"
)

#: An integer stated as a ratio or a percentage: ``22x``, ``22×``, ``22 times as long``, ``47
#: times a call``, ``99 %``. (``traced 7 times in 8 calls`` is a count, not a ratio.) A cell
#: prints a ratio with its sign (``ratio 22x``) or in words (``22 times``), a share with ``%``.
RATIO = re.compile(
    r"(?<![\w.])(\d+)(?:\s?[x×](?!\w)|\stimes\s(?=(?:as|a|an|the|that|its|what|longer|larger|"
    r"faster|slower|smaller|bigger|more|less|higher|lower)\b))"
)
PERCENT = re.compile(r"(?<![\w.])(\d+)\s?%")
#: How a cell prints a ratio or a share: the number, then its sign or word.
PRINTED_RATIO = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:\s?[x×](?!\w)|\stimes\b)")
PRINTED_PERCENT = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s?%")


def number_tokens(text):
    """The numbers ``text`` shows, each as a whole token (a Unicode minus written as ``-``,
    commas between digit groups dropped)."""
    return [token.replace("\u2212", "-").replace(",", "") for token in NUMBER.findall(text)]


def test_number_tokens_are_whole_numbers():
    assert number_tokens("7.655 17.6 7.6.1 1.5e-2 -0.25 0.91-1.70") == [
        "7.655",
        "17.6",
        "1.5e-2",
        "-0.25",
        "0.91",
        "1.70",
    ]
    assert number_tokens("6.54 ms, 3.02×, 5.65x, gives 12.1016. (2.398e-05) [0.5,0.25]") == [
        "6.54",
        "3.02",
        "5.65",
        "12.1016",
        "2.398e-05",
        "0.5",
        "0.25",
    ]
    assert number_tokens("float32 conv2d_1 \u22121.5") == ["-1.5"]
    assert number_tokens("mlp 47,365 examples/s, 1,234.5, [0,20,120], (1, 8)") == [
        "47365",
        "1234.5",
        "0",
        "20",
        "120",
        "1",
        "8",
    ]


def _printed(names):
    """Every number printed by the stored outputs of ``names``, and the integers among them that
    are printed as ratios and as percentages."""
    tokens, ratios, percents = set(), set(), set()
    for name in names:
        for text in output_texts(name):
            tokens.update(number_tokens(text))
            ratios.update(PRINTED_RATIO.findall(text))
            percents.update(PRINTED_PERCENT.findall(text))
    return tokens, ratios, percents


def unquoted_figures(why, printed, inputs=frozenset()):
    """The figures ``why`` quotes that ``printed`` (as ``_printed`` returns it) does not hold.

    A figure is every decimal and every integer of ``why`` outside its references and versions
    (``REFERENCE``, ``NOT_MEASURED``) and its stated ``inputs``; powers of ten (``1e-6``) are
    bounds, not figures. A decimal or an integer must be a whole number token of an output; an
    integer stated as a ratio must be printed as a ratio (``22x``), and one stated as a share
    as a share (``99%``): a small integer is printed somewhere by chance, a ratio is not.
    """
    tokens, ratios, percents = printed
    text = REFERENCE.sub(" ", why)
    missing = []
    for token in number_tokens(text):
        is_power_of_ten = "." not in token and re.fullmatch(r"-?\d+[eE][-+]?\d+", token)
        if token in NOT_MEASURED or token in inputs or is_power_of_ten:
            continue
        if token not in tokens:
            missing.append(token)
    missing += [f"{n}x" for n in RATIO.findall(text) if n not in inputs and n not in ratios]
    missing += [f"{n}%" for n in PERCENT.findall(text) if n not in inputs and n not in percents]
    return list(dict.fromkeys(missing))


def test_the_ledger_guard_catches_a_ratio_or_count_no_output_prints():
    printed = _printed_text(
        "trace + first call: 26.16 ms | call of the traced graph: 1179 µs | ratio 22x\n"
        "8 calls, factor given as   traces\nPython float factor   7\n"
        "mlp  47,365 examples/s\nloop_distances  291.32   99%\n"
    )
    made_up = "A Python float traced 7 times in 8 calls, and a trace cost 47 times a call."
    assert unquoted_figures(made_up, printed) == ["47", "47x"]
    # Printed elsewhere as a count, 47 is still no ratio the outputs show.
    with_a_count = _printed_text("ratio 22x\n47 traces\n")
    assert unquoted_figures("a trace cost 47 times a call", with_a_count) == ["47x"]
    true = "A Python float traced 7 times in 8 calls, and a trace cost 22 times a call."
    assert unquoted_figures(true, printed) == []
    assert unquoted_figures("a trace cost 47x a call", with_a_count) == ["47x"]
    assert unquoted_figures("7 of 8 calls traced (row 78, chapter 12, Keras 3)", printed) == []
    assert unquoted_figures("the loop took 99 % of the pass, flatten 1 %", printed) == ["1", "1%"]
    assert unquoted_figures("47 traces", printed) == ["47"], "47,365 is not 47"
    assert unquoted_figures("within 1e-6, 291.32 ms, 291.3 ms", printed) == ["291.3"]
    assert unquoted_figures("5 layers of 64", printed, inputs={"5", "64"}) == []


def _printed_text(text):
    return (
        set(number_tokens(text)),
        set(PRINTED_RATIO.findall(text)),
        set(PRINTED_PERCENT.findall(text)),
    )


@functools.cache
def output_texts(name):
    """The text of every stored output of notebook ``book/<name>``."""
    texts = []
    for cell in json.loads((BOOK / name).read_text())["cells"]:
        for output in cell.get("outputs", []):
            for text in (output.get("text", ""), output.get("data", {}).get("text/plain", "")):
                texts.append("".join(text))
    return tuple(texts)


def test_every_number_the_ledger_quotes_is_in_a_stored_output_of_a_linked_chapter():
    # A re-executed chapter stores new timings: the ledger must quote the run readers see.
    # A figure counts only as a whole number token (7.6 is not in 7.655 or 17.6; 47 is not in
    # 47,365) printed by a notebook the row links to, and a ratio or share only as one.
    problems = []
    for number, _, _, why, shown_in in claim_rows():
        links = CHAPTER_LINK.findall(why + shown_in)
        notebooks = sorted({f"{name}.ipynb" for name, ext, _ in links if ext == "ipynb"})
        stale = unquoted_figures(why, _printed(notebooks), ROW_INPUTS.get(number, set()))
        if stale:
            problems.append(
                f"claim {number} quotes {stale}, which no stored output of "
                f"{notebooks or 'a linked notebook'} prints as a whole number (a ratio "
                "as 22x or 22 times, a share as 99%)"
            )
    assert not problems, "\n".join(problems)


def test_every_claim_has_a_verdict_a_reason_and_a_link_to_a_chapter_section():
    chapters = {entry.removeprefix("book/") for entry in toc_files()} - {
        "claims",
        "intro",
        "api",
        "testing",
    }
    for number, claim, verdict, why, shown_in in claim_rows():
        assert verdict in VERDICTS, f"claim {number}: verdict {verdict!r} not in {sorted(VERDICTS)}"
        assert claim.strip() and why.strip(), f"claim {number}: empty claim or reason"
        links = CHAPTER_LINK.findall(shown_in)
        assert links, f"claim {number}: 'Shown in' has no link to a chapter section"
        targets = {name for name, _, _ in links}
        assert targets <= chapters, (
            f"claim {number}: links to {targets - chapters}, not a chapter in _toc.yml"
        )
        assert all(anchor for _, _, anchor in links), (
            f"claim {number}: link a section (#heading), not only the chapter"
        )
        # A verdict comes only from executed cells: a notebook section, not a page of prose.
        assert verdict == "not tested" or any(ext == "ipynb" for _, ext, _ in links), (
            f"claim {number}: a {verdict!r} verdict needs a link to the notebook that shows it"
        )
