"""Fast multi-pattern search over many files: the "matcher" and the "searcher".

Never loops over lines in Python to search. How it gets near ripgrep's speed (numbers in ``bench/README.md``):

* **Literal prefilter, one native pass.** Each pattern is parsed once for the literals any match must contain
  (``NCCL.*timeout`` needs ``NCCL`` and ``timeout``; an alternation needs one per branch). On a sample of the corpus
  the rarest literal of each branch is chosen, and all of them go to the native line finder (``_linescan``, a small C
  extension: each literal anchored on its rarest byte pair, a pair table, ``memcmp``), which returns in one pass over
  a window every line holding a literal with its line number. Without the extension (no compiler at install, or
  ``DEBUG_TRAINING_LOGS_NO_NATIVE=1``) the literals go into ``ahocorasick_rs`` automata (Rust's ``aho-corasick`` with
  the Teddy SIMD searcher) in passes of <= :data:`AC_GROUP`, with identical results. Only the lines flagged are cut out
  and checked (per-line semantics, like ``rg -c`` per pattern): the native finder names every literal in a flagged
  line, so only the patterns of those literals (and the DFA patterns, on lines a DFA search found too) can match it;
  a pattern one of whose top-level alternatives is a plain literal found in the line needs no check
  (:func:`_pure_branches`; nor does a dense sample line holding one), one left is checked by its own RE2, several
  by one RE2 ``Set`` pass (the fallback uses the ``Set`` on every line). The native finder does these checks itself
  (``Finder.hits``: the patterns of each needle as bit sets, the RE2 checks called from C), and merges and numbers the
  lines a DFA search or a dense sample found in the same pass (it stops at each of them), so Python sees only hits.
  RE2 passes with memchr-accelerated prefixes were measured too: with 20-40 literals the passes add up to less than
  one DFA pass, so they are not used.
* **RE2 DFA otherwise.** A pattern with no usable literal (``\\d+ errors``), or no ``ahocorasick_rs``, makes the
  plan one combined RE2 alternation over the buffer (~0.6 GB/s per core), still linear time.
* **Lines only for hits.** Line numbers come from the native pass (newlines counted between hits), else from
  ``bytes.count`` of newlines between hits (one pass per chunk).
* **Plain files are memory-mapped and searched in place**: 1 MiB windows ending on a newline are spans of the map
  (:func:`_spans`), and the finder, the RE2 DFAs, the dense sample and the line numbering take a span, so only hit
  lines and a file's head and tail are copied out. A span is copied only where a regex could tell its edge from a
  buffer's (``\\A``, inline flags, the fallback engine, a window cut inside a line longer than a chunk); without the
  extension every window is a copy, as before. Compressed files stream through
  :func:`~debug_training_logs.logs.reader.iter_chunks`.
* **Pieces in runs.** While a capped marker or a dense pattern's head is still searched, a window is cut into
  :data:`CAPPED_PIECE_BYTES` pieces (the search may change after each); pieces are searched together in one pass as
  long as nothing changes, and the hits after a change are searched again with the new search. The answer is the
  one piece-by-piece search gives, at one pass per window.
* **Global ranks** (``[rankN]:``) are collected natively in one pass (``collect_ranks``); without the extension by a
  regex matching only ranks *not yet seen* in the file (a trie complement), at memchr speed.
* **DFA patterns from a rare byte.** A pattern searched by the DFA is searched from a tail that starts on a literal
  byte rare on the sample when its own first byte is common (:func:`_rare_suffix`): a superset, the lines checked
  exactly. The planner's literal counts on the sample are one native pass (``count_literals``).
* **Files are spread over processes** sized to the cores; a :class:`Sink` per file aggregates in the worker and only
  its small ``finish()`` summary crosses back (ripgrep's ``Sink`` idea). Memory stays flat in corpus size.
* **Caps.** ``PatternSpec.max_hits`` stops a presence marker (one that hits every NeMo line, say) after N hits in a
  file: it then leaves that file's search, so a dense marker does not cost a Python call per line. Within a pass, a
  capped pattern is no longer checked (nor its DFA search continued) once the lines found make its cap certain.
* **Dense samples natively.** The stride walk of a dense pattern over every piece of a run is one native call
  (``Finder.sample``); Python checks the lines it proposes and walks on by itself only after one that fails.

Patterns RE2 cannot express (back-references, look-arounds) fall back to the ``regex`` module with a timeout per
chunk; a pattern that still times out is a :class:`UserInputError`, as is an invalid one.

Must not: know what a line means (that is ``formats/``), or hold more of a file than one chunk.

This module holds the scan's entry points and its driver (planned, then files scanned in this process or spread over
worker processes); the parts are its siblings: ``scan_types`` (spec, plan, results, sink), ``scan_patterns``
(validation, required literals), ``scan_plan`` (planning), ``scan_engines`` (RE2 options, native and Aho-Corasick
modules), ``scan_matcher`` (the compiled matcher, hits in a chunk), ``scan_dense`` (dense samples, ranks),
``scan_budget`` (the fallback patterns' time budget), ``scan_windows`` (a file's windows), ``scan_file`` (scanning one
file), ``scan_pool`` (the worker processes) and ``scan_lines`` (reading lines back from checkpoints).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from debug_training_logs import progress
from debug_training_logs.logs import scan_budget
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.scan_budget import FALLBACK_BUDGET_S, _Budget
from debug_training_logs.logs.scan_file import ScanSearch, _scan_one
from debug_training_logs.logs.scan_lines import _remember
from debug_training_logs.logs.scan_patterns import compile_patterns
from debug_training_logs.logs.scan_plan import _sample, make_plan
from debug_training_logs.logs.scan_pool import _Pool
from debug_training_logs.logs.scan_types import Checkpoints, FileScan, PatternSpec, Plan, SinkFactory

PARALLEL_MIN_BYTES = 32 << 20
"""Below this many bytes in total, scanning in-process is faster than starting worker processes."""


def _worker_count(files: Sequence[LogFile]) -> int:
    total = sum(f.size for f in files)
    if len(files) < 2 or total < PARALLEL_MIN_BYTES:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(len(files), cores))


def scan_files(
    files: Sequence[LogFile],
    spec: PatternSpec,
    sink_factory: SinkFactory | None = None,
    *,
    head_lines: int = 0,
    tail_lines: int = 0,
    collect_ranks: bool = True,
    plan: Plan | None = None,
) -> list[FileScan]:
    """Scan every file for ``spec``; results come back in the order of ``files``.

    ``head_lines``/``tail_lines``: also return that many first/last lines of each file. ``collect_ranks``: record
    the ``[rankN]:`` global ranks seen anywhere in each file (for coverage). ``plan``: a precomputed
    :func:`make_plan` (default: planned from a sample of ``files``).
    """
    results: list[FileScan | None] = [None] * len(files)
    for i, r in scan_each(
        files,
        spec,
        sink_factory,
        _as_is,
        head_lines=head_lines,
        tail_lines=tail_lines,
        collect_ranks=collect_ranks,
        plan=plan,
    ):
        results[i] = r
    return [r for r in results if r is not None]


T = TypeVar("T")


def _as_is(s: FileScan) -> FileScan:
    return s


def scan_each(
    files: Sequence[LogFile],
    spec: PatternSpec,
    sink_factory: SinkFactory | None,
    pack: Callable[[FileScan], T],
    *,
    head_lines: int = 0,
    tail_lines: int = 0,
    collect_ranks: bool = True,
    plan: Plan | None = None,
) -> Iterator[tuple[int, T]]:
    """Scan every file for ``spec`` (arguments as :func:`scan_files`) and yield ``(index in files, pack(result))``
    as each file is done, in no set order. ``pack`` (picklable) runs where the file was scanned, in the worker
    process: what it returns is all that crosses back, so the caller can fold each file's result and let it go
    instead of holding every file's objects. The files' :class:`Checkpoints` are remembered here either way."""
    started = start_each(
        files,
        spec,
        sink_factory,
        pack,
        head_lines=head_lines,
        tail_lines=tail_lines,
        collect_ranks=collect_ranks,
        plan=plan,
    )
    try:
        yield from started.results()
    finally:
        started.close()


def start_each(
    files: Sequence[LogFile],
    spec: PatternSpec,
    sink_factory: SinkFactory | None,
    pack: Callable[[FileScan], T],
    *,
    head_lines: int = 0,
    tail_lines: int = 0,
    collect_ranks: bool = True,
    plan: Plan | None = None,
    ahead_bytes: int = 0,
) -> StartedScan[T]:
    """:func:`scan_each`'s scan, started now: planned, and its worker processes forked and reading, before the caller
    asks for the first result (:meth:`StartedScan.results`). ``ahead_bytes``: hand each worker files up to about this
    many bytes at once (at least :data:`_AHEAD`), for a caller that will be busy with other work before it reads
    results and hands out more (:func:`~debug_training_logs.analysis.inventory.start_scan`). The caller must
    :meth:`StartedScan.close` it (after reading every result, or to give it up)."""
    compile_patterns(spec)
    if plan is None:
        plan = make_plan(spec, _sample(files))
    # (set in its module, where the fallback checks read it)
    scan_budget._BUDGET = _Budget(FALLBACK_BUDGET_S) if plan.fallback else None  # one budget for this whole search
    workers = _worker_count(files)
    search = ScanSearch(spec, plan)

    def task(i: int) -> tuple[Checkpoints | None, T]:
        return _scan_packed(files[i], search, sink_factory, head_lines, tail_lines, collect_ranks, pack)

    pool = None
    if workers > 1:
        order = sorted(range(len(files)), key=lambda i: -files[i].size)  # biggest first: better packing
        pool = _Pool(task, order, workers, [f.size for f in files], ahead_bytes)
    return StartedScan(files, task, workers, pool)


class StartedScan(Generic[T]):
    """A scan :func:`start_each` started: its worker processes (if several) read the files already."""

    def __init__(
        self,
        files: Sequence[LogFile],
        task: Callable[[int], tuple[Checkpoints | None, T]],
        workers: int,
        pool: _Pool[tuple[Checkpoints | None, T]] | None,
    ) -> None:
        self.files = files
        self._task = task
        self._workers = workers
        self._pool = pool

    @property
    def forked(self) -> bool:
        """Whether worker processes read the files (else :meth:`results` reads them one by one, in this process)."""
        return self._pool is not None

    def results(self) -> Iterator[tuple[int, T]]:
        """``(index in files, packed result)`` as each file is done, in no set order (see :func:`scan_each`)."""
        files, total = self.files, len(self.files)
        progress.report(
            0, total, f"scanning {total} file(s), {sum(f.size for f in files):,} bytes, {self._workers} process(es)"
        )
        if self._pool is None:
            for i, lf in enumerate(files):
                cp, packed = self._task(i)
                _remember(lf, cp)
                progress.report(i + 1, total, f"scanned {lf.rel}")
                yield i, packed
            return
        for done, (i, (cp, packed)) in enumerate(self._pool.results(), start=1):
            _remember(files[i], cp)
            progress.report(done, total, f"scanned {files[i].rel}")
            yield i, packed

    def close(self) -> None:
        """End the scan: no worker outlives this (the ones still reading are killed), every one is reaped."""
        if self._pool is not None:
            self._pool.close()


def _scan_packed(
    lf: LogFile,
    search: ScanSearch,
    sink_factory: SinkFactory | None,
    head_n: int,
    tail_n: int,
    collect_ranks: bool,
    pack: Callable[[FileScan], T],
) -> tuple[Checkpoints | None, T]:
    s = _scan_one(lf, search, sink_factory, head_n, tail_n, collect_ranks)
    return s.checkpoints, pack(s)
