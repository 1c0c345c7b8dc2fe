"""Comparing systems: embedmetrics' randomization test against ranx's Fisher randomization test.

    python benchmarks/bench_comparison.py --ranx-python /path/to/python-with-ranx

ranx (numba, pandas, ...) is not a dependency: it runs in its own process, with the Python given by
``--ranx-python`` (an environment where ``import ranx`` works; ``pip install ranx``). Both sides get the
same per-query values (written to a ``.npy`` file) and time only the test, best of ``--repeat``, numba's
compilation excluded (one warm-up call). Reported:

1. one pair, 200 queries x 10,000 resamples: ranx's ``fisher_randomization_test`` vs ``paired_test``;
2. 10 systems (45 pairs) x 5 measures with ``compare`` (45 pairs tested at once per measure) vs the time
   of one ranx pair.
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
from embedmetrics.functional import compare, paired_test

_RANX = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    from ranx.statistical_tests import fisher_randomization_test
    a, b = np.load(sys.argv[1])
    n, repeat = int(sys.argv[2]), int(sys.argv[3])
    fisher_randomization_test(a, b, n_permutations=n, max_p=0.05, random_seed=42)  # numba compiles
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--ranx-python", default=None, help="a Python where `import ranx` works (default: this one, if so)"
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    base = rng.random(args.queries)
    a, b = (
        base + 0.02 + 0.1 * rng.standard_normal(args.queries),
        base + 0.1 * rng.standard_normal(args.queries),
    )
    python = args.ranx_python or (sys.executable if importlib.util.find_spec("ranx") else None)
    if python is None:
        print("ranx is not installed here and --ranx-python was not given: ours only")
    ranx = (
        _ranx_pair(python, a, b, args.resamples, args.repeat)
        if python
        else {"seconds": math.nan, "p": math.nan}
    )
    ta, tb = torch.tensor(a), torch.tensor(b)
    ours, t_pair = timed(
        lambda: paired_test(ta, tb, test="randomization", n_resamples=args.resamples), "cpu", args.repeat,
        warmup=True,
    )  # fmt: skip
    systems = {
        f"s{i}": torch.tensor(base + 0.005 * i + 0.1 * rng.standard_normal(args.queries)) for i in range(10)
    }
    measures = [{k: v + 0.01 * m for k, v in systems.items()} for m in range(5)]

    def all_pairs() -> list[object]:
        return [compare(v, test="randomization", n_resamples=args.resamples) for v in measures]

    _, t_all = timed(all_pairs, "cpu", args.repeat, warmup=True)
    head = f"torch {torch.__version__}, threads {torch.get_num_threads()}"
    print(f"{head}; {args.queries} queries, {args.resamples} resamples")
    ranx_ms, pair_ms = ranx["seconds"] * 1e3, t_pair * 1e3
    print(f"one pair:  ranx {ranx_ms:8.2f} ms (p={ranx['p']:.4f})   ours {pair_ms:8.2f} ms", end="")
    print(f" (p={float(ours.p_value):.4f})   {ranx['seconds'] / t_pair:6.1f}x")
    ratio = t_all / ranx["seconds"]
    print(f"10 systems x 45 pairs x 5 measures: ours {t_all * 1e3:8.2f} ms = {ratio:.2f} x one ranx pair")
    peer = "ranx 0.3 (own process)" if python else None
    peer_s = ranx["seconds"] if python else None
    size = f"{args.queries} queries x {args.resamples:,} resamples"
    emit(f"randomization test, one pair, {size}", t_pair, peer=peer, peer_value=peer_s)
    emit(
        f"randomization test, 45 pairs x 5 measures (vs one ranx pair), {size}",
        t_all,
        peer=peer,
        peer_value=peer_s,
    )


if __name__ == "__main__":
    main()
