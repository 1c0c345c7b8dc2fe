"""The report's figures: formats and resolution, legends that never cover the data, one file name per
family, a progress bar that moves with the dense scan's blocks, and a ``--help`` the docs page matches."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from embedmetrics._engine.core.block_progress import on_blocks
from embedmetrics._report import plots
from embedmetrics.cli import build_parser, main
from embedmetrics.functional import dense_retrieval

ROOT = Path(__file__).resolve().parents[3]


def _figures_of_every_kind(out: plots.Figures) -> list[str]:
    rng = np.random.default_rng(0)
    ks = list(range(1, 21))
    return [
        plots.plot_curves(
            out, "trec_hit_rate_recall_at_k", "Run", ks, np.linspace(0.5, 1, 20), np.linspace(0, 0.9, 20)
        ),
        plots.plot_similarities(
            out, "views_pair_similarity", "Views", rng.normal(0.8, 0.1, 500), rng.normal(0, 0.3, 500)
        ),
        plots.plot_per_class(out, [str(i) for i in range(10)], rng.random(10), np.full(10, 5), 0.5),
    ]


def test_legends_sit_outside_the_axes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    original = plots.Figures.save

    def keep(self: plots.Figures, fig: Any, stem: str) -> str:
        fig.canvas.draw()
        for ax in fig.axes:
            legend = ax.get_legend()
            assert legend is not None, stem
            box, area = legend.get_window_extent(), ax.get_window_extent()
            assert box.x0 >= area.x1 or box.y1 <= area.y0 or box.x1 <= area.x0 or box.y0 >= area.y1, stem
            seen.append(stem)
        return original(self, fig, stem)

    monkeypatch.setattr(plots.Figures, "save", keep)
    _figures_of_every_kind(plots.Figures(str(tmp_path)))
    assert len(seen) == 3


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_formats_and_resolution(tmp_path: Path, fmt: str) -> None:
    paths = _figures_of_every_kind(plots.Figures(str(tmp_path), fmt, 50))
    assert all(p.endswith(f".{fmt}") for p in paths)
    head = {"png": b"\x89PNG", "svg": b"<?xml", "pdf": b"%PDF"}[fmt]
    assert all(Path(p).read_bytes().startswith(head) for p in paths)
    if fmt == "png":
        low = Path(paths[0]).stat().st_size
        (tmp_path / "hi").mkdir()
        high = Path(plots.Figures(str(tmp_path / "hi"), "png", 200).save(*_one_figure(), "x")).stat().st_size
        assert high > low


def _one_figure() -> tuple[Any]:
    plt = plots._pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    return (fig,)


def test_the_cli_writes_svg_at_a_dpi_and_refuses_a_bad_dpi(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(0)
    np.save(tmp_path / "z1.npy", rng.normal(size=(30, 4)))
    np.save(tmp_path / "z2.npy", rng.normal(size=(30, 4)))
    views = ["--view1", str(tmp_path / "z1.npy"), "--view2", str(tmp_path / "z2.npy")]
    assert (
        main(["report", *views, "--plot", str(tmp_path / "fig"), "--plot-format", "svg", "--dpi", "72"]) == 0
    )
    assert [p.name for p in (tmp_path / "fig").iterdir()] == ["views_pair_similarity.svg"]
    assert main(["report", *views, "--plot", str(tmp_path / "fig"), "--dpi", "0"]) == 2
    assert "--dpi must be a positive" in capsys.readouterr().err


def _dense_inputs(tmp_path: Path, *, seed: int, n_queries: int, n_docs: int) -> list[str]:
    """Query and corpus embeddings and a qrels file (query i judges document 3 i), as report arguments."""
    rng = np.random.default_rng(seed)
    np.save(tmp_path / "q.npy", rng.normal(size=(n_queries, 4)).astype(np.float32))
    np.save(tmp_path / "c.npy", rng.normal(size=(n_docs, 4)).astype(np.float32))
    (tmp_path / "qrels.txt").write_text("".join(f"{i} 0 {i * 3} 1\n" for i in range(n_queries)))
    return [
        "--queries",
        str(tmp_path / "q.npy"),
        "--corpus",
        str(tmp_path / "c.npy"),
        "--qrels",
        str(tmp_path / "qrels.txt"),
    ]


def test_dense_figures_have_their_own_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _dense_inputs(tmp_path, seed=1, n_queries=6, n_docs=30)
    assert main(["report", *args, "--plot", str(tmp_path / "fig")]) == 0, capsys.readouterr().err
    assert [p.name for p in (tmp_path / "fig").iterdir()] == ["dense_hit_rate_recall_at_k.png"]


def test_the_dense_scan_reports_every_block() -> None:
    g = torch.Generator().manual_seed(0)
    q, c = torch.randn(8, 4, generator=g), torch.randn(300, 4, generator=g)
    seen: list[tuple[int, int]] = []
    with on_blocks(lambda done, total: seen.append((done, total))):
        dense_retrieval(q, c, torch.tensor([[0, 1, 1]]), k=3, block_bytes=8 * 4 * 40)
    total = seen[-1][1]
    assert total > 1
    assert seen == [(i, total) for i in range(1, total + 1)]
    dense_retrieval(q, c, torch.tensor([[0, 1, 1]]), k=3)  # no watcher: nothing to call
    assert len(seen) == total


def test_the_report_bar_follows_the_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from embedmetrics._report import command

    bars: list[Any] = []

    class Bar:
        def __init__(self, **kwargs: Any) -> None:
            self.total, self.n, self.desc, self.refreshed = kwargs["total"], 0, kwargs["desc"], 0
            bars.append(self)

        def __enter__(self) -> Bar:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def update(self, n: float = 1) -> None:
            self.n += n

        def set_postfix_str(self, text: str) -> None:
            return None

        def refresh(self) -> None:
            self.refreshed += 1

    monkeypatch.setattr(command, "progress_bar", Bar)
    args = _dense_inputs(tmp_path, seed=2, n_queries=5, n_docs=20)
    assert main(["report", *args]) == 0
    dense = next(b for b in bars if b.desc.startswith("dense"))
    assert dense.n == dense.total >= 1  # was 0/1 until the end
    assert dense.refreshed == dense.total


def test_help_lists_every_mode_and_the_docs_show_the_same_flags() -> None:
    report = next(a for a in build_parser()._subparsers._group_actions[0].choices.values())  # type: ignore[union-attr]
    help_text = report.format_help()
    for flags in ("--embeddings", "--view1", "--run", "--queries", "--corpus", "--plot-format", "--dpi"):
        assert flags in help_text, flags
    assert "dense retrieval" in help_text
    flags = {s for a in report._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    page = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", page)) - {"--help", "--version"}
    assert flags == documented, (flags - documented, documented - flags)
