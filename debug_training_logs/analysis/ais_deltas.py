"""Per-daemon deltas of AIStore's cumulative counters between consecutive stats lines, and what they say.

AIS writes a stats line ``{k:v,...}`` at most every ``log.stats_time`` (3 min by default) and only while the node is
active; its ``*.n``/``*.size``/``*.total`` values are cumulative since the process started. This module turns those
lines into per-interval deltas and reads them the way the investigation protocol asks:

* **restarts and resets**: a decrease of any cumulative counter means the process restarted or someone ran
  ``ais cluster reset-stats``; the delta is then the value after the reset (events since the reset: a lower bound),
  never a negative number. A new ``Started up at`` file between the two lines, or the ``state.flags`` restarted bit
  (128) appearing, corroborates a restart.
* **spikes** (rule in :func:`~debug_training_logs.analysis.ais_intervals.find_spikes`): an error counter rising far
  above the daemon's own baseline.
* **get stop**: the last interval in which ``get.n`` / ``getbatch.n`` increased; AIS writes no stats line while a
  node is idle, so "no further line although the daemon kept logging" is the stop signal.
* **proxy vs target**: proxy errors stable while target errors spike means a target-side problem.
* **notable lines**: the W/E lines grouped by the named patterns of ``formats.ais.AIS_ERROR_PATTERNS`` (and by a
  normalised template for the rest), each counted once even though INFO and ERROR files both carry it.

Times are the daemons' local clock (ISO 8601 without offset); the zone abbreviation of the hourly markers is reported
as a hint only. Aligning them with the workers' clocks is ``align_timezones``' job, not this module's.

This module holds the tool's computation (:func:`ais_counter_deltas`: the window, the limits, the summary); the pass
over the directory and the notable lines are in :mod:`~debug_training_logs.analysis.ais_collect`, the deltas, restarts,
spikes, get stops and proxy-vs-target verdict in :mod:`~debug_training_logs.analysis.ais_intervals`, the result types
in :mod:`~debug_training_logs.analysis.ais_delta_types`.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TypeVar

from debug_training_logs.analysis.ais_collect import OTHER, collect, notable_lines
from debug_training_logs.analysis.ais_delta_types import (
    AisCollection,
    AisCounterDeltasResult,
    DaemonFile,
    DaemonSummary,
    GetStop,
    IntervalDelta,
    Restart,
    Spike,
    StatsPoint,
)
from debug_training_logs.analysis.ais_index import AisDaemon, AisIndex
from debug_training_logs.analysis.ais_intervals import (
    DEFAULT_COUNTERS,
    compare_proxy_target,
    find_restarts,
    find_spikes,
    get_stops,
    interval_deltas,
)
from debug_training_logs.errors import UserInputError
from debug_training_logs.formats.ais import is_cumulative

DEFAULT_LIMIT = 100
T = TypeVar("T")


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
