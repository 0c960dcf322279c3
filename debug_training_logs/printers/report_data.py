"""What the HTML report shows, taken from a diagnosis and the evidence it rests on (no further scan of the worker logs).

Every rank gets the state the evidence model decides (:func:`analysis.evidence_states.rank_states`, the same states the
diagnosis and the verifier read), named for the person reading the grid:

- ``straggler``: the model's ``stuck`` (alive but outside the collective the others wait in) for a rank the verdict
  names as a culprit; ``stuck`` for the other ranks it calls so (no NCCL work pending while the others timed out),
  so that the page never calls a rank a straggler the verified verdict did not establish;
- ``crashed``: an exception, a fatal CUDA error or an error exit ended it;
- ``ahead``: the root of a process group that is ahead of the others (``root_ahead`` in the NCCL table; the model
  calls it waiting);
- ``waiting``: inside a collective (enqueued > completed) when the watchdog fired;
- ``killed``: the NCCL heartbeat monitor killed it (``watchdog_killed``);
- ``torn_down``: its launcher stopped it after another rank failed;
- ``finished``: the run ended normally;
- ``unknown``: its log says nothing of how it ended (the page never guesses);
- ``missing``: the world size says it existed, no file of it was found (``absent``).

Each cell carries the line that put it in its state (``file:line``). The AIS counters are read again from the AIS
directory (one more pass over the AIS logs, which are small beside the worker logs): the diagnosis keeps only their
spikes and restarts, the page plots every stats interval around the failure.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from debug_training_logs.analysis.ais_collect import collect
from debug_training_logs.analysis.evidence_states import rank_states
from debug_training_logs.analysis.evidence_types import JobEvidence, Series
from debug_training_logs.tools.diagnosis_models import Diagnosis

STATES: tuple[str, ...] = (
    "straggler",
    "stuck",
    "crashed",
    "ahead",
    "waiting",
    "killed",
    "torn_down",
    "finished",
    "unknown",
    "missing",
)
"""Every state a rank cell can have, in legend order."""

STATE_MEANING = {
    "straggler": "the culprit: never entered the collective the others wait in",
    "stuck": "no NCCL work pending while the others timed out (not established as the cause)",
    "crashed": "an error of its own ended it",
    "ahead": "root of a process group ahead of the others",
    "waiting": "inside a collective when the watchdog fired",
    "killed": "killed by the NCCL heartbeat monitor",
    "torn_down": "stopped by its launcher after another rank failed",
    "finished": "the run ended normally",
    "unknown": "its log says nothing of how it ended",
    "missing": "expected by the world size, no file of it found",
}

PAGE_STATE = {"watchdog_killed": "killed", "absent": "missing"}
"""The evidence model's state names that the page shows under another name (the others are shown as they are)."""

AIS_COUNTERS: tuple[str, ...] = ("err.get.n", "err.getbatch.n", "err.http.write.n", "get.n")
"""The AIS counters plotted per daemon (increase per stats interval)."""
AIS_DAEMONS_SHOWN = 12
"""Daemons plotted at most (those with spikes or restarts first); the rest are counted."""
SERIES_RANKS_DRAWN = 16
"""Up to this many ranks every rank is a line of its own; above, the spread across ranks plus the flagged ranks."""
SERIES_BUCKETS = 160
"""Time buckets of the spread (min, median, max across ranks) on a big job."""
FAILURE_MARK = "collective start"
"""The marker label of the moment the stuck collective started (on the AIS clock)."""
WINDOW_BEFORE = timedelta(minutes=45)
WINDOW_AFTER = timedelta(minutes=15)
"""The AIS plots show this much before the first event of the failure and after the last."""

EVIDENCE_CHARS = 200
"""A cell's hover text (after its rank, state and ``file:line``) is cut to this many characters."""


@dataclass
class RankCell:
    rank: int
    state: str
    culprit: bool
    evidence: str
    """Why this state, with the cited ``file:line``."""


@dataclass
class NodeRow:
    node: str
    cells: list[RankCell]


@dataclass
class Line:
    label: str
    points: list[tuple[float, float]]
    """(x, y): x in seconds since the epoch of the plot's clock (or a step index), y in the plot's unit."""
    flagged: bool = False


@dataclass
class Plot:
    title: str
    unit: str
    x_is_time: bool
    lines: list[Line] = field(default_factory=list)
    band: list[tuple[float, float, float, float]] = field(default_factory=list)
    """(x, min, median, max) across ranks, on big jobs."""
    markers: list[tuple[float, str]] = field(default_factory=list)
    """Vertical marks (x, label): restarts, the failure."""
    note: str = ""
    x_range: tuple[float, float] | None = None
    """Shared x range (all daemons on the same window), else the data's."""
    y_max: float | None = None
    """Shared y maximum (one counter on one scale across daemons), else the data's."""
    x_label: str = ""


@dataclass
class TimelinePoint:
    t: float
    """Seconds since the epoch, on the clock named by :attr:`ReportData.timeline_clock`."""
    lane: str
    """``workers`` or ``AIS``."""
    label: str
    chain_step: int | None


@dataclass
class ReportData:
    diagnosis: Diagnosis
    nodes: list[NodeRow]
    state_counts: dict[str, int]
    timeline: list[TimelinePoint]
    timeline_clock: str
    """``UTC`` when the alignment tied the workers to UTC, else ``worker local``."""
    ais_plots: list[tuple[str, list[Plot]]]
    """Per daemon (name), one plot per counter."""
    ais_note: str
    series_plots: list[Plot]


def _cite(file: str, line: int) -> str:
    return f"{file}:{line}" if file else ""


def _short(text: str, limit: int = EVIDENCE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def rank_cells(d: Diagnosis, ev: JobEvidence) -> list[NodeRow]:
    """Every rank of the job (the evidence model's states: 0 .. world size - 1 and every rank seen), grouped by node,
    nodes in rank order; the culprits (the verdict's) outlined."""
    worker = ev.worker
    culprits = set(d.verdict.culprit_ranks)
    ahead: dict[int, str] = {}
    for g in ev.nccl.groups:
        if g.classification == "root_ahead" and g.root_rank is not None:
            ahead.setdefault(g.root_rank, g.reason)
    cells: dict[int, RankCell] = {}
    for rank, st in sorted(rank_states(ev).items()):
        state = PAGE_STATE.get(st.state, st.state)
        if state == "waiting" and rank in ahead:
            state = "ahead"
        elif state == "stuck" and rank in culprits:
            state = "straggler"
        why = ahead[rank] if state == "ahead" else st.why
        line = st.line
        head = f"rank {rank} · {state}" + (f" · {_cite(line.file, line.line)}" if line is not None else "")
        text = f"{why}: {line.text}" if line is not None and line.text else why
        cells[rank] = RankCell(rank, state, rank in culprits, f"{head}: {_short(text, EVIDENCE_CHARS)}")
    missing = {r for r, c in cells.items() if c.state == "missing"}
    by_node: dict[str, list[RankCell]] = defaultdict(list)
    for rank, cell in cells.items():
        node = "(no log: node unknown)" if rank in missing else (worker.node_of_rank(rank) or "(node unknown)")
        by_node[node].append(cell)
    return [NodeRow(n, cs) for n, cs in sorted(by_node.items(), key=lambda kv: (kv[1][0].rank, kv[0]))]


# ---------------------------------------------------------------------------------------------------------------------
# Series: step time, memory


def ts(t: datetime) -> float:
    """Seconds since the epoch of a wall-clock time as written (naive times are not moved by this machine's zone)."""
    return (t.replace(tzinfo=UTC) if t.tzinfo is None else t).timestamp()


def _x(t: datetime | None, i: int) -> float:
    return ts(t) if t is not None else float(i)


def series_plot(title: str, unit: str, series: Series, flagged: dict[int, str]) -> Plot | None:
    """Every rank's line on a small job; on a big one the spread across ranks plus the flagged ranks' lines."""
    if not series:
        return None
    x_is_time = all(t is not None for pts in series.values() for _, _, t, _ in pts)
    lines = []
    many = len(series) > SERIES_RANKS_DRAWN
    for rank in sorted(series):
        if many and rank not in flagged:
            continue
        pts = [(_x(t, i), v) for i, (_, _, t, v) in enumerate(series[rank])]
        label = f"rank {rank}" + (f" ({flagged[rank]})" if rank in flagged else "")
        lines.append(Line(label, pts, rank in flagged))
    plot = Plot(title, unit, x_is_time, lines[: SERIES_RANKS_DRAWN * 2])
    plot.x_label = "worker clock" if x_is_time else "report number (the lines carry no time)"
    if many:
        allpts = [(_x(t, i), v) for pts in series.values() for i, (_, _, t, v) in enumerate(pts)]
        lo, hi = min(x for x, _ in allpts), max(x for x, _ in allpts)
        width = (hi - lo) / SERIES_BUCKETS or 1.0
        buckets: dict[int, list[float]] = defaultdict(list)
        for x, v in allpts:
            buckets[min(int((x - lo) / width), SERIES_BUCKETS - 1)].append(v)
        plot.band = [
            (lo + (b + 0.5) * width, min(vs), statistics.median(vs), max(vs)) for b, vs in sorted(buckets.items())
        ]
        plot.note = f"{len(series)} ranks: min/median/max across ranks, plus the {len(lines)} flagged rank(s)"
    return plot


# ---------------------------------------------------------------------------------------------------------------------
# AIS counters


def _worker_to_ais(ev: JobEvidence) -> float | None:
    """Hours to subtract from a worker time to get the AIS clock (verified alignment only)."""
    if ev.ais is None or not ev.ais.alignment.verified or ev.ais.alignment.offset_hours is None:
        return None
    return ev.ais.alignment.offset_hours


def ais_plots(d: Diagnosis, ev: JobEvidence) -> tuple[list[tuple[str, list[Plot]]], str]:
    """Per daemon, the increase of each :data:`AIS_COUNTERS` counter per stats interval, in the failure window."""
    if ev.ais is None:
        return [], "no AIS logs given"
    offset = _worker_to_ais(ev)
    failure: datetime | None = None
    window: tuple[datetime, datetime] | None = None
    start = ev.nccl.collective_start()
    if offset is not None:
        times = [datetime.fromisoformat(e.time_local) for e in d.timeline if e.time_local]
        if start is not None:
            failure = start - timedelta(hours=offset)
        if times:
            window = (
                min(times) - timedelta(hours=offset) - WINDOW_BEFORE,
                max(times) - timedelta(hours=offset) + WINDOW_AFTER,
            )
    collection = collect(ev.ais.root)
    restarts = defaultdict(list)
    for r in ev.ais.restarts:
        restarts[r.daemon].append(r)
    spiking = {s.daemon for s in ev.ais.spikes}

    def rank_daemon(key: str) -> tuple[int, str]:
        return (0 if key in spiking or key in restarts else 1, key)

    keys = sorted(collection.points, key=rank_daemon)
    out: list[tuple[str, list[Plot]]] = []
    for key in keys[:AIS_DAEMONS_SHOWN]:
        points = collection.points[key]
        daemon = ev.ais.daemon(key)
        name = daemon.name if daemon is not None else key
        marks = [(ts(r.by), r.kind) for r in restarts.get(key, [])]
        if failure is not None:
            marks.append((ts(failure), FAILURE_MARK))
        plots = []
        for counter in AIS_COUNTERS:
            pts: list[tuple[float, float]] = []
            prev: int | None = None
            for p in points:
                v = p.stats.get(counter)
                if v is None:
                    prev = None
                    continue
                if prev is not None and (window is None or window[0] <= p.at <= window[1]):
                    pts.append((ts(p.at), float(v - prev if v >= prev else v)))
                prev = v
            plots.append(
                Plot(counter, "per interval", True, [Line(counter, pts, counter.startswith("err."))], [], marks)
            )
        out.append((name, plots))
    xs = [x for _, plots in out for p in plots for ln in p.lines for x, _ in ln.points]
    x_range = (ts(window[0]), ts(window[1])) if window is not None else ((min(xs), max(xs)) if xs else None)
    for i, counter in enumerate(AIS_COUNTERS):
        ys = [y for _, plots in out for ln in plots[i].lines for _, y in ln.points]
        y_max = max([*ys, 5.0 if counter.startswith("err.") else 1.0])
        for _, plots in out:
            plots[i].x_range, plots[i].y_max = x_range, y_max
    clock = "AIS clock" + (f" ({ev.ais.index.zone})" if ev.ais.index.zone else "")
    note = f"{len(keys)} daemon(s) with stats lines; x axis: {clock}"
    if window is not None:
        note += f", {window[0]:%H:%M} to {window[1]:%H:%M} (the failure's events -45/+15 min)"
    else:
        note += ", every stats line (the clocks are not aligned, so the failure window is not known on this clock)"
    if len(keys) > AIS_DAEMONS_SHOWN:
        note += f"; {len(keys) - AIS_DAEMONS_SHOWN} more daemon(s) without spikes or restarts not plotted"
    return out, note


# ---------------------------------------------------------------------------------------------------------------------
# Timeline


def timeline_points(d: Diagnosis) -> tuple[list[TimelinePoint], str]:
    """The timeline's timed events on one axis (UTC when known for all of them), chain steps numbered."""
    chain = {(c.source, c.event): c.step for c in d.root_cause_chain}
    utc = all(e.time_utc for e in d.timeline if e.time_local)
    out = []
    for e in d.timeline:
        when = (e.time_utc or "").rstrip("Z") if utc else e.time_local
        if not when:
            continue
        lane = "AIS" if e.clock == "ais" else "workers"
        out.append(
            TimelinePoint(
                ts(datetime.fromisoformat(when)), lane, f"{e.event} ({e.source})", chain.get((e.source, e.event))
            )
        )
    return out, "UTC" if utc and out else "worker local clock"


def build_report_data(d: Diagnosis, ev: JobEvidence) -> ReportData:
    nodes = rank_cells(d, ev)
    counts = {s: 0 for s in STATES}
    for n in nodes:
        for c in n.cells:
            counts[c.state] += 1
    points, clock = timeline_points(d)
    plots, note = ais_plots(d, ev)
    culprits = set(d.verdict.culprit_ranks)
    step_flag = {j.rank: f"step time {j.text} ms" for j in ev.step_jumps}
    mem_flag = {j.rank: f"memory {j.text}" for j in ev.memory_creep}
    for r in culprits:
        step_flag.setdefault(r, "culprit")
        mem_flag.setdefault(r, "culprit")
    series = [
        p
        for p in (
            series_plot("Step time per rank", "ms", ev.worker.step_ms, step_flag),
            series_plot("Allocated GPU memory per rank", "MB", ev.worker.memory_mb, mem_flag),
        )
        if p is not None
    ]
    return ReportData(d, nodes, counts, points, clock, plots, note, series)
