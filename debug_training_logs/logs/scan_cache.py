"""Scan results kept per file for the life of the process, so a sequence of tool calls on the same job reads its
files once.

An agent calls ``job_overview``, ``grep_all_ranks``, ``nccl_state_table``, ``timeline``, ``diagnose`` and
``verify_conclusion`` on the same directory, each needing its own patterns. :func:`inventory.scan_job` scans for
every :class:`Consumer` asked for *plus the companions in force* (:func:`together`, :func:`set_default_companions`)
in one pass, and stores each consumer's per-file result here; a later call whose consumers are all stored for every
file (same path, size, mtime and inode) reads nothing.

Keys: (file identity, consumer key). A consumer's key names its sink and hashes its patterns, dense flags and case
mode, so a different question is never answered from another's result. The entries live in the process's one cache
(:data:`~debug_training_logs.memo.MEMO`), bounded by their bytes; per-file results are the sinks' small summaries,
never lines of the file, and they are kept packed (compressed pickles, made in the worker that scanned the file): a
job's results cost a few times less than as objects, and only the tool that reads one unpacks it.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.scan_types import FileScan, SinkFactory
from debug_training_logs.memo import MEMO, Memo, Packed, settle


@dataclass(frozen=True, repr=False, eq=False)
class Consumer:
    """One reader of the shared job scan: its patterns and the sink that receives their hits in each file.

    ``name`` must say what the sink computes (module and class); ``dense`` lists pattern indices whose per-step lines
    are sampled (``PatternSpec.dense``)."""

    name: str
    patterns: tuple[str, ...]
    sink: SinkFactory | None
    dense: frozenset[int] = frozenset()
    ignore_case: bool = False
    refine: Callable[[Any, FileScan], Any] | None = None
    """Run on the sink's result (not None) with the file's scan (head, tail, lines), in the worker that scanned the
    file, before the result is packed: per-file work on it is done there, in parallel. Part of the key."""

    @functools.cached_property
    def key(self) -> str:
        """The name, the refine and a hash of the patterns, dense flags and case mode (worked out once: a job's scan
        asks for it per file)."""
        h = hashlib.sha1(repr((self.patterns, sorted(self.dense), self.ignore_case)).encode()).hexdigest()[:16]
        refined = "" if self.refine is None else f"+{self.refine.__module__}.{self.refine.__qualname__}"
        return f"{self.name}{refined}:{h}"


@dataclass(repr=False, eq=False)
class FileResult:
    """One consumer's share of one file's scan, as kept in the cache: its sink's result packed
    (:func:`~debug_training_logs.memo.unpack` it, or :func:`~debug_training_logs.memo.unpack_item` one item of a
    tuple result)."""

    counts: list[int]
    sink_result: Packed
    sampled: set[int] = field(default_factory=set)

    @property
    def nbytes(self) -> int:
        return self.sink_result.nbytes + 120 + 40 * len(self.counts) + 100 * len(self.sampled)


def settled(fr: FileResult) -> FileResult:
    """``fr`` as this process keeps it: its packed result compressed with the process's dictionary
    (:func:`~debug_training_logs.memo.settle`)."""
    packed = settle(fr.sink_result)
    return fr if packed is fr.sink_result else FileResult(fr.counts, packed, fr.sampled)


ALIKE_MAX_BYTES = 1024
"""A packed result this short may be another file's too (a consumer's empty share: its pickles, compressed or not, are
the same bytes): :class:`Alike` keys it by its bytes."""


class Alike:
    """Equal per-file results held once within a job's scan: most files get the same share from a consumer that found
    nothing there (zero counts, empty lists), and a job of 100,000 small files held a copy of each per file. A
    result's counts and samples are read, never changed (:class:`~debug_training_logs.analysis.inventory_views._Results`
    copies them), so equal ones can be one object; so can its packed result when it is short (:data:`ALIKE_MAX_BYTES`:
    long ones are the file's own)."""

    def __init__(self) -> None:
        self._held: dict[Any, Any] = {}

    def __call__(self, fr: FileResult) -> FileResult:
        counts = self._one(("counts", *fr.counts), fr.counts)
        sampled = self._one(("sampled", *sorted(fr.sampled)), fr.sampled)
        packed = fr.sink_result
        if len(packed.data) <= ALIKE_MAX_BYTES:
            packed = self._one(("packed", packed.ends, packed.data), packed)
        same = counts is fr.counts and sampled is fr.sampled and packed is fr.sink_result
        one: FileResult = self._one(
            ("result", id(counts), id(sampled), id(packed)), fr if same else FileResult(counts, packed, sampled)
        )
        return one

    def _one(self, key: Any, value: Any) -> Any:
        return self._held.setdefault(key, value)


FileKey = tuple[str, int, int, int]
"""(absolute path, size, mtime in ns, inode): a changed file is a different file."""


def file_key(lf: LogFile) -> FileKey | None:
    """The identity of ``lf`` as it is now, or None when it cannot be stat'ed (then nothing is cached for it)."""
    try:
        st = os.stat(lf.path)
    except OSError:
        return None
    return (str(lf.path), st.st_size, st.st_mtime_ns, st.st_ino)


SCAN = "scan"
"""The kind of the :data:`~debug_training_logs.memo.MEMO` entries that hold scan results."""


class ScanCache:
    """(file identity, consumer key) -> packed result, kept in the process's one byte-bounded cache
    (:data:`~debug_training_logs.memo.MEMO`, least recently used out; thread-safe)."""

    def __init__(self, memo: Memo = MEMO) -> None:
        self.memo = memo

    def get(self, fk: FileKey | None, key: Hashable) -> Any:
        if fk is None:
            return None
        return self.memo.get((SCAN, fk, key))

    def put(self, fk: FileKey | None, key: Hashable, value: Any, nbytes: int) -> None:
        if fk is not None:
            self.memo.put((SCAN, fk, key), value, nbytes)

    def clear(self) -> None:
        """Empty the process's whole cache (scan results, tool results, checkpoints): a test's fresh start."""
        self.memo.clear()


CACHE = ScanCache()
"""The process's scan results (the MCP server keeps them across tool calls; a CLI run lives one call)."""

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
