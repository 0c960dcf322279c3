"""``ais_counter_deltas``: per AIStore daemon and stats interval, the deltas of cumulative counters and what they show.

A thin shell over :func:`debug_training_logs.analysis.ais_deltas.ais_counter_deltas`; the models below are its
result as MCP and the CLI show it (times as ISO 8601 text on the AIS daemons' own clock, to the millisecond).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, WithJsonSchema

from debug_training_logs.analysis import ais_deltas
from debug_training_logs.models import Coverage, Evidence, UnreadableFile
from debug_training_logs.paths import input_dir
from debug_training_logs.tools.registry import ToolSpec


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


class _FromAnalysis(BaseModel):
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
        "after a reset it is the value since the reset. null when a 2 KiB-cut stats line hides the counter."
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
    """
    root = input_dir(ais_dir, "AIS logs directory")
    result = ais_deltas.ais_counter_deltas(root, counters=counters, start=start, end=end, limit=limit)
    return AisCounterDeltas.model_validate(result)


SPEC = ToolSpec(func=ais_counter_deltas, cli_name="ais-deltas", title="AIStore counter deltas", positional=("ais_dir",))
