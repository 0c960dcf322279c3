"""One worker log's share of the evidence scan, done in the scan's worker processes: :class:`EvidenceSink` (the
signals' hits, with the NCCL table's and the alignment's sinks), the file's series as flat arrays
(:class:`_FileSeries`) and the digest of its hits (:func:`_refine`).

Where the work runs: per-file work is done in the scan's worker processes, in parallel, and the main process only
merges small per-file results. :meth:`EvidenceSink.finish` makes a file's step-time and memory series into flat arrays;
the consumer's refine (:func:`_refine`, given the file's head and tail) makes its hits into
:class:`~debug_training_logs.analysis.evidence_types.Hit` s with times in the file's own year (the fold moves them to
the job's year when the two differ) and leaves the raw hits only when it cannot (a yearless February 29 in a common
year).
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from debug_training_logs.analysis.alignment import WorkerClockFacts, WorkerClockSink
from debug_training_logs.analysis.evidence_signals import SIGNAL_NAMES, SIGNALS
from debug_training_logs.analysis.evidence_types import Hit, _new_evidence_hit
from debug_training_logs.analysis.inventory_file_share import file_year
from debug_training_logs.analysis.nccl_hits import FileEvents
from debug_training_logs.analysis.nccl_sink import NCCL_PATTERNS, NcclSink
from debug_training_logs.analysis.read_back import WORKER_FALLBACK_YEAR
from debug_training_logs.formats import nccl
from debug_training_logs.formats.prefixes import strip_ansi
from debug_training_logs.formats.timestamps import WallTime, parse_wall_time, with_year
from debug_training_logs.logs.attribution import rank_or_local
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.scan_types import FileScan
from debug_training_logs.textcut import TEXT_CUT, cut

SAMPLES_PER_SIGNAL = 200
"""Hits kept in full per signal per file (the first ones); beyond that only counts and each rank's first/last hit."""
DENSE_SAMPLES_PER_SIGNAL = 16
"""The same for the dense signals (a progress or memory line per rank per step): their per-rank first/last hits and
series carry what the diagnosis reads, so a few samples per file keep memory flat in the number of files."""
_SAMPLE_CAP = {s.name: DENSE_SAMPLES_PER_SIGNAL if s.dense else SAMPLES_PER_SIGNAL for s in SIGNALS}
SERIES_POINTS = 2048
"""Points kept per rank per series (step time, memory); longer series are thinned evenly."""

_STEP_MS = (
    ("elapsed time per iteration (ms): ", re.compile(r"elapsed time per iteration \(ms\): ([\d.]+)"), 1.0),
    ("train_step_timing", re.compile(r"train_step_timing(?: in s)?[=: ]+([\d.]+)"), 1000.0),
)
"""(a literal the pattern holds, pattern, scale to ms): the step time of a progress line; the first that matches."""
_ITERATION = re.compile(r" iteration +(\d+)/ *\d+ \|")
_MEMORY_MB = re.compile(r"memory \(MB\) \| allocated: ([\d.]+)")
_MEMORY_LITERAL = "memory (MB) | allocated: "
_NCCL_INIT_HOST = re.compile(
    r"(?:^|[\s\]:])(?P<host>" + nccl.HOST + ")" + nccl.PROCESS_PID + r" NCCL INFO .*\brank (?P<rank>\d{1,9}) "
    r"nranks (?P<nranks>\d{1,9})"
)
_NCCL_INIT_HOST_LITERAL = "] NCCL INFO "
"""A literal every :data:`_NCCL_INIT_HOST` match holds (a line without it skips that slow, unanchored search)."""


# ---------------------------------------------------------------------------------------------------------------------
# What the scan collects per file (inside the worker process; picklable)


@dataclass(slots=True, eq=False)
class _Raw:
    line: int
    text: str
    rank: int | None
    wt: WallTime | None
    after: WallTime | None = None
    before: WallTime | None = None


@dataclass(eq=False)
class _Tally:
    count: int = 0
    samples: list[_Raw] = field(default_factory=list)
    first_by_rank: dict[int | None, _Raw] = field(default_factory=dict)
    last_by_rank: dict[int | None, _Raw] = field(default_factory=dict)
    count_by_rank: dict[int | None, int] = field(default_factory=dict)


@dataclass(eq=False)
class _Series:
    """A bounded series of (line, time, value); thinned by half each time it fills up."""

    points: list[tuple[int, WallTime | None, float]] = field(default_factory=list)
    stride: int = 1
    seen: int = 0

    def add(self, line: int, wt: WallTime | None, value: float) -> None:
        self.seen += 1
        if (self.seen - 1) % self.stride:
            return
        self.points.append((line, wt, value))
        if len(self.points) >= SERIES_POINTS:
            self.points = self.points[::2]
            self.stride *= 2


@dataclass(eq=False)
class _FileHits:
    rel: str
    tallies: dict[str, _Tally] = field(default_factory=dict)
    step_ms: dict[int | None, _Series] = field(default_factory=dict)
    memory_mb: dict[int | None, _Series] = field(default_factory=dict)
    last_time: tuple[int, WallTime] | None = None
    rank_host: dict[int, tuple[int, str, int]] = field(default_factory=dict)
    """Global rank -> (communicator size, host, pid) from NCCL init lines (the largest communicator wins)."""


_K_SIGNALS = len(SIGNALS)
_K_NCCL = len(NCCL_PATTERNS)


@dataclass(frozen=True, slots=True, repr=False, eq=False)
class _Route:
    """Where the hits of one set of pattern ids go (worked out once per distinct set: a file repeats a few sets)."""

    nccl: list[int]
    """Ids for the NCCL table's sink (its own 0..k-1)."""
    clock: list[int]
    """Ids for the alignment's sink."""
    signals: bool
    """Any :data:`SIGNALS` hit at all (the line is kept and timed)."""
    tallied_caps: tuple[tuple[str, int], ...]
    """The signals whose tallies count the line, each with its sample cap (``nccl_init`` only names a rank's host)."""
    kept: bool
    """Some tally or series keeps the line (else it only names a host and times its neighbours)."""
    batched: bool
    """Only the ``progress`` signal (no NCCL, clock or other signal id): such lines wait in a batch that is
    aggregated per rank at once (:meth:`EvidenceSink._flush`)."""
    nccl_init: bool
    progress: bool
    memory: bool


def _number(text: str) -> float | None:
    """A step time or memory figure (a run of digits and dots); None when it is not a number (``1.2.3``, or the
    sentence's full stop after it: ``=0.5.``), which a series leaves out instead of failing the file's scan."""
    try:
        return float(text)
    except ValueError:
        return None


def _step_ms(text: str) -> float | None:
    """A progress line's step time in ms: the first :data:`_STEP_MS` pattern that matches, None when none does or
    its figure is not a number."""
    for literal, rx, scale in _STEP_MS:
        if literal in text:
            m = rx.search(text)
            if m:
                value = _number(m.group(1))
                return value * scale if value is not None else None
    return None


_PROGRESS_ID = SIGNAL_NAMES.index("progress")
_PROGRESS_CAP = _SAMPLE_CAP["progress"]
_BATCH_LINES = 4096
"""Progress lines a sink holds before it reads them (bounds its memory; a run is read per rank at once)."""

_ROUTES: dict[tuple[int, ...], _Route] = {}
_MAX_ROUTES = 4096
"""Distinct id sets remembered (a worker process sees a few dozen; the bound only guards memory)."""


def _route(pattern_ids: list[int]) -> _Route:
    key = tuple(pattern_ids)
    r = _ROUTES.get(key)
    if r is None:
        names = {SIGNAL_NAMES[i] for i in pattern_ids if i < _K_SIGNALS}
        r = _Route(
            nccl=[i - _K_SIGNALS for i in pattern_ids if _K_SIGNALS <= i < _K_SIGNALS + _K_NCCL],
            clock=[i - _K_SIGNALS - _K_NCCL for i in pattern_ids if i >= _K_SIGNALS + _K_NCCL],
            signals=bool(names),
            tallied_caps=tuple((n, _SAMPLE_CAP[n]) for n in sorted(names) if n != "nccl_init"),
            kept=bool(names - {"nccl_init"}),
            batched=names == {"progress"} and all(i < _K_SIGNALS for i in pattern_ids),
            nccl_init="nccl_init" in names,
            progress="progress" in names,
            memory="memory" in names,
        )
        if len(_ROUTES) < _MAX_ROUTES:
            _ROUTES[key] = r
    return r


class EvidenceSink:
    """One file's share of the evidence scan: :data:`SIGNALS` hits here, NCCL candidate lines to the NCCL table's
    sink, clock anchors to the alignment's sink (each receives its own pattern ids).

    Lines of the ``progress`` signal alone (a bar or step line per rank per step: most hits) are only appended to a
    batch, read before the next hit of another signal and at :meth:`finish`: aggregated per rank
    (:func:`_progress_run`), so that only each rank's first and last line and the file's first samples become kept
    lines. The file's result is what reading every line in order gives."""

    def __init__(self, lf: LogFile) -> None:
        self.out = _FileHits(rel=lf.rel)
        self.nccl = NcclSink(lf)
        self.clock = WorkerClockSink(lf)
        self._open: list[_Raw] = []  # hits without a time of their own, waiting for the next timed line
        self._batch: list[str] = []
        """Progress-only hit lines not yet read: read before any other signal hit."""
        self._batch_nos: list[int] = []

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        route = _ROUTES.get(tuple(pattern_ids)) or _route(pattern_ids)
        if route.batched:
            self._batch.append(line)
            self._batch_nos.append(line_no)
            if len(self._batch) >= _BATCH_LINES:
                self._flush()
            return
        if route.nccl:
            self.nccl.on_hit(route.nccl, line_no, line)
        if route.clock:
            self.clock.on_hit(route.clock, line_no, line)
        if route.signals:
            if self._batch:
                self._flush()
            self._signals(route, line_no, line)

    def bulk_id(self) -> int | None:
        """The ``progress`` signal's id: the scan may hand its lines over in bulk (:meth:`on_bulk`) instead of one
        :meth:`on_hit` call each."""
        return _PROGRESS_ID

    def on_bulk(self, line_nos: list[int], lines: list[str]) -> None:
        """A run of progress-only lines, in order: what :meth:`on_hit` does with each, at once (appended to the batch,
        read when it is full)."""
        self._batch += lines
        self._batch_nos += line_nos
        if len(self._batch) >= _BATCH_LINES:
            self._flush()

    def _flush(self) -> None:
        """Read the waiting progress lines in order, as :meth:`_signals` would one by one."""
        lines, nos = self._batch, self._batch_nos
        self._batch, self._batch_nos = [], []
        self._apply_run(lines, nos, *_progress_run(lines, nos))

    def _apply_run(
        self,
        lines: list[str],
        nos: list[int],
        stats: dict[int | None, list[int]],
        points: dict[int | None, list[tuple[int, WallTime | None, float]]],
        timed_idx: list[int],
        timed_wt: list[WallTime],
    ) -> None:
        """The per-line effect of ``lines`` (progress lines) from their per-rank aggregates and the indices of their
        timed lines (:func:`_progress_run`): the same tally, samples, first/last lines (the same :class:`_Raw` objects
        shared between them, with their time and ``after``/``before`` bounds), step-time series and last time, in the
        same order."""
        out = self.out
        prior = out.last_time[1] if out.last_time else None
        if timed_idx:  # the lines waiting for a time get the run's first; the run's last time is the file's latest
            for waiting in self._open:
                waiting.before = timed_wt[0]
            self._open.clear()
            out.last_time = (nos[timed_idx[-1]], timed_wt[-1])
        made: dict[int, _Raw] = {}

        def raw(k: int, rank: int | None) -> _Raw:
            r = made.get(k)
            if r is None:
                j = bisect_left(timed_idx, k)  # timed lines before line k: timed_idx[:j]
                own = j < len(timed_idx) and timed_idx[j] == k
                text = strip_ansi(lines[k])
                r = made[k] = _Raw(
                    nos[k],
                    text if len(text) <= TEXT_CUT else cut(text),
                    rank,
                    timed_wt[j] if own else None,
                    timed_wt[j - 1] if j else prior,
                )
                if not own:
                    if j < len(timed_idx):
                        r.before = timed_wt[j]  # the next timed line, in this run
                    else:
                        self._open.append(r)  # waits for a later one
            return r

        t = out.tallies.get("progress")
        if t is None:
            t = out.tallies["progress"] = _Tally()
        t.count += len(lines)
        for k in range(min(len(lines), _PROGRESS_CAP - len(t.samples))):
            t.samples.append(raw(k, rank_or_local(strip_ansi(lines[k]))))
        for rank, (first, last, count) in stats.items():
            if rank not in t.first_by_rank:
                t.first_by_rank[rank] = raw(first, rank)
            t.last_by_rank[rank] = raw(last, rank)
            t.count_by_rank[rank] = t.count_by_rank.get(rank, 0) + count
        for rank, pts in points.items():
            series = out.step_ms.get(rank)
            if series is None:
                series = out.step_ms[rank] = _Series()
            if series.stride == 1 and len(series.points) + len(pts) < SERIES_POINTS:
                series.points.extend(pts)  # what add() does point by point while nothing is thinned
                series.seen += len(pts)
            else:
                for line_no, wt, value in pts:
                    series.add(line_no, wt, value)

    def _signals(self, route: _Route, line_no: int, line: str) -> None:
        text = strip_ansi(line)
        wt = parse_wall_time(text)
        out = self.out
        if route.nccl_init:
            h = _NCCL_INIT_HOST.search(text) if _NCCL_INIT_HOST_LITERAL in text else None
            if h:
                r, n = int(h.group("rank")), int(h.group("nranks"))
                if n >= out.rank_host.get(r, (0, "", 0))[0]:
                    out.rank_host[r] = (n, h.group("host"), int(h.group("pid")))
        if not route.kept:
            # Only ``nccl_init``: the line names a host and times its neighbours, but no tally or series keeps it
            # (so it needs no rank, and waits for no later time).
            if wt is not None:
                self._timed(line_no, wt)
            return
        rank = rank_or_local(text)
        last = out.last_time
        raw = _Raw(line_no, text if len(text) <= TEXT_CUT else cut(text), rank, wt, last[1] if last else None)
        if wt is not None:
            self._timed(line_no, wt)
        else:
            self._open.append(raw)
        tallies = out.tallies
        for name, cap in route.tallied_caps:
            t = tallies.get(name)
            if t is None:
                t = tallies[name] = _Tally()
            t.count += 1
            if len(t.samples) < cap:
                t.samples.append(raw)
            if rank not in t.first_by_rank:
                t.first_by_rank[rank] = raw
            t.last_by_rank[rank] = raw
            t.count_by_rank[rank] = t.count_by_rank.get(rank, 0) + 1
        if route.progress and (ms := _step_ms(text)) is not None:
            _add_point(out.step_ms, rank, line_no, wt, ms)
        if route.memory and _MEMORY_LITERAL in text:
            mm = _MEMORY_MB.search(text)
            if mm:
                value = _number(mm.group(1))
                if value is not None:
                    _add_point(out.memory_mb, rank, line_no, wt, value)

    def _timed(self, line_no: int, wt: WallTime) -> None:
        """A line with a time of its own: it bounds the hits waiting for one, and later hits come after it."""
        if self._open:
            for waiting in self._open:
                waiting.before = wt
            self._open.clear()
        self.out.last_time = (line_no, wt)

    def finish(self) -> tuple[_FileHits, FileEvents, WorkerClockFacts, _FileSeries]:
        if self._batch:
            self._flush()
        return _without_series(self.out), self.nccl.finish(), self.clock.finish(), _file_series(self.out)


def _progress_run(
    lines: list[str], nos: list[int]
) -> tuple[
    dict[int | None, list[int]], dict[int | None, list[tuple[int, WallTime | None, float]]], list[int], list[WallTime]
]:
    """What :meth:`EvidenceSink._signals` reads of each progress line, aggregated: ``stats`` maps each rank (None: no
    rank) to ``[first index, last index, count]`` in order of first appearance, ``points`` each rank to its ``(line
    number, time, step ms)`` in line order, ``timed_idx``/``timed_wt`` are the indices and times of the lines that
    have one."""
    stats: dict[int | None, list[int]] = {}
    points: dict[int | None, list[tuple[int, WallTime | None, float]]] = {}
    timed_idx: list[int] = []
    timed_wt: list[WallTime] = []
    for k, line in enumerate(lines):
        text = strip_ansi(line)
        wt = parse_wall_time(text)
        rank = rank_or_local(text)
        st = stats.get(rank)
        if st is None:
            stats[rank] = [k, k, 1]
        else:
            st[1] = k
            st[2] += 1
        if wt is not None:
            timed_idx.append(k)
            timed_wt.append(wt)
        if (ms := _step_ms(text)) is not None:
            pts = points.get(rank)
            if pts is None:
                pts = points[rank] = []
            pts.append((nos[k], wt, ms))
    return stats, points, timed_idx, timed_wt


def _add_point(
    series: dict[int | None, _Series], rank: int | None, line_no: int, wt: WallTime | None, value: float
) -> None:
    """Add one point to ``rank``'s series in ``series`` (step times or memory figures of one file)."""
    have = series.get(rank)
    if have is None:
        have = series[rank] = _Series()
    have.add(line_no, wt, value)


@dataclass(repr=False, eq=False)
class _FileSeries:
    """One file's step-time and memory series as flat arrays per rank (made in the scan's worker process, so the main
    process only joins arrays): per kind ("step", "memory"), rank -> (lines, times, values), times in microseconds
    since 1970 on the worker clock or :data:`_NO_TIME`. A rank's series whose points include a time without a year
    (it needs the job's year, known only once every file is read) is kept as its points instead (``raw``)."""

    arrays: dict[str, dict[int | None, tuple[array[int], array[int], array[float]]]] = field(default_factory=dict)
    raw: dict[str, dict[int | None, list[tuple[int, WallTime | None, float]]]] = field(default_factory=dict)


def _without_series(fh: _FileHits) -> _FileHits:
    """``fh`` without its series (they travel as :class:`_FileSeries`)."""
    return replace(fh, step_ms={}, memory_mb={})


def _file_series(fh: _FileHits) -> _FileSeries:
    out = _FileSeries()
    for kind, per_rank in (("step", fh.step_ms), ("memory", fh.memory_mb)):
        arrays: dict[int | None, tuple[array[int], array[int], array[float]]] = {}
        raw: dict[int | None, list[tuple[int, WallTime | None, float]]] = {}
        for rank, s in per_rank.items():
            lines, wts, values = zip(*s.points, strict=True) if s.points else ((), (), ())
            if wts.count(None) == len(wts):  # untimed points (most step lines): no time to convert, one by one
                arrays[rank] = (array("q", lines), array("q", [_NO_TIME]) * len(wts), array("d", values))
                continue
            times = array("q")
            prev: WallTime | None = None
            value = _NO_TIME
            for _ln, wt, _v in s.points:
                if wt is not prev:  # (consecutive points often share one time object: converted once)
                    prev = wt
                    if wt is None:
                        value = _NO_TIME
                    elif wt.year is None:
                        break  # a time without a year: kept as points (the job's year is needed)
                    else:
                        t = with_year(wt, None)  # the line's own year
                        value = _NO_TIME if t is None else (t - _EPOCH) // _US
                times.append(value)
            else:
                arrays[rank] = (array("q", lines), times, array("d", values))
                continue
            raw[rank] = s.points
        if arrays:
            out.arrays[kind] = arrays
        if raw:
            out.raw[kind] = raw
    return out


def _refine(result: tuple[_FileHits, FileEvents, WorkerClockFacts, _FileSeries], scan: FileScan) -> tuple[Any, ...]:
    """:class:`EvidenceSink`'s result as the scan keeps it (:attr:`~debug_training_logs.logs.scan_cache.Consumer.
    refine`, run in the worker that scanned the file): (None, NCCL lines, clock facts, series, :class:`_FileDigest`),
    or with the raw hits in place of the digest when it cannot be made (a time without a year that the file's own
    year cannot take: February 29)."""
    fh, fe, clock, series = result
    digest = _digest(fh, file_year(scan) or WORKER_FALLBACK_YEAR)
    return (fh if digest is None else None, fe, clock, series, digest)


@dataclass(repr=False, eq=False)
class _SignalDigest:
    """One signal's share of one file, as :class:`Hit` s (made in the scan's worker)."""

    count: int
    hits: list[Hit]
    """The kept hits (the first ones, each rank's first and last), one per line."""
    yearless: bytes
    """Per hit: which of its times (1 ``time``, 2 ``after``, 4 ``before``) took the assumed year (its line has none)."""
    first: dict[int | None, int]
    """The line's own rank (None: the line names none) -> index in :attr:`hits` of its first hit."""
    last: dict[int | None, int]
    count_by_rank: dict[int | None, int]


@dataclass(repr=False, eq=False)
class _FileDigest:
    """One file's evidence hits made into :class:`Hit` s in the worker that scanned it, times taking :attr:`year` where
    their line has none; the job's fold redoes only the times of a file that assumed another year than the job's."""

    year: int
    signals: dict[str, _SignalDigest]
    rank_host: dict[int, tuple[int, str, int]]


def _digest(fh: _FileHits, year: int) -> _FileDigest | None:
    rel = fh.rel
    done: dict[int, tuple[WallTime, datetime | None, int]] = {}  # id -> (the object, its datetime, yearless 0/1)

    def conv(wt: WallTime | None) -> tuple[datetime | None, int]:
        if wt is None:
            return None, 0
        known = done.get(id(wt))
        if known is None:
            t = with_year(wt, year)
            if t is None and wt.year is None:
                raise _NoDigest
            known = done[id(wt)] = (wt, t, 0 if wt.year is not None else 1)
        return known[1], known[2]

    signals: dict[str, _SignalDigest] = {}
    try:
        for name, t in fh.tallies.items():
            hits: list[Hit] = []
            flags = bytearray()
            at: dict[int, int] = {}  # line -> index in hits (a line's first raw hit is the kept one)
            for raw in (*t.samples, *t.first_by_rank.values(), *t.last_by_rank.values()):
                if raw.line in at:
                    continue
                at[raw.line] = len(hits)
                (when, a), (after, b), (before, c) = conv(raw.wt), conv(raw.after), conv(raw.before)
                hits.append(_new_evidence_hit(name, rel, raw.line, raw.text, raw.rank, when, after, before))
                flags.append(a | b << 1 | c << 2)
            signals[name] = _SignalDigest(
                t.count,
                hits,
                bytes(flags),
                {r: at[raw.line] for r, raw in t.first_by_rank.items()},
                {r: at[raw.line] for r, raw in t.last_by_rank.items()},
                dict(t.count_by_rank),
            )
    except _NoDigest:
        return None
    return _FileDigest(year, signals, dict(fh.rank_host))


class _NoDigest(Exception):
    """A time without a year that the assumed year cannot take (February 29 of a common year)."""


_EPOCH = datetime(1970, 1, 1)
_US = timedelta(microseconds=1)
_NO_TIME = -(2**63)
