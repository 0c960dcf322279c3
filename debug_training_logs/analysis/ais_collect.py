"""Collecting AIStore logs: one pass over an AIS directory (every daemon's stats points and its W/E lines grouped
by named pattern or template), and the W/E groups merged per daemon into :class:`NotableLines`."""

from __future__ import annotations

import bisect
import os
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from debug_training_logs.analysis.ais_delta_types import (
    AisCollection,
    NotableLines,
    StatsPoint,
    _ErrorFileGroup,
    _Group,
)
from debug_training_logs.analysis.ais_index import AisDaemon, AisDirScan, AisSource
from debug_training_logs.formats.ais import (
    AIS_ERROR_PATTERNS,
    AisRecord,
    StatsLine,
    classify_line,
    line_template,
    parse_stats,
)
from debug_training_logs.textcut import cut

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Evidence

OTHER_TEMPLATES_PER_FILE = 500
"""Distinct un-named W/E templates kept per file; the rest are counted under one catch-all entry."""
OTHER = "other"
EPOCH = datetime(1970, 1, 1)


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
