"""``embedmetrics trec_eval`` against the trec_eval binaries themselves, line by line, on seeded random
runs and qrels: tied scores, scores tied in single precision only (trec_eval 9 reads scores as
``float``, 10.0 as ``double``), grades -1..3, queries absent from the run, run queries without
judgements, queries without a relevant document, a query of 2,000 documents, ``#`` comment lines (10.0
only), under every option set trec_eval users call (``-q``, ``-c``, ``-c -q``, ``-M``, ``-l``, ``-J``,
``-n``, ``-N``, ``-o``, ``-m all_trec``, ``-m official``, measures with parameters).

Where ``TREC_EVAL`` names a trec_eval 10.0 binary and ``TREC_EVAL_9`` a 9.0.8 one (built from
https://github.com/usnistgov/trec_eval, tags ``v10.0`` and ``v9.0.8``); each version is skipped,
saying so, where its variable is unset.
"""

from __future__ import annotations

import difflib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from embedmetrics.cli import main

#: The environment variable naming each version's binary.
BINARY_VARIABLES = {"10": "TREC_EVAL", "9": "TREC_EVAL_9"}
#: Measures with parameters, as trec_eval's own test passes them (``ndcg_cut.10,20,23.4``: 23).
PARAMETERS = [
    *("-m", "P.2.5,7,3", "-m", "recall.20,2000", "-m", "Rprec_mult.0.5,2", "-m", "utility.2,-1,0,0"),
    *("-m", "iprec_at_recall..10,.55,.6", "-m", "11pt_avg..25,.5,.75", "-m", "ndcg.1=3,2=9,3=4.5"),
    *("-m", "ndcg_cut.10,20,23.4", "-m", "success.2,5", "-m", "map_cut.3,100", "-m", "set_F.0.5"),
    *("-m", "relstring.10", "-m", "Rndcg.2=1", "-m", "G.0=1,2=3", "-m", "yaap"),
]
#: The option sets, by name.
OPTION_SETS = {
    "default": [],
    "q": ["-q"],
    "c": ["-c"],
    "c-q": ["-c", "-q"],
    "all_trec": ["-q", "-m", "all_trec"],
    "all_trec-c-q": ["-c", "-q", "-m", "all_trec"],
    "M": ["-q", "-M", "7", "-m", "all_trec"],
    "l2": ["-q", "-l2", "-m", "all_trec"],
    "l0": ["-c", "-l", "0", "-m", "all_trec"],
    "J": ["-q", "-J", "-m", "all_trec"],
    "n-o": ["-q", "-n", "-o", "-m", "all_trec"],
    "N": ["-N", "3000", "-m", "all_trec"],
    "official": ["-m", "official"],
    "parameters": ["-q", *PARAMETERS],
}
#: 10.0's own measures with parameters. ``rbp`` without other measures: trec_eval 10.0 normalizes rbp's
#: gains with a minimum and a maximum it never initializes, so beside other measures its values change
#: with them (``-m rbp.p=0.8 -m G.0=1,2=3`` prints 0.0126 where ``-m rbp.p=0.8`` alone prints 0.2436).
OPTION_SETS_10 = {"rbp": ["-q", "-m", "rbp.p=0.8", "-m", "rbp_resid.p=0.95", "-m", "unj.3,7"]}


@dataclass(frozen=True)
class Case:
    """A random run and its qrels: the seed, judged queries absent from the run or not, one query of
    2,000 documents or not, ``#`` lines or not."""

    seed: int
    missing: bool = False
    big: bool = False
    comments: bool = False
    decimal_grades: bool = False

    @property
    def id(self) -> str:
        """The test id."""
        flags = [("missing", self.missing), ("2000docs", self.big), ("comments", self.comments)]
        flags.append(("decimal-grades", self.decimal_grades))
        return "-".join([f"seed{self.seed}", *(name for name, on in flags if on)])


CASES = [
    Case(1, missing=True),
    Case(2, decimal_grades=True),
    Case(3, big=True),
    Case(4, comments=True),
    Case(5, missing=True),
]


def grade_texts(rng: np.random.Generator, n: int, top: int, decimal: bool) -> list[str]:
    """``n`` grades in -1..``top - 1``; ``decimal``: a third written with decimals (``2.7``, ``-1.3``,
    which trec_eval reads as 2 and -1)."""
    grades = rng.integers(-1, top, size=n)
    marks = rng.integers(0, 3, size=n) if decimal else np.ones(n, dtype=int)
    return [f"{g}.{rng.integers(0, 10)}" if k == 0 else str(g) for g, k in zip(grades, marks)]


def scores(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` scores as a run file writes them: ties on a few round values, distinct values, and pairs
    equal in single precision but not in double (``0.412345670`` and ``0.412345673``)."""
    near = [f"{x:.8f}" for x in rng.random(3)]
    out = []
    for kind in rng.integers(0, 4, size=n):
        if kind == 0:
            out.append(str(rng.choice(["1", "0.5", "2.25", "-3", "1e-2"])))
        elif kind == 1:
            out.append(f"{rng.random():.4f}")
        else:  # the same float32, different doubles (the last digit moves less than float32's spacing)
            out.append(f"{rng.choice(near)}{rng.integers(0, 10)}")
    return out


def draw(case: Case) -> tuple[list[str], list[str]]:
    """The run's lines and the qrels' lines, each in a random order."""
    rng = np.random.default_rng(case.seed)
    run: list[str] = []
    qrels: list[str] = []
    for i in range(14):
        query = f"{300 + i}" if i % 4 else f"q{i}"
        kinds = ["both", "both", "both", "run only", *(["qrels only"] if case.missing else [])]
        kind = "both" if i < 2 else rng.choice(kinds)
        size = 2000 if case.big and i == 1 else int(rng.integers(1, 60))
        pool = [f"d{k}" if k % 3 else f"DOC-{k:04d}" for k in rng.permutation(3 * size + 30)]
        docs = pool[:size]
        if kind != "qrels only":
            ranks = rng.permutation(size) + 1
            run += [
                f"{query} Q0 {d} {r} {s} tag{case.seed}" for d, r, s in zip(docs, ranks, scores(rng, size))
            ]
        if kind != "run only":
            judged = [d for d in pool[: size + 20] if rng.random() < 0.5] or pool[:1]
            top = 4 if rng.random() < 0.85 else 1  # some queries without a relevant document
            grades = grade_texts(rng, len(judged), top, case.decimal_grades)
            qrels += [f"{query} 0 {d} {g}" for d, g in zip(judged, grades)]
    run, qrels = [run[i] for i in rng.permutation(len(run))], [qrels[i] for i in rng.permutation(len(qrels))]
    if case.comments:
        run, qrels = with_comments(rng, run, several=True), with_comments(rng, qrels, several=False)
    return run, qrels


def with_comments(rng: np.random.Generator, lines: list[str], several: bool) -> list[str]:
    """``#`` lines: the first, and some after a data line; ``several``: runs of them and indented ones
    too (trec_eval 10.0 reads a qrels file's second ``#`` line in a row, or an indented one, as a
    judgement, so the qrels get single ones at the start of a line only)."""
    out = ["# written by embedmetrics' tests"]
    for line in lines:
        out.append(line)
        if rng.random() < 0.05:
            out += ["# a comment, 1 2 3"] * (int(rng.integers(1, 4)) if several else 1)
            if several and rng.random() < 0.5:
                out.append("   # an indented comment")
    return out


def write(case: Case, folder: Path) -> tuple[str, str]:
    """The case's qrels and run files in ``folder``."""
    run, qrels = draw(case)
    (folder / "qrels").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    (folder / "run").write_text("\n".join(run) + "\n", encoding="utf-8")
    return str(folder / "qrels"), str(folder / "run")


def binary(version: str) -> str:
    """The version's binary, or the test skipped with the reason."""
    variable = BINARY_VARIABLES[version]
    path = os.environ.get(variable, "")
    if not path:
        pytest.skip(f"{variable} does not name a trec_eval {version} binary")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{variable}={path} is not an executable file")
    return path


def differences(got: list[str], want: list[str]) -> str:
    """Equal / total lines, and the first differing ones."""
    matcher = difflib.SequenceMatcher(None, got, want, autojunk=False)
    equal = sum(block.size for block in matcher.get_matching_blocks())
    diff = list(difflib.unified_diff(want, got, "trec_eval", "embedmetrics", n=0, lineterm=""))
    return f"{equal} / {len(want)} lines equal\n" + "\n".join(diff[2:14])


def ours(version: str, args: list[str]) -> int:
    """``embedmetrics trec_eval --trec-eval VERSION ARGS`` in this process; its exit status."""
    try:
        return main(["trec_eval", "--trec-eval", version, *args])
    except SystemExit as done:  # the status, however the command line reports it
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)


def compare(program: str, version: str, args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What differs between the binary and ``embedmetrics trec_eval`` on ``args`` ("" if nothing): the
    printed lines where the binary succeeds; where it refuses the input (10.0 exits 4 on a judged query
    absent from the run without ``-c``), a refusal with the same exit status and one line on stderr."""
    want = subprocess.run([program, *args], capture_output=True, text=True, timeout=60)
    status = ours(version, args)
    captured = capsys.readouterr()
    got, err = captured.out.splitlines(), captured.err.strip()
    if want.returncode != 0:
        if status == want.returncode and len(err.splitlines()) == 1:
            return ""
        return f"the binary exits {want.returncode} ({want.stderr.strip()}); we exit {status}: {err}"
    if status != 0 or got != want.stdout.splitlines():
        return f"exit {status} {err}\n" + differences(got, want.stdout.splitlines())
    return ""


@pytest.mark.parametrize("version", ["10", "9"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_option_set_prints_the_binary_s_lines(
    version: str, case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = binary(version)
    if case.comments and version == "9":
        pytest.skip("trec_eval 9.0.8 reads no comment lines")
    qrels, run = write(case, tmp_path)
    failures = []
    option_sets = {**OPTION_SETS, **(OPTION_SETS_10 if version == "10" else {})}
    for name, options in option_sets.items():
        failure = compare(program, version, [*options, qrels, run], capsys)
        if failure:
            failures.append(f"[{name}] {' '.join(options)}: {failure}")
    assert not failures, f"{len(failures)} / {len(option_sets)} option sets differ\n" + "\n\n".join(failures)


def test_a_run_on_standard_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-`` for the run: read from standard input, as trec_eval 10.0 reads it."""
    program = binary("10")
    qrels, run = write(CASES[1], tmp_path)
    args = ["-q", "-m", "all_trec", qrels, "-"]
    with open(run, "rb") as stdin:
        want = subprocess.run([program, *args], stdin=stdin, capture_output=True, text=True, timeout=60)
    assert want.returncode == 0, want.stderr
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(Path(run).read_bytes()), encoding="utf-8"))
    status = ours("10", args)
    got = capsys.readouterr().out.splitlines()
    assert status == 0
    assert got == want.stdout.splitlines(), differences(got, want.stdout.splitlines())
