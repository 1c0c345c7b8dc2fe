"""A corpus file far larger than memory, streamed: ``embedmetrics report`` against the bare product.

Workload (defaults: MS MARCO's size): an 8,841,823 x 768 float16 ``.npy`` corpus (13.6 GB), 1,000
float32 queries, depth 1,000, cosine, three relevant documents per query. The files are made once in
``--dir`` (kept for the next run). Every row is a fresh process, timed whole (start-up included) under
``/usr/bin/time -v`` (wall time, peak resident memory with file pages):

- ``ours``: ``embedmetrics report --queries --corpus --qrels --depth 1000`` (the corpus read block by
  block and streamed into running lists).
- ``ours, 2 processes``: ``torchrun --nproc_per_node 2``, each process streaming half of the file's
  blocks into a ``DenseRetrieval`` (``set_queries``), one thread each; the lists merged at ``compute``.
- ``bare``: the queries times every block of the same file, read and widened to float32 the same way
  (``_io.corpus_files.blocks``), no selection: the bound.
- ``bare, 2 processes``: the same, each of two processes over half the blocks, one thread each.

Usage::

    python benchmarks/bench_corpus_stream.py [--rows 8841823] [--width 768] [--queries 1000] [--depth 1000]
        [--dir /tmp/embedmetrics-corpus] [--skip-two]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import torch

WRITE_ROWS = 1 << 16


def make_files(folder: str, rows: int, width: int, n_queries: int) -> dict[str, str]:
    """The corpus (float16 ``.npy``, written in slices), the queries and TREC qrels (row numbers as ids)."""
    os.makedirs(folder, exist_ok=True)
    paths = {
        n: os.path.join(folder, f"{n}{ext}")
        for n, ext in (("corpus", ".npy"), ("queries", ".npy"), ("qrels", ".txt"))
    }
    rng = np.random.default_rng(0)
    rel = rng.integers(0, rows, size=(n_queries, 3))
    if not os.path.exists(paths["corpus"]) or os.path.getsize(paths["corpus"]) < rows * width * 2:
        header = {"descr": "<f2", "fortran_order": False, "shape": (rows, width)}
        with open(paths["corpus"], "wb") as handle:
            np.lib.format.write_array_header_1_0(handle, header)
            for start in range(0, rows, WRITE_ROWS):
                n = min(WRITE_ROWS, rows - start)
                handle.write(rng.standard_normal((n, width), dtype=np.float32).astype(np.float16).tobytes())
    with open(paths["corpus"], "rb") as handle:  # the queries near their relevant rows
        np.lib.format.read_magic(handle)
        np.lib.format.read_array_header_1_0(handle)
        offset = handle.tell()
    corpus = np.memmap(paths["corpus"], dtype=np.float16, mode="r", offset=offset, shape=(rows, width))
    queries = corpus[rel.reshape(-1)].astype(np.float32).reshape(n_queries, 3, width).mean(axis=1)
    noise = np.random.default_rng(1)  # not the corpus's generator: its draws made the corpus rows
    queries += 0.5 * noise.standard_normal(queries.shape, dtype=np.float32)
    np.save(paths["queries"], queries.astype(np.float32))
    with open(paths["qrels"], "w") as out:
        for q in range(n_queries):
            for grade, doc in zip((2, 1, 1), rel[q]):
                out.write(f"{q} 0 {doc} {grade}\n")
    return paths


BARE = """
import sys, torch, numpy as np
from embedmetrics._io.corpus_files import blocks, open_corpus
rank, world = int(sys.argv[3]), int(sys.argv[4])
queries = torch.nn.functional.normalize(torch.from_numpy(np.load(sys.argv[1])), dim=1)
corpus = open_corpus(sys.argv[2])
for i, (start, rows) in enumerate(blocks(corpus, 0, int(sys.argv[5]))):
    if i % world == rank:
        torch.mm(queries, torch.from_numpy(rows).T)
"""

STREAM = """
import os, sys, torch, numpy as np
import torch.distributed as dist
import embedmetrics as em
from embedmetrics._io.corpus_files import blocks, open_corpus
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
queries = torch.from_numpy(np.load(sys.argv[1]))
qrels = torch.from_numpy(np.loadtxt(sys.argv[3], dtype=np.int64)[:, [0, 2, 3]])
depth = int(sys.argv[4])
metric = em.DenseRetrieval(qrels, k=sorted({1, 10, min(100, depth), depth}), depth=depth)
metric.set_queries(queries, torch.arange(queries.shape[0]))
for i, (start, rows) in enumerate(blocks(open_corpus(sys.argv[2]), 0, int(sys.argv[5]))):
    if i % world == rank:
        metric.update(torch.from_numpy(rows), torch.arange(start, start + rows.shape[0]), role="corpus")
value = metric.compute()
if rank == 0:
    print({k: round(float(v), 6) for k, v in value.items()})
dist.destroy_process_group()
"""


def timed(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Wall seconds and peak resident MiB of one command (``/usr/bin/time -v``)."""
    out = subprocess.run(
        ["/usr/bin/time", "-v", *command], capture_output=True, text=True, env=env, check=True
    )
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", out.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr)
    if wall is None or rss is None:
        raise RuntimeError(out.stderr[-2000:])
    hours, minutes, seconds = wall.groups()
    total = int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
    return {"seconds": total, "peak_mib": int(rss.group(1)) / 1024, "stdout": out.stdout}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8_841_823)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--block-rows", type=int, default=1 << 15)
    parser.add_argument("--dir", default="/tmp/embedmetrics-corpus")
    parser.add_argument("--skip-two", action="store_true", help="leave out the two-process rows")
    args = parser.parse_args()
    paths = make_files(args.dir, args.rows, args.width, args.queries)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    py, blocks = sys.executable, str(args.block_rows)
    rows: dict[str, dict[str, Any]] = {}
    rows["bare"] = timed([py, "-c", BARE, paths["queries"], paths["corpus"], "0", "1", blocks], env)
    report = [os.path.join(os.path.dirname(py), "embedmetrics"), "report", "--queries", paths["queries"]]
    report += ["--corpus", paths["corpus"], "--qrels", paths["qrels"], "--depth", str(args.depth)]
    ks = ",".join(str(k) for k in sorted({1, 10, min(100, args.depth), args.depth}))
    rows["ours"] = timed([*report, "--k", ks, "--block-rows", blocks], env)
    if not args.skip_two:
        one = {**env, "OMP_NUM_THREADS": "1"}
        bare_two = textwrap.dedent(
            f"""
            import subprocess, sys
            args = [{paths["queries"]!r}, {paths["corpus"]!r}]
            procs = [subprocess.Popen([sys.executable, "-c", {BARE!r}, *args, str(r), "2", {blocks!r}])
                     for r in range(2)]
            assert all(p.wait() == 0 for p in procs)
            """
        )
        rows["bare, 2 processes"] = timed([py, "-c", bare_two], one)
        torchrun = os.path.join(os.path.dirname(py), "torchrun")
        script = os.path.join(args.dir, "stream_worker.py")
        with open(script, "w") as handle:
            handle.write(STREAM)
        stream = [
            torchrun,
            "--nproc_per_node",
            "2",
            script,
            paths["queries"],
            paths["corpus"],
            paths["qrels"],
        ]
        rows["ours, 2 processes"] = timed([*stream, str(args.depth), blocks], one)
    cpu = platform.processor() or platform.machine()
    print(
        f"CPU: {_cpu_model()} ({cpu}), torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"kernel {torch.backends.cpu.get_cpu_capability()}"
    )
    print(
        f"corpus {args.rows:,} x {args.width} float16 ({os.path.getsize(paths['corpus']) / 1e9:.1f} GB), "
        f"{args.queries:,} queries, depth {args.depth}"
    )
    print(f"{'row':<22}{'wall s':>10}{'peak MiB':>10}{'/ bare':>9}  s per million docs")
    for name, row in rows.items():
        bare = rows["bare, 2 processes" if "2 processes" in name else "bare"]["seconds"]
        per_million = row["seconds"] / (args.rows / 1e6)
        ratio = row["seconds"] / bare
        print(f"{name:<22}{row['seconds']:>10.1f}{row['peak_mib']:>10.0f}{ratio:>9.2f}  {per_million:.2f}")
    print(rows["ours"]["stdout"].strip()[-1500:])


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
