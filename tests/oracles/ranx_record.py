"""Record ranx's t-test comparison of the three runs of ``trec_runs.py`` (run where ranx is installed;
it writes what ``ranx_compare.json`` holds): ``python ranx_record.py DIR > out.json``."""

from __future__ import annotations

import json
import sys

NAMES = ("bm25", "dense", "hybrid")
METRICS = ["ndcg@10", "map@100", "mrr@100", "precision@5", "recall@10", "hit_rate@5", "r-precision"]


def main(directory: str) -> None:
    from ranx import Qrels, Run, compare  # type: ignore[import-not-found]  # only where ranx is installed

    qrels = Qrels.from_file(f"{directory}/qrels.txt", kind="trec")
    runs = [Run.from_file(f"{directory}/{n}.trec", kind="trec") for n in NAMES]
    for run, name in zip(runs, NAMES):
        run.name = name
    report = compare(qrels, runs, metrics=METRICS, stat_test="student", max_p=0.05, make_comparable=False)
    table = report.to_dict()
    out: dict[str, dict[str, object]] = {"scores": {}, "p_values": {}}
    for n in NAMES:
        out["scores"][n] = table[n]["scores"]
        out["p_values"][n] = {
            m: {o: table[n]["comparisons"][o][m] for o in table[n]["comparisons"]} for m in METRICS
        }
    print(json.dumps({"metrics": METRICS, **out}, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
