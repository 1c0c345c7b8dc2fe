"""The built documentation site: an API reference that reads like torchmetrics', and math that renders.

The site is built once (``mkdocs build --strict``, as ``make test`` does) into a temporary folder. The
reference test reads every API page's HTML; the math test opens a page with formulas in headless
Chromium (Debian's package; the test says so and skips when the browser is not installed) and checks
the DOM after the page's scripts ran: KaTeX output and no raw TeX delimiter left.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

#: What must never appear on an API page (the HTML's text).
FORBIDDEN = {
    "a private base class": re.compile(r"Bases:.*\._"),
    "a builtin docstring": re.compile(
        r"int\(\[x\]\) -> integer|bool\(x\) -> bool|Initialize self\.|Convert a string or number|"
        r"str\(object=''\) -> str"
    ),
    # in the HTML's text the role's backticks have become a <code> element: `:func:name` is left
    "a literal Sphinx role": re.compile(r"(?<![\w:]):?(func|class|mod|meth|attr|data|exc|math):`?\w"),
    "a reStructuredText directive": re.compile(r"\.\. [a-z][\w-]*::"),
    "a bare Union / Optional": re.compile(r"\b(Union|Optional)\["),
    "an unreadable alias": re.compile(r":\s*Union\b"),
}
#: mkdocstrings' marker of a parameter without a default (``**kwargs`` got it too), in the HTML.
REQUIRED = "<em>required</em>"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    mkdocs = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    proc = subprocess.run(mkdocs, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _text(page: Path) -> str:
    raw = page.read_text(encoding="utf-8")
    raw = re.sub(r"<script.*?</script>", "", raw, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def _api_pages(site: Path) -> list[Path]:
    pages = sorted((site / "api").glob("*/index.html"))
    assert len(pages) >= 7
    return pages


def test_the_api_reference_reads_like_torchmetrics(site: Path) -> None:
    for page in _api_pages(site):
        main = page.read_text(encoding="utf-8")
        main = main[main.index('<article class="md-content__inner') :]
        text = html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<script.*?</script>", "", main, flags=re.S)))
        for what, pattern in FORBIDDEN.items():
            found = pattern.search(text)
            assert found is None, (
                f"{page.parent.name}: {what}: {text[max(0, found.start() - 80) : found.end() + 40]!r}"
            )
        assert REQUIRED not in main, page.parent.name
        # examples are code blocks: every ">>>" prompt is inside a <code> block
        outside = re.sub(r"<code>.*?</code>", "", main, flags=re.S)
        assert "&gt;&gt;&gt;" not in outside, page.parent.name


def test_one_heading_scheme_on_every_api_page(site: Path) -> None:
    for page in _api_pages(site):
        raw = page.read_text(encoding="utf-8")
        titles = re.findall(r"<h1[^>]*>(.*?)</h1>", raw, flags=re.S)
        assert len(titles) == 1, (page.parent.name, titles)
        assert html.unescape(re.sub(r"<[^>]+>", "", titles[0])).strip(" ¶\n").endswith("(API)"), titles[0]
        sections = [
            html.unescape(re.sub(r"<[^>]+>", "", h)).strip(" ¶\n")
            for h in re.findall(r"<h2[^>]*>(.*?)</h2>", raw, flags=re.S)
        ]
        if "Module metrics" in sections:
            assert sections.index("Module metrics") < sections.index("Functional"), sections
        if page.parent.name not in ("integrations",):
            assert "Functional" in sections, (page.parent.name, sections)


def test_the_index_lists_every_family(site: Path) -> None:
    text = _text(site / "index.html")
    for family in (
        "Retrieval",
        "Embeddings",
        "Metric learning",
        "Representation health",
        "Dense retrieval",
        "Losses",
        "Shape similarity",
    ):
        assert family in text, family
    assert "The report command" in text


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium (Debian package chromium) is not installed")
def test_math_renders_in_a_real_browser(site: Path, tmp_path: Path) -> None:
    page = site / "embedding" / "index.html"
    assert "arithmatex" in page.read_text(encoding="utf-8")
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
    ]  # fmt: skip
    proc = subprocess.run(
        [str(CHROMIUM), *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    dom = proc.stdout
    assert 'class="katex"' in dom, proc.stderr[-2000:]
    for block in re.findall(r'class="arithmatex">(.*?)</(?:span|div)>\s*</(?:span|div)>', dom, flags=re.S):
        assert "katex" in block
    raw_tex = [m for m in re.findall(r'class="arithmatex">([^<]*)', dom) if "\\(" in m or "\\[" in m]
    assert raw_tex == [], raw_tex
