"""Messages a new user meets (issue 49, item 12): a text file named ``.npy``/``.npz`` is said to be no
NumPy file, in one line naming the flag and the file, at every entry point of the report (numpy alone
says "pickled data ... allow_pickle=", which no flag sets); the quickstart installs as the README does;
the report's box plots use no argument matplotlib deprecates."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from embedmetrics._io.arrays import load_array
from embedmetrics._io.corpus_files import open_corpus
from embedmetrics._io.errors import ReportInputError
from embedmetrics.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """Valid embeddings, labels and qrels, a text file named ``.npy`` and one named ``.npz``, and a corpus
    directory whose one shard is text."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "e.npy", rng.random((6, 3)).astype(np.float32))
    np.save(tmp_path / "lab.npy", np.arange(6) % 2)
    (tmp_path / "qrels.txt").write_text("0 0 1 1\n1 0 2 1\n", encoding="utf-8")
    (tmp_path / "text.npy").write_text("0.1 0.2 0.3\n0.4 0.5 0.6\n", encoding="utf-8")
    (tmp_path / "text.npz").write_text("id,x\n", encoding="utf-8")
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "a.npy").write_text("hello\n", encoding="utf-8")
    (tmp_path / "shards" / "a.ids.txt").write_text("d0\n", encoding="utf-8")
    return tmp_path


# (the report's arguments, the flag whose file is text); "{d}" is the fixture's directory
CASES = [
    ("--embeddings {d}/text.npy --labels {d}/lab.npy", "--embeddings", "text.npy"),
    ("--embeddings {d}/text.npz --labels {d}/lab.npy", "--embeddings", "text.npz"),
    ("--embeddings {d}/e.npy --labels {d}/text.npy", "--labels", "text.npy"),
    (
        "--embeddings {d}/e.npy --labels {d}/lab.npy --reference {d}/text.npy --reference-labels {d}/lab.npy",
        "--reference",
        "text.npy",
    ),
    (
        "--embeddings {d}/e.npy --labels {d}/lab.npy --reference {d}/e.npy --reference-labels {d}/text.npy",
        "--reference-labels",
        "text.npy",
    ),
    ("--view1 {d}/text.npy --view2 {d}/e.npy", "--view1", "text.npy"),
    ("--view1 {d}/e.npy --view2 {d}/text.npz", "--view2", "text.npz"),
    ("--queries {d}/text.npy --corpus {d}/e.npy --qrels {d}/qrels.txt", "--queries", "text.npy"),
    ("--queries {d}/text.npz --corpus {d}/e.npy --qrels {d}/qrels.txt", "--queries", "text.npz"),
    ("--queries {d}/e.npy --corpus {d}/text.npy --qrels {d}/qrels.txt", "--corpus", "text.npy"),
    ("--queries {d}/e.npy --corpus {d}/text.npz --qrels {d}/qrels.txt", "--corpus", "text.npz"),
    ("--queries {d}/e.npy --corpus {d}/shards --qrels {d}/qrels.txt", "--corpus", "shards/a.npy"),
]


@pytest.mark.parametrize(("args", "flag", "name"), CASES, ids=[f"{c[1]} {c[2]}" for c in CASES])
def test_a_text_file_named_npy_is_said_to_be_no_numpy_file(
    files: Path, capsys: pytest.CaptureFixture[str], args: str, flag: str, name: str
) -> None:
    status = main(["report", *args.format(d=files).split()])
    err = capsys.readouterr().err
    suffix = Path(name).suffix
    assert status == 2, err
    assert err.count("\n") == 1, err  # one line
    expected = f"{flag} {files / name}: is not a NumPy {suffix} file (it starts with b'"
    assert expected in err, err
    assert "pickle" not in err, err


def test_the_loaders_name_the_file_and_the_flag(files: Path) -> None:
    with pytest.raises(
        ReportInputError, match=rf"^{re.escape(str(files / 'text.npy'))}: is not a NumPy \.npy"
    ):
        load_array(str(files / "text.npy"))
    with pytest.raises(ReportInputError, match=r"^--view1 .*text\.npz: is not a NumPy \.npz file"):
        load_array(str(files / "text.npz"), flag="--view1")
    with pytest.raises(ReportInputError, match=r"^--corpus .*a\.npy: is not a NumPy \.npy file"):
        open_corpus(str(files / "shards"), flag="--corpus")
    (files / "empty.npy").write_bytes(b"")
    with pytest.raises(ReportInputError, match=r"empty\.npy: is not a NumPy \.npy file \(it is empty"):
        load_array(str(files / "empty.npy"))
    assert load_array(str(files / "e.npy"), flag="--embeddings").shape == (6, 3)  # NumPy's files pass


def test_the_quickstart_installs_as_the_readme_does() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    line = re.search(r'^pip install "git\+https://\S+"', readme, re.MULTILINE)
    assert line is not None
    assert line.group(0) in quickstart
    assert (
        re.search(r"^pip install embedmetrics\b", quickstart, re.MULTILINE) is None
    )  # no registry serves it


def test_the_comparison_box_plots_raise_no_deprecation_warning(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from embedmetrics._report.plots import Figures, plot_comparison

    g = torch.Generator().manual_seed(0)
    values = {"map": {name: torch.rand(20, generator=g, dtype=torch.float64) for name in ("a", "b", "c")}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a MatplotlibDeprecationWarning (vert=, labels=) fails the test
        paths = plot_comparison(Figures(str(tmp_path)), values, "map")
    assert [Path(p).name for p in paths] == ["comparison_paired_differences.png", "comparison_means_ci.png"]


class _OldAxes:
    """An ``Axes`` of matplotlib before 3.9 (no ``orientation``, no ``tick_labels``): records the call."""

    def __init__(self) -> None:
        self.given: dict[str, Any] = {}

    def boxplot(self, x: Any, vert: bool | None = None, labels: Any = None) -> None:
        self.given = {"vert": vert, "labels": labels}


def test_older_matplotlib_gets_vert_and_labels() -> None:
    from embedmetrics._report.plots import _horizontal_boxplot

    ax = _OldAxes()
    _horizontal_boxplot(ax, [np.zeros(3)], ["b − a"])
    assert ax.given == {"vert": False, "labels": ["b − a"]}
