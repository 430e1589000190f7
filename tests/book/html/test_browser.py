"""Every built page in a real browser at 1400 px: nothing scrolls sideways, every figure loads.

Headless Chromium (Debian's `chromium`; `make test` installs it if missing) opens each page of
`_build/html` through a local server that appends `PROBE` to the page. The probe measures, after
layout, every output block, code block and table of the article: a block whose box is wider than
the text column scrolls sideways, and the part off the side is what a reader cannot see.
"""

import contextlib
import functools
import html
import http.server
import json
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
from helpers.repo_tools import ROOT

HTML = ROOT / "_build" / "html"
BOOK = ROOT / "book"
PAGES = sorted(f"book/{p.stem}.html" for p in [*BOOK.glob("*.ipynb"), *BOOK.glob("*.md")])
WINDOW = "1400,900"

PROBE = """<script>
window.addEventListener("load", () => {
  const found = [];
  const blocks = "article div.cell_output pre, article .highlight pre, article table, article img";
  for (const el of document.querySelectorAll(blocks)) {
    const where = el.closest("section");
    const section = where ? where.id : "";
    if (el.tagName === "IMG") {
      const broken = !el.complete || el.naturalWidth === 0;
      if (broken) found.push({section, what: "image not loaded: " + el.src});
      continue;
    }
    const box = el.closest(".pst-scrollable-table-container") || el;
    // Scrolls inside its box, or (a box that grows with its content) sticks out of the article.
    const column = el.closest("article").getBoundingClientRect().right;
    const sticksOut = box.getBoundingClientRect().right - column;
    const over = Math.max(box.scrollWidth - box.clientWidth, sticksOut);
    const first = el.innerText.trim().split("\\n")[0].slice(0, 60);
    if (over > 1) found.push({section, what: `${el.tagName} ${over} px too wide: ${first}`});
  }
  document.body.setAttribute("data-probe", JSON.stringify(found));
});
</script>"""


class _ProbingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the built book; an HTML page gets `PROBE` just before its `</body>`."""

    def send_head(self):
        path = Path(self.translate_path(self.path))
        if path.suffix != ".html" or not path.is_file():
            return super().send_head()
        body = path.read_text().replace("</body>", PROBE + "</body>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return _Body(body)

    def log_message(self, *args):
        pass


class _Body:
    """What `send_head` returns: `copyfile` reads it, `do_GET` closes it."""

    def __init__(self, data):
        self.data = data

    def read(self, *args):
        data, self.data = self.data, b""
        return data

    def close(self):
        pass


@contextlib.contextmanager
def serving(directory):
    """An HTTP server on a free port of 127.0.0.1 for `directory`; yields its URL."""
    handler = functools.partial(_ProbingHandler, directory=str(directory))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}"
        finally:
            httpd.shutdown()


@pytest.fixture(scope="module")
def server():
    if not (HTML / "index.html").exists():
        pytest.fail(f"no book under {HTML}: run `make book` (make test does) first")
    with serving(HTML) as url:
        yield url


def probe(url):
    """What the probe found on the page at `url`: a list of {section, what}."""
    browser = shutil.which("chromium")
    assert browser, "chromium is not installed: `make test` installs it (apt-get install chromium)"
    # A fresh profile each time: a cached stylesheet from an earlier build must not be measured.
    with tempfile.TemporaryDirectory() as profile:
        # fmt: skip
        command = [
            browser,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            f"--window-size={WINDOW}",
            "--virtual-time-budget=5000",
            f"--user-data-dir={profile}",
            "--dump-dom",
            url,
        ]
        dom = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, f"the probe did not run on {url}"
    return json.loads(html.unescape(found.group(1)))


@pytest.mark.parametrize("page", PAGES)
def test_page_fits_the_column_and_its_figures_load(server, page):
    assert (HTML / page).exists(), f"{page} was not built: `make book`"
    found = probe(f"{server}/{page}")
    assert not found, f"{page} at {WINDOW}:\n" + "\n".join(
        f"  #{f['section']}: {f['what']}" for f in found
    )


def test_probe_finds_a_wide_output_a_wide_table_and_a_missing_figure(tmp_path):
    wide = "x" * 400
    (tmp_path / "page.html").write_text(
        "<html><body><article><section id='s'>"
        f"<div class='cell_output'><pre>fits</pre><pre>{wide}</pre></div>"
        f"<table><tr><td>{wide}</td></tr></table>"
        "<img src='missing.png'></section></article></body></html>"
    )
    with serving(tmp_path) as url:
        found = probe(f"{url}/page.html")
    kinds = sorted(f["what"].split()[0] for f in found)
    assert kinds == ["PRE", "TABLE", "image"], found
    assert all(f["section"] == "s" for f in found)
