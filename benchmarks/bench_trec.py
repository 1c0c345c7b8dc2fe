"""``embedmetrics report --run --qrels`` end to end against pytrec_eval, on one TREC run and qrels.

Both run as fresh processes (imports, reading the files, evaluating, printing): the time a user
waits. Data: ``--queries`` queries x ``--depth`` retrieved documents (2,000,000 run lines by default),
10 graded judgements per query (half of them retrieved). The values are compared (nDCG@10, MAP, P@10,
recall@100, reciprocal rank, R-precision; ``--ties trec_eval`` so both order tied scores the same way).

    python benchmarks/bench_trec.py                 # 20,000 x 100
    python benchmarks/bench_trec.py --queries 2000  # quick

A second row times every measure of trec_eval's ``-m all_trec`` with ``-q`` (each query's values and the
summary, printed as trec_eval prints them): ``embedmetrics report --format trec_eval -q -m all_trec``
against a pytrec_eval script that evaluates ``all_trec`` and prints the same lines; every per-query line
both print must be equal. The bare bound: a fresh Python process that only reads the two files.

pytrec_eval is a benchmark-only peer (``pip install pytrec-eval-terrier``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from _timing import emit

PEER = r"""
import json, sys
import pytrec_eval
with open(sys.argv[1]) as f:
    run = pytrec_eval.parse_run(f)
with open(sys.argv[2]) as f:
    qrels = pytrec_eval.parse_qrel(f)
measures = {"ndcg_cut.10", "map", "P.10", "recall.100", "recip_rank", "Rprec"}
per_query = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
names = ["ndcg_cut_10", "map", "P_10", "recall_100", "recip_rank", "Rprec"]
print(json.dumps({m: sum(q[m] for q in per_query.values()) / len(per_query) for m in names}))
"""

#: pytrec_eval with every measure of ``-m all_trec``, printing each query's values as trec_eval -q does.
PEER_ALL_TREC = r"""
import sys
import pytrec_eval
with open(sys.argv[1]) as f:
    run = pytrec_eval.parse_run(f)
with open(sys.argv[2]) as f:
    qrels = pytrec_eval.parse_qrel(f)
per_query = pytrec_eval.RelevanceEvaluator(qrels, {"all_trec"}).evaluate(run)
lines = [f"{name:<22}\t{q}\t{value:6.4f}" for q in sorted(per_query) for name, value in per_query[q].items()]
sys.stdout.write("\n".join(lines) + "\n")
"""

#: The bare bound: reading both files and nothing else.
READ_ONLY = "import sys; [open(p, 'rb').read() for p in sys.argv[1:]]"

#: our report key -> pytrec_eval measure
PAIRS = {
    "ndcg@10": "ndcg_cut_10",
    "map": "map",
    "precision@10": "P_10",
    "recall@100": "recall_100",
    "mrr": "recip_rank",
    "r_precision": "Rprec",
}


def write_files(folder: str, n_queries: int, depth: int, seed: int = 0) -> tuple[str, str]:
    rng = np.random.default_rng(seed)
    n_docs = 50 * n_queries
    run_path, qrels_path = os.path.join(folder, "run.txt"), os.path.join(folder, "qrels.txt")
    docs = rng.integers(0, n_docs, size=(n_queries, depth + 5))
    scores = np.round(rng.random((n_queries, depth)) * 100, 4)
    with open(run_path, "w") as run, open(qrels_path, "w") as qrels:
        for q in range(n_queries):
            row = np.unique(docs[q])[:depth]
            order = np.argsort(-scores[q, : row.size], kind="stable")
            run.writelines(
                f"q{q} Q0 d{row[i]} {r + 1} {scores[q, i]:.4f} bench\n" for r, i in enumerate(order)
            )
            judged = np.concatenate([row[:5], rng.integers(0, n_docs, size=5) + n_docs])
            grades = rng.integers(0, 4, size=10)
            qrels.writelines(f"q{q} 0 d{d} {g}\n" for d, g in zip(judged, grades))
    return run_path, qrels_path


def timed(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, done.stdout


def per_query_lines(text: str) -> dict[tuple[str, str], str]:
    """``(measure, query) -> printed value`` of trec_eval -q lines, the summary (``all``) left out."""
    rows = (line.split("\t") for line in text.splitlines())
    return {(m.strip(), q): v.strip() for m, q, v in rows if q != "all"}


def all_trec_row(run: str, qrels: str, repeat: int, lines: int) -> None:
    """``-m all_trec -q`` as trec_eval prints it: ours, pytrec_eval's and the bare bound, fresh processes."""
    ours_cmd = [sys.executable, "-m", "embedmetrics", "report", "--run", run, "--qrels", qrels,
                "--format", "trec_eval", "-q", "-m", "all_trec"]  # fmt: skip
    peer_cmd = [sys.executable, "-c", PEER_ALL_TREC, run, qrels]
    bound_cmd = [sys.executable, "-c", READ_ONLY, run, qrels]
    times: dict[str, list[float]] = {"ours": [], "peer": [], "bound": []}
    outputs = {}
    for _ in range(repeat):  # interleaved, so all see the same machine state
        for side, cmd in (("ours", ours_cmd), ("peer", peer_cmd), ("bound", bound_cmd)):
            t, outputs[side] = timed(cmd)
            times[side].append(t)
    ours, peer = per_query_lines(outputs["ours"]), per_query_lines(outputs["peer"])
    # pytrec_eval also gives gm_map, gm_bpref (their logarithms) and relstring (as 0) per query
    shared = {key for key in set(ours) & set(peer) if key[0] != "relstring"}
    differ = sum(float(ours[key]) != float(peer[key]) for key in shared)  # (counts print as integers)
    best = {side: min(t) for side, t in times.items()}
    print(f"report --format trec_eval -q -m all_trec, {lines:,} run lines, best of {repeat}")
    for side, label in (
        ("ours", "embedmetrics report"),
        ("peer", "pytrec_eval"),
        ("bound", "read the files"),
    ):
        print(f"  {label:<20}: {best[side]:6.2f} s   (all: {', '.join(f'{t:.2f}' for t in times[side])})")
    print(f"  ours / peer         : {best['ours'] / best['peer']:6.2f}x")
    print(f"  values: {len(shared):,} per-query lines compared, {differ} differ")
    emit(
        f"report -m all_trec -q (trec_eval's lines), {lines:,} run lines, fresh process", best["ours"],
        peer="pytrec_eval all_trec, printing the same lines, fresh process", peer_value=best["peer"],
        bound="a fresh Python process reading the two files", bound_value=best["bound"],
        equal=differ == 0 and len(shared) > 0,
    )  # fmt: skip
    if differ or not shared:
        raise SystemExit(f"all_trec: {differ} of {len(shared)} per-query lines differ from pytrec_eval's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="best of N for each side")
    parser.add_argument("--skip-all-trec", action="store_true", help="only the six-measure row")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        run, qrels = write_files(folder, args.queries, args.depth)
        out = os.path.join(folder, "ours.json")
        ours_cmd = [
            sys.executable, "-m", "embedmetrics", "report", "--run", run, "--qrels", qrels,
            "--k", "10,100", "--ties", "trec_eval", "--json", out,
        ]  # fmt: skip
        peer_cmd = [sys.executable, "-c", PEER, run, qrels]
        ours_t, peer_t = [], []
        peer_out = ""
        for _ in range(args.repeat):  # interleaved, so both see the same machine state
            ours_t.append(timed(ours_cmd)[0])
            t, peer_out = timed(peer_cmd)
            peer_t.append(t)
        with open(out) as f:
            ours = json.load(f)["trec"]
        peer = json.loads(peer_out)
        if not args.skip_all_trec:
            all_trec_row(run, qrels, args.repeat, args.queries * args.depth)
    lines = args.queries * args.depth
    shape = f"{args.queries:,} queries x {args.depth}"
    print(f"report --run --qrels, {lines:,} run lines ({shape}), best of {args.repeat}")
    print(f"  embedmetrics report : {min(ours_t):6.2f} s   (all: {', '.join(f'{t:.2f}' for t in ours_t)})")
    print(f"  pytrec_eval         : {min(peer_t):6.2f} s   (all: {', '.join(f'{t:.2f}' for t in peer_t)})")
    print(f"  ours / peer         : {min(ours_t) / min(peer_t):6.2f}x")
    worst = max(abs(ours[key] - peer[name]) for key, name in PAIRS.items())
    print(f"  values: largest difference {worst:.2e} over {', '.join(PAIRS)}")
    emit(
        f"report --run --qrels, {lines:,} run lines, 6 measures, fresh process", min(ours_t),
        peer="pytrec_eval (its own line reader), fresh process", peer_value=min(peer_t), equal=worst <= 1e-6,
    )  # fmt: skip
    if worst > 1e-6:
        raise SystemExit(f"values differ: ours {ours} vs pytrec_eval {peer}")


if __name__ == "__main__":
    main()
