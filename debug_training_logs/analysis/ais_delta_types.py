"""The plain-data results of the AIStore counter deltas (stats points, interval deltas, restarts, spikes, get stops,
the proxy-vs-target verdict, notable lines, daemon summaries, the whole result) and what one pass over an AIS directory
collected (:class:`AisCollection`). Filled by :mod:`~debug_training_logs.analysis.ais_collect`,
:mod:`~debug_training_logs.analysis.ais_intervals` and :mod:`~debug_training_logs.analysis.ais_deltas`."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from debug_training_logs.analysis.ais_index import AisIndex
from debug_training_logs.formats.ais import StatsLine
from debug_training_logs.textcut import cut

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Coverage, Evidence, UnreadableFile

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
