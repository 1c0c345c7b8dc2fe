"""TREC data in Python, from files to the paper: measures of runs against qrels (``evaluate``), systems
compared with significance tests and a table to paste (``compare_runs``), and rank fusion (``fuse``).

Qrels and runs are TREC files' paths, ir_measures' dicts of dicts (``{query_id: {doc_id: grade}}``,
``{query_id: {doc_id: score}}``) or pandas DataFrames (columns ``query_id, doc_id, relevance`` /
``score``); several runs are ``{run_name: run}``. Measures are named as trec_eval names them
(``ndcg_cut.10``, ``map``, ``P.5``, ``recip_rank``, ``official``) or as ir_measures and PyTerrier do
(``nDCG@10``, ``AP``, ``AP@100``, ``P@5``, ``P(rel=2)@5``, ``R@1000``, ``RR``, ``RR@10``, ``Judged@10``,
...): ``docs/trec-python.md`` lists them. ``evaluate`` and ``fuse`` import no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["evaluate"]


def evaluate(
    qrels: Any,
    run: Any,
    measures: Sequence[str],
    *,
    per_query: bool = False,
    trec_eval: str | int = "10",
    all_judged_queries: bool = False,
) -> dict[Any, Any]:
    """The ``measures`` of ``run`` against ``qrels``, as trec_eval computes them.

    The values are those of ``embedmetrics trec_eval``: trec_eval 10.0's by default, 9.0.8's (pytrec_eval's,
    and so ir_measures') with ``trec_eval="9"`` where the two differ. Each query is ranked as trec_eval ranks
    it (score descending, then docno descending). A query of the run without qrels is skipped; a judged query
    the run lacks is skipped too (as trec_eval 9.0.8 and pytrec_eval do), or, with
    ``all_judged_queries=True`` (trec_eval's ``-c``), averaged in with a score of 0, which is how
    ir_measures' ``calc_aggregate`` averages.

    Args:
        qrels: a TREC qrels file's path, ``{query_id: {doc_id: grade}}``, or a DataFrame with columns
            ``query_id``, ``doc_id``, ``relevance``.
        run: a TREC run file's path, ``{query_id: {doc_id: score}}``, a DataFrame with columns
            ``query_id``, ``doc_id``, ``score``, or several of them as ``{run_name: run}`` (the qrels are
            read once).
        measures: names as trec_eval's ``-m`` takes them (``"map"``, ``"ndcg_cut.10"``, ``"P.5,10"``,
            ``"official"``) or as ir_measures writes them (``"nDCG@10"``, ``"AP@100"``, ``"P(rel=2)@5"``,
            ``"RR@10"``, ``"Judged@10"``, ``"SetF(beta=0.5)"``). An unknown name raises ``ValueError``
            naming the nearest spellings in both vocabularies.
        per_query: each query's value (``{measure: {query_id: value}}``) instead of the summary.
        trec_eval: ``"10"`` (trec_eval 10.0, the default) or ``"9"`` (9.0.8, as pytrec_eval).
        all_judged_queries: average over every judged query, one the run lacks scoring 0 (``-c``).

    Returns:
        ``{measure: value}``, keyed by trec_eval's labels for trec_eval's names (``P_5``,
        ``ndcg_cut_10``) and by the name as given for ir_measures' names; for several runs,
        ``{run_name: {measure: value}}``.

    Example:
        >>> from embedmetrics.trec import evaluate
        >>> qrels = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}
        >>> run = {"q1": {"d1": 0.9, "d2": 0.5}, "q2": {"d1": 0.8, "d3": 0.1}}
        >>> evaluate(qrels, run, ["map", "P.1"])
        {'map': 0.75, 'P_1': 0.5}
        >>> evaluate(qrels, run, ["AP", "RR@1", "P(rel=2)@2"])
        {'AP': 0.75, 'RR@1': 0.5, 'P(rel=2)@2': 0.25}
        >>> evaluate(qrels, run, ["RR"], per_query=True)
        {'RR': {'q1': 1.0, 'q2': 0.5}}
    """
    from embedmetrics._engine.trec_eval.aliases import resolve
    from embedmetrics._io.trec_inputs import qrels_of, run_of, runs_of, trec_eval_version
    from embedmetrics._report.trec_measures import evaluate_requests

    version = trec_eval_version(trec_eval)
    requests = resolve(measures, version)
    judged = qrels_of(qrels, version)
    out: dict[Any, Any] = {}
    for name, one in runs_of(run).items():
        evaluated = evaluate_requests(run_of(one, version), judged, requests, version=version,
                                      complete=bool(all_judged_queries))  # fmt: skip
        out[name] = evaluated.per_query if per_query else evaluated.summary
    return out[None] if list(out) == [None] else out
