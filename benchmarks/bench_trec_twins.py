"""The functional twins of trec_eval's rank measures (``retrieval_bpref``,
``retrieval_r_precision_multiple``, ``retrieval_set_f``, ``retrieval_interpolated_precision``,
``retrieval_infap``) against pytrec_eval on the same queries, in process: ours from flat tensors
(``indexes``), pytrec_eval from its run and qrels dictionaries (built before the clock starts; its
evaluator's construction is timed, as a user pays it). Per-query values must agree to 1e-9 (tie-free
scores). The bare bound: one row-wise sort of the ``(queries, documents)`` scores, the least any rank
measure does.

The ``ties=average`` rows time the exact expectation over tie orders of interpolated precision and infAP
on scores with ``--levels`` distinct values per query (tie blocks of ``docs / levels`` documents on
average), against pytrec_eval scoring one order of the same run (trec_eval breaks ties by docno: no peer
computes the expectation) and the same bound; ``equal`` checks that the values lie between our
pessimistic and optimistic ones.

    python benchmarks/bench_trec_twins.py                   # 20,000 queries x 100 documents
    python benchmarks/bench_trec_twins.py --queries 1000    # a quick check
    python benchmarks/bench_trec_twins.py --queries 200 --repeat 1 --levels 5   # a smoke run

pytrec_eval is a benchmark-only peer (``pip install pytrec-eval-terrier``).
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

import embedmetrics.functional as F
from _timing import emit, timed

#: (row name, pytrec_eval measure, its per-query key, our functional, its keyword arguments)
MEASURES: list[tuple[str, str, str, Any, dict[str, Any]]] = [
    ("bpref", "bpref", "bpref", F.retrieval_bpref, {"ignore_index": -1}),
    (
        "Rprec_mult.1.5",
        "Rprec_mult.1.5",
        "Rprec_mult_1.50",
        F.retrieval_r_precision_multiple,
        {"multiple": 1.5},
    ),
    ("set_F.0.5", "set_F.0.5", "set_F", F.retrieval_set_f, {"beta": 0.5}),
    (
        "iprec_at_recall_0.50",
        "iprec_at_recall",
        "iprec_at_recall_0.50",
        F.retrieval_interpolated_precision,
        {"recall_level": 0.5},
    ),
    ("infAP", "infAP", "infAP", F.retrieval_infap, {}),
]


def make_data(queries: int, docs: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tie-free scores; targets 1 (relevant), 0 (judged non-relevant), -1 (not judged)."""
    g = torch.Generator().manual_seed(seed)
    n = queries * docs
    preds = (torch.randperm(n, generator=g).double() + 1) / n
    target = torch.randint(0, 2, (n,), generator=g)
    target = torch.where(torch.rand(n, generator=g) < 0.3, -1, target)
    target.view(queries, docs)[:, 0] = 1  # every query has a relevant document
    return preds, target, torch.arange(queries).repeat_interleave(docs)


def tied(preds: torch.Tensor, levels: int) -> torch.Tensor:
    """The scores (uniform in ``(0, 1]``) cut to ``levels`` values: ties in every query."""
    return torch.ceil(preds * levels) / levels


def average_rows(args: argparse.Namespace, bound: float) -> None:
    """``ties="average"`` of interpolated precision and infAP on tied scores (module docstring)."""
    import pytrec_eval

    preds, target, indexes = make_data(args.queries, args.docs, seed=1)
    preds = tied(preds, args.levels)
    run, qrels = trec_dicts(preds, target, args.queries, args.docs)
    rows = (
        (
            "iprec_at_recall_0.50",
            "iprec_at_recall",
            F.retrieval_interpolated_precision,
            {"recall_level": 0.5},
        ),
        ("infAP", "infAP", F.retrieval_infap, {}),
    )
    for name, measure, fn, kwargs in rows:
        relevance = target if name == "infAP" else target.clamp_min(0)

        def ours_call(
            ties: str = "average", fn: Any = fn, relevance: torch.Tensor = relevance, kwargs: Any = kwargs
        ) -> torch.Tensor:
            out: torch.Tensor = fn(preds, relevance, indexes=indexes, aggregation="none", ties=ties, **kwargs)
            return out

        ours, t_ours = timed(ours_call, "cpu", args.repeat, warmup=True)
        low, high = ours_call("pessimistic"), ours_call("optimistic")
        between = bool(((low <= ours + 1e-12) & (ours <= high + 1e-12)).all()) and bool((low < high).any())

        def peer(measure: str = measure) -> Any:
            return pytrec_eval.RelevanceEvaluator(qrels, {measure}).evaluate(run)

        _, t_peer = timed(peer, "cpu", args.repeat)
        size = f"{args.queries} x {args.docs}, {args.levels} score levels"
        emit(
            f"{name} twin, ties=average, {size}", t_ours, peer="pytrec_eval (one order)", peer_value=t_peer,
            bound="row sort", bound_value=bound, equal=between,
        )  # fmt: skip


def trec_dicts(preds: torch.Tensor, target: torch.Tensor, queries: int, docs: int) -> tuple[dict, dict]:
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for q, (p_row, t_row) in enumerate(
        zip(preds.view(queries, docs).tolist(), target.view(queries, docs).tolist())
    ):
        name = f"q{q:07d}"
        run[name] = {f"d{j}": s for j, s in enumerate(p_row)}
        qrels[name] = {f"d{j}": t for j, t in enumerate(t_row) if t >= 0}
    return run, qrels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--levels", type=int, default=10, help="distinct scores per query (ties=average)")
    args = parser.parse_args()
    import pytrec_eval

    preds, target, indexes = make_data(args.queries, args.docs)
    run, qrels = trec_dicts(preds, target, args.queries, args.docs)
    _, bound = timed(lambda: torch.sort(preds.view(args.queries, -1), dim=1), "cpu", args.repeat, warmup=True)
    for name, measure, key, fn, kwargs in MEASURES:
        relevance = target if name in ("bpref", "infAP") else target.clamp_min(0)

        def ours_call(
            fn: Any = fn, relevance: torch.Tensor = relevance, kwargs: Any = kwargs
        ) -> torch.Tensor:
            out: torch.Tensor = fn(preds, relevance, indexes=indexes, aggregation="none", **kwargs)
            return out

        ours, t_ours = timed(ours_call, "cpu", args.repeat, warmup=True)

        def peer(measure: str = measure) -> dict[str, dict[str, float]]:
            result: dict[str, dict[str, float]] = pytrec_eval.RelevanceEvaluator(qrels, {measure}).evaluate(
                run
            )
            return result

        theirs, t_peer = timed(peer, "cpu", args.repeat)
        expected = torch.tensor([theirs[q][key] for q in sorted(theirs)], dtype=torch.float64)
        equal = bool(torch.allclose(ours, expected, atol=1e-9, rtol=0))
        size = f"{args.queries} x {args.docs}"
        emit(
            f"{name} twin, {size}", t_ours, peer="pytrec_eval", peer_value=t_peer,
            bound="row sort", bound_value=bound, equal=equal,
        )  # fmt: skip
    average_rows(args, bound)


if __name__ == "__main__":
    main()
