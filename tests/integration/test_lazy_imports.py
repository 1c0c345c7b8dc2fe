"""``import embedmetrics`` is lazy (PEP 562): the public names resolve on first use to the objects their
modules define, the table of names is complete, the TREC mode of the command line never imports
torchmetrics (its imports were 1.4 s of a 2M-line report), and ``embedmetrics trec_eval`` imports neither
torch nor pandas (3.5 s and 1.6 s of a call that trec_eval makes in 0.01 s)."""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import embedmetrics
import embedmetrics.retrieval


def _fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_loads_neither_torch_nor_torchmetrics() -> None:
    out = _fresh("""
        import sys
        import embedmetrics
        print("torch" in sys.modules, "torchmetrics" in sys.modules)
        from embedmetrics import RankMe
        print("torchmetrics" in sys.modules, RankMe.__module__)
    """)
    assert out.splitlines() == ["False False", "True embedmetrics.representation"]


def test_trec_report_does_not_import_torchmetrics(tmp_path: Path) -> None:
    run, qrels = tmp_path / "run.txt", tmp_path / "qrels.txt"
    run.write_text("q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 0.5 t\n")
    qrels.write_text("q1 0 d2 1\n")
    out = _fresh(f"""
        import sys
        from embedmetrics.cli import main
        status = main(["report", "--run", {str(run)!r}, "--qrels", {str(qrels)!r}, "--k", "1"])
        print(status, "torchmetrics" in sys.modules)
    """)
    assert out.splitlines()[-1] == "0 False"


@pytest.mark.parametrize("version", ["10", "9"])
def test_trec_eval_command_imports_neither_torch_nor_pandas(tmp_path: Path, version: str) -> None:
    run, qrels = tmp_path / "run.txt", tmp_path / "qrels.txt"
    run.write_text("q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 0.5 t\nq2 Q0 d1 1 0.3 t\n")
    qrels.write_text("q1 0 d2 1\nq2 0 d1 2\n")
    out = _fresh(f"""
        import sys
        from embedmetrics.cli import main
        status = main(["trec_eval", "--trec-eval", {version!r}, "-q", "-m", "all_trec", {str(qrels)!r},
                       {str(run)!r}, {str(run)!r}])
        sys.stdout.flush()
        print(status, "torch" in sys.modules, "pandas" in sys.modules, "torchmetrics" in sys.modules)
    """)
    assert out.splitlines()[-1] == "0 False False False"
    assert sum(line.startswith("runid") for line in out.splitlines()) == 2  # one block per run


def test_trec_eval_entry_point_runs_without_torch(tmp_path: Path) -> None:
    """``python -m embedmetrics trec_eval`` (the console script's ``run``) with torch made unimportable."""
    run, qrels = tmp_path / "run.txt", tmp_path / "qrels.txt"
    run.write_text("q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 0.5 t\n")
    qrels.write_text("q1 0 d2 1\n")
    blocker = tmp_path / "block" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('torch imported by embedmetrics trec_eval')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker.parent), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-m", "embedmetrics", "trec_eval", "-m", "map", str(qrels), str(run)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["map                   \tall\t0.5000"]


def test_every_public_name_resolves_to_its_module_object() -> None:
    for name in embedmetrics.__all__:
        value = getattr(embedmetrics, name)
        if name != "__version__":
            module = sys.modules[embedmetrics._EXPORTS[name]]
            assert value is getattr(module, name), name
    assert embedmetrics.RetrievalMetric is embedmetrics.retrieval.RetrievalMetric
    assert embedmetrics.functional.__name__ == "embedmetrics.functional"
    with pytest.raises(AttributeError, match="no attribute 'RetrievalNDCG'"):
        _ = embedmetrics.RetrievalNDCG


def test_the_table_lists_every_retrieval_metric_and_the_typing_imports() -> None:
    retrieval = {n for n, m in embedmetrics._EXPORTS.items() if m == "embedmetrics.retrieval"}
    base = embedmetrics.retrieval.RetrievalMetric
    defined = {
        name
        for name, value in vars(embedmetrics.retrieval).items()
        if isinstance(value, type) and issubclass(value, base) and value is not base
    }
    assert retrieval == defined  # every retrieval metric class, and only those
    assert retrieval | set(embedmetrics._EXTRAS) == set(embedmetrics.retrieval.__all__)
    tree = ast.parse(Path(embedmetrics.__file__).read_text())
    typing_block = next(n for n in tree.body if isinstance(n, ast.If))
    imported = {
        (node.module, alias.name)
        for node in typing_block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name  # re-exported for type checkers
    }
    assert imported == {(m, n) for n, m in {**embedmetrics._EXPORTS, **embedmetrics._EXTRAS}.items()}


def test_star_import_gives_every_metric() -> None:
    namespace: dict[str, object] = {}
    exec("from embedmetrics import *", namespace)
    assert set(embedmetrics.__all__) <= set(namespace)
    assert "RetrievalMetric" not in namespace
    assert {"RankMe", "DenseRetrieval", "RetrievalHitRate", "ContrastiveLoss"} <= set(dir(embedmetrics))


def test_trec_files_are_read_before_torch_is_needed() -> None:
    """The TREC readers and the command's checks import no torch, so the files can be read while
    another thread imports it."""
    out = _fresh("""
        import sys
        import embedmetrics._report.preflight
        import embedmetrics._io.trec
        print("torch" in sys.modules)
    """)
    assert out == "False"


def _trec_files(tmp_path: Path) -> tuple[str, str]:
    run, qrels = tmp_path / "run.txt", tmp_path / "qrels.txt"
    run.write_text("q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 0.5 t\nq2 Q0 d1 1 0.3 t\n")
    qrels.write_text("q1 0 d2 1\nq2 0 d1 2\n")
    return str(run), str(qrels)


def test_trec_report_reads_each_file_once_beside_the_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from embedmetrics import cli
    from embedmetrics._report import preflight

    run, qrels = _trec_files(tmp_path)
    calls: list[str] = []
    for name in ("read_run", "read_qrels", "read_trec_while_importing"):
        real = getattr(preflight, name)
        monkeypatch.setattr(
            preflight, name, lambda arg, real=real, name=name: [calls.append(name), real(arg)][1]
        )
    assert cli.main(["report", "--run", run, "--qrels", qrels, "--k", "1", "--json", "-"]) == 0
    assert calls == ["read_trec_while_importing", "read_run", "read_qrels"]
    assert json.loads(capsys.readouterr().out)["trec"]["mrr"] == pytest.approx(0.75)


def test_trec_report_checks_the_command_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from embedmetrics import cli
    from embedmetrics._report import preflight

    def no_reading(args):  # type: ignore[no-untyped-def]
        raise AssertionError("the files were read before the command was checked")

    monkeypatch.setattr(preflight, "read_trec_while_importing", no_reading)
    run, _ = _trec_files(tmp_path)
    missing = str(tmp_path / "no" / "dir" / "out.json")
    assert cli.main(["report", "--run", run, "--qrels", run, "--json", missing]) == 2
    assert "cannot write the JSON file: no directory" in capsys.readouterr().err
    assert cli.main(["report", "--run", run]) == 2
    assert "--run needs --qrels too" in capsys.readouterr().err


def test_a_failing_background_import_leaves_reading_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from embedmetrics._report import preflight

    run, qrels = _trec_files(tmp_path)
    monkeypatch.setattr(preflight, "EVALUATION_MODULES", ("embedmetrics._no_such_module",))
    joined = preflight.read_trec_while_importing(
        argparse.Namespace(run=run, qrels=qrels, ties="average", trec_eval=10)
    )
    assert joined.query_ids == ["q1", "q2"]
    assert joined.target.tolist() == [0, 1, 2]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the report forks its reader on Linux only")
def test_a_forked_reader_sends_the_joined_arrays_or_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the command line (no torch yet) a child process reads and joins while this one imports: the
    arrays that come back equal a direct read; a bad file raises the child's one-line error here; any
    other failure is read again here, so it raises with its own exception and traceback."""
    from embedmetrics._io.errors import ReportInputError
    from embedmetrics._report import preflight

    run, qrels = _trec_files(tmp_path)
    args = argparse.Namespace(run=run, qrels=qrels, ties="trec_eval", trec_eval=10)
    direct, forked = preflight.read_and_join(args), preflight._read_in_child(args)
    assert isinstance(memoryview(forked.preds.base).obj, preflight.mmap.mmap)  # through shared memory
    monkeypatch.setattr(preflight, "_most_rows", lambda _args: 1)  # too little room: through the pipe
    piped = preflight._read_in_child(args)
    monkeypatch.undo()

    def no_mapping(*_args: object) -> None:
        raise OSError("Cannot allocate memory")

    monkeypatch.setattr(preflight.mmap, "mmap", no_mapping)  # no shared memory at all: the pipe too
    unshared = preflight._read_in_child(args)
    monkeypatch.undo()
    for joined in (forked, piped, unshared):
        for name in ("preds", "target", "indexes", "retrieved"):
            assert getattr(joined, name).tolist() == getattr(direct, name).tolist()
        assert joined.query_ids == direct.query_ids
        assert (joined.n_run_queries, joined.n_qrels_queries) == (
            direct.n_run_queries,
            direct.n_qrels_queries,
        )
    (tmp_path / "bad.txt").write_text("q1 Q0 d1 1 0.9 t\nq1 Q0 d2 two 0.8\n")
    with pytest.raises(ReportInputError, match=r"bad\.txt:2: expected 6 fields"):
        preflight._read_in_child(
            argparse.Namespace(run=str(tmp_path / "bad.txt"), qrels=qrels, ties="average", trec_eval=10)
        )

    def broken(_args: argparse.Namespace) -> None:
        raise ZeroDivisionError("a bug, not bad input")

    monkeypatch.setattr(preflight, "read_and_join", broken)
    with pytest.raises(ZeroDivisionError, match="a bug"):
        preflight._read_in_child(args)
