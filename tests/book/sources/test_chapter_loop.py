"""`make check NB=...`'s selection (tools/chapter_tests.py): every module of the chapter's row,
its tests and doctests, the chapter's exercise checks, and its cases of the shared suites."""

import subprocess
import sys

from helpers.repo_tools import ROOT, load

chapter_tests = load("chapter_tests")


def test_chapter_10_runs_the_tests_of_both_its_modules():
    arguments = chapter_tests.arguments(ROOT / "book/10_multi_worker.ipynb")
    for path in [
        "tests/unit/test_cluster.py",
        "tests/unit/exercises/test_ch10.py",
        "tests/suites/test_bad_inputs.py",
    ]:
        assert path in arguments
    assert any(a.startswith(("tests/unit/test_training", "tests/unit/training")) for a in arguments)
    assert "--chapter-modules=cluster,training" in arguments


def test_every_chapter_names_modules_that_exist_and_the_appendix_runs_its_exercises():
    for notebook in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        modules = chapter_tests.chapter_modules(notebook)
        assert modules, f"book/intro.md names no companion module for {notebook.name}"
        for module in modules:
            assert chapter_tests.module_paths(module), f"{notebook.name}: {module} has no tests"
    appendix = chapter_tests.arguments(ROOT / "book/a1_keras2_to_keras3.ipynb")
    assert appendix == ["tests/unit/exercises/test_a1.py"]


def test_the_shared_suites_narrow_to_the_chapters_modules():
    selected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        + chapter_tests.arguments(ROOT / "book/04_custom_layers.ipynb"),
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    cases = [line for line in selected.splitlines() if "test_bad_values_get" in line]
    assert cases and all("[layers." in line for line in cases), cases[:3]
