"""One pass over a worker-log directory that every tool shares: the files, ranks, nodes and world size behind
``coverage``, plus what ``job_overview`` reports (framework, versions, start/end, data source).

Tools that scan for their own patterns call :func:`scan_job` with them: the inventory's patterns ride along in the
same pass, so coverage costs no second read of tens of GB.

This module holds the scan itself (:func:`scan_job`, :func:`scan_consumers`, the started scan, the lean inventory and
the composite sink that routes a file's hits); the parts live in ``inventory_markers`` (the patterns),
``inventory_sink`` (a file's facts), ``inventory_types`` (the results), ``inventory_views`` (lazy per-file results),
``inventory_file_share`` (a file's share, packed in the worker) and ``inventory_build`` (the job's inventory).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from debug_training_logs import meanwhile
from debug_training_logs.analysis.inventory_build import InventoryFold
from debug_training_logs.analysis.inventory_file_share import _FileShare, _pack_scan
from debug_training_logs.analysis.inventory_markers import MARKERS, Marker
from debug_training_logs.analysis.inventory_sink import FileFacts, InventorySink
from debug_training_logs.analysis.inventory_types import Inventory, JobScan
from debug_training_logs.analysis.inventory_views import _Bases, _Files, _Items, _Results
from debug_training_logs.logs.discovery import LogFile, Skipped, discover
from debug_training_logs.logs.scan import StartedScan, start_each
from debug_training_logs.logs.scan_cache import CACHE, Alike, Consumer, FileResult, companions, file_key, settled
from debug_training_logs.logs.scan_types import FileScan, PatternSpec, Sink, SinkFactory
from debug_training_logs.memo import Packed, settle, unpack_item

HEAD_LINES = 80
TAIL_LINES = 40


_MAX_ROUTES = 4096
"""Distinct pattern-id sets a composite sink remembers how to split (a file has a few dozen; this bounds memory)."""

_Route = tuple[tuple[int, list[int]], ...]
"""How a composite sink splits one id set: (sink index, its ids) per sink that gets the hit, in call order (the
inventory's first, its index one past the consumers' parts)."""


def _no_bulk(line_nos: list[int], lines: list[str]) -> None:
    raise RuntimeError("a run of bulk lines for a composite sink that named no bulk pattern")


class _CompositeSink:
    """Routes one file's hits: each consumer's pattern ids (shifted back to its own 0..k-1) to its sink, the
    inventory markers' to an :class:`InventorySink` (one scan, every consumer). ``routes``: how each id set is split,
    shared by the files of one scan (:class:`_CompositeSinks`; ~40 per file, ~3 us each to work out)."""

    def __init__(
        self,
        lf: LogFile,
        parts: tuple[tuple[SinkFactory | None, int, int], ...],
        markers_at: int,
        markers: tuple[Marker, ...] = MARKERS,
        routes: dict[tuple[int, ...], _Route] | None = None,
    ) -> None:
        self.parts = [(f(lf) if f is not None else None, off, k) for f, off, k in parts]
        self.markers_at = markers_at
        self.inventory = InventorySink(lf, markers)
        self._hits = [*(s.on_hit if s is not None else None for s, _o, _k in self.parts), self.inventory.on_hit]
        """Each part's sink's ``on_hit`` (None: no sink), then the inventory's (what a route's indexes name)."""
        self._routes: dict[tuple[int, ...], _Route] = routes if routes is not None else {}
        self._bulk: Callable[[list[int], list[str]], None] = _no_bulk
        """The ``on_bulk`` of the consumer's sink :meth:`bulk_id` names."""

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        route = self._routes.get(tuple(pattern_ids))
        if route is None:
            route = self._route(pattern_ids)
            if len(self._routes) < _MAX_ROUTES:
                self._routes[tuple(pattern_ids)] = route
        hits = self._hits
        for k, mine in route:
            hits[k](mine, line_no, line)  # type: ignore[misc]  # (a route names a sink that is there)

    def bulk_id(self) -> int | None:
        """The pattern (of the scan's) whose lines a consumer's sink takes in bulk (:class:`~debug_training_logs.logs.
        scan.Sink`), the first such consumer's; None when no consumer's sink does."""
        for sink, off, k in self.parts:
            ask = getattr(sink, "bulk_id", None)
            local: int | None = ask() if ask is not None else None
            if local is not None and 0 <= local < k:
                self._bulk = sink.on_bulk  # type: ignore[union-attr]  # (a sink naming a bulk pattern takes its lines)
                return off + local
        return None

    def on_bulk(self, line_nos: list[int], lines: list[str]) -> None:
        """A run of lines of :meth:`bulk_id` alone: to its consumer's sink (no other sink has that pattern)."""
        self._bulk(line_nos, lines)

    def _route(self, pattern_ids: list[int]) -> _Route:
        """The route of a hit with these ids (worked out once per id set and scan: the routes are shared)."""
        route: list[tuple[int, list[int]]] = []
        if pattern_ids[-1] >= self.markers_at:
            route.append((len(self.parts), [i - self.markers_at for i in pattern_ids if i >= self.markers_at]))
            if pattern_ids[0] >= self.markers_at:
                return tuple(route)
        for j, (sink, off, k) in enumerate(self.parts):
            if sink is not None:
                mine = [i - off for i in pattern_ids if off <= i < off + k]
                if mine:
                    route.append((j, mine))
        return tuple(route)

    def finish(self) -> tuple[list[Any], FileFacts]:
        return [s.finish() if s is not None else None for s, _o, _k in self.parts], self.inventory.finish()


class _CompositeSinks:
    """The sink factory of one scan for several consumers: each file's :class:`_CompositeSink`, all of them
    splitting id sets by the same routes."""

    def __init__(
        self, parts: tuple[tuple[SinkFactory | None, int, int], ...], markers_at: int, markers: tuple[Marker, ...]
    ) -> None:
        self.parts, self.markers_at, self.markers = parts, markers_at, markers
        self.routes: dict[tuple[int, ...], _Route] = {}

    def __call__(self, lf: LogFile) -> _CompositeSink:
        return _CompositeSink(lf, self.parts, self.markers_at, self.markers, self.routes)


LineKeep = Callable[[str, int, str], bool]
"""Keeps a hit line (file, line number, text) or drops it (another attempt's line); must be picklable, and its repr
must say what it keeps (it is part of the consumer's cache key)."""


class _KeptSink:
    """A consumer's sink that sees only the lines ``keep`` admits (one attempt's lines)."""

    def __init__(self, inner: Sink, keep: LineKeep, rel: str) -> None:
        self.inner, self.keep, self.rel = inner, keep, rel

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        if self.keep(self.rel, line_no, line):
            self.inner.on_hit(pattern_ids, line_no, line)

    def finish(self) -> Any:
        return self.inner.finish()


def kept_sink(keep: LineKeep, inner: SinkFactory, lf: LogFile) -> _KeptSink:
    return _KeptSink(inner(lf), keep, lf.rel)


def scan_job(
    logs_dir: str | Path,
    patterns: Sequence[str] = (),
    sink_factory: SinkFactory | None = None,
    *,
    ignore_case: bool = False,
    files: Sequence[LogFile] | None = None,
    dense: Sequence[int] = (),
    keep: LineKeep | None = None,
) -> JobScan:
    """Scan every log file under ``logs_dir`` once for ``patterns`` (ids 0..k-1 for ``sink_factory``) and the
    inventory markers; return per-file results, the caller's sink results (in file order) and the inventory.

    ``dense``: ids of the caller's patterns whose lines occur once per step per rank; the sink receives a bounded
    sample of them (each file's first hits, one per stride, each rank's last ones), see ``PatternSpec.dense``.
    Results are shared through :mod:`~debug_training_logs.logs.scan_cache` (see :func:`scan_consumers`).
    ``keep``: the sink sees only the lines it admits (one attempt's); counts and the inventory stay the whole job's.
    """
    if keep is not None and sink_factory is not None:
        sink_factory = functools.partial(kept_sink, keep, sink_factory)
    me = consumer_for(patterns, sink_factory, dense=dense, ignore_case=ignore_case)
    return scan_consumers(logs_dir, [me], files=files)[me.key]


def consumer_for(
    patterns: Sequence[str],
    sink_factory: SinkFactory | None,
    *,
    dense: Sequence[int] = (),
    ignore_case: bool = False,
    refine: Callable[[Any, FileScan], Any] | None = None,
) -> Consumer:
    """The :class:`Consumer` that :func:`scan_job` makes of these arguments (for declaring companions); ``refine``:
    see :attr:`Consumer.refine`."""
    return Consumer(_factory_name(sink_factory), tuple(patterns), sink_factory, frozenset(dense), ignore_case, refine)


def _factory_name(f: SinkFactory | None) -> str:
    if f is None:
        return "none"
    if isinstance(f, functools.partial):
        return f"{_factory_name(f.func)}{f.args!r}{sorted(f.keywords.items())!r}"
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"


_BASE = "inventory"
"""Cache key of a file's own facts (lines, ranks, head, tail, problem, inventory markers)."""

COVERAGE_MARKERS: frozenset[str] = frozenset(
    {
        "nccl_init",
        "lightning_member",
        "world_size_kv",
        "world_size_launcher",
        "default_pg_size",
        "child_failed",
        "ray",
        "rank_statement",
    }
)
"""The markers a job's coverage comes from: each file's global ranks (Ray ``[rank=N]`` prefixes, Lightning
``GLOBAL_RANK``, the world communicator's NCCL init lines, the torchrun failure table, the ranks a trainer or the
default PG's prefix states) and the world size with its
evidence. An inventory scanned with only these has the same files, ranks, world size and evidence, missing ranks,
line counts, year hint and start/end as the full one (the rest comes from the scan engine: ``[rankN]:`` prefixes,
each file's head and tail); its ``markers``, ``marker_examples``, ``nodes`` (and each file's ``node``) and versions
are partial."""

_lean: ContextVar[frozenset[str] | None] = ContextVar("lean_inventory", default=None)


@contextmanager
def lean_inventory(markers: frozenset[str] = COVERAGE_MARKERS) -> Iterator[None]:
    """Within the block, a job scan that reads files searches only the inventory ``markers`` (for a tool that reads
    nothing of the inventory but what they give, e.g. the NCCL table reads coverage, line counts and the year): fewer
    literals, fewer candidate lines, fewer hits through Python. A file's full inventory in the scan cache still
    serves; a lean one is cached under its own key, so it never answers a tool that needs the full inventory.

    Not applied while companions are in force (:func:`~debug_training_logs.logs.scan_cache.companions`: a
    server scans every tool's consumers in its first scan, and the tools after it need the full inventory)."""
    token = _lean.set(markers if not companions() else None)
    try:
        yield
    finally:
        _lean.reset(token)


def _markers_in_force() -> tuple[tuple[Marker, ...], str]:
    """The inventory markers a scan searches now and the cache key of the file facts they give."""
    lean = _lean.get()
    if lean is None:
        return MARKERS, _BASE
    chosen = tuple(m for m in MARKERS if m.name in lean)
    if len(chosen) == len(MARKERS):
        return MARKERS, _BASE
    return chosen, f"{_BASE}[{','.join(m.name for m in chosen)}]"


def scan_consumers(
    logs_dir: str | Path,
    consumers: Sequence[Consumer],
    *,
    files: Sequence[LogFile] | None = None,
    on_file: Callable[[int, dict[str, FileResult]], None] | None = None,
) -> dict[str, JobScan]:
    """One scan of every file under ``logs_dir`` for all ``consumers`` (and the companions in force, see
    :mod:`~debug_training_logs.logs.scan_cache`), skipping files whose results are all cached; one
    :class:`JobScan` per consumer key, sharing the inventory. ``on_file(j, results)`` is called as each scanned file's
    results arrive (file ``j`` of the scan's files, consumer key -> result), while the other files are still being
    scanned: work on one file's result can start there (files found in the cache are not announced).

    The scan :func:`start_scan` started for the same directory, consumers, companions and inventory markers is the one
    read here (``files`` None); a started one that does not match is given up (its workers killed) first."""
    global _STARTED
    started, _STARTED = _STARTED, None
    if started is not None and (files is not None or started.key != _Scan.key_of(logs_dir, consumers)):
        started.close()
        started = None
    run = started or _Scan(logs_dir, consumers, files)
    try:
        return run.finish(consumers, on_file)
    finally:
        run.close()


def start_scan(logs_dir: str | Path, consumers: Sequence[Consumer]) -> None:
    """Start :func:`scan_consumers`' scan of ``logs_dir`` for ``consumers`` now, its worker processes reading while
    this process does other work first (the CLI: it starts its command's scan before it imports pydantic and builds its
    arguments, :mod:`~debug_training_logs.early_scan`); the command's own :func:`scan_consumers` call then reads it. The
    workers are handed files ahead (:data:`START_AHEAD_BYTES`). Nothing starts where one process would read the files
    (one file, a small job): the call then scans as it always does."""
    global _STARTED
    if _STARTED is not None:
        _STARTED.close()
        _STARTED = None
    run = _Scan(logs_dir, consumers, None, START_AHEAD_BYTES)
    if run.forked:
        _STARTED = run
    else:
        run.close()


def drop_started_scan() -> None:
    """Give up the scan :func:`start_scan` started, if no :func:`scan_consumers` call read it (its workers killed)."""
    global _STARTED
    started, _STARTED = _STARTED, None
    if started is not None:
        started.close()


START_AHEAD_BYTES = 128 << 20
"""Bytes of files each worker of a :func:`start_scan` scan is handed at once: ~0.2 s of reading on one core, about what
the CLI spends on its imports and arguments before its command reads the scan's results and hands out more."""

_STARTED: _Scan | None = None
"""The scan :func:`start_scan` started that no :func:`scan_consumers` call has read yet."""


class _Scan:
    """One job scan of :func:`scan_consumers`: the files, the cache entries it found, and, when some file needs reading,
    its worker processes (forked when it is made: with ``ahead_bytes``, handed that much ahead; see
    :func:`~debug_training_logs.logs.scan.start_each`)."""

    def __init__(
        self, logs_dir: str | Path, consumers: Sequence[Consumer], files: Sequence[LogFile] | None, ahead_bytes: int = 0
    ) -> None:
        if files is None:
            found, skipped = discover(logs_dir)
        else:
            found, skipped = list(files), []
        self.key = _Scan.key_of(logs_dir, consumers)
        self.root: Path = self.key[0]
        self.found, self.skipped = found, skipped
        ignore_case = consumers[0].ignore_case if consumers else False
        wanted: dict[str, Consumer] = {}
        for c in [*consumers, *(c for c in companions() if c.ignore_case == ignore_case)]:
            if c.ignore_case != ignore_case:
                raise ValueError("consumers of one scan share one case mode")
            wanted.setdefault(c.key, c)
        self.fkeys = [file_key(lf) for lf in found]
        markers, self.base_key = _markers_in_force()
        # a file's full facts serve a lean scan too (a superset: the same lines give the same coverage facts)
        self.base_keys = (_BASE,) if self.base_key == _BASE else (_BASE, self.base_key)
        # Every entry this scan reads, held from the moment it is found: the cache is bounded, so this scan's own puts
        # may push out an entry that was there when the files to read were chosen (or one of this scan's own).
        self.held: dict[tuple[int, str], Any] = {}
        self.need = [
            j for j in range(len(found)) if self._missing(j, None) or any(self._missing(j, c) for c in consumers)
        ]
        self.run: list[Consumer] = []
        self.started: StartedScan[tuple[Packed, list[FileResult]]] | None = None
        if not self.need:
            return
        self.run = run = [c for c in wanted.values() if any(self._missing(j, c) for j in self.need)]
        offsets: list[int] = []
        pats: list[str] = []
        dense_flags: list[bool] = []
        for c in run:
            offsets.append(len(pats))
            dense_flags += [i in c.dense for i in range(len(c.patterns))]
            pats += c.patterns
        k = len(pats)
        caps = (None,) * k + tuple(m.cap for m in markers)
        dense_flags += [m.dense for m in markers]
        spec = PatternSpec(
            tuple(pats) + tuple(m.regex for m in markers),
            ignore_case,
            max_hits=caps,
            dense=tuple(dense_flags) if any(dense_flags) else None,
        )
        parts = tuple((c.sink, off, len(c.patterns)) for c, off in zip(run, offsets, strict=True))
        factory = _CompositeSinks(parts, k, markers)
        layout = tuple((off, len(c.patterns)) for c, off in zip(run, offsets, strict=True))
        packer = functools.partial(_pack_scan, layout, tuple(c.refine for c in run))
        self.started = start_each(
            [found[j] for j in self.need],
            spec,
            factory,
            packer,
            head_lines=HEAD_LINES,
            tail_lines=TAIL_LINES,
            ahead_bytes=ahead_bytes,
        )

    @staticmethod
    def key_of(logs_dir: str | Path, consumers: Sequence[Consumer]) -> tuple[Any, ...]:
        """What a scan of ``logs_dir`` for ``consumers`` reads, as a started one must match: the directory, the
        consumers and the companions in force (by key, in order), and the inventory markers in force."""
        return (
            Path(logs_dir).resolve(),
            tuple(c.key for c in consumers),
            tuple(c.key for c in companions()),
            _markers_in_force()[1],
        )

    @property
    def forked(self) -> bool:
        return self.started is not None and self.started.forked

    def _missing(self, j: int, c: Consumer | None) -> bool:
        key = (j, c.key if c is not None else _BASE)
        if key in self.held:
            return False
        for base in self.base_keys if c is None else (self.base_key,):
            got = CACHE.get(self.fkeys[j], self._ckey(c, self.found[j], base))
            if got is not None:
                self.held[key] = got
                return False
        return True

    def _ckey(self, c: Consumer | None, lf: LogFile, base: str | None = None) -> tuple[str, str]:
        # (a tuple of two strings the job holds anyway: a string made per file and consumer cost ~150 bytes each)
        return (c.key if c is not None else base or self.base_key, lf.rel)

    def finish(
        self, consumers: Sequence[Consumer], on_file: Callable[[int, dict[str, FileResult]], None] | None
    ) -> dict[str, JobScan]:
        """Read the scan's results (caching each) and make the :class:`JobScan` of each of ``consumers``."""
        found, held, run = self.found, self.held, self.run
        fold = InventoryFold(len(found))  # the inventory's share of each file read, folded as it arrives
        if self.started is not None:
            alike = Alike()
            for i, (base, results) in self.started.results():
                j = self.need[i]
                base = settle(base)
                held[(j, _BASE)] = base
                CACHE.put(self.fkeys[j], self._ckey(None, found[j]), base, base.nbytes)
                fold.add(j, found[j], unpack_item(base, 2))  # while the workers read the other files
                results = [alike(settled(fr)) for fr in results]
                for c, fr in zip(run, results, strict=True):
                    held[(j, c.key)] = fr
                    CACHE.put(self.fkeys[j], self._ckey(c, found[j]), fr, fr.nbytes)
                if on_file is not None:
                    on_file(j, {c.key: fr for c, fr in zip(run, results, strict=True)})
                meanwhile.run_queued()  # the workers read the other files meanwhile

        def lookup(j: int, c: Consumer | None) -> Any:
            return held[(j, c.key if c is not None else _BASE)]

        bases: list[Packed] = [lookup(j, None) for j in range(len(found))]
        inventory = _inventory_of(found, bases, self.skipped, fold)
        view = _Bases(found, bases)
        out: dict[str, JobScan] = {}
        for c in consumers:
            per_file: list[FileResult] = [lookup(j, c) for j in range(len(found))]
            out[c.key] = JobScan(
                root=self.root, files=_Files(view, per_file), caller_results=_Results(per_file), inventory=inventory
            )
        return out

    def close(self) -> None:
        if self.started is not None:
            self.started.close()


_LAST_INVENTORY: tuple[tuple[Packed, ...], tuple[LogFile, ...], tuple[Skipped, ...], Inventory] | None = None
"""The latest inventory built and what it was built from: a tool that splits attempts first (one scan) and then
scans for its own consumers (a cache hit) asks for the same job's inventory twice in a row."""


def _inventory_of(
    found: Sequence[LogFile], bases: list[Packed], skipped: list[Skipped], fold: InventoryFold | None = None
) -> Inventory:
    """The job's inventory from each file's packed facts; built again only when the facts are not the very objects
    (``is``) the latest one was built from (cache entries are never changed in place: a changed file is a new entry).
    ``fold``: the shares (item 2 of each base) already folded as their files' scans arrived."""
    global _LAST_INVENTORY
    last = _LAST_INVENTORY  # read once: another thread may replace it
    if (
        last is not None
        and len(last[0]) == len(bases)
        and all(a is b for a, b in zip(last[0], bases, strict=True))
        and last[1] == tuple(found)
        and last[2] == tuple(skipped)
    ):
        return last[3]
    fold = fold or InventoryFold(len(bases))
    shares: _Items[_FileShare] = _Items(bases, 2)
    for j, lf in enumerate(found):
        if j not in fold:
            fold.add(j, lf, shares[j])
    inventory = fold.inventory(_Items(bases, 1), skipped)
    _LAST_INVENTORY = (tuple(bases), tuple(found), tuple(skipped), inventory)
    return inventory
