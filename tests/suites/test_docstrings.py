"""Code and book point at each other: every public function and class of the companion ends its
docstring with the chapter and section that teach it, and that section exists.

The last paragraph reads ``Taught in chapter 9, "Chaining transforms and recording update
norms".`` (the appendix: ``Taught in the appendix, "..."``; the exercise checker, used by every
chapter: ``Taught in every chapter, "Exercises".``). Backticks are ignored when the section is
compared with the chapter's ``##``/``###`` headings.
"""

import inspect
import json
import pkgutil
import re
from functools import cache
from importlib import import_module

import pytest
from helpers.repo_tools import ROOT

import companion

BOOK = ROOT / "book"
TAUGHT = re.compile(r'^Taught in (chapter (\d+)|the appendix|every chapter), "(.+)"\.$')


def public_objects():
    """``(module, name, object)`` for every public function and class the companion defines."""
    found = []
    for info in pkgutil.iter_modules(companion.__path__):
        if info.name.startswith("_"):
            continue
        module = import_module(f"companion.{info.name}")
        names = getattr(module, "__all__", None) or [
            name for name in vars(module) if not name.startswith("_")
        ]
        for name in names:
            value = getattr(module, name)
            home = getattr(value, "__module__", "") or ""
            if (inspect.isfunction(value) or inspect.isclass(value)) and home.startswith(
                module.__name__
            ):
                found.append((info.name, name, value))
    return found


@cache
def headings(pattern):
    """The ``##``/``###`` headings (backticks removed) of the notebooks matching ``pattern``."""
    found = set()
    for path in sorted(BOOK.glob(pattern)):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                for line in "".join(cell["source"]).splitlines():
                    if re.match(r"#{2,3} ", line):
                        found.add(line.lstrip("#").strip().replace("`", ""))
    return found


def test_the_reader_sees_every_public_name():
    assert len(public_objects()) > 100


@pytest.mark.parametrize(
    ("module", "name", "value"),
    public_objects(),
    ids=[f"{module}.{name}" for module, name, _ in public_objects()],
)
def test_every_public_docstring_ends_with_the_section_that_teaches_it(module, name, value):
    doc = inspect.getdoc(value) or ""
    last = doc.strip().split("\n\n")[-1].replace("\n", " ")
    match = TAUGHT.match(last)
    assert match, f'companion.{module}.{name}: end the docstring with Taught in chapter N, "..."'
    where, number, section = match.groups()
    pattern = (
        f"{int(number):02d}_*.ipynb"
        if number
        else "a1_*.ipynb"
        if where == "the appendix"
        else "*.ipynb"
    )
    assert section.replace("`", "") in headings(pattern), (
        f"companion.{module}.{name}: no heading {section!r} in book/{pattern}"
    )
