"""``embedmetrics report``: load the inputs, evaluate each family, print, write JSON and plots."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from embedmetrics._io.arrays import as_embeddings, check_labels, encode_labels, load_array
from embedmetrics._io.corpus_files import default_block_rows
from embedmetrics._io.errors import ReportInputError
from embedmetrics._io.progress import progress_bar, show_progress
from embedmetrics._io.trec import JoinedRun
from embedmetrics._report import evaluate, output, plots
from embedmetrics._report.checkpoint import Checkpoint, open_checkpoint, stream_settings
from embedmetrics._report.dense import DenseInputs, load_dense, stream_corpus, write_run
from embedmetrics._report.preflight import join_as_asked, preflight, read_and_join

#: The cut-offs of the TREC curve plot go at least this far.
CURVE_MIN_K = 20


@dataclass
class Inputs:
    """Everything one report evaluates (each family optional)."""

    source: str
    embeddings: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, bool, list[str]] | None = None
    views: tuple[torch.Tensor, torch.Tensor] | None = None
    trec: JoinedRun | None = None
    dense: DenseInputs | None = None
    info: dict[str, Any] = field(default_factory=dict)
    views_are: str = "--view1 and --view2 (row i of each: one item)"


def _load_embedding_family(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    labels_key = args.labels_key if args.labels_key is not None else args.key
    query = as_embeddings(load_array(args.embeddings, key=args.key, flag="--embeddings"), args.embeddings)
    q_labels = check_labels(
        load_array(args.labels, key=labels_key, option="--labels-key", flag="--labels"),
        args.labels,
        query.shape[0],
        args.embeddings,
    )
    if args.reference is None:
        (ql,), names = encode_labels(q_labels)
        info = {"n_query": int(query.shape[0]), "n_reference": int(query.shape[0]), "same_source": True}
        return (query, ql, query, ql, True, names), info
    reference = as_embeddings(load_array(args.reference, key=args.key, flag="--reference"), args.reference)
    if reference.shape[1] != query.shape[1]:
        raise ReportInputError(
            f"{args.reference}: reference embeddings have {reference.shape[1]} features, the queries in "
            f"{args.embeddings} have {query.shape[1]}."
        )
    r_labels = check_labels(
        load_array(args.reference_labels, key=labels_key, option="--labels-key", flag="--reference-labels"),
        args.reference_labels,
        reference.shape[0],
        args.reference,
    )
    (ql, rl), names = encode_labels(q_labels, r_labels)
    dtype = torch.promote_types(query.dtype, reference.dtype)
    info = {"n_query": int(query.shape[0]), "n_reference": int(reference.shape[0]), "same_source": False}
    return (query.to(dtype), ql, reference.to(dtype), rl, False, names), info


def load_inputs(args: argparse.Namespace, trec: JoinedRun | None = None) -> Inputs:
    """Read every file the arguments name (the TREC files unless ``trec`` holds them already), or build
    the built-in example when none is named."""
    if args.checkpoint is not None and args.queries is None:
        raise ReportInputError("--checkpoint saves the scan of --queries/--corpus; give those too.")
    if args.embeddings is None and args.view1 is None and args.run is None and args.queries is None:
        from embedmetrics._report.default import NOISE, QUERY_STEP, RUN_DEPTH, VIEWS_ARE, load_default

        data = load_default()
        inputs = Inputs(source="built-in example: scikit-learn digits (1797 images, 10 classes)")
        inputs.embeddings = (
            data.embeddings,
            data.labels,
            data.embeddings,
            data.labels,
            True,
            data.class_names,
        )
        inputs.views = (data.view1, data.view2)
        inputs.views_are = VIEWS_ARE
        inputs.trec = join_as_asked(data.run, data.qrels, args)
        n = int(data.embeddings.shape[0])
        inputs.info = {
            "source": "digits",
            "embeddings": {"n_query": n, "n_reference": n, "same_source": True},
            "views": {"n": n, "noise_std": NOISE},
            "trec": {"run_depth": RUN_DEPTH, "query_step": QUERY_STEP},
        }
        return inputs
    inputs = Inputs(source="files")
    if args.embeddings is not None:
        inputs.embeddings, inputs.info["embeddings"] = _load_embedding_family(args)
    if args.view1 is not None:
        z1 = as_embeddings(load_array(args.view1, key=args.key, flag="--view1"), args.view1)
        z2 = as_embeddings(load_array(args.view2, key=args.key, flag="--view2"), args.view2)
        if z1.shape != z2.shape:
            raise ReportInputError(
                f"{args.view2}: shape {tuple(z2.shape)} differs from {args.view1}: {tuple(z1.shape)}; "
                "the two views must pair row by row."
            )
        dtype = torch.promote_types(z1.dtype, z2.dtype)
        inputs.views = (z1.to(dtype), z2.to(dtype))
        inputs.info["views"] = {"n": int(z1.shape[0])}
    if args.run is not None:
        inputs.trec = trec if trec is not None else read_and_join(args)
        inputs.info["trec"] = {}
    if args.queries is not None:
        inputs.dense = load_dense(args.queries, args.corpus, args.qrels, args.key)
        inputs.info["dense"] = {
            "n_queries": int(inputs.dense.queries.shape[0]),
            "n_corpus": inputs.dense.corpus.rows,
        }
    inputs.info["source"] = "files"
    return inputs


def _library_error(family: str, err: Exception) -> ReportInputError:
    message = " ".join(str(err).split())
    return ReportInputError(f"{family}: {message}")


@dataclass
class Report:
    """What the families add up to: numbers per family, lines under the table, JSON info, plots."""

    results: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    default_k: bool = False  # --k not given: the default cut-offs, clipped to small data


def _family_ks(
    inputs: Inputs, report: Report, family: str, ks: list[int], limit: tuple[int, str], clip: tuple[int, str]
) -> list[int]:
    """The cut-offs of one family: the default ones clipped to ``clip`` (its value and why, in a note),
    given ones as they are, refused above ``limit`` (its value and what it counts)."""
    if report.default_k and max(ks) > clip[0] >= 1:
        ks = evaluate.clip_default_ks(ks, clip[0])
        inputs.info[family]["k"] = ks
        report.notes.append(output.clipped_k_note(family, ks, clip[1]))
    if max(ks) > limit[0]:
        raise ReportInputError(f"--k {max(ks)} asks for more neighbours than {limit[1]}; lower --k.")
    return ks


def _embeddings_family(inputs: Inputs, ks: list[int], figures: plots.Figures | None, report: Report) -> None:
    assert inputs.embeddings is not None
    query, ql, reference, rl, same, names = inputs.embeddings
    n_available = reference.shape[0] - (1 if same else 0)
    limit = (n_available, f"the {n_available} reference embeddings available to each query")
    ks = _family_ks(inputs, report, "embeddings", ks, limit, limit)
    try:
        emb = evaluate.evaluate_embeddings(
            query, ql, reference, rl, same_source=same, ks=ks, n_classes=len(names)
        )
    except (ValueError, TypeError) as err:
        raise _library_error("embeddings", err) from None
    report.results["embeddings"] = emb.metrics
    vote = output.knn_vote_note(evaluate.knn_vote_k(n_available), evaluate.KNN_VOTE_K, len(names))
    if vote:
        report.notes.append(vote)
    relevant = torch.bincount(rl, minlength=len(names))[ql] - (1 if same else 0)
    lone = int((relevant <= 0).sum())
    inputs.info["embeddings"]["lone_queries"] = lone
    if lone:
        report.notes.append(
            f"embeddings: {lone} of {int(ql.numel())} queries have no other reference of their class "
            "and are left out of the kNN metrics"
        )
    shown = emb.per_class_count > 0
    inputs.info["embeddings"]["precision_at_1_per_class"] = {
        name: float(v) for name, v, keep in zip(names, emb.per_class_precision_at_1, shown) if keep
    }
    if figures is not None:
        report.written.append(
            plots.plot_per_class(
                figures,
                names,
                emb.per_class_precision_at_1,
                emb.per_class_count,
                emb.metrics["precision_at_1"],
            )
        )
        pos, neg = plots.label_pair_similarities(query, ql, reference, rl, same_source=same)
        title = "Embeddings: same-class vs different-class pairs"
        report.written.append(plots.plot_similarities(figures, "embeddings_pair_similarity", title, pos, neg))


def _views_family(inputs: Inputs, ks: list[int], figures: plots.Figures | None, report: Report) -> None:
    assert inputs.views is not None
    z1, z2 = inputs.views
    n = int(z1.shape[0])
    limit = (
        n - 1,
        f"the {n - 1} rows of the other view besides a row's pair (its candidates are the other view's {n} "
        f"rows, the pair included: k = {n} scores 1 whatever the embeddings)",
    )
    clip = (n // 2, f"half the {n} rows of a view (unrelated views score k/{n} on average)")
    if n > 1:  # one row: the library's check says why
        ks = _family_ks(inputs, report, "views", ks, limit, clip)
    report.notes.append(output.views_note(inputs.views_are, n))
    try:
        report.results["views"] = evaluate.evaluate_views(z1, z2, ks)
    except (ValueError, TypeError) as err:
        raise _library_error("views", err) from None
    if figures is not None:
        pos, neg = plots.view_pair_similarities(z1, z2)
        title = "Two views: matched vs other pairs"
        report.written.append(plots.plot_similarities(figures, "views_pair_similarity", title, pos, neg))


def _trec_family(
    inputs: Inputs, ks: list[int], ties: str, figures: plots.Figures | None, report: Report, version: int = 10
) -> None:
    assert inputs.trec is not None
    data = inputs.trec.tensors()
    # the curve goes to the largest k, but never past the deepest ranking of the run (k beyond it
    # repeats the last value): --k 100000000 must not evaluate 1e8 cut-offs
    depth = int(torch.bincount(data.indexes[data.retrieved]).max()) if bool(data.retrieved.any()) else 1
    curve_k = min(max(CURVE_MIN_K, *ks), depth) if figures is not None else 0
    try:
        trec = evaluate.evaluate_trec(data, ks, evaluate.measure_ties(ties), curve_k)
    except (ValueError, TypeError) as err:
        raise _library_error("trec", err) from None
    report.results["trec"] = trec.metrics
    if figures is not None:
        report.written.append(
            plots.plot_curves(
                figures,
                "trec_hit_rate_recall_at_k",
                "Run: hit rate and recall at k",
                trec.curve_ks,
                trec.curve_hit_rate,
                trec.curve_recall,
            )
        )
    n_eval = len(data.query_ids)
    skipped_run, skipped_qrels = data.n_run_queries - n_eval, data.n_qrels_queries - n_eval
    inputs.info.setdefault("trec", {}).update(
        {
            "queries_evaluated": n_eval,
            "run_queries_without_qrels": skipped_run,
            "qrels_queries_not_in_run": skipped_qrels,
            "relevant_not_retrieved": int((~data.retrieved).sum()),
            "ties": ties,
            **({"trec_eval": version} if ties == "trec_eval" else {}),
        }
    )
    order = f" (trec_eval {'9.0.8' if version == 9 else '10.0'}'s order)" if ties == "trec_eval" else ""
    report.notes.append(
        f"trec: {n_eval} queries evaluated; skipped (as trec_eval 9 does; 10.0 stops at a judged query "
        f"absent from the run, `embedmetrics trec_eval` too) {skipped_run} run queries without qrels and "
        f"{skipped_qrels} judged queries absent from the run; ties: {ties}{order}"
    )
    missed = inputs.info["trec"]["relevant_not_retrieved"]
    if missed and n_eval:
        relevant = int((data.target > 0).sum()) / n_eval
        per_query = torch.bincount(data.indexes[data.target > 0], minlength=n_eval)
        fewest = int(per_query[per_query > 0].min()) if bool((per_query > 0).any()) else 0
        report.notes.append(output.run_depth_note(depth, relevant, missed, min(ks), fewest))


def _dense_family(inputs: Inputs, args: argparse.Namespace, ks: list[int], report: Report) -> None:
    assert inputs.dense is not None
    data = inputs.dense
    # a given --k may reach past the corpus (trec_eval's @k divide by k); the default stays below its size,
    # where every document is retrieved and recall and hit rate are 1 whatever the embeddings
    n = data.corpus.rows
    clip = (n - 1, f"{n - 1}, below the {n} documents of the corpus (at k = {n} a query retrieves them all)")
    ks = _family_ks(inputs, report, "dense", ks, (max(ks), ""), clip)
    if args.depth is not None and args.depth < max(ks):
        raise ReportInputError(
            f"--depth {args.depth} retrieves fewer documents than the largest --k {max(ks)}."
        )
    depth = max(ks) if args.depth is None else args.depth
    curve_k = min(max(CURVE_MIN_K, *ks), depth) if args.plot is not None else 0
    try:
        fixed = evaluate.dense_stream_queries(
            data, ks, depth=depth, similarity=args.similarity, ties=args.ties, curve_k=curve_k,
            return_run=args.save_run is not None,
        )  # fmt: skip
        block_rows = _block_rows(args, data.corpus.width)
        checkpoint = _checkpoint(args, data, fixed)
        lists = stream_corpus(data, fixed, block_rows=block_rows, checkpoint=checkpoint, bar=_rows_bar(args))
        result = evaluate.evaluate_dense_stream(fixed, lists, ks, curve_k)
    except (ValueError, TypeError) as err:
        raise _library_error("dense", err) from None
    report.results["dense"] = result.metrics
    if args.save_run is not None:
        docs = data.doc_names(result.run[0])
        write_run(args.save_run, result.query_ids, result.run, data.qrels.queries, docs)
        report.notes.append(f"run: {args.save_run}")
    figures = _figures(args)
    if figures is not None:
        report.written.append(
            plots.plot_curves(
                figures,
                "dense_hit_rate_recall_at_k",
                "Dense retrieval: hit rate and recall at k",
                result.curve_ks,
                result.curve_hit_rate,
                result.curve_recall,
            )
        )
    inputs.info["dense"].update({"depth": depth, "similarity": args.similarity, "ties": args.ties})
    report.notes.append(
        f"dense: {result.n_judged} judged queries evaluated (queries without qrels are skipped, as "
        f"trec_eval does); depth {depth}, {args.similarity} similarity, ties: {args.ties}"
    )


def _block_rows(args: argparse.Namespace, width: int) -> int:
    """``--block-rows``, else rows of ``BLOCK_BYTES`` of float32."""
    if args.block_rows is None:
        return default_block_rows(width)
    if args.block_rows < 1:
        raise ReportInputError(f"--block-rows must be a positive number of rows, got {args.block_rows}.")
    return int(args.block_rows)


def _checkpoint(args: argparse.Namespace, data: DenseInputs, fixed: Any) -> Checkpoint | None:
    """The ``--checkpoint`` directory for these inputs and settings (``None`` without the flag)."""
    if args.checkpoint is None:
        return None
    if args.checkpoint_every < 0:
        raise ReportInputError(f"--checkpoint-every must be 0 or more seconds, got {args.checkpoint_every}.")
    settings = stream_settings(fixed.opts, data.queries.dtype, data.files)
    return open_checkpoint(args.checkpoint, settings, args.checkpoint_every)


def _rows_bar(args: argparse.Namespace) -> Callable[..., Any]:
    """The progress bar of the corpus scan: ``progress_bar`` (on a terminal), or tqdm on stderr
    whatever it is with ``--progress``."""
    if not args.progress or show_progress():
        return progress_bar
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is in the `report` extra; without it, no bar
        return progress_bar
    return partial(tqdm, file=sys.stderr, leave=False, dynamic_ncols=True, mininterval=1.0)


def _figures(args: argparse.Namespace) -> plots.Figures | None:
    """Where and how to write the figures (``--plot``, ``--plot-format``, ``--dpi``), or ``None``."""
    return None if args.plot is None else plots.Figures(args.plot, args.plot_format, args.dpi)


def run_report(args: argparse.Namespace, ks: list[int], trec: JoinedRun | None = None) -> int:
    """Evaluate, print the table, and write the JSON file and plots when asked.

    ``trec``: the run already read and joined with its qrels
    (``read_trec_while_importing``).
    """
    with warnings.catch_warnings():
        # torchmetrics' NMI/AMI build a sparse tensor and torch warns about it once per process:
        # noise for a command-line user, not a problem with their data.
        warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")
        return _run_report(args, ks, trec)


def _run_report(args: argparse.Namespace, ks: list[int], trec: JoinedRun | None) -> int:
    if trec is None:  # otherwise the caller checked the command before reading the TREC files
        preflight(args)
    inputs = load_inputs(args, trec)
    report = Report(notes=[f"inputs: {inputs.source}"], default_k=args.k is None)
    trec_family = partial(_trec_family, inputs, ks, args.ties, _figures(args), report, args.trec_eval)
    steps: list[tuple[str, object, Callable[[], None]]] = [
        (
            "embeddings: kNN scans, k-means",
            inputs.embeddings,
            partial(_embeddings_family, inputs, ks, _figures(args), report),
        ),
        ("views: similarity scan", inputs.views, partial(_views_family, inputs, ks, _figures(args), report)),
        ("trec: ranking", inputs.trec, trec_family),
        ("dense: corpus scan", inputs.dense, partial(_dense_family, inputs, args, ks, report)),
    ]
    todo = [(label, step) for label, given, step in steps if given is not None]
    with progress_bar(total=len(todo), desc="embedmetrics report", unit="family") as bar:
        for label, step in todo:
            bar.set_postfix_str(label)
            step()
            bar.update(1)
    inputs.info["k"] = ks
    if report.written:
        inputs.info["plots"] = [os.path.basename(p) for p in report.written]
        report.notes.append(f"plots: {', '.join(report.written)}")
    document = output.to_json(report.results, inputs.info)
    if args.json == "-":
        sys.stdout.write(document + "\n")
        return 0
    if args.json is not None:
        output.write_json(args.json, document)
        report.notes.append(f"json: {args.json}")
    sys.stdout.write(output.format_table(report.results, report.notes) + "\n")
    return 0
