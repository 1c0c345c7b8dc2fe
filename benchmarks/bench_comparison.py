"""Comparing systems: the randomization and bootstrap tests of ``compare`` against ranx's Fisher
randomization test and against the bare matrix products they are made of.

    python benchmarks/bench_comparison.py [--sizes 50000,100000,200000] [--big 1000000] [--queries 100000]
                                          [--ranx-python PY]

ranx (numba, pandas, ...) is not a dependency: it runs in its own process, with the Python given by
``--ranx-python`` (default: this one, where ``import ranx`` works; ``pip install ranx``). Both sides get
the same per-query values (a ``.npy`` file) and time only the test, best of ``--repeat``, numba's
compilation excluded (one warm-up call). Reported (10 systems, ``--resamples`` resamples):

1. one pair, ``--queries`` queries, and one pair of ``--small`` queries (200: a paper's topic set, where
   the small inputs' one product runs): ranx's ``fisher_randomization_test`` against ``paired_test``, and
   whether the two p-values agree within sampling error (5 standard deviations of two independent
   estimates, plus 2 / resamples for the ``+1`` of ours);
2. ``compare`` with the randomization test, 45 pairs, at every size of ``--sizes`` (and ``--big``, if
   not 0), each against the bare bound: the products of every tile of resamples with the systems'
   values alone, as ``resampling`` multiplies them (a reused tile: no random numbers, no unpacking),
   with the ratio and the time per query and resample, to see the cost grow linearly;
3. ``compare`` with the bootstrap test (ranx has none) at ``--queries``, against the same bound.

On a shared machine, ``--repeat 3`` or more (best of) and the ratios, ours over the bound measured
in the same process one after the other, are the figures to read.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import torch

from _timing import emit, timed
from embedmetrics._engine.comparison import resampling
from embedmetrics.functional import compare, paired_test

_RANX = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    from ranx.statistical_tests import fisher_randomization_test
    a, b = np.load(sys.argv[1])
    n, repeat = int(sys.argv[2]), int(sys.argv[3])
    fisher_randomization_test(a[:50], b[:50], n_permutations=10, max_p=0.05, random_seed=42)  # compiles
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        p, _ = fisher_randomization_test(a, b, n_permutations=n, max_p=0.05, random_seed=42)
        best = min(best, time.perf_counter() - start)
    print(json.dumps({"seconds": best, "p": float(p)}))
    """
)


def _ranx_pair(python: str, a: np.ndarray, b: np.ndarray, n: int, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pair.npy"
        np.save(path, np.stack([a, b]))
        out = subprocess.run(
            [python, "-c", _RANX, str(path), str(n), str(repeat)], capture_output=True, text=True, check=True
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _systems(queries: int, count: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Per-query values of ``count`` systems: a shared base, noise, and mean differences of about two
    standard errors between neighbours (moderate p-values)."""
    rng = np.random.default_rng(seed)
    base = rng.random(queries)
    step = 2 * 0.1 / math.sqrt(queries)
    return {f"s{i}": torch.tensor(base + i * step + 0.1 * rng.standard_normal(queries)) for i in range(count)}


def _bound(queries: int, count: int, resamples: int, repeat: int, test: str) -> float:
    """Seconds of the matrix products alone: every tile of every group of resamples (a reused tile: no
    random numbers, no unpacking or converting) times the ``(Q, S)`` values (``S + 1`` columns for sign
    flips: the sum of the signs), padded and split between threads as ``resampling.resampled_sums``
    multiplies them."""
    signs = test == "randomization"
    values = torch.rand(queries, count + signs, dtype=torch.float64)
    width = 8 * ((queries + 7) // 8) if signs else queries
    sizes = resampling.chunks(resamples, width, resampling._SIGN_CHUNK if signs else resampling._COUNT_CHUNK)
    least = resampling._SIGN_ROWS if signs else resampling._COUNT_ROWS
    parts = resampling.groups(sizes, resampling.group_rows(least, width // 8 if signs else width))

    def products() -> None:
        resampling.resampled_sums(
            lambda *_: None, lambda rows: torch.empty(rows, 0), lambda *_: None, values, sizes, parts, 0
        )

    return timed(products, "cpu", repeat, warmup=True)[1]


def _agree(p: float, q: float, resamples: int) -> bool:
    """Two estimates of one p-value within sampling error (5 standard deviations of their difference)."""
    mid = (p + q) / 2
    return abs(p - q) <= 5 * math.sqrt(2 * max(mid * (1 - mid), 1 / resamples) / resamples) + 2 / resamples


def _row(test: str, queries: int, systems: dict[str, torch.Tensor], args: argparse.Namespace, **peer):  # type: ignore[no-untyped-def]
    _, seconds = timed(lambda: compare(systems, test=test, n_resamples=args.resamples), "cpu", args.repeat)
    bound = _bound(queries, len(systems), args.resamples, args.repeat, test)
    size = f"{len(systems)} systems (45 pairs), {queries:,} queries x {args.resamples:,} resamples"
    per = 1e9 * seconds / (queries * args.resamples)
    print(f"{test}, {size}: ours {seconds:.2f} s ({per:.2f} ns per query and resample), ", end="")
    print(f"the bare products {bound:.2f} s, ratio {seconds / bound:.2f}")
    emit(f"{test} test, {size}", seconds, bound="the bare products", bound_value=bound, **peer)


def _pair_row(a: torch.Tensor, b: torch.Tensor, python: str | None, args: argparse.Namespace) -> float | None:
    """One pair: ``paired_test``'s randomization test against ranx's (best of ``--repeat`` each, ours
    warmed up); ranx's seconds, or ``None`` without ranx."""
    ours, t_pair = timed(
        lambda: paired_test(a, b, test="randomization", n_resamples=args.resamples), "cpu", args.repeat,
        warmup=True,
    )  # fmt: skip
    size = f"{a.numel():,} queries x {args.resamples:,} resamples"
    if python is None:  # no peer: the table's rows are the comparisons against the bound below
        print(f"one pair, {size}: ours {t_pair * 1e3:.2f} ms")
        return None
    p_ours = float(ours.p_value)
    ranx = _ranx_pair(python, a.numpy(), b.numpy(), args.resamples, args.repeat)
    equal = _agree(p_ours, ranx["p"], args.resamples)
    print(f"one pair, {size}: ranx {ranx['seconds'] * 1e3:.2f} ms (p={ranx['p']:.4f}), ", end="")
    print(f"ours {t_pair * 1e3:.2f} ms (p={p_ours:.4f}), {ranx['seconds'] / t_pair:.1f}x; same p: {equal}")
    emit(
        f"randomization test, one pair, {size}", t_pair, peer="ranx 0.3 (own process)",
        peer_value=ranx["seconds"], equal=equal,
    )  # fmt: skip
    return float(ranx["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--ranx-python", default=None, help="a Python where `import ranx` works (default: this one, if so)"
    )
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=200, help="queries of the small pair (0: none)")
    parser.add_argument("--sizes", default="50000,100000,200000", help="queries of the randomization rows")
    parser.add_argument("--big", type=int, default=0, help="queries of one more row, e.g. 1000000 (0: none)")
    parser.add_argument("--systems", type=int, default=10)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    spec = importlib.util.find_spec("ranx")  # a leftover folder (numba's cache) is a namespace: no origin
    python = args.ranx_python or (sys.executable if spec is not None and spec.origin else None)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    systems = _systems(args.queries, args.systems)
    if python is None:
        print("ranx is not installed here and --ranx-python was not given: ours only")
    if args.small:
        small = _systems(args.small, 2, seed=1)
        _pair_row(small["s0"], small["s1"], python, args)
    ranx_seconds = _pair_row(systems["s0"], systems["s1"], python, args)
    peer = {} if ranx_seconds is None else {"peer": "45 x one ranx pair", "peer_value": 45 * ranx_seconds}
    for queries in [int(q) for q in args.sizes.split(",") if q] + ([args.big] if args.big else []):
        rows = systems if queries == args.queries else _systems(queries, args.systems)
        _row("randomization", queries, rows, args, **(peer if queries == args.queries else {}))
    _row("bootstrap", args.queries, systems, args)


if __name__ == "__main__":
    main()
