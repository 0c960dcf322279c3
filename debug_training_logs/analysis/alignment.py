"""Clock alignment between worker logs and AIStore daemon logs: ``offset_hours`` = worker clock - AIS clock.

Neither side writes a reliable zone on every line (worker lines: none; AIS lines: none, the hourly marker names an
abbreviation that may be ambiguous), so the offset is established by every method that applies and trusted only when
two independent methods agree:

``zone_labels``
    The AIS hourly marker's zone (``21 May 26 15:00 UTC ====``) against a zone a worker line states (an ISO offset
    like ``2026-05-21T07:00:00-07:00`` or ``date`` output ``Thu May 21 07:00:00 PDT 2026``). Ambiguous abbreviations
    (CST, IST, BST) are hints, never a method.
``activity_stop``
    The moment the workers stopped (their last logged time, or the SLURM ``CANCELLED AT`` time) against the moment
    each AIS target's ``get.n``/``getbatch.n`` stopped growing: the workers were its readers.
``error_onset``
    The first worker-side data error (a lhotse/AIStore loader error with a time; else the moment the other ranks
    entered the collective the straggler never joined) against the first data-path error on the AIS daemon whose
    error counters spiked.

Raw offsets are snapped to whole or half hours when within the method's tolerance; a raw offset that is not near a
half hour is reported but not snapped (clock drift or the wrong anchor).
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from debug_training_logs.analysis.inventory import scan_job
from debug_training_logs.analysis.inventory_types import Inventory
from debug_training_logs.analysis.nccl_rows import NcclTable
from debug_training_logs.formats.prefixes import strip_ansi
from debug_training_logs.formats.timestamps import parse_wall_time, with_year
from debug_training_logs.logs.attribution import line_rank
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.textcut import cut

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Coverage, Evidence

if TYPE_CHECKING:  # the AIS modules are imported where the AIS logs are read: the worker scan's sink needs none
    from debug_training_logs.analysis import ais_delta_types
    from debug_training_logs.analysis.ais_index import AisIndex

# Zone abbreviations -> UTC offset in hours; None marks an ambiguous abbreviation (a hint only).
ZONE_OFFSETS: dict[str, float | None] = {
    "UTC": 0,
    "GMT": 0,
    "Z": 0,
    "UT": 0,
    "PST": -8,
    "PDT": -7,
    "MST": -7,
    "MDT": -6,
    "CDT": -5,
    "EST": -5,
    "EDT": -4,
    "AKST": -9,
    "AKDT": -8,
    "HST": -10,
    "CET": 1,
    "CEST": 2,
    "EET": 2,
    "EEST": 3,
    "WET": 0,
    "WEST": 1,
    "MSK": 3,
    "JST": 9,
    "KST": 9,
    "HKT": 8,
    "SGT": 8,
    "AEST": 10,
    "AEDT": 11,
    "NZST": 12,
    "NZDT": 13,
    "CST": None,
    "IST": None,
    "BST": None,
    "AST": None,
}

SNAP_HOURS = 0.5
"""Offsets are whole or half hours (a few zones are 45 min; those are reported unsnapped)."""
ACTIVITY_STOP_TOLERANCE = timedelta(minutes=8)
"""Stats lines come every ``log.stats_time`` (3 min) and may lag a flush (1 min): the stop is known to minutes."""
ERROR_ONSET_TOLERANCE = timedelta(minutes=15)
"""The worker-side onset is often approximate (loader lines without a time; the collective start instead)."""

# Worker-side lines the alignment looks for (named data).
WORKER_ZONE_ISO = r"\b20\d\d-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)\b"
WORKER_ZONE_DATE = (
    r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} "
    r"\d\d:\d\d:\d\d [A-Z]{1,5} 20\d\d\b"
)
SLURM_CANCEL = r"CANCELLED AT 20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d"
DATA_ERROR = (
    r"AISBatchLoaderError|Batch stream truncated|Failed to fetch object|returned empty content"
    r"|Sequential GET fallback failed|Byte-range fallback failed"
)
WORKER_PATTERNS = (WORKER_ZONE_ISO, WORKER_ZONE_DATE, SLURM_CANCEL, DATA_ERROR)


@cache
def ais_data_path_patterns() -> frozenset[str]:
    """AIS warning/error kinds that count as data-path trouble: every named kind that is not usually noise."""
    from debug_training_logs.formats.ais import AIS_ERROR_PATTERNS

    return frozenset(p.name for p in AIS_ERROR_PATTERNS if not p.noise)


_ISO_OFFSET = re.compile(r"(?P<ts>20\d\d-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:[.,]\d+)?(?P<off>Z|[+-]\d\d:?\d\d)\b")
_DATE_ZONE = re.compile(r"\d\d:\d\d:\d\d (?P<zone>[A-Z]{1,5}) 20\d\d\b")
_CANCEL = re.compile(r"CANCELLED AT (?P<ts>20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d)")
MAX_KEPT = 5


@dataclass(repr=False)
class WorkerClockFacts:
    """Per file: lines that state a zone, SLURM cancel times, and the first data errors (picklable, bounded)."""

    zones: list[tuple[float | None, str, int, str]] = field(default_factory=list)
    """(UTC offset hours or None if ambiguous, zone text, line, text)."""
    cancels: list[tuple[datetime, int, str]] = field(default_factory=list)
    data_errors: list[tuple[datetime | None, int, str, int | None]] = field(default_factory=list)
    """(time when the line states one, line, text, rank)."""


class WorkerClockSink:
    """Collects :class:`WorkerClockFacts` from one worker file's hits (runs in the scan worker)."""

    def __init__(self, lf: LogFile) -> None:
        self.facts = WorkerClockFacts()

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        text = strip_ansi(line)
        f = self.facts
        if (0 in pattern_ids or 1 in pattern_ids) and len(f.zones) < MAX_KEPT:
            iso = _ISO_OFFSET.search(text)
            if iso:
                off = iso.group("off")
                hours = 0.0 if off == "Z" else _offset_hours(off)
                f.zones.append((hours, off, line_no, cut(text)))
            else:
                dz = _DATE_ZONE.search(text)
                if dz:
                    f.zones.append((ZONE_OFFSETS.get(dz.group("zone")), dz.group("zone"), line_no, cut(text)))
        if 2 in pattern_ids and len(f.cancels) < MAX_KEPT:
            m = _CANCEL.search(text)
            at = _iso_time(m.group("ts")) if m else None
            if at is not None:
                f.cancels.append((at, line_no, cut(text)))
        if 3 in pattern_ids and len(f.data_errors) < MAX_KEPT:
            wt = parse_wall_time(text)
            when = with_year(wt, None) if wt is not None and wt.year is not None else None
            f.data_errors.append((when, line_no, cut(text), line_rank(text).rank))

    def finish(self) -> WorkerClockFacts:
        return self.facts


def _iso_time(text: str) -> datetime | None:
    """``text`` (``2026-05-21T14:30:00``) as a datetime, None when its digits are no time (``2026-13-40T25:61:61``)."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _offset_hours(text: str) -> float:
    sign = -1 if text.startswith("-") else 1
    digits = text[1:].replace(":", "")
    return sign * (int(digits[:2]) + int(digits[2:4]) / 60)


@dataclass(frozen=True, repr=False, eq=False)
class MethodResult:
    """One way of measuring the offset, with what it compared."""

    method: str
    """``zone_labels``, ``activity_stop`` or ``error_onset``."""
    offset_hours: float | None
    """Worker clock minus AIS clock, snapped to a half hour; None when the method could not measure it."""
    raw_offset_hours: float | None
    """The unsnapped difference of the two anchors."""
    daemon: str | None
    """The AIS daemon the AIS-side anchor comes from (None for cluster-wide evidence)."""
    evidence: list[Evidence]
    detail: str


@dataclass(frozen=True, repr=False, eq=False)
class DaemonAlignment:
    daemon: str
    role: str
    zone_hint: str | None
    offset_hours: float | None
    verified: bool
    methods: list[str]


@dataclass(frozen=True, repr=False, eq=False)
class Alignment:
    """The analysis result (the tool maps it onto its model)."""

    summary: str
    offset_hours: float | None
    verified: bool
    methods: list[MethodResult]
    daemons: list[DaemonAlignment]
    ais_zone: str | None
    ais_utc_offset_hours: float | None
    """AIS clock minus UTC, when the hourly markers name an unambiguous zone."""
    worker_utc_offset_hours: float | None
    """Worker clock minus UTC: from a worker zone label, or the offset plus the AIS zone."""
    missing: list[str]
    """What would be needed to verify (when not verified)."""


def _snap(raw_hours: float, tolerance: timedelta) -> float | None:
    snapped = round(raw_hours / SNAP_HOURS) * SNAP_HOURS
    return snapped if abs(raw_hours - snapped) * 3600 <= tolerance.total_seconds() else None


def _hours(delta: timedelta) -> float:
    return delta.total_seconds() / 3600


@dataclass(repr=False, eq=False)
class WorkerClock:
    """Worker-side anchors gathered from one scan."""

    inventory: Inventory
    facts: list[tuple[str, WorkerClockFacts]]
    coverage: Coverage

    def last_activity(self) -> tuple[datetime, Evidence] | None:
        from debug_training_logs.models import Evidence

        end = self.inventory.end
        if end is None:
            return None
        when = with_year(end.time, self.inventory.year_hint)
        if when is None:
            return None
        return when, Evidence(file=end.file, line=end.line, text=end.text)

    def cancel(self) -> tuple[datetime, Evidence] | None:
        from debug_training_logs.models import Evidence

        found = [(t, Evidence(file=rel, line=ln, text=tx)) for rel, f in self.facts for (t, ln, tx) in f.cancels]
        return min(found, key=lambda x: x[0]) if found else None

    def zone(self) -> tuple[float | None, str, Evidence] | None:
        from debug_training_logs.models import Evidence

        for rel, f in self.facts:
            for hours, label, ln, tx in f.zones:
                return hours, label, Evidence(file=rel, line=ln, text=tx)
        return None

    def first_data_error(self) -> tuple[datetime, Evidence] | None:
        from debug_training_logs.models import Evidence

        timed = [
            (t, Evidence(file=rel, line=ln, text=tx))
            for rel, f in self.facts
            for (t, ln, tx, _r) in f.data_errors
            if t is not None
        ]
        return min(timed, key=lambda x: x[0]) if timed else None

    def untimed_data_errors(self) -> list[Evidence]:
        from debug_training_logs.models import Evidence

        return [
            Evidence(file=rel, line=ln, text=tx)
            for rel, f in self.facts
            for (t, ln, tx, _r) in f.data_errors
            if t is None
        ]


def scan_worker_clock(logs_dir: str | os.PathLike[str]) -> WorkerClock:
    """One pass over the worker logs for the alignment anchors (and the inventory)."""
    job = scan_job(Path(logs_dir), WORKER_PATTERNS, WorkerClockSink)
    facts = [(s.file.rel, r) for s, r in zip(job.files, job.caller_results, strict=True) if r is not None]
    return WorkerClock(job.inventory, facts, job.coverage())


def _stall_onset(table: NcclTable | None, year_hint: int | None) -> tuple[datetime, Evidence] | None:
    """When the ranks waiting on a straggler entered the collective (timeout time - timeout), from the NCCL table."""
    from debug_training_logs.models import Evidence

    if table is None or not table.straggler_ranks:
        return None
    starts = [
        (datetime.fromisoformat(r.collective_start_time), r)
        for r in table.rows
        if r.collective_start_time
        and r.signal == "detected"
        and r.rank not in table.straggler_ranks
        and r.collective_start_time[4:5] == "-"  # has a year (the table writes year-less times as MM-DD HH:MM:SS)
    ]
    if not starts:
        return None
    when, row = min(starts, key=lambda x: x[0])
    return when, Evidence(
        file=row.file or "", line=row.line or 0, text=f"collective start = {row.timeout_time} - {row.timeout_ms} ms"
    )


def align(
    worker: WorkerClock,
    table: NcclTable,
    collection: ais_delta_types.AisCollection,
    spikes: Sequence[ais_delta_types.Spike] | None = None,
) -> Alignment:
    """Measure worker-minus-AIS clock offset by every applicable method (see module docstring), from what the scans
    found: the workers' clock facts (:func:`scan_worker_clock`), their NCCL table and the AIS logs' collection
    (:func:`~debug_training_logs.analysis.ais_collect.collect`). Reads no file. ``spikes``: the collection's spikes
    of the default counters when the caller found them already (every daemon with stats:
    :func:`~debug_training_logs.analysis.ais_intervals.collection_spikes`' per daemon).
    """
    from debug_training_logs.analysis import ais_intervals

    index = collection.index
    methods: list[MethodResult] = []

    # AIS zone from the hourly markers.
    ais_zone = index.zone
    ais_utc = ZONE_OFFSETS.get(ais_zone) if ais_zone else None
    worker_zone = worker.zone()
    if worker_zone is not None and ais_zone is not None:
        w_hours, w_label, w_ev = worker_zone
        if w_hours is not None and ais_utc is not None:
            methods.append(
                MethodResult(
                    "zone_labels",
                    w_hours - ais_utc,
                    w_hours - ais_utc,
                    None,
                    [w_ev],
                    f"worker lines state {w_label} (UTC{w_hours:+g}); AIS hourly markers state {ais_zone} "
                    f"(UTC{ais_utc:+g})",
                )
            )
        else:
            methods.append(
                MethodResult(
                    "zone_labels",
                    None,
                    None,
                    None,
                    [w_ev],
                    f"zones are only hints: worker '{w_label}', AIS '{ais_zone}' (an abbreviation that "
                    "names several zones, or none)",
                )
            )

    # Activity stop: workers' end vs each target's last get.n/getbatch.n increase.
    worker_stop: tuple[datetime, Evidence] | None = worker.cancel() or worker.last_activity()
    last = worker.last_activity()
    if worker_stop is not None and last is not None and last[0] < worker_stop[0]:
        worker_stop = last  # the workers' last line is closer to when reads stopped than a later cancel
    stops: dict[str, ais_delta_types.GetStop] = {}
    for daemon in index.daemons:
        if daemon.role != "target":
            continue
        series = collection.points.get(daemon.key, [])
        for gs in ais_intervals.get_stops(daemon, series):
            if gs.stopped and (daemon.key not in stops or gs.last_increase_at > stops[daemon.key].last_increase_at):
                stops[daemon.key] = gs
    for key, gs in sorted(stops.items()):
        if worker_stop is None:
            continue
        raw = _hours(worker_stop[0] - gs.last_increase_at)
        snapped = _snap(raw, ACTIVITY_STOP_TOLERANCE)
        methods.append(
            MethodResult(
                "activity_stop",
                snapped,
                round(raw, 3),
                key,
                [worker_stop[1], gs.evidence],
                f"workers stopped at {worker_stop[0].isoformat()} (worker clock); {key} {gs.counter} last "
                f"grew by {gs.last_increase_at.isoformat()} (AIS clock)",
            )
        )

    # Error onset: first worker data error (or the stall onset) vs the first data-path error on a spiking daemon.
    onset = worker.first_data_error() or _stall_onset(table, worker.inventory.year_hint)
    for daemon_key, first, ev in _ais_error_onsets(collection, spikes):
        if onset is None:
            break
        raw = _hours(onset[0] - first)
        snapped = _snap(raw, ERROR_ONSET_TOLERANCE)
        methods.append(
            MethodResult(
                "error_onset",
                snapped,
                round(raw, 3),
                daemon_key,
                [onset[1], ev],
                f"first worker data-path trouble at {onset[0].isoformat()} (worker clock); first data-path "
                f"error on {daemon_key} at {first.isoformat()} (AIS clock)",
            )
        )

    return _conclude(methods, index, ais_zone, ais_utc, worker_zone, bool(worker.untimed_data_errors()))


def _ais_error_onsets(
    collection: ais_delta_types.AisCollection, spikes: Sequence[ais_delta_types.Spike] | None = None
) -> list[tuple[str, datetime, Evidence]]:
    """Per daemon whose error counters spiked: its first data-path W/E line (or the spike interval's end); ``spikes``:
    the collection's spikes when known already."""
    from debug_training_logs.analysis import ais_intervals

    if spikes is None:
        spikes = ais_intervals.collection_spikes(collection)
    spiking: dict[str, ais_delta_types.Spike] = {}
    for sp in spikes:
        if sp.counter.startswith("err.") and (sp.daemon not in spiking or sp.start < spiking[sp.daemon].start):
            spiking[sp.daemon] = sp
    firsts: dict[str, tuple[datetime, Evidence]] = {}
    for (ref, pattern), group in collection.info_groups.items():
        daemon = collection.index.daemon_of(ref)
        if daemon is None or daemon.key not in spiking or pattern not in ais_data_path_patterns():
            continue
        if group.first is None or group.example is None:
            continue
        if daemon.key not in firsts or group.first < firsts[daemon.key][0]:
            firsts[daemon.key] = (group.first, group.example)
    out = []
    for key, sp in sorted(spiking.items()):
        first, ev = firsts.get(key, (sp.end, sp.evidence))
        out.append((key, first, ev))
    return out


def _conclude(
    methods: list[MethodResult],
    index: AisIndex,
    ais_zone: str | None,
    ais_utc: float | None,
    worker_zone: tuple[float | None, str, Evidence] | None,
    untimed_errors: bool,
) -> Alignment:
    per_daemon: dict[str, set[tuple[str, float]]] = defaultdict(set)
    global_methods: set[tuple[str, float]] = set()
    for m in methods:
        if m.offset_hours is None:
            continue
        (global_methods if m.daemon is None else per_daemon[m.daemon]).add((m.method, m.offset_hours))
    own: dict[str, dict[float, set[str]]] = {}
    for d in index.daemons:
        by_offset: dict[float, set[str]] = defaultdict(set)
        for name, off in per_daemon.get(d.key, set()) | global_methods:
            by_offset[off].add(name)
        own[d.key] = by_offset
    # A daemon is verified by two methods of its own that agree (and none that disagrees) ...
    verified_keys = {k for k, bo in own.items() if len(bo) == 1 and len(next(iter(bo.values()))) >= 2}
    agreed = {next(iter(own[k])) for k in verified_keys}
    verified_zones = {d.zone for d in index.daemons if d.key in verified_keys and d.zone}
    daemons: list[DaemonAlignment] = []
    for d in index.daemons:
        bo = own[d.key]
        names: set[str] = set()
        offset_d: float | None = None
        if bo:
            offset_d, names = max(bo.items(), key=lambda kv: len(kv[1]))
        verified = d.key in verified_keys
        if not verified and len(agreed) == 1 and d.zone in verified_zones and (not bo or set(bo) == agreed):
            # ... or, in a cluster whose verified daemons agree, by the same hourly-marker zone (same clock) and no
            # measurement of its own that disagrees.
            verified = True
            offset_d = next(iter(agreed))
            names = {*names, f"same_zone_as_verified_daemons ({d.zone})"}
        daemons.append(
            DaemonAlignment(
                daemon=d.key,
                role=d.role,
                zone_hint=d.zone,
                offset_hours=offset_d,
                verified=verified,
                methods=sorted(names),
            )
        )
    all_offsets = {m.offset_hours for m in methods if m.offset_hours is not None}
    verified_all = bool(agreed) and len(agreed) == 1 and len(all_offsets) == 1
    offset = next(iter(all_offsets)) if len(all_offsets) == 1 else None
    missing: list[str] = []
    names = {m.method for m in methods if m.offset_hours is not None}
    if not verified_all:
        if len(all_offsets) > 1:
            missing.append(
                f"methods disagree ({sorted(all_offsets)} h): check which anchor is wrong before correlating"
            )
        if "activity_stop" not in names:
            missing.append("activity_stop: needs the workers' end time and an AIS target whose get.n stops growing")
        if "error_onset" not in names:
            missing.append(
                "error_onset: needs a worker data error with a time"
                + (" (loader errors were logged without a time)" if untimed_errors else "")
                + " or a straggler's collective start, and an AIS daemon whose error counters spiked"
            )
        if "zone_labels" not in names:
            missing.append(
                "zone_labels: needs a worker line with a zone (ISO offset or date output) and an unambiguous AIS "
                "hourly-marker zone"
            )
    worker_utc: float | None = None
    if worker_zone is not None and worker_zone[0] is not None:
        worker_utc = worker_zone[0]
    elif verified_all and offset is not None and ais_utc is not None:
        worker_utc = offset + ais_utc
    if verified_all and offset is not None:
        how = " and ".join(sorted(names))
        summary = f"Worker clock = AIS clock {offset:+g} h, verified by {how}."
        if ais_utc is not None:
            summary += f" AIS logs in {ais_zone} (UTC{ais_utc:+g}), so workers log in UTC{worker_utc:+g}."
    elif offset is not None:
        summary = (
            f"Worker clock = AIS clock {offset:+g} h by {', '.join(sorted(names))} only: NOT verified "
            "(needs two methods that agree). Do not correlate worker and AIS times as fact yet."
        )
    elif all_offsets:
        summary = f"Methods disagree on the offset ({sorted(all_offsets)} h): NOT verified."
    else:
        summary = "No method could measure the offset: NOT verified. " + "; ".join(missing[:2])
    if ais_zone and ais_utc is None:
        summary += f" AIS zone '{ais_zone}' is ambiguous (a hint only)."
    return Alignment(
        summary=summary,
        offset_hours=offset,
        verified=verified_all,
        methods=methods,
        daemons=daemons,
        ais_zone=ais_zone,
        ais_utc_offset_hours=ais_utc,
        worker_utc_offset_hours=worker_utc,
        missing=missing,
    )


def to_ais_clock(worker_time: datetime, alignment: Alignment) -> datetime | None:
    """A worker-clock time on the AIS clock (None unless the offset is verified)."""
    if not alignment.verified or alignment.offset_hours is None:
        return None
    return worker_time - timedelta(hours=alignment.offset_hours)


def to_utc(worker_time: datetime | None, ais_time: datetime | None, alignment: Alignment) -> datetime | None:
    """UTC for a worker-clock or AIS-clock time, when the zones are known (verified offset + unambiguous zone)."""
    if worker_time is not None and alignment.worker_utc_offset_hours is not None:
        return worker_time - timedelta(hours=alignment.worker_utc_offset_hours)
    if ais_time is not None and alignment.ais_utc_offset_hours is not None:
        return ais_time - timedelta(hours=alignment.ais_utc_offset_hours)
    return None


__all__: Sequence[str] = ("Alignment", "align", "scan_worker_clock", "to_ais_clock", "to_utc")
