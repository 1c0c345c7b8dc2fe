"""sentence-transformers' ``InformationRetrievalEvaluator`` against embedmetrics' (one import apart).

Workload (defaults): 2,000 queries x 200,000 documents x 384 dimensions (a MiniLM's width), cosine, the
evaluator's default cut-offs (``map@100``: lists of 100), three relevant documents per query.

Encoding is excluded: both evaluators get the corpus embeddings (``evaluator(model,
corpus_embeddings=...)``, which sentence-transformers' evaluator takes), and the queries from the same
tiny fixed "model", ``LookupModel``, whose ``encode_query`` returns precomputed rows (each query's text
is its row number). Each method runs in a fresh process on the same seeded data; its time is the
evaluator call, its peak memory the peak resident size during the call (``VmHWM`` after a reset, Linux;
``resource.getrusage``'s ``ru_maxrss`` elsewhere) minus the resident size before it.

- ``ours``: ``embedmetrics.integrations.sentence_transformers.InformationRetrievalEvaluator``.
- ``theirs``: ``sentence_transformers``' ``InformationRetrievalEvaluator`` (per corpus chunk of 50,000
  the full ``queries x chunk`` score matrix, ``topk``, then Python lists).
- ``bare``: the bare product of the normalised queries and corpus (``_timing.product_bound``): the bound.
- ``bare x2``: the bare product of half the corpus in each of two processes at once: how far this
  machine itself halves the product (two busy cores run slower than one).
- ``ours x2``: ours in two gloo processes (a plain script calling the evaluator on both ranks; each
  scans half the corpus); the slower rank's call time against one process's (both with ``--threads``
  threads per process: give each process its own cores for the halving to show). The ranks start the
  clock together (a barrier first), so no rank's time holds another's start-up.

The values of both evaluators are checked to agree to 1e-6. Usage::

    python benchmarks/bench_sentence_transformers.py [--queries 2000] [--docs 200000] [--dim 384]
        [--threads N] [--repeat 2]

``--encode``: both evaluators encode the corpus themselves, by chunks of ``--chunk`` texts (their
``corpus_chunk_size``), with ``HashEncoder``, a fake model whose rows depend on the text alone and cost
little to make: what each evaluator holds while it encodes and scans (sentence-transformers' one chunk
and its ``queries x chunk`` scores; ours one chunk and the running lists). Each runs once in a fresh
process under ``/usr/bin/time -v`` (where there is one): its peak during the call and the process's
maximum resident set size, both evaluators' wall times; nothing is added to ``run_all.py``'s rows::

    python benchmarks/bench_sentence_transformers.py --encode [--queries 1000] [--docs 1000000]
        [--dim 768] [--chunk 50000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from _timing import emit, peak_rss_mib, product_bound, reset_peak

METHODS = ("ours", "theirs", "bare")


def make_data(n_q: int, n_d: int, dim: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, set[str]]]:
    """Queries near the mean of their three relevant documents (seeded, the same in every process)."""
    g = torch.Generator().manual_seed(0)
    corpus = torch.randn(n_d, dim, generator=g)
    rel = torch.randint(0, n_d, (n_q, 3), generator=g)
    queries = corpus[rel].mean(dim=1) + 0.5 * torch.randn(n_q, dim, generator=g)
    relevant = {str(q): {str(int(d)) for d in rel[q]} for q in range(n_q)}
    return queries, corpus, relevant


class _CardData:
    def set_evaluation_metrics(self, *args: Any, **kwargs: Any) -> None:
        """The model card is not the benchmark's concern."""


class LookupModel:
    """Just enough of a ``SentenceTransformer`` for the evaluators: ``encode_query`` returns the
    precomputed rows named by the texts (row numbers); cosine similarity."""

    similarity_fn_name = "cosine"
    device = torch.device("cpu")

    def __init__(self, queries: torch.Tensor) -> None:
        self.rows = queries
        self.model_card_data = _CardData()

    def encode_query(self, texts: list[str], **kwargs: Any) -> torch.Tensor:
        return self.rows[torch.tensor([int(t) for t in texts], dtype=torch.int64)]

    encode_document = encode_query

    def similarity(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        from sentence_transformers.util import cos_sim

        return cos_sim(a, b)

    def get_sentence_embedding_dimension(self) -> int:
        return int(self.rows.shape[1])


class HashEncoder(LookupModel):
    """A fake model that encodes without a table: text ``t`` (a number) becomes the row
    ``sin(t * a + b)`` of fixed seeded ``a``, ``b`` (float32), the same whatever the chunk it is in."""

    def __init__(self, dim: int) -> None:
        g = torch.Generator().manual_seed(1)
        self.a, self.b = torch.rand(dim, generator=g), torch.rand(dim, generator=g) * 6.3
        super().__init__(torch.empty(0, dim))

    def encode_query(self, texts: list[str], **kwargs: Any) -> torch.Tensor:
        numbers = torch.tensor([int(t) for t in texts], dtype=torch.float32)
        return torch.sin(torch.outer(numbers, self.a).add_(self.b))

    encode_document = encode_query


def _evaluator(
    which: str,
    queries: dict[str, str],
    corpus: dict[str, str],
    relevant: dict[str, set[str]],
    chunk: int = 50_000,
) -> Any:
    if which == "ours":
        from embedmetrics.integrations.sentence_transformers import InformationRetrievalEvaluator
    else:
        from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
    return InformationRetrievalEvaluator(queries, corpus, relevant, corpus_chunk_size=chunk, write_csv=False)


def encode_worker(args: argparse.Namespace) -> None:
    """One evaluator encoding the corpus itself (``--encode``); prints a JSON line."""
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    rel = torch.randint(0, args.docs, (args.queries, 3), generator=g)
    relevant = {str(q): {str(int(d)) for d in rel[q]} for q in range(args.queries)}
    queries = {str(q): str(args.docs + q) for q in range(args.queries)}  # texts: numbers past the corpus
    corpus = {str(i): str(i) for i in range(args.docs)}
    model = HashEncoder(args.dim)
    small = _evaluator(args.worker, {"0": "0"}, {str(i): str(i) for i in range(50)}, {"0": {"1"}}, 20)
    small(model)  # imports and first calls outside the measurement
    evaluator = _evaluator(args.worker, queries, corpus, relevant, args.chunk)
    base = reset_peak()  # MiB
    start = time.perf_counter()
    values = evaluator(model)
    seconds = time.perf_counter() - start
    peak = (peak_rss_mib() - base) / 1024  # GiB
    print(json.dumps({"seconds": seconds, "peak_gb": peak, "base_gb": base / 1024, "values": values}))


def worker(args: argparse.Namespace) -> None:
    """One method, one measurement; prints a JSON line."""
    torch.set_num_threads(args.threads)
    if args.world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=args.init, rank=args.rank, world_size=args.world)
    q, c, relevant = make_data(args.queries, args.docs, args.dim)
    if args.worker == "bare":  # on ``world`` processes: each rank's share of the corpus, started together
        share = c[args.rank :: args.world]
        if args.world > 1:
            torch.distributed.barrier()
        seconds = product_bound(torch.nn.functional.normalize(q), torch.nn.functional.normalize(share), "cpu")
        print(json.dumps({"seconds": seconds, "peak_gb": 0.0, "values": {}}))
        return
    model = LookupModel(q)
    texts = {str(i): str(i) for i in range(args.queries)}
    corpus = {str(i): str(i) for i in range(args.docs)}
    small = _evaluator(args.worker, {"0": "0"}, {str(i): str(i) for i in range(50)}, {"0": {"1"}})
    small(model, corpus_embeddings=c[:50])  # imports and first calls outside the measurement
    evaluator = _evaluator(args.worker, texts, corpus, relevant)
    base = reset_peak()  # MiB
    if args.world > 1:  # every rank starts the clock together: no rank times another's start-up
        torch.distributed.barrier()
    start, cpu = time.perf_counter(), time.process_time()
    values = evaluator(model, corpus_embeddings=c)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = (peak_rss_mib() - base) / 1024  # GiB
    print(json.dumps({"seconds": seconds, "cpu_s": cpu, "peak_gb": peak, "values": values}))
    if args.world > 1:
        torch.distributed.destroy_process_group()


def _run(name: str, args: argparse.Namespace, world: int = 1) -> list[dict[str, Any]]:
    """The method in ``world`` fresh processes; their JSON results (rank order)."""
    sizes = ["--queries", str(args.queries), "--docs", str(args.docs), "--dim", str(args.dim)]
    base = [sys.executable, __file__, "--worker", name, *sizes, "--threads", str(args.threads)]
    with tempfile.TemporaryDirectory() as tmp:
        init = (Path(tmp) / "rendezvous").as_uri()
        extra = lambda r: ["--world", str(world), "--rank", str(r), "--init", init]  # noqa: E731
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
        procs = [
            subprocess.Popen(
                [*base, *extra(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            )
            for r in range(world)
        ]
        outs = [p.communicate() for p in procs]
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError(f"{name} x{world} failed:\n" + "\n".join(err[-2000:] for _, err in outs))
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def _best(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return min(runs, key=lambda ranks: max(r["seconds"] for r in ranks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--repeat", type=int, default=2, help="fresh processes per method (best counts)")
    parser.add_argument(
        "--encode", action="store_true", help="the evaluators encode the corpus (HashEncoder)"
    )
    parser.add_argument("--chunk", type=int, default=50_000, help="corpus_chunk_size with --encode")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--init", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        (encode_worker if args.encode else worker)(args)
        return
    if args.encode:
        encode_main(args)
        return
    plan = [("ours", 1), ("theirs", 1), ("bare", 1), ("ours", 2), ("bare", 2)]
    runs: dict[tuple[str, int], list[list[dict[str, Any]]]] = {key: [] for key in plan}
    for _ in range(args.repeat):  # round robin: a slow spell of a shared machine hits every method alike
        for name, world in plan:
            runs[(name, world)].append(_run(name, args, world))
    best = {key: _best(r) for key, r in runs.items()}
    report(best, args)


def _timed(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """``encode_worker`` of one evaluator in a fresh process, under ``/usr/bin/time -v`` where there is
    one: its JSON line, the process's maximum resident set size (GiB) and wall seconds."""
    sizes = ["--queries", str(args.queries), "--docs", str(args.docs), "--dim", str(args.dim)]
    cmd = [sys.executable, __file__, "--encode", "--worker", name, *sizes, "--chunk", str(args.chunk)]
    cmd += ["--threads", str(args.threads)]
    timed = os.path.exists("/usr/bin/time")
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *cmd] if timed else cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    rss = [line for line in done.stderr.splitlines() if "Maximum resident set size" in line]
    out["max_rss_gb"] = int(rss[-1].split(":")[-1]) / 2**20 if rss else float("nan")  # KiB
    out["process_s"] = wall
    return out


def encode_main(args: argparse.Namespace) -> None:
    """Both evaluators encoding the corpus by chunks (``--encode``): peak memory and time."""
    ours, theirs = _timed("ours", args), _timed("theirs", args)
    equal = list(ours["values"]) == list(theirs["values"]) and all(
        abs(ours["values"][k] - v) < 1e-6 for k, v in theirs["values"].items()
    )
    print(
        f"{args.queries:,} queries x {args.docs:,} corpus texts x {args.dim}, encoded by chunks of "
        f"{args.chunk:,} (HashEncoder), cosine, {args.threads} thread(s)"
    )
    for label, r in (("ours", ours), ("theirs", theirs)):
        print(
            f"{label:7} call {r['seconds']:8.2f} s (process {r['process_s']:7.2f} s)  peak in the call "
            f"+{r['peak_gb']:.3f} GiB over {r['base_gb']:.3f}  max RSS {r['max_rss_gb']:.3f} GiB"
        )
    print(
        f"ours / theirs: max RSS {ours['max_rss_gb'] / theirs['max_rss_gb']:.2f}x, peak in the call "
        f"{ours['peak_gb'] / theirs['peak_gb']:.2f}x, call time {ours['seconds'] / theirs['seconds']:.2f}x"
    )
    print(f"values equal sentence-transformers' (1e-6): {equal}")


def report(best: dict[tuple[str, int], list[dict[str, Any]]], args: argparse.Namespace) -> None:
    """Print the figures and the rows of ``run_all.py``."""
    ours, theirs, bare, two = (
        best[("ours", 1)][0],
        best[("theirs", 1)][0],
        best[("bare", 1)][0],
        best[("ours", 2)],
    )
    equal = all(abs(ours["values"][k] - v) < 1e-6 for k, v in theirs["values"].items()) and list(
        ours["values"]
    ) == list(theirs["values"])
    same_ranks = all(r["values"] == ours["values"] for r in two)
    size = f"{args.queries:,} queries x {args.docs:,} x {args.dim}"
    threads = f"{args.threads} thread{'s' if args.threads != 1 else ''} per process"
    print(f"{size}, cosine, corpus embeddings given, {threads}")
    print(
        f"ours     {ours['seconds']:8.3f} s (cpu {ours['cpu_s']:.3f} s)  peak +{ours['peak_gb']:.3f} GB  "
        f"({ours['seconds'] / bare['seconds']:.2f}x the bare product)"
    )
    print(
        f"theirs   {theirs['seconds']:8.3f} s  peak +{theirs['peak_gb']:.3f} GB  "
        f"({theirs['seconds'] / ours['seconds']:.2f}x ours)"
    )
    print(f"bare     {bare['seconds']:8.3f} s  (the product alone)")
    slow = max(r["seconds"] for r in two)
    bare_two = max(r["seconds"] for r in best[("bare", 2)])
    print(
        f"ours x2  {slow:8.3f} s per rank (cpu {[round(r['cpu_s'], 3) for r in two]} s): "
        f"{slow / ours['seconds']:.2f} of one process; ranks equal one process: {same_ranks}"
    )
    own = bare_two / bare["seconds"]
    print(f"bare x2  {bare_two:8.3f} s per rank: {own:.2f} of one process (this machine's own halving)")
    print(f"values equal sentence-transformers' (1e-6): {equal}")
    label = "sentence-transformers' InformationRetrievalEvaluator"
    workload = f"sentence-transformers IR evaluator, {size}, corpus given"
    emit(
        workload, ours["seconds"], peer=label, peer_value=theirs["seconds"], bound="the bare product",
        bound_value=bare["seconds"], equal=equal,
    )  # fmt: skip
    emit(
        f"{workload}, peak memory",
        ours["peak_gb"],
        unit="GB",
        peer=label,
        peer_value=theirs["peak_gb"],
        equal=equal,
    )
    emit(
        f"{workload}, 2 processes (slower rank)", slow, peer="ours, 1 process", peer_value=ours["seconds"],
        equal=same_ranks,
    )  # fmt: skip


if __name__ == "__main__":
    main()
