"""``companion.exercises`` as a whole: its ids and titles are the notebooks', every exercise has
checks and staged hints, every solution cell runs its check, and bad input gets a clear error."""

import json
import re

import pytest
import yaml
from helpers.repo_tools import ROOT

from companion.exercises import check, hint, list_exercises
from companion.exercises._registry import exercises

#: An exercise as a chapter lists it: ``- **4.1** ★☆☆ **A kernel constraint.** ...``.
LISTED = re.compile(r"^- \*\*((?:\d+|A)\.\d+)\*\* ★+☆* \*\*(.+?)\*\*", re.M)


def chapters():
    """``(chapter number or "A", notebook path)`` in the order of ``_toc.yml``."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [chapter["file"] for part in toc["parts"] for chapter in part["chapters"]]
    found = []
    for file in files:
        match = re.match(r"book/(\d\d|a\d)_", file)
        if match:
            number = "A" if match.group(1).startswith("a") else str(int(match.group(1)))
            found.append((number, ROOT / f"{file}.ipynb"))
    return found


#: The sections that list exercises: the core's practice, then the page's last section.
SECTIONS = ("## Practice", "## Exercises")
DEEPER = re.compile(r"^#+ .*going deeper", re.I | re.M)


def exercise_sections(path):
    """``[(heading, text, code cells, in_core)]``: each exercise section of a notebook, its
    markdown, the code cells up to the next markdown cell, and whether it comes before the
    chapter's first "Going deeper" heading."""
    cells = json.loads(path.read_text())["cells"]
    found, core = [], True
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        heading = next((h for h in SECTIONS if text.startswith(h)), None)
        if heading:
            code = []
            for later in cells[i + 1 :]:
                if later["cell_type"] == "markdown":
                    break
                code.append("".join(later["source"]))
            found.append((heading, text, code, core))
        core = core and not DEEPER.search(text)
    return found


def listed_exercises():
    listed = []
    for number, path in chapters():
        for _, text, _, _ in exercise_sections(path):
            found = LISTED.findall(text)
            assert found and all(i.startswith(f"{number}.") for i, _ in found), (path.name, found)
            listed += found
    return listed


def test_the_ids_and_titles_are_those_the_chapters_print():
    assert [tuple(entry) for entry in list_exercises()] == listed_exercises()


def test_every_exercise_has_checks_and_at_least_two_hints_none_of_them_code():
    for exercise in exercises().values():
        assert exercise.checks, exercise.id
        assert len(exercise.hints) >= 2, exercise.id
        for text in exercise.hints:
            assert len(text) <= 400, (exercise.id, text)
            assert not re.search(r"^\s*(def|class|return) ", text, re.M), (exercise.id, text)
        assert len(set(exercise.hints)) == len(exercise.hints), exercise.id


def test_every_chapter_says_how_to_check_an_answer_and_every_solution_calls_check():
    for number, path in chapters():
        for heading, text, code, _ in exercise_sections(path):
            first = LISTED.search(text).group(1)
            assert f'`check("{first}", your_answer)`' in text.split("\n- ")[0], (path.name, heading)
            solutions = [cell for cell in code if cell.startswith("# Solution to exercise")]
            for exercise_id, _ in LISTED.findall(text):
                calls = [cell for cell in solutions if f'assert check("{exercise_id}", ' in cell]
                assert calls, f"{path.name}: no solution cell asserts check({exercise_id!r}, ...)"


def test_every_chapter_has_practice_in_its_core_before_going_deeper():
    """A reader who stops at the Summary can practise: the Practice section, its exercises and
    their solutions come before the first "Going deeper" heading (nbval runs the page from the
    top, so a solution there cannot use anything defined after it)."""
    for _, path in chapters():
        headings = [(heading, core) for heading, _, _, core in exercise_sections(path)]
        assert headings[0] == ("## Practice", True), (path.name, headings)
        assert all(heading != "## Practice" or core for heading, core in headings), path.name


def test_a_broken_answer_is_reported_not_raised(capsys):
    class Broken:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("not written yet")

    import keras

    broken = type("BrokenDropout", (keras.layers.Layer,), {"__init__": Broken.__init__})
    result = check("4.2", broken)
    printed = capsys.readouterr().out
    assert not result.passed and len(result.failures) == result.checks
    assert all("RuntimeError: not written yet" in f.message for f in result.failures)
    assert "4.2 not yet: 0 of 4 checks passed." in printed


def test_hints_are_printed_in_stages(capsys):
    hint("4.1")
    hint("4.1", level=2)
    first, second = capsys.readouterr().out.split("Hint 2 of 2")
    assert first.startswith("Hint 1 of 2 for 4.1") and second


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: check("4.9", None),
            ValueError,
            r"exercise_id: expected one of 1\.1, .*A\.3, got str '4\.9'",
        ),
        (lambda: check(4.1, None), TypeError, r"exercise_id: expected an exercise id as a str"),
        (
            lambda: check("4.1", 3),
            TypeError,
            r"answer: expected a keras\.layers\.Layer subclass .* for exercise 4\.1 "
            r"\(A kernel constraint\.\), got int 3",
        ),
        (lambda: hint("4.1", 3), ValueError, r"level: expected an int >= 1 and <= 2, got int 3"),
    ],
)
def test_bad_input_gets_the_projects_error(call, error, message):
    with pytest.raises(error, match=message):
        call()
