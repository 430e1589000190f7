"""The built HTML book (`make book` first; `make test` does): Colab links, stored outputs."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
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
