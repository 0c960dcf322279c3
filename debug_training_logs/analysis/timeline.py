"""One chronological list of the key events from every source: worker logs (first line of each error template,
NCCL timeouts and the collective start they imply, teardown, SLURM cancels) and AIS daemon logs (error spikes,
notable W/E lines, the moment reads stopped, restarts).

Each event keeps the time its source wrote (``time_local``, on that source's clock) and gets ``time_utc`` only when
that is known: a verified worker/AIS offset plus an unambiguous zone. Events are ordered on one clock (the workers')
when the alignment is verified; otherwise AIS events are marked ``unaligned`` and ordered by their own clock value,
which a reader must not take as fact. Worker lines without a year take it from the job's nearest full date (stated in
``year_basis``); worker lines without any time get the time of the nearest earlier timestamped line of their file
(``time_approx``: "at or after").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from debug_training_logs.analysis import ais_collect, ais_delta_types, ais_intervals
from debug_training_logs.analysis.alignment import Alignment, WorkerClock, align, to_utc
from debug_training_logs.analysis.grep import GrepAnalysis, TemplateSummary
from debug_training_logs.analysis.grep_patterns import DEFAULT_PATTERNS
from debug_training_logs.analysis.nccl_rows import NcclTable
from debug_training_logs.analysis.read_back import read_lines
from debug_training_logs.formats.timestamps import GUESSED_YEAR, with_year
from debug_training_logs.ranges import format_ranges
from debug_training_logs.textcut import cut

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Coverage

_TIER = {p.name: p.tier for p in DEFAULT_PATTERNS}
NOISE_PATTERNS = frozenset({"connection_error", "retrying", "timed_out", "broken_pipe"})
"""Worker patterns that are usually noise on their own (retried resets): kept, ranked below the rest when cut."""


@dataclass
class Event:
    """One line of the timeline."""

    time_local: str | None
    """ISO time as the source's clock wrote it (worker: local, zone unstated; AIS: the daemon's clock)."""
    clock: str
    """``worker`` or ``ais``."""
    time_utc: str | None
    aligned: bool
    """False for an AIS event when the worker/AIS offset is not verified: its place in the order is a guess."""
    time_approx: bool
    """True when the line states no time and ``time_local`` is that of the nearest earlier timestamped line."""
    source: str
    """``file:line`` (AIS archive members as ``archive!member:line``)."""
    ranks: str
    """Global ranks (range string) for worker events; the daemon for AIS events."""
    event: str
    kind: str
    """``job``, ``error``, ``noise``, ``nccl_timeout``, ``collective_start``, ``teardown``, ``slurm``, ``ais_spike``,
    ``ais_error``, ``ais_reads_stopped``, ``ais_restart``."""
    weight: int = 0
    """Importance for cutting the list (higher is kept first)."""
    sort_at: datetime | None = field(default=None, repr=False)


@dataclass
class Timeline:
    summary: str
    coverage: Coverage
    events: list[Event]
    events_truncated: int
    alignment: Alignment | None
    year_basis: str


def _template_events(grep: GrepAnalysis) -> list[Event]:
    out: list[Event] = []
    for t in grep.templates:
        names = [n for n in t.patterns if n in _TIER]
        tier = min((_TIER[n] for n in names), default=3)
        noise = bool(names) and all(n in NOISE_PATTERNS for n in names)
        kind = "noise" if noise else "error"
        if "slurm_cancelled" in names:
            kind = "slurm"
        elif "process_taken_down" in names:
            kind = "teardown"
        out.append(
            Event(
                time_local=t.first.time,
                clock="worker",
                time_utc=None,
                aligned=True,
                time_approx=False,
                source=f"{t.first.file}:{t.first.line}",
                ranks=_ranks(t),
                event=f"first of {t.count}x [{', '.join(names) or 'match'}] {cut(t.template, 200)}",
                kind=kind,
                weight=(1 if noise else 10 - 2 * tier) + (3 if t.rank_count and t.rank_count <= 2 else 0),
            )
        )
    return out


def _ranks(t: TemplateSummary) -> str:
    return t.ranks if t.ranks else ("unattributed" if t.unattributed else "")


def _nccl_events(table: NcclTable) -> list[Event]:
    out: list[Event] = []
    for pg in table.process_groups:
        rows = [r for r in table.rows if r.pg == pg.pg and r.timeout_time]
        if not rows:
            continue
        first = min(rows, key=lambda r: r.timeout_time or "")
        label = f"PG {pg.pg}" + (f" ({pg.pg_desc})" if pg.pg_desc else "")
        detected = format_ranges(r.rank for r in rows if r.signal == "detected")
        out.append(
            Event(
                time_local=first.timeout_time,
                clock="worker",
                time_utc=None,
                aligned=True,
                time_approx=False,
                source=f"{first.file}:{first.line}",
                ranks=detected or str(first.rank),
                event=f"NCCL watchdog timeout in {label}: {first.op_type} SeqNum {first.seq} after "
                f"{first.timeout_ms} ms ({pg.classification}"
                + (f", straggler {format_ranges(pg.straggler_ranks)}" if pg.straggler_ranks else "")
                + ")",
                kind="nccl_timeout",
                weight=9,
            )
        )
        starts = [r for r in rows if r.collective_start_time and r.signal == "detected"]
        if starts:
            s = min(starts, key=lambda r: r.collective_start_time or "")
            out.append(
                Event(
                    time_local=s.collective_start_time,
                    clock="worker",
                    time_utc=None,
                    aligned=True,
                    time_approx=False,
                    source=f"{s.file}:{s.line}",
                    ranks=format_ranges(r.rank for r in starts),
                    event=f"{label}: ranks entered {s.op_type} SeqNum {s.seq} (timeout time - {s.timeout_ms} ms)"
                    + (f"; rank(s) {format_ranges(pg.straggler_ranks)} never did" if pg.straggler_ranks else ""),
                    kind="collective_start",
                    weight=9,
                )
            )
    return out


def _ais_events(collection: ais_delta_types.AisCollection) -> list[Event]:
    out: list[Event] = []
    for sp in ais_intervals.collection_spikes(collection):
        if not sp.counter.startswith("err."):
            continue
        out.append(
            _ais(
                sp.end,
                sp.evidence.file,
                sp.evidence.line,
                sp.daemon,
                f"{sp.counter} +{sp.delta} in {sp.start:%H:%M:%S}-{sp.end:%H:%M:%S} (baseline {sp.expected:.1f})",
                "ais_spike",
                8,
            )
        )
    for group in ais_collect.notable_lines(collection):
        if group.first is None or group.pattern == "other":
            continue
        out.append(
            _ais(
                group.first,
                group.example.file,
                group.example.line,
                group.daemon,
                f"first of {group.count}x {group.pattern}: {cut(group.example.text, 160)}",
                "ais_error",
                3 if group.noise else 7,
            )
        )
    for daemon in collection.index.daemons:
        series = collection.points.get(daemon.key, [])
        for gs in ais_intervals.get_stops(daemon, series, ("get.n",)):
            if gs.stopped:
                out.append(
                    _ais(
                        gs.last_increase_at,
                        gs.evidence.file,
                        gs.evidence.line,
                        daemon.key,
                        f"{gs.counter} last grew (reads stopped after this stats line)",
                        "ais_reads_stopped",
                        5,
                    )
                )
        for rs in ais_intervals.find_restarts(daemon, series):
            out.append(_ais(rs.by, rs.evidence.file, rs.evidence.line, daemon.key, rs.explanation, "ais_restart", 6))
    return out


def _ais(at: datetime, file: str, line: int, daemon: str, text: str, kind: str, weight: int) -> Event:
    return Event(
        time_local=at.isoformat(timespec="seconds"),
        clock="ais",
        time_utc=None,
        aligned=False,
        time_approx=False,
        source=f"{file}:{line}",
        ranks=daemon,
        event=text,
        kind=kind,
        weight=weight,
        sort_at=at,
    )


def _approximate_untimed(logs_dir: Path, events: list[Event], year: int | None) -> None:
    """Give worker events without a time the time of the nearest earlier timestamped line of their file (read from
    the scan's nearest checkpoint, not from the top of the file)."""
    wanted: dict[str, set[int]] = {}
    for e in events:
        if e.clock == "worker" and e.time_local is None:
            rel, _, num = e.source.rpartition(":")
            wanted.setdefault(rel, set()).add(int(num))
    if not wanted:
        return
    found: dict[tuple[str, int], str] = {}
    for key, at in read_lines(logs_dir, wanted, year).items():
        # without a year in the logs, a year-less time read back carries a stand-in year: not a time to show
        if at.after is not None and (year is not None or at.after.year != GUESSED_YEAR):
            found[key] = at.after.isoformat(timespec="seconds")
    for e in events:
        if e.clock == "worker" and e.time_local is None:
            rel, _, num = e.source.rpartition(":")
            t = found.get((rel, int(num)))
            if t is not None:
                e.time_local, e.time_approx = t, True


def _worker_dt(text: str | None) -> datetime | None:
    if not text or text.startswith("--"):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def build_timeline(
    root: Path,
    grep: GrepAnalysis,
    table: NcclTable,
    worker: WorkerClock,
    collection: ais_delta_types.AisCollection | None = None,
    limit: int = 60,
) -> Timeline:
    """The merged timeline (see module docstring) from what the scans found: the worker logs' grep templates, NCCL
    table and clock facts, and the AIS logs' collection when there are AIS logs. Reads back only the untimed lines
    it places (below ``root``); ``limit`` bounds the events (the least important are cut)."""
    coverage = grep.coverage
    year = worker.inventory.year_hint
    year_basis = (
        f"year {year} from the job's full-date lines (NeMo/SLURM/torchrun timestamps)"
        if year
        else "no full date in the worker logs"
    )
    events = _template_events(grep) + _nccl_events(table)
    _approximate_untimed(root, events, year)
    if worker.inventory.start is not None:
        st = worker.inventory.start
        dt = with_year(st.time, year)
        events.append(
            Event(
                dt.isoformat(timespec="seconds") if dt else None,
                "worker",
                None,
                True,
                False,
                f"{st.file}:{st.line}",
                "",
                "first log line of the job",
                "job",
                4,
            )
        )
    alignment: Alignment | None = None
    if collection is not None:
        alignment = align(worker, table, collection)
        ais_events = _ais_events(collection)
        if year is None:
            ais_years = {e.sort_at.year for e in ais_events if e.sort_at is not None}
            if len(ais_years) == 1:
                year_basis = f"no full date in the worker logs; year {next(iter(ais_years))} from the AIS headers"
        events += ais_events
    for e in events:
        if e.clock == "worker":
            e.sort_at = _worker_dt(e.time_local)
            if alignment is not None and e.sort_at is not None:
                utc = to_utc(e.sort_at, None, alignment)
                e.time_utc = utc.isoformat(timespec="seconds") if utc and alignment.verified else None
        elif alignment is not None and e.sort_at is not None:
            e.aligned = alignment.verified
            if alignment.verified and alignment.offset_hours is not None:
                utc = to_utc(None, e.sort_at, alignment)
                e.time_utc = utc.isoformat(timespec="seconds") if utc else None
                e.sort_at = e.sort_at + timedelta(hours=alignment.offset_hours)  # on the worker clock
    kept = sorted(events, key=lambda e: -e.weight)[:limit]
    truncated = len(events) - len(kept)
    kept.sort(key=lambda e: (e.sort_at is None, e.sort_at or datetime.min, e.source))
    for e in kept:
        e.sort_at = None
    summary = _summary(kept, truncated, alignment, collection is not None)
    return Timeline(summary, coverage, kept, truncated, alignment, year_basis)


def _span(timed: list[Event]) -> list[str]:
    """First and last event on ONE clock: UTC when every timed event has it, else each source on its own clock
    (worker and AIS times are never mixed in one sentence)."""
    if not timed:
        return []
    if all(e.time_utc for e in timed):
        first, last = timed[0], timed[-1]
        return [f"From {first.time_utc}Z ({first.event[:80]}) to {last.time_utc}Z (UTC)."]
    out = []
    for clock, name in (("worker", "worker clock"), ("ais", "AIS clock")):
        mine = [e for e in timed if e.clock == clock]
        if mine:
            first, last = mine[0], mine[-1]
            out.append(
                f"{clock.capitalize() if clock == 'worker' else 'AIS'} events from {first.time_local} "
                f"({first.event[:80]}) to {last.time_local} ({name})."
            )
    return out


def _summary(events: list[Event], truncated: int, alignment: Alignment | None, has_ais: bool) -> str:
    timed = [e for e in events if e.time_local]
    parts = [f"{len(events)} events" + (f" ({truncated} less important cut)" if truncated else "") + "."]
    parts += _span(timed)
    if has_ais and alignment is not None:
        if alignment.verified:
            parts.append(
                f"AIS events placed on the worker clock with the verified offset {alignment.offset_hours:+g} h."
            )
        else:
            parts.append(
                "AIS events are UNALIGNED (offset not verified): their order relative to worker events is not evidence."
            )
    approx = sum(1 for e in events if e.time_approx)
    if approx:
        parts.append(f"{approx} event(s) have no time of their own (time of the previous timestamped line).")
    return " ".join(parts)
