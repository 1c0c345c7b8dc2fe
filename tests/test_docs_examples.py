"""Every Python code block in the README and the documentation site runs.

Blocks of one page run in order in one namespace (a page is a script the reader follows), with
matplotlib on the non-interactive Agg backend and the working directory in a temporary folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from _seeding import seeded

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(page: Path) -> list[str]:
    return [m.group(1) for m in FENCE.finditer(page.read_text(encoding="utf-8"))]


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p)]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict[str, object] = {"__name__": f"docs_example_{page.stem}"}
    with seeded(0):  # a reader's page draws from the global generators; the test keeps them untouched
        for number, block in enumerate(python_blocks(page), start=1):
            code = compile(block, f"{page.name}[block {number}]", "exec")
            exec(code, namespace)


def test_docs_have_examples() -> None:
    # Guards the harness itself: the fence pattern must find the README's example.
    assert python_blocks(ROOT / "README.md"), "the README's python example was not found"
    assert os.path.exists(ROOT / "mkdocs.yml")
