"""The settings of dense retrieval, one ``Option`` each (see ``embedmetrics._engine.settings.options``).

``OPTIONS`` maps the metric (the registry's name) to its table; ``cli`` marks those that are also flags of
``embedmetrics report``. No torch is imported here.
"""

from __future__ import annotations

from typing import Any

from embedmetrics._engine.settings.arguments import check_bool, check_choice, check_positive_int, normalize_ks
from embedmetrics._engine.settings.options import (
    AGGREGATION,
    BLOCK_BYTES,
    TIES_OPTION,
    VALIDATE_ARGS,
    Option,
    choice,
    optional,
)
from embedmetrics._engine.settings.policies import SIMILARITIES

#: The measures of dense retrieval, in the order results list them.
DENSE_METRICS = ("ndcg", "recall", "precision", "mrr", "map", "hit_rate", "r_precision")


def check_cutoffs(name: str, value: Any) -> Any:
    """A positive int or a non-empty sequence of them (returned as given)."""
    normalize_ks(name, value, allow_none=False)
    return value


def check_metrics(name: str, value: Any) -> Any:
    """``None`` or a non-empty sequence of ``DENSE_METRICS``."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or len(value) == 0:
        raise ValueError(f"Argument `{name}` must be a non-empty sequence of {DENSE_METRICS}, got {value!r}.")
    for m in value:
        check_choice(name, m, DENSE_METRICS)
    return value


def check_qrels_option(name: str, value: Any) -> Any:
    """``None`` or ``(n, 3)`` integer judgements (checked and kept as an int64 tensor)."""
    if value is None:
        return None
    from embedmetrics._engine.dense.qrels import check_qrels  # torch: only when judgements are given

    return check_qrels(value)


OPTIONS: dict[str, tuple[Option, ...]] = {
    "DenseRetrieval": (
        Option(
            "qrels", "Tensor | None", None, "``(n, 3)`` integer judgements ``(query_id, doc_id, relevance)``",
            check_qrels_option,
        ),
        Option("k", "int | Sequence[int]", 10, "a cut-off or a sequence of them", check_cutoffs),
        Option(
            "metrics", "Sequence[str] | None", None, f"a subset of {DENSE_METRICS}; ``None``: all",
            check_metrics,
        ),
        Option(
            "depth", "int | None", None, "length of the retrieved list; ``None``: the largest ``k``",
            optional(check_positive_int), cli=True,
        ),
        Option(
            "similarity", "str", "cosine", "``cosine`` (rows divided by ``max(norm, 1e-12)``, as "
            "``torch.nn.functional.normalize`` and sentence-transformers do), ``dot`` or ``euclidean`` "
            "(minus the distance)",
            choice(*SIMILARITIES), choices=SIMILARITIES, cli=True,
        ),
        Option(
            "exclude_self", "bool", False, "drop the document whose id is the query's id from its ranking",
            check_bool,
        ),
        TIES_OPTION,
        AGGREGATION,
        Option("return_run", "bool", False, "also return the run: doc ids and scores", check_bool),
        BLOCK_BYTES,
        VALIDATE_ARGS,
    ),
}  # fmt: skip

#: The orders of tied documents a search can give: ascending ids (the lowest kept at a cut), or
#: descending ids (the highest kept and listed first, as trec_eval and pytrec_eval order tied scores).
TIE_ORDERS = ("ascending", "descending")


def _search_options() -> tuple[Option, ...]:
    """``dense_search``'s settings: dense retrieval's ``similarity``, ``exclude_self``, ``block_bytes`` and
    ``validate_args``, a required ``depth`` and the ``tie_order``."""
    shared = {o.name: o for o in OPTIONS["DenseRetrieval"]}
    return (
        Option(
            "depth", "int", 10, "documents listed per query (clipped to the corpus size)", check_positive_int
        ),
        shared["similarity"],
        shared["exclude_self"],
        Option(
            "tie_order",
            "str",
            "ascending",
            "order of documents of equal key: ``ascending`` ids (the lowest "
            "kept at the cut) or ``descending`` (the highest first, as trec_eval and pytrec_eval order ties)",
            choice(*TIE_ORDERS),
            choices=TIE_ORDERS,
        ),
        shared["block_bytes"],
        shared["validate_args"],
    )


OPTIONS["DenseSearch"] = _search_options()
