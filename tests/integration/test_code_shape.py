"""The shape of the code a newcomer reads: functions that fit on a screen, folders of a dozen modules at
most, and each named set of choices (tie policies, similarities) defined once."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "embedmetrics"


def test_every_function_fits_on_a_screen() -> None:
    long = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno:
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    long.append(f"{path.relative_to(SRC)}:{node.name} ({lines} lines)")
    assert long == []


def test_no_folder_holds_more_than_twelve_modules() -> None:
    for folder in [SRC, *(p for p in SRC.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= 12, (folder, len(modules))


def test_the_tie_policies_and_similarities_are_defined_once() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in SRC.rglob("*.py"))
    assert text.count('("average", "pessimistic", "optimistic"') == 1
    assert text.count('("cosine", "dot", "euclidean")') == 1


def test_the_accuracy_calculator_only_names_its_decisions() -> None:
    """A thin face: the calculator's decisions and built-in metrics are in the engine
    (``_engine/neighbors/calculator*.py``); the class, docstring included, stays under 150 lines."""
    from embedmetrics.neighbors import AccuracyCalculator

    lines, _ = inspect.getsourcelines(AccuracyCalculator)
    assert len(lines) < 150, len(lines)
