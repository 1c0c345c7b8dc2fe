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

from embedmetrics.trec._comparison import TABLE_FORMATS, TREC_EVAL_TIES, RunComparison

__all__ = ["TABLE_FORMATS", "TREC_EVAL_TIES", "RunComparison", "compare_runs", "evaluate", "fuse"]


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
        ``{run_name: {measure: value}}``. trec_eval's text values (``runid``, ``relstring``, in
        ``official`` and ``all_trec``) are left out.

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
    from embedmetrics._io.errors import ReportInputError
    from embedmetrics._io.trec_inputs import qrels_of, run_source, runs_of, trec_eval_version
    from embedmetrics._report.trec_measures import evaluate_requests

    version = trec_eval_version(trec_eval)
    requests = resolve(measures, version)
    out: dict[Any, Any] = {}
    try:
        judged = qrels_of(qrels, version)
        for name, one in runs_of(run).items():
            evaluated = evaluate_requests(run_source(one, version), judged, requests, version=version,
                                          complete=bool(all_judged_queries))  # fmt: skip
            out[name] = evaluated.per_query if per_query else evaluated.summary
    except ReportInputError as err:  # a file that cannot be read, no query in common: a ValueError here
        raise ValueError(_python_words(str(err))) from None
    return out[None] if list(out) == [None] else out


def _python_words(message: str) -> str:
    """A message of the command line in the words of the Python call (its arguments, not its flags)."""
    words = (("-m: ", ""), ("--query-set intersection", 'query_set="intersection"'),
             ("--trec-eval 10", 'trec_eval="10"'), ("--trec-eval 9", 'trec_eval="9"'))  # fmt: skip
    for flag, argument in words:
        message = message.replace(flag, argument)
    return message


def compare_runs(
    qrels: Any,
    runs: Any,
    measures: Sequence[str],
    *,
    baseline: str | None = None,
    test: str = "t",
    correction: str | None = "holm",
    alpha: float = 0.05,
    seed: int = 0,
    n_resamples: int = 10_000,
    trec_eval: str | int = "10",
    query_set: str = "same",
) -> RunComparison:
    """Systems compared on ``measures``, query by query, with a paired test: the table of a paper.

    Each run is evaluated as ``evaluate`` evaluates it (per query, trec_eval's ranking); each measure's
    per-query values go through ``embedmetrics.functional.compare``: every pair of systems, or with
    ``baseline`` each system against the baseline alone, the p-values corrected over those pairs.

    Args:
        qrels: as for ``evaluate``.
        runs: ``{system_name: run}`` (paths, dicts of dicts or DataFrames), or a list of run files' paths
            (named by their file names).
        measures: any names ``evaluate`` takes (``"nDCG@10"``, ``"AP@100"``, ``"RR@10"``, ``"map"``);
            trec_eval's summary-only values (``runid``, ``num_q``, ``gm_map``) are left out.
        baseline: the system every other one is tested against (``None``: every pair).
        test: ``"t"``, ``"wilcoxon"``, ``"randomization"`` or ``"bootstrap"``.
        correction: ``"holm"``, ``"bonferroni"`` or ``None``.
        alpha: significance level, in ``(0, 1)``.
        seed: seed of the resamples (randomization and bootstrap tests).
        n_resamples: resamples of the randomization and bootstrap tests.
        trec_eval: ``"10"`` or ``"9"``, as for ``evaluate``.
        query_set: ``"same"`` (runs with different queries are refused) or ``"intersection"`` (the
            common queries are compared).

    Returns:
        A ``RunComparison``: ``comparisons[measure]`` (means, pairs, p-values), ``to_latex()``,
        ``to_markdown()``, ``to_csv()``, ``to_text()``, ``to_dict()``.

    Raises:
        ValueError: an unknown measure, fewer than 2 runs, runs with different queries, an unknown
            ``baseline``, and the errors of ``compare``.

    Example:
        >>> from embedmetrics.trec import compare_runs
        >>> qrels = {f"q{i}": {"d1": 1, "d2": 1} for i in range(6)}
        >>> runs = {
        ...     "bm25": {f"q{i}": {"d1": 0.1, "d2": 0.2, "d3": 0.9} for i in range(6)},
        ...     "dense": {f"q{i}": {"d1": 0.9, "d2": 0.8 if i else 0.1, "d3": 0.5} for i in range(6)},
        ... }
        >>> result = compare_runs(qrels, runs, ["AP", "P@1"], baseline="bm25")
        >>> result.comparisons["P@1"].means.tolist()
        [0.0, 1.0]
        >>> print(result.to_markdown().splitlines()[3])
        | b | dense | **0.9722**† | **1.0000**† |
    """
    from embedmetrics._io.errors import ReportInputError
    from embedmetrics._io.trec_inputs import trec_eval_version
    from embedmetrics._report.compare import compare_measures

    if query_set not in ("same", "intersection"):
        raise ValueError(f"Argument `query_set` must be 'same' or 'intersection', got {query_set!r}.")
    version = trec_eval_version(trec_eval)
    baseline = None if baseline is None else str(baseline)  # the runs are named by their names as text
    options = {"test": test, "correction": correction, "alpha": alpha, "seed": seed,
               "n_resamples": n_resamples, "baseline": baseline}  # fmt: skip
    try:
        names, comparisons, queries = compare_measures(
            qrels, runs, measures, options, version=version, query_set=query_set
        )
    except ReportInputError as err:
        raise ValueError(_python_words(str(err))) from None
    ties = TREC_EVAL_TIES if version == 10 else TREC_EVAL_TIES.replace("trec_eval", "trec_eval 9.0.8", 1)
    return RunComparison(
        names, comparisons, queries, test, correction, alpha, seed, n_resamples, baseline, ties
    )


def fuse(
    runs: Any,
    method: str,
    *,
    norm: str | None = "min-max",
    weights: Sequence[float] | None = None,
    depth: int | None = None,
    **params: float,
) -> dict[str, dict[str, float]]:
    """Rank fusion of ``runs`` into one run, as ranx's ``fuse`` defines the methods and normalisations.

    Each run's list is ranked as trec_eval ranks it (score descending, then docno descending); the fused
    list too, so tied scores never keep an order of arrival, and the fused scores are the same bits under
    any order of the input runs (a document's contributions are added in sorted order). A document a run
    lacks adds nothing from that run (Borda: the points of an unranked document), and a query a run lacks
    is an empty list there. On tie-free runs, the order and scores equal ranx's.

    Args:
        runs: two or more runs (paths, dicts of dicts or DataFrames, as for ``evaluate``), as a list or as
            ``{name: run}`` (for ``weights``, in that order).
        method: ``"rrf"`` (``k``, default 60), ``"isr"``, ``"bordafuse"`` (Borda), ``"sum"`` (CombSUM),
            ``"mnz"`` (CombMNZ), ``"max"``, ``"min"``, ``"anz"``, ``"wsum"`` (weighted sum, ``weights``);
            ``"CombSUM"``, ``"CombMNZ"``, ... are read as these.
        norm: the scores' normalisation per run and query before a score method: ``"min-max"`` (the
            default), ``"max"``, ``"sum"``, ``"zmuv"`` (``"z-score"``), ``"rank"`` or ``None``; the rank
            methods (``rrf``, ``isr``, ``bordafuse``) read ranks only.
        weights: one weight per run, for ``"wsum"``.
        depth: keep each query's first ``depth`` fused documents (``None``: all).
        **params: ``k`` for ``"rrf"``.

    Returns:
        ``{query_id: {doc_id: score}}``, each query's documents in rank order.

    Example:
        >>> from embedmetrics.trec import fuse
        >>> bm25 = {"q1": {"d1": 12.0, "d2": 9.5, "d3": 7.1}}
        >>> dense = {"q1": {"d2": 0.91, "d4": 0.88, "d1": 0.52}}
        >>> fused = fuse([bm25, dense], "rrf")
        >>> list(fused["q1"])
        ['d2', 'd1', 'd4', 'd3']
        >>> round(next(iter(fused["q1"].values())), 6)  # d2: 1 / (60 + 1) + 1 / (60 + 2)
        0.032522
    """
    from embedmetrics._engine.fusion.fuse import fuse_lists, shared_lists
    from embedmetrics._io.trec_inputs import run_of

    unknown = sorted(set(params) - {"k"})
    if unknown:
        raise TypeError(
            f"fuse() got parameters it does not take: {', '.join(unknown)} (it takes k, for rrf)."
        )
    if "k" in params and str(method).lower() != "rrf":
        raise ValueError(f"Argument `k` is read by method 'rrf' only, got it with {method!r}.")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise ValueError(f"Argument `depth` must be a positive whole number or None, got {depth!r}.")
    if isinstance(runs, (str, bytes)) or not hasattr(runs, "__iter__"):
        raise TypeError(
            f"Argument `runs` must be a list of runs or {{name: run}}, got {type(runs).__name__}."
        )
    given = list(runs.values()) if isinstance(runs, dict) and _several(runs) else list(runs)
    if len(given) < 2:
        raise ValueError(f"Argument `runs` must hold at least 2 runs, got {len(given)}.")
    read = [run_of(r, 10) for r in given]
    lists = shared_lists(
        [r.queries[r.qid] for r in read], [r.docs[r.docno] for r in read], [r.score for r in read]
    )
    query, doc, score = fuse_lists(lists, method, norm, weights, params.get("k", 60.0))
    out: dict[str, dict[str, float]] = {}
    for q, d, s in zip(lists.query_names[query].tolist(), lists.doc_names[doc].tolist(), score.tolist()):
        ranked = out.setdefault(q, {})
        if depth is None or len(ranked) < depth:
            ranked[d] = s
    return out


def _several(runs: dict[Any, Any]) -> bool:
    """Whether a dict is ``{name: run}`` (not one run's ``{query_id: {doc_id: score}}``)."""
    from embedmetrics._io.trec_inputs import runs_of

    return None not in runs_of(runs)
