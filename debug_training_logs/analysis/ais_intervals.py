"""The AIStore counter deltas between consecutive stats lines of a daemon, and what they say: restarts and resets,
spikes above the daemon's own baseline, when reads stopped (get stops), and whether proxies or targets moved."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from statistics import median

from debug_training_logs.analysis.ais_collect import collect
from debug_training_logs.analysis.ais_delta_types import (
    AisCollection,
    GetStop,
    IntervalDelta,
    ProxyVsTarget,
    Restart,
    Spike,
    StatsPoint,
)
from debug_training_logs.analysis.ais_index import AisDaemon, AisIndex
from debug_training_logs.formats.ais import StatsLine

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

SPIKE_FACTOR = 5.0
"""A spike is at least this many times what the daemon's baseline rate predicts for the interval."""
SPIKE_MIN_EVENTS = 10
"""... and at least this many events (error counters)."""
SPIKE_MIN_NS = 1_000_000_000
"""... or this many nanoseconds (cumulative time counters such as ``getbatch.throttle.ns``: 1 s)."""
DEFAULT_STATS_PERIOD = timedelta(minutes=3)
"""``log.stats_time`` default; a daemon's own median gap between stats lines is used when it has enough of them."""


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
