"""A sweep of runs, trec_eval's way and ours: ``embedmetrics trec_eval -q -m all_trec QRELS RUN1 ... RUN20``
(one process for every run) against trec_eval 10.0 called once per run in a shell loop.

The script writes the data (``--runs`` runs of ``--queries`` queries x ``--docs`` documents, scores
rounded to four decimals so that ties occur, and qrels of ``--judged`` documents a query, grades -1..3,
seeded), checks that both commands print the same bytes, and prints the two commands, each a whole
process that writes to ``/dev/null``, to be timed side by side (alternately, several times, as in
``docs/benchmarks.md``). It times nothing itself. A second pair: one call on trec_eval's own test file
(``tests/trec_eval_suite/v10/test/results.test``), the start-up a single call costs.

    python benchmarks/bench_trec_eval_sweep.py --trec-eval /path/to/trec_eval   # or set TREC_EVAL
    python benchmarks/bench_trec_eval_sweep.py --dir /tmp/sweep --no-check      # the files and commands only
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "trec_eval_suite" / "v10" / "test"
MEASURES = ["-q", "-m", "all_trec"]


def write_qrels(path: Path, rng: np.random.Generator, queries: int, pool: int, judged: int) -> None:
    """``judged`` documents a query out of its ``pool``, grades -1..3 (mostly 0)."""
    grades = np.array([-1, 0, 0, 0, 0, 1, 1, 2, 3])
    with path.open("w", encoding="utf-8") as out:
        for q in range(queries):
            docs = np.sort(rng.choice(pool, size=judged, replace=False))
            for d, g in zip(docs, rng.choice(grades, size=judged)):
                out.write(f"{1000 + q} 0 doc{q}-{d} {g}\n")


def write_run(path: Path, rng: np.random.Generator, queries: int, pool: int, docs: int, tag: str) -> None:
    """``docs`` documents a query out of its ``pool``, ranked by scores with four decimals (ties)."""
    with path.open("w", encoding="utf-8") as out:
        for q in range(queries):
            picked = rng.choice(pool, size=docs, replace=False)
            score = np.sort(np.round(rng.random(docs), 4))[::-1]
            out.writelines(
                f"{1000 + q} Q0 doc{q}-{d} {rank} {s:.4f} {tag}\n"
                for rank, (d, s) in enumerate(zip(picked, score), start=1)
            )


def write_data(folder: Path, runs: int, queries: int, docs: int, judged: int, seed: int) -> list[Path]:
    """The qrels and the runs in ``folder``; returns ``[qrels, run1, ...]``."""
    rng = np.random.default_rng(seed)
    pool = docs + docs // 2
    folder.mkdir(parents=True, exist_ok=True)
    write_qrels(folder / "qrels", rng, queries, pool, judged)
    paths = [folder / "qrels"]
    for i in range(1, runs + 1):
        paths.append(folder / f"run{i:02d}")
        write_run(paths[-1], rng, queries, pool, docs, f"run{i:02d}")
    return paths


def commands(
    ours: str, trec_eval: str, qrels: Path, runs: list[Path], sink: str
) -> tuple[list[str], list[str]]:
    """Ours (one call over every run) and trec_eval's loop, each ``sh -c`` writing to ``sink``."""
    names = [str(r) for r in runs]
    a = f"exec {shlex.join([ours, 'trec_eval', *MEASURES, str(qrels), *names])} > {sink}"
    loop = f'{shlex.join([trec_eval, *MEASURES, str(qrels)])} "$f"'
    b = f"for f in {shlex.join(names)}; do {loop}; done > {sink}"
    return ["sh", "-c", a], ["sh", "-c", b]


def same_output(ours: str, trec_eval: str, qrels: Path, runs: list[Path], folder: Path) -> bool:
    """Run both commands once, their output into files of ``folder``; compare, say what differs."""
    outputs = []
    for name in ("ours", "trec_eval"):
        pair = commands(ours, trec_eval, qrels, runs, shlex.quote(str(folder / f"output.{name}")))
        done = subprocess.run(pair[name == "trec_eval"], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{name} exited {done.returncode}: {done.stderr.strip()[-500:]}")
            return False
        outputs.append((folder / f"output.{name}").read_text(encoding="utf-8").splitlines())
    got, want = outputs
    if got == want:
        print(f"outputs identical: {len(got):,} lines")
        return True
    first = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
    print(f"outputs differ: {len(got):,} lines against {len(want):,}, first at line {first + 1}:")
    print(f"  ours:      {got[first] if first < len(got) else '(none)'}")
    print(f"  trec_eval: {want[first] if first < len(want) else '(none)'}")
    return False


def show(title: str, a: list[str], b: list[str]) -> None:
    """The pair of commands, and the paired form (``--vs B -- A``) a side-by-side timer takes."""
    print(f"\n{title}")
    print(f"  A (ours):      {shlex.join(a)}")
    print(f"  B (trec_eval): {shlex.join(b)}")
    print(f"  paired:        --vs {shlex.quote(shlex.join(b))} -- {shlex.join(a)}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--docs", type=int, default=1000, help="documents a query in each run")
    parser.add_argument("--judged", type=int, default=100, help="judged documents a query")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (default: a new temp dir)")
    parser.add_argument("--trec-eval", default=os.environ.get("TREC_EVAL", "trec_eval"), help="10.0 binary")
    default_ours = shutil.which("embedmetrics") or str(Path(sys.executable).with_name("embedmetrics"))
    parser.add_argument("--embedmetrics", default=default_ours, help="our console script")
    parser.add_argument("--no-check", action="store_true", help="do not run the commands once to compare")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="trec_eval_sweep_"))
    qrels, *runs = write_data(folder, args.runs, args.queries, args.docs, args.judged, args.seed)
    print(f"{args.runs} runs of {args.queries} queries x {args.docs} documents and their qrels in {folder}")
    inputs = [(qrels, runs), (SUITE / "qrels.test", [SUITE / "results.test"])]
    ok = args.no_check or all(same_output(args.embedmetrics, args.trec_eval, *x, folder) for x in inputs)
    titles = [f"the sweep ({args.runs} runs, one call against a loop):", "one call on trec_eval's test file:"]
    for title, (q, r) in zip(titles, inputs):
        show(title, *commands(args.embedmetrics, args.trec_eval, q, r, "/dev/null"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
