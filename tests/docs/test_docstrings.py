"""Every public docstring reads as Markdown in the API reference, without building the site.

The API pages are rendered from the docstrings by mkdocstrings (Google style, Markdown): a Sphinx role
(``:func:`x```) or a reStructuredText directive (``.. math::``) would be shown literally, and a public
attribute whose value is a builtin (a ``str`` class attribute, say) would be shown with the builtin's
docstring (``str(object='') -> str ...``). The objects read here are those the API pages document (the
``:::`` directives of ``docs/api/*.md`` and those the MkDocs hook writes from the registry) and the
public names of ``embedmetrics``, ``embedmetrics.functional`` and the Lightning integration; for a
class, its own members as mkdocstrings lists them (the ``filters`` of ``mkdocs.yml``, ``__init__``
merged into the class) and every public method it inherits from embedmetrics' own base classes (what
``help()`` shows).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import embedmetrics
import embedmetrics.functional

ROOT = Path(__file__).resolve().parents[2]

#: A Sphinx role: the docs are Markdown, where it is shown as typed.
SPHINX_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|ref|obj|data|exc|const|term|doc|math):`")
#: A reStructuredText directive (``.. note::``, ``.. math::``, ``.. code-block:: python``) or target.
RST_DIRECTIVE = re.compile(r"^\s*\.\. (?:[A-Za-z][\w-]*::|_[^:]+:)", re.M)
#: An RST literal-block marker: a paragraph ending in ``::`` (``Example::``).
RST_LITERAL = re.compile(r"\w::[ \t]*$", re.M)
#: The docstrings of builtins that a public attribute or an inherited ``__init__`` would show.
BUILTIN_DOC = re.compile(
    r"^(?:Initialize self\.|str\(object=|int\(\[x\]\)|bool\(x\)|float\(x|Convert a string or number|"
    r"Built-in immutable sequence|dict\(\) ->|list\(\) ->|Create and return a new object|"
    r"Call self as a function|Define the computation performed at every call)"
)


def _resolve(path: str) -> Any:
    """``embedmetrics.functional.compare`` -> the object (the longest importable module, then attributes)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(path)


def _hook() -> Any:
    path = ROOT / "docs" / "hooks" / "registry_tables.py"
    spec = importlib.util.spec_from_file_location("registry_tables_for_docstrings", path)
    assert spec is not None
    assert spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


def _documented_paths() -> list[str]:
    """Every object path of the API pages, once the hook has written the registry's sections."""
    hook = _hook()
    paths: list[str] = []
    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        text = hook.on_page_markdown(page.read_text(encoding="utf-8"))
        paths += re.findall(r"^::: ([\w.]+)", text, flags=re.M)
    assert len(paths) >= 30, paths
    return paths


def _public_objects() -> dict[str, Any]:
    """Path -> object: the API pages' objects and the public names of the package."""
    objects = {path: _resolve(path) for path in _documented_paths()}
    modules = [embedmetrics, embedmetrics.functional]
    with contextlib.suppress(ImportError):  # without the [lightning] extra, its page's objects only
        modules.append(importlib.import_module("embedmetrics.integrations.lightning"))
    for module in modules:
        for name in module.__all__:
            if name != "__version__":
                objects.setdefault(f"{module.__name__}.{name}", getattr(module, name))
    return objects


def _member_filters() -> list[re.Pattern[str]]:
    """The ``filters`` of mkdocs.yml's Python handler: the names the API pages leave out."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    plugin = next(p["mkdocstrings"] for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    filters = plugin["handlers"]["python"]["options"]["filters"]
    assert all(f.startswith("!") for f in filters), filters
    return [re.compile(f[1:]) for f in filters]


def _ours(obj: Any) -> bool:
    return str(getattr(obj, "__module__", "") or "").startswith("embedmetrics")


def _own_doc(value: Any) -> str | None:
    """The docstring mkdocstrings shows for a member: its own ``__doc__`` (never a parent's)."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    try:
        doc = value.__doc__
    except Exception:  # an object whose __doc__ raises shows none
        return None
    return inspect.cleandoc(doc) if isinstance(doc, str) else None


def _is_routine(value: Any) -> bool:
    value = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
    return inspect.isroutine(value) or isinstance(value, property) or inspect.isclass(value)


def _docstrings() -> Iterator[tuple[str, str, bool]]:
    """(where, docstring, shown as a builtin's) for every public object and member."""
    hidden = _member_filters()
    for path, obj in _public_objects().items():
        doc = _own_doc(obj)
        if doc is not None:
            yield path, doc, False
        if not inspect.isclass(obj):
            continue
        seen: set[str] = set()
        for owner in obj.__mro__:
            if not _ours(owner):
                continue
            for name, value in vars(owner).items():
                if name in seen:
                    continue
                seen.add(name)
                listed = name == "__init__" or not any(f.search(name) for f in hidden)
                shown_on_page = owner is obj and listed
                public_method = not name.startswith("_") and _is_routine(value)
                if not (shown_on_page or public_method):
                    continue
                doc = _own_doc(value)
                if doc is None:
                    continue
                builtin = not _is_routine(value) and not _ours(type(value)) and doc == _own_doc(type(value))
                yield f"{path}.{name}", doc, builtin


DOCSTRINGS = list(_docstrings())


def test_the_scan_reads_every_public_docstring() -> None:
    where = {w for w, _, _ in DOCSTRINGS}
    for expected in (
        "embedmetrics.RetrievalMAP",
        "embedmetrics.functional.compare",
        "embedmetrics.functional.uniformity_score",
        "embedmetrics.AccuracyCalculator.get_accuracy",
        "embedmetrics.qrels.read_qrels",
    ):
        assert expected in where, expected
    assert len(DOCSTRINGS) > 100


@pytest.mark.parametrize(
    ("what", "pattern"),
    [
        ("a Sphinx role", SPHINX_ROLE),
        ("an RST directive", RST_DIRECTIVE),
        ("an RST literal block", RST_LITERAL),
    ],
)
def test_no_public_docstring_is_restructuredtext(what: str, pattern: re.Pattern[str]) -> None:
    found = [f"{where}: {m.group(0).strip()!r}" for where, doc, _ in DOCSTRINGS if (m := pattern.search(doc))]
    assert found == [], f"{what} (write Markdown: inline code, [`name`][path] links, $$ math): {found}"


def test_no_api_page_shows_a_builtin_docstring() -> None:
    found = [where for where, doc, builtin in DOCSTRINGS if builtin or BUILTIN_DOC.search(doc)]
    assert found == [], (
        "a builtin's docstring would be shown (give the attribute a leading underscore, "
        f"or leave it out with mkdocs.yml's filters): {found}"
    )


def test_the_checks_catch_what_they_name() -> None:
    assert SPHINX_ROLE.search("compared by :func:`paired_test`")
    assert SPHINX_ROLE.search("A :class:`Comparison`")
    assert RST_DIRECTIVE.search("Text.\n\n    .. math::\n        x = 1")
    assert RST_DIRECTIVE.search(".. note::\n   careful")
    assert RST_LITERAL.search("Example::\n\n    code")
    assert not RST_DIRECTIVE.search("$$\nx = 1\n$$")
    assert not SPHINX_ROLE.search("``main()``, then leave")

    class Holder:
        keyword = "calculate_"

    value = vars(Holder)["keyword"]
    assert _own_doc(value) == _own_doc(type(value))  # what the builtin check compares
    assert BUILTIN_DOC.search(_own_doc(object.__init__) or "")
