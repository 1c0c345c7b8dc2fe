"""The package's metadata a pip user sees: license, links, classifiers, and a README that says what the
library is and how to install it before anything else. (``pip wheel .`` puts ``LICENSE`` in
``*.dist-info/licenses/`` and ``License-Expression: Apache-2.0`` in the metadata: hatchling does it from
these fields.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_license_is_an_spdx_expression_with_its_file() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert not any(c.startswith("License ::") for c in PROJECT["classifiers"])  # PEP 639: the expression


def test_project_urls() -> None:
    assert set(PROJECT["urls"]) == {"Documentation", "Source", "Changelog", "Issues"}
    assert all(url.startswith("https://") for url in PROJECT["urls"].values())


def test_classifiers_are_true() -> None:
    classifiers = PROJECT["classifiers"]
    assert "Framework :: Pytest" not in classifiers  # no pytest plugin (entry point pytest11) here
    assert "pytest11" not in PROJECT.get("entry-points", {})
    assert "Typing :: Typed" in classifiers
    assert (ROOT / "src" / "embedmetrics" / "py.typed").exists()
    minor = int(PROJECT["requires-python"].split(".")[1])
    assert f"Programming Language :: Python :: 3.{minor}" in classifiers


def test_readme_opens_with_what_it_is_and_how_to_install() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    head = readme[: readme.index("make demo")]
    assert "metrics for retrieval and embedding evaluation" in head
    assert "pip install" in head
    assert readme.index("pip install") < readme.index("make demo") < readme.index("make test")
