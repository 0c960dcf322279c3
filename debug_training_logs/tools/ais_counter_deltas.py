"""``ais_counter_deltas``: per AIStore daemon and stats interval, the deltas of cumulative counters and what they show.

A shell over :func:`debug_training_logs.analysis.ais_deltas.ais_counter_deltas`; the models below are its result
as MCP and the CLI show it (times as ISO 8601 text on the AIS daemons' own clock, to the millisecond).

Drill-down instead of a dump: without a window (``start``/``end``) the answer lists only the intervals that matter
(a spike or a restart in them, the one in which a daemon's reads last grew) and sums up the rest per daemon in
``interval_summaries``; ``daemon``, ``counters`` and ``start``/``end`` narrow the answer, and
with a window every interval inside it is listed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any, TypeVar

from pydantic import ConfigDict, Field, PlainSerializer, WithJsonSchema

from debug_training_logs.analysis import ais_delta_types, ais_deltas
from debug_training_logs.errors import UserInputError
from debug_training_logs.models import Coverage, Evidence, Model, UnreadableFile
from debug_training_logs.paths import input_dir
from debug_training_logs.textcut import cut
from debug_training_logs.tools._cache import cached
from debug_training_logs.tools.budget import Cut
from debug_training_logs.tools.registry import ToolSpec

ALL = 10**9
"""``limit`` for the analysis: the tool selects and bounds the lists itself."""
STATS_TEXT_CUT = 120
"""Stats lines cited by intervals and read stops are cut here: the deltas carry their numbers."""
T = TypeVar("T")


def _local_time_text(value: datetime) -> str:
    return value.isoformat(timespec="milliseconds")


AisTime = Annotated[
    datetime,
    PlainSerializer(_local_time_text, return_type=str),
    # Not "format: date-time": that format requires an offset, and AIS lines state none (strict clients such as
    # Claude Code and the MCP Inspector reject a result whose times lack one).
    WithJsonSchema({"type": "string", "description": "ISO 8601 time on the AIS daemon's own clock, no offset."}),
]
"""A time on the AIS daemons' clock, shown as ISO 8601 without offset (``2026-05-21T14:32:05.118``)."""


class _FromAnalysis(Model):
    model_config = ConfigDict(from_attributes=True)


class DaemonFile(_FromAnalysis):
    """One log file of a daemon and the part of the daemon's clock it covers."""

    file: str = Field(description="Path relative to ais_dir, or '<archive>.tar.gz!<member>' inside a CLI archive.")
    severity: str = Field(description="INFO (every line) or ERROR (W/E lines only, duplicated from INFO).")
    kind: str = Field(description="started (a new process), rotated (same process, new file), created, unknown.")
    pid: int | None = Field(description="Process id from the file name (1 in most containers).")
    start: AisTime | None = Field(description="Start of the file (header or name), AIS local time.")
    end: AisTime | None = Field(description="The next file's start, or this file's last line for the newest one.")
    records: int = Field(description="Log records in the file.")
    stats_lines: int = Field(description="Periodic stats lines in the file.")
    covers_window: bool = Field(description="The file overlaps [start, end] (always true without a window).")


class DaemonSummary(_FromAnalysis):
    """One AIS node (proxy or target) with its files."""

    daemon: str = Field(description="t[ID] / p[ID] (or role@host when no node ID is logged): the key used below.")
    name: str = Field(description="Node name with its host token, e.g. 't[hJkL0aBc] (ais-target-2)'.")
    role: str = Field(description="target or proxy.")
    node_id: str | None
    hosts: list[str] = Field(description="Host tokens from file names (NOT unique across pods).")
    version: str | None = Field(description="AIS version from the node's title line.")
    zone_hint: str | None = Field(description="Zone abbreviation its hourly markers state (a hint).")
    process_starts: list[AisTime] = Field(description="Times a new aisnode process started (one per restart).")
    stats_lines: int = Field(description="Stats lines found; 0 means the node was idle (AIS writes none then).")
    first_stats: AisTime | None
    last_stats: AisTime | None
    files: list[DaemonFile] = Field(description="Its files, INFO first, oldest first (window files first).")
    files_truncated: int = Field(description="Files not listed because of `limit`.")
    window_files: list[str] = Field(
        description="Every file overlapping the window: read all of them, the evidence may be in an earlier file."
    )
    latest_file: str | None = Field(description="The newest INFO file (often NOT the one with the evidence).")
    note: str = Field(description="Why something is missing, e.g. no stats lines because the node was idle.")


class IntervalDelta(_FromAnalysis):
    """Counter increases between two consecutive stats lines of one daemon."""

    daemon: str
    start: AisTime = Field(description="The earlier stats line: events counted happened after it...")
    end: AisTime = Field(description="...and by this later stats line.")
    minutes: float = Field(description="Length of the interval in minutes (3 when the node was busy throughout).")
    deltas: dict[str, int | None] = Field(
        description="Counter -> increase (events; nanoseconds for *.ns totals; bytes for *.size). Never negative: "
        "after a reset it is the value since the reset. null when a 2 KiB-cut stats line hides the counter. "
        "Counters that did not grow in the interval are left out (their delta is 0)."
    )
    reset: bool = Field(description="Counters were reset inside the interval (restart or reset-stats).")
    get_error_rate: float | None = Field(description="err.get.n delta / get.n delta; null when get.n did not grow.")
    getbatch_error_rate: float | None = Field(
        description="err.getbatch.n delta / getbatch.n delta; null when getbatch.n did not grow."
    )
    start_evidence: Evidence
    end_evidence: Evidence


class Restart(_FromAnalysis):
    """Cumulative counters went down between two stats lines (a restart or a stats reset)."""

    daemon: str
    kind: str = Field(description="restart (new process), stats reset, or errors reset (reset-stats --errors-only).")
    after: AisTime = Field(description="Last stats line before the reset.")
    by: AisTime = Field(description="First stats line after it.")
    decreased: list[str] = Field(description="Cumulative counters whose value went down.")
    process_start: AisTime | None = Field(description="Start of the new process ('Started up at' header), if any.")
    process_start_file: str | None = Field(description="The new process's first log file.")
    restarted_flag: bool = Field(description="state.flags of the later line has the restarted bit (128).")
    explanation: str
    evidence: Evidence


class Spike(_FromAnalysis):
    """An interval in which a counter rose far above the daemon's own baseline (>= 5x and >= 10 events)."""

    daemon: str
    counter: str
    start: AisTime
    end: AisTime
    delta: int
    expected: float = Field(description="What the daemon's median rate predicts for this interval.")
    factor: float | None = Field(description="delta / expected; null when the baseline is zero.")
    evidence: Evidence = Field(description="The stats line ending the interval.")


class GetStop(_FromAnalysis):
    """When a daemon's reads stopped, as its stats lines tell (compare with when the workers died)."""

    daemon: str
    counter: str = Field(description="get.n or getbatch.n.")
    last_increase_after: AisTime = Field(description="The counter was still lower at this stats line...")
    last_increase_at: AisTime = Field(
        description="...and had its last increase by this one; AIS logs no stats line while idle, so reads may "
        "have gone on a little after it, never past the next (unwritten) line."
    )
    value: int = Field(description="The counter's value at its last increase.")
    later_stats_lines: int = Field(description="Stats lines after it without growth.")
    daemon_last_record: AisTime | None = Field(description="The daemon's last log line (it kept running: idle).")
    stopped: bool = Field(description="True when the logs go on long enough after it to call it a stop.")
    evidence: Evidence


class ProxyVsTarget(_FromAnalysis):
    """Whose error counters moved in the window."""

    verdict: str = Field(
        description="target_side (proxy errors stable, target errors spiking), proxy_side, both, no_spikes, "
        "no_proxy_logs, no_target_logs, no_stats."
    )
    explanation: str
    proxy_error_deltas: dict[str, int] = Field(description="err.* increases summed over proxies and intervals.")
    target_error_deltas: dict[str, int] = Field(description="err.* increases summed over targets and intervals.")
    spiking_proxies: list[str]
    spiking_targets: list[str]


class NotableLines(_FromAnalysis):
    """W/E lines of one daemon matching one named pattern, each event counted once (INFO and ERROR files)."""

    daemon: str
    pattern: str = Field(
        description="getbatch_out_of_bounds, shared_dm_broken_pipe, shared_dm_xid_not_found, "
        "resource_pressure_critical, disk_critical, memory_pressure, keepalive_failure, ... or 'other'."
    )
    meaning: str
    noise: bool = Field(description="Usually harmless alone (keep-alive hiccups).")
    count: int = Field(description="Events in the window, counted once although ERROR files repeat them.")
    severities: str = Field(description="E, W or EW.")
    first: AisTime | None
    last: AisTime | None
    example: Evidence = Field(
        description="A line of the group (file:line and text): the earliest one of an INFO file when there is one."
    )
    template: str = Field(description="For 'other': the line with numbers and ids replaced (what was grouped).")


class IntervalSummary(Model):
    """One daemon's intervals that are not listed, summed up."""

    daemon: str
    intervals: int = Field(description="Stats intervals not listed in `intervals` (nothing notable in them).")
    start: AisTime = Field(description="Start of the earliest of them.")
    end: AisTime = Field(description="End of the latest of them.")
    deltas: dict[str, int] = Field(
        description="Counter -> its increases summed over them (hidden values skipped; counters that never grew "
        "are left out)."
    )
    resets: int = Field(description="How many of them contain a counter reset.")


class AisCounterDeltas(_FromAnalysis):
    """What the AIS daemons' stats lines and warnings say about the incident window."""

    summary: str = Field(description="What a person would say after reading the result.")
    coverage: Coverage
    zone_hint: str | None = Field(description="Zone abbreviation of the hourly markers (e.g. UTC): a hint only.")
    time_note: str = Field(description="How to read the times (AIS local clock, no offset).")
    window_start: AisTime | None
    window_end: AisTime | None
    counters: list[str] = Field(description="Counters whose deltas are listed.")
    daemons: list[DaemonSummary]
    intervals: list[IntervalDelta] = Field(
        description="Per daemon and stats interval in the window (flagged and erroring ones kept first if cut)."
    )
    restarts: list[Restart]
    spikes: list[Spike]
    get_stops: list[GetStop] = Field(description="Per daemon: when get.n / getbatch.n last grew.")
    proxy_vs_target: ProxyVsTarget
    notable_lines: list[NotableLines] = Field(description="Named W/E patterns first, in time order, then noise.")
    skipped_files: list[UnreadableFile] = Field(
        description="Files passed over on purpose (not AIS logs, identical copies, symlinks), with the reason."
    )
    truncated: dict[str, int] = Field(description="List name -> entries left out because of `limit`.")
    interval_selection: str = Field(
        default="all",
        description="notable: `intervals` holds those with a spike or a restart, then each daemon's last growth of "
        "reads, and `interval_summaries` sums up the rest (their error counts too); window: every interval in "
        "start/end.",
    )
    intervals_total: int = Field(default=0, description="Intervals in the window (after the `daemon` filter).")
    interval_summaries: list[IntervalSummary] = Field(
        default_factory=list, description="Per daemon, the intervals not listed, summed up."
    )
    daemon_filter: list[str] = Field(
        default_factory=list,
        description="Daemons the lists were narrowed to (`daemon`); the summary and proxy_vs_target cover all.",
    )


def ais_counter_deltas(
    ais_dir: Annotated[
        str,
        Field(
            description="Directory with AIStore daemon logs: the daemons' own files (ais{target|proxy}.<host>."
            "{INFO|ERROR}.*), .gz copies, or the CLI's per-node aistarget-<ID>.tar.gz archives (read in place)."
        ),
    ],
    counters: Annotated[
        list[str] | None,
        Field(
            description="Cumulative counters to compute deltas for (*.n, *.size, *.total, getbatch.throttle.ns). "
            "Default: err.get.n err.getbatch.n err.http.write.n err.put.n err.head.n err.lst.n err.kalive.n "
            "err.append.n get.n getbatch.n getbatch.obj.n getbatch.throttle.ns."
        ),
    ] = None,
    start: Annotated[
        str | None,
        Field(description="Window start, ISO 8601 on the AIS clock without offset, e.g. 2026-05-21T14:20:00."),
    ] = None,
    end: Annotated[str | None, Field(description="Window end, same form as start.")] = None,
    limit: Annotated[int, Field(ge=1, le=10000, description="At most this many entries in each list.")] = 100,
    daemon: Annotated[
        list[str] | None,
        Field(
            description="Only these daemons: their key (t[hJkL0aBc]), node id, or host name (ais-target-2); the "
            "summary and proxy_vs_target still cover every daemon."
        ),
    ] = None,
) -> AisCounterDeltas:
    """Per AIStore daemon (every proxy and target) and per stats interval (~3 min), the deltas of the cumulative
    counters (err.get.n, err.getbatch.n, err.http.write.n, get.n, getbatch.n, ...), error rates, restarts and stats
    resets (never a negative delta), error spikes against each daemon's own baseline, the moment get.n/getbatch.n
    stopped growing, the proxy-vs-target verdict ("proxy errors stable, target errors spiking = target-side"), and
    the notable warning/error lines (out-of-bounds index, shared-dm broken pipe, xid not found, load/disk critical,
    memory, keep-alive) grouped with counts, first/last time and an example file:line.

    Use it once the worker logs point at storage and you have the AIS logs (fetch_ais_logs gets them). It reads every
    file of every daemon, because the evidence is often in an EARLIER file than the latest one: `daemons[].
    window_files` lists the files covering the window. Times are the AIS daemons' local clock; run align_timezones
    before comparing them with worker times.

    With no start/end it lists the intervals that matter (spikes, restarts, where reads last grew) and sums up the
    rest per daemon (their errors too); `daemon` and `start`/`end` narrow it to every interval of a daemon or window.
    """
    root = input_dir(ais_dir, "AIS logs directory")
    key = (tuple(counters or ()), start, end)
    full = cached(
        "ais_counter_deltas",
        root,
        key,
        lambda: ais_deltas.ais_counter_deltas(root, counters=counters, start=start, end=end, limit=ALL),
        archives=True,
    )
    keys = _daemon_keys(full.daemons, daemon)
    window = start is not None or end is not None
    intervals = _mine(keys, full.intervals, lambda iv: iv.daemon)
    listed, rest = (intervals, []) if window else _notable_intervals(full, intervals)
    bounded, truncated = _bounded(full, keys, listed, limit)
    summary = full.summary
    if keys is not None:
        summary += f" Lists below narrowed to {', '.join(sorted(keys))} (summary and proxy_vs_target: all daemons)."
    result = AisCounterDeltas.model_validate(dataclasses.replace(full, summary=summary, truncated=truncated, **bounded))
    return result.model_copy(
        update={
            "interval_selection": "window" if window else "notable",
            "intervals_total": len(intervals),
            "interval_summaries": _summaries(rest),
            "daemon_filter": sorted(keys) if keys is not None else [],
        }
    )


def _mine(keys: set[str] | None, items: Sequence[T], key: Callable[[T], str]) -> list[T]:
    """The ``items`` of the daemons ``keys`` names (every item for None)."""
    return [x for x in items if keys is None or key(x) in keys]


def _bounded(
    full: ais_delta_types.AisCounterDeltasResult, keys: set[str] | None, listed: list[Any], limit: int
) -> tuple[dict[str, Any], dict[str, int]]:
    """Each list of the result for the daemons ``keys`` names, cut to ``limit`` (the evidence shortened, the zero
    deltas dropped), and how many of each were cut."""
    truncated = {name: 0 for name in full.truncated}
    bounded: dict[str, Any] = {}
    for name, items in (
        ("intervals", listed),
        ("spikes", _mine(keys, full.spikes, lambda x: x.daemon)),
        ("restarts", _mine(keys, full.restarts, lambda x: x.daemon)),
        ("get_stops", _mine(keys, full.get_stops, lambda x: x.daemon)),
        ("notable_lines", _mine(keys, full.notable_lines, lambda x: x.daemon)),
        ("daemons", _spiky_first(full, _mine(keys, full.daemons, lambda x: x.daemon))),
        ("skipped_files", list(full.skipped_files)),
    ):
        bounded[name] = items[:limit]
        truncated[name] = max(0, len(items) - limit)
    bounded["intervals"] = [
        dataclasses.replace(_short_evidence(iv), deltas={k: v for k, v in iv.deltas.items() if v != 0})
        for iv in bounded["intervals"]
    ]
    bounded["get_stops"] = [_short_evidence(g) for g in bounded["get_stops"]]
    order = {d.daemon: i for i, d in enumerate(full.daemons)}
    bounded["daemons"] = [
        dataclasses.replace(d, files=d.files[:limit], files_truncated=d.files_truncated + max(0, len(d.files) - limit))
        for d in sorted(bounded["daemons"], key=lambda d: order[d.daemon])
    ]
    return bounded, truncated


def _daemon_keys(daemons: Sequence[ais_delta_types.DaemonSummary], wanted: list[str] | None) -> set[str] | None:
    """The daemon keys ``wanted`` names (key, node id, host or a part of the name); None for all."""
    if not wanted:
        return None
    keys: set[str] = set()
    for w in wanted:
        hits = {d.daemon for d in daemons if w in (d.daemon, d.node_id) or w in d.hosts or w in d.name}
        if not hits:
            known = ", ".join(d.name for d in daemons) or "none"
            raise UserInputError(f"No AIS daemon matches {w!r}. Daemons in these logs: {known}.")
        keys |= hits
    return keys


def _spiky_first(
    full: ais_delta_types.AisCounterDeltasResult, daemons: list[ais_delta_types.DaemonSummary]
) -> list[ais_delta_types.DaemonSummary]:
    """Daemons with a spike or a restart first (kept when `limit` cuts), the others after, each in index order."""
    spiky = {s.daemon for s in full.spikes} | {r.daemon for r in full.restarts}
    return sorted(daemons, key=lambda d: d.daemon not in spiky)


def _notable_intervals(
    full: ais_delta_types.AisCounterDeltasResult, intervals: list[ais_delta_types.IntervalDelta]
) -> tuple[list[ais_delta_types.IntervalDelta], list[ais_delta_types.IntervalDelta]]:
    """(the intervals that matter, most important first; the rest)."""
    flagged = {(s.daemon, s.start) for s in full.spikes} | {(r.daemon, r.after) for r in full.restarts}
    stops = {(g.daemon, g.last_increase_at) for g in full.get_stops}

    def rank(iv: ais_delta_types.IntervalDelta) -> int:
        if (iv.daemon, iv.start) in flagged or iv.reset:
            return 0
        return 1 if (iv.daemon, iv.end) in stops else 2

    ranked = sorted(intervals, key=lambda iv: (rank(iv), iv.start, iv.daemon))
    return [iv for iv in ranked if rank(iv) < 2], [iv for iv in intervals if rank(iv) == 2]


def _summaries(rest: list[ais_delta_types.IntervalDelta]) -> list[IntervalSummary]:
    by_daemon: dict[str, list[ais_delta_types.IntervalDelta]] = {}
    for iv in rest:
        by_daemon.setdefault(iv.daemon, []).append(iv)
    out: list[IntervalSummary] = []
    for name, ivs in by_daemon.items():
        totals: dict[str, int] = {}
        for iv in ivs:
            for k, v in iv.deltas.items():
                if v:
                    totals[k] = totals.get(k, 0) + v
        out.append(
            IntervalSummary(
                daemon=name,
                intervals=len(ivs),
                start=min(iv.start for iv in ivs),
                end=max(iv.end for iv in ivs),
                deltas=totals,
                resets=sum(iv.reset for iv in ivs),
            )
        )
    return out


def _short_evidence(item: Any) -> Any:
    """``item`` with its cited stats lines cut (the numbers are in its own fields)."""
    fields = [f for f in ("start_evidence", "end_evidence", "evidence") if hasattr(item, f)]
    changes = {f: _cut_evidence(getattr(item, f)) for f in fields}
    return dataclasses.replace(item, **changes)


def _cut_evidence(e: Evidence) -> Evidence:
    return e.model_copy(update={"text": cut(e.text, STATS_TEXT_CUT)})


def _follow_up(c: Cut) -> tuple[dict[str, Any], str] | None:
    """Intervals the budget left out: the same call narrowed to the first omitted interval's daemon and times."""
    if c.field != "intervals" or not c.omitted_items:
        return None
    first = c.omitted_items[0]
    same = [iv for iv in c.omitted_items if iv["daemon"] == first["daemon"]]
    args = {k: v for k, v in c.arguments.items() if k not in ("daemon", "start", "end")}
    nxt = {**args, "daemon": [first["daemon"]], "start": same[0]["start"], "end": max(iv["end"] for iv in same)}
    return nxt, (
        f"{c.total - c.shown} more intervals; each call narrowed by daemon and start/end lists every interval in "
        f"that window (next: {first['daemon']} from {nxt['start']} to {nxt['end']})."
    )


SPEC = ToolSpec(
    func=ais_counter_deltas,
    cli_name="ais-deltas",
    title="AIStore counter deltas",
    positional=("ais_dir",),
    follow_up=_follow_up,
)
