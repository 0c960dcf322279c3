"""The evidence sink's fast paths give what the plain per-line reading gives, over presentation matrices.

* The batched progress path (runs of progress-only lines aggregated per rank, ``evidence_sink._progress_run``) and the
  per-line path (every line through ``_signals``) both equal a reference sink written the plain way (the regexes
  searched one by one on every line, as the sink did before): same tallies, samples, first/last lines per rank (with
  their ``after``/``before`` bounds), step-time and memory series, rank hosts, in the same order.
* The matrix: rank prefixes (``[rank5]:``, ``[rank5]:[W...]`` c10 headers, srun ``5:`` and ``P3 7:`` labels, torchrun
  tee ``[host:0]:``, Ray, an inline ``[rank3] `` after a time, none, ANSI colours, absurd rank numbers), progress
  bodies (Lightning bars in ASCII and with block characters, ``\\r``-joined bar updates, tqdm times past 10 hours,
  Megatron iteration lines with and without a date, NeMo ``train_step_timing``/``global_step``, unreadable numbers),
  time formats (full dates with ``-``/``/``/``T``/``_`` and fractions, c10 and glog headers, invalid months), LF and
  CR endings, interleaved with timed and untimed lines of other signals.
* ``parse_wall_time`` (its ``.dddddd`` guard and its memo) and ``rank_and_source_plain`` (its ``[rank`` guard) equal
  the plain regex code over the same matrix, and the batch's rank, time and step time equal the regexes on fuzzed
  lines.
"""

from __future__ import annotations

import contextlib
import random
import re
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from debug_training_logs.analysis import evidence_sink as ev
from debug_training_logs.analysis.evidence import gather_evidence
from debug_training_logs.analysis.evidence_signals import SIGNAL_NAMES
from debug_training_logs.formats import timestamps
from debug_training_logs.formats.prefixes import strip_ansi
from debug_training_logs.formats.timestamps import WallTime, parse_wall_time
from debug_training_logs.logs import attribution
from debug_training_logs.logs.attribution import RAY_PREFIX, rank_and_source_plain
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.sources import find_sources
from debug_training_logs.textcut import cut

# ---------------------------------------------------------------------------------------------------------------------
# The plain reference: every regex searched on every line, as the sink did before its fast paths

_FULL_DATE = re.compile(
    r"(?P<y>20\d\d)[-/](?P<mo>\d\d)[-/](?P<d>\d\d)[ T_](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<frac>\d{1,6}))?"
)
_C10 = re.compile(r"\[(?:rank\d+\]:\[)?[FEWIV](?P<md>\d{3,4}) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)\.\d{9} ")
_GLOG = re.compile(r"[FEWI](?<!\S.)(?P<md>\d{4}) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)\.(?P<us>\d{6}) +\d+ ")
_GLOBAL = re.compile(r"\[rank(\d{1,9})\]:")  # (a rank is nine digits at most: a longer number is no rank)
_INLINE = re.compile(r"\[rank(\d{1,9})\] ")
_STEP = (
    (re.compile(r"elapsed time per iteration \(ms\): ([\d.]+)"), 1.0),
    (re.compile(r"train_step_timing(?: in s)?[=: ]+([\d.]+)"), 1000.0),
)
_MEMORY = re.compile(r"memory \(MB\) \| allocated: ([\d.]+)")


def ref_time(line: str) -> WallTime | None:
    m = _FULL_DATE.search(line)
    if m:
        us = int((m.group("frac") or "0").ljust(6, "0")[:6])
        return _calendar(WallTime(*(int(m.group(k)) for k in ("y", "mo", "d", "h", "mi", "s")), us))
    c = _C10.search(line)
    if c:
        mo, d = divmod(int(c.group("md")), 100)
        t = _calendar(WallTime(None, mo, d, int(c.group("h")), int(c.group("mi")), int(c.group("s"))))
        if t is not None:  # (else a glog header later on the line may be one)
            return t
    g = _GLOG.search(line)
    if g:
        mo, d = divmod(int(g.group("md")), 100)
        us = int(g.group("us"))
        return _calendar(WallTime(None, mo, d, int(g.group("h")), int(g.group("mi")), int(g.group("s")), us))
    return None


def _calendar(t: WallTime) -> WallTime | None:
    """``t`` when it is a time of the calendar (a date without a year: of a leap year), else None."""
    try:
        datetime(t.year or 2000, t.month, t.day, t.hour, t.minute, t.second, t.microsecond)
    except ValueError:
        return None
    return t


_STATED = re.compile(
    r"\"rank\": ?(\d{1,9})\b|\[rank(?: |: ?)(\d{1,9})(?:/\d+)?\]|\[RANK (\d{1,9})\]|(?:^|[\s|\]])rank=(\d{1,9}) \|"
    r"|^\s*rank ?(\d{1,9}) ?[|:] |\[r(\d{1,9})(?:/\d{1,9})?(?: [^\[\]]{0,24})?\]"
)
_LOCAL = re.compile(r"^\[[A-Za-z_][\w.\-]*?(?<!\d)(\d{1,9})\]:")
_SRUN = re.compile(r"^\s*(?:P\d{1,9} )?(\d{1,9}): ")
_MPI_TAG = re.compile(r"^\[\d{1,9},(\d{1,9})\]<(?:stdout|stderr|stddiag)>:")


def ref_rank(text: str) -> tuple[int | None, str]:
    m = _GLOBAL.search(text)
    if m:
        return int(m.group(1)), "rank_prefix"
    i = _INLINE.search(text)
    if i:
        return int(i.group(1)), "inline_rank"
    r = RAY_PREFIX.search(text)
    if r and r.group("rank") is not None:
        return int(r.group("rank")), "ray"
    st = _STATED.search(text)
    if st:
        return int(next(g for g in st.groups() if g is not None)), "stated_rank"
    s = _SRUN.match(text)
    if s:
        return int(s.group(1)), "srun_label"
    o = _MPI_TAG.match(text)
    if o:
        return int(o.group(1)), "mpi_tag"
    return None, "none"


def ref_sink_rank(text: str) -> int | None:
    """The rank the evidence sink keys a line by: its global rank, else a torchrun --tee local rank as -(L + 1)."""
    r = ref_rank(text)[0]
    if r is None and (lm := _LOCAL.match(text)):
        return -(int(lm.group(1)) + 1)
    return r


def ref_step(text: str) -> float | None:
    for rx, scale in _STEP:
        m = rx.search(text)
        if m:
            try:
                return float(m.group(1)) * scale
            except ValueError:
                return None
    return None


class RefSink:
    """The signals part of :class:`ev.EvidenceSink`, every line read on its own with the plain regexes."""

    def __init__(self, rel: str) -> None:
        self.out = ev._FileHits(rel=rel)
        self._open: list[ev._Raw] = []

    def on_hit(self, ids: list[int], line_no: int, line: str) -> None:
        names = {SIGNAL_NAMES[i] for i in ids}
        text = strip_ansi(line)
        wt = ref_time(text)
        out = self.out
        rank = ref_sink_rank(text)
        raw = ev._Raw(line_no, cut(text), rank, wt, after=out.last_time[1] if out.last_time else None)
        if wt is not None:
            for waiting in self._open:
                waiting.before = wt
            self._open.clear()
            out.last_time = (line_no, wt)
        else:
            self._open.append(raw)
        if "nccl_init" in names:
            h = ev._NCCL_INIT_HOST.search(text)
            if h:
                r, n = int(h.group("rank")), int(h.group("nranks"))
                if n >= out.rank_host.get(r, (0, "", 0))[0]:
                    out.rank_host[r] = (n, h.group("host"), int(h.group("pid")))
        for name in sorted(names - {"nccl_init"}):
            t = out.tallies.setdefault(name, ev._Tally())
            t.count += 1
            if len(t.samples) < ev._SAMPLE_CAP[name]:
                t.samples.append(raw)
            t.first_by_rank.setdefault(rank, raw)
            t.last_by_rank[rank] = raw
            t.count_by_rank[rank] = t.count_by_rank.get(rank, 0) + 1
        if "progress" in names:
            for rx, scale in _STEP:
                m = rx.search(text)
                if m:
                    try:
                        value = float(m.group(1)) * scale
                    except ValueError:
                        break
                    out.step_ms.setdefault(rank, ev._Series()).add(line_no, wt, value)
                    break
        if "memory" in names:
            mm = _MEMORY.search(text)
            if mm:
                with contextlib.suppress(ValueError):
                    out.memory_mb.setdefault(rank, ev._Series()).add(line_no, wt, float(mm.group(1)))


# ---------------------------------------------------------------------------------------------------------------------
# The presentation matrix

PREFIXES = (
    "",
    "[rank5]:",
    "[rank5]: ",
    "[rank12]:[W1123 18:29:06.123456789 Module.cpp:7] ",
    "5: ",
    "  12: ",
    "P3 7: ",
    "\t3: ",
    "[gpu-a01:0]: ",
    "[default3]:",
    "(MegatronPolicyWorker[rank=12] pid=481552, ip=10.20.3.17) ",
    "(pid=4821) ",
    "2026-11-23 18:29:06,008 [rank3] INFO ",
    "\x1b[36m[rank5]:\x1b[0m ",
    "\x1b[32m5: \x1b[0m",
    "[rank123456789012345678901]: ",
    "12345678901234567890: ",
    "[rank7]x [rank8]: ",
    "3: [rank4]: ",
    "[rank]: ",
    '{"ts": "2026-11-23T18:29:06.008", "rank": 6, "msg": "',
    "2026-11-23 18:29:06,008 [rank 7/12] ",
    "[rank: 2] ",
    "[trainer11]:",
    "[1,5]<stdout>:",
    "[1,12]<stderr>: ",
    "[2,3]<stderr>:[rank4]: ",
    "[1,x]<stdout>:",
)
BODIES = (
    "Epoch 0:   3%|3         | 300/10000 [05:00<2:41:40, 1.00it/s, v_num=0, reduced_train_loss=3.101, "
    "global_step=299.0, consumed_samples=9568.0, train_step_timing in s=0.487]",
    "Epoch 0:   3%|▎         | 300/10000 [05:00<2:41:40, 1.00it/s, v_num=0, train_step_timing in s=0.486]",
    "Epoch 1:   1%|1  | 1/100 [00:01<01:39, 1.00it/s]\rEpoch 1:   2%|2  | 2/100 [00:02<01:38, 1.00it/s, "
    "train_step_timing in s=1.2]",
    "Epoch 0:  50%|#####     | 5000/10000 [13:00:01<12:03:04, 0.11it/s, train_step_timing in s=9.1]",
    " [2024-05-01 10:22:33] iteration      100/    1000 | consumed samples:        12800 | elapsed time per "
    "iteration (ms): 1234.5 | learning rate: 1.000E-04 | lm loss: 7.012E+00 |",
    " iteration      101/    1000 | consumed samples:        12928 | elapsed time per iteration (ms): 1230.0 |",
    "[NeMo I 2026-05-21 07:00:05 nemo_logging:381] global_step=41 train_step_timing=0.5 reduced_train_loss=2.1",
    "[NeMo I 2026/05/21 07:00:06.25 nemo_logging:381] global_step: 42, train_step_timing: 0.51",
    "global_step=43 train_step_timing=0.52 lr=1e-4",
    "step: 12 loss 3.2",
    "Epoch 3: 100%|##########| 10/10 [00:10<00:00, train_step_timing in s=0.5.]",
    "train_step_timing in s 1.5 then train_step_timing=2.5",
    "W1123 18:29:06.123000 1234 run.py:793] step=5 train_step_timing=0.7",
    "I1323 18:29:06.123000 1234 run.py:793] step=6 train_step_timing=0.8",
    "2026-11-23T18:29:07.5 step 7 train_step_timing=0.9",
    "2026-13-45_25:61:61 step 8",
    "Epoch 0:   4%|4         | 400/10000 [06:40<2:40:00, 1.00it/s, train_step_timing in s=0.490]",
)
ENDINGS = ("", "\r")
OTHERS = (  # (signal, line): lines of other signals that time (or do not time) the progress lines around them
    ("exception", "[rank5]: RuntimeError: CUDA failure"),
    ("exception", "2026-11-23 18:30:00,001 [rank3] ERROR ValueError: bad batch"),
    ("traceback", "[rank2]: Traceback (most recent call last):"),
    ("io_timeout", "[rank1]:[E1123 18:31:02.123456789 ProcessGroupNCCL.cpp:684] operations have timed out"),
    ("nccl_init", "gpu-a01:23450:23962 [0] NCCL INFO ncclCommInitRank comm 0x5 rank 3 nranks 1024 cudaDev 0"),
    ("nccl_init", "[2025-03-12 10:22:33] gpu-b07:77:78 [1] NCCL INFO comm 0x9 rank 9 nranks 16 - Init COMPLETE"),
    ("memory", "[rank0]: [Rank 0] (after 10 iterations) memory (MB) | allocated: 1234.5 | max allocated: 2000.0"),
)


def progress_lines() -> list[str]:
    return [p + b + e for p in PREFIXES for b in BODIES for e in ENDINGS]


def _ids(*names: str) -> list[int]:
    return sorted(SIGNAL_NAMES.index(n) for n in names)


def _sequence(seed: int, n: int) -> list[tuple[list[int], int, str]]:
    rng = random.Random(seed)
    pool = progress_lines()
    calls: list[tuple[list[int], int, str]] = []
    line_no = 0
    while len(calls) < n:
        line_no += rng.randint(1, 40)
        r = rng.random()
        if r < 0.08:
            name, line = rng.choice(OTHERS)
            calls.append((_ids(name), line_no, line))
        elif r < 0.1:
            calls.append((_ids("progress", "memory"), line_no, rng.choice(pool) + " memory (MB) | allocated: 99.5"))
        else:
            # a job's progress lines repeat one layout (odd seeds: untimed bars; even: lines with full dates, some
            # without): mostly one prefix family, sometimes any
            common = (
                BODIES[:3] + BODIES[5:6] + BODIES[16:] if seed % 2 else (BODIES[4], BODIES[6], BODIES[14], BODIES[5])
            )
            body = rng.choice(common) if r < 0.9 else rng.choice(BODIES)
            prefix = f"[rank{rng.randint(0, 7)}]: " if r < 0.7 else rng.choice(PREFIXES)
            calls.append((_ids("progress"), line_no, prefix + body + rng.choice(ENDINGS)))
    return calls


def _one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """No batch: every progress line goes through ``_signals`` alone (as a progress line that also holds another
    signal does)."""
    route = ev._route
    monkeypatch.setattr(ev, "_ROUTES", {})
    monkeypatch.setattr(ev, "_route", lambda ids: replace(route(ids), batched=False))
    monkeypatch.setattr(ev.EvidenceSink, "bulk_id", lambda self: None)


def _hits(calls: list[tuple[list[int], int, str]], batched: bool, monkeypatch: pytest.MonkeyPatch) -> str:
    if not batched:
        _one_by_one(monkeypatch)
    sink = ev.EvidenceSink(LogFile(path=Path("node-0.log"), rel="node-0.log", size=0, compression="none"))
    for ids, line_no, line in calls:
        sink.on_hit(ids, line_no, line)
    sink.finish()  # reads the batch; the series then travel apart from the hits (_FileSeries): compare the whole
    return repr(sink.out)


def _reference(calls: list[tuple[list[int], int, str]]) -> str:
    ref = RefSink("node-0.log")
    for ids, line_no, line in calls:
        ref.on_hit(ids, line_no, line)
    return repr(ref.out)


# ---------------------------------------------------------------------------------------------------------------------
# Tests


def test_time_and_rank_equal_the_plain_regexes_over_the_matrix() -> None:
    lines = [*progress_lines(), *(line for _n, line in OTHERS)]
    assert len(lines) == len(PREFIXES) * len(BODIES) * len(ENDINGS) + len(OTHERS) > 600
    timestamps._MEMO.clear()
    for _round in range(2):  # the second round reads every time from the memo
        for line in lines:
            text = strip_ansi(line)
            assert parse_wall_time(text) == ref_time(text), line
            assert rank_and_source_plain(text) == ref_rank(text), line
            assert attribution.line_rank(line).rank == ref_rank(text)[0], line
    kinds = {ref_rank(strip_ansi(x))[1] for x in lines}
    assert kinds == {"rank_prefix", "inline_rank", "ray", "stated_rank", "srun_label", "mpi_tag", "none"}
    assert sum(ref_time(strip_ansi(x)) is not None for x in lines) > 100


def test_time_memo_is_bounded_and_keeps_invalid_dates_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timestamps, "_MEMO_CAP", 8)
    timestamps._MEMO.clear()
    for s in range(30):
        line = f"[2026-11-23 10:00:{s:02d}] x"
        assert parse_wall_time(line) == WallTime(2026, 11, 23, 10, 0, s)
        assert len(timestamps._MEMO) <= 8
    # an invalid c10 month falls through to the glog header of the same line, memo or not
    line = "[E1323 10:00:01.123456789 a.cpp:1] I1123 10:00:02.000001 77 b.py:2] x"
    for _ in range(2):
        assert parse_wall_time(line) == ref_time(line) == WallTime(None, 11, 23, 10, 0, 2, 1)


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "per-line"])
@pytest.mark.parametrize("seed", range(12))
def test_sink_equals_the_plain_reading(seed: int, batched: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _sequence(seed, 600)
    assert _hits(calls, batched, monkeypatch) == _reference(calls)


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "per-line"])
def test_every_prefix_and_body_alone_and_in_runs(batched: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = progress_lines()
    single = [(_ids("progress"), 10 * i + 1, line) for i, line in enumerate(lines)]
    assert _hits(single, batched, monkeypatch) == _reference(single)
    for body in BODIES:  # one layout per run, every prefix: runs the helper answers for whole, or stops in
        calls = [(_ids("progress"), i + 1, p + body) for i, p in enumerate(PREFIXES * 3)]
        assert _hits(calls, batched, monkeypatch) == _reference(calls), body


def test_batches_flush_at_their_bound_and_series_thin_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ev, "_BATCH_LINES", 7)
    monkeypatch.setattr(ev, "SERIES_POINTS", 16)
    calls = _sequence(99, 900)
    assert _hits(calls, True, monkeypatch) == _reference(calls)
    many = [(_ids("progress"), i + 1, f"[rank{i % 3}]: step {i} train_step_timing={i}.5") for i in range(400)]
    assert _hits(many, True, monkeypatch) == _reference(many)


def _fuzz_lines(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    parts = (
        "[rank", "]", ":", " ", "0", "7", "42", "P", "P1 ", "3: ", "train_step_timing", " in s", "=", ".", "1.5",
        "elapsed time per iteration (ms): ", "\t", "\x1c", "\x0b", "pid=", "é", "\x1b[0m", "12:30:45", "1:02:03",
        "a", "x[rank9] ", "99999999999999999999", "2026-11-23 10:22:33", "2026/11/23T10:22:3", ".123456", ".12345",
        "[13:00:01<12:03:04", "W1123 10:22:33.123456 77 ", "[E1123 10:22:33.123456789 ", "█", "▎", "٣", "𝟘", "\u00a0",
        "\u2003", "\u0085", "2٠26-11-23 10:22:33", "20٢6-11-23 10:2٣:33", "[rank=3]", "(Worker pid=12, ip=1.2.3.4) ",
        "\x1b[36m", "\x1b[", "\x1b[1;2?m", "\x1b[9", "rank", "rank=", "[RANK ", " | ", "| ", "rank 4: ",
    )  # fmt: skip
    return ["".join(rng.choice(parts) for _ in range(rng.randint(0, 12))) for _ in range(n)]


@pytest.mark.parametrize("seed", range(4))
def test_batch_rank_time_and_step_equal_the_regexes_on_fuzzed_lines(seed: int) -> None:
    timed = stepped = 0
    for line in _fuzz_lines(seed, 5000):
        stats, points, timed_idx, timed_wt = ev._progress_run([line], [1])
        text = strip_ansi(line)
        wt = ref_time(text)
        timed += wt is not None
        assert (timed_idx, timed_wt) == (([0], [wt]) if wt is not None else ([], [])), repr(line)
        rank = ref_sink_rank(text)
        assert list(stats) == [rank] and stats[rank] == [0, 0, 1], repr(line)
        step = ref_step(text)
        stepped += step is not None
        assert points == ({} if step is None else {rank: [(1, wt, step)]}), repr(line)
    assert timed > 100 and stepped > 100


def test_batch_of_nothing_and_of_repeated_times() -> None:
    assert ev._progress_run([], []) == ({}, {}, [], [])
    same = ["[2026-01-02 03:04:05] a", "[2026-01-02 03:04:05] b", "[2026-01-02 03:04:06] c", "d"]
    stats, _points, timed_idx, timed_wt = ev._progress_run(same, [1, 2, 3, 4])
    assert stats == {None: [0, 3, 4]}
    assert (timed_idx, timed_wt) == (
        [0, 1, 2],
        [WallTime(2026, 1, 2, 3, 4, 5), WallTime(2026, 1, 2, 3, 4, 5), WallTime(2026, 1, 2, 3, 4, 6)],
    )


def _write_job(root: Path) -> Path:
    logs = root / "logs"
    logs.mkdir()
    rng = random.Random(7)
    for node in range(2):
        out: list[str] = [f"gpu-a0{node}:100:101 [0] NCCL INFO comm 0x1 rank {8 * node} nranks 16 - Init COMPLETE"]
        for step in range(400):
            rank = 8 * node + rng.randint(0, 7)
            prefix = rng.choice((f"[rank{rank}]: ", f"{rank}: ", f"\x1b[36m[rank{rank}]:\x1b[0m "))
            body = rng.choice(BODIES[:4] + BODIES[5:6] + BODIES[8:10])
            out.append(prefix + body.replace("train_step_timing in s=0.487", f"train_step_timing in s=0.{step}"))
            if step % 97 == 5:
                out.append(f"[rank{rank}]: 2026-11-23 18:{step % 60:02d}:06,008 [rank{rank}] ERROR RuntimeError: x")
        (logs / f"node-{node}.log").write_text("\n".join(out) + "\n")
    return logs


def _worker_view(logs: Path) -> str:
    from debug_training_logs.logs.scan_cache import CACHE

    CACHE.clear()
    w = gather_evidence(find_sources(logs)).worker
    series = {k: repr(getattr(w, k)) for k in ("step_ms", "memory_mb")}
    return repr((w.tallies, w.counts, w.counts_by_rank, w.first_by_rank, w.last_by_rank, series, w.rank_host))


@pytest.mark.parametrize("batch", [None, 7], ids=["default batch", "batch of 7"])
def test_a_real_scan_gives_the_same_worker_evidence_in_bulk_and_line_by_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int | None
) -> None:
    """The scan hands most progress lines to the sink in bulk (``on_bulk``, read in runs, also across batch bounds);
    read one by one instead, each through ``_signals``: the same evidence."""
    logs = _write_job(tmp_path)
    if batch is not None:
        monkeypatch.setattr(ev, "_BATCH_LINES", batch)
    taken: list[int] = []
    on_bulk = ev.EvidenceSink.on_bulk
    monkeypatch.setattr(
        ev.EvidenceSink, "on_bulk", lambda s, nos, lines: (taken.append(len(lines)), on_bulk(s, nos, lines))
    )
    bulk = _worker_view(logs)
    assert sum(taken) > 0
    _one_by_one(monkeypatch)
    taken.clear()
    per_line = _worker_view(logs)
    assert not taken
    assert bulk == per_line
    assert "progress" in bulk and "RuntimeError" in bulk and "gpu-a01" in bulk
