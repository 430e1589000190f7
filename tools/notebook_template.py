"""The setup cell that opens every chapter, kept in one place and stamped into notebooks
(with the toggle labels of the exercise solutions, "Show the solution to exercise N").

    python tools/notebook_template.py check          # exit 1 if a setup cell is stale
    python tools/notebook_template.py stamp [NB...]  # rewrite every (or these) setup cell(s)
    python tools/notebook_template.py new book/NN_name.ipynb "Title"   # start a new chapter

The repository URL comes from ``_config.yml`` (``repository.url``): change that one line,
run ``make stamp``, and every notebook installs the companion from the new home, and the
install and Colab links in README.md and book/intro.md follow.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
#: Pages that quote the repository URL (install commands, Colab links).
DOCS = [ROOT / "README.md", BOOK / "intro.md"]
#: Other projects' repositories the docs link to, which `make stamp` leaves alone: Colab's
#: published package list (README.md, "Follow Colab when it upgrades").
OTHER_REPOSITORIES = ("googlecolab/backend-info",)
GITHUB_URL = re.compile(
    r"https://github\.com/(?!(?:" + "|".join(map(re.escape, OTHER_REPOSITORIES)) + r")\b)"
    r"[\w.-]+/[\w.-]+"
)
COLAB_PATH = re.compile(r"(colab\.research\.google\.com/github/)[\w.-]+/[\w.-]+")
#: hide-input: the HTML page shows the cell collapsed (its output, the versions, stays visible).
SETUP_TAGS = ["hide-input", "nbval-ignore-output"]
SETUP_CELL = """\
# Setup, the same in every chapter (in Colab it installs the companion first).
import importlib.util
import subprocess
import sys

PACKAGE = "white-box-tf @ git+{url}"
if "google.colab" in sys.modules and not importlib.util.find_spec("companion"):
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", PACKAGE],
        capture_output=True,
        text=True,
    )
    if pip.returncode != 0:
        said = (pip.stderr.strip() or pip.stdout.strip() or "no output").splitlines()
        raise RuntimeError(
            f"pip could not install {{PACKAGE}}: {{said[-1]}}\\n"
            "Check that this runtime reaches github.com, then run this cell again "
            "(or upload the repository and run `pip install` on its folder)."
        )
    importlib.invalidate_caches()
try:
    from companion.notebook import setup
except ModuleNotFoundError as error:
    raise ModuleNotFoundError(
        "companion is not installed in this kernel's Python: run `make book` at "
        "the repository root (it creates .venv) or `pip install -e .`"
    ) from error

info = setup()"""


#: The first line of an exercise's solution cell; the HTML toggle then says which exercise it
#: solves.
SOLUTION = re.compile(r"# Solution to exercise ((?:\d+|A)\.\d+|\d+)\b")


def solution_prompts(cell: nbformat.NotebookNode) -> dict[str, str] | None:
    """The toggle labels of a solution cell in the HTML (myst-nb cell metadata), or None."""
    match = SOLUTION.match(cell.source) if cell.cell_type == "code" else None
    if match is None:
        return None
    number = match.group(1)
    return {
        "code_prompt_show": f"Show the solution to exercise {number}",
        "code_prompt_hide": f"Hide the solution to exercise {number}",
    }


def stale_solution_cells(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [
        c
        for c in notebook.cells
        if (prompts := solution_prompts(c)) and c.metadata.get("mystnb") != prompts
    ]


def repository_url() -> str:
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    return config["repository"]["url"]


def setup_source() -> str:
    return SETUP_CELL.format(url=repository_url())


def chapter_notebooks() -> list[Path]:
    return sorted(BOOK.glob("*.ipynb"))


def first_code_cell(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode | None:
    return next((cell for cell in notebook.cells if cell.cell_type == "code"), None)


def problem(path: Path) -> str | None:
    """Why the notebook's setup cell is not the current template, or None if it is."""
    cell = first_code_cell(nbformat.read(path, as_version=4))
    if cell is None:
        return "has no code cell"
    if cell.source != setup_source():
        return "first code cell differs from the setup template"
    if set(SETUP_TAGS) - set(cell.metadata.get("tags", [])):
        return f"setup cell lacks the tags {SETUP_TAGS}"
    if stale_solution_cells(nbformat.read(path, as_version=4)):
        return "a solution cell lacks its 'Show the solution to exercise N' toggle label"
    return None


def stamp(path: Path) -> bool:
    """Write the current setup cell into ``path``; return True if the file changed."""
    notebook = nbformat.read(path, as_version=4)
    cell = first_code_cell(notebook)
    if cell is None:
        raise ValueError(f"{path}: expected a notebook with a setup code cell, found no code cell")
    tags = cell.metadata.get("tags", [])
    solutions = stale_solution_cells(notebook)
    if cell.source == setup_source() and set(SETUP_TAGS) <= set(tags) and not solutions:
        return False
    cell.source = setup_source()
    cell.metadata["tags"] = sorted(set(tags) | set(SETUP_TAGS))
    for solution in solutions:
        solution.metadata["mystnb"] = solution_prompts(solution)
    nbformat.write(notebook, path)
    return True


def stamped_doc(text: str) -> str:
    """``text`` with its GitHub URLs (not ``OTHER_REPOSITORIES``) and Colab paths at our home."""
    url = repository_url()
    text = GITHUB_URL.sub(url, text)
    return COLAB_PATH.sub(
        lambda match: match.group(1) + url.removeprefix("https://github.com/"), text
    )


def stale_docs() -> list[Path]:
    return [
        doc
        for doc in DOCS
        if stamped_doc(doc.read_text(encoding="utf-8")) != doc.read_text(encoding="utf-8")
    ]


def new(path: Path, title: str) -> None:
    """Create a chapter notebook: title, outcomes, setup cell, and the skeleton's headings."""
    if path.exists():
        raise FileExistsError(f"{path}: already exists; pick a new chapter file name")
    notebook = nbformat.v4.new_notebook()
    notebook.metadata.update(
        kernelspec={"name": "python3", "display_name": "Python 3", "language": "python"},
        language_info={"name": "python"},
    )
    setup = nbformat.v4.new_code_cell(setup_source(), metadata={"tags": list(SETUP_TAGS)})
    notebook.cells = [
        nbformat.v4.new_markdown_cell(f"# {title}\n\nThe problem this chapter solves."),
        nbformat.v4.new_markdown_cell(
            "**After this chapter you can:**\n- ...\n\n*About 5 minutes to read the core, 5 the "
            "whole page; 1 minute to run. Builds on chapter 1.*"
        ),
        setup,
        nbformat.v4.new_markdown_cell("## Summary"),
        nbformat.v4.new_markdown_cell("## Practice"),
        nbformat.v4.new_markdown_cell("## Going deeper: ..."),
        nbformat.v4.new_markdown_cell("## Exercises"),
    ]
    nbformat.write(notebook, path)


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "check"
    if command == "check":
        problems = [
            f"{p.relative_to(ROOT)}: {why}" for p in chapter_notebooks() if (why := problem(p))
        ]
        problems += [f"{d.relative_to(ROOT)}: quotes another repository URL" for d in stale_docs()]
        print("\n".join(problems) or f"setup cell current in {len(chapter_notebooks())} notebooks")
        if problems:
            print("run `make stamp` to update them", file=sys.stderr)
        return 1 if problems else 0
    if command == "stamp":  # `stamp NB...` stamps only those notebooks (make execute NB=...)
        notebooks = [Path(arg).resolve() for arg in argv[1:]] or chapter_notebooks()
        changed = [p.name for p in notebooks if stamp(p)]
        for doc in stale_docs():
            doc.write_text(stamped_doc(doc.read_text(encoding="utf-8")), encoding="utf-8")
            changed.append(doc.name)
        print(f"stamped {len(changed)} file(s): {', '.join(changed) or '-'}")
        return 0
    if command == "new" and len(argv) == 3:
        new(Path(argv[1]), argv[2])
        print(f"created {argv[1]}; add it to _toc.yml, write it, then `make execute`")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
