"""The built HTML book (`make book` first; `make test` does): Colab links, stored outputs."""

import importlib
import inspect
import re

import pytest
import yaml
from helpers.repo_tools import ROOT

BOOK = ROOT / "book"
HTML = ROOT / "_build" / "html"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())


def built_page(path):
    page = HTML / "book" / f"{path.stem}.html"
    assert page.exists(), f"{page} missing: run `make book` (make test does) before these tests"
    return page.read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_built_page_links_to_colab_and_shows_outputs(path):
    html = built_page(path)
    repo = CONFIG["repository"]["url"].removeprefix("https://github.com/")
    colab = f"https://colab.research.google.com/github/{repo}/blob/main/book/{path.name}"
    assert colab in html
    assert html.count("cell_output") >= 5, "the page should show the stored outputs"


def test_built_index_exists():
    assert (HTML / "index.html").exists()
    assert re.search(r"White-Box TensorFlow", built_page(BOOK / "intro.md"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_setup_cell_is_collapsed_and_solutions_are_hidden_with_their_output(path):
    import nbformat

    html = built_page(path)
    cells = re.findall(r'<div class="cell ([^"]*)docutils container"', html)
    assert cells and "tag_hide-input" in cells[0], "the setup cell comes first and is collapsed"
    notebook = nbformat.read(path, as_version=4)
    hidden = [c for c in notebook.cells if "hide-cell" in c.metadata.get("tags", [])]
    assert hidden, "the exercise solutions are tagged hide-cell"
    assert sum("tag_hide-cell" in c for c in cells) == len(hidden)
    # hide-cell: one toggle above the input hides input and output together
    assert html.count('<details class="admonition hide above-input">') >= len(hidden)


def _public_names(module):
    """The functions and classes of ``__all__`` (a package's, from its private files too), or
    else those the module defines itself."""
    names = getattr(module, "__all__", None) or [
        name
        for name, obj in vars(module).items()
        if not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__
    ]
    return [
        name
        for name in names
        if inspect.isfunction(getattr(module, name)) or inspect.isclass(getattr(module, name))
    ]


def test_api_reference_documents_every_public_function_and_class_of_every_module():
    html = (HTML / "book" / "api.html").read_text()
    package = ROOT / "companion"
    modules = sorted(
        [p.stem for p in package.glob("*.py") if not p.stem.startswith("_")]
        + [p.parent.name for p in package.glob("*/__init__.py") if p.parent.name[0] != "_"]
    )
    missing = []
    for stem in modules:
        module = importlib.import_module(f"companion.{stem}")
        missing += [
            f"companion.{stem}.{name}"
            for name in _public_names(module)
            if f'id="companion.{stem}.{name}"' not in html
        ]
    assert not missing, f"book/api.md should document {missing}"
    assert "](api.md)" in (BOOK / "intro.md").read_text(), "the intro links the API reference"


def test_api_reference_links_each_name_to_its_source():
    html = (HTML / "book" / "api.html").read_text()
    assert html.count('class="viewcode-link"') >= 100, "sphinx.ext.viewcode: [source] links"
    assert (HTML / "_modules" / "companion" / "layers.html").exists()
