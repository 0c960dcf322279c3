"""The NCCL state table: every rank's watchdog state per process group, and who the straggler is.

One scan of the job (:func:`~debug_training_logs.analysis.inventory.scan_job`) selects candidate lines with the
literal needles of :mod:`debug_training_logs.formats.torch_nccl`; a :class:`NcclSink` in each worker parses only those
lines (joining hard-wrapped messages, re-reading an over-long tqdm line's tail) and sends back compact events. Here
the events become one row per (global rank, process group), then every PG is classified from ALL its rows:

* ``straggler``: one or few ranks never entered the collective (enqueued == completed while the others have work
  pending), or only observed another rank's dump signal while the others detected their own timeout, or logged no
  state at all for the PG (absent) while the others wait in it;
* ``fabric``: every member entered the same collective (enqueued > completed) and each detected its own timeout;
* ``root_ahead``: the PG's rank 0 (the broadcast root) is ahead of the others by k ops (compared with the ~3
  collectives a training step issues);
* ``mixed``: outliers in both directions or too many to call a straggler;
* ``incomplete``: ranks are missing from the logs (or a member cannot be identified), so no straggler is named from a
  subset: the missing ranks could hold it.

SeqNums are compared only within one PG identity (GUID/name, else uid). The global rank comes from ``[rankN]:`` (or
the line's other attribution), never from the PG-local, possibly stale ``[Rank N]``. Times are the workers' wall
clock as written (no zone, year inferred); the nanosecond fraction is monotonic and ignored.

Must not: open files other than through ``logs/`` (scan and the targeted re-read of wrapped lines), import ``mcp``.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from debug_training_logs.analysis.inventory import Inventory, LineKeep, scan_job
from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.logs.attribution import line_rank
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.scan import MAX_LINE_CHARS, lines_at, literal_pattern
from debug_training_logs.models import TEXT_CUT, Coverage, cut
from debug_training_logs.ranges import format_ranges

NCCL_PATTERNS: tuple[str, ...] = tuple(literal_pattern(n) for n in tn.NEEDLES)
"""The scan patterns: the parser's literal needles, escaped."""

PER_STEP_COLLECTIVES = 3
"""Collectives a NeMo/Lightning DDP step issues on the default PG: PreemptionCallback broadcast + DDP allreduce +
broadcast_buffers. A root ``k`` ops ahead is ``k / 3`` steps ahead."""

DEFAULT_LIMIT = 64
"""Rows (and outliers) listed by default: all outlier/straggler rows first, then a sample of majority rows."""

MAX_EVIDENCE = 16
MAX_WRAP_PARTS = 4
"""A hard-wrapped message is re-joined from at most this many physical lines."""


# ---------------------------------------------------------------------------------------------------------------------
# Worker side: the sink
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hit:
    """One parsed candidate line, compact enough to cross the process boundary."""

    line: int
    rank: int | None
    """Global rank from ``[rankN]:``, a Ray ``[rank=N]`` or an ``srun --label`` prefix; None when the line has none."""
    header: tn.Header | None
    event: tn.Event
    text: str
    """The line (joined when it was hard-wrapped), cut for citation."""
    joined: int = 1
    """Physical lines the message spanned (2+ for a hard-wrapped message)."""


@dataclass
class FileEvents:
    """What one file's sink found."""

    rel: str
    hits: list[Hit] = field(default_factory=list)
    unparsed: int = 0
    """Candidate lines that held a needle but no complete message, even after re-joining neighbours."""
    rejoined: int = 0
    """Messages re-joined from hard-wrapped pieces or re-read in full (over-long lines)."""
    deduplicated: int = 0
    """Watchdog lines Ray folded away (`` [repeated Nx across cluster]``: the sum of N)."""


RAY_REPEATED = re.compile(r"\[repeated (\d+)x across cluster\]")
"""Ray's log deduplication marker: lines that differ only in numbers (ranks, SeqNums!) were folded into one."""


class NcclSink:
    """Parses the candidate lines of one file inside the scan worker (see :mod:`debug_training_logs.logs.scan`)."""

    def __init__(self, lf: LogFile) -> None:
        self.lf = lf
        self.out = FileEvents(lf.rel)
        self.pending: dict[int, str] = {}
        """Line number -> why it needs its neighbours (``head``/``tail``) or its full text (``long``)."""
        self.fragments: dict[int, Hit] = {}
        """Lines that parsed but carry no rank and do not start a record: kept unless re-joining finds better."""

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        if "[repeated " in line:
            rep = RAY_REPEATED.search(line)
            if rep is not None:
                self.out.deduplicated += int(rep.group(1))
        p = tn.parse_line(line)
        if p is not None:
            hit = _hit(line_no, line, p)
            if hit.rank is None and _needs_rank(p) and not tn.starts_new_record(line):
                self.fragments[line_no] = hit  # maybe the tail of a wrapped record: its head has the rank
                self.pending[line_no] = "tail"
                return
            self.out.hits.append(hit)
            return
        if len(line) >= MAX_LINE_CHARS:
            self.pending[line_no] = "long"
            return
        why = tn.looks_cut(line)
        if why is not None:
            self.pending[line_no] = why
        else:
            self.out.unparsed += 1

    def finish(self) -> FileEvents:
        if self.pending:
            self._repair()
        self.out.hits.sort(key=lambda h: h.line)
        return self.out

    def _repair(self) -> None:
        """Re-read the few lines around cut messages and parse the joined text (hard wraps, over-long lines)."""
        wanted: set[int] = set()
        for n, why in self.pending.items():
            if why == "long":
                wanted.add(n)
            else:
                wanted.update(range(max(1, n - MAX_WRAP_PARTS + 1), n + MAX_WRAP_PARTS))
        texts = lines_at(self.lf, wanted, keep_tail=MAX_LINE_CHARS)
        have = {h.line for h in self.out.hits}
        for n, why in sorted(self.pending.items()):
            if n in have:
                continue
            if why == "long":
                p = tn.parse_line(texts.get(n, ""))
                if p is not None:
                    self.out.hits.append(_hit(n, texts[n], p))
                    self.out.rejoined += 1
                    have.add(n)
                else:
                    self.out.unparsed += 1
                continue
            found = _join_around(n, why, texts)
            if found is None or (n in self.fragments and _rank_of(found) is None):
                if n in self.fragments:
                    self.out.hits.append(self.fragments[n])
                    have.add(n)
                else:
                    self.out.unparsed += 1
                continue
            start, parts, p = found
            if start in have:
                continue
            self.out.hits.append(_hit(start, tn.join_wrapped(parts), p, joined=len(parts)))
            self.out.rejoined += 1
            have.add(start)


def _needs_rank(p: tn.Parsed) -> bool:
    """Events that mean nothing without the rank that logged them (the ChildFailedError rows carry their own; the
    ``what():`` copy repeats a line that had its rank)."""
    ev = p.event
    if isinstance(ev, tn.ChildFailureRank | tn.ChildFailureExit | tn.ChildFailureSignal):
        return False
    return not (isinstance(ev, tn.WatchdogTerminated) and ev.headerless)


def _rank_of(found: tuple[int, list[str], tn.Parsed]) -> int | None:
    _start, parts, p = found
    return p.global_rank if p.global_rank is not None else line_rank(parts[0]).rank


def _hit(line_no: int, line: str, p: tn.Parsed, joined: int = 1) -> Hit:
    rank = p.global_rank
    if rank is None and not isinstance(p.event, tn.ChildFailureRank | tn.ChildFailureExit | tn.ChildFailureSignal):
        rank = line_rank(line).rank
    return Hit(line_no, rank, p.header, p.event, cut(tn.strip_ansi(line)), joined)


def _join_around(n: int, why: str, texts: dict[int, str]) -> tuple[int, list[str], tn.Parsed] | None:
    """Re-join the hard-wrapped record holding line ``n``: (first line, pieces, parse), or None.

    The record starts at the nearest line at or before ``n`` that begins a record of its own (a c10 header, a prefix)
    with no other record start in between; it ends at the first following line that completes the message, without
    crossing into the next record. ``why`` (``head``/``tail``) only says where the needle was seen.
    """
    a = n
    for k in range(n, max(0, n - MAX_WRAP_PARTS), -1):
        t = texts.get(k)
        if t is None:
            break
        a = k
        if tn.starts_new_record(t):
            break
    else:
        a = n
    if a != n and not tn.starts_new_record(texts.get(a, "")):
        a = n  # no record start within reach: the needle line is the start
    parts: list[str] = []
    for k in range(a, a + MAX_WRAP_PARTS):
        t = texts.get(k)
        if t is None or (k > a and tn.starts_new_record(t)):
            break
        parts.append(t)
        if k < n:
            continue
        parsed = tn.parse_line(tn.join_wrapped(parts))
        if parsed is not None:
            return a, list(parts), parsed
    return None


# ---------------------------------------------------------------------------------------------------------------------
# Results (plain data; tools/nccl_state_table.py exposes them as pydantic models with descriptions)
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class EvidenceLine:
    """A cited line (``models.Evidence`` in the tool's result)."""

    file: str
    line: int
    text: str


@dataclass
class Row:
    """One (global rank, process group) that logged NCCL watchdog state."""

    rank: int
    pg: str | None
    pg_desc: str | None
    pg_rank: int | None
    seq: int | None = None
    op_type: str | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    timeout_ms: int | None = None
    ran_for_ms: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    pending: int | None = None
    signal: str = "none"
    first_to_dump: bool = False
    dump_signal_from_rank: int | None = None
    timeout_time: str | None = None
    timeout_time_utc: str | None = None
    timeout_time_year_inferred: bool = False
    collective_start_time: str | None = None
    signal_time: str | None = None
    pg_id: str | None = None
    file: str | None = None
    line: int | None = None
    facts: list[str] = field(default_factory=list)
    stale_rank_label: int | None = None
    """The ``[Rank N]`` WorkNCCL printed when it differs from the PG rank (stale static, torch 2.4-2.13)."""


@dataclass
class Majority:
    """The (seq, enqueued, completed, op, signal) most of a PG's rows share, and which ranks."""

    seq: int | None
    op_type: str | None
    last_enqueued: int | None
    last_completed: int | None
    signal: str
    ranks: str
    count: int


@dataclass
class ProcessGroupResult:
    """One PG's verdict from all its rows (field meanings: ``tools/nccl_state_table.ProcessGroup``)."""

    pg: str | None
    pg_desc: str | None
    is_default_pg: bool
    ranks: str
    rank_count: int
    classification: str
    reason: str
    straggler_ranks: list[int] = field(default_factory=list)
    suspect_ranks: list[int] = field(default_factory=list)
    ahead_ranks: list[int] = field(default_factory=list)
    ahead_by: int | None = None
    ahead_steps: float | None = None
    absent_ranks: str = ""
    absent_pg_ranks: str = ""
    missing_ranks: str = ""
    majority: Majority | None = None
    pg_ids: list[str] = field(default_factory=list)
    straggler_reasons: dict[str, str] = field(default_factory=dict)
    """Per straggler/suspect rank: why, in words."""


@dataclass
class Outlier:
    """A row that differs from its PG's majority: ``differs`` maps field -> [its value, the majority's]."""

    rank: int
    pg: str | None
    differs: dict[str, list[Any]]
    how: str


@dataclass
class RankFact:
    """A neighbouring fact (watchdog terminated, heartbeat kill, exit signal ...) and the ranks that logged it."""

    kind: str
    detail: str
    ranks: str
    count: int
    evidence: EvidenceLine | None


@dataclass
class TimeBasis:
    """How the table's times read: worker-local wall clock, year from full dates elsewhere in the logs."""

    year: int | None
    year_inferred: bool
    zone: str


@dataclass
class NcclTable:
    """The whole result of :func:`nccl_state_table`."""

    summary: str
    coverage: Coverage
    rows: list[Row]
    rows_total: int
    rows_truncated: int
    ranks_without_nccl_state: str
    missing_ranks: str
    process_groups: list[ProcessGroupResult]
    outliers: list[Outlier]
    outliers_truncated: int
    straggler_ranks: list[int]
    first_dump_rank: int | None
    rank_facts: list[RankFact]
    evidence: list[EvidenceLine]
    time_basis: TimeBasis
    message_families: list[str]
    unattributed_lines: int
    unparsed_lines: int
    rejoined_messages: int
    deduplicated_lines: int


# ---------------------------------------------------------------------------------------------------------------------
# Building rows
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class _Ev:
    """A hit with its file and resolved rank (parent side)."""

    file: str
    hit: Hit

    @property
    def ev(self) -> tn.Event:
        return self.hit.event


def _pg_key(pg: tn.PGPrefix | None) -> str | None:
    return pg.key if pg is not None and pg.style != "rank" else None


@dataclass
class _RowBuild:
    row: Row
    status: _Ev | None = None
    timeout: _Ev | None = None
    blocking: _Ev | None = None
    dump: _Ev | None = None
    observed: _Ev | None = None
    first: _Ev | None = None
    detected_evidence: bool = False
    observed_evidence: bool = False


class _TimeText:
    def __init__(self, year: int | None) -> None:
        self.year = year

    def dt(self, h: tn.Header | None) -> datetime | None:
        wt = tn.wall_time(h)
        if wt is None or self.year is None:
            return None
        month, day, hms = wt
        try:
            return datetime.fromisoformat(f"{self.year:04d}-{month:02d}-{day:02d}T{hms}")
        except ValueError:
            return None

    def iso(self, h: tn.Header | None) -> str | None:
        d = self.dt(h)
        if d is not None:
            return d.isoformat(timespec="seconds")
        wt = tn.wall_time(h)
        if wt is None:
            return None
        month, day, hms = wt
        return f"--{month:02d}-{day:02d}T{hms}"


def _rows_for_rank(rank: int, evs: list[_Ev], times: _TimeText) -> list[_RowBuild]:
    builds: dict[str | None, _RowBuild] = {}

    def build(pg: tn.PGPrefix | None) -> _RowBuild:
        key = _pg_key(pg)
        b = builds.get(key)
        if b is None:
            b = builds[key] = _RowBuild(
                Row(
                    rank=rank,
                    pg=key,
                    pg_desc=pg.pg_desc if pg is not None and pg.style != "rank" else None,
                    pg_rank=pg.pg_rank if pg is not None and pg.style != "rank" else None,
                    pg_id=pg.pg_id if pg is not None and pg.style in ("uid", "guid") else None,
                )
            )
        elif pg is not None and pg.style != "rank" and b.row.pg_desc is None and pg.pg_desc:
            b.row.pg_desc = pg.pg_desc
        return b

    statuses = [e for e in evs if isinstance(e.ev, tn.StatusLine)]
    # 1. state lines that carry their PG
    for e in evs:
        ev = e.ev
        if isinstance(ev, tn.StatusLine):
            b = build(ev.pg)
            if b.status is None:
                b.status = e
            b.detected_evidence = True
        elif isinstance(ev, tn.DumpSignal):
            b = build(ev.pg)
            if b.dump is None or (b.dump.hit.event.origin == "local" and ev.origin == "remote"):  # type: ignore[union-attr]
                b.dump = e
            if ev.origin == "local":
                b.detected_evidence = True
            else:
                b.observed_evidence = True
        elif isinstance(ev, tn.DumpObserved):
            b = build(ev.pg)
            b.observed = b.observed or e
            b.observed_evidence = True
        elif isinstance(ev, tn.FirstToDump):
            b = build(ev.pg)
            b.first = b.first or e
    # 2. timeouts: WorkNCCL prints no PG (2.0-2.13): the status line of the same rank and SeqNum names it
    for e in evs:
        ev = e.ev
        if not isinstance(ev, tn.WatchdogTimeout | tn.BlockingWaitTimeout):
            continue
        pg = ev.pg
        if pg is None:
            same = [s for s in statuses if s.ev.seq == ev.work.seq]  # type: ignore[union-attr]
            if same:
                near = min(same, key=lambda s: (s.file != e.file, abs(s.hit.line - e.hit.line)))
                pg = near.ev.pg  # type: ignore[union-attr]
        b = build(pg)
        if isinstance(ev, tn.WatchdogTimeout):
            if b.timeout is None:
                b.timeout = e
        elif b.blocking is None:
            b.blocking = e
        b.detected_evidence = True
    out = []
    for b in builds.values():
        if b.status or b.timeout or b.blocking or b.dump or b.observed:
            _fill(b, times)
            out.append(b)
    return out


def _fill(b: _RowBuild, times: _TimeText) -> None:
    r = b.row
    work_ev = b.timeout or b.blocking
    if work_ev is not None:
        w = work_ev.ev
        assert isinstance(w, tn.WatchdogTimeout | tn.BlockingWaitTimeout)
        r.seq, r.op_type = w.work.seq, w.work.op_type
        r.numel_in, r.numel_out, r.timeout_ms = w.work.numel_in, w.work.numel_out, w.work.timeout_ms
        if isinstance(w, tn.WatchdogTimeout):
            r.ran_for_ms = w.ran_for_ms
        if r.pg_rank is None and w.work_rank is not None and (work_ev.hit.header is None or
                                                              work_ev.hit.header.style != "c10_2.4+"):  # fmt: skip
            r.pg_rank = w.work_rank  # <= 2.3: [Rank N] is this PG's rank (no static cache yet)
        if r.pg_rank is not None and w.work_rank is not None and w.work_rank != r.pg_rank:
            r.stale_rank_label = w.work_rank
    if b.status is not None:
        s = b.status.ev
        assert isinstance(s, tn.StatusLine)
        if r.seq is None:
            r.seq = s.seq
        r.last_enqueued, r.last_completed = s.last_enqueued, s.last_completed
    elif b.dump is not None:
        d = b.dump.ev
        assert isinstance(d, tn.DumpSignal)
        r.last_enqueued, r.last_completed = d.last_enqueued, d.last_completed
    if r.last_enqueued is not None and r.last_completed is not None:
        r.pending = r.last_enqueued - r.last_completed
    if b.detected_evidence:
        r.signal = "detected"
    elif b.observed_evidence:
        r.signal = "observed"
    r.first_to_dump = b.first is not None
    if b.dump is not None and isinstance(b.dump.ev, tn.DumpSignal) and b.dump.ev.origin == "remote":
        r.dump_signal_from_rank = b.dump.ev.from_rank
    when = work_ev or b.status
    if when is not None and (r.signal == "detected"):
        r.timeout_time = times.iso(when.hit.header)
        r.timeout_time_year_inferred = r.timeout_time is not None
        start = times.dt(when.hit.header)
        span = r.ran_for_ms if r.ran_for_ms is not None else r.timeout_ms
        if start is not None and span is not None:
            # the line says only the second: take its middle, subtract the span, round to the second
            began = start + timedelta(milliseconds=500) - timedelta(milliseconds=span)
            r.collective_start_time = (began + timedelta(microseconds=500_000)).replace(microsecond=0).isoformat()
    sig = b.observed or b.dump
    if sig is not None:
        r.signal_time = times.iso(sig.hit.header)
    cite = b.status or b.timeout or b.blocking or b.dump or b.observed
    if cite is not None:
        r.file, r.line = cite.file, cite.hit.line


# ---------------------------------------------------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------------------------------------------------


def _is_default(pg: str | None, desc: str | None, rows: list[Row]) -> bool:
    if pg == "0" or desc == "default_pg":
        return True
    return pg is None and all(r.pg_rank is None or r.pg_rank == r.rank for r in rows)


def _sig(r: Row) -> tuple[Any, ...]:
    return (r.seq, r.last_enqueued, r.last_completed, r.op_type, r.signal)


def _infer_members(rows: list[Row]) -> tuple[dict[int, int], list[int]]:
    """PG rank -> global rank for PG ranks missing between the logged ones, when the members form an arithmetic
    progression (Megatron's TP/DP/PP groups do); and the PG ranks that stay unresolved."""
    seen = {r.pg_rank: r.rank for r in rows if r.pg_rank is not None}
    if not seen:
        return {}, []
    gaps = [k for k in range(max(seen) + 1) if k not in seen]
    if not gaps:
        return {}, []
    pts = sorted(seen.items())
    if len(pts) >= 2:
        (p0, g0), (p1, g1) = pts[0], pts[1]
        stride, rem = divmod(g1 - g0, p1 - p0)
        if rem == 0 and stride != 0 and all(g == g0 + stride * (p - p0) for p, g in pts):
            return {k: g0 + stride * (k - p0) for k in gaps}, []
    return {}, gaps


def _classify(
    pg: str | None,
    desc: str | None,
    rows: list[Row],
    inv_ranks: set[int],
    missing: set[int],
    silent: set[int],
    world: int | None,
) -> tuple[ProcessGroupResult, list[Outlier]]:
    is_default = _is_default(pg, desc, rows)
    ranks_here = {r.rank for r in rows}
    counts = Counter(_sig(r) for r in rows)
    major_sig, major_n = max(counts.items(), key=lambda kv: (kv[1], kv[0][4] == "detected"))
    major_rows = [r for r in rows if _sig(r) == major_sig]
    m_seq, m_e, m_c, m_op, m_signal = major_sig
    m_pending = (m_e - m_c) if m_e is not None and m_c is not None else None
    majority = Majority(m_seq, m_op, m_e, m_c, m_signal, format_ranges(r.rank for r in major_rows), major_n)

    # who should be here but logged nothing for this PG
    absent_pg: list[int] = []
    if is_default:
        expected = set(range(world)) if world else set(inv_ranks)
        absent = (expected & inv_ranks) - ranks_here
        absent_missing = (expected - ranks_here) & missing
    else:
        inferred, absent_pg = _infer_members(rows)
        absent = {g for g in inferred.values() if g in inv_ranks}
        absent_missing = {g for g in inferred.values() if g not in inv_ranks}

    outliers: list[Outlier] = []
    behind: dict[int, list[str]] = defaultdict(list)
    ahead: dict[int, list[str]] = defaultdict(list)
    names = ("seq", "last_enqueued", "last_completed", "op_type", "signal")
    for r in rows:
        s = _sig(r)
        if s == major_sig:
            continue
        differs = {n: [a, b] for n, a, b in zip(names, s, major_sig, strict=True) if a != b}
        how: list[str] = []
        pend = r.pending
        if pend == 0 and (m_pending or 0) > 0:
            how.append(f"enqueued == completed ({r.last_enqueued}): never entered the collective the others wait in")
            behind[r.rank].append(how[-1])
        if r.signal != "detected" and m_signal == "detected":
            src = f" from rank {r.dump_signal_from_rank}" if r.dump_signal_from_rank is not None else ""
            how.append(f"{r.signal} the dump signal{src} instead of detecting a timeout of its own")
            behind[r.rank].append(how[-1])
        if r.last_enqueued is not None and m_e is not None:
            if r.last_enqueued < m_e and not (pend == 0 and (m_pending or 0) > 0):
                how.append(f"behind: last enqueued {r.last_enqueued} < {m_e}")
                behind[r.rank].append(how[-1])
            elif r.last_enqueued > m_e:
                how.append(f"ahead: last enqueued {r.last_enqueued} > {m_e} by {r.last_enqueued - m_e}")
                ahead[r.rank].append(how[-1])
        elif r.seq is not None and m_seq is not None and r.seq != m_seq:
            d = r.seq - m_seq
            how.append(f"timed out at SeqNum {r.seq} vs {m_seq} ({'ahead' if d > 0 else 'behind'} by {abs(d)})")
            (ahead if d > 0 else behind)[r.rank].append(how[-1])
        if r.op_type != m_op and r.op_type is not None and m_op is not None:
            how.append(f"different op {r.op_type} vs {m_op}")
        outliers.append(Outlier(r.rank, pg, differs, "; ".join(how) or "differs from the majority"))
    for g in sorted(absent):
        behind[g].append("logged no watchdog state for this PG while the others wait in it")

    res = ProcessGroupResult(
        straggler_reasons={str(g): ", ".join(why) for g, why in sorted(behind.items())},
        pg=pg,
        pg_desc=desc,
        is_default_pg=is_default,
        ranks=format_ranges(ranks_here),
        rank_count=len(ranks_here),
        classification="mixed",
        reason="",
        majority=majority,
        absent_ranks=format_ranges(absent | absent_missing),
        absent_pg_ranks=format_ranges(absent_pg),
        missing_ranks=format_ranges(missing),
        pg_ids=sorted({r.pg_id for r in rows if r.pg_id is not None}),
    )
    label = f"PG {pg}" + (f" ({desc})" if desc else "") if pg is not None else "the process group"
    entered = f"SeqNum {m_seq} {m_op or ''}".strip() if m_seq is not None else "no failed work (this PG is idle)"
    state = (
        f"last enqueued {m_e} / completed {m_c}" if m_e is not None else "enqueued/completed not logged by this torch"
    )
    n_members = len(ranks_here | absent | absent_missing) + len(absent_pg)
    few = max(1, n_members // 4)

    if missing:
        res.classification = "incomplete"
        res.suspect_ranks = sorted(behind)
        sus = f"; among the ranks seen, {format_ranges(behind)} look(s) behind" if behind else ""
        res.reason = (
            f"ranks {format_ranges(missing)} are missing from the logs (no file has them)"
            + (" and belong to this PG" if is_default else " and could be members of this PG")
            + f": a straggler among them cannot be ruled out, so none is named{sus}. Ask for every node's log file."
        )
    elif absent_pg:
        res.classification = "incomplete"
        res.suspect_ranks = sorted(behind)
        res.reason = (
            f"PG rank(s) {format_ranges(absent_pg)} of {label} logged no state and their global ranks cannot be "
            f"inferred from the {len(rows)} member(s) that did ({entered}, {state})."
        )
    elif len(rows) == 1 and not is_default and not absent:
        r0 = rows[0]
        res.classification = "incomplete"
        res.reason = (
            f"only rank {r0.rank} (PG rank {r0.pg_rank}) logged state for {label} ({entered}, {state}, "
            f"{r0.signal}); its peer(s) logged nothing for this PG and are not named by the logs. Compare with the "
            "other PGs' tables."
        )
    elif behind and not ahead:
        if len(behind) <= few and len(behind) < n_members:
            res.classification = "straggler"
            res.straggler_ranks = sorted(behind)
            res.reason = "; ".join(f"rank {g}: {', '.join(why)}" for g, why in sorted(behind.items())) + (
                f". The other {major_n} rank(s) ({majority.ranks}) are at {entered}, {state}, signal {m_signal}."
            )
        else:
            res.classification = "mixed"
            res.suspect_ranks = sorted(behind)
            res.reason = f"{len(behind)} of {n_members} ranks differ from the majority: too many to call a straggler."
    elif ahead and not behind:
        root = [r for r in rows if r.rank in ahead and (r.pg_rank == 0 or (r.pg_rank is None and r.rank == 0))]
        if len(ahead) == 1 and root:
            r0 = root[0]
            k = (r0.last_enqueued - m_e) if r0.last_enqueued is not None and m_e is not None else None
            if k is None and r0.seq is not None and m_seq is not None:
                k = r0.seq - m_seq
            res.classification = "root_ahead"
            res.ahead_ranks = [r0.rank]
            res.ahead_by = k
            res.ahead_steps = round(k / PER_STEP_COLLECTIVES, 2) if k is not None else None
            steps = (
                f" = {res.ahead_steps:g} training step(s) at ~{PER_STEP_COLLECTIVES} collectives per step "
                "(PreemptionCallback broadcast + DDP allreduce + broadcast_buffers)"
                if k is not None
                else ""
            )
            res.reason = (
                f"rank {r0.rank} (PG rank 0, the broadcast root) is {k} op(s) ahead of the other {major_n} "
                f"({r0.last_enqueued if r0.last_enqueued is not None else r0.seq} vs "
                f"{m_e if m_e is not None else m_seq})"
                f"{steps}: the root finished its side of collectives the others never reached."
            )
        else:
            res.classification = "mixed"
            res.ahead_ranks = sorted(ahead)
            res.reason = f"rank(s) {format_ranges(ahead)} are ahead of the majority ({entered}) but not the root alone."
    elif ahead and behind:
        res.classification = "mixed"
        res.ahead_ranks = sorted(ahead)
        res.suspect_ranks = sorted(behind)
        res.reason = f"ranks ahead ({format_ranges(ahead)}) and behind ({format_ranges(behind)}) the majority."
    else:
        if not is_default and silent:
            res.classification = "incomplete"
            res.reason = (
                f"every rank that logged state for {label} is at {entered} ({state}), but ranks "
                f"{format_ranges(silent)} logged no NCCL state at all and could be members that never entered."
            )
        elif m_signal == "detected" and (m_pending is None or m_pending > 0) and m_seq is not None:
            res.classification = "fabric"
            caveat = "" if m_pending is not None else " (this torch version does not log enqueued/completed)"
            res.reason = (
                f"all {major_n} ranks entered {entered} ({state}) and each detected its own timeout{caveat}: no "
                "straggler; the collective itself hung (NCCL/network/GPU fabric)."
            )
        else:
            res.classification = "mixed"
            res.reason = f"all {major_n} ranks report the same state ({entered}, {state}, {m_signal})."
    return res, outliers


# ---------------------------------------------------------------------------------------------------------------------
# Facts, evidence, summary
# ---------------------------------------------------------------------------------------------------------------------

_FACT_KINDS = {
    tn.WatchdogTerminated: "watchdog_terminated",
    tn.HeartbeatKill: "heartbeat_monitor_kill",
    tn.FatalTerminate: "terminated_fatal",
    tn.BlockingWaitTimeout: "blocking_wait_timeout",
    tn.WatchdogExitMessage: "watchdog_exit_message",
}


def _fact_detail(ev: tn.Event) -> str:
    if isinstance(ev, tn.WatchdogTerminated):
        return f"{ev.wording} watchdog thread terminated with exception"
    if isinstance(ev, tn.HeartbeatKill):
        return f"watchdog got stuck for {ev.seconds} seconds" if ev.seconds is not None else ev.kind
    if isinstance(ev, tn.FatalTerminate):
        return f"Terminating the process ... due to {ev.reason}"
    if isinstance(ev, tn.BlockingWaitTimeout):
        return f"{ev.work.op_type} SeqNum {ev.work.seq} timed out in blocking wait"
    if isinstance(ev, tn.WatchdogExitMessage):
        return "exception from the local rank" if ev.from_rank is None else f"dump signal from rank {ev.from_rank}"
    return type(ev).__name__


def _child_exits(file_evs: list[_Ev]) -> list[tuple[int, str, _Ev]]:
    """(rank, 'SIGABRT (exitcode -6)', evidence) from the ChildFailedError tables of one file (rows in order)."""
    out: list[tuple[int, str, _Ev]] = []
    last_rank: tuple[int, int] | None = None
    for e in file_evs:
        ev = e.ev
        if isinstance(ev, tn.ChildFailureRank):
            last_rank = (ev.rank, e.hit.line)
        elif isinstance(ev, tn.ChildFailureExit) and last_rank is not None and e.hit.line == last_rank[1] + 1:
            sig = ev.signal or (_SIGNALS.get(-ev.exitcode) if ev.exitcode < 0 else None)
            detail = f"{sig} (exitcode {ev.exitcode})" if sig else f"exitcode {ev.exitcode}"
            out.append((last_rank[0], detail, e))
            last_rank = None
    return out


_SIGNALS = {6: "SIGABRT", 9: "SIGKILL", 15: "SIGTERM", 11: "SIGSEGV", 7: "SIGBUS", 2: "SIGINT"}


_PG_CARRIERS = (tn.StatusLine, tn.DumpSignal, tn.DumpObserved, tn.FirstToDump, tn.WatchdogTerminated)
"""Events whose prefix is the ProcessGroupNCCL one (WorkNCCL's ``[Rank N]`` says nothing about the version)."""


def _families(hits: Iterable[Hit]) -> list[str]:
    fams: set[str] = set()
    for h in hits:
        ev = h.event
        if isinstance(ev, tn.StatusLine):
            fams.add({"failure_detected": "torch 2.6+ 'failure detected by watchdog'",
                      "exception_detected": "torch 2.4-2.5 'Exception (either an error or timeout) detected'",
                      "timeout_at": "torch 2.3-2.5 'Timeout at NCCL work'"}[ev.family])  # fmt: skip
        elif isinstance(ev, tn.DumpSignal):
            fams.add(f"torch {ev.family} dump-signal wording")
        if h.header is not None:
            fams.add({"c10_2.4+": "c10 header with time (torch 2.4+)", "c10_2.2-2.3": "c10 header [rankN]: no time "
                      "(torch 2.2-2.3)", "c10_<=2.1": "c10 header without rank (torch <= 2.1)",
                      "glog": "glog-native header"}[h.header.style])  # fmt: skip
        pg = getattr(ev, "pg", None) if isinstance(ev, _PG_CARRIERS) else None
        if isinstance(pg, tn.PGPrefix):
            fams.add({"rank": "[Rank N] prefix (torch <= 2.2)", "uid": "[PG n Rank N] or [PG name Rank N] prefix",
                      "name": "[PG n Rank N] or [PG name (desc) Rank N] prefix (torch 2.3-2.4)",
                      "guid": "[PG ID n PG GUID g(desc) Rank N] prefix (torch 2.5+)"}[pg.style])  # fmt: skip
    return sorted(fams)


def _ev_evidence(e: _Ev) -> EvidenceLine:
    return EvidenceLine(e.file, e.hit.line, cut(e.hit.text, TEXT_CUT))


# ---------------------------------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------------------------------


def nccl_state_table(
    logs_dir: str | Path,
    limit: int = DEFAULT_LIMIT,
    files: Sequence[LogFile] | None = None,
    keep: LineKeep | None = None,
) -> NcclTable:
    """Scan every worker log under ``logs_dir`` once and build the NCCL state table (see the module docstring);
    ``keep``: only those lines (one attempt's, :mod:`~debug_training_logs.analysis.attempts`)."""
    job = scan_job(logs_dir, NCCL_PATTERNS, NcclSink, files=files, keep=keep)
    results: list[FileEvents] = [r if isinstance(r, FileEvents) else FileEvents(s.file.rel)
                                 for r, s in zip(job.caller_results, job.files, strict=True)]  # fmt: skip
    return build_table(results, job.inventory, job.coverage(), limit)


def build_table(results: list[FileEvents], inv: Inventory, coverage: Coverage, limit: int) -> NcclTable:
    """The table from the sinks' events and the job inventory (pure; used by the tool and by ``diagnose``)."""
    times = _TimeText(inv.year_hint)
    by_rank: dict[int, list[_Ev]] = defaultdict(list)
    unattributed = 0
    fact_map: dict[tuple[str, str], list[tuple[int, _Ev]]] = defaultdict(list)
    rank_tags: dict[int, list[str]] = defaultdict(list)
    all_hits: list[Hit] = []
    for fe in results:
        file_ranks = inv.ranks_of_file(fe.rel)
        single = next(iter(file_ranks)) if len(file_ranks) == 1 else None
        file_evs = [_Ev(fe.rel, h) for h in fe.hits]
        all_hits.extend(fe.hits)
        for exit_rank, detail, ev_line in _child_exits(file_evs):
            fact_map[("exit_signal", detail)].append((exit_rank, ev_line))
        for e in file_evs:
            if isinstance(e.ev, tn.ChildFailureRank | tn.ChildFailureExit | tn.ChildFailureSignal):
                continue
            rank: int | None = e.hit.rank if e.hit.rank is not None else single
            if rank is None:
                if not (isinstance(e.ev, tn.WatchdogTerminated) and e.ev.headerless):
                    unattributed += 1  # the what(): copy repeats a line that had its rank
                continue
            by_rank[rank].append(e)
            kind = _FACT_KINDS.get(type(e.ev))
            if kind is not None and not (isinstance(e.ev, tn.WatchdogTerminated) and e.ev.headerless):
                fact_map[(kind, _fact_detail(e.ev))].append((rank, e))
    for (kind, detail), items in fact_map.items():
        for rank, _ in items:
            tag = kind if kind != "exit_signal" else f"exit: {detail}"
            if tag not in rank_tags[rank]:
                rank_tags[rank].append(tag)

    builds: list[_RowBuild] = []
    for rank in sorted(by_rank):
        builds.extend(_rows_for_rank(rank, by_rank[rank], times))
    rows = [b.row for b in builds]
    for r in rows:
        r.facts = list(rank_tags.get(r.rank, []))

    # Ranks the inventory attributed, plus every rank a candidate line of ours carried (srun labels, Ray prefixes).
    inv_ranks = set(inv.ranks) | set(by_rank) | {g for (_k, _d), items in fact_map.items() for g, _ in items}
    world = inv.world_size
    missing = (set(range(world)) - inv_ranks) if world else set()
    if inv_ranks != set(inv.ranks):
        coverage = coverage.model_copy(
            update={"ranks_found": format_ranges(inv_ranks), "missing_ranks": format_ranges(missing)}
        )
    ranks_with_state = {r.rank for r in rows}
    silent = inv_ranks - ranks_with_state - missing

    groups: dict[str | None, list[Row]] = defaultdict(list)
    for r in rows:
        groups[r.pg].append(r)
    pg_results: list[ProcessGroupResult] = []
    outliers: list[Outlier] = []
    for key in sorted(groups, key=lambda k: (k != "0", k is None, _natural(k))):
        grows = groups[key]
        desc = next((r.pg_desc for r in grows if r.pg_desc), None)
        res, outs = _classify(key, desc, grows, inv_ranks, missing, silent, world)
        pg_results.append(res)
        outliers.extend(outs)
    folded = sum(fe.deduplicated for fe in results)
    if folded:
        _mark_folded(pg_results, folded)

    stragglers = [] if folded else _job_stragglers(pg_results, rows, missing)
    first_dump = _first_dump_rank(rows, by_rank)
    evidence = _evidence(builds, pg_results, stragglers, first_dump)
    facts = [
        RankFact(
            kind, detail, format_ranges(r for r, _ in items), len({r for r, _ in items}), _ev_evidence(items[0][1])
        )
        for (kind, detail), items in sorted(fact_map.items())
    ]
    kept, truncated = _limit_rows(rows, pg_results, outliers, limit)
    summary = _summary(pg_results, rows, stragglers, first_dump, silent, missing, coverage, folded)
    return NcclTable(
        summary=summary,
        coverage=coverage,
        rows=kept,
        rows_total=len(rows),
        rows_truncated=truncated,
        ranks_without_nccl_state=format_ranges(silent),
        missing_ranks=format_ranges(missing),
        process_groups=pg_results,
        outliers=outliers[:limit],
        outliers_truncated=max(0, len(outliers) - limit),
        straggler_ranks=stragglers,
        first_dump_rank=first_dump,
        rank_facts=facts,
        evidence=evidence,
        time_basis=TimeBasis(
            year=inv.year_hint,
            year_inferred=True,
            zone="worker-local wall clock as written (no zone in the lines); UTC not known from worker logs alone",
        ),
        message_families=_families(all_hits),
        unattributed_lines=unattributed,
        unparsed_lines=sum(fe.unparsed for fe in results),
        rejoined_messages=sum(fe.rejoined for fe in results),
        deduplicated_lines=folded,
    )


def _mark_folded(pgs: list[ProcessGroupResult], folded: int) -> None:
    """Ray folded watchdog lines of several ranks into one: rows are missing for ranks that did log. No verdict that
    rests on who is absent can stand."""
    note = (
        f"Ray deduplicated {folded} watchdog line(s) ('[repeated Nx across cluster]': lines differing only in numbers, "
        "i.e. in rank and SeqNum, were folded), so ranks that logged state may have no row. Rerun with "
        "RAY_DEDUP_LOGS=0 (or read each worker's own log file) before naming a straggler. "
    )
    for p in pgs:
        if p.classification != "incomplete":
            p.suspect_ranks = sorted(set(p.suspect_ranks) | set(p.straggler_ranks))
            p.straggler_ranks = []
            p.classification = "incomplete"
        p.reason = note + p.reason


def _natural(k: str | None) -> tuple[int, str]:
    if k is None:
        return (0, "")
    return (int(k), "") if k.isdigit() else (1 << 30, k)


def _job_stragglers(pgs: list[ProcessGroupResult], rows: list[Row], missing: set[int]) -> list[int]:
    """Ranks at the root of the hang: stragglers of some PG that never detected a timeout of their own anywhere."""
    if missing or any(p.classification == "incomplete" and p.is_default_pg for p in pgs):
        return []
    cands = {g for p in pgs if p.classification == "straggler" for g in p.straggler_ranks}
    detected = {r.rank for r in rows if r.signal == "detected" and r.seq is not None}
    root = sorted(cands - detected)
    return root if root else sorted(cands)


def _first_dump_rank(rows: list[Row], by_rank: dict[int, list[_Ev]]) -> int | None:
    srcs = Counter(r.dump_signal_from_rank for r in rows if r.dump_signal_from_rank is not None)
    if srcs:
        return srcs.most_common(1)[0][0]
    for evs in by_rank.values():
        for e in evs:
            if isinstance(e.ev, tn.WatchdogExitMessage) and e.ev.from_rank is not None:
                return e.ev.from_rank
    return None


def _evidence(
    builds: list[_RowBuild], pgs: list[ProcessGroupResult], stragglers: list[int], first: int | None
) -> list[EvidenceLine]:
    out: list[EvidenceLine] = []
    seen: set[tuple[str, int]] = set()

    def add(e: _Ev | None) -> None:
        if e is None or len(out) >= MAX_EVIDENCE:
            return
        k = (e.file, e.hit.line)
        if k not in seen:
            seen.add(k)
            out.append(_ev_evidence(e))

    focus = set(stragglers) | {g for p in pgs for g in p.straggler_ranks + p.ahead_ranks + p.suspect_ranks}
    for b in builds:
        if b.row.rank in focus:
            add(b.observed)
            add(b.dump)
            add(b.status)
            add(b.timeout)
    for p in pgs:  # one majority row per PG
        if p.majority is None:
            continue
        for b in builds:
            if b.row.pg == p.pg and b.row.rank not in focus:
                add(b.status)
                add(b.timeout)
                break
    for b in builds:
        if b.row.rank == first:
            add(b.first)
            add(b.status)
    return out


def _limit_rows(
    rows: list[Row], pgs: list[ProcessGroupResult], outliers: list[Outlier], limit: int
) -> tuple[list[Row], int]:
    if len(rows) <= limit:
        return rows, 0
    keep_keys = {(o.rank, o.pg) for o in outliers}
    for p in pgs:
        for g in p.straggler_ranks + p.ahead_ranks + p.suspect_ranks:
            keep_keys.add((g, p.pg))
    must = [r for r in rows if (r.rank, r.pg) in keep_keys][:limit]
    rest = [r for r in rows if (r.rank, r.pg) not in keep_keys]
    room = limit - len(must)
    sample: list[Row] = []
    if room > 0 and rest:
        per_pg: dict[str | None, list[Row]] = defaultdict(list)
        for r in rest:
            per_pg[r.pg].append(r)
        while len(sample) < room and any(per_pg.values()):
            for k in list(per_pg):
                if per_pg[k] and len(sample) < room:
                    sample.append(per_pg[k].pop(0))
    kept = sorted(must + sample, key=lambda r: (r.pg != "0", _natural(r.pg), r.rank))
    return kept, len(rows) - len(kept)


def _pg_label(p: ProcessGroupResult) -> str:
    if p.pg is None:
        return "the process group (not named by this torch version)"
    return f"PG {p.pg}" + (f" ({p.pg_desc})" if p.pg_desc else "")


def _summary(
    pgs: list[ProcessGroupResult],
    rows: list[Row],
    stragglers: list[int],
    first: int | None,
    silent: set[int],
    missing: set[int],
    coverage: Coverage,
    folded: int = 0,
) -> str:
    if not rows:
        base = "No NCCL watchdog state in these logs (no collective timed out, or the logs stop before it)."
        if missing:
            base += f" Ranks {format_ranges(missing)} are missing from the logs."
        return base
    parts: list[str] = []
    n_ranks = len({r.rank for r in rows})
    parts.append(f"{len(rows)} watchdog-state rows from {n_ranks} ranks in {len(pgs)} process group(s).")
    if missing:
        parts.append(
            f"INCOMPLETE: ranks {format_ranges(missing)} (world size {coverage.world_size}) are missing from every "
            "file; no straggler is named from a subset; ask for every node's log."
        )
    if folded:
        parts.append(
            f"INCOMPLETE: Ray folded {folded} watchdog line(s) ([repeated Nx across cluster]); rows of those ranks are "
            "hidden. Rerun with RAY_DEDUP_LOGS=0 or read the per-worker logs."
        )
    if stragglers:
        detail = []
        for g in stragglers:
            whys = [f"{_pg_label(p)}: {p.straggler_reasons[str(g)]}" for p in pgs if str(g) in p.straggler_reasons]
            detail.append(f"rank {g} ({'; '.join(whys) or 'logged no NCCL watchdog state at all'})")
        parts.append(
            "STRAGGLER: " + "; ".join(detail) + ". It never waited in a collective of its own: it was stuck outside "
            "NCCL (data loading, training loop); look at what it logged just before the others' collectives started."
        )
    shown = pgs if len(pgs) <= 3 else [p for p in pgs if p.is_default_pg]
    for p in shown:
        start = next((r.collective_start_time for r in rows if r.pg == p.pg and r.collective_start_time), None)
        tt = next((r.timeout_time for r in rows if r.pg == p.pg and r.timeout_time), None)
        when = f" Timeout logged at {tt}, collective started ~{start} (worker local time)." if tt else ""
        parts.append(f"{_pg_label(p)} [ranks {p.ranks}]: {p.classification.upper()}: {p.reason}{when}")
    if len(pgs) > 3:
        groups: dict[tuple[str, str], list[ProcessGroupResult]] = defaultdict(list)
        for p in pgs:
            if not p.is_default_pg:
                groups[(p.pg_desc or "PG", p.classification)].append(p)
        agg = []
        for (desc, cls), items in sorted(groups.items()):
            named = sorted({g for p in items for g in p.straggler_ranks})
            extra = f" (absent/behind ranks {format_ranges(named)}, each waiting elsewhere or stuck)" if named else ""
            agg.append(f"{len(items)} {desc} {cls}{extra}")
        parts.append("Other PGs (SeqNums compared only within each PG): " + "; ".join(agg) + ".")
    if first is not None:
        parts.append(f"Rank {first} set the dump signal first: usually a victim that timed out first, not the cause.")
    if silent and not stragglers:
        parts.append(f"Ranks {format_ranges(silent)} appear in the logs but logged no NCCL state: prime suspects.")
    return " ".join(parts)
