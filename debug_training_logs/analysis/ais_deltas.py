"""Per-daemon deltas of AIStore's cumulative counters between consecutive stats lines, and what they say.

AIS writes a stats line ``{k:v,...}`` at most every ``log.stats_time`` (3 min by default) and only while the node is
active; its ``*.n``/``*.size``/``*.total`` values are cumulative since the process started. This module turns those
lines into per-interval deltas and reads them the way the investigation protocol asks:

* **restarts and resets**: a decrease of any cumulative counter means the process restarted or someone ran
  ``ais cluster reset-stats``; the delta is then the value after the reset (events since the reset: a lower bound),
  never a negative number. A new ``Started up at`` file between the two lines, or the ``state.flags`` restarted bit
  (128) appearing, corroborates a restart.
* **spikes** (rule in :func:`find_spikes`): an error counter rising far above the daemon's own baseline.
* **get stop**: the last interval in which ``get.n`` / ``getbatch.n`` increased; AIS writes no stats line while a
  node is idle, so "no further line although the daemon kept logging" is the stop signal.
* **proxy vs target**: proxy errors stable while target errors spike means a target-side problem.
* **notable lines**: the W/E lines grouped by the named patterns of ``formats.ais.AIS_ERROR_PATTERNS`` (and by a
  normalised template for the rest), each counted once even though INFO and ERROR files both carry it.

Times are the daemons' local clock (ISO 8601 without offset); the zone abbreviation of the hourly markers is reported
as a hint only. Aligning them with the workers' clocks is ``align_timezones``' job, not this module's.
"""

from __future__ import annotations

import bisect
import os
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import pairwise
from statistics import median
from typing import TYPE_CHECKING, TypeVar

from debug_training_logs.analysis.ais_index import AisDaemon, AisDirScan, AisIndex, AisSource
from debug_training_logs.errors import UserInputError
from debug_training_logs.formats.ais import (
    AIS_ERROR_PATTERNS,
    AisRecord,
    StatsLine,
    classify_line,
    is_cumulative,
    line_template,
    parse_stats,
)
from debug_training_logs.textcut import cut

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Coverage, Evidence, UnreadableFile

DEFAULT_COUNTERS: tuple[str, ...] = (
    "err.get.n",
    "err.getbatch.n",
    "err.http.write.n",
    "err.put.n",
    "err.head.n",
    "err.lst.n",
    "err.kalive.n",
    "err.append.n",
    "get.n",
    "getbatch.n",
    "getbatch.obj.n",
    "getbatch.throttle.ns",
)
"""The counters of the investigation protocol's table."""
GET_STOP_COUNTERS: tuple[str, ...] = ("get.n", "getbatch.n")
"""Counters whose last increase marks the moment clients stopped reading (compared with the workers' death)."""
DEFAULT_LIMIT = 100

SPIKE_FACTOR = 5.0
"""A spike is at least this many times what the daemon's baseline rate predicts for the interval."""
SPIKE_MIN_EVENTS = 10
"""... and at least this many events (error counters)."""
SPIKE_MIN_NS = 1_000_000_000
"""... or this many nanoseconds (cumulative time counters such as ``getbatch.throttle.ns``: 1 s)."""
DEFAULT_STATS_PERIOD = timedelta(minutes=3)
"""``log.stats_time`` default; a daemon's own median gap between stats lines is used when it has enough of them."""
OTHER_TEMPLATES_PER_FILE = 500
"""Distinct un-named W/E templates kept per file; the rest are counted under one catch-all entry."""
OTHER = "other"
EPOCH = datetime(1970, 1, 1)
T = TypeVar("T")


# ---------------------------------------------------------------------------------------------------------------------
# Results (plain data; the tool turns them into its pydantic models)


@dataclass(frozen=True, repr=False, eq=False)
class StatsPoint:
    """One stats line of a daemon, with its absolute local time."""

    at: datetime
    ref: str
    line: int
    text: str
    stats: StatsLine
    process_start: datetime | None = None
    """Header time of the ``Started up at`` file of the process that wrote it (None when unknown)."""

    def evidence(self) -> Evidence:
        from debug_training_logs.models import Evidence

        return Evidence(file=self.ref, line=self.line, text=cut(self.text))


@dataclass(frozen=True, repr=False, eq=False)
class IntervalDelta:
    """Counter deltas between two consecutive stats lines of one daemon."""

    daemon: str
    start: datetime
    """Time of the earlier stats line (local)."""
    end: datetime
    """Time of the later stats line (local): the events happened in (start, end]."""
    minutes: float
    deltas: dict[str, int | None]
    """Counter -> increase in the interval; None when a cut (2 KiB) stats line hides the counter."""
    reset: bool
    """The counters were reset in the interval (restart or reset-stats): deltas are counts since the reset."""
    get_error_rate: float | None
    """err.get.n delta / get.n delta (None when get.n did not grow)."""
    getbatch_error_rate: float | None
    """err.getbatch.n delta / getbatch.n delta (None when getbatch.n did not grow)."""
    start_evidence: Evidence
    end_evidence: Evidence


@dataclass(frozen=True, repr=False, eq=False)
class Restart:
    """Cumulative counters going down (or a new process) between two stats lines."""

    daemon: str
    kind: str
    """``restart`` (a new process: new ``Started up at`` file or the restarted flag), ``stats reset`` (counters
    dropped without a sign of a new process: ``ais cluster reset-stats`` or missing log files) or ``errors reset``
    (only ``err.*`` dropped: ``reset-stats --errors-only``)."""
    after: datetime
    """Last stats line before it."""
    by: datetime
    """First stats line after it."""
    decreased: list[str]
    """Cumulative counters whose value went down."""
    process_start: datetime | None
    """Header time of the new ``Started up at`` file, when there is one in (after, by]."""
    process_start_file: str | None
    restarted_flag: bool
    """``state.flags`` in the later line has the NodeRestarted bit (128)."""
    explanation: str
    evidence: Evidence


@dataclass(frozen=True, repr=False, eq=False)
class Spike:
    """An interval in which a counter rose far above the daemon's own baseline."""

    daemon: str
    counter: str
    start: datetime
    end: datetime
    delta: int
    expected: float
    """What the daemon's baseline rate (median per minute over its intervals) predicts for this interval."""
    factor: float | None
    """delta / expected (None when the baseline is zero)."""
    evidence: Evidence
    """The stats line that ends the interval (the one before it is cited in the interval list)."""


@dataclass(frozen=True, repr=False, eq=False)
class GetStop:
    """When a daemon's reads stopped, as far as its stats lines tell."""

    daemon: str
    counter: str
    last_increase_after: datetime
    """The stats line before the last increase: the counter was still lower then."""
    last_increase_at: datetime
    """The stats line that shows the last increase: reads stopped after ``last_increase_after`` and, as far as
    logged, by this time (AIS logs no line while idle, so later reads of the same interval are invisible)."""
    value: int
    later_stats_lines: int
    """Stats lines after it in which the counter did not grow."""
    daemon_last_record: datetime | None
    """The daemon's last log record: logs continuing well past the last increase mean idle, not dead."""
    stopped: bool
    """True when the daemon kept logging for more than 1.5 stats periods after the last increase (or wrote more
    stats lines without growth); False when its logs end too soon to tell."""
    evidence: Evidence


@dataclass(frozen=True, repr=False, eq=False)
class ProxyVsTarget:
    """Whose error counters moved: the proxies' or the targets'."""

    verdict: str
    """``target_side``, ``proxy_side``, ``both``, ``no_spikes``, ``no_proxy_logs``, ``no_target_logs``, ``no_stats``."""
    explanation: str
    proxy_error_deltas: dict[str, int]
    """Sum over proxies and intervals (in the window) of each ``err.*`` counter's delta."""
    target_error_deltas: dict[str, int]
    spiking_proxies: list[str]
    spiking_targets: list[str]


@dataclass(frozen=True, repr=False, eq=False)
class NotableLines:
    """W/E lines of one daemon that match one named pattern (or one template), each event counted once."""

    daemon: str
    pattern: str
    """Name from ``AIS_ERROR_PATTERNS`` (``getbatch_out_of_bounds``...) or ``other``."""
    meaning: str
    noise: bool
    count: int
    severities: str
    """The severities seen, ``E``/``W``/``EW``."""
    first: datetime | None
    last: datetime | None
    example: Evidence
    template: str
    """The example's text with numbers, ids and addresses replaced (how ``other`` lines are grouped)."""


@dataclass(frozen=True, repr=False, eq=False)
class DaemonFile:
    """One file of a daemon and the range of the daemon's local clock it covers."""

    file: str
    severity: str
    kind: str
    pid: int | None
    start: datetime | None
    end: datetime | None
    records: int
    stats_lines: int
    covers_window: bool
    """Overlaps the requested window (always True without a window)."""


@dataclass(frozen=True, repr=False, eq=False)
class DaemonSummary:
    """A daemon and its files."""

    daemon: str
    name: str
    role: str
    node_id: str | None
    hosts: list[str]
    version: str | None
    zone_hint: str | None
    process_starts: list[datetime]
    stats_lines: int
    first_stats: datetime | None
    last_stats: datetime | None
    files: list[DaemonFile]
    files_truncated: int
    window_files: list[str]
    """The files (INFO and ERROR) whose time range overlaps the window: all of them must be read."""
    latest_file: str | None
    """The newest INFO file: evidence is often in an EARLIER one."""
    note: str


@dataclass(frozen=True, repr=False, eq=False)
class AisCounterDeltasResult:
    """Everything ``ais_counter_deltas`` found."""

    summary: str
    coverage: Coverage
    zone_hint: str | None
    time_note: str
    window_start: datetime | None
    window_end: datetime | None
    counters: list[str]
    daemons: list[DaemonSummary]
    intervals: list[IntervalDelta]
    restarts: list[Restart]
    spikes: list[Spike]
    get_stops: list[GetStop]
    proxy_vs_target: ProxyVsTarget
    notable_lines: list[NotableLines]
    skipped_files: list[UnreadableFile]
    truncated: dict[str, int]
    """List name -> entries left out because of ``limit`` (0 when complete)."""


# ---------------------------------------------------------------------------------------------------------------------
# Collecting


@dataclass(repr=False, eq=False)
class _Group:
    """W/E events of one template in one INFO file."""

    count: int = 0
    first: datetime | None = None
    last: datetime | None = None
    example: Evidence | None = None
    template: str = ""
    severities: set[str] = field(default_factory=set)


@dataclass(repr=False, eq=False)
class _ErrorFileGroup:
    """W/E events of one template in one ERROR file: their times, to drop those an INFO file already has."""

    times: array[float] = field(default_factory=lambda: array("d"))
    example: Evidence | None = None
    template: str = ""
    severities: set[str] = field(default_factory=set)


@dataclass(repr=False, eq=False)
class AisCollection:
    """What one pass over an AIS directory collected: the index, stats points and W/E event groups."""

    index: AisIndex
    points: dict[str, list[StatsPoint]]
    """Daemon key -> stats points sorted by time."""
    info_groups: dict[tuple[str, str], _Group]
    """(file ref, pattern or template key) -> events in that INFO file."""
    error_groups: dict[tuple[str, str], _ErrorFileGroup]


class _Collector:
    def __init__(self, start: datetime | None, end: datetime | None) -> None:
        self.start = start
        self.end = end
        self.points_by_ref: dict[str, list[tuple[AisRecord, StatsLine]]] = defaultdict(list)
        self.info_groups: dict[tuple[str, str], _Group] = {}
        self.error_groups: dict[tuple[str, str], _ErrorFileGroup] = {}
        self.other_keys: Counter[str] = Counter()

    def add(self, source: AisSource, rec: AisRecord) -> None:
        if rec.is_stats:
            stats = parse_stats(rec.message)
            if stats is not None and rec.at is not None:
                self.points_by_ref[source.ref].append((rec, stats))
            return
        if rec.severity == "I":
            return
        if rec.at is not None and (
            (self.start is not None and rec.at < self.start) or (self.end is not None and rec.at > self.end)
        ):
            return
        body = rec.body
        pattern = classify_line(body)
        if pattern is not None:
            key = pattern.name
            template = ""
        else:
            template = line_template(body)[:200]
            key = f"{OTHER}:{template}"
            if key not in self.other_keys and len(self.other_keys) >= OTHER_TEMPLATES_PER_FILE:
                key, template = f"{OTHER}:*", "(too many distinct templates)"
            self.other_keys[key] += 1
        if source.severity == "INFO":
            g = self.info_groups.get((source.ref, key))
            if g is None:
                from debug_training_logs.models import Evidence

                example = Evidence(file=source.ref, line=rec.line, text=cut(rec.text))
                g = self.info_groups[(source.ref, key)] = _Group(example=example, template=template)
            g.count += 1
            g.severities.add(rec.severity)
            if rec.at is not None:
                if g.first is None or rec.at < g.first:
                    g.first = rec.at
                if g.last is None or rec.at > g.last:
                    g.last = rec.at
        elif rec.at is not None:  # an undated ERROR-file line cannot be matched against the INFO files: left out
            e = self.error_groups.get((source.ref, key))
            if e is None:
                from debug_training_logs.models import Evidence

                example = Evidence(file=source.ref, line=rec.line, text=cut(rec.text))
                e = self.error_groups[(source.ref, key)] = _ErrorFileGroup(example=example, template=template)
            e.severities.add(rec.severity)
            e.times.append(_seconds(rec.at))

    def start_file(self) -> None:
        self.other_keys = Counter()


def collect(
    ais_dir: str | os.PathLike[str], start: datetime | None = None, end: datetime | None = None
) -> AisCollection:
    """One pass over ``ais_dir``: the index, every daemon's stats points, and the W/E lines in [start, end]."""
    scan = AisDirScan(ais_dir)
    collector = _Collector(start, end)
    current = None
    for source, rec in scan.records(everything=False):
        if source.ref != current:
            current = source.ref
            collector.start_file()
        collector.add(source, rec)
    index = scan.index()
    points: dict[str, list[StatsPoint]] = defaultdict(list)
    for ref, items in collector.points_by_ref.items():
        daemon = index.daemon_of(ref)
        if daemon is None or index.is_duplicate(ref):
            continue
        process_start = _process_start_of(daemon, ref)
        for rec, stats in items:
            assert rec.at is not None
            points[daemon.key].append(StatsPoint(rec.at, ref, rec.line, rec.text, stats, process_start))
    for series in points.values():
        series.sort(key=lambda p: (p.at, p.ref, p.line))
    return AisCollection(index, dict(points), collector.info_groups, collector.error_groups)


def _process_start_of(daemon: AisDaemon, ref: str) -> datetime | None:
    """The start of the process that wrote INFO file ``ref``: the latest ``Started up`` file at or before it."""
    f = next((x for x in daemon.info_files if x.ref == ref), None)
    if f is None or f.start is None:
        return None
    starts = [s for s in daemon.process_starts if s <= f.start]
    return starts[-1] if starts else None


# ---------------------------------------------------------------------------------------------------------------------
# Computing


def stats_series(ais_dir: str | os.PathLike[str]) -> dict[str, list[StatsPoint]]:
    """Daemon key -> its stats lines in time order (absolute local datetimes), from one pass over ``ais_dir``."""
    return collect(ais_dir).points


def _changed_counters(prev: StatsLine, cur: StatsLine) -> list[str]:
    out = []
    for n in sorted(prev.cumulative | cur.cumulative):
        a, b = prev.get(n), cur.get(n)
        if a is not None and b is not None and b < a:
            out.append(n)
    return out


@dataclass(frozen=True, repr=False, eq=False)
class _Step:
    """Two consecutive stats lines of a daemon and whether the counters were reset between them."""

    prev: StatsPoint
    cur: StatsPoint
    decreased: list[str]
    """Cumulative counters whose value went down."""
    process_start: datetime | None
    """Start of a new aisnode process between prev and cur (its ``Started up at`` header time), or None."""
    flag_raised: bool
    """The restarted bit (128) of ``state.flags`` is set in ``cur`` and was not in ``prev``."""

    @property
    def new_process(self) -> bool:
        return self.process_start is not None or self.flag_raised

    @property
    def reset(self) -> bool:
        return self.new_process or bool(self.decreased)

    def delta(self, name: str) -> int | None:
        """Increase of ``name``: ``cur - prev``, or ``cur`` when it was reset (counted from zero again: a lower
        bound, never negative); None when a cut stats line hides it."""
        a, b = self.prev.stats.get(name), self.cur.stats.get(name)
        if a is None or b is None:
            return None
        return b if self.new_process or b < a else b - a

    def rate(self, errors: str, total: str) -> float | None:
        e, n = self.delta(errors), self.delta(total)
        return None if e is None or not n else round(e / n, 6)


def steps(series: Sequence[StatsPoint]) -> list[_Step]:
    """Consecutive stats-line pairs of one daemon with what changed between them (the one place resets are told)."""
    out = []
    for prev, cur in pairwise(series):
        started = cur.process_start
        new = started is not None and started != prev.process_start and started > prev.at
        out.append(
            _Step(
                prev=prev,
                cur=cur,
                decreased=_changed_counters(prev.stats, cur.stats),
                process_start=started if new else None,
                flag_raised=cur.stats.restarted_flag and not prev.stats.restarted_flag,
            )
        )
    return out


def interval_deltas(daemon: str, series: Sequence[StatsPoint], counters: Sequence[str]) -> list[IntervalDelta]:
    """Deltas of ``counters`` between each pair of consecutive stats lines of one daemon; never negative."""
    return [
        IntervalDelta(
            daemon=daemon,
            start=step.prev.at,
            end=step.cur.at,
            minutes=round((step.cur.at - step.prev.at).total_seconds() / 60, 2),
            deltas={name: step.delta(name) for name in counters},
            reset=step.reset,
            get_error_rate=step.rate("err.get.n", "get.n"),
            getbatch_error_rate=step.rate("err.getbatch.n", "getbatch.n"),
            start_evidence=step.prev.evidence(),
            end_evidence=step.cur.evidence(),
        )
        for step in steps(series)
    ]


def find_restarts(daemon: AisDaemon, series: Sequence[StatsPoint]) -> list[Restart]:
    """Restarts and resets between consecutive stats lines (see :class:`Restart` for the kinds)."""
    out: list[Restart] = []
    for step in steps(series):
        if not step.reset:
            continue
        prev, cur, decreased, started = step.prev, step.cur, step.decreased, step.process_start
        started_file = None
        if started is not None:
            started_file = next((f.ref for f in daemon.info_files if f.kind == "started" and f.start == started), None)
        if step.new_process:
            kind = "restart"
            why = [f"new process log {started_file} started at {started.isoformat()}"] if started else []
            if step.flag_raised:
                why.append("state.flags has the restarted bit (128)")
            if decreased:
                why.append(f"{len(decreased)} cumulative counters went down")
            explanation = "; ".join(why)
        elif all(n.startswith("err.") for n in decreased):
            kind = "errors reset"
            explanation = "only err.* counters went down (ais cluster reset-stats --errors-only?)"
        else:
            kind = "stats reset"
            explanation = (
                "counters went down with no new 'Started up' file and no restarted flag: a stats reset "
                "(ais cluster reset-stats) or a restart whose log file is missing"
            )
        out.append(
            Restart(
                daemon=daemon.key,
                kind=kind,
                after=prev.at,
                by=cur.at,
                decreased=decreased,
                process_start=started,
                process_start_file=started_file,
                restarted_flag=cur.stats.restarted_flag,
                explanation=explanation,
                evidence=cur.evidence(),
            )
        )
    return out


def _spike_floor(counter: str) -> int:
    return SPIKE_MIN_NS if counter.endswith(".ns") or counter.endswith(".ns.total") else SPIKE_MIN_EVENTS


def spike_counters(counters: Iterable[str]) -> list[str]:
    """The counters that can spike: errors (``err.*``) and cumulative time totals (``getbatch.throttle.ns``)."""
    return [c for c in counters if c.startswith("err.") or c.endswith(".ns") or c.endswith(".ns.total")]


def find_spikes(intervals: Sequence[IntervalDelta], counters: Sequence[str]) -> list[Spike]:
    """Intervals where an error (or throttle-time) counter jumped far above the daemon's own baseline.

    Rule, per daemon and counter: the baseline is the median, over all the daemon's intervals that are not resets,
    of the counter's increase per minute. An interval is a spike when its increase is at least ``SPIKE_FACTOR`` (5)
    times what the baseline predicts for the interval's length AND at least ``SPIKE_MIN_EVENTS`` (10 events;
    1 s of nanoseconds for time totals). A zero baseline therefore makes any jump of 10 or more a spike, and a
    counter that always moves by a few (keep-alive hiccups) never is.
    """
    out: list[Spike] = []
    by_daemon: dict[str, list[IntervalDelta]] = defaultdict(list)
    for iv in intervals:
        by_daemon[iv.daemon].append(iv)
    for daemon, ivs in by_daemon.items():
        for counter in spike_counters(counters):
            rates = [
                d / iv.minutes
                for iv in ivs
                if not iv.reset and iv.minutes > 0 and (d := iv.deltas.get(counter)) is not None
            ]
            if not rates:
                continue
            baseline = median(rates)
            floor = _spike_floor(counter)
            for iv in ivs:
                delta = iv.deltas.get(counter)
                if delta is None or delta < floor:
                    continue
                expected = baseline * iv.minutes
                if delta >= SPIKE_FACTOR * expected:
                    out.append(
                        Spike(
                            daemon=daemon,
                            counter=counter,
                            start=iv.start,
                            end=iv.end,
                            delta=delta,
                            expected=round(expected, 3),
                            factor=round(delta / expected, 1) if expected > 0 else None,
                            evidence=iv.end_evidence,
                        )
                    )
    out.sort(key=lambda s: (s.start, s.daemon, s.counter))
    return out


def collection_spikes(collection: AisCollection, counters: Sequence[str] = DEFAULT_COUNTERS) -> list[Spike]:
    """Every daemon's spikes of ``counters`` over all its stats intervals (for callers that need only the spikes)."""
    intervals: list[IntervalDelta] = []
    for key, series in collection.points.items():
        intervals += interval_deltas(key, series, counters)
    return find_spikes(intervals, counters)


def stats_period(series: Sequence[StatsPoint]) -> timedelta:
    """The daemon's ``log.stats_time`` as its stats lines show it (median gap), or the 3 min default."""
    gaps = [(b.at - a.at) for a, b in pairwise(series) if b.at > a.at]
    if len(gaps) < 3:
        return DEFAULT_STATS_PERIOD
    return min(sorted(gaps)[len(gaps) // 2], timedelta(hours=1))


def get_stops(
    daemon: AisDaemon, series: Sequence[StatsPoint], counters: Sequence[str] = GET_STOP_COUNTERS
) -> list[GetStop]:
    """For each of ``counters`` the daemon ever increased: the last stats interval in which it grew."""
    out: list[GetStop] = []
    last_record = max((f.last_record for f in daemon.files if f.last_record), default=None)
    period = stats_period(series)
    pairs = steps(series)
    for counter in counters:
        last_idx = None
        for i, step in enumerate(pairs, 1):
            if step.delta(counter):
                last_idx = i
        if last_idx is None:
            continue
        cur = series[last_idx]
        later = len(series) - 1 - last_idx
        stopped = later > 0 or (last_record is not None and last_record - cur.at > period * 1.5)
        out.append(
            GetStop(
                daemon=daemon.key,
                counter=counter,
                last_increase_after=series[last_idx - 1].at,
                last_increase_at=cur.at,
                value=cur.stats.get(counter) or 0,
                later_stats_lines=later,
                daemon_last_record=last_record,
                stopped=stopped,
                evidence=cur.evidence(),
            )
        )
    return out


def get_stop_times(ais_dir: str | os.PathLike[str], counter: str = "get.n") -> list[GetStop]:
    """Every target's last increase of ``counter`` (``get.n`` by default), oldest first: the AIS-side anchor that
    clock alignment compares with the moment the workers died."""
    collection = collect(ais_dir)
    out: list[GetStop] = []
    for daemon in collection.index.daemons:
        if daemon.role != "target":
            continue
        out.extend(get_stops(daemon, collection.points.get(daemon.key, []), (counter,)))
    out.sort(key=lambda g: g.last_increase_at)
    return out


def compare_proxy_target(index: AisIndex, intervals: Sequence[IntervalDelta], spikes: Sequence[Spike]) -> ProxyVsTarget:
    """Whose errors moved: "proxy errors stable, target errors spiking" means a target-side problem."""
    roles = {d.key: d.role for d in index.daemons}
    totals: dict[str, Counter[str]] = {"proxy": Counter(), "target": Counter()}
    has_stats = {"proxy": False, "target": False}
    for iv in intervals:
        role = roles.get(iv.daemon)
        if role not in totals:
            continue
        has_stats[role] = True
        for name, d in iv.deltas.items():
            if name.startswith("err.") and d:
                totals[role][name] += d
    spiking = {
        role: sorted({s.daemon for s in spikes if roles.get(s.daemon) == role and s.counter.startswith("err.")})
        for role in ("proxy", "target")
    }
    n_proxies = sum(1 for d in index.daemons if d.role == "proxy")
    n_targets = sum(1 for d in index.daemons if d.role == "target")

    def describe(role: str) -> str:
        moved = ", ".join(f"{k} +{v}" for k, v in sorted(totals[role].items())) or "no error counter moved"
        return moved

    if not has_stats["proxy"] and not has_stats["target"]:
        verdict = "no_stats"
        explanation = "No daemon wrote two stats lines in the window: nothing to compare (idle nodes write none)."
    elif n_proxies == 0 or not has_stats["proxy"]:
        verdict = "no_proxy_logs" if n_proxies == 0 else "no_stats"
        who = "no proxy logs were given" if n_proxies == 0 else "the proxies wrote no stats interval in the window"
        detail = f"targets spiking: {', '.join(spiking['target'])}" if spiking["target"] else "no target spike"
        explanation = f"Cannot compare: {who}; {detail}."
    elif n_targets == 0 or not has_stats["target"]:
        verdict = "no_target_logs" if n_targets == 0 else "no_stats"
        who = "no target logs were given" if n_targets == 0 else "the targets wrote no stats interval in the window"
        explanation = f"Cannot compare: {who}."
    elif spiking["target"] and not spiking["proxy"]:
        verdict = "target_side"
        explanation = (
            f"Proxy errors stable ({describe('proxy')}, no spike); target errors spiking on "
            f"{', '.join(spiking['target'])}: a target-side problem (disk, memory, inter-target networking)."
        )
    elif spiking["proxy"] and not spiking["target"]:
        verdict = "proxy_side"
        explanation = (
            f"Proxy errors spiking on {', '.join(spiking['proxy'])} while targets are stable: a proxy-level "
            "problem (routing, client connections)."
        )
    elif spiking["proxy"] and spiking["target"]:
        verdict = "both"
        explanation = (
            f"Errors spike on proxies ({', '.join(spiking['proxy'])}) and targets "
            f"({', '.join(spiking['target'])}): look for a cluster-wide cause (network, overload)."
        )
    else:
        verdict = "no_spikes"
        explanation = f"No error spike on any daemon (proxies: {describe('proxy')}; targets: {describe('target')})."
    return ProxyVsTarget(
        verdict=verdict,
        explanation=explanation,
        proxy_error_deltas=dict(sorted(totals["proxy"].items())),
        target_error_deltas=dict(sorted(totals["target"].items())),
        spiking_proxies=spiking["proxy"],
        spiking_targets=spiking["target"],
    )


def notable_lines(collection: AisCollection) -> list[NotableLines]:
    """W/E line groups per daemon, each event counted once although INFO and ERROR files both carry it.

    ERROR files repeat the W/E lines of INFO files; an ERROR-file event is counted only when its time falls outside
    every INFO file of the same daemon (an INFO file deleted by retention, or never downloaded).
    """
    meaning = {p.name: (p.meaning, p.noise) for p in AIS_ERROR_PATTERNS}
    index = collection.index
    merged: dict[tuple[str, str], _Group] = {}
    for (ref, key), g in collection.info_groups.items():
        daemon = index.daemon_of(ref)
        if daemon is None or index.is_duplicate(ref):
            continue
        m = merged.setdefault((daemon.key, key), _Group(template=g.template))
        _merge(m, g.count, g.first, g.last, g.example, g.severities)
    covered: dict[str, list[tuple[float, float]]] = {}
    for daemon in index.daemons:
        spans = sorted(
            (_seconds(f.first_record), _seconds(f.last_record))
            for f in daemon.info_files
            if f.first_record is not None and f.last_record is not None
        )
        covered[daemon.key] = spans
    for (ref, key), e in collection.error_groups.items():
        daemon = index.daemon_of(ref)
        if daemon is None or index.is_duplicate(ref):
            continue
        spans = covered.get(daemon.key, [])
        starts = [s for s, _ in spans]
        kept = [t for t in e.times if not _inside(t, spans, starts)]
        if not kept:
            continue
        m = merged.setdefault((daemon.key, key), _Group(template=e.template))
        first = EPOCH + timedelta(seconds=min(kept))
        last = EPOCH + timedelta(seconds=max(kept))
        _merge(m, len(kept), first, last, e.example, e.severities)
    out: list[NotableLines] = []
    for (daemon_key, key), g in merged.items():
        name = OTHER if key.startswith(f"{OTHER}:") else key
        what, noise = meaning.get(name, ("a warning or error line that matches no named pattern", False))
        assert g.example is not None
        out.append(
            NotableLines(
                daemon=daemon_key,
                pattern=name,
                meaning=what,
                noise=noise,
                count=g.count,
                severities="".join(sorted(g.severities)),
                first=g.first,
                last=g.last,
                example=g.example,
                template=g.template or line_template(g.example.text.split(" ", 2)[-1])[:200],
            )
        )
    out.sort(key=lambda n: (n.pattern == OTHER, n.noise, n.first or datetime.max, n.daemon, n.pattern))
    return out


def _seconds(at: datetime) -> float:
    """A naive local time as seconds on a fixed scale (no time-zone conversion, unlike ``datetime.timestamp``)."""
    return (at - EPOCH).total_seconds()


def _inside(t: float, spans: list[tuple[float, float]], starts: list[float]) -> bool:
    i = bisect.bisect_right(starts, t) - 1
    return any(spans[j][0] <= t <= spans[j][1] for j in range(max(0, i - 1), min(len(spans), i + 1)))


def _merge(
    m: _Group, count: int, first: datetime | None, last: datetime | None, example: Evidence | None, sev: set[str]
) -> None:
    m.count += count
    m.severities |= sev
    if first is not None and (m.first is None or first < m.first):
        m.first = first
        if example is not None:
            m.example = example
    if last is not None and (m.last is None or last > m.last):
        m.last = last
    if m.example is None:
        m.example = example


# ---------------------------------------------------------------------------------------------------------------------
# The tool's computation


def parse_window_time(text: str | None, what: str) -> datetime | None:
    """``start``/``end`` as a naive local datetime (ISO 8601, the AIS daemons' clock); None for None/empty."""
    if text is None or not text.strip():
        return None
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise UserInputError(
            f"{what} {text!r} is not an ISO 8601 time. Give it like 2026-05-21T14:30:00 (the AIS daemons' clock)."
        ) from exc
    if value.tzinfo is not None:
        raise UserInputError(
            f"{what} {text!r} has a UTC offset, but AIS log times carry none. Give the time on the AIS daemons' "
            "clock without an offset (the result states the zone hint of their hourly markers)."
        )
    return value


def ais_counter_deltas(
    ais_dir: str | os.PathLike[str],
    counters: Sequence[str] | None = None,
    start: str | None = None,
    end: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> AisCounterDeltasResult:
    """Per daemon and stats interval, the deltas of AIS cumulative counters, with restarts, spikes, the moment
    reads stopped, the proxy-vs-target verdict and the notable W/E lines; which files cover the window.

    ``counters``: cumulative counter names (default :data:`DEFAULT_COUNTERS`); ``start``/``end``: ISO 8601 times on
    the AIS clock bounding the intervals and lines reported (baselines always use every interval); ``limit``: the
    most entries of each list (the rest is counted in ``truncated``).
    """
    from debug_training_logs.models import Coverage, UnreadableFile

    names = list(dict.fromkeys(counters)) if counters else list(DEFAULT_COUNTERS)
    for name in names:
        if not is_cumulative(name):
            raise UserInputError(
                f"{name!r} is not a cumulative counter (per-tick latency, throughput or gauge): deltas need "
                "*.n, *.size, *.total, getbatch.rxwait.ns or getbatch.throttle.ns names such as err.get.n."
            )
    if limit < 1:
        raise UserInputError(f"limit must be at least 1 (got {limit}).")
    window_start = parse_window_time(start, "start")
    window_end = parse_window_time(end, "end")
    if window_start and window_end and window_start > window_end:
        raise UserInputError(f"start {start!r} is after end {end!r}; swap them.")

    collection = collect(ais_dir, window_start, window_end)
    index = collection.index
    all_intervals: list[IntervalDelta] = []
    restarts: list[Restart] = []
    stops: list[GetStop] = []
    for daemon in index.daemons:
        series = collection.points.get(daemon.key, [])
        all_intervals += interval_deltas(daemon.key, series, names)
        restarts += find_restarts(daemon, series)
        stops += get_stops(daemon, series)
    spikes = find_spikes(all_intervals, names)

    def in_window(a: datetime, b: datetime) -> bool:
        return (window_start is None or b >= window_start) and (window_end is None or a <= window_end)

    intervals = [iv for iv in all_intervals if in_window(iv.start, iv.end)]
    spikes = [s for s in spikes if in_window(s.start, s.end)]
    restarts = [r for r in restarts if in_window(r.after, r.by)]
    verdict = compare_proxy_target(index, intervals, spikes)
    notable = notable_lines(collection)
    daemons = [
        _daemon_summary(d, collection.points.get(d.key, []), window_start, window_end, limit) for d in index.daemons
    ]

    truncated: dict[str, int] = {}
    flagged = {(s.daemon, s.start) for s in spikes} | {(r.daemon, r.after) for r in restarts}
    intervals = _bounded(
        intervals,
        limit,
        "intervals",
        truncated,
        priority=lambda iv: (
            0
            if (iv.daemon, iv.start) in flagged
            else 1
            if any(v for k, v in iv.deltas.items() if k.startswith("err."))
            else 2
        ),
    )
    order = {d.key: i for i, d in enumerate(index.daemons)}
    intervals.sort(key=lambda iv: (order.get(iv.daemon, 0), iv.start))
    spikes = _bounded(spikes, limit, "spikes", truncated)
    restarts = _bounded(restarts, limit, "restarts", truncated)
    stops = _bounded(stops, limit, "get_stops", truncated)
    notable = _bounded(notable, limit, "notable_lines", truncated)
    spiky = {s.daemon for s in spikes} | {r.daemon for r in restarts}
    daemons = _bounded(daemons, limit, "daemons", truncated, priority=lambda d: 0 if d.daemon in spiky else 1)
    daemons.sort(key=lambda d: order.get(d.daemon, 0))
    skipped = [UnreadableFile(file=s.rel, reason=s.reason) for s in index.skipped]
    skipped = _bounded(skipped, limit, "skipped_files", truncated)

    coverage = Coverage(
        files_scanned=index.files_scanned,
        bytes_scanned=index.bytes_scanned,
        ranks_found="",
        world_size=None,
        world_size_evidence="not applicable: AIStore daemon logs",
        missing_ranks="",
        unreadable_files=[UnreadableFile(file=f, reason=r) for f, r in sorted(index.unreadable.items())],
    )
    zone = index.zone
    time_note = (
        "Times are the AIS daemons' local clock, ISO 8601 without offset"
        + (f"; their hourly markers say {zone} (a hint: abbreviations are ambiguous)" if zone else "")
        + ". Use align_timezones to place them on the workers' clock."
    )
    result = AisCounterDeltasResult(
        summary="",
        coverage=coverage,
        zone_hint=zone,
        time_note=time_note,
        window_start=window_start,
        window_end=window_end,
        counters=names,
        daemons=daemons,
        intervals=intervals,
        restarts=restarts,
        spikes=spikes,
        get_stops=stops,
        proxy_vs_target=verdict,
        notable_lines=notable,
        skipped_files=skipped,
        truncated=truncated,
    )
    return _with_summary(result, index, collection)


def _bounded(
    items: list[T], limit: int, name: str, truncated: dict[str, int], priority: Callable[[T], int] | None = None
) -> list[T]:
    """At most ``limit`` of ``items`` (the best by ``priority``, then in their order); records how many were cut."""
    truncated[name] = max(0, len(items) - limit)
    if len(items) <= limit:
        return list(items)
    if priority is None:
        return list(items[:limit])
    ranked = sorted(range(len(items)), key=lambda i: (priority(items[i]), i))[:limit]
    return [items[i] for i in sorted(ranked)]


def _daemon_summary(
    daemon: AisDaemon, series: Sequence[StatsPoint], start: datetime | None, end: datetime | None, limit: int
) -> DaemonSummary:
    files = [
        DaemonFile(
            file=f.ref,
            severity=f.severity,
            kind=f.kind,
            pid=f.pid,
            start=f.start or f.first_record,
            end=f.end,
            records=f.records,
            stats_lines=f.stats_lines,
            covers_window=f.covers(start, end),
        )
        for f in daemon.files
    ]
    window_files = [f.file for f in files if f.covers_window]
    info = daemon.info_files
    latest = info[-1].ref if info else None
    if not series:
        note = "no stats lines: idle the whole time (AIS writes none while idle), or its INFO files are missing"
    elif len(series) == 1:
        note = "a single stats line: no interval to compute"
    else:
        note = ""
    if start is not None or end is not None:
        kept = [f for f in files if f.covers_window]
        others = [f for f in files if not f.covers_window]
        files = kept + others
    files_truncated = max(0, len(files) - limit)
    return DaemonSummary(
        daemon=daemon.key,
        name=daemon.name,
        role=daemon.role,
        node_id=daemon.node_id,
        hosts=list(daemon.hosts),
        version=daemon.version,
        zone_hint=daemon.zone,
        process_starts=list(daemon.process_starts),
        stats_lines=len(series),
        first_stats=series[0].at if series else None,
        last_stats=series[-1].at if series else None,
        files=files[:limit],
        files_truncated=files_truncated,
        window_files=window_files,
        latest_file=latest,
        note=note,
    )


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _amount(counter: str, value: int) -> str:
    """A delta as a person reads it: nanosecond totals in seconds."""
    return f"{value / 1e9:.1f} s" if counter.endswith(".ns") or counter.endswith(".ns.total") else str(value)


def _hm(t: datetime | None) -> str:
    return t.strftime("%H:%M:%S") if t is not None else "?"


def _with_summary(result: AisCounterDeltasResult, index: AisIndex, collection: AisCollection) -> AisCounterDeltasResult:
    roles = Counter(d.role for d in index.daemons)
    counts = ", ".join(_count(n, role) for role, n in sorted(roles.items()))
    parts = [f"{len(index.daemons)} AIS daemons ({counts}), {index.files_scanned} files"]
    if not index.daemons:
        parts = ["No AIS daemon log found"]
    by_key = {d.key: d for d in index.daemons}
    spikes_by_daemon: dict[str, list[Spike]] = defaultdict(list)
    for s in result.spikes:
        spikes_by_daemon[s.daemon].append(s)
    for key, spikes in spikes_by_daemon.items():
        d = by_key[key]
        first = spikes[0]
        same = [s for s in spikes if s.start == first.start]
        jumps = ", ".join(f"{s.counter} +{_amount(s.counter, s.delta)}" for s in same)
        where = first.evidence.file
        latest = d.info_files[-1].ref if d.info_files else None
        earlier = (
            f" (in {where}, an earlier file than the latest {latest})"
            if latest and where != latest
            else f" (in {where})"
        )
        more = f"; {len(spikes) - len(same)} more spikes" if len(spikes) > len(same) else ""
        parts.append(f"spike on {d.name}: {jumps} between {_hm(first.start)} and {_hm(first.end)}{earlier}{more}")
    verdict = result.proxy_vs_target.explanation.rstrip(".")
    parts.append(verdict[:1].lower() + verdict[1:])
    target_stops = [g for g in result.get_stops if g.counter == "get.n" and by_key[g.daemon].role == "target"]
    if target_stops:
        lo = min(g.last_increase_at for g in target_stops)
        hi = max(g.last_increase_at for g in target_stops)
        stopped = sum(1 for g in target_stops if g.stopped)
        parts.append(
            f"get.n last grew on {_count(len(target_stops), 'target')} in stats lines at {_hm(lo)}-{_hm(hi)}"
            + (f" and stayed flat after on {stopped} of them (idle: no more stats lines)" if stopped else "")
        )
    restarts = [r for r in result.restarts if r.kind == "restart"]
    if result.restarts:
        parts.append(
            f"{len(result.restarts)} counter reset(s)"
            + (
                f", {len(restarts)} of them a restart of {', '.join(sorted({r.daemon for r in restarts}))}"
                if restarts
                else ""
            )
            + " (deltas count from zero there, never negative)"
        )
    idle = [d.daemon for d in result.daemons if d.stats_lines == 0]
    if idle:
        parts.append(f"no stats lines at all from {', '.join(idle)} (idle)")
    named = [n for n in result.notable_lines if n.pattern != OTHER and not n.noise]
    if named:
        earliest = min(named, key=lambda n: n.first or datetime.max)
        parts.append(
            f"{len(named)} notable W/E line groups, first {earliest.pattern} on {earliest.daemon} at "
            f"{_hm(earliest.first)}"
        )
    if result.zone_hint:
        parts.append(f"times are AIS local ({result.zone_hint} per hourly markers)")
    else:
        parts.append("times are AIS local (zone unknown)")
    if result.coverage.unreadable_files:
        parts.append(f"{len(result.coverage.unreadable_files)} file(s) unreadable")
    summary = "; ".join(parts) + "."
    return replace(result, summary=summary)
