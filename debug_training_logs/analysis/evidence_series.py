"""Step-time and memory series: a rank's points as flat arrays (:class:`PointSeries`, built file by file), and the
ranks whose series left their own baseline (:func:`series_jumps`, :func:`memory_creep`).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise

from debug_training_logs.analysis.evidence_sink import _EPOCH, _NO_TIME, _US
from debug_training_logs.analysis.evidence_types import Series, SeriesJump
from debug_training_logs.formats.timestamps import WallTime, with_year
from debug_training_logs.lazy import LazySequence


class _SeriesBuilder:
    """One rank's series as it is folded in, file by file: four flat arrays instead of a tuple, an int, a float and
    a datetime per point (a 10,240-rank job keeps ~half a million points)."""

    def __init__(self) -> None:
        self.rels: list[str] = []
        self.rel_at = array("l")
        self.lines = array("q")
        self.times = array("q")
        self.values = array("d")
        self.borrowed = False
        """Whether the arrays are a file's own (:meth:`of_arrays`): copied before anything is added to them."""

    def _own(self) -> None:
        if self.borrowed:
            self.lines, self.times = array("q", self.lines), array("q", self.times)
            self.values = array("d", self.values)
            self.borrowed = False

    def add(self, rel: str, points: list[tuple[int, WallTime | None, float]], year: int) -> None:
        self._own()
        if not self.rels or self.rels[-1] != rel:
            self.rels.append(rel)
        k = len(self.rels) - 1
        for ln, wt, v in points:
            t = with_year(wt, year) if wt is not None else None
            self.rel_at.append(k)
            self.lines.append(ln)
            self.times.append(_NO_TIME if t is None else (t - _EPOCH) // _US)
            self.values.append(v)

    def add_arrays(self, rel: str, lines: array[int], times: array[int], values: array[float]) -> None:
        """The points of one file, as :class:`_FileSeries` holds them (times already on the worker clock)."""
        self._own()
        if not self.rels or self.rels[-1] != rel:
            self.rels.append(rel)
        self.rel_at.extend(array("l", [len(self.rels) - 1]) * len(lines))
        self.lines.extend(lines)
        self.times.extend(times)
        self.values.extend(values)

    @staticmethod
    def of_arrays(rel: str, lines: array[int], times: array[int], values: array[float]) -> _SeriesBuilder:
        """A builder holding one file's points (:meth:`add_arrays` on a new one), the file's arrays taken as they are
        (a rank's series comes from one file in most jobs: no copy)."""
        b = _SeriesBuilder.__new__(_SeriesBuilder)
        b.rels, b.rel_at, b.lines, b.times, b.values = [rel], array("l", [0]) * len(lines), lines, times, values
        b.borrowed = True
        return b

    def points(self) -> PointSeries:
        """The points in (file, line) order (stable: equal keys keep the order they came in)."""
        rels, rel_at, lines = self.rels, self.rel_at, self.lines
        if len(rels) == 1 and lines.tolist() == sorted(lines):  # one file's points, in line order
            return PointSeries(rels, rel_at, lines, self.times, self.values)
        order = sorted(range(len(lines)), key=lambda i: (rels[rel_at[i]], lines[i]))
        if order == list(range(len(lines))):
            return PointSeries(rels, rel_at, lines, self.times, self.values)
        return PointSeries(
            rels,
            array("l", (rel_at[i] for i in order)),
            array("q", (lines[i] for i in order)),
            array("q", (self.times[i] for i in order)),
            array("d", (self.values[i] for i in order)),
        )


class PointSeries(LazySequence[tuple[str, int, datetime | None, float]]):
    """One rank's series, (file, line, worker-clock time or None, value) per point in (file, line) order, held as
    flat arrays; each point is made on access."""

    def __init__(self, rels: list[str], rel_at: array[int], lines: array[int], times: array[int], values: array[float]):
        self.rels, self.rel_at, self.lines, self.times, self.values = rels, rel_at, lines, times, values

    def __len__(self) -> int:
        return len(self.lines)

    def _at(self, i: int) -> tuple[str, int, datetime | None, float]:
        t = self.times[i]
        return (self.rels[self.rel_at[i]], self.lines[i], None if t == _NO_TIME else _EPOCH + t * _US, self.values[i])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=False))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))


STEP_JUMP_FACTOR = 3.0
"""A rank's step time "jumped" when it stays at least this many times its own early median."""
SERIES_BASELINE_POINTS = 5
"""How many early points make a rank's baseline."""
SERIES_SUSTAIN_POINTS = 3
"""How many consecutive points must stay high for a jump to count (one slow step is not a collapse)."""
MEMORY_CREEP_FACTOR = 1.5
"""Allocated memory at the end at least this many times the start, growing in most intervals, is a creep."""


def series_jumps(series: Series, factor: float) -> list[SeriesJump]:
    """Ranks whose series stays at ``factor`` x its own baseline for :data:`SERIES_SUSTAIN_POINTS` points."""
    out: list[SeriesJump] = []
    for rank, points in sorted(series.items()):
        if len(points) < SERIES_BASELINE_POINTS + SERIES_SUSTAIN_POINTS:
            continue
        values = _values(points)
        baseline = _median(values[:SERIES_BASELINE_POINTS])
        if baseline <= 0:
            continue
        run = 0
        high = factor * baseline
        if max(values[SERIES_BASELINE_POINTS:]) < high:  # (most ranks: no point is high, found at C speed)
            continue
        for i in range(SERIES_BASELINE_POINTS, len(values)):
            run = run + 1 if values[i] >= high else 0
            if run == SERIES_SUSTAIN_POINTS:
                rel, ln, t, _ = points[i - SERIES_SUSTAIN_POINTS + 1]
                peak = max(values[i - SERIES_SUSTAIN_POINTS + 1 :])
                out.append(SeriesJump(rank, rel, baseline, peak, ln, t, f"{baseline:.0f} -> {peak:.0f}"))
                break
    return out


def _median(values: Sequence[float]) -> float:
    """``statistics.median`` of a few values (the same value, without its checks and conversions: once per rank)."""
    data = sorted(values)
    n = len(data)
    if n % 2:
        return data[n // 2]
    return (data[n // 2 - 1] + data[n // 2]) / 2


def _values(points: Sequence[tuple[str, int, datetime | None, float]]) -> Sequence[float]:
    """A series' values alone (a :class:`PointSeries`' own array: no point is made)."""
    return points.values if isinstance(points, PointSeries) else [v for *_, v in points]


def memory_creep(series: Series) -> list[SeriesJump]:
    """Ranks whose allocated memory grew by :data:`MEMORY_CREEP_FACTOR` and rose in most intervals."""
    out: list[SeriesJump] = []
    for rank, points in sorted(series.items()):
        if len(points) < SERIES_BASELINE_POINTS:
            continue
        values = _values(points)
        rises = sum(1 for a, b in pairwise(values) if b > a)
        if values[0] > 0 and values[-1] >= MEMORY_CREEP_FACTOR * values[0] and rises >= 0.7 * (len(values) - 1):
            rel, ln, t, _ = points[0]
            out.append(SeriesJump(rank, rel, values[0], max(values), ln, t, f"{values[0]:.0f} -> {values[-1]:.0f} MB"))
    return out
