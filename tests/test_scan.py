"""The scan engine against a plain per-line reference: counts, line numbers, ranks, caps, damaged files, bad regexes.

Every check runs twice: with the Aho-Corasick literal prefilter and with the plain RE2 DFA plan, which must agree.
"""

from __future__ import annotations

import gzip
import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import re2
import regex

from debug_training_logs.errors import UserInputError
from debug_training_logs.logs import (
    scan,
    scan_budget,
    scan_dense,
    scan_engines,
    scan_file,
    scan_plan,
    scan_types,
    scan_windows,
)
from debug_training_logs.logs.discovery import discover
from debug_training_logs.logs.scan import scan_files
from debug_training_logs.logs.scan_lines import lines_at
from debug_training_logs.logs.scan_patterns import compile_patterns, required_literals
from debug_training_logs.logs.scan_types import PatternSpec

PATTERNS = (
    r"NCCL.*timeout|Watchdog caught collective operation timeout",
    r"SIGTERM|SIGKILL|SIGABRT",
    r"Connection reset|Connection broken|Connection refused",
    r"retrying [0-9]+/[0-9]+",
    r"(?i:megatron)",
    r"^\[NeMo W",
    r"loss: nan$",
    r"\d+ errors",
    r"(ab)\1",  # RE2 cannot: the regex-module fallback
    r"Exception.*Error",
)

LINES = (
    "[NeMo I 2026-05-21 07:00:05 exp_manager:396] Experiments will be logged at /results",
    "[NeMo W 2026-05-21 07:00:06 nemo_logging:349] something odd",
    "x [NeMo W not at the start",
    "node03:4000:4100 [3] NCCL INFO comm 0x5a3c1d0 rank 3 nranks 16 cudaDev 3 - Init COMPLETE",
    "[rank{r}]:[E0521 08:02:12.123456789 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE) ran for 1800042 milliseconds before timing out.",
    "[rank{r}]: NCCL communicator timeout in allreduce",
    "WARNING:urllib3.connectionpool:Retrying (Retry(total=2)) after connection broken by 'Connection reset by peer'",
    "Sending process 1234 closing signal SIGTERM",
    "Epoch 0: step 17 loss: nan",
    "Epoch 0: step 18 loss: nan and more",
    "found 12 errors in shard",
    "abab is a back-reference",
    "MEGATRON says hi, Megatron-LM",
    "lhotse.ais.batch_loader.AISBatchLoaderError: Direct API fallback failed",
    "ValueError: Exception type Error",
    "retrying 3/5",
    "",
    "caf\xe9 \udcff invalid",
    "a perfectly boring training line " * 3,
)


def _write_corpus(root: Path, seed: int = 7, files: int = 3, lines: int = 3000) -> Path:
    rnd = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        out = bytearray()
        for _ in range(lines):
            text = rnd.choice(LINES).format(r=rnd.randrange(8) + 8 * f)
            out += text.encode("utf-8", "surrogateescape") + (b"\r\n" if rnd.random() < 0.02 else b"\n")
        if f == 1:
            out = out.rstrip(b"\n")  # no final newline
        (root / f"rank-{f}.log").write_bytes(bytes(out))
    return root


def _reference(path: Path, patterns: tuple[str, ...], ignore_case: bool = False) -> list[list[int]]:
    """Per pattern, the 1-based numbers of the lines it matches: a line loop, one pattern at a time."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    out: list[list[int]] = []
    for pat in patterns:
        opts = re2.Options()
        opts.case_sensitive = not ignore_case
        try:
            rx = re2.compile(pat.encode(), opts)
            hits = [i + 1 for i, ln in enumerate(lines) if rx.search(ln)]
        except re2.error:
            fb = regex.compile(pat.encode(), regex.IGNORECASE if ignore_case else 0)
            hits = [i + 1 for i, ln in enumerate(lines) if fb.search(ln)]
        out.append(hits)
    return out


class _Lines:
    def __init__(self, lf: object) -> None:
        self.hits: list[tuple[list[int], int]] = []

    def on_hit(self, ids: list[int], n: int, line: str) -> None:
        self.hits.append((ids, n))

    def finish(self) -> list[tuple[list[int], int]]:
        return self.hits


@pytest.fixture(params=["prefilter", "dfa"])
def plan_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "dfa":
        monkeypatch.setenv("DEBUG_TRAINING_LOGS_NO_PREFILTER", "1")
    elif scan_engines._aho_corasick() is None:
        pytest.skip("ahocorasick_rs not installed: the prefilter plan cannot run")
    return str(request.param)


@pytest.mark.parametrize("ignore_case", [False, True])
def test_counts_and_line_numbers_equal_the_reference(tmp_path: Path, plan_kind: str, ignore_case: bool) -> None:
    root = _write_corpus(tmp_path / "logs")
    files, _ = discover(root)
    spec = PatternSpec(PATTERNS, ignore_case)
    plan = scan_plan.make_plan(spec, scan_plan._sample(files))
    assert bool(plan.literals) == (plan_kind == "prefilter") or plan.dfa  # a pattern may force the DFA
    for res in scan_files(files, spec, _Lines):
        ref = _reference(res.file.path, PATTERNS, ignore_case)
        assert res.counts == [len(h) for h in ref], res.file.rel
        for pid, want in enumerate(ref):
            got = [n for ids, n in res.sink_result if pid in ids]
            assert got == want, (res.file.rel, PATTERNS[pid])


def test_small_windows_and_gzip_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _write_corpus(tmp_path / "logs", seed=3)
    plain = {r.file.rel: r.counts for r in scan_files(discover(root)[0], PatternSpec(PATTERNS))}
    monkeypatch.setattr(scan_windows, "WINDOW", 4096)  # many windows, lines cut across them
    small = {r.file.rel: r.counts for r in scan_files(discover(root)[0], PatternSpec(PATTERNS))}
    assert small == plain
    for p in root.iterdir():
        (p.parent / (p.name + ".gz")).write_bytes(gzip.compress(p.read_bytes()))
        p.unlink()
    gz = {r.file.rel.removesuffix(".gz"): r.counts for r in scan_files(discover(root)[0], PatternSpec(PATTERNS))}
    assert gz == plain


def test_ranks_are_collected_exactly(tmp_path: Path) -> None:
    lines = [f"[rank{r}]:[I0521 07:00:0{r % 10}.000000000 x.cpp:1] hello" for r in (0, 1, 2, 3) * 500]
    lines.insert(1700, "[rank12]: a late rank")
    lines.insert(10, "[rank=99] is a Ray prefix, not a c10 one; [rankx]: neither")
    (tmp_path / "node-0.log").write_text("\n".join(lines) + "\n")
    (res,) = scan_files(discover(tmp_path)[0], PatternSpec(("hello",)), collect_ranks=True)
    assert res.ranks == {0, 1, 2, 3, 12}
    assert res.counts == [2000]
    assert res.lines == 2002


def test_max_hits_caps_a_dense_marker(tmp_path: Path, plan_kind: str) -> None:
    (tmp_path / "a.log").write_text("[NeMo I x] step\n" * 1000 + "Connection reset\n")
    spec = PatternSpec((r"\[NeMo [IWE] ", "Connection reset"), max_hits=(3, None))
    (res,) = scan_files(discover(tmp_path)[0], spec, _Lines)
    assert res.counts == [3, 1]
    assert res.sink_result[-1] == ([1], 1001)


def test_required_literals_are_conservative() -> None:
    lits = required_literals(r"NCCL.*timeout|Watchdog caught")
    assert lits is not None and [[lit.text for lit in b] for b in lits] == [["NCCL", "timeout"], ["Watchdog caught"]]
    assert required_literals(r"\d+") is None
    assert required_literals(r"(?i)abc") is None  # global flags: leave it to the DFA
    assert required_literals(r"[[:alpha:]]x") is None  # POSIX class: parsers disagree
    assert required_literals(r"a?b*") is None


@pytest.mark.parametrize("ignore_case", [False, True])
@pytest.mark.parametrize(
    "text",
    [
        "Connection reset by peer",
        "WorkNCCL(",
        "Timeout(ms)=",
        "  time      : ",
        "op.preamble.length <= op.nbytes",
        "[rank3]:[E ProcessGroupNCCL.cpp:1234] a-b_c#d%e&f'g\"h/i;j<k>l=m@n`o~p",
        "x",
        "[:alpha:]",
    ],
)
def test_an_escaped_literal_needs_what_its_parse_needs(text: str, ignore_case: bool) -> None:
    """The plain-literal shortcut of :func:`required_literals` gives what reading the pattern's parse gives."""
    from debug_training_logs.logs.scan_patterns import _parsed_literals

    def texts(got: list[list[Any]] | None) -> list[list[tuple[str, bool]]] | None:
        return None if got is None else [[(lit.text, lit.fold) for lit in b] for b in got]

    pattern = re.escape(text)
    if "[:" in pattern:  # refused before either is tried (a POSIX class to RE2)
        assert required_literals(pattern, ignore_case) is None
        return
    assert texts(required_literals(pattern, ignore_case)) == texts(_parsed_literals(pattern, ignore_case))
    assert texts(required_literals(pattern, ignore_case)) == [[(text, ignore_case)]]


def test_a_literal_run_before_an_alternation_joins_each_alternative() -> None:
    """Python's parser factors ``(?:Error|Exception)`` into ``E(?:rror|xception)``: the literals required are the
    whole words (a prefilter on ``rror`` flags every ``srun: error:`` line), and an alternative without a literal
    keeps the run."""

    def texts(pattern: str) -> list[list[str]] | None:
        got = required_literals(pattern)
        return None if got is None else [[lit.text for lit in b] for b in got]

    assert texts(r"[A-Z]\w*(?:Error|Exception)(?:: |$)") == [["Error"], ["Exception"]]
    assert texts(r"NCCL (?:WARN|INFO) x") == [["NCCL WARN", " x"], ["NCCL INFO", " x"]]
    assert texts(r"ab(?:cd|\d+)e") == [["abcd", "e"], ["ab", "e"]]
    assert texts(r"ab(?:cd|)e") == [["abcd", "e"], ["ab", "e"]]
    assert texts(r"ab(?i:cd|ef)") == [["ab", "cd"], ["ab", "ef"]]  # a flag group keeps its own literals


@pytest.mark.parametrize("seed", range(40))
def test_required_literals_hold_in_every_match(seed: int) -> None:
    """Random patterns of literal runs, groups, alternations and classes: every line RE2 matches holds all the
    literals of one branch of :func:`required_literals` (the prefilter never drops a match)."""
    import random

    import re2

    rnd = random.Random(seed)
    atoms = ["ab", "a", "b", "E", "rr", "x", r"\d", "[ab]", ".", "c?"]

    def part(depth: int) -> str:
        if depth < 2 and rnd.random() < 0.35:
            alts = "|".join(part(depth + 1) for _ in range(rnd.randrange(2, 4)))
            return rnd.choice(["(?:%s)", "(%s)", "(?:%s)?", "(?:%s)+"]) % alts
        return "".join(rnd.choice(atoms) for _ in range(rnd.randrange(0, 3)))

    pattern = "".join(part(0) for _ in range(rnd.randrange(1, 4))) or "ab"
    branches = required_literals(pattern)
    if branches is None:
        return
    rx = re2.compile(pattern)
    alphabet = ["a", "b", "E", "r", "x", "1", "c", " "]
    for _ in range(400):
        line = "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 12)))
        if rx.search(line):
            assert any(all(lit.text in line for lit in b) for b in branches), (pattern, line, branches)


def test_invalid_and_backtracking_patterns_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="Invalid pattern 'a\\(b'"):
        compile_patterns(PatternSpec(("a(b",)))
    with pytest.raises(UserInputError, match="empty pattern"):
        compile_patterns(PatternSpec(("",)))
    # a back-reference forces the backtracking fallback; nested quantifiers make it exponential
    with pytest.raises(UserInputError, match="backtracking engine"):
        compile_patterns(PatternSpec((r"(a|aa)+\1$",)))
    compile_patterns(PatternSpec((r"(ab)\1",)))  # a harmless back-reference is fine


def test_fallback_timeout_during_the_scan_is_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.log").write_text("a" * 40 + "!\n")
    for module in (scan, scan_budget):  # read by start_each, and by the budget itself
        monkeypatch.setattr(module, "FALLBACK_BUDGET_S", 0.01)
    monkeypatch.setattr(scan, "compile_patterns", lambda spec: None)  # skip the probe: hit the scan-time guard
    with pytest.raises(UserInputError, match="used up this search's budget"):
        scan_files(discover(tmp_path)[0], PatternSpec((r"(a|aa)+\1$",)))


def test_damaged_files_are_reported_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "good.log").write_text("Connection reset\n" * 5)
    (tmp_path / "blob.log").write_bytes(b"\x00\x01\x02Connection reset\n" * 10)
    (tmp_path / "bad-utf8.log").write_bytes(b"\xff\xfe Connection reset \xc3\n")
    data = gzip.compress(b"Connection reset\n" * 20000)
    (tmp_path / "cut.log.gz").write_bytes(data[: len(data) // 2])
    by = {r.file.rel: r for r in scan_files(discover(tmp_path)[0], PatternSpec(("Connection reset",)), _Lines)}
    assert by["good.log"].counts == [5] and by["good.log"].problem is None
    assert by["blob.log"].counts == [0] and "binary" in (by["blob.log"].problem or "")
    assert by["bad-utf8.log"].counts == [1] and by["bad-utf8.log"].problem is None
    assert by["cut.log.gz"].problem and by["cut.log.gz"].counts[0] < 20000  # what could be read, and why not all


def test_lines_at_reads_the_numbered_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan_windows, "WINDOW", 1000)
    (tmp_path / "a.log").write_text("".join(f"line {i}\n" for i in range(1, 2001)))
    (lf,) = discover(tmp_path)[0]
    assert lines_at(lf, {1, 999, 2000, 5000}) == {1: "line 1", 999: "line 999", 2000: "line 2000"}


@pytest.mark.parametrize("window", [1000, scan_windows.WINDOW])
@pytest.mark.parametrize("compressed", [False, True])
def test_lines_at_reads_runs_of_lines_as_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int, compressed: bool
) -> None:
    """Runs of consecutive lines (decoded at once) and scattered ones read the same text: invalid and cut UTF-8 at
    a line's end, CRs, over-long lines (cut, or with ``keep_tail``), a last line without its newline."""
    monkeypatch.setattr(scan_windows, "WINDOW", window)
    rng = random.Random(window)
    pieces = [b"ok", b"\r", b"\xc3\xa9", b"\xc3", b"\xe2\x82", b"\xff", b"[rank3]: x", b"\x1b[0m"]
    lines = [b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 9))) for _ in range(3000)]
    for k in (5, 700, 2990):
        lines[k] = b"y" * (scan_types.MAX_LINE_CHARS + 50) + b"\xe2\x82tail\r"
    lines[-1] += b"end"  # (an empty last line after a newline would be no line)
    data = b"\n".join(lines)
    (tmp_path / ("a.log.gz" if compressed else "a.log")).write_bytes(gzip.compress(data) if compressed else data)
    (lf,) = discover(tmp_path)[0]
    scan_files([lf], PatternSpec(("ok",)))  # checkpoints for the plain file

    def want(w: int, keep_tail: int) -> str:
        raw = lines[w - 1]
        head = raw[: scan_types.MAX_LINE_CHARS]
        if keep_tail and len(raw) > scan_types.MAX_LINE_CHARS:
            head += b"\r" + raw[max(scan_types.MAX_LINE_CHARS, len(raw) - keep_tail) :]
        return head.decode("utf-8", errors="replace").rstrip("\r")

    runs = [set(range(1, 40)), set(range(600, 1001)), set(range(2950, 3010)), {1, 2, 3, 10, 11} | set(range(690, 710))]
    for wanted in [*runs, set(range(1, 3001))]:
        for keep_tail in (0, 40):
            got = lines_at(lf, wanted, keep_tail=keep_tail)
            assert got == {w: want(w, keep_tail) for w in wanted if w <= 3000}, (sorted(wanted)[:3], keep_tail)


@pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep (rg) not installed: rg cross-check skipped")
def test_counts_equal_ripgrep(tmp_path: Path) -> None:
    root = _write_corpus(tmp_path / "logs", seed=11)
    rg_patterns = [p for p in PATTERNS if "\\1" not in p]
    results = scan_files(discover(root)[0], PatternSpec(tuple(rg_patterns)))
    for pid, pat in enumerate(rg_patterns):
        out = subprocess.run(
            ["rg", "-c", "--no-filename", "-e", pat, "--"] + [str(r.file.path) for r in results],
            capture_output=True,
            text=True,
            check=False,
        )
        per_file = subprocess.run(["rg", "-c", "-e", pat, str(root)], capture_output=True, text=True, check=False)
        want = {Path(line.rsplit(":", 1)[0]).name: int(line.rsplit(":", 1)[1]) for line in per_file.stdout.split()}
        got = {r.file.rel: r.counts[pid] for r in results if r.counts[pid]}
        assert got == want, pat
        assert out.returncode in (0, 1)


def _step_job(path: Path, ranks: int, steps: int, stop: dict[int, int], gz: bool) -> list[str]:
    """A node file of ``ranks`` ranks, one metric line and one loader line per rank per step, rare errors; rank r
    stops logging after step ``stop[r]`` (a stalled rank)."""
    lines = [f"[rank{r}]: NCCL INFO comm 0x1 rank {r} nranks {ranks} - Init COMPLETE" for r in range(ranks)]
    for s in range(steps):
        for r in range(ranks):
            if s > stop.get(r, steps):
                continue
            lines.append(f"[rank{r}]: Epoch 0: {s}/{steps} [00:01<1:00, 2.0it/s, loss={3 - s / 1e4:.4f}] step={s}")
            lines.append(f"[rank{r}]: DEBUG:lhotse.dataset: rank {r} took 64 cuts from shard-{(r * 7 + s) % 997:06d}")
            if (s * ranks + r) % 5003 == 0:
                lines.append(f"[rank{r}]: Connection reset by peer at step {s}")
    lines.append("slurmstepd: error: *** STEP 1.0 ON node-1 CANCELLED AT 2026-05-21T08:02:45 ***")
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return lines


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_dense_patterns_are_sampled_with_every_ranks_first_and_last_hit(tmp_path: Path, gz: bool) -> None:
    ranks, steps, stalled = 8, 6000, 5
    lines = _step_job(tmp_path / ("node.log.gz" if gz else "node.log"), ranks, steps, {stalled: steps - 3}, gz)
    spec = PatternSpec((r"Epoch \d+: \d+/", "Connection reset"), dense=(True, False))
    (res,) = scan_files(discover(tmp_path)[0], spec, _Lines)
    seen: list[tuple[list[int], int]] = res.sink_result
    want_reset = [i + 1 for i, ln in enumerate(lines) if "Connection reset" in ln]
    want_metric = [i + 1 for i, ln in enumerate(lines) if "Epoch 0:" in ln]
    got_metric = [n for ids, n in seen if 0 in ids]
    # rare lines: every one, exact counts; dense lines: a bounded sample, marked as such
    assert [n for ids, n in seen if 1 in ids] == want_reset and res.counts[1] == len(want_reset)
    assert res.sampled == {0} and res.counts[0] == len(got_metric) < len(want_metric) // 20
    assert got_metric == sorted(got_metric) and set(got_metric) <= set(want_metric)
    assert got_metric[: scan_file.DENSE_HEAD_HITS] == want_metric[: scan_file.DENSE_HEAD_HITS]
    for r in range(ranks):  # every rank's last metric line is delivered, the stalled rank's included
        last = max(i + 1 for i, ln in enumerate(lines) if ln.startswith(f"[rank{r}]: Epoch"))
        assert last in got_metric, r
    # one per stride in between: the middle of the file is represented
    middle = [n for n in got_metric if len(lines) // 3 < n < 2 * len(lines) // 3]
    assert len(middle) >= (len(lines) * 60 // 3) // scan_dense.DENSE_STRIDE // 2
    assert res.lines == len(lines)
