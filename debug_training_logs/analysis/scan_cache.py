"""Scan results kept per file for the life of the process, so a sequence of tool calls on the same job reads its
files once.

An agent calls ``job_overview``, ``grep_all_ranks``, ``nccl_state_table``, ``timeline``, ``diagnose`` and
``verify_conclusion`` on the same directory, each needing its own patterns. :func:`inventory.scan_job` scans for
every :class:`Consumer` asked for *plus the companions in force* (:func:`together`, :func:`set_default_companions`)
in one pass, and stores each consumer's per-file result here; a later call whose consumers are all stored for every
file (same path, size, mtime and inode) reads nothing.

Keys: (file identity, consumer key). A consumer's key names its sink and hashes its patterns, dense flags and case
mode, so a different question is never answered from another's result. Bounded (:data:`MAX_ENTRIES`, least recently
used out); per-file results are the sinks' small summaries, never lines of the file.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.scan import SinkFactory

MAX_ENTRIES = 50_000
"""Per-(file, consumer) results kept; a 10,240-rank job of 1,280 files with five consumers needs 6,400."""


@dataclass(frozen=True)
class Consumer:
    """One reader of the shared job scan: its patterns and the sink that receives their hits in each file.

    ``name`` must say what the sink computes (module and class); ``dense`` lists pattern indices whose per-step lines
    are sampled (``PatternSpec.dense``)."""

    name: str
    patterns: tuple[str, ...]
    sink: SinkFactory | None
    dense: frozenset[int] = frozenset()
    ignore_case: bool = False

    @property
    def key(self) -> str:
        h = hashlib.sha1(repr((self.patterns, sorted(self.dense), self.ignore_case)).encode()).hexdigest()[:16]
        return f"{self.name}:{h}"


@dataclass
class FileResult:
    """One consumer's share of one file's scan."""

    counts: list[int]
    sink_result: Any
    sampled: set[int] = field(default_factory=set)


FileKey = tuple[str, int, int, int]
"""(absolute path, size, mtime in ns, inode): a changed file is a different file."""


def file_key(lf: LogFile) -> FileKey | None:
    """The identity of ``lf`` as it is now, or None when it cannot be stat'ed (then nothing is cached for it)."""
    try:
        st = os.stat(lf.path)
    except OSError:
        return None
    return (str(lf.path), st.st_size, st.st_mtime_ns, st.st_ino)


class ScanCache:
    """Least-recently-used map of (file identity, consumer key) to :class:`FileResult` (thread-safe)."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[tuple[FileKey, str], Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, fk: FileKey | None, key: str) -> Any:
        if fk is None:
            return None
        with self._lock:
            v = self._items.get((fk, key))
            if v is None:
                self.misses += 1
                return None
            self._items.move_to_end((fk, key))
            self.hits += 1
            return v

    def put(self, fk: FileKey | None, key: str, value: Any) -> None:
        if fk is None:
            return
        with self._lock:
            self._items[(fk, key)] = value
            self._items.move_to_end((fk, key))
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._items)


CACHE = ScanCache()
"""The process's cache (the MCP server keeps it across tool calls; a CLI run lives one call)."""

_companions: ContextVar[tuple[Consumer, ...]] = ContextVar("scan_companions", default=())
_default_companions: tuple[Consumer, ...] = ()


def companions() -> tuple[Consumer, ...]:
    """Consumers scanned along with any job scan now: the ones of :func:`together`, else the process defaults."""
    return _companions.get() or _default_companions


def set_default_companions(consumers: Sequence[Consumer]) -> None:
    """Scan these along with every job scan of this process (the server: every tool's consumers, so the agent's
    first call reads the files for all the calls after it)."""
    global _default_companions
    _default_companions = tuple(consumers)


@contextmanager
def together(*consumers: Consumer) -> Iterator[None]:
    """Within the block, the first job scan also runs ``consumers`` (for a tool that asks several questions)."""
    token = _companions.set(tuple(consumers) + _default_companions)
    try:
        yield
    finally:
        _companions.reset(token)


def standard_consumers() -> tuple[Consumer, ...]:
    """The consumers of the tools an agent calls in a row (grep's defaults, the NCCL table, the clock anchors, the
    diagnosis evidence, the launcher facts every attempt split reads), as their tools' own scans declare them:
    scanned together, each later call is a cache hit."""
    from debug_training_logs.analysis import evidence, launcher
    from debug_training_logs.analysis.alignment import WORKER_PATTERNS, WorkerClockSink
    from debug_training_logs.analysis.grep import GrepSink
    from debug_training_logs.analysis.grep_patterns import DEFAULT_PATTERNS
    from debug_training_logs.analysis.inventory import consumer_for
    from debug_training_logs.analysis.nccl_table import NCCL_PATTERNS, NcclSink

    return (
        consumer_for([g.regex for g in DEFAULT_PATTERNS], GrepSink),
        consumer_for(NCCL_PATTERNS, NcclSink),
        consumer_for(WORKER_PATTERNS, WorkerClockSink),
        evidence.evidence_consumer(),
        launcher.consumer(),
    )
