"""``compare`` with the t-test finds the same significant pairs as ranx's ``compare`` on three TREC runs.

ranx needs numba and more than the test environment holds: its output on the runs of
``oracles/trec_runs.py`` is recorded in ``oracles/ranx_compare.json`` (by ``oracles/ranx_record.py``);
where ranx is importable, it is also run live.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest

from embedmetrics._io.trec import join_run, read_qrels, read_run
from embedmetrics._report.evaluate import per_query_trec
from embedmetrics.functional import compare
from oracles.trec_runs import SYSTEMS, write_runs

ORACLES = Path(__file__).resolve().parents[2] / "oracles"
#: ranx's names of the report's measures
MEASURES = {
    "ndcg@10": "ndcg@10",
    "map@100": "map",
    "mrr@100": "mrr",
    "precision@5": "precision@5",
    "recall@10": "recall@10",
    "hit_rate@5": "hit_rate@5",
    "r-precision": "r_precision",
}


def _ours(directory: Path) -> dict[str, object]:
    runs, qrels_path = write_runs(directory)
    qrels = read_qrels(str(qrels_path))
    values = [per_query_trec(join_run(read_run(str(p)), qrels).tensors(), [5, 10], "average") for p in runs]
    return {
        ranx_name: compare({n: v[ours] for n, v in zip(SYSTEMS, values)}, test="t", correction=None)
        for ranx_name, ours in MEASURES.items()
    }


def _check(recorded: dict, ours: dict) -> None:  # type: ignore[type-arg]
    significant_somewhere = 0
    for metric, result in ours.items():
        for a, b in result.pairs:
            theirs = recorded["p_values"][a][metric][b]
            i = result.pairs.index((a, b))
            assert float(result.p_value[i]) == pytest.approx(theirs, rel=1e-6, abs=1e-12), (metric, a, b)
            assert (float(result.p_value_corrected[i]) <= 0.05) == (theirs <= 0.05), (metric, a, b)
            significant_somewhere += theirs <= 0.05
        for name in SYSTEMS:
            assert float(result.means[result.names.index(name)]) == pytest.approx(
                recorded["scores"][name][metric], abs=1e-9
            )
    assert significant_somewhere > 3  # the runs differ: the check has pairs on both sides of alpha


def test_same_significant_pairs_as_the_recorded_ranx(tmp_path: Path) -> None:
    recorded = json.loads((ORACLES / "ranx_compare.json").read_text())
    _check(recorded, _ours(tmp_path))


@pytest.mark.skipif(
    importlib.util.find_spec("ranx") is None, reason="ranx is not installed (recorded output tested)"
)
def test_same_significant_pairs_as_ranx_live(tmp_path: Path) -> None:  # pragma: no cover - needs ranx
    import contextlib
    import io

    ours = _ours(tmp_path)
    loader = importlib.util.spec_from_file_location("ranx_record", ORACLES / "ranx_record.py")
    assert loader is not None
    assert loader.loader is not None
    record = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(record)
    buffer = io.StringIO()
    state = random.getstate(), np.random.get_state()  # noqa: NPY002 - ranx (or its imports) reseeds them
    try:
        with contextlib.redirect_stdout(buffer):
            record.main(str(tmp_path))
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])  # noqa: NPY002
    _check(json.loads(buffer.getvalue()), ours)
