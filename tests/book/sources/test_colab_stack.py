"""requirements-colab.txt agrees with the stored copy of Colab's own package list."""

import re

import pytest
from helpers import repo_tools

ROOT = repo_tools.ROOT
colab_stack = repo_tools.load("colab_stack")


def test_requirements_colab_is_written_from_colabs_published_list():
    assert (ROOT / "requirements-colab.txt").read_text() == colab_stack.render(), (
        "run `python tools/colab_stack.py`"
    )


def test_the_copy_names_where_and_when_it_was_taken():
    source = colab_stack.source_fields((colab_stack.COPY / "source.txt").read_text())
    assert source["repository"] == "googlecolab/backend-info"
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", source["date"])


def test_every_package_of_the_pinned_stack_is_pinned_for_colab():
    pinned = {
        colab_stack.normalized(re.match(r"[A-Za-z0-9_.-]+", line).group())
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    tools = {"jupyter-book", "nbval", "nbclient", "ipykernel", "pytest", "pytest-xdist", "ruff"}
    assert pinned - tools == {colab_stack.normalized(name) for name in colab_stack.PACKAGES}


@pytest.fixture
def copy(tmp_path):
    for name in ("pip-freeze.gpu.txt", "os-info-gpu.txt", "source.txt"):
        (tmp_path / name).write_text((colab_stack.COPY / name).read_text())
    return tmp_path


def test_a_new_colab_list_changes_the_pins(copy):
    freeze = copy / "pip-freeze.gpu.txt"
    freeze.write_text(freeze.read_text().replace("\nkeras==3.13.2\n", "\nkeras==3.14.0\n"))
    info = copy / "os-info-gpu.txt"
    info.write_text(info.read_text().replace("Python 3.13.15", "Python 3.14.2"))
    rendered = colab_stack.render(copy)
    assert "\nkeras==3.14.0\n" in rendered and "\n# python: 3.14\n" in rendered


def test_a_list_without_one_of_the_books_packages_is_refused(copy):
    freeze = copy / "pip-freeze.gpu.txt"
    freeze.write_text(re.sub(r"(?m)^tf_keras==.*\n", "", freeze.read_text()))
    with pytest.raises(ValueError, match=r"^Colab's pip-freeze.gpu.txt lists no tf-keras$"):
        colab_stack.render(copy)


def test_a_local_build_is_pinned_as_its_pypi_release(copy):
    freeze = copy / "pip-freeze.gpu.txt"
    freeze.write_text(re.sub(r"(?m)^torch==.*$", "torch==2.12.1+cu130", freeze.read_text()))
    rendered = colab_stack.render(copy)
    assert "\ntorch==2.12.1\n" in rendered and "torch==2.12.1+" not in rendered
    assert "# Colab has torch 2.12.1+cu130 (a local build); PyPI's release is 2.12.1\n" in rendered
