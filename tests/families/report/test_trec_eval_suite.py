"""trec_eval's own test suite, both versions: every command line of ``make quicktest`` (9.0.8 and 10.0,
vendored with their inputs and expected outputs in ``tests/trec_eval_suite/``, see its README) run
through ``embedmetrics trec_eval --trec-eval 9|10`` in this process, the printed lines compared with
trec_eval's expected ``out.*`` file line by line. The preference and ``_jg`` lines (``-R prefs``,
``-R qrels_prefs``, ``-R qrels_jg``) are out of scope: they must be refused with one line on stderr and
exit status 2.

The equal / total line counts per version::

    python -m tests.families.report.test_trec_eval_suite
"""

from __future__ import annotations

import contextlib
import difflib
import gzip
import io
import os
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from embedmetrics.cli import main

SUITE = Path(__file__).resolve().parents[2] / "trec_eval_suite"
VERSIONS = ("9", "10")
#: The ``-R`` input formats of preference and ``_jg`` judgements, which embedmetrics refuses.
OUT_OF_SCOPE = ("prefs", "qrels_prefs", "qrels_jg")
#: Differing lines shown on a failure.
SHOWN = 12


@dataclass(frozen=True)
class QuickLine:
    """One command line of a version's quicktest: ``./trec_eval ARGS | diff - EXPECTED``."""

    version: str
    number: int
    args: tuple[str, ...]
    expected: str

    @property
    def folder(self) -> Path:
        """The version's folder: the command line's paths are relative to it."""
        return SUITE / f"v{self.version}"

    @property
    def refused(self) -> bool:
        """Whether the line reads preference or ``_jg`` judgements (``-R prefs|qrels_prefs|qrels_jg``)."""
        return any(a == "-R" and b in OUT_OF_SCOPE for a, b in zip(self.args, self.args[1:]))

    @property
    def id(self) -> str:
        """The test id: version, line number, the expected file's name."""
        return f"v{self.version}-{self.number:02d}-{Path(self.expected).name}"


def quicktest(version: str) -> list[QuickLine]:
    """The command lines of ``quicktest.txt``, verbatim from the version's Makefile."""
    lines = []
    text = (SUITE / f"v{version}" / "quicktest.txt").read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), start=1):
        command, expected = line.split(" | diff - ")
        words = shlex.split(command)
        assert words[0] == "./trec_eval", line
        lines.append(QuickLine(version, number, tuple(words[1:]), expected))
    return lines


ALL_LINES = [line for version in VERSIONS for line in quicktest(version)]


def local_paths(line: QuickLine, scratch: Path) -> list[str]:
    """The line's arguments, a file stored gzip-compressed (``results.comment.test``) decompressed into
    ``scratch`` and named by its absolute path there."""
    args = []
    for arg in line.args:
        packed = line.folder / f"{arg}.gz"
        if not (line.folder / arg).exists() and packed.exists():
            target = scratch / f"v{line.version}-{packed.stem}"
            if not target.exists():
                target.write_bytes(gzip.decompress(packed.read_bytes()))
            arg = str(target)
        args.append(arg)
    return args


@contextlib.contextmanager
def inside(folder: Path) -> Iterator[None]:
    """Run with ``folder`` as the working directory (trec_eval's relative paths), then go back."""
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def run_line(line: QuickLine, scratch: Path) -> int:
    """``embedmetrics trec_eval --trec-eval VERSION ARGS`` in this process; its exit status."""
    args = local_paths(line, scratch)
    with inside(line.folder):
        try:
            return main(["trec_eval", "--trec-eval", line.version, *args])
        except SystemExit as done:  # the status, however the command line reports it
            return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)


def expected_lines(line: QuickLine) -> list[str]:
    """trec_eval's output for the line, from the vendored ``out.*`` file."""
    return (line.folder / line.expected).read_text(encoding="utf-8").splitlines()


def equal_count(got: list[str], want: list[str]) -> int:
    """How many of trec_eval's lines we print, in trec_eval's order (the longest common subsequence as
    difflib finds it: a missing or extra line shifts nothing)."""
    matcher = difflib.SequenceMatcher(None, got, want, autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks())


def report(line: QuickLine, got: list[str], want: list[str]) -> str:
    """The failure message: equal / total lines and the first differing ones."""
    diff = list(difflib.unified_diff(want, got, "trec_eval", "embedmetrics", n=0, lineterm=""))
    shown = "\n".join(diff[2 : 2 + SHOWN])
    return (
        f"{line.id}: {equal_count(got, want)} / {len(want)} lines equal "
        f"(./trec_eval {shlex.join(line.args)})\n{shown}"
    )


@pytest.mark.parametrize("line", [x for x in ALL_LINES if not x.refused], ids=lambda x: x.id)
def test_quicktest_line_prints_trec_eval_s_output(
    line: QuickLine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = run_line(line, tmp_path)
    captured = capsys.readouterr()
    got, want = captured.out.splitlines(), expected_lines(line)
    assert status == 0, f"{line.id}: exit status {status}: {captured.err.strip()}"
    assert got == want, report(line, got, want)


@pytest.mark.parametrize("line", [x for x in ALL_LINES if x.refused], ids=lambda x: x.id)
def test_quicktest_prefs_and_jg_lines_are_refused(
    line: QuickLine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = run_line(line, tmp_path)
    captured = capsys.readouterr()
    assert status == 2, f"{line.id}: exit status {status}"
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1, captured.err
    assert line.args[line.args.index("-R") + 1] in captured.err, captured.err  # names what it refuses


def test_the_suite_holds_every_quicktest_line() -> None:
    """Both Makefiles' quicktest lines, each with its expected file (9.0.8: 11 lines, 10.0: 15)."""
    assert [len(quicktest(v)) for v in VERSIONS] == [11, 15]
    assert sum(line.refused for line in ALL_LINES) == 3 + 5
    for line in ALL_LINES:
        assert (line.folder / line.expected).is_file(), line.id


@pytest.mark.parametrize(("version", "variable"), [("9", "TREC_EVAL_9"), ("10", "TREC_EVAL")])
def test_the_binary_prints_the_vendored_out_files(version: str, variable: str, tmp_path: Path) -> None:
    """Where ``TREC_EVAL`` (10.0) / ``TREC_EVAL_9`` name a binary: the vendored files are what it prints,
    every quicktest line (the preference and ``_jg`` ones included)."""
    program = os.environ.get(variable, "")
    if not os.access(program, os.X_OK):
        pytest.skip(f"{variable} does not name a trec_eval {version} binary")
    for line in quicktest(version):
        args = [program, *local_paths(line, tmp_path)]
        done = subprocess.run(args, cwd=line.folder, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (line.id, done.stderr)
        assert done.stdout.splitlines() == expected_lines(line), line.id


def captured_run(line: QuickLine, scratch: Path) -> tuple[int, list[str]]:
    """The exit status and stdout lines of one line, outside pytest (for :func:`counts`)."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = run_line(line, scratch)
    out.seek(0)
    return status, out.read().splitlines()


def counts(scratch: Path) -> dict[str, tuple[int, int]]:
    """Per version: lines of trec_eval's expected output we print equal, and its total (the refused
    preference and ``_jg`` lines left out); each line's own figures printed as it goes."""
    totals = {}
    for version in VERSIONS:
        equal = total = 0
        for line in quicktest(version):
            if line.refused:
                continue
            status, got = captured_run(line, scratch)
            want = expected_lines(line)
            same = equal_count(got, want)
            equal, total = equal + same, total + len(want)
            print(f"{line.id:<28} {same:>5} / {len(want):<5} exit {status}")
        totals[version] = (equal, total)
    return totals


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        for version, (equal, total) in counts(Path(scratch)).items():
            print(f"trec_eval {version}: {equal} / {total} lines equal")
