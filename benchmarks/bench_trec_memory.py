"""A run of MS MARCO's size in trec_eval's memory: peak memory and wall time of evaluating a run of
``--queries`` x ``--docs`` lines (7,000 x 1,000: 7 million lines), each tool a whole process under
``/usr/bin/time -v``, side by side in one run of this script.

Rows: the trec_eval 10.0 binary (``--trec-eval`` or ``TREC_EVAL``; the reference of every ratio), then
``embedmetrics trec_eval``, ``embedmetrics report --format trec_eval`` and ``embedmetrics.trec.evaluate``,
then the peers that are installed: pytrec_eval (the files read into its dicts), ir_measures
(``calc_aggregate`` on its file readers) and ranx (``Run.from_file``, ``evaluate``). The commands that
print trec_eval's lines are checked to print trec_eval's bytes. Two measure sets: ``-m all_trec`` and
``-m ndcg_cut.10 -m map`` (the peers compute ``ndcg_cut.10`` and ``map`` in both).

    python benchmarks/bench_trec_memory.py --trec-eval /path/to/trec_eval [--queries 7000 --docs 1000]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from run_all import machine, machine_line  # noqa: E402

PY = sys.executable
PEERS = {
    "pytrec_eval": """
import pytrec_eval
def read(path, value):
    out = {}
    for line in open(path):
        f = line.split()
        out.setdefault(f[0], {})[f[2]] = value(f)
    return out
qrels = read(QRELS, lambda f: int(f[3]))
run = read(RUN, lambda f: float(f[4]))
res = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map"}).evaluate(run)
print(sum(v["map"] for v in res.values()) / len(res))
""",
    "ir_measures": """
import ir_measures
from ir_measures import nDCG, AP
qrels, run = ir_measures.read_trec_qrels(QRELS), ir_measures.read_trec_run(RUN)
print(ir_measures.calc_aggregate([nDCG@10, AP], qrels, run))
""",
    "ranx": """
from ranx import Qrels, Run, evaluate
print(evaluate(Qrels.from_file(QRELS, kind="trec"), Run.from_file(RUN, kind="trec"), ["ndcg@10", "map"]))
""",
}


def write_data(folder: Path, queries: int, docs: int, seed: int) -> tuple[Path, Path]:
    """MS MARCO's shape: one or two relevant documents a query out of 8M, most found somewhere in the
    run's ``docs``; a third of the queries' scores on a grid of tenths (ties); grouped by query."""
    rng = np.random.default_rng(seed)
    qrels, run = folder / "qrels", folder / "run"
    relevant = {}
    with qrels.open("w") as out:
        for q in range(queries):
            relevant[q] = rng.choice(8_000_000, 1 + int(rng.random() < 0.1), replace=False)
            out.writelines(f"{q} 0 D{d} 1\n" for d in relevant[q])
    with run.open("w") as out:
        for q in range(queries):
            picked = rng.choice(8_000_000, docs, replace=False)
            if rng.random() < 0.7:
                picked[rng.integers(0, docs)] = relevant[q][0]
            picked = np.unique(picked)
            rng.shuffle(picked)
            score = np.sort(rng.random(picked.size))[::-1] * 30
            score = np.round(score, 1) if q % 3 == 0 else score
            out.write(
                "".join(f"{q} Q0 D{d} {i + 1} {s:.4f} run\n" for i, (d, s) in enumerate(zip(picked, score)))
            )
    return qrels, run


def measured(command: list[str], stdout: Path) -> tuple[float, float]:
    """``(wall seconds, peak MiB)`` of one whole process, its stdout in ``stdout``."""
    with stdout.open("wb") as out:
        done = subprocess.run(
            ["/usr/bin/time", "-v", *command], stdout=out, stderr=subprocess.PIPE, check=True
        )
    text = done.stderr.decode()
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if wall is None or peak is None:
        sys.exit(text[-2000:])
    parts = [float(p) for p in wall.group(1).split(":")]
    seconds = sum(p * 60 ** (len(parts) - 1 - i) for i, p in enumerate(parts))
    return seconds, int(peak.group(1)) / 1024


def rows(
    trec_eval: str, qrels: Path, run: Path, folder: Path, measures: list[str]
) -> list[tuple[str, float, float]]:
    """Each tool's row on ``measures``; the trec_eval lines checked against the binary's."""
    flags = [w for m in measures for w in ("-m", m)]
    out: list[tuple[str, float, float]] = []
    reference = folder / "trec_eval.out"
    out.append(("trec_eval 10.0 binary", *measured([trec_eval, *flags, str(qrels), str(run)], reference)))
    ours = {
        "embedmetrics trec_eval": [PY, "-m", "embedmetrics", "trec_eval", *flags, str(qrels), str(run)],
        "embedmetrics report --format trec_eval": [
            PY, "-m", "embedmetrics", "report", "--run", str(run), "--qrels", str(qrels), *flags, "--format",
            "trec_eval",
        ],
    }  # fmt: skip
    for name, command in ours.items():
        target = folder / "ours.out"
        out.append((name, *measured(command, target)))
        if target.read_bytes() != reference.read_bytes():
            sys.exit(f"{name}: output differs from trec_eval's")
    script = (
        f"from embedmetrics.trec import evaluate; print(evaluate({str(qrels)!r}, {str(run)!r}, {measures!r}))"
    )
    out.append(("embedmetrics.trec.evaluate", *measured([PY, "-c", script], folder / "evaluate.out")))
    for name, code in PEERS.items():
        try:
            __import__(name)
        except ImportError:
            continue
        code = code.replace("QRELS", repr(str(qrels))).replace("RUN", repr(str(run)))
        out.append((f"{name} (ndcg_cut.10, map)", *measured([PY, "-c", code], folder / f"{name}.out")))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trec-eval", default=os.environ.get("TREC_EVAL"), help="trec_eval 10.0's binary")
    parser.add_argument("--queries", type=int, default=7000)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", help="where the files go (default: a temporary folder)")
    args = parser.parse_args()
    if not args.trec_eval:
        sys.exit("give trec_eval 10.0's binary: --trec-eval PATH or TREC_EVAL")
    folder = Path(args.dir or tempfile.mkdtemp(prefix="trec_memory_"))
    folder.mkdir(parents=True, exist_ok=True)
    qrels, run = write_data(folder, args.queries, args.docs, args.seed)
    lines = sum(1 for _ in run.open())
    print(machine_line(machine()))
    print(f"\n{lines:,} run lines ({args.queries:,} queries x {args.docs:,} documents)\n")
    print("| measures | tool | wall time | peak memory | time / trec_eval | memory / trec_eval |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for measures in (["all_trec"], ["ndcg_cut.10", "map"]):
        table = rows(args.trec_eval, qrels, run, folder, measures)
        base_time, base_peak = table[0][1], table[0][2]
        for name, wall, peak in table:
            ratios = f"{wall / base_time:.2f}x | {peak / base_peak:.2f}x"
            print(f"| {' '.join(measures)} | {name} | {wall:.2f} s | {peak:,.0f} MiB | {ratios} |")


if __name__ == "__main__":
    main()
