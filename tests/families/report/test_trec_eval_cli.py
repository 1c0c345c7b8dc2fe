"""``embedmetrics trec_eval [options] QRELS RUN [RUN ...]``: trec_eval's calling form, its options, inputs
read as each version reads them, its exit statuses, and many runs in one call.

The expected lines are trec_eval's own (the vendored ``out.*`` files of ``tests/trec_eval_suite``), lines
checked by hand against the built binaries (quoted here), and, where ``TREC_EVAL`` / ``TREC_EVAL_9`` name
trec_eval 10.0 / 9.0.8 binaries, the binaries' output itself (skipped, saying so, where unset).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from embedmetrics.cli import build_parser, main

SUITE = Path(__file__).resolve().parents[2] / "trec_eval_suite"
V10, V9 = SUITE / "v10" / "test", SUITE / "v9" / "test"
BINARIES = {"10": "TREC_EVAL", "9": "TREC_EVAL_9"}


def te(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    """``embedmetrics trec_eval ARGS`` in this process: the status, stdout's lines and stderr."""
    status = main(["trec_eval", *args])
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err


def expected(folder: Path, name: str) -> list[str]:
    return (folder / name).read_text(encoding="utf-8").splitlines()


def write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def binary(version: str) -> str:
    variable = BINARIES[version]
    path = os.environ.get(variable, "")
    if not path or not os.access(path, os.X_OK):
        pytest.skip(f"{variable} does not name a trec_eval {version} binary")
    return path


# --- the calling form --------------------------------------------------------------------------------


def test_glued_options_as_getopt_reads_them(capsys: pytest.CaptureFixture[str]) -> None:
    """``-qcM100 -mall_trec``: trec_eval's own ``-m all_trec -q -c -M100`` test (``out.test.aqcM``)."""
    status, out, _ = te(capsys, "-qcM100", "-mall_trec", str(V10 / "qrels.test"), str(V10 / "results.trunc"))
    assert status == 0
    assert out == expected(V10, "out.test.aqcM")


def test_options_after_the_files(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = te(capsys, str(V10 / "qrels.test"), str(V10 / "results.test"), "-m", "all_trec")
    assert (status, out) == (0, expected(V10, "out.test.a"))


def test_trec_eval_s_long_option_names(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "--measure",
        "all_trec",
        "--query_eval_wanted",
        str(V10 / "qrels.test"),
        str(V10 / "results.test"),
    ]
    status, out, _ = te(capsys, *args)
    assert (status, out) == (0, expected(V10, "out.test.aq"))


@pytest.mark.parametrize(("version", "folder"), [("10", V10), ("9", V9)])
def test_many_runs_print_each_run_s_block_in_turn(
    capsys: pytest.CaptureFixture[str], version: str, folder: Path
) -> None:
    qrels, run = str(folder / "qrels.test"), str(folder / "results.test")
    status, out, _ = te(capsys, "--trec-eval", version, "-q", "-m", "all_trec", qrels, run, run, run)
    assert status == 0
    assert out == expected(folder, "out.test.aq") * 3


def test_output_dir_writes_one_file_per_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a" / "bm25.run", tmp_path / "b" / "dense.run"
    for path in (first, second):
        path.parent.mkdir()
        path.write_bytes((V10 / "results.test").read_bytes())
    out_dir = tmp_path / "out"
    status, out, err = te(
        capsys, "--output-dir", str(out_dir), str(V10 / "qrels.test"), str(first), str(second)
    )
    assert (status, out, err) == (0, [], "")
    assert sorted(p.name for p in out_dir.iterdir()) == ["bm25.run", "dense.run"]
    assert (out_dir / "dense.run").read_text().splitlines() == expected(V10, "out.test")


def test_output_dir_refuses_two_runs_of_one_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    runs = [write(tmp_path / d, "run", (V10 / "results.test").read_text()) for d in "ab"]
    status, out, err = te(capsys, "--output-dir", str(tmp_path / "out"), str(V10 / "qrels.test"), *runs)
    assert (status, out) == (2, [])
    assert len(err.splitlines()) == 1
    assert "'run'" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("version", "folder"), [("10", V10), ("9", V9)])
def test_a_run_on_standard_input(version: str, folder: Path) -> None:
    command = ["trec_eval", "--trec-eval", version, str(folder / "qrels.test"), "-"]
    done = subprocess.run(
        [sys.executable, "-m", "embedmetrics", *command],
        input=(folder / "results.test").read_bytes(), capture_output=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines() == expected(folder, "out.test")


def test_help_version_and_the_top_level_summary(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = te(capsys, "-h")
    assert status == 0
    assert "QRELS RUN [RUN ...]" in "\n".join(out)
    status, out, err = te(capsys, "-v")  # on stderr, as trec_eval prints its version
    assert (status, out) == (0, [])
    assert "trec_eval 10.0" in err
    summary = build_parser().format_help()
    assert "trec_eval" in summary
    assert "two or more --run with --qrels" in " ".join(summary.split())


# --- refusals: one line on stderr, trec_eval's exit status ----------------------------------------


def _refusal_files(tmp_path: Path) -> dict[str, str]:
    return {
        "qrels": write(tmp_path, "qrels", "q1 0 d1 1\nq2 0 d1 1\n"),
        "run": write(tmp_path, "run", "q1 Q0 d1 1 0.5 t\nq2 Q0 d1 1 0.5 t\n"),
        "other": write(tmp_path, "other", "q9 Q0 d1 1 0.5 t\n"),
        "twice": write(tmp_path, "twice", "q1 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\nq2 Q0 d1 1 1 t\n"),
        "partial": write(tmp_path, "partial", "q1 Q0 d1 1 0.5 t\n"),
        "nan": write(tmp_path, "nan", "q1 Q0 d1 1 0.5 t\nq2 Q0 d1 1 nan t\n"),
        "comment": write(tmp_path, "comment", "q1 Q0 d1 1 0.5 t\n# a comment\nq2 Q0 d1 1 1 t\n"),
        "zscores": write(tmp_path, "zscores", "q1 map 0.5\n"),
    }


REFUSALS = [  # (arguments, trec_eval's status, what the line names)
    (["-m", "no_such_measure", "{qrels}", "{run}"], 1, "no_such_measure"),
    (["{qrels}"], 1, "RUN"),
    (["{qrels}", "{tmp}/missing"], 2, "missing"),
    (["-R", "prefs", "{qrels}", "{run}"], 2, "prefs"),
    (["-R", "qrels_jg", "{qrels}", "{run}"], 2, "qrels_jg"),
    (["-T", "other", "{qrels}", "{run}"], 2, "other"),
    (["--trec-eval", "9", "{qrels}", "{other}"], 7, "no query"),
    (["{qrels}", "{other}"], 4, "'q1'"),  # 10.0: "result qid 'q1' not found in qrels"
    (["{qrels}", "{twice}"], 4, "twice:2"),
    (["{qrels}", "{partial}"], 4, "'q2'"),  # trec_eval 10.0 without -c: "result qid 'q2' not found"
    (["{qrels}", "{nan}"], 2, "nan:2"),
    (["--trec-eval", "9", "{qrels}", "{comment}"], 2, "comment:2"),
    (["-Z", "{zscores}", "{qrels}", "{run}"], 255, "zscores:1"),
    (["-Z", "{tmp}/none", "{qrels}", "{run}"], 255, "none"),
    (["--trec-eval", "8", "{qrels}", "{run}"], 1, "--trec-eval"),
    (["{qrels}", "-", "-"], 1, "'-'"),
]


@pytest.mark.parametrize(("args", "status", "named"), REFUSALS, ids=[" ".join(a) for a, _, _ in REFUSALS])
def test_a_refusal_is_one_line_with_trec_eval_s_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], status: int, named: str
) -> None:
    files = {**_refusal_files(tmp_path), "tmp": str(tmp_path)}
    got, out, err = te(capsys, *(a.format(**files) for a in args))
    assert got == status, err
    assert out == []
    assert len(err.splitlines()) == 1, err
    assert named in err, err


def test_a_judged_query_absent_from_the_run_is_skipped_under_9_and_with_c(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _refusal_files(tmp_path)
    assert te(capsys, "--trec-eval", "9", "-m", "num_q", files["qrels"], files["partial"])[:2] == (
        0, ["num_q                 \tall\t1"],
    )  # fmt: skip
    assert te(capsys, "-c", "-m", "num_q", files["qrels"], files["partial"])[:2] == (
        0, ["num_q                 \tall\t2"],
    )  # fmt: skip


# --- trec_eval 10.0's -c -q: the absent queries printed ----------------------------------------------

#: ``trec_eval -c -q -m official -m relstring qrels.test RUN`` where RUN is ``results.test`` without
#: query 302: its lines for 302 from trec_eval 10.0 (9.0.8 prints none).
ABSENT_302 = [
    "num_ret               \t302\t0", "num_rel               \t302\t77", "num_rel_ret           \t302\t0",
    "map                   \t302\t0.0000", "Rprec                 \t302\t0.0000",
    "bpref                 \t302\t0.0000", "recip_rank            \t302\t0.0000",
    *(f"iprec_at_recall_{c / 10:3.2f}  \t302\t0.0000" for c in range(11)),
    *(f"{'P_' + str(k):<22}\t302\t0.0000" for k in (5, 10, 15, 20, 30, 100, 200, 500, 1000)),
    "relstring             \t302\t''",
]  # fmt: skip


@pytest.mark.parametrize(("version", "folder"), [("10", V10), ("9", V9)])
def test_c_q_prints_the_absent_queries_under_10_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, folder: Path
) -> None:
    lines = (folder / "results.test").read_text().splitlines()
    run = write(tmp_path, "run", "".join(f"{line}\n" for line in lines if line.split()[0] != "302"))
    args = [
        "--trec-eval",
        version,
        "-c",
        "-q",
        "-m",
        "official",
        "-m",
        "relstring",
        str(folder / "qrels.test"),
    ]
    status, out, _ = te(capsys, *args, run)
    assert status == 0
    assert [line for line in out if "\t302\t" in line] == (ABSENT_302 if version == "10" else [])
    assert "num_q                 \tall\t3" in out
    assert "num_rel               \tall\t561" in out  # every judged query's (out.test's, 301 to 303)


# --- options -----------------------------------------------------------------------------------------


def test_n_prints_no_summary(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = te(
        capsys, "-q", "-n", "-m", "all_trec", str(V10 / "qrels.test"), str(V10 / "results.test")
    )
    assert status == 0
    assert out == [line for line in expected(V10, "out.test.aq") if "\tall\t" not in line]


def test_o_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """``-o``: "Obsolete, no longer supported" in ``trec_eval.c`` (a flag nothing reads)."""
    status, out, _ = te(capsys, "-o", str(V10 / "qrels.test"), str(V10 / "results.test"))
    assert (status, out) == (0, expected(V10, "out.test"))


def test_j_ranks_only_the_judged_documents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """trec_eval 10.0 and 9.0.8 print ``num_ret 2`` and ``recip_rank 0.5000`` with ``-J`` (the unjudged
    ``dX`` and the unjudged-in-pool ``d3`` removed), ``4`` and ``0.2500`` without."""
    qrels = write(tmp_path, "qrels", "q1 0 d1 0\nq1 0 d2 1\nq1 0 d3 -1\n")
    run = write(tmp_path, "run", "q1 Q0 d1 1 0.9 a\nq1 Q0 dX 2 0.8 a\nq1 Q0 d3 3 0.75 a\nq1 Q0 d2 4 0.7 b\n")
    for flags, values in ((["-J"], ["2", "0.5000"]), ([], ["4", "0.2500"])):
        status, out, _ = te(capsys, *flags, "-m", "num_ret", "-m", "recip_rank", "-m", "runid", qrels, run)
        assert status == 0
        assert out == ["runid                 \tall\tb", f"num_ret               \tall\t{values[0]}",
                       f"recip_rank            \tall\t{values[1]}"]  # fmt: skip


def test_n_in_collection_enters_utility(capsys: pytest.CaptureFixture[str]) -> None:
    """``utility.a,b,c,d`` adds ``d * (N + rel_ret - ret - rel)`` (``m_utility.c``): ``-N`` adds ``d * N``
    to each query's value, so to the mean."""
    files = [str(V10 / "qrels.test"), str(V10 / "results.test")]
    values = {}
    for n in ("0", "1000"):
        status, out, _ = te(capsys, "-N", n, "-m", "utility.1,-1,0,0.5", *files)
        assert status == 0
        values[n] = float(out[0].split("\t")[2])
    assert values["1000"] - values["0"] == pytest.approx(500.0)


def test_z_prints_z_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``(v - mean) / stddev``; a deviation of 0: 0 where ``v == mean``; no line for the query and
    measure: -1000000 (``convert_zscores.c``); every name with a ``Z`` first, counts as ``%6.4f``. (The
    ``zz`` line keeps ``num_ret``'s lookup inside trec_eval's table: without it, the binaries crash.)"""
    qrels = write(tmp_path, "qrels", "q1 0 d1 1\n")
    run = write(tmp_path, "run", "q1 Q0 d1 1 1 t\n")
    zscores = write(tmp_path, "zscores", "q1 map 0.5 0.25\nq1 P_5 0.2 0\nq1 zz 0 1\n")
    status, out, _ = te(capsys, "-q", "-Z", zscores, "-m", "num_ret", "-m", "map", "-m", "P.5", qrels, run)
    assert status == 0
    assert out == [
        "Znum_ret               \tq1\t-1000000.0000", "Zmap                   \tq1\t2.0000",
        "ZP_5                   \tq1\t0.0000", "Znum_ret               \tall\t-1000000.0000",
        "Zmap                   \tall\t2.0000", "ZP_5                   \tall\t0.0000",
    ]  # fmt: skip


def test_z_of_trec_eval_s_own_test(capsys: pytest.CaptureFixture[str]) -> None:
    """``-q -m all_trec -Z test/zscores_file``: ``out.test.aqZ``, both versions."""
    for version, folder in (("10", V10), ("9", V9)):
        files = [str(folder / "qrels.test"), str(folder / "results.test")]
        status, out, _ = te(
            capsys, "--trec-eval", version, "-q", "-m", "all_trec", "-Z", str(folder / "zscores_file"), *files
        )
        assert (status, out) == (0, expected(folder, "out.test.aqZ")), version


def test_report_format_trec_eval_takes_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's example: ``iprec_at_recall_0.60 302`` is 0.1528 in 10.0, 0.1420 in 9.0.8."""
    files = ["--run", str(V10 / "results.test"), "--qrels", str(V10 / "qrels.test")]
    for version, value in (("10", "0.1528"), ("9", "0.1420")):
        status = main(["report", *files, "-q", "--format", "trec_eval", "--trec-eval", version])
        out = capsys.readouterr().out.splitlines()
        assert status == 0
        assert f"iprec_at_recall_0.60  \t302\t{value}" in out


def test_runid_is_the_last_line_s_tag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``get_trec_results.c``: "the run_id field of the last line is kept"."""
    qrels = write(tmp_path, "qrels", "q1 0 d1 1\n")
    run = write(tmp_path, "run", "q1 Q0 d1 1 0.9 first\nq1 Q0 d2 2 0.5 last\n# a comment\n\n")
    assert te(capsys, "-m", "runid", qrels, run)[1] == ["runid                 \tall\tlast"]


def _page_files(page: str, folder: Path) -> dict[str, str]:
    """The files the page writes with ``cat > NAME <<'EOF' ... EOF``, written in ``folder``."""
    import re

    found = re.findall(r"^cat > (\S+) <<'EOF'\n(.*?)^EOF$", page, flags=re.S | re.M)
    return {name: write(folder, name, text) for name, text in found}


def test_the_calling_form_example_of_the_docs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``docs/trec-eval.md``'s first example, self-contained: the page's files, its command; under 9 the
    page's lines, under 10 the per-query lines before ``q3`` then exit 4 (the binaries' too, where set)."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "trec-eval.md").read_text(encoding="utf-8")
    block = page.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    files = _page_files(page, tmp_path)
    assert sorted(files) == ["qrels.txt", "run.txt"]
    command = "embedmetrics trec_eval -q -m map -m P.1,2 -m ndcg_cut.3 -m num_rel qrels.txt run.txt"
    assert command in page
    measures = [*command.split()[2:-2], files["qrels.txt"], files["run.txt"]]
    assert te(capsys, "--trec-eval", "9", *measures)[:2] == (0, block)
    before_q3 = [line for line in block if "\tall\t" not in line]
    assert te(capsys, *measures)[:2] == (4, before_q3)
    for args, answer in (([*measures], (4, before_q3)), (["--trec-eval", "9", *measures], (0, block))):
        binary_answer = _binary_run(args)
        assert binary_answer in (None, answer)


# --- issue 48: what trec_eval 10.0 prints before it stops, runs without a judged query, -M 0 ----------

#: qrels of three queries; runs: none judged, the first query only, the first and third.
LOOP_QRELS = "q1 0 d1 1\nq1 0 d2 0\nq2 0 d3 1\nq3 0 d4 1\n"
LOOP_RUNS = {
    "nojudged": "301 Q0 d1 1 1.0 t\n",
    "small": "q1 Q0 d1 1 1.0 t\nq1 Q0 d2 2 0.5 t\n",
    "gap": "q1 Q0 d1 1 1.0 t\nq3 Q0 d4 1 1.0 t\n",
}
LOOP_CASES = [  # (arguments, status, stdout as trec_eval 10.0 / 9.0.8 print it, the binaries' own)
    (["-c", "-m", "num_q", "-m", "map", "{qrels}", "{nojudged}"], 0, [
        "num_q                 \tall\t3", "map                   \tall\t0.0000"]),
    (["-c", "-q", "-m", "num_q", "-m", "map", "{qrels}", "{nojudged}"], 0, [
        "map                   \tq1\t0.0000", "map                   \tq2\t0.0000",
        "map                   \tq3\t0.0000", "num_q                 \tall\t3",
        "map                   \tall\t0.0000"]),
    (["-m", "map", "{qrels}", "{nojudged}"], 4, []),  # 10.0: "result qid 'q1' not found in qrels"
    (["--trec-eval", "9", "-c", "-q", "-m", "map", "{qrels}", "{nojudged}"], 7, []),
    (["--trec-eval", "9", "-m", "map", "{qrels}", "{nojudged}"], 7, []),
    (["-q", "-m", "num_ret", "-m", "map", "{qrels}", "{small}"], 4, [
        "num_ret               \tq1\t2", "map                   \tq1\t1.0000"]),
    (["-m", "num_ret", "-m", "map", "{qrels}", "{small}"], 4, []),
    (["-M", "0", "-m", "num_ret", "-m", "map", "{qrels}", "{small}", "-c"], 0, [
        "num_ret               \tall\t0", "map                   \tall\t0.0000"]),
    (["--trec-eval", "9", "-M", "0", "-m", "num_ret", "-m", "map", "{qrels}", "{small}", "-c"], 0, [
        "num_ret               \tall\t0", "map                   \tall\t0.0000"]),
]  # fmt: skip


def _loop_files(tmp_path: Path) -> dict[str, str]:
    files = {name: write(tmp_path, name, text) for name, text in LOOP_RUNS.items()}
    return {**files, "qrels": write(tmp_path, "qrels", LOOP_QRELS)}


def _binary_run(args: list[str]) -> tuple[int, list[str]] | None:
    """The status and stdout of the trec_eval binary that ``--trec-eval`` names, if it is set."""
    version = args[1] if args[0] == "--trec-eval" else "10"
    path = os.environ.get(BINARIES[version], "")
    if not path or not os.access(path, os.X_OK):
        return None
    plain = args[2:] if args[0] == "--trec-eval" else args
    done = subprocess.run([path, *plain], capture_output=True, check=False)
    return done.returncode, done.stdout.decode().splitlines()


@pytest.mark.parametrize(("args", "status", "out"), LOOP_CASES, ids=[" ".join(a) for a, _, _ in LOOP_CASES])
def test_runs_without_judged_queries_partial_output_and_m_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], status: int, out: list[str]
) -> None:
    """Issue 48: 10.0's -c evaluates a run with no judged query (zeros); without -c it stops at the first
    judged query the run lacks (exit 4), after printing (-q) the queries before it; ``-M 0`` is taken."""
    files = _loop_files(tmp_path)
    argv = [a.format(**files) for a in args]
    got, lines, err = te(capsys, *argv)
    assert (got, lines) == (status, out), err
    assert len(err.splitlines()) == (status != 0)
    binary_answer = _binary_run(argv)
    if binary_answer is not None:
        assert binary_answer == (status, out)


@pytest.mark.parametrize("version", ["10", "9"])
def test_many_runs_go_on_past_a_failing_run_as_a_shell_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """Each run's block, or its partial block and its error, run after run; the first failure's status."""
    files = _loop_files(tmp_path)
    runs = [files["gap"], files["nojudged"], files["small"]]
    args = ["-q", "-m", "num_ret", "-m", "map", files["qrels"]]
    got, out, err = te(capsys, "--trec-eval", version, *args, *runs)
    loop = [te(capsys, "--trec-eval", version, *args, run) for run in runs]
    assert out == [line for _, lines, _ in loop for line in lines]
    assert got == next(status for status, _, _ in loop if status)
    assert [e for e in err.splitlines() if not e.startswith("==> ")] == [e.strip() for _, _, e in loop if e]
    assert [e for e in err.splitlines() if e.startswith("==> ")] == [f"==> {run} <==" for run in runs]
    if version == "10":
        ret, avg = "num_ret               \tq1\t", "map                   \tq1\t1.0000"
        assert out == [f"{ret}1", avg, f"{ret}2", avg]
        assert (got, len([e for e in err.splitlines() if not e.startswith("==> ")])) == (4, 3)
    else:
        assert got == 7


def test_m_below_0_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``-M -1``: trec_eval crashes; refused in one line."""
    files = _loop_files(tmp_path)
    got, out, err = te(capsys, "-M", "-1", files["qrels"], files["small"])
    assert (got, out, len(err.splitlines())) == (1, [], 1)
    assert "-1" in err


@pytest.mark.parametrize("version", ["10", "9"])
@pytest.mark.parametrize("spec", ["P.0", "P.5,5", "P.-1", "ndcg_cut.3,3"])
def test_a_cut_off_trec_eval_cannot_initialise_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, spec: str
) -> None:
    """trec_eval: "Negative cutoff detected" / "duplicate cutoffs detected", then "Cannot initialize
    measure", exit 2 (an unknown measure exits 1)."""
    files = _loop_files(tmp_path)
    args = ["--trec-eval", version, "-m", spec, files["qrels"], files["small"], "-c"]
    got, out, err = te(capsys, *args)
    assert (got, out, len(err.splitlines())) == (2, [], 1), err
    binary_answer = _binary_run(args)
    assert binary_answer in (None, (2, []))
    assert te(capsys, "--trec-eval", version, "-m", "P.", files["qrels"], files["small"])[0] == 1


#: ``-Z`` files for queries q1 and q2 (measures num_q, map, P_5): (file, the status, what the error names).
#: trec_eval's lookup (``convert_zscores.c``) reads past its table for a query or measure the file lacks
#: that sorts after the file's last: the binaries crash there (checked with the files below).
ZSCORE_FILES = [
    ("q7 map 0.5 0.1\n", 255, "any of the run"),  # none of the run's queries: refused (trec_eval: -1000000)
    ("q1 map 0.5 0.1\n", 255, "'num_q'"),  # q1 only: the binaries crash
    ("q1 map 0.5 0.1\nq2 P_5 0.1 0.1\n", 255, "'num_q'"),  # ibid.
    ("q1 P_5 0.5 0.1\nq1 map 0.5 0.1\nq1 num_q 0 0\nq3 x 0 0\n", 0, ""),  # q2 within the table: -1000000
]  # fmt: skip


@pytest.mark.parametrize(("text", "status", "named"), ZSCORE_FILES)
def test_z_files_covering_some_or_none_of_the_queries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, status: int, named: str
) -> None:
    qrels = write(tmp_path, "qz", "q1 0 d1 1\nq1 0 d2 0\nq2 0 d3 1\n")
    run = write(tmp_path, "rz", "q1 Q0 d1 1 1.0 t\nq1 Q0 d2 2 0.5 t\nq2 Q0 d3 1 1 t\nq2 Q0 d1 2 2 t\n")
    args = ["-q", "-Z", write(tmp_path, "z", text), "-m", "map", "-m", "P.5", "-m", "num_q", qrels, run]
    got, out, err = te(capsys, *args)
    assert got == status, err
    if status:
        assert (out, len(err.splitlines())) == ([], 1)
        assert named in err
        return
    assert out == [
        "Zmap                   \tq1\t5.0000", "ZP_5                   \tq1\t-3.0000",
        "Zmap                   \tq2\t-1000000.0000", "ZP_5                   \tq2\t-1000000.0000",
        "Znum_q                 \tall\t2.0000", "Zmap                   \tall\t-499997.5000",
        "ZP_5                   \tall\t-500001.5000",
    ]  # fmt: skip
    binary_answer = _binary_run(args)
    assert binary_answer in (None, (0, out))


@pytest.mark.parametrize("letters", [["-J"], ["-N", "5", "-Z", "z"], ["-Jq"]])
def test_report_points_to_the_calling_form_for_trec_eval_s_other_letters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], letters: list[str]
) -> None:
    files = _loop_files(tmp_path)
    status = main(
        ["report", "--run", files["small"], "--qrels", files["qrels"], "--format", "trec_eval", *letters]
    )
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.splitlines()) == 1
    assert "`embedmetrics trec_eval" in err
    assert letters[0][:2] in err


def test_report_note_says_which_trec_eval_skips_absent_queries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _loop_files(tmp_path)
    assert main(["report", "--run", files["gap"], "--qrels", files["qrels"], "-m", "map"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 judged queries absent from the run (as trec_eval 9 does; trec_eval 10.0 stops" in out


@pytest.mark.parametrize(("qrels", "run"), [
    ("q1 0 d1 abc\n", "q1 Q0 d1 1 1.0 t\n"), ("q1 0 d1 1\n", "q1 Q0 d1 1 0x1p-1 t\n"),
    ("q1 0 d1 1\n", "q1 Q0 d1 1 abc t\n"),
])  # fmt: skip
def test_a_score_or_grade_that_is_not_a_number_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], qrels: str, run: str
) -> None:
    """Deliberately unlike trec_eval (its atof/atol read 0 silently; docs/trec-eval.md): exit 2, the line."""
    got, out, err = te(capsys, write(tmp_path, "qrels", qrels), write(tmp_path, "run", run))
    assert (got, out) == (2, [])
    assert ":1:" in err


def test_many_runs_on_stdout_are_named_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Several runs on stdout without ``-m runid``: which run each block is, on stderr before it (stdout
    stays trec_eval's); with ``runid`` asked (``official``, ``all_trec``) the blocks name themselves."""
    files = _loop_files(tmp_path)
    runs = [files["small"], files["gap"]]
    status, out, err = te(capsys, "--trec-eval", "9", "-m", "map", files["qrels"], *runs)
    assert status == 0
    assert err.splitlines() == [f"==> {run} <==" for run in runs]
    assert out == [
        line for run in runs for line in te(capsys, "--trec-eval", "9", "-m", "map", files["qrels"], run)[1]
    ]
    status, out, err = te(capsys, "--trec-eval", "9", "-m", "map", "-m", "runid", files["qrels"], *runs)
    assert (status, err) == (0, "")
    status, out, err = te(capsys, "--trec-eval", "9", "-m", "map", files["qrels"], runs[0])
    assert (status, err) == (0, "")


def test_many_runs_with_n_are_named_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``-n`` drops the runid line: the blocks are named on stderr even with ``official``."""
    files = _loop_files(tmp_path)
    runs = [files["small"], files["gap"]]
    status, _, err = te(capsys, "--trec-eval", "9", "-n", "-q", files["qrels"], *runs)
    assert status == 0
    assert err.splitlines() == [f"==> {run} <==" for run in runs]
