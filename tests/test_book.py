"""The book as a whole: table of contents, notebooks, setup cell, versions, built pages."""

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
HTML = ROOT / "_build" / "html"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())


def _template():
    spec = importlib.util.spec_from_file_location("notebook_template", ROOT / "tools" / "notebook_template.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def test_every_notebook_is_in_the_toc_and_every_toc_entry_exists():
    listed = toc_files()
    assert sorted(f"book/{nb.stem}" for nb in NOTEBOOKS) == sorted(f for f in listed if f != "book/intro")
    for entry in listed:
        assert any((ROOT / f"{entry}{suffix}").exists() for suffix in (".md", ".ipynb")), entry


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_committed_executed_in_order_without_errors(path):
    notebook = nbformat.read(path, as_version=4)
    cells = [c for c in notebook.cells if c.cell_type == "code" and c.source.strip()]
    counts = [c.execution_count for c in cells]
    assert None not in counts, "run `make execute NB=...` and commit the outputs"
    assert counts == list(range(1, len(cells) + 1)), "cells were not run top to bottom in one kernel"
    assert not [o for c in cells for o in c.outputs if o.output_type == "error"]
    assert any("nbval-check-output" in c.metadata.get("tags", []) for c in cells), "no checked result"
    assert notebook.cells[-1].cell_type != "code" or "hide" in str(notebook.cells[-1].metadata)
    headings = [c.source for c in notebook.cells if c.cell_type == "markdown"]
    assert any("## Summary" in h for h in headings) and any("## Exercises" in h for h in headings)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_starts_with_the_current_setup_cell(path):
    assert _template().problem(path) is None, "run `make stamp`, then `make execute`"


def test_setup_cell_installs_from_the_configured_repository():
    assert CONFIG["repository"]["url"] in _template().setup_source()


def test_intro_states_the_versions_in_use():
    import cv2
    import keras
    import tensorflow as tf

    intro = (BOOK / "intro.md").read_text()
    for name, version in [("TensorFlow", tf.__version__), ("Keras", keras.__version__), ("OpenCV", cv2.__version__)]:
        major_minor = ".".join(version.split(".")[:2])
        assert f"**{name} {major_minor}**" in intro, f"intro.md should say {name} {major_minor}"


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


def test_intro_links_every_chapter():
    intro = (BOOK / "intro.md").read_text()
    missing = [nb.name for nb in NOTEBOOKS if f"]({nb.name})" not in intro]
    assert not missing, f"book/intro.md's chapter map should link {missing}"


def test_readme_and_intro_quote_the_configured_repository():
    template = _template()
    assert template.stale_docs() == [], "run `make stamp`"
    assert all(CONFIG["repository"]["url"] in doc.read_text() for doc in template.DOCS)
