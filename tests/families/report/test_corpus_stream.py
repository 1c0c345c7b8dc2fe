"""``report --queries --corpus --qrels`` streams the corpus: a ``.npy`` file or a directory of shards read
block by block, resumable from ``--checkpoint``, in memory that does not grow with the corpus.

Oracle: the public ``dense_retrieval`` on the whole corpus held in memory (per-query values averaged over
the judged queries as the report averages them, and its run), on tie-heavy float16 data (rows repeated
across blocks and shards).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from embedmetrics._engine.dense import scan as dense_scan
from embedmetrics.functional import dense_retrieval
from embedmetrics.qrels import read_qrels
from families.report.test_cli import SRC, assert_one_line_error, call, run_cli

N_DOCS, N_QUERIES, WIDTH = 120, 9, 6


def _corpus(seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """float16 documents (a third of them copies of others: ties), float32 queries, document names."""
    rng = np.random.default_rng(seed)
    docs = rng.normal(size=(N_DOCS, WIDTH)).astype(np.float16)
    docs[rng.choice(N_DOCS, 40, replace=False)] = docs[rng.choice(N_DOCS, 40)]
    queries = rng.normal(size=(N_QUERIES, WIDTH)).astype(np.float32)
    return docs, queries, [f"doc{(i * 37) % 1000}" for i in range(N_DOCS)]


def _write_ids(path: Path, names: list[str]) -> None:
    path.write_text("".join(f"{n}\n" for n in names), encoding="utf-8")


def _inputs(tmp: Path, seed: int = 0) -> dict[str, str]:
    """Queries (+ sidecar, one unjudged), a single-file corpus (+ sidecar), a directory of shards (.npy
    with sidecars and .npz with ids), and TREC qrels (one judged document absent from the corpus)."""
    docs, queries, names = _corpus(seed)
    rng = np.random.default_rng(seed + 1)
    np.save(tmp / "q.npy", queries)
    _write_ids(tmp / "q.ids.txt", [f"q{i}" for i in range(N_QUERIES)])
    np.save(tmp / "c.npy", docs)
    _write_ids(tmp / "c.ids.txt", names)
    shards = tmp / "shards"
    shards.mkdir()
    for j, (lo, hi) in enumerate([(0, 33), (33, 34), (34, 80), (80, N_DOCS)]):
        if j == 2:
            np.savez(shards / f"part{j}.npz", emb=docs[lo:hi], ids=np.array(names[lo:hi]))
        else:
            np.save(shards / f"part{j}.npy", docs[lo:hi])
            _write_ids(shards / f"part{j}.ids.txt", names[lo:hi])
    lines = [
        f"q{i} 0 {names[d]} {int(rng.integers(0, 3))}\n"
        for i in range(N_QUERIES - 1)
        for d in rng.choice(N_DOCS, 6, replace=False)
    ]
    (tmp / "qrels.txt").write_text("".join(lines) + "q0 0 nowhere 1\n", encoding="utf-8")
    return {
        "q": str(tmp / "q.npy"),
        "c": str(tmp / "c.npy"),
        "dir": str(shards),
        "qrels": str(tmp / "qrels.txt"),
    }


def _expected(
    files: dict[str, str], ks: list[int], depth: int, similarity: str, ties: str
) -> tuple[dict, str]:
    """The report's numbers and run from ``dense_retrieval`` on the whole corpus in memory."""
    docs, queries, names = _corpus()
    encoded = read_qrels(files["qrels"])
    qids = encoded.queries.encode([f"q{i}" for i in range(N_QUERIES)])
    cids = encoded.docs.encode(names)
    out = dense_retrieval(
        torch.from_numpy(queries), torch.from_numpy(docs.astype(np.float32)), encoded.qrels, query_ids=qids,
        corpus_ids=cids, k=ks, depth=depth, similarity=similarity, ties=ties, aggregation="none",
        return_run=True,
    )  # fmt: skip
    judged = ~torch.isnan(out["r_precision"])
    values = {key: float(v[judged].mean()) for key, v in out.items() if key not in ("run", "query_ids")}
    run_ids, scores = out["run"]
    lines = []
    for q, row, row_scores in zip(
        encoded.queries.decode(out["query_ids"]), run_ids.tolist(), scores.tolist()
    ):
        for rank, (doc, score) in enumerate(zip(encoded.docs.decode(row), row_scores), start=1):
            if doc:
                lines.append(f"{q} Q0 {doc} {rank} {score!r} embedmetrics\n")
    return values, "".join(lines)


def _report(capsys: pytest.CaptureFixture[str], files: dict[str, str], corpus: str, *extra: str) -> dict:
    status, out, err = call(capsys, "--queries", files["q"], "--corpus", corpus, "--qrels", files["qrels"],
                            "--json", "-", *extra)  # fmt: skip
    assert status == 0, err
    return json.loads(out)


@pytest.mark.parametrize(("similarity", "ties"), [("cosine", "average"), ("dot", "pessimistic"),
                                                  ("euclidean", "optimistic")])  # fmt: skip
@pytest.mark.parametrize("key_block_bytes", [None, 2**9])
def test_streamed_report_equals_dense_retrieval_on_the_whole_corpus(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    similarity: str,
    ties: str,
    key_block_bytes: int | None,
) -> None:
    """A file in blocks of every size, and a directory of shards (sidecars and an .npz's ids): the numbers
    and the run of ``dense_retrieval`` on the whole corpus, bit for bit; also with key blocks of a few
    columns, so that a chunk read after the lists fill spans several bounded blocks (issue 55)."""
    if key_block_bytes is not None:
        monkeypatch.setattr(dense_scan, "DENSE_BLOCK_BYTES", key_block_bytes)
    files = _inputs(tmp_path)
    ks, depth = [1, 3, 10], 25
    expected, expected_run = _expected(files, ks, depth, similarity, ties)
    flags = ("--k", "1,3,10", "--depth", str(depth), "--similarity", similarity, "--ties", ties)
    for corpus, block_rows in [
        (files["c"], 1),
        (files["c"], 7),
        (files["c"], 40),
        (files["c"], 1000),
        (files["dir"], 5),
    ]:
        run = tmp_path / f"run_{block_rows}.txt"
        got = _report(capsys, files, corpus, *flags, "--block-rows", str(block_rows), "--save-run", str(run))
        assert got["dense"] == expected, (corpus, block_rows)
        assert got["info"]["dense"]["n_corpus"] == N_DOCS
        assert run.read_text(encoding="utf-8") == expected_run, (corpus, block_rows)


def test_a_single_npz_or_pt_corpus_reads_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _inputs(tmp_path)
    docs, _, names = _corpus()
    np.savez(tmp_path / "c.npz", emb=docs, ids=np.array(names))
    torch.save(torch.from_numpy(docs), tmp_path / "c.pt")  # its ids: the sidecar c.ids.txt
    reference = _report(capsys, files, files["c"])["dense"]
    assert _report(capsys, files, str(tmp_path / "c.npz"), "--block-rows", "11")["dense"] == reference
    assert _report(capsys, files, str(tmp_path / "c.pt"), "--block-rows", "11")["dense"] == reference


# ----------------------------------------------------------------------------- bad input
def _error(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], corpus: str, fragment: str, *extra: str
) -> str:
    status, _, err = call(
        capsys, "--queries", files["q"], "--corpus", corpus, "--qrels", files["qrels"], *extra
    )
    assert_one_line_error(status, err, fragment)
    return err


def test_a_shard_of_another_width_or_dtype_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _inputs(tmp_path)
    shards = Path(files["dir"])
    good = np.load(shards / "part3.npy")
    np.save(shards / "part3.npy", np.zeros((good.shape[0], WIDTH + 1), dtype=np.float16))
    err = _error(capsys, files, files["dir"], "part3.npy: 7 features of float16")
    assert "part0.npy has 6 of float16" in err
    np.save(shards / "part3.npy", good.astype(np.float32))
    _error(capsys, files, files["dir"], "part3.npy: 6 features of float32")


def test_an_id_repeated_across_shards_names_both_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _inputs(tmp_path)
    shards = Path(files["dir"])
    kept = (shards / "part3.ids.txt").read_text().split()
    names = [*kept[:5], (shards / "part0.ids.txt").read_text().split()[2], *kept[6:]]
    _write_ids(shards / "part3.ids.txt", names)
    err = _error(capsys, files, files["dir"], f"part3.ids.txt: id {names[5]!r} (row 5)")
    assert "row 2 of" in err
    assert "part0.ids.txt" in err
    _write_ids(shards / "part3.ids.txt", kept)
    np.savez(shards / "part2.npz", emb=np.zeros((2, WIDTH), np.float16), ids=np.array(["a", "a"]))
    _error(capsys, files, files["dir"], "part2.npz['ids']: id 'a' appears twice (rows 0 and 1)")


def test_missing_ids_or_miscounted_ids_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _inputs(tmp_path)
    shards = Path(files["dir"])
    _write_ids(shards / "part1.ids.txt", ["x", "y"])
    _error(capsys, files, files["dir"], "part1.ids.txt: more than 1 ids for 1 embedding rows")
    os.remove(shards / "part1.ids.txt")
    _error(capsys, files, files["dir"], "part1.npy: no ids")
    os.remove(shards / "part1.npy")
    for name in os.listdir(shards):
        os.remove(shards / name)
    _error(capsys, files, files["dir"], "holds none")


def test_a_truncated_npy_names_the_file_and_its_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _inputs(tmp_path)
    data = Path(files["c"]).read_bytes()
    Path(files["c"]).write_bytes(data[: len(data) - 3 * WIDTH * 2 - 1])  # 3 rows and a byte short
    _error(capsys, files, files["c"], f"c.npy: truncated: its header says {N_DOCS} rows of 6 float16 values, "
                                      f"the file holds {N_DOCS - 4} whole rows")  # fmt: skip


def test_a_nan_row_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _inputs(tmp_path)
    docs = np.load(files["c"])
    docs[77, 2] = np.nan
    np.save(files["c"], docs)
    _error(
        capsys,
        files,
        files["c"],
        "c.npy: embeddings contain NaN or infinite values (row 77)",
        "--block-rows",
        "10",
    )


def test_a_checkpoint_of_other_inputs_or_settings_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _inputs(tmp_path)
    ckpt = str(tmp_path / "ckpt")
    first = _report(capsys, files, files["c"], "--checkpoint", ckpt, "--block-rows", "16")
    assert os.path.exists(os.path.join(ckpt, "dense_lists.pt"))
    # a complete checkpoint: the same command prints the same numbers without scanning
    assert _report(capsys, files, files["c"], "--checkpoint", ckpt) == first
    _error(
        capsys,
        files,
        files["c"],
        "(--depth 20 here, 10 in the checkpoint)",
        "--checkpoint",
        ckpt,
        "--depth",
        "20",
    )
    _error(
        capsys,
        files,
        files["c"],
        "(--similarity 'dot' here, 'cosine'",
        "--checkpoint",
        ckpt,
        "--similarity",
        "dot",
    )
    _error(
        capsys, files, files["dir"], "the corpus has 4 files, the checkpoint's had 1", "--checkpoint", ckpt
    )
    docs = np.load(files["c"])
    docs[0, 0] += 1
    np.save(files["c"], docs)
    os.utime(files["c"], ns=(1, 1))
    _error(capsys, files, files["c"], "corpus file 'c.npy' differs (mtime_ns)", "--checkpoint", ckpt)
    status, _, err = call(capsys, "--view1", files["q"], "--view2", files["q"], "--checkpoint", ckpt)
    assert_one_line_error(status, err, "--checkpoint saves the scan of --queries/--corpus")


# ----------------------------------------------------------------------------- a real process, killed
def test_a_run_killed_after_a_checkpoint_resumes_to_the_same_output(tmp_path: Path) -> None:
    """SIGKILL after the first checkpoint, then the same command: the output of an uninterrupted run."""
    rng = np.random.default_rng(3)
    n_docs = 20_000
    np.save(tmp_path / "q.npy", rng.normal(size=(64, 16)).astype(np.float32))
    np.save(tmp_path / "c.npy", rng.normal(size=(n_docs, 16)).astype(np.float16))
    judged = "".join(f"{i} 0 {i * 11 + 1} 1\n{i} 0 {i * 13 + 2} 2\n" for i in range(60))
    (tmp_path / "qrels.txt").write_text(judged)
    args = ["--queries", "q.npy", "--corpus", "c.npy", "--qrels", "qrels.txt", "--k", "1,10,100"]
    args += ["--block-rows", "1000", "--checkpoint-every", "0"]
    whole = run_cli(*args, "--save-run", "whole.txt", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [
        sys.executable,
        "-m",
        "embedmetrics",
        "report",
        *args,
        "--checkpoint",
        "ckpt",
        "--save-run",
        "run.txt",
    ]
    child = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    saved = tmp_path / "ckpt" / "dense_lists.pt"
    deadline = time.monotonic() + 120
    while not saved.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.communicate()
    assert child.returncode == -signal.SIGKILL
    done = torch.load(saved, weights_only=True)["rows_done"]
    assert 0 < done < n_docs  # killed mid-scan
    resumed = run_cli(*args, "--checkpoint", "ckpt", "--save-run", "run.txt", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.replace("run.txt", "whole.txt") == whole.stdout
    assert (tmp_path / "run.txt").read_text() == (tmp_path / "whole.txt").read_text()


# ----------------------------------------------------------------------------- memory
_PEAK = """
import sys
from embedmetrics.cli import main
status = main(sys.argv[1:])
peak = [line for line in open("/proc/self/status") if line.startswith("VmHWM")][0].split()[1]
print(status, peak)
"""


def _peak_kib(tmp: Path, corpus: str) -> int:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = [
        "report",
        "--queries",
        "q.npy",
        "--corpus",
        corpus,
        "--qrels",
        "qrels.txt",
        "--block-rows",
        "16384",
    ]
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *args, "--json", f"{corpus}.json"], cwd=tmp, env=env,
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    status, peak = done.stdout.splitlines()[-1].split()
    assert status == "0", done.stderr
    return int(peak)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_peak_memory_does_not_grow_with_the_corpus(tmp_path: Path) -> None:
    """300 queries against 400,000 float16 rows and against 40,000: the peak resident memory differs by
    far less than the larger corpus's float32 size (the corpus is never held)."""
    rng = np.random.default_rng(5)
    width = 64
    np.save(tmp_path / "q.npy", rng.normal(size=(300, width)).astype(np.float32))
    big = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.float16, shape=(400_000, width))
    for lo in range(0, 400_000, 50_000):
        big[lo : lo + 50_000] = rng.normal(size=(50_000, width)).astype(np.float16)
    np.save(tmp_path / "small.npy", np.asarray(big[:40_000]))
    big.flush()
    del big
    (tmp_path / "qrels.txt").write_text("".join(f"{i} 0 {i * 101} 1\n" for i in range(300)))
    small, large = _peak_kib(tmp_path, "small.npy"), _peak_kib(tmp_path, "big.npy")
    float32_kib = 400_000 * width * 4 // 1024
    assert large - small < float32_kib // 5, (small, large, float32_kib)
    assert not math.isnan(json.loads((tmp_path / "big.npy.json").read_text())["dense"]["ndcg@10"])


def test_review_findings_same_named_shards_and_a_damaged_checkpoint(tmp_path: Path) -> None:
    from embedmetrics._io.corpus_files import open_corpus
    from embedmetrics._io.errors import ReportInputError

    shards = tmp_path / "shards"
    shards.mkdir()
    rows = np.ones((3, 4), dtype=np.float32)
    np.save(shards / "a.npy", rows)
    np.savez(shards / "a.npz", embeddings=rows, ids=np.array(["x", "y", "z"]))
    (shards / "a.ids.txt").write_text("p\nq\nr\n")
    with pytest.raises(ReportInputError, match="has its name"):
        open_corpus(str(shards))


def test_a_damaged_checkpoint_is_named_without_torch_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _inputs(tmp_path)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "dense_lists.pt").write_bytes(b"garbage")
    _error(capsys, files, files["c"], "not a readable checkpoint", "--checkpoint", str(ckpt))
    assert "weights_only" not in capsys.readouterr().err
