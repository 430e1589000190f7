"""The PDF edition (`make pdf`, _build/html/white-box-tf.pdf) holds the whole book, readable.

Read back with poppler-utils (`pdfinfo`, `pdftotext`, `pdfimages`, `pdftoppm`): a sane page count,
every chapter's title, every figure the notebooks draw (at its own pixel size), and nothing cut
at the right edge: no text in the right margin, every long line of printed code and output
whole in the text (a line clipped inside a box would lose its end), and no figure page with
ink in the right margin.

`make test-pdf` builds the PDF and runs this folder; a PDF older than any page of the book fails.
"""

import base64
import collections
import functools
import hashlib
import io
import json
import re
import subprocess

import pytest
from helpers.repo_tools import ROOT
from PIL import Image

BOOK = ROOT / "book"
PDF = ROOT / "_build" / "html" / "white-box-tf.pdf"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
SOURCES = [*NOTEBOOKS, *BOOK.glob("*.md"), BOOK / "_static" / "print.css"]
#: A4 at print.css's margins (13 mm left and right), in points.
PAGE_WIDTH, MARGIN = 595.0, 13 / 25.4 * 72
#: 14 chapters, the intro, the ledger, the testing and API pages: about 460 pages in May 2026.
PAGES = range(300, 801)
#: Printed lines at least this long are the ones a clipped box would cut.
LONG_LINE = 60
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: What MyST-NB shows of an output, first found first (its order for HTML).
SHOWN_FIRST = ["text/html", "image/svg+xml", "image/png", "image/jpeg", "text/markdown"]


def _stale():
    if not PDF.exists():
        return f"no {PDF.relative_to(ROOT)}: `make pdf` builds it"
    newer = [p.name for p in SOURCES if p.stat().st_mtime > PDF.stat().st_mtime]
    return f"{PDF.name} is older than {', '.join(newer[:3])}: `make pdf`" if newer else ""


def _run(*command):
    command = [str(c) for c in command]
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=300).stdout


@pytest.fixture(scope="module")
def pdf():
    reason = _stale()
    assert not reason, reason
    return PDF


@functools.cache
def _text(path):
    """The PDF's text with all white space taken out: wrapped lines join up again."""
    return re.sub(r"\s+", "", _run("pdftotext", "-raw", path, "-"))


def _tags(cell):
    return set(cell.get("metadata", {}).get("tags", []))


def _printed_cells(notebook):
    """(source shown, outputs shown) of each code cell, as print.css prints them."""
    for cell in json.loads(notebook.read_text())["cells"]:
        tags = _tags(cell)
        if cell["cell_type"] != "code" or "remove-cell" in tags:
            continue
        hidden = tags & {"hide-input", "remove-input"}
        outputs = [] if "remove-output" in tags else cell.get("outputs", [])
        yield ("" if hidden else "".join(cell["source"])), outputs


def _shown(output):
    """The MIME type MyST-NB shows for a display output."""
    data = output.get("data", {})
    return next((m for m in SHOWN_FIRST if m in data), "text/plain")


def test_page_count_is_sane(pdf):
    pages = int(re.search(r"Pages:\s+(\d+)", _run("pdfinfo", str(pdf))).group(1))
    assert pages in PAGES, f"{pages} pages, expected {PAGES.start}-{PAGES.stop - 1}"


def test_every_chapter_title_is_printed(pdf):
    titles = []
    for path in NOTEBOOKS:
        first = json.loads(path.read_text())["cells"][0]["source"]
        titles.append(next(line for line in first if line.startswith("# "))[2:])
    for path in ["intro.md", "claims.md", "testing.md", "api.md"]:
        titles.append(next(ln for ln in (BOOK / path).open() if ln.startswith("# "))[2:])
    missing = [t for t in titles if re.sub(r"[\s`*]", "", t) not in _text(pdf)]
    assert len(titles) == len(NOTEBOOKS) + 4 and not missing, missing


def test_every_figure_is_embedded_at_its_own_size(pdf):
    figures = {}
    for notebook in NOTEBOOKS:
        for _, outputs in _printed_cells(notebook):
            for output in outputs:
                if output["output_type"] in ("display_data", "execute_result"):
                    if _shown(output) == "image/png":
                        png = base64.b64decode(output["data"]["image/png"])
                        figures[hashlib.sha256(png).hexdigest()] = (notebook.name, png)
    assert len(figures) >= 30, "the chapters draw over 30 figures"
    expected = collections.Counter()
    for _, png in figures.values():
        expected[Image.open(io.BytesIO(png)).size] += 1
    # page num type width height color comp bpc enc interp object-id ...: one row per use
    rows = [line.split() for line in _run("pdfimages", "-list", str(pdf)).splitlines()[2:]]
    images = {(r[10], r[11]): (int(r[3]), int(r[4])) for r in rows if r[2] == "image"}
    embedded = collections.Counter(images.values())
    missing = expected - embedded
    assert not missing, f"{sum(missing.values())} figures not in the PDF (width, height): {missing}"


def test_no_text_runs_into_the_right_margin(pdf):
    bbox = _run("pdftotext", "-bbox", str(pdf), "-")
    widths = {float(w) for w in re.findall(r'<page width="([\d.]+)"', bbox)}
    assert widths and all(abs(w - PAGE_WIDTH) < 1 for w in widths), widths
    words = re.findall(r'xMax="([\d.]+)"[^>]*>([^<]*)<', bbox)
    edge = PAGE_WIDTH - MARGIN + 2
    over = [(float(x), word) for x, word in words if float(x) > edge]
    assert not over, f"{len(over)} words end past {edge:.0f} pt: {over[:10]}"


def test_long_lines_of_code_and_output_are_printed_whole(pdf):
    text = _text(pdf)
    cut = []
    for notebook in NOTEBOOKS:
        for source, outputs in _printed_cells(notebook):
            lines = source.splitlines()
            for output in outputs:
                if output["output_type"] == "stream":
                    lines += "".join(output["text"]).splitlines()
                elif output["output_type"] != "error" and _shown(output) == "text/plain":
                    lines += "".join(output["data"]["text/plain"]).splitlines()
            for line in lines:
                line = ANSI.sub("", line).split("\r")[-1]
                squeezed = re.sub(r"\s+", "", line)
                if len(line.rstrip()) >= LONG_LINE and squeezed not in text:
                    cut.append(f"{notebook.name}: {line.strip()[:90]}")
    assert not cut, f"{len(cut)} long lines not whole in the PDF:\n" + "\n".join(cut[:15])


def test_figure_pages_have_no_ink_in_the_right_margin(pdf, tmp_path):
    rows = [line.split() for line in _run("pdfimages", "-list", str(pdf)).splitlines()[2:]]
    pages = sorted({int(r[0]) for r in rows if r[2] == "image"})
    assert pages
    inked = []
    for page in pages:
        _run("pdftoppm", "-r", "36", "-png", "-f", str(page), "-l", str(page), pdf, tmp_path / "p")
        (png,) = tmp_path.glob("p*.png")
        image = Image.open(png).convert("L")
        margin = round(image.width * (MARGIN - 4) / PAGE_WIDTH)
        band = image.crop((image.width - margin, 0, image.width, image.height))
        if band.getextrema()[0] < 200:
            inked.append(page)
        png.unlink()
    assert not inked, f"pages with ink in the right margin: {inked}"
