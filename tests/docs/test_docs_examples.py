"""Every Python code block in the README and the documentation site runs, and shows what it says.

Blocks of one page run in order in one namespace (a page is a script the reader follows), with
matplotlib on the non-interactive Agg backend and the working directory in a temporary folder. A
statement followed by an expected output in its comment (``metric.compute()  # tensor(0.5000)``,
``print(x)  # {'a': ..., 'b': ...}: an explanation``) is compared: the value's ``repr`` (or what
``print`` writes) must match the output, ``...`` standing for any text (doctest's ELLIPSIS).
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import io
import os
import re
from pathlib import Path

import pytest

from _seeding import seeded

ROOT = Path(__file__).resolve().parents[2]
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
            run_block(block, f"{page.name}[block {number}]", namespace)


#: A comment that is an expected output: it starts like a repr.
_OUTPUT_START = re.compile(r"(tensor\(|array\(|\{|\[|\(|-?\d|True|False|None|'|\")")
_CHECKER = doctest.OutputChecker()


def expected_output(comment: str) -> str | None:
    """The expected output at the start of a trailing comment (up to its balanced end), or ``None``."""
    text = comment.lstrip("#").strip()
    if not _OUTPUT_START.match(text):
        return None
    depth, quote = 0, ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            rest = text[i + 1 :]
            if depth == 0 and not (rest.startswith(" ") and _OUTPUT_START.match(rest[1:])):
                return text[: i + 1]  # the end, unless another value follows (print(a, b))
        elif depth == 0 and (ch == ":" or text[i : i + 2] == "  "):
            return text[:i]
    return text


def run_block(block: str, name: str, namespace: dict[str, object]) -> int:
    """Run ``block`` statement by statement; compare the outputs its comments announce. Returns how many
    outputs were compared."""
    lines = block.splitlines()
    compared = 0
    for stmt in ast.parse(block).body:
        comment = lines[stmt.end_lineno - 1][stmt.end_col_offset :].strip() if stmt.end_lineno else ""
        want = expected_output(comment) if comment.startswith("#") else None
        if want is None or not isinstance(stmt, ast.Expr):
            exec(compile(ast.Module([stmt], []), name, "exec"), namespace)
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            value = eval(compile(ast.Expression(stmt.value), name, "eval"), namespace)
        got = out.getvalue().strip() if value is None else repr(value)
        flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        assert _CHECKER.check_output(want + "\n", got + "\n", flags), (
            f"{name}: {ast.unparse(stmt)}: got {got}, the page says {want}"
        )
        compared += 1
    return compared


def test_outputs_are_compared_not_only_run() -> None:
    namespace: dict[str, object] = {}
    assert run_block("x = [1, 2]\nlen(x)  # 2\nprint(x)  # [1, ...]: the list\n", "ok", namespace) == 2
    with pytest.raises(AssertionError, match="the page says 3"):
        run_block("len([1, 2])  # 3\n", "wrong", {})
    assert expected_output("# tensor([...]): one value per k") == "tensor([...])"
    assert expected_output("# validation batches: two views") is None
    assert expected_output("# tensor(1.) tensor(2.): both") == "tensor(1.) tensor(2.)"


def test_docs_have_examples() -> None:
    # Guards the harness itself: the fence pattern must find the README's example.
    assert python_blocks(ROOT / "README.md"), "the README's python example was not found"
    assert os.path.exists(ROOT / "mkdocs.yml")


def test_every_file_the_docs_name_exists() -> None:
    """Paths of this repository quoted in the docs (``tests/...py``, ``benchmarks/...py``, ``src/...``)."""
    pages = [ROOT / "ARCHITECTURE.md", *PAGES]
    missing = []
    for page in pages:
        for path in re.findall(
            r"`((?:tests|benchmarks|examples|src|docs)/[\w/.-]+\.(?:py|md))", page.read_text()
        ):
            if not (ROOT / path).exists():
                missing.append(f"{page.name}: {path}")
    assert missing == []
