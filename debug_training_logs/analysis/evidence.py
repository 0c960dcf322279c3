"""The evidence model of a job: every fact a diagnosis or a verification rests on, gathered once.

:class:`JobEvidence` is built once per job from the shared scan of the worker logs (:func:`evidence_from_scan` takes
a finished :class:`~debug_training_logs.analysis.inventory_types.JobScan` whose per-file results are
:class:`EvidenceSink`'s; :func:`gather_evidence` runs that scan and the AIS pass), and it is read by both the decision
procedure (:mod:`debug_training_logs.analysis.diagnosis`) and every verifier rule (:mod:`debug_training_logs.verify`):
the two can never disagree about which rank a line belongs to or when it happened.

What it holds:

* ``worker`` (:class:`WorkerEvidence`): inventory and coverage, the named signals of :data:`SIGNALS` (process
  killers, exceptions and tracebacks, data-loading and storage errors, progress and clean-end markers) with their
  hits, each rank's first/last hit and counts, step-time and memory series, each file's last timed line, rank -> host.
* ``nccl`` (:class:`NcclState`): the per-(rank, PG) NCCL state table and each process group's classification.
* ``ais`` (:class:`AisEvidence`): the AIS file index, counter spikes, notable lines and the clock alignment.
* ``launcher`` (:class:`~debug_training_logs.analysis.launcher.LauncherFacts`: torchrun/elastic, gloo and DETAIL
  lines: exit codes, signals, SIGTERMs sent by the agent, victims, mismatches), ``flight_recorder`` (the dumps),
  ``attempts``/``attempt``; the per-rank states read the launcher's exits through :meth:`JobEvidence.launcher_events`
  (an exit code > 0 makes a rank ``crashed``).

Derived facts, computed once per evidence (``cache``) and shared: :func:`triggers` (each rank's candidate root
causes), :func:`rank_states` (finished / crashed / watchdog_killed / waiting / stuck / torn_down / absent / unknown,
with the deciding line, exit code, signal, the exception that reached the top and the module it came from),
:func:`first_symptom`, :func:`precedes_symptom` (time bounds first, then the causal order of states),
:func:`job_finished`, :func:`fabric_evidence`, :func:`counters_known`, :func:`node_failure_facts`.

Time: worker times are naive datetimes on the workers' clock (their zone is never written); AIS times are naive
datetimes on the AIS daemons' clock; the two are only compared through a verified clock alignment (``offset_hours``
= worker clock minus AIS clock). A line without a time of its own is an interval: ``after`` (the nearest earlier
timed line of its file) and ``before`` (the nearest later one; None when none follows: the end of that output).
Within one file lines are in write order, so these per-file bounds also bound the line on its rank. When the bounds
cannot order a line against the first symptom, the states can: the last output of a rank that crashed (or stalled)
and never entered the collective the others waited in came before their timeout.

Where the work runs: per-file work is done in the scan's worker processes, in parallel, and the main process only
merges small per-file results. :meth:`EvidenceSink.finish` makes a file's step-time and memory series into flat arrays;
the consumer's refine (:func:`_refine`, given the file's head and tail) makes its hits into :class:`Hit` s with times in
the file's own year (the fold moves them to the job's year when the two differ) and leaves the raw hits only when it
cannot (a yearless February 29 in a common year). :func:`gather_evidence` unpacks each file's NCCL lines as its
result arrives, while the other files are still being scanned.

Nothing here imports the verifier or the decision procedure.
"""

from __future__ import annotations

import functools
import re
from array import array
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from debug_training_logs import meanwhile, progress
from debug_training_logs.analysis import attempts as attempts_mod
from debug_training_logs.analysis import launcher as launcher_scan
from debug_training_logs.analysis.alignment import WORKER_PATTERNS as ALIGNMENT_PATTERNS
from debug_training_logs.analysis.alignment import Alignment, WorkerClock, WorkerClockFacts, WorkerClockSink, align
from debug_training_logs.analysis.grep_patterns import DEFAULT_PATTERNS
from debug_training_logs.analysis.inventory import LineKeep, consumer_for, kept_sink, scan_consumers
from debug_training_logs.analysis.inventory_file_share import file_year
from debug_training_logs.analysis.inventory_markers import Marker
from debug_training_logs.analysis.inventory_types import FileInventory, JobScan, given_world_size
from debug_training_logs.analysis.inventory_views import PerFile, file_result_item, result_item
from debug_training_logs.analysis.launcher_decision import OWN_SIGNALS
from debug_training_logs.analysis.nccl_hits import FileEvents
from debug_training_logs.analysis.nccl_rows import NcclTable
from debug_training_logs.analysis.nccl_sink import NCCL_PATTERNS, NcclSink
from debug_training_logs.analysis.nccl_table import FilePrep, build_table
from debug_training_logs.analysis.read_back import WORKER_FALLBACK_YEAR, TimeBounds, read_lines
from debug_training_logs.analysis.scan_cache import Consumer, FileResult
from debug_training_logs.formats import accusations
from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats.progress import step_number
from debug_training_logs.formats.python_text import is_source_line
from debug_training_logs.formats.storage import DATA_LOADER_WRAPPER, STORAGE_FAILURE
from debug_training_logs.formats.timestamps import WallTime, parse_wall_time, with_year
from debug_training_logs.frozen import fast_positional
from debug_training_logs.lazy import LazySequence
from debug_training_logs.logs import fields as native_fields
from debug_training_logs.logs.attribution import rank_or_local, strip_ansi, strip_rank_prefix
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.scan import (
    FileScan,
)
from debug_training_logs.ranges import parse_ranges
from debug_training_logs.textcut import TEXT_CUT, cut

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Coverage, Evidence

if TYPE_CHECKING:  # the AIS and dump modules are imported where those are read: the worker scan's sinks need none
    from debug_training_logs.analysis import fr_dumps, hang_facts
    from debug_training_logs.analysis.ais_deltas import (
        AisCollection,
        GetStop,
        NotableLines,
        Restart,
        Spike,
    )
    from debug_training_logs.analysis.ais_index import AisDaemon, AisIndex

# ---------------------------------------------------------------------------------------------------------------------
# Named data: the signals searched for in every worker log


Signal = Marker
"""A named pattern searched in every worker log (RE2 syntax, anywhere in the line) and what a hit means: the same
shape as the inventory's markers, which ride along in the same scan."""


_GREP = {p.name: p for p in DEFAULT_PATTERNS}


def _same_as_grep(name: str, grep_name: str) -> Signal:
    """A signal that is exactly one of ``grep_all_ranks``' default patterns (one definition for both)."""
    p = _GREP[grep_name]
    return Signal(name, p.regex, p.meaning)


SIGNALS: tuple[Signal, ...] = (
    # Tier 1: process killers.
    Signal(
        "cuda_oom",
        r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|Cuda failure 'out of memory'"
        r"|Failed to CUDA (?:calloc|malloc)",
        "GPU memory exhausted (PyTorch's allocator, cuBLAS, NCCL's own buffers)",
    ),
    Signal(
        "cuda_error",
        r"CUDA error: |AcceleratorError|an illegal memory access was encountered|invalid device ordinal"
        r"|device-side assert triggered|uncorrectable ECC error|cudaError[A-Z]\w+",
        "a CUDA runtime error (illegal access, bad device, ECC, assert)",
    ),
    _same_as_grep("xid", "gpu_xid_ecc"),
    _same_as_grep("signal", "signal"),
    _same_as_grep("taken_down", "process_taken_down"),
    _same_as_grep("slurm_cancel", "slurm_cancelled"),
    _same_as_grep("slurm_oom", "oom_kill"),
    _same_as_grep("srun_error", "srun_error"),
    _same_as_grep("address_in_use", "address_in_use"),
    # Tier 2: training loop crashes.
    _same_as_grep("traceback", "traceback"),
    Signal(
        "exception",
        r"(?:^|[\s:\]])(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Timeout|Interrupt)|StopIteration|SystemExit)"
        r"(?:: |:$|$)",
        "a Python exception line (the last line of a traceback)",
    ),
    Signal(
        "child_failed",
        r"ChildFailedError|failed \(exitcode: -?\d+\) local_rank: \d+",
        "torchrun saw a worker fail (the agent's exit line or its ChildFailedError summary)",
    ),
    _same_as_grep("nan", "nan_loss"),
    # Tier 3: data loading and storage.
    Signal(
        "data_error",
        # (at most 32 literal branches in all: more and the scan's prefilter cannot take the pattern, which then
        # costs a DFA pass over every byte; STORAGE_FAILURE has AISBatchLoaderError and Failed to fetch object)
        r"Batch stream truncated|[Ff]allback failed|Falling back to (?:sequential|direct)"
        r"|returned empty content|cuts due to per-object fetch failures|Timeout while fetching batch"
        r"|DataLoader worker \(pid|" + STORAGE_FAILURE.pattern,
        "a data-loading error (AIS batch loader, Lhotse, DataLoader) or the storage failing a read for good",
    ),
    Signal(
        "conn_reset",
        r"Connection reset by peer|ConnectionResetError|Connection broken|Connection aborted|Connection refused"
        r"|[Bb]roken pipe",
        "a connection reset/refused (keep-alive noise when the retry succeeds)",
    ),
    Signal(
        "retry",
        r"Retrying \(Retry\(|Retrying \S+ in [\d.]+ seconds|[Rr]etrying \d+/\d+|[Rr]etry \d+/\d+",
        "a request being retried (urllib3, tenacity, the skill's 'retrying N/M')",
    ),
    Signal(
        "retry_exhausted",
        r"Max retries exceeded|RetryError|[Rr]etries exhausted|giving up after \d+"
        r"|failed after \d+ (?:retries|attempts)",
        "retries gave up: the request failed for good",
    ),
    Signal("io_timeout", r"timed out|[Dd]eadline [Ee]xceeded|ReadTimeout|ConnectTimeout", "an I/O timeout"),
    # NCCL library and fabric.
    Signal(
        "net_error",
        r"NCCL WARN|NET/IB ?: |ibv_\w+ failed|ncclSystemError|ncclRemoteError|ncclInternalError"
        r"|unhandled system error|remote process exited or there was a network error",
        "NCCL library warnings and network/transport errors",
    ),
    Signal(
        "flight_recorder_off",
        r"Stack trace of the failed collective not found",
        "the NCCL flight recorder was disabled (TORCH_NCCL_TRACE_BUFFER_SIZE=0)",
    ),
    Signal("nccl_init", r"NCCL INFO .*\brank \d+ nranks \d+", "NCCL communicator init: which host a rank runs on"),
    # Progress and the end of the run.
    Signal(
        "progress",
        r" iteration +\d+/ *\d+ \||train_step_timing|Epoch \d+:|global_step[=: ]|\bstep[ =:]\s*\d+",
        "training progress (an iteration or step line)",
        dense=True,
    ),
    Signal("memory", r"memory \(MB\) \| allocated: [\d.]+", "a GPU memory report (Megatron report_memory)", dense=True),
    # Accusations: lines in which torch or the trainer names the failing rank (formats.accusations).
    Signal(
        "accusation", accusations.REGEX, "a line naming the rank that failed (monitoredBarrier, a trainer's report)"
    ),
    Signal(
        "clean_end",
        r"`Trainer\.fit` stopped|[Tt]raining (?:finished|completed|complete|done)\b|after training is done"
        r"|[Ff]inished training|exiting program at iteration|worker group successfully finished",
        "the training loop ended normally",
    ),
)
SIGNAL_NAMES = tuple(s.name for s in SIGNALS)


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
    r"(?:^|[\s\]:])([A-Za-z0-9][\w.\-]*):\d+:\d+ \[\d+\] NCCL INFO .*\brank (\d+) nranks (\d+)"
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
    rank_host: dict[int, tuple[int, str]] = field(default_factory=dict)
    """Global rank -> (communicator size, host) from NCCL init lines (the largest communicator wins)."""


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
    """Only the ``progress`` signal (no NCCL, clock or other signal id): such lines wait in a batch whose runs the
    compiled helper aggregates per rank (:meth:`EvidenceSink._flush`)."""
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
    batch when the compiled helper (:mod:`debug_training_logs.logs.fields`) is there; the batch is read before the
    next hit of another signal and at :meth:`finish`, each run of lines (untimed, or timed by a full date; colour
    codes removed) aggregated per rank in C, the other lines (c10/glog times, Ray ``[rank=N]``) one by one. Either
    way the file's result is what reading every line in order gives."""

    def __init__(self, lf: LogFile) -> None:
        self.out = _FileHits(rel=lf.rel)
        self.nccl = NcclSink(lf)
        self.clock = WorkerClockSink(lf)
        self._open: list[_Raw] = []  # hits without a time of their own, waiting for the next timed line
        self._native = native_fields.native()
        self._batch: list[str] = []
        """Progress-only hit lines not yet read (with the compiled helper): read before any other signal hit."""
        self._batch_nos: list[int] = []

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        route = _ROUTES.get(tuple(pattern_ids)) or _route(pattern_ids)
        if route.batched and self._native is not None:
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
        """The ``progress`` signal's id when the compiled helper is there: the scan may hand its lines over in bulk
        (:meth:`on_bulk`), none of them through Python one by one."""
        return _PROGRESS_ID if self._native is not None else None

    def on_bulk(self, line_nos: list[int], lines: list[str]) -> None:
        """A run of progress-only lines, in order: what :meth:`on_hit` does with each, at once (appended to the batch,
        read when it is full)."""
        self._batch += lines
        self._batch_nos += line_nos
        if len(self._batch) >= _BATCH_LINES:
            self._flush()

    def _flush(self) -> None:
        """Read the waiting progress lines in order, as :meth:`_signals` would one by one: runs the compiled helper
        answers for are applied per rank (:meth:`_apply_run`), a line it leaves (a c10/glog time, a Ray ``[rank=N]``
        prefix ...) goes through :meth:`_signals`."""
        native = self._native
        assert native is not None
        lines, nos = self._batch, self._batch_nos
        self._batch, self._batch_nos = [], []
        route = _route([_PROGRESS_ID])
        i, n = 0, len(lines)
        while i < n:
            stop, stats, points, timed_idx, timed_wt = native.progress_run(lines, nos, i, parse_wall_time)
            if stop > i:
                self._apply_run(lines, nos, i, stop, stats, points, timed_idx, timed_wt)
            if stop < n:
                self._signals(route, nos[stop], lines[stop])
            i = stop + 1

    def _apply_run(
        self,
        lines: list[str],
        nos: list[int],
        start: int,
        stop: int,
        stats: dict[int | None, list[int]],
        points: dict[int | None, list[tuple[int, WallTime | None, float]]],
        timed_idx: list[int],
        timed_wt: list[WallTime],
    ) -> None:
        """The per-line effect of ``lines[start:stop]`` (progress lines, timed by a full date or untimed) from
        their per-rank aggregates and the indices of their timed lines: the same tally, samples, first/last lines
        (the same :class:`_Raw` objects shared between them, with their time and ``after``/``before`` bounds),
        step-time series and last time, in the same order."""
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
        t.count += stop - start
        for k in range(start, min(stop, start + _PROGRESS_CAP - len(t.samples))):
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
                r, n = int(h.group(2)), int(h.group(3))
                if n >= out.rank_host.get(r, (0, ""))[0]:
                    out.rank_host[r] = (n, h.group(1))
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
        if route.progress:
            for literal, rx, scale in _STEP_MS:
                if literal in text:
                    m = rx.search(text)
                    if m:
                        value = _number(m.group(1))
                        if value is not None:
                            _add_point(out.step_ms, rank, line_no, wt, value * scale)
                        break
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
    """:class:`EvidenceSink`'s result as the scan keeps it (:attr:`~debug_training_logs.analysis.scan_cache.Consumer.
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
    rank_host: dict[int, tuple[int, str]]


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


def _all_global(by_rank: dict[int | None, int]) -> bool:
    """No key is a torchrun --tee local rank (encoded negative) or None: every one is a global rank."""
    return all(r is not None and r >= 0 for r in by_rank)


def _job_hits(
    sd: _SignalDigest, assumed: int, year: int, single: int | None, local: dict[int, int] | None = None
) -> list[Hit]:
    """A file's hits of one signal as the job sees them: in the job's ``year`` where their line has none (made with
    ``assumed``), with the file's ``single`` rank where their line names none, a torchrun --tee local rank (encoded
    ``-(L + 1)``) through the file's ``local`` map (else the single rank, else none)."""
    hits = sd.hits
    if assumed != year and any(sd.yearless):
        hits = [_in_year(h, f, year) if f else h for h, f in zip(hits, sd.yearless, strict=True)]
    if any(h.rank is None or h.rank < 0 for h in hits):
        lm = local or {}
        hits = [
            replace(h, rank=single if h.rank is None else lm.get(-h.rank - 1, single))
            if h.rank is None or h.rank < 0
            else h
            for h in hits
        ]
    return hits


def _in_year(h: Hit, flags: int, year: int) -> Hit:
    """``h`` with the times that took an assumed year in ``year`` (None where ``year`` has no such day)."""

    def moved(t: datetime | None, bit: int) -> datetime | None:
        if t is None or not flags & bit:
            return t
        try:
            return t.replace(year=year)
        except ValueError:
            return None

    return replace(h, time=moved(h.time, 1), after=moved(h.after, 2), before=moved(h.before, 4))


# ---------------------------------------------------------------------------------------------------------------------
# Evidence types (what consumers see)


@dataclass(frozen=True, slots=True)
class Hit(TimeBounds):
    """One log line that matched a signal, with its rank and time (worker clock)."""

    signal: str
    file: str
    line: int
    text: str
    rank: int | None
    time: datetime | None
    """The line's own time, when it writes one."""
    after: datetime | None = None
    """For a line without a time: the latest time on an earlier matched line of the same file (a lower bound)."""
    before: datetime | None = None
    """For a line without a time: the earliest time on a later matched line of the same file (an upper bound)."""

    @property
    def when(self) -> datetime | None:
        """Best single estimate: own time, else the bound next to it."""
        return self.time or self.after or self.before

    def cite(self) -> Evidence:
        from debug_training_logs.models import Evidence

        return Evidence(file=self.file, line=self.line, text=self.text)


_new_evidence_hit: Final = fast_positional(Hit)
"""``Hit(signal, file, line, text, rank, time, after, before)`` for the worker's digest (~200 per file; see
:func:`~debug_training_logs.frozen.fast_positional`)."""


@dataclass(frozen=True, slots=True, repr=False, eq=False)
class NcclEvent:
    """A parsed NCCL line that is not per-PG state (teardown, heartbeat kill, fatal terminate, torchrun rows)."""

    rank: int | None
    file: str
    line: int
    text: str
    time: datetime | None
    event: tn.Event


@dataclass(repr=False)
class NcclRow:
    """The NCCL state of one rank in one process group (a row of ``nccl_state_table``, times as datetimes)."""

    rank: int
    pg: str
    """The PG identity shared by its members (GUID/name, else uid; ``?`` when the logs give no PG)."""
    pg_desc: str | None = None
    seq: int | None = None
    op_type: str | None = None
    timeout_ms: int | None = None
    ran_for_ms: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    signal: str = "none"
    """``detected`` (its own watchdog timed out), ``observed`` (it only saw another rank's dump signal), ``none``."""
    first_to_dump: bool = False
    dump_signal_from_rank: int | None = None
    timeout_time: datetime | None = None
    collective_start_time: datetime | None = None
    file: str = ""
    line: int = 0
    text: str = ""

    @property
    def pending(self) -> int | None:
        """Enqueued but not completed collectives; 0 means the rank was not inside any collective."""
        if self.last_enqueued is None or self.last_completed is None:
            return None
        return self.last_enqueued - self.last_completed

    def cite(self) -> Evidence:
        from debug_training_logs.models import Evidence

        return Evidence(file=self.file, line=self.line, text=self.text)


@dataclass(repr=False)
class ProcessGroupState:
    """One process group's classification (``nccl_state_table``'s, with rank sets)."""

    pg: str
    desc: str | None
    classification: str
    """``straggler``, ``fabric``, ``root_ahead``, ``mixed`` or ``incomplete``."""
    reason: str
    ranks: set[int]
    straggler_ranks: set[int]
    reasons: dict[int, str]
    """Why each straggler/suspect rank was singled out."""
    detected_ranks: set[int]
    observed_ranks: set[int]
    first_to_dump_ranks: set[int]
    dump_signal_senders: set[int]
    suspect_ranks: set[int] = field(default_factory=set)
    """Ranks that look behind but cannot be named (the PG is incomplete or mixed)."""
    root_rank: int | None = None
    root_gap: int | None = None
    """How many collectives (last enqueued) the root rank is ahead of the others, when it is."""


@dataclass(repr=False)
class NcclState:
    """Every rank's NCCL state and each PG's classification, from ``analysis.nccl_table``."""

    table: NcclTable
    rows: list[NcclRow]
    groups: list[ProcessGroupState]
    ranks_without_state: set[int]
    """Ranks whose logs were read but that logged no NCCL state at all while others timed out (absent)."""
    job_stragglers: set[int]
    """Ranks at the root of the hang: stragglers that never detected a timeout and waited in no collective."""
    exited_with_error: set[int] = field(default_factory=set)
    """Ranks torchrun reports with a positive exit code (an uncaught exception: the process died, it did not hang)."""
    other_events: list[NcclEvent] = field(default_factory=list)
    """The NCCL events that are not per-PG state and that the decision reads (:data:`_OTHER_EVENTS_READ`); a job's
    teardown lines (several per rank) are left in the files, not held."""

    @property
    def timed_out(self) -> bool:
        return any(r.signal == "detected" for r in self.rows)

    @property
    def straggler_ranks(self) -> set[int]:
        return {r for g in self.groups for r in g.straggler_ranks}

    def first_timeout(self) -> NcclRow | None:
        timed = [r for r in self.rows if r.timeout_time is not None]
        return min(timed, key=lambda r: (r.timeout_time or datetime.max, r.rank)) if timed else None

    def collective_start(self) -> datetime | None:
        """When the stuck collective started (the earliest over the ranks that timed out)."""
        starts = [r.collective_start_time for r in self.rows if r.collective_start_time is not None]
        return min(starts) if starts else None


@dataclass(repr=False, eq=False)
class SeriesJump:
    """A rank whose series (step time, memory) left its own baseline."""

    rank: int
    file: str
    baseline: float
    peak: float
    first_line: int
    first_time: datetime | None
    text: str


Series = dict[int, Sequence[tuple[str, int, datetime | None, float]]]
"""Per rank: (file, line, time, value) points."""


@dataclass(repr=False, eq=False)
class WorkerEvidence:
    """What every worker log shows (one scan)."""

    root: Path
    job: JobScan
    year: int
    tallies: dict[str, list[Hit]]
    """Per signal: the kept hits (each file's first ones plus every rank's first and last), in time order."""
    counts: dict[str, int]
    counts_by_rank: dict[str, dict[int, int]]
    first_by_rank: dict[str, dict[int, Hit]]
    last_by_rank: dict[str, dict[int, Hit]]
    nccl_files: Sequence[FileEvents]
    """The NCCL sinks' parsed lines per file (the input of ``nccl_table.build_table``), unpacked from the scan's
    results on each access (iterate; a job's files are never all held at once)."""
    clock: WorkerClock
    """The alignment's worker-side anchors (from the same scan)."""
    step_ms: Series
    memory_mb: Series
    file_end: dict[str, Hit]
    """Per file: the last line with a time (from the file's tail), as a pseudo-hit ``end``."""
    rank_host: dict[int, str]
    """Global rank -> host, from the NCCL init line of the world communicator."""
    file_host: dict[str, str]
    """File -> host, when slurmstepd lines in it name exactly one node (``*** STEP j.s ON <host> ...``)."""
    _by_rank: dict[str, tuple[list[Hit], int, dict[int | None, list[Hit]]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Per signal: (the tally list indexed, its length then, its hits per rank): :meth:`hits` of one rank is asked
    once per rank, and a scan over every kept hit each time is quadratic in the ranks."""
    _latest: dict[str, tuple[list[Hit], int, datetime | None]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Per signal: (the tally list, its length then, :meth:`latest_start`)."""
    _rank_files: tuple[int, dict[int, list[str]]] | None = field(default=None, init=False, repr=False, compare=False)
    """(number of files indexed, rank -> its files in file order)."""
    _steps: tuple[int, list[datetime], list[int]] | None = field(default=None, init=False, repr=False, compare=False)
    """(progress hits indexed, their start times sorted, the distinct steps from each on): :meth:`steps_after`."""

    @property
    def coverage(self) -> Coverage:
        return self.job.coverage()

    @property
    def world_size(self) -> int | None:
        return self.job.inventory.world_size

    @property
    def missing_ranks(self) -> set[int]:
        return self.job.inventory.missing_ranks

    @property
    def ranks(self) -> set[int]:
        return self.job.inventory.ranks

    def worker_ranks(self) -> set[int]:
        """The ranks with a sign that their worker ran: every rank the logs name, except those known only from a
        file's name (``slurm-<job>_<N>.out``) when no training progress is logged (the launcher's own output)."""
        files = self.job.inventory.files
        if self.tallies.get("progress"):
            return set(self.ranks)
        return {r for f in files if f.rank_source != "file name" for r in f.ranks}

    def hits(self, signal: str, rank: int | None = None) -> list[Hit]:
        """Kept hits of ``signal`` (optionally of one rank), in time order."""
        hs = self.tallies.get(signal, [])
        if rank is None:
            return hs
        indexed = self._by_rank.get(signal)
        if indexed is None or indexed[0] is not hs or indexed[1] != len(hs):
            per: dict[int | None, list[Hit]] = defaultdict(list)
            for h in hs:
                per[h.rank].append(h)
            indexed = self._by_rank[signal] = (hs, len(hs), dict(per))
        return list(indexed[2].get(rank, ()))

    def latest_start(self, signal: str) -> datetime | None:
        """The latest ``earliest`` bound of the kept hits of ``signal`` (None when no hit has one)."""
        hs = self.tallies.get(signal, [])
        known = self._latest.get(signal)
        if known is None or known[0] is not hs or known[1] != len(hs):
            known = self._latest[signal] = (
                hs,
                len(hs),
                max((t for t in (h.earliest for h in hs) if t is not None), default=None),
            )
        return known[2]

    def steps_after(self, when: datetime) -> int:
        """How many distinct training steps the timed progress lines report after ``when`` (any rank)."""
        hs = self.tallies.get("progress", [])
        if self._steps is None or self._steps[0] != len(hs):
            timed = sorted(
                (h.earliest, n) for h in hs if h.earliest is not None and (n := step_number(h.text)) is not None
            )
            seen: set[int] = set()
            suffix = [0] * len(timed)
            for i in range(len(timed) - 1, -1, -1):
                seen.add(timed[i][1])
                suffix[i] = len(seen)
            self._steps = (len(hs), [t for t, _ in timed], suffix)
        _n, times, suffix = self._steps
        i = bisect_right(times, when)
        return suffix[i] if i < len(suffix) else 0

    def files_of_rank(self, rank: int) -> list[str]:
        files = self.job.inventory.files
        if self._rank_files is None or self._rank_files[0] != len(files):
            index: dict[int, list[str]] = defaultdict(list)
            for f in files:
                for r in f.ranks:
                    index[r].append(f.rel)
            self._rank_files = (len(files), dict(index))
        return list(self._rank_files[1].get(rank, ()))

    def node_of_rank(self, rank: int) -> str | None:
        """The host of ``rank`` (NCCL init line), else the host slurmstepd names in its file, else the file's node."""
        if rank in self.rank_host:
            return self.rank_host[rank]
        files = self.files_of_rank(rank)
        f = self.job.inventory.file_named(files[0]) if files else None
        return self.file_host.get(f.rel, f.node) if f is not None else None

    def ranks_of_file(self, rel: str) -> set[int]:
        return self.job.inventory.ranks_of_file(rel)


# ---------------------------------------------------------------------------------------------------------------------
# Gathering the worker evidence


def worker_patterns() -> tuple[str, ...]:
    """The patterns of the one evidence scan: :data:`SIGNALS`, the NCCL needles, the alignment's anchors."""
    return tuple(s.regex for s in SIGNALS) + NCCL_PATTERNS + ALIGNMENT_PATTERNS


def evidence_consumer(keep: LineKeep | None = None) -> Consumer:
    """The evidence scan as a consumer of the shared job scan (progress and memory lines are dense: sampled, with
    every rank's first and last ones, never one Python call per step line); ``keep`` restricts its sink to some
    lines (one attempt's)."""
    factory: Any = EvidenceSink if keep is None else functools.partial(kept_sink, keep, EvidenceSink)
    dense = [i for i, s in enumerate(SIGNALS) if s.dense]
    return consumer_for(worker_patterns(), factory, dense=dense, refine=_refine)


def job_scan_consumers() -> tuple[Consumer, Consumer]:
    """The consumers of :func:`gather_evidence`'s scan of a job: the evidence's and the launcher facts'."""
    return evidence_consumer(), attempts_mod.launcher_consumer()


def scan_worker_logs(logs_dir: Path, keep: LineKeep | None = None) -> JobScan:
    """The one scan of every worker log under ``logs_dir`` the evidence is built from (:func:`worker_patterns`, one
    :class:`EvidenceSink` per file), shared with the other tools' questions through the scan cache; ``keep``
    restricts it to some lines (one attempt's)."""
    c = evidence_consumer(keep)
    return scan_consumers(logs_dir, [c])[c.key]


FileItems = tuple[Any, Any, Any, Any]
"""One file's evidence items the fold reads: (digest, raw tallies when there is no digest, clock facts, series); all
None for a file whose sink found nothing."""

EARLY_ITEMS_FILES = 256
"""How many files' :data:`FileItems` :func:`gather_evidence` unpacks as they arrive (while the scan's workers read the
others); the rest are unpacked by the fold after the scan. Bounds what is held meanwhile (~55 KB per 8-rank file)."""


def file_items(fr: FileResult) -> FileItems:
    """The :data:`FileItems` of one file's evidence result, unpacked."""
    digest = file_result_item(fr, 4)
    fh = file_result_item(fr, 0) if digest is None else None
    if digest is None and fh is None:
        return (None, None, None, None)
    return digest, fh, file_result_item(fr, 2), file_result_item(fr, 3)


def worker_evidence_from_scan(job: JobScan, early: dict[int, FileItems] | None = None) -> WorkerEvidence:
    """The worker evidence from a finished scan whose per-file results (``job.caller_results``) are
    :meth:`EvidenceSink.finish`'s (a composite scan may feed it: only those results and the inventory are read).
    ``early``: files' items already unpacked (:func:`file_items`, by index in the scan); each is let go as it is
    folded."""
    inv = job.inventory
    year = inv.year_hint or WORKER_FALLBACK_YEAR
    # a file of one rank: its unprefixed lines are that rank's, unless a launcher writes there too (a node's stderr
    # holding the torchrun agent's own lines and tracebacks beside one rank's)
    single_rank = {f.rel: next(iter(f.ranks)) for f in inv.files if len(f.ranks) == 1 and not f.launcher_lines}
    local_ranks = {f.rel: f.local_ranks for f in inv.files if f.local_ranks}

    # A file's hits share their time objects (a timed line is the ``after`` of the untimed ones that follow it) and a
    # raw hit is read up to three times (sample, rank's first, rank's last): each is converted once. Keyed by object
    # identity; each entry holds its object, so that no id is reused by another object while the memo lives (one
    # file: each file's result is unpacked anew).
    converted: dict[int, tuple[WallTime, datetime | None]] = {}
    made: dict[tuple[str, int], tuple[_Raw, Hit]] = {}

    def conv(wt: WallTime | None) -> datetime | None:
        if wt is None:
            return None
        known = converted.get(id(wt))
        if known is None:
            known = converted[id(wt)] = (wt, with_year(wt, year))
        return known[1]

    def hit(signal: str, rel: str, raw: _Raw) -> Hit:
        known = made.get((signal, id(raw)))
        if known is None:
            rank = rank_of(rel, raw.rank)
            h = Hit(signal, rel, raw.line, raw.text, rank, conv(raw.wt), conv(raw.after), conv(raw.before))
            known = made[(signal, id(raw))] = (raw, h)
        return known[1]

    def rank_of(rel: str, r: int | None) -> int | None:
        """A line's rank as the job sees it: its own, else its file's only rank; a torchrun --tee local rank
        (encoded ``-(L + 1)``) through the file's local-to-global map."""
        if r is None:
            return single_rank.get(rel)
        if r < 0:
            return local_ranks.get(rel, {}).get(-r - 1, single_rank.get(rel))
        return r

    kept: dict[str, list[Hit]] = {}
    """Per signal: the kept hits, file by file; one per line (a file's digest keeps a line's first hit only, and the
    first raw hit of a line is kept below): sorted once all are in."""
    counts: dict[str, int] = defaultdict(int)
    counts_by_rank: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    first_by_rank: dict[str, dict[int, Hit]] = defaultdict(dict)
    last_by_rank: dict[str, dict[int, Hit]] = defaultdict(dict)

    def fold_counts(name: str, rel: str, by_rank: dict[int | None, int]) -> None:
        """One file's counts per rank of signal ``name`` into the job's."""
        per_rank = counts_by_rank[name]
        if None not in by_rank and per_rank.keys().isdisjoint(by_rank) and _all_global(by_rank):
            # (ranks no other file had, all global: most files)
            per_rank.update(by_rank)  # type: ignore[arg-type]
            return
        for r, n in by_rank.items():
            rr = rank_of(rel, r)
            if rr is not None:
                per_rank[rr] += n

    def fold_digest(name: str, rel: str, sd: _SignalDigest, hits: list[Hit]) -> None:
        """One file's digest of signal ``name`` (``hits``: its hits as the job sees them) into the job's firsts,
        lasts and counts per rank."""
        first, last = sd.first, sd.last
        job_firsts, job_lasts = first_by_rank[name], last_by_rank[name]
        # Ranks no other file had (most files): their hits go in as they are, in the same order the loop of
        # fold_ranks would put them (a key is a hit's own rank: only a line without one takes the file's rank)
        if (
            None not in first
            and None not in last
            and job_firsts.keys().isdisjoint(first)
            and job_lasts.keys().isdisjoint(last)
            and _all_global(first)
        ):
            job_firsts.update(zip(first, map(hits.__getitem__, first.values()), strict=True))  # type: ignore[arg-type]
            job_lasts.update(zip(last, map(hits.__getitem__, last.values()), strict=True))  # type: ignore[arg-type]
            fold_counts(name, rel, sd.count_by_rank)
            return
        fold_ranks(
            name,
            rel,
            (hits[i] for i in first.values()),
            (hits[i] for i in last.values()),
            sd.count_by_rank,
        )

    def fold_ranks(
        name: str, rel: str, firsts: Iterable[Hit], lasts: Iterable[Hit], by_rank: dict[int | None, int]
    ) -> None:
        """One file's first and last hits and counts per rank of signal ``name`` into the job's."""
        job_firsts, job_lasts = first_by_rank[name], last_by_rank[name]
        for h in firsts:
            r = h.rank
            if r is not None:
                prev = job_firsts.get(r)
                if prev is None or _order_key(h) < _order_key(prev):
                    job_firsts[r] = h
        for h in lasts:
            r = h.rank
            if r is not None:
                prev = job_lasts.get(r)
                if prev is None or _order_key(prev) < _order_key(h):
                    job_lasts[r] = h
        fold_counts(name, rel, by_rank)

    clock_facts: list[tuple[str, WorkerClockFacts]] = []
    series: dict[str, dict[int, _SeriesBuilder]] = {"step": {}, "memory": {}}
    hosts: dict[int, tuple[int, str]] = {}
    got = early if early is not None else {}
    for j, lf in enumerate(job.log_files()):
        rel = lf.rel
        pre = got.pop(j, None)
        digest: _FileDigest | None
        if pre is not None:
            digest, fh, clock, fseries = pre
        else:
            digest = result_item(job, j, 4)
            fh = result_item(job, j, 0) if digest is None else None
        if digest is None and fh is None:
            continue
        if pre is None:
            clock, fseries = result_item(job, j, 2), result_item(job, j, 3)
        fh_hosts: dict[int, tuple[int, str]] = {}
        clock_facts.append((rel, clock))
        if digest is not None:
            for name, sd in digest.signals.items():
                counts[name] += sd.count
                hits = _job_hits(sd, digest.year, year, single_rank.get(rel), local_ranks.get(rel))
                if hits:
                    so_far = kept.get(name)
                    if so_far is None:
                        kept[name] = list(hits)
                    else:
                        so_far.extend(hits)
                fold_digest(name, rel, sd, hits)
            fh_hosts = digest.rank_host
        if fh is not None:
            fh_hosts = fh.rank_host
        converted.clear()  # one file's objects share identities; the next file's are new ones (and the memos
        made.clear()  # must not hold every file's objects at once)
        for name, t in fh.tallies.items() if fh is not None else ():
            counts[name] += t.count
            raws = [*t.samples, *t.first_by_rank.values(), *t.last_by_rank.values()]
            if raws:
                here: dict[int, Hit] = {}
                for raw in raws:
                    if raw.line not in here:  # the first raw hit of a line is kept
                        here[raw.line] = hit(name, rel, raw)
                kept.setdefault(name, []).extend(here.values())
            fold_ranks(
                name,
                rel,
                (hit(name, rel, raw) for raw in t.first_by_rank.values()),
                (hit(name, rel, raw) for raw in t.last_by_rank.values()),
                t.count_by_rank,
            )
        for key in ("step", "memory"):
            per_rank = series[key]
            for r, arrays in fseries.arrays.get(key, {}).items():
                rr = rank_of(rel, r)
                if rr is not None:
                    b = per_rank.get(rr)
                    if b is None:
                        per_rank[rr] = _SeriesBuilder.of_arrays(rel, *arrays)
                    else:
                        b.add_arrays(rel, *arrays)
            for r, points in fseries.raw.get(key, {}).items():
                rr = rank_of(rel, r)
                if rr is not None:
                    b = per_rank.get(rr)
                    if b is None:
                        b = per_rank[rr] = _SeriesBuilder()
                    b.add(rel, points, year)
        for r, (n, host) in fh_hosts.items():
            if n >= hosts.get(r, (0, ""))[0]:
                hosts[r] = (n, host)
    return WorkerEvidence(
        root=job.root,
        job=job,
        year=year,
        tallies={name: sorted(k, key=_order_key) for name, k in kept.items()},
        counts=dict(counts),
        counts_by_rank={k: dict(v) for k, v in counts_by_rank.items()},
        first_by_rank=dict(first_by_rank),
        last_by_rank=dict(last_by_rank),
        nccl_files=PerFile(job, FileEvents, 1),
        clock=WorkerClock(inv, clock_facts, job.coverage()),
        step_ms={r: b.points() for r, b in series["step"].items()},
        memory_mb={r: b.points() for r, b in series["memory"].items()},
        file_end=_file_ends(job, single_rank, conv),
        rank_host={r: h for r, (n, h) in hosts.items() if inv.world_size is None or n == inv.world_size},
        file_host=_slurmstepd_hosts(kept.get("slurm_cancel", [])),
    )


_EPOCH = datetime(1970, 1, 1)
_US = timedelta(microseconds=1)
_NO_TIME = -(2**63)


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


_STEPD_HOST = re.compile(r"slurmstepd: error: \*\*\* (?:STEP|JOB) \S+ ON (\S+) ")


def _slurmstepd_hosts(hits: Iterable[Hit]) -> dict[str, str]:
    """File -> the one host its slurmstepd lines name (slurmstepd writes into the output of its own node)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for h in hits:
        m = _STEPD_HOST.search(h.text)
        if m:
            seen[h.file].add(m.group(1))
    return {f: next(iter(hosts)) for f, hosts in seen.items() if len(hosts) == 1}


def _file_ends(
    job: JobScan, single_rank: dict[str, int], conv: Callable[[WallTime | None], datetime | None]
) -> dict[str, Hit]:
    out: dict[str, Hit] = {}
    for f in job.inventory.files:  # the inventory found each file's last timed line in its tail
        if f.last_timed is not None:
            line, text, wt = f.last_timed
            out[f.rel] = Hit("end", f.rel, line, text, single_rank.get(f.rel), conv(wt))
    return out


def _order_key(h: Hit) -> tuple[datetime, str, int]:
    return (h.time or h.after or h.before or datetime.max, h.file, h.line)  # (Hit.when, inline: sorts call it often)


# ---------------------------------------------------------------------------------------------------------------------
# The NCCL state: analysis.nccl_table's rows and classification, with times as datetimes


def _table_time(text: str | None, year: int) -> datetime | None:
    if not text:
        return None
    if len(text) == 14 and text[2] == "-" and text[5] == " ":  # "MM-DD HH:MM:SS": no line stated the year
        text = f"{year:04d}-{text[:5]}T{text[6:]}"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


EarlyNccl = tuple[FileEvents, FilePrep]
"""One file's NCCL lines unpacked as it arrived, and the table's share of them (``nccl_table.FilePrep``)."""


def nccl_state(worker: WorkerEvidence, early: dict[int, EarlyNccl] | None = None) -> NcclState:
    """The job's NCCL state table (``nccl_table.build_table`` over the evidence scan's NCCL lines); ``early``: files'
    NCCL lines already unpacked and prepared (by index in the scan), the others are unpacked here."""
    # unpacked once for the table's several passes, let go when the state is built
    got = early or {}
    lazy = worker.nccl_files
    pre = [got.get(j) for j in range(len(lazy))]
    files = [p[0] if p is not None else lazy[j] for j, p in enumerate(pre)]
    table = build_table(
        files,
        worker.job.inventory,
        worker.coverage,
        limit=1 << 30,
        prepared=[p[1] if p is not None else None for p in pre],
    )
    year = worker.year
    cited: dict[str, set[int]] = defaultdict(set)  # the lines the rows cite, by file
    for row in table.rows:
        cited[row.file or ""].add(row.line or 0)
    texts: dict[str, dict[int, str]] = {}  # file -> line -> text, of the cited lines
    for fe in files:
        lines = cited.get(fe.rel)
        if lines:
            texts[fe.rel] = {h.line: h.text for h in fe.hits if h.line in lines}
    times: dict[str | None, datetime | None] = {}  # the rows cite a few distinct seconds: each parsed once

    def table_time(text: str | None) -> datetime | None:
        if text not in times:
            times[text] = _table_time(text, year)
        return times[text]

    rows = [
        NcclRow(
            rank=r.rank,
            pg=r.pg if r.pg is not None else "?",
            pg_desc=r.pg_desc,
            seq=r.seq,
            op_type=r.op_type,
            timeout_ms=r.timeout_ms,
            ran_for_ms=r.ran_for_ms,
            last_enqueued=r.last_enqueued,
            last_completed=r.last_completed,
            signal=r.signal,
            first_to_dump=r.signalled_dump,  # the local "First PG on this rank to signal dumping" line
            dump_signal_from_rank=r.dump_signal_from_rank,
            timeout_time=table_time(r.timeout_time),
            collective_start_time=table_time(r.collective_start_time),
            file=r.file or "",
            line=r.line or 0,
            text=texts.get(r.file or "", {}).get(r.line or 0, ""),
        )
        for r in table.rows
    ]
    groups = []
    by_pg: dict[str, list[NcclRow]] = defaultdict(list)
    for r in rows:
        by_pg[r.pg].append(r)
    for p in table.process_groups:
        key = p.pg if p.pg is not None else "?"
        mine = by_pg.get(key, [])
        root_ahead = p.classification == "root_ahead" and bool(p.ahead_ranks)
        groups.append(
            ProcessGroupState(
                pg=key,
                desc=p.pg_desc,
                classification=p.classification,
                reason=p.reason,
                ranks=parse_ranges(p.ranks),
                straggler_ranks=set(p.straggler_ranks),
                reasons={int(k): v for k, v in p.straggler_reasons.items()},
                detected_ranks={r.rank for r in mine if r.signal == "detected"},
                observed_ranks={r.rank for r in mine if r.signal == "observed"},
                first_to_dump_ranks={r.rank for r in mine if r.first_to_dump},
                dump_signal_senders={r.dump_signal_from_rank for r in mine if r.dump_signal_from_rank is not None},
                suspect_ranks=set(p.suspect_ranks),
                root_rank=p.ahead_ranks[0] if root_ahead else None,
                root_gap=p.ahead_by if root_ahead else None,
            )
        )
    timed_out = any(r.signal == "detected" for r in rows)
    waiting = {r.rank for r in rows if (r.pending or 0) > 0}
    return NcclState(
        table=table,
        rows=rows,
        groups=groups,
        ranks_without_state=parse_ranges(table.ranks_without_nccl_state) if timed_out else set(),
        job_stragglers={r for r in table.straggler_ranks if r not in waiting},
        exited_with_error=_exited_with_error(table),
        other_events=_other_events(worker, files),
    )


_EXIT_CODE = re.compile(r"^exitcode (\d+)$")


def _exited_with_error(table: NcclTable) -> set[int]:
    """Ranks whose ChildFailedError row says ``exitcode N`` with N > 0 (not a signal)."""
    out: set[int] = set()
    for f in table.rank_facts:
        m = _EXIT_CODE.match(f.detail) if f.kind == "exit_signal" else None
        if m and int(m.group(1)) > 0:
            out |= parse_ranges(f.ranks)
    return out


_OTHER_EVENTS_READ = (tn.HeartbeatKill,)
"""The kinds of :attr:`NcclState.other_events` kept: only the ones something reads (the heartbeat monitor's kill is a
trigger); add a kind here to read it."""


def _other_events(worker: WorkerEvidence, files: Iterable[FileEvents]) -> list[NcclEvent]:
    out = []
    times: dict[tuple[int, int, str], datetime | None] = {}  # the lines of one second share their time
    for fe in files:
        ranks = worker.ranks_of_file(fe.rel)
        single = next(iter(ranks)) if len(ranks) == 1 else None
        for h in fe.hits:
            if not isinstance(h.event, _OTHER_EVENTS_READ):
                continue
            wt = tn.wall_time(h.header)
            when = None
            if wt is not None:
                if wt not in times:
                    month, day, hms = wt
                    times[wt] = _table_time(f"{month:02d}-{day:02d} {hms}", worker.year)
                when = times[wt]
            out.append(NcclEvent(h.rank if h.rank is not None else single, fe.rel, h.line, h.text, when, h.event))
    return out


# ---------------------------------------------------------------------------------------------------------------------
# AIS evidence: the file index, counter spikes, notable error lines (analysis.ais_deltas), and the clock alignment


def aligned_for(al: Alignment | None, daemon: str) -> bool:
    """True when the alignment is verified and applies to ``daemon``'s clock."""
    if al is None or not al.verified or al.offset_hours is None:
        return False
    d = next((x for x in al.daemons if x.daemon == daemon), None)
    return d is not None and d.verified and d.offset_hours == al.offset_hours


def ais_to_worker(al: Alignment | None, t: datetime | None) -> datetime | None:
    """An AIS-clock time on the worker clock (None unless the offset is verified)."""
    if t is None or al is None or not al.verified or al.offset_hours is None:
        return None
    return t + timedelta(hours=al.offset_hours)


@dataclass(repr=False, eq=False)
class AisEvidence:
    """What the AIS daemon logs show (one ``ais_deltas.collect`` pass) and how their clock relates to the workers'."""

    root: Path
    index: AisIndex
    spikes: list[Spike]
    notable: list[NotableLines]
    """W/E line groups per daemon and named pattern, each event once (INFO and ERROR copies merged)."""
    get_stops: list[GetStop]
    restarts: list[Restart]
    alignment: Alignment
    """``analysis.alignment.align`` over the same scans (``offset_hours`` = worker clock minus AIS clock)."""

    @property
    def alignment_problem(self) -> str:
        """Why the AIS and worker clocks cannot be related (empty when the offset is verified)."""
        if self.alignment.verified:
            return ""
        return self.alignment.summary

    def daemon_of(self, ref: str) -> str | None:
        d = self.index.daemon_of(ref)
        return d.key if d is not None else None

    def daemon(self, key: str) -> AisDaemon | None:
        return next((d for d in self.index.daemons if d.key == key), None)

    def incident_lines(self) -> list[NotableLines]:
        """Notable line groups that are not noise, oldest first."""
        return sorted((n for n in self.notable if not n.noise), key=lambda n: (n.first or datetime.max, n.daemon))


@dataclass(repr=False, eq=False)
class AisOwn:
    """What the AIS evidence takes from the AIS logs alone (no worker fact): it can be read before the worker
    evidence exists (:func:`gather_evidence` reads it while the worker scan's processes read the worker logs)."""

    collection: AisCollection
    spikes: list[Spike]
    notable: list[NotableLines]
    get_stops: list[GetStop]
    restarts: list[Restart]


def ais_own(ais_dir: Path) -> AisOwn:
    """One pass over the AIS logs (index, stats deltas, W/E lines) and what follows from them alone."""
    from debug_training_logs.analysis.ais_deltas import (
        DEFAULT_COUNTERS,
        IntervalDelta,
        collect,
        find_restarts,
        find_spikes,
        get_stops,
        interval_deltas,
        notable_lines,
    )

    collection = collect(ais_dir)
    intervals: list[IntervalDelta] = []
    restarts: list[Restart] = []
    stops: list[GetStop] = []
    for d in collection.index.daemons:
        series = collection.points.get(d.key, [])
        intervals += interval_deltas(d.key, series, DEFAULT_COUNTERS)
        restarts += find_restarts(d, series)
        if d.role == "target":
            stops += get_stops(d, series)
    return AisOwn(
        collection=collection,
        spikes=find_spikes(intervals, DEFAULT_COUNTERS),
        notable=notable_lines(collection),
        get_stops=sorted(stops, key=lambda g: g.last_increase_at),
        restarts=restarts,
    )


def gather_ais_evidence(
    ais_dir: Path, worker: WorkerEvidence, nccl: NcclState, own: AisOwn | None = None
) -> AisEvidence:
    """The AIS logs' own evidence (:func:`ais_own`, or ``own`` when it was read already), then the clock alignment
    from the scans made."""
    if own is None:
        own = ais_own(ais_dir)
    collection = own.collection
    # the alignment's error onsets read the spikes ais_own found per daemon of the index: the same as found again per
    # daemon of the stats series (a daemon's spikes depend on its own series alone) when those are the index's
    with_stats = set(collection.points) <= {d.key for d in collection.index.daemons}
    alignment = align(
        worker.root,
        ais_dir,
        worker=worker.clock,
        table=nccl.table,
        collection=collection,
        spikes=own.spikes if with_stats else None,
    )
    return AisEvidence(
        root=collection.index.root,
        index=collection.index,
        spikes=own.spikes,
        notable=own.notable,
        get_stops=own.get_stops,
        restarts=own.restarts,
        alignment=alignment,
    )


# ---------------------------------------------------------------------------------------------------------------------
# All the evidence


@dataclass(repr=False, eq=False)
class JobEvidence:
    """Everything a diagnosis or a verification rests on: worker evidence, NCCL state, AIS evidence."""

    worker: WorkerEvidence
    nccl: NcclState
    ais: AisEvidence | None
    step_jumps: list[SeriesJump]
    """Ranks whose step time jumped (throughput collapse)."""
    memory_creep: list[SeriesJump]
    """Ranks whose allocated GPU memory kept growing."""
    cache: dict[str, Any] = field(default_factory=dict)
    """Derived results computed once per evidence (triggers, rank states), shared by the verdict and the verifier."""
    launcher: launcher_scan.LauncherFacts | None = None
    """Per-rank fates from torchrun/elastic, gloo and DETAIL lines (exit codes, signals, victims, mismatches)."""
    flight_recorder: fr_dumps.FlightRecorderFacts | None = None
    """The flight-recorder dumps found in/next to the logs (or in ``fr_dir``), read safely and compared."""
    attempts: attempts_mod.Attempts | None = None
    """The job's attempts (elastic restarts, requeues); the evidence is about :attr:`attempt` when there are several."""
    attempt: int | None = None
    """The attempt this evidence covers (None: the job had one attempt, or the whole logs were read)."""
    given_world_size: int | None = None
    """The world size the caller gave (it replaced what the logs say in the coverage), or None."""
    hang: hang_facts.HangFacts | None = None
    """What was collected during a live hang (stack dumps, NCCL RAS, node telemetry), None when nothing was."""

    @property
    def missing_ranks(self) -> set[int]:
        """Ranks of the world nothing was read of: no log file, and no stack dump saw them either (a rank whose
        stack was dumped during the hang is known where it stood, whichever file its log lines went to)."""
        missing = self.worker.missing_ranks
        if self.hang is not None and missing:
            return set(missing) - self.hang.dumped_ranks
        return set(missing)

    def launcher_events(self) -> list[LauncherEvent]:
        """The launcher's per-rank exits as :func:`rank_states` reads them (from :attr:`launcher`'s fates)."""
        if self.launcher is None:
            return []
        out = []
        for f in self.launcher.fates.values():
            if f.torn_down:
                kind = "sigterm_sent"
            elif f.exitcode is None:
                continue
            elif f.exitcode > 0:
                kind = "exit"
            elif f.signal in OWN_SIGNALS:
                kind = "signal"
            else:  # SIGABRT from NCCL's watchdog, SIGTERM from the agent or SLURM: not the rank's own failure
                kind = "stopped"
            cite = f.exit_evidence
            event = LauncherEvent(f.rank, kind, f.exitcode, f.signal)
            if cite is not None:
                event.file, event.line, event.text = cite.file, cite.line, cite.text
            out.append(event)
        return out

    @property
    def coverage(self) -> Coverage:
        from debug_training_logs.analysis import fr_verdict

        if fr_verdict.dumps_alone(self):  # dumps and no worker log: the dumps' world and ranks
            assert self.flight_recorder is not None
            return fr_verdict.dump_coverage(self.flight_recorder, self.worker.coverage)
        return self.worker.coverage


def gather_evidence(
    logs_dir: Path,
    ais_dir: Path | None = None,
    fr_dir: Path | None = None,
    attempt: int | None = None,
    world_size: int | None = None,
    hang_dir: Path | None = None,
) -> JobEvidence:
    """The evidence of a job: one scan of the worker logs (the evidence patterns and the launcher's together), the
    NCCL table, and one pass over the AIS logs if given.

    ``attempt``: which attempt of a restarted job (:mod:`~debug_training_logs.analysis.attempts`) the evidence is
    about; default the first failed one when there are several. An attempt number the logs do not have is a
    :class:`~debug_training_logs.errors.UserInputError`. Only then is there a second pass: the evidence sinks
    aggregate per file as they read, so they must see only that attempt's lines; the launcher facts of the attempt
    are derived from the first pass by line (:func:`~debug_training_logs.analysis.launcher.for_attempt`).

    ``world_size``: the job's world size as the caller knows it (the launch command), for logs that do not state it;
    it replaces what the logs say, and the coverage evidence says both."""
    ec, lc = job_scan_consumers()
    early: dict[int, EarlyNccl] = {}

    items: dict[int, FileItems] = {}
    launch: dict[int, launcher_scan.EarlyResult] = {}

    def arrived(j: int, results: dict[str, FileResult]) -> None:
        # the NCCL table's input, the fold's items and the launcher's results, unpacked while the scan's workers read
        # the other files (the main process waits for them there): nccl_state, the fold and from_job_scan later find
        # them unpacked
        fr = results.get(ec.key)
        fe = file_result_item(fr, 1) if fr is not None else None
        if isinstance(fe, FileEvents):
            early[j] = (fe, FilePrep(fe))
        if fr is not None and len(items) < EARLY_ITEMS_FILES:
            items[j] = file_items(fr)
        lr = results.get(lc.key)
        if lr is not None and len(launch) < EARLY_ITEMS_FILES:  # bounded too (~20 KB per 8-rank file)
            launch[j] = launcher_scan.early_result(lr)

    # the AIS logs' own evidence, read while the worker scan's processes read the worker logs (the main process only
    # waits for them there); read after the scan instead when it fails there or no worker file is read
    ais: list[AisOwn] = []

    def read_ais() -> None:
        assert ais_dir is not None
        with suppress(Exception):  # the same failure is met, and reported, where it is read again
            ais.append(ais_own(ais_dir))

    dumps: list[fr_dumps.FlightRecorderFacts] = []

    def read_dumps() -> None:  # the flight-recorder dumps too (next to the logs or in ``fr_dir``)
        with suppress(Exception):
            dumps.append(_dumps(Path(logs_dir).resolve(), fr_dir))

    with meanwhile.queued(read_ais if ais_dir is not None else None), meanwhile.queued(read_dumps):
        jobs = scan_consumers(logs_dir, [ec, lc], on_file=arrived)
    whole = launcher_scan.from_job_scan(jobs[lc.key], launch)
    split = attempts_mod.split(logs_dir, files=jobs[lc.key].log_files(), launcher_facts=whole)
    chosen = split.choose(attempt)
    own = ais[0] if ais else None
    fr = dumps[0] if dumps else None
    if chosen is None:
        ev = evidence_from_scan(
            given_world_size(jobs[ec.key], world_size),
            ais_dir,
            fr_dir,
            whole,
            early_nccl=early,
            ais_own=own,
            fr=fr,
            early_items=items,
        )
    else:
        early.clear()
        items.clear()
        keep = split.keeper(chosen)
        facts = launcher_scan.for_attempt(jobs[lc.key], keep)
        progress.report(1, 1, f"attempt {chosen} of {split.count}: a second pass keeps only its lines")
        if facts is None:  # more launcher hits in a file than remembered: that attempt's own launcher scan
            facts = attempts_mod.gather_launcher(logs_dir, keep=keep)
        job = given_world_size(scan_worker_logs(logs_dir, keep), world_size)
        ev = evidence_from_scan(job, ais_dir, fr_dir, facts, ais_own=own, fr=fr)
    ev.attempts = split
    ev.attempt = chosen if split.count > 1 else None
    ev.given_world_size = world_size
    from debug_training_logs.analysis.hang_facts import of_job  # the stack and telemetry readers: only now

    ev.hang = of_job(jobs[ec.key], hang_dir)
    return ev


def evidence_from_scan(
    job: JobScan,
    ais_dir: Path | None = None,
    fr_dir: Path | None = None,
    launcher_facts: launcher_scan.LauncherFacts | None = None,
    early_nccl: dict[int, EarlyNccl] | None = None,
    ais_own: AisOwn | None = None,
    fr: fr_dumps.FlightRecorderFacts | None = None,
    early_items: dict[int, FileItems] | None = None,
) -> JobEvidence:
    """The evidence of a job from the shared worker scan (:func:`scan_worker_logs`' result) plus the AIS pass, the
    launcher facts (``launcher_facts``, default from the shared scan: a cache hit when the launcher consumer was
    scanned along) and the flight-recorder dumps. ``early_nccl``: files' NCCL lines already unpacked (see
    :func:`nccl_state`); the dict is emptied once the table is built. ``ais_own``: the AIS logs' own evidence of
    ``ais_dir`` when it was read already (:func:`ais_own`); ``fr``: the flight-recorder dumps' facts when they were
    read already; ``early_items``: files' evidence items already unpacked (see :func:`worker_evidence_from_scan`)."""
    worker = worker_evidence_from_scan(job, early_items)
    nccl = nccl_state(worker, early_nccl)
    if early_nccl is not None:
        early_nccl.clear()
    ais = gather_ais_evidence(ais_dir, worker, nccl, ais_own) if ais_dir is not None else None
    return JobEvidence(
        worker=worker,
        nccl=nccl,
        ais=ais,
        step_jumps=series_jumps(worker.step_ms, STEP_JUMP_FACTOR),
        memory_creep=memory_creep(worker.memory_mb),
        launcher=launcher_facts
        if launcher_facts is not None
        else attempts_mod.gather_launcher(job.root, files=job.log_files())
        if job.files
        else None,
        flight_recorder=fr if fr is not None else _dumps(job.root, fr_dir),
    )


def _dumps(root: Path, fr_dir: Path | None) -> fr_dumps.FlightRecorderFacts:
    from debug_training_logs.analysis import fr_dumps

    return fr_dumps.gather(root, fr_dir)


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


def refine_times(ev: WorkerEvidence, hits: Sequence[Hit]) -> list[Hit]:
    """``hits`` with the time bounds of untimed lines narrowed to the nearest timed lines of their file (one read of
    each file involved, up to the last line asked for)."""
    wanted: dict[str, set[int]] = defaultdict(set)
    for h in hits:
        if h.time is None:
            wanted[h.file].add(h.line)
    if not wanted:
        return list(hits)
    found = read_lines(ev.root, wanted, ev.year)
    out: list[Hit] = []
    for h in hits:
        at = found.get((h.file, h.line))
        if h.time is None and at is not None and at.text is not None:
            after = max((t for t in (h.after, at.after) if t is not None), default=None)
            before = min((t for t in (h.before, at.before) if t is not None), default=None)
            h = Hit(h.signal, h.file, h.line, h.text, h.rank, None, after, before)
        out.append(h)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Candidate root-cause events, the first symptom, and the lines that rule out a clean run (shared by diagnose and
# every verifier rule)

CLOCK_SLACK = timedelta(seconds=2)
"""Worker lines have one-second resolution and ranks enter a collective a little apart: orderings within this are
treated as simultaneous."""

CONSEQUENCE_MARKERS: tuple[str, ...] = (
    "ChildFailedError",
    "ProcessRaisedException",
    "ProcessExitedException",
    "DistBackendError",
    "Watchdog caught",
    "watchdog thread terminated",
    "ProcessGroupNCCL",
    "SignalException",
    "RayTaskError",
    "NCCL",
    "TCPStore",
    "Rendezvous",
    "DistNetworkError",
    "DistStoreError",
    "third_party/gloo",
    "Gloo ",
    "remote worker crash",
    # gloo: what a rank raises when a peer died, hung or disagreed (formats.gloo)
    "Timed out waiting",
    "Connection closed by peer",
    "connectFullMesh failed",
    "Detected mismatch between collectives",
    "gloo/transport",
)
"""Exception lines that are the consequence of another rank's failure (the watchdog abort, torchrun's summary, a
peer's NCCL error), never a root cause on their own."""


@dataclass(frozen=True, repr=False, eq=False)
class Trigger:
    """A candidate root-cause event on one rank."""

    category: str
    """``cuda_oom``, ``cuda_error``, ``rank_crash``, ``watchdog_hang`` or ``data`` (a data-loading/storage error)."""
    hit: Hit
    what: str
    """A few words for people: ``CUDA out of memory``, ``NaN loss``, ``port already in use``..."""


@dataclass(repr=False)
class KeyEvent:
    """An event of the timeline / causal chain."""

    event: str
    file: str
    line: int
    text: str
    ranks: set[int] = field(default_factory=set)
    time: datetime | None = None
    """Worker clock, when known exactly (AIS events converted through a verified alignment)."""
    earliest: datetime | None = None
    """For a line without a time: the time of the nearest earlier timed line (worker clock)."""
    latest: datetime | None = None
    """For a line without a time: the time of the nearest later timed line (worker clock)."""
    ais_time: datetime | None = None
    """AIS events: the daemon's own clock."""
    daemon: str | None = None
    kind: str = "worker"
    """``worker`` or ``ais``."""
    derived: bool = False
    """The time is computed (a collective's start = timeout time - how long it ran), not the cited line's own."""

    @property
    def sort_time(self) -> datetime | None:
        """The time to order by: exact, else the lower bound, else the upper bound."""
        return self.time or self.earliest or self.latest

    def cite(self) -> Evidence:
        from debug_training_logs.models import Evidence

        return Evidence(file=self.file, line=self.line, text=self.text)


def hit_event(h: Hit, event: str, ranks: Iterable[int] | None = None) -> KeyEvent:
    rk = set(ranks) if ranks is not None else ({h.rank} if h.rank is not None else set())
    if h.time is not None:
        return KeyEvent(event, h.file, h.line, h.text, rk, h.time)
    return KeyEvent(event, h.file, h.line, h.text, rk, None, h.after, h.before)


_WARNING_LEVEL = re.compile(
    r"^(?:\[?[\d\-/:,. T]+\]?\s*(?:[-|]\s*)?)?(?:[a-z][\w.]*\s*[-|]\s*)?\[?WARN(?:ING)?\]?(?:[:\s]|$)"
    r"|^\[NeMo W |^\[?W\d{3,4} \d\d:\d\d|^Warning: "
)
"""A warning's log level where loggers put it (``WARNING:name:``, ``<time> - name - WARNING -``, ``[NeMo W``, glog
``W0521``): at the start of what the process wrote, never inside an exception's message."""
_RETRY_LINE = re.compile(
    r"Retrying \(Retry\(|Retrying \S+ in [\d.]+ seconds|[Rr]etrying \d+/\d+|[Rr]etry \d+/\d+|[Rr]etrying after"
    r"|\bwarnings\.warn\("
)
"""A retry (urllib3, tenacity, loaders' own 'retrying N/M'): the request was tried again, the process went on."""


def is_warning(text: str) -> bool:
    """True for a warning/retry line (``WARNING:urllib3...Retrying (...ConnectionResetError...)``): an exception
    name inside it is not a crash."""
    own = strip_rank_prefix(text)
    return _WARNING_LEVEL.search(own) is not None or _RETRY_LINE.search(own) is not None


def is_consequence(text: str) -> bool:
    """True for an exception line caused by another failure (watchdog abort, torchrun summary, peer NCCL error)."""
    return any(m in text for m in CONSEQUENCE_MARKERS)


_EXC_NAME = re.compile(
    r"((?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Timeout|Interrupt)|StopIteration|SystemExit))(?::|$)"
)


def _matches(signal: str, text: str) -> bool:
    rx = _SIGNAL_RX[signal]
    return rx.search(text) is not None


_SIGNAL_RX = {s.name: re.compile(s.regex) for s in SIGNALS}


def triggers(ev: JobEvidence) -> list[Trigger]:
    """Every rank's first candidate root-cause event of each kind, with refined times, oldest first (computed once
    per evidence: the verdict and the verifier share it)."""
    cached = ev.cache.get("triggers")
    if cached is None:
        cached = ev.cache["triggers"] = _triggers(ev)
    return list(cached)


def _triggers(ev: JobEvidence) -> list[Trigger]:
    w = ev.worker
    firsts: list[tuple[str, Hit]] = []
    for signal in ("cuda_oom", "cuda_error", "xid", "address_in_use", "nan", "exception", "data_error"):
        firsts += [(signal, h) for h in w.first_by_rank.get(signal, {}).values()]
        if signal == "exception":  # a rank's first and last own exceptions (not a consequence, not a warning)
            own: dict[int, list[Hit]] = defaultdict(list)
            for h in w.hits(signal):
                line = h.text
                if h.rank is not None and not (is_consequence(line) or is_warning(line) or is_source_line(line)):
                    own[h.rank].append(h)
            firsts += [(signal, h) for hs in own.values() for h in {hs[0], hs[-1]}]
        firsts += [(signal, h) for h in w.hits(signal) if h.rank is None][:20]
    firsts = list(dict.fromkeys(firsts))
    out: list[Trigger] = []
    refined = refine_times(w, [h for _, h in firsts])
    for (signal, _), h in zip(firsts, refined, strict=True):
        t = trigger_of(signal, h)
        if t is not None:
            out.append(t)
    first = ev.nccl.first_timeout()
    timed_out_at = first.timeout_time if first is not None else None
    for e in ev.nccl.other_events:
        if isinstance(e.event, tn.HeartbeatKill) and e.rank is not None:
            if timed_out_at is not None and e.time is not None and e.time > timed_out_at + CLOCK_SLACK:
                continue  # the watchdog stuck while dumping or aborting after a collective timed out: a consequence
            h = Hit("heartbeat", e.file, e.line, e.text, e.rank, e.time)
            out.append(Trigger("watchdog_hang", h, "the NCCL watchdog thread hung (heartbeat monitor)"))
    return sorted(out, key=lambda t: (t.hit.earliest or datetime.max, t.hit.file, t.hit.line))


_CUDA_WHAT = re.compile(
    r"CUDA error: ([^.\n]+)|(Xid[^,]*,[^,]*)|(GPU has fallen off the bus)|(uncorrectable ECC error)"
    r"|Unable to determine the device handle for (GPU\s*[\w:.]*\w)"
)
"""The few words a CUDA/GPU failure line gives: the CUDA error, the Xid, or the GPU the driver lost."""


def trigger_of(signal: str, h: Hit) -> Trigger | None:
    """The candidate root-cause event a line of ``signal`` is (its kind and a few words), None for a consequence or
    a warning."""
    text = h.text
    if signal == "exception" and (is_consequence(text) or is_source_line(text) or DATA_LOADER_WRAPPER.search(text)):
        return None  # (a DataLoader's re-raise: the worker's original exception follows it)
    if signal in ("exception", "cuda_oom", "data_error") and is_warning(text):
        return None  # logged at warning level or retried: handled, the process went on
    if signal in ("cuda_oom",) or _matches("cuda_oom", text):
        return Trigger("cuda_oom", h, "CUDA out of memory")
    if signal in ("cuda_error", "xid") or _matches("cuda_error", text):
        m = _CUDA_WHAT.search(text)
        what = next((g for g in m.groups() if g), "CUDA error") if m else "CUDA error"
        if m is not None and m.group(5):
            what = f"{m.group(5)} lost (the driver cannot reach it)"
        return Trigger("cuda_error", h, what.strip())
    if signal == "data_error" or _matches("data_error", text) or _matches("retry_exhausted", text):
        m = _EXC_NAME.search(text) if _matches("exception", text) else None
        return Trigger("data", h, m.group(1) if m else "data loading failed")
    if signal == "address_in_use" or _matches("address_in_use", text):
        return Trigger("rank_crash", h, "address already in use (port taken)")
    if signal == "nan" or _matches("nan", text):
        return Trigger("rank_crash", h, "NaN/Inf loss")
    if signal == "exception":
        m = _EXC_NAME.search(text)
        return Trigger("rank_crash", h, m.group(1) if m else "Python exception")
    return None


def first_symptom(ev: JobEvidence) -> KeyEvent | None:
    """The first sign of the failure itself: the first watchdog timeout, else the first process killer."""
    row = ev.nccl.first_timeout()
    if row is not None and row.timeout_time is not None:
        return KeyEvent(
            f"rank {row.rank}'s NCCL watchdog fires: {row.op_type} SeqNum {row.seq} timed out after "
            f"{(row.ran_for_ms or row.timeout_ms or 0) / 60000:.0f} min",
            row.file,
            row.line,
            row.text,
            {row.rank},
            row.timeout_time,
        )
    killers = [h for s in ("child_failed", "slurm_cancel", "srun_error") for h in ev.worker.hits(s)]
    killers.sort(key=_order_key)
    return hit_event(killers[0], "the job is taken down") if killers else None


AIS_LOOKBACK = timedelta(minutes=15)
"""AIS incident lines this long before the stuck collective started (worker clock) may belong to the chain."""


_DATA_SIGNALS = ("data_error", "retry_exhausted", "io_timeout")


def data_hits(ev: JobEvidence, ranks: Iterable[int], until: datetime | None) -> list[Hit]:
    """Data-loading/storage error lines of ``ranks`` not proven to come after ``until`` (NCCL lines excluded)."""
    out: list[Hit] = []
    ranks = list(ranks)
    wanted = set(ranks)
    if len(ranks) > DATA_HITS_BY_RANK and len(wanted) == len(ranks):
        # many ranks (often all of them): one pass over each signal's hits instead of one look-up per rank and
        # signal; the same hits, and the same order once sorted (the ties, one line of several signals, come in
        # signal order either way)
        for s in _DATA_SIGNALS:
            out += [h for h in ev.worker.hits(s) if h.rank in wanted and _data_hit_before(h, until)]
        return sorted(out, key=_order_key)
    for r in ranks:
        for s in _DATA_SIGNALS:
            out += [h for h in ev.worker.hits(s, r) if _data_hit_before(h, until)]
    return sorted(out, key=_order_key)


DATA_HITS_BY_RANK = 8
"""Up to this many ranks, :func:`data_hits` looks each rank's hits up; beyond, it filters every hit once."""


def _data_hit_before(h: Hit, until: datetime | None) -> bool:
    """Whether a data signal's hit counts for :func:`data_hits`: no NCCL line, not proven to come after ``until``."""
    if "NCCL" in h.text or "ProcessGroupNCCL" in h.text:
        return False
    return until is None or h.earliest is None or not h.earliest > until


PER_STEP_COLLECTIVES = 3
"""NeMo's per-step collectives: PreemptionCallback broadcast + DDP allreduce + broadcast_buffers."""


KILLER_SIGNALS = ("cuda_oom", "cuda_error", "xid", "slurm_cancel", "slurm_oom", "child_failed", "traceback")


def killers(w: WorkerEvidence, ev: JobEvidence | None = None, *, exceptions: bool = True) -> list[Hit]:
    """Lines that show a process was killed or crashed (any of them rules out a clean run).

    With the job's evidence, an exception counts only when it is a rank's unhandled failure (not inside a warning or
    retry line, no progress of the rank after it), and a traceback alone does not count (a handled, logged one);
    without it, every exception and traceback line counts."""
    hard = KILLER_SIGNALS if ev is None else tuple(s for s in KILLER_SIGNALS if s != "traceback")
    out = [h for s in hard for h in w.hits(s) if ev is None or s != "cuda_oom" or not is_warning(h.text)]
    out += [h for h in w.hits("signal") if any(x in h.text for x in ("SIGKILL", "SIGABRT", "SIGSEGV", "SIGBUS"))]
    out += [h for h in w.hits("srun_error") if _SRUN_BAD_EXIT.search(h.text)]
    if ev is None:
        out += [h for h in w.hits("exception") if not _matches("conn_reset", h.text)]
    elif exceptions:
        out += [t.hit for ts in crash_triggers(ev).values() for t in ts if t.category != "data"]
    return sorted(set(out), key=_order_key)


_SRUN_BAD_EXIT = re.compile(r"Exited with exit code [1-9]|: Killed|: Aborted|Segmentation fault")


# ---------------------------------------------------------------------------------------------------------------------
# Per-rank states: what each rank was doing when the job ended (read by the verdict, every verifier rule, the report)

RankStateName = Literal["finished", "crashed", "watchdog_killed", "waiting", "stuck", "torn_down", "absent", "unknown"]
RANK_STATES: tuple[str, ...] = get_args(RankStateName)
"""``finished`` (the run ended normally), ``crashed`` (an exception reached the top / an error exit code / a fatal
CUDA error, and the process logged nothing alive afterwards), ``watchdog_killed`` (the NCCL heartbeat monitor killed
it), ``waiting`` (inside a collective: enqueued > completed), ``stuck`` (alive but outside the stuck collective: no
NCCL work pending, only observed the dump, or no NCCL state while the others timed out), ``torn_down`` (stopped
by its launcher because another rank failed), ``absent`` (no log file), ``unknown`` (its log says nothing of its
end)."""

TRACEBACK_SPAN_LINES = 400
"""An exception line ends a traceback of its rank when that rank's ``Traceback (most recent call last):`` line is at
most this many lines above it in the same file (frames, chained exceptions)."""


@dataclass(repr=False, eq=False)
class LauncherEvent:
    """A launcher's report about one rank's process (from :attr:`JobEvidence.launcher`'s fates). ``exit_code`` > 0 is
    an error exit, < 0 a signal number."""

    rank: int | None
    kind: str
    """``exit`` (the process exited with ``exit_code``), ``signal`` (killed by a ``signal`` that ends a rank on its
    own, :data:`~debug_training_logs.analysis.launcher_decision.OWN_SIGNALS`), ``stopped`` (SIGABRT/SIGTERM: the
    watchdog, agent or SLURM ended it), ``sigterm_sent`` (the launcher stopped it because another worker failed)."""
    exit_code: int | None = None
    signal: str | None = None
    file: str = ""
    line: int = 0
    text: str = ""
    time: datetime | None = None


@dataclass(repr=False, eq=False)
class RankState:
    """One rank's state at the end of the job, and the line that decides it."""

    rank: int
    state: str
    """One of :data:`RANK_STATES`."""
    why: str
    """The deciding fact, in a few words."""
    line: Hit | None = None
    """The line that decides it (the crash line, the NCCL state line), for citing."""
    crash: Trigger | None = None
    """For ``crashed`` / ``watchdog_killed``: the rank's first failure (its root-cause candidate)."""
    module: str | None = None
    """For ``crashed``: where the exception came from, for people ("the data loader", "torch.distributed")."""
    exit_code: int | None = None
    """Exit code reported by the launcher (> 0 error, < 0 signal), when known."""
    signal: str | None = None
    exception: Trigger | None = None
    """For ``crashed``: the exception that reached the top (ended the process), when logged."""
    last: Hit | None = None
    """The rank's last activity seen (:func:`last_activity`)."""


def last_activity(ev: JobEvidence) -> dict[int, Hit]:
    """Per rank, the latest line seen of it: its last hit of any signal, or the last timed line of its own file."""
    cached = ev.cache.get("last_activity")
    if cached is None:
        w = ev.worker
        out: dict[int, Hit] = {}
        cands = [h for per in w.last_by_rank.values() for h in per.values()]
        cands += [h for h in w.file_end.values() if h.rank is not None]
        keys: dict[int, tuple[datetime, str, int]] = {}  # the order key of out[rank]
        for h in cands:
            if h.rank is None:
                continue
            k = _order_key(h)
            if h.rank not in out or keys[h.rank] < k:
                out[h.rank], keys[h.rank] = h, k
        cached = ev.cache["last_activity"] = out
    result: dict[int, Hit] = cached
    return result


def counters_known(ev: JobEvidence) -> bool:
    """True when the NCCL state carries last-enqueued/completed counters (torch 2.3+): only then can a rank inside
    the collective be told from one that never entered it by its own numbers."""
    return any(r.last_enqueued is not None and r.last_completed is not None for r in ev.nccl.rows)


def fabric_evidence(ev: JobEvidence) -> tuple[bool, str]:
    """Whether a fabric hang is positively shown, and why (or why not).

    Shown: the timed-out process groups all have the fabric pattern, no rank lacks NCCL state, the counters are
    known, and either every rank is pending AND was first to dump on its own, or NCCL WARN / IB / Xid errors are
    logged on the hosts involved. Anything less is at most "fabric suspected"."""
    n = ev.nccl
    groups = [g for g in n.groups if g.detected_ranks]
    if not n.timed_out or not groups:
        return False, "no NCCL collective timed out"
    if n.ranks_without_state or any(g.classification != "fabric" for g in groups):
        return False, "not every rank was inside the collective"
    if not counters_known(ev):
        return False, (
            "every rank timed out, but this torch logs no enqueued/completed counters (torch <= 2.2): a rank that "
            "never entered the collective cannot be told from one waiting inside it, so straggler and fabric cannot "
            "be told apart"
        )
    warns = [h for s in ("net_error", "xid") for h in ev.worker.hits(s)]
    if warns:
        return True, f"NCCL/IB/Xid errors are logged ({warns[0].file}:{warns[0].line})"
    members = {r for g in groups for r in g.ranks}
    firsts = {r for g in groups for r in g.first_to_dump_ranks}
    if members and members <= firsts:
        return True, "every rank was inside the collective and its own watchdog fired first (first to dump on each)"
    return False, (
        "every rank waited inside the collective, but neither did every rank's own watchdog fire first nor is any "
        "NCCL WARN / IB / Xid error logged: fabric suspected, not shown"
    )


def _ends_traceback(w: WorkerEvidence, h: Hit) -> bool:
    """True when ``h`` (an exception line) closes a traceback of its rank: the exception reached the top."""
    return any(tb.file == h.file and 0 < h.line - tb.line <= TRACEBACK_SPAN_LINES for tb in w.hits("traceback", h.rank))


WORKING_SIGNALS = ("progress", "memory", "retry", "conn_reset")
"""Signals of a rank at work (training progress, memory reports, requests retried): one of them written by the
rank after an error shows the error did not end it."""
HANDLED_AFTER = timedelta(seconds=60)
"""Training progress logged this long after an error (on any rank) shows the error did not end a rank: synchronous
training cannot go on for a minute while one rank is dead (the next collective would block)."""


def handled(w: WorkerEvidence, t: Trigger) -> bool:
    """True when training went on after ``t``: a later line of the rank at work (:data:`WORKING_SIGNALS`), the
    run's clean end later in the same file or after it, or progress on any rank :data:`HANDLED_AFTER` after it."""
    h = t.hit
    if h.rank is not None:
        for signal in WORKING_SIGNALS:
            own = w.last_by_rank.get(signal, {}).get(h.rank)
            if own is None:
                continue
            # later in the same file, unless the times put it with the error (a traceback on stderr and a step line
            # the logger flushed after it land in one file out of order)
            if own.file == h.file and own.line > h.line and not _close(own, h):
                return True
            if _after(own, h, CLOCK_SLACK):
                return True
    for end in w.hits("clean_end"):
        if (end.file == h.file and end.line > h.line) or _after(end, h, CLOCK_SLACK):
            return True
    if _steps_later_in_file(w, h) >= 2:
        return True
    # some progress line after it (``_after`` of each): the latest-starting one is, when any is
    latest = w.latest_start("progress")
    if latest is not None and h.latest is not None and latest > h.latest + HANDLED_AFTER:
        return True
    # or two steps completed after it: the second needs every rank alive (one more step line may be a rank's that
    # had not yet reached the collective the dead rank left)
    return h.latest is not None and w.steps_after(h.latest + CLOCK_SLACK) >= 2


def _steps_later_in_file(w: WorkerEvidence, h: Hit) -> int:
    """How many distinct training steps the file of ``h`` reports after it (with no time to go by): synchronous
    training completes a second step only with every rank alive, so two show the error ended no rank."""
    steps = {
        n for p in w.hits("progress") if p.file == h.file and p.line > h.line and (n := step_number(p.text)) is not None
    }
    return len(steps)


def _close(a: Hit, b: Hit) -> bool:
    """Both lines' times are known to lie within :data:`CLOCK_SLACK` of each other."""
    lo_a, hi_a, lo_b, hi_b = a.earliest, a.latest, b.earliest, b.latest
    if lo_a is None or hi_a is None or lo_b is None or hi_b is None:
        return False
    return hi_a <= lo_b + CLOCK_SLACK and hi_b <= lo_a + CLOCK_SLACK


def _after(later: Hit, h: Hit, gap: timedelta) -> bool:
    lo, hi = later.earliest, h.latest
    return lo is not None and hi is not None and lo > hi + gap


def _module_of(t: Trigger) -> str | None:
    if t.category == "data":
        return "the data loader"
    m = _EXC_NAME.search(t.hit.text)
    if m and "." in m.group(1):
        return m.group(1).rsplit(".", 1)[0]
    return None


FATAL_KINDS = ("cuda_oom", "cuda_error", "rank_crash", "data", "watchdog_hang")


def crash_triggers(ev: JobEvidence) -> dict[int, list[Trigger]]:
    """Per rank, its failure candidates that were not handled (no progress of the rank after them), oldest first."""
    out: dict[int, list[Trigger]] = defaultdict(list)
    for t in triggers(ev):
        if t.hit.rank is not None and t.category in FATAL_KINDS and not handled(ev.worker, t):
            out[t.hit.rank].append(t)
    return dict(out)


def job_finished(ev: JobEvidence) -> Hit | None:
    """The clean-end line when every rank finished: a clean-end marker, no NCCL timeout, no error exit and no process
    killer (OOM, CUDA error, SLURM cancellation, fatal signal, srun error exit), and no unhandled exception written
    after the end. Exceptions before it were survived: synchronous training cannot end normally without every rank
    (warnings, retried requests and handled tracebacks do not make a failure)."""
    w = ev.worker
    ends = w.hits("clean_end")
    if not ends or ev.nccl.timed_out or ev.nccl.exited_with_error:
        return None
    lf = ev.launcher
    if lf is not None and any(f.comm_error is not None or f.exitcode not in (None, 0) for f in lf.fates.values()):
        return None  # a rank lost its peers or a worker ended in error: one rank's clean end is not the job's
    if killers(w, ev, exceptions=False):
        return None
    end = ends[-1]
    for ts in crash_triggers(ev).values():
        for t in ts:
            if (t.hit.file == end.file and t.hit.line > end.line) or _after(t.hit, end, CLOCK_SLACK):
                return None
    return end


def rank_states(ev: JobEvidence) -> dict[int, RankState]:
    """Every rank's state (computed once per evidence; see :data:`RANK_STATES`)."""
    cached = ev.cache.get("rank_states")
    if cached is None:
        cached = ev.cache["rank_states"] = _rank_states(ev)
        if ev.hang is not None:
            _hang_states(ev.hang, cached)
    states: dict[int, RankState] = cached
    return states


def _hang_states(hang: hang_facts.HangFacts, states: dict[int, RankState]) -> None:
    """Where the stack dumps saw a rank whose logs say nothing of its end: stuck outside the collective, or waiting
    in it."""
    for group, state in ((hang.stuck, "stuck"), (hang.detours, "stuck"), (hang.waiting, "waiting")):
        for p in group:
            if p.rank is None or p.state.kind == "gone":
                continue
            st = states.get(p.rank)
            if st is None or st.state in ("unknown", "absent"):
                line = Hit("stack_dump", p.file, p.state.line_no, p.state.text, p.rank, None)
                states[p.rank] = RankState(p.rank, state, f"{p.state.words()} (stack dump)", line)


def _rank_states(ev: JobEvidence) -> dict[int, RankState]:
    w, n = ev.worker, ev.nccl
    missing = w.missing_ranks  # each of these is derived anew per access: once here, not once per rank
    timed_out = n.timed_out
    stragglers = n.straggler_ranks
    world = set(w.ranks) | set(missing)
    if w.world_size is not None:
        world |= set(range(w.world_size))
    rows: dict[int, list[NcclRow]] = defaultdict(list)
    for row in n.rows:
        rows[row.rank].append(row)
    fatal = crash_triggers(ev)
    events = ev.launcher_events()
    exits = {e.rank: e for e in events if e.rank is not None and e.kind in ("exit", "signal")}
    stopped = {e.rank: e for e in events if e.rank is not None and e.kind == "sigterm_sent"}
    finished = job_finished(ev)
    crashed_files = set()
    out: dict[int, RankState] = {}
    for r in sorted(world):
        mine = rows.get(r, [])
        trig = fatal.get(r, [])
        pending = [x for x in mine if (x.pending or 0) > 0]
        hb = top = None
        if trig:  # (most ranks have no crash trigger)
            hb = next((t for t in trig if t.category == "watchdog_hang"), None)
            top = next(
                (
                    t
                    for t in trig
                    if t.category in ("cuda_oom", "cuda_error")
                    or (_matches("exception", t.hit.text) and _ends_traceback(w, t.hit))
                ),
                None,
            )
        ex = exits.get(r)
        code = ex.exit_code if ex is not None else None
        if r in n.exited_with_error and code is None:
            code = 1
        if r in missing:
            out[r] = RankState(r, "absent", "no log file of this rank was found")
        elif finished is not None:
            out[r] = RankState(r, "finished", "the run ended normally", finished)
        elif hb is not None:
            out[r] = RankState(r, "watchdog_killed", "the NCCL heartbeat monitor killed it", hb.hit, hb, exit_code=code)
            crashed_files.add(hb.hit.file)
        elif pending:
            x = pending[0]
            out[r] = RankState(
                r,
                "waiting",
                f"inside {x.op_type or 'a collective'} SeqNum {x.seq} (PG {x.pg}): enqueued {x.last_enqueued} > "
                f"completed {x.last_completed}",
                _row_hit(x),
            )
        elif top is None and r in stopped:
            peer = _peer_error(w, r)
            out[r] = RankState(
                r,
                "torn_down",
                f"its launcher stopped it (exit {stopped[r].exit_code}) after another worker failed"
                + (f"; its last error was a peer's: {cut(peer.text, 100)}" if peer is not None else ""),
                peer,
                exit_code=stopped[r].exit_code,
                signal=stopped[r].signal,
            )
        elif top is None and not trig and code and (peer := _peer_error(w, r)) is not None:
            out[r] = RankState(
                r,
                "torn_down",
                f"exited ({code}) on a communication error after a peer failed: {cut(peer.text, 100)}",
                peer,
                exit_code=code,
            )
        elif (top is not None and not mine) or (code is not None and code != 0 and not pending):
            first = trig[0] if trig else top
            why = (
                f"{first.what} ({'reached the top' if top is not None else 'logged'}), then nothing more"
                if first is not None
                else f"the launcher reports exit code {code}; no exception in its own log"
            )
            out[r] = RankState(
                r,
                "crashed",
                why,
                first.hit if first is not None else None,
                first,
                _module_of(first) if first is not None else None,
                code,
                ex.signal if ex is not None else None,
                top,
            )
            if first is not None:
                crashed_files.add(first.hit.file)
        elif timed_out and (r in n.job_stragglers or (mine and not pending and r in stragglers)):
            x0 = mine[0] if mine else None
            out[r] = RankState(
                r,
                "stuck",
                "alive but not inside the stuck collective (no NCCL work pending / only observed the dump)",
                _row_hit(x0) if x0 is not None else None,
            )
        else:
            out[r] = RankState(r, "unknown", "its log says nothing of how it ended")
    last = last_activity(ev)
    for r, st in out.items():
        st.last = last.get(r)
        if st.state != "unknown" or not timed_out:
            continue
        files = set(w.files_of_rank(r))
        if files & crashed_files or w.hits("signal", r):
            st.state, st.why = "torn_down", "stopped by its launcher after another rank failed (no NCCL state)"
        elif r in n.ranks_without_state:
            st.state, st.why = "stuck", "no NCCL state while the others timed out: it never entered the collective"
    return out


def _peer_error(w: WorkerEvidence, rank: int) -> Hit | None:
    """The rank's last exception when it is a consequence of a peer's failure (gloo/NCCL/store errors)."""
    own = [h for h in w.hits("exception", rank) if not is_warning(h.text)]
    return own[-1] if own and is_consequence(own[-1].text) else None


def _row_hit(x: NcclRow) -> Hit:
    return _new_evidence_hit("nccl", x.file, x.line, x.text, x.rank, x.timeout_time, None, None)  # (once per rank)


def order_by_bounds(h: Hit, t: datetime | None) -> bool | None:
    """True/False when ``h``'s time (or the bounds of an untimed line) is provably before/after ``t`` within
    :data:`CLOCK_SLACK`; None when the bounds overlap ``t``. No ``t`` (nothing to be after): True."""
    if t is None:
        return True
    if h.latest is not None and h.latest <= t + CLOCK_SLACK:
        return True
    if h.earliest is not None and h.earliest > t + CLOCK_SLACK:
        return False
    return None


def precedes_symptom(ev: JobEvidence, h: Hit) -> bool | None:
    """Whether ``h`` happened before the failure's first symptom: True/False when the time bounds decide it, or when
    the causal order does (the line is the last output of a rank that crashed or stalled and never entered the
    collective the others were waiting in: the others could only wait for it after it stopped); None when neither.
    """
    sym = first_symptom(ev)
    by_time = order_by_bounds(h, sym.time if sym is not None else None)
    if by_time is not None:
        return by_time
    if h.rank is not None:
        st = rank_states(ev).get(h.rank)
        if st is not None and (
            st.state in ("crashed", "watchdog_killed") or (st.state == "stuck" and ev.nccl.timed_out)
        ):
            return True
    return None


def rank_state_groups(states: dict[int, RankState]) -> list[tuple[str, list[int], str, Hit | None]]:
    """States grouped: (state, ranks, why of the first rank, its deciding line), in rank order of first appearance."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    first: dict[tuple[str, str], RankState] = {}
    for r in sorted(states):
        st = states[r]
        key = (st.state, st.why if st.state in ("crashed", "watchdog_killed") else "")
        groups[key].append(r)
        first.setdefault(key, st)
    return [(k[0], rs, first[k].why, first[k].line) for k, rs in groups.items()]


SILENT_NODE_GAP = timedelta(seconds=60)
"""A node whose logs end this long before the job was cancelled for NODE FAILURE went silent (it is the one)."""


@dataclass(repr=False, eq=False)
class SilentNode:
    """A node whose every log file stopped well before SLURM's NODE FAILURE cancellation, with no error."""

    node: str
    ranks: set[int]
    last: Hit | None
    """Its last timed line (the moment it went silent)."""


def node_failure_facts(ev: JobEvidence) -> tuple[Hit | None, list[SilentNode]]:
    """SLURM's ``CANCELLED ... DUE TO NODE FAILURE`` line and the nodes that went silent before it.

    Files are grouped by node (the host slurmstepd names in the file, else the one host of its ranks from the NCCL
    init lines, else the file's node), so a node's per-rank files and its launcher file are judged together: a node
    is silent when none of its files holds the cancellation and each ends :data:`SILENT_NODE_GAP` before it."""
    w = ev.worker
    cancels = [h for h in w.hits("slurm_cancel") if "NODE FAILURE" in h.text]
    if not cancels:
        return None, []
    cancel = cancels[0]
    at = cancel.when
    with_cancel = {h.file for h in cancels}
    groups: dict[str, list[FileInventory]] = defaultdict(list)
    for f in w.job.inventory.files:
        hosts = {w.rank_host.get(r) for r in f.ranks}
        by_rank = next(iter(hosts)) if len(hosts) == 1 else None
        node = w.file_host.get(f.rel) or by_rank or f.node or f.rel
        groups[node].append(f)
    out: list[SilentNode] = []
    for node, files in sorted(groups.items()):
        if any(f.rel in with_cancel for f in files):
            continue
        ends = [e for f in files if (e := w.file_end.get(f.rel)) is not None and e.time is not None]
        if at is None or all(e.time is not None and e.time <= at - SILENT_NODE_GAP for e in ends):
            ranks = {r for f in files for r in f.ranks}
            last = max(ends, key=lambda e: e.time or datetime.min) if ends else None
            out.append(SilentNode(node if node not in {f.rel for f in files} else "", ranks, last))
    return cancel, [s for s in out if s.ranks]
