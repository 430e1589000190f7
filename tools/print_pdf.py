"""Print the one-page build of the book (`jupyter-book build --builder singlehtml`) to one PDF.

    python tools/print_pdf.py _build/pdf/_build/singlehtml _build/html/white-box-tf.pdf

`make pdf` runs it. The page is printed by headless Chromium (Debian's `chromium`) with the print
rules of book/_static/print.css, offline:

- singlehtml writes the book to `book/intro.html` (the root document's path) but with links
  relative to its top folder (`_images/...`, `_static/...`): the printed copy is written there.
- Every toggle (`<details>`) is opened: print.css then hides the code of collapsed checks and
  prints their outputs; exercise solutions print whole.
- MathJax comes from Debian's `libjs-mathjax` instead of its CDN, with SVG output (no web fonts).
- The PDF is tagged, so that Chromium writes its outline (the chapters and sections as
  bookmarks); qpdf then packs the tags' 100,000-odd objects into object streams (26 MB to 10 MB).
"""

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MATHJAX = Path("/usr/share/javascript/mathjax/MathJax.js")
CDN_MATHJAX = re.compile(
    r'<script[^>]*src="https://cdn\.jsdelivr\.net/npm/mathjax@3[^"]*"[^>]*></script>'
)
# Sphinx's MathJax 3 options (window.MathJax = {...}): MathJax 2 reads window.MathJax as its own.
MATHJAX3_OPTIONS = re.compile(r"<script>window\.MathJax = .*?</script>", re.S)
MATHJAX2 = (
    '<script type="text/x-mathjax-config">MathJax.Hub.Config({"tex2jax": {"inlineMath": '
    '[["\\\\(", "\\\\)"]], "displayMath": [["\\\\[", "\\\\]"]], "processEscapes": true, '
    '"processClass": "math|tex2jax_process|mathjax_process", '
    '"ignoreClass": "tex2jax_ignore|mathjax_ignore"}, '
    '"SVG": {"font": "TeX"}, "messageStyle": "none"});</script>'
    f'<script src="{MATHJAX.as_uri()}?config=TeX-AMS_SVG"></script>'
)


def printable(html):
    """The singlehtml page with every toggle open and MathJax taken from the local copy."""
    html = re.sub(r"<details(?![^>]*\bopen\b)", "<details open", html)
    if MATHJAX.exists():
        html = MATHJAX3_OPTIONS.sub("", html)
        html = CDN_MATHJAX.sub(lambda _: MATHJAX2, html)
    return html


def main(singlehtml, pdf):
    singlehtml, pdf = Path(singlehtml), Path(pdf)
    pages = list((singlehtml / "book").glob("*.html"))
    assert len(pages) == 1, f"expected one page under {singlehtml / 'book'}, found {pages}"
    page = singlehtml / "white-box-tf.html"
    page.write_text(printable(pages[0].read_text()))
    browser = shutil.which("chromium")
    assert browser, "chromium is not installed: `make pdf` installs it (apt-get install chromium)"
    pdf.parent.mkdir(parents=True, exist_ok=True)
    partial = pdf.with_suffix(".partial.pdf")
    with tempfile.TemporaryDirectory() as profile:
        # fmt: skip
        command = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--no-pdf-header-footer",
            "--generate-pdf-document-outline",
            "--virtual-time-budget=20000",
            f"--print-to-pdf={partial.resolve()}",
            page.resolve().as_uri(),
        ]
        subprocess.run(command, check=True, capture_output=True, timeout=900)
    qpdf = shutil.which("qpdf")
    assert qpdf, "qpdf is not installed: `make pdf` installs it (apt-get install qpdf)"
    subprocess.run([qpdf, "--object-streams=generate", partial, pdf], check=True, timeout=600)
    partial.unlink()
    print(f"wrote {pdf} ({pdf.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main(*sys.argv[1:])
