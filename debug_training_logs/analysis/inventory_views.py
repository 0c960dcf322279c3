"""Lazy per-file views of a job scan's packed results (each file unpacked on access, never all at once): the files'
facts, their items, one consumer's results, and :func:`file_result_item`. What reads them from a
:class:`~debug_training_logs.analysis.inventory_types.JobScan` is in :mod:`inventory_results`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

from debug_training_logs.lazy import LazySequence
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.scan_cache import FileResult
from debug_training_logs.logs.scan_types import FileScan
from debug_training_logs.memo import Packed, unpack, unpack_item


class _Bases(LazySequence[FileScan]):
    """Each file's own facts (lines, ranks, head, tail, problem), unpacked on each access: a job's files are read one
    by one and let go, never all held at once."""

    def __init__(self, found: Sequence[LogFile], bases: Sequence[Packed]) -> None:
        self.found, self.bases = found, bases

    def __len__(self) -> int:
        return len(self.bases)

    def _at(self, i: int) -> FileScan:
        b: FileScan = unpack_item(self.bases[i], 0)
        return replace(b, file=self.found[i])


R = TypeVar("R")


class _Items(LazySequence[R]):
    """Item ``k`` of each file's packed scan (1: its :class:`FileFacts`, 2: its :class:`_FileShare`), unpacked on
    access."""

    def __init__(self, bases: Sequence[Packed], k: int) -> None:
        self.bases = bases
        self.k = k

    def __len__(self) -> int:
        return len(self.bases)

    def _at(self, i: int) -> R:
        return unpack_item(self.bases[i], self.k)  # type: ignore[no-any-return]


class _Results(LazySequence[Any]):
    """One consumer's per-file sink results, unpacked on access (the latest one is kept: callers walk
    ``zip(job.files, job.caller_results)``, which asks for each file's result twice in a row)."""

    def __init__(self, per_file: Sequence[FileResult]) -> None:
        self.per_file = per_file
        self._last: tuple[int, Any] = (-1, None)

    def __len__(self) -> int:
        return len(self.per_file)

    def _at(self, i: int) -> Any:
        last = self._last  # read once: another thread may walk the same scan
        if last[0] != i:
            last = self._last = (i, unpack(self.per_file[i].sink_result))
        return last[1]

    def item(self, i: int, k: int) -> Any:
        """Item ``k`` of file ``i``'s (tuple) result, without unpacking the rest of it; None for no result."""
        if i < 0:
            i += len(self)
        last = self._last
        if last[0] == i:
            return None if last[1] is None else last[1][k]
        return file_result_item(self.per_file[i], k)


class _Files(LazySequence[FileScan]):
    """One consumer's view of the job's files: each file's facts with its counts (its sink result is not unpacked
    here: read ``JobScan.caller_results``, or :func:`result_item` for one item of it)."""

    def __init__(self, bases: _Bases, per_file: Sequence[FileResult]) -> None:
        self.bases, self.per_file = bases, per_file

    def __len__(self) -> int:
        return len(self.per_file)

    def _at(self, i: int) -> FileScan:
        r = self.per_file[i]
        b = self.bases[i]
        b.counts, b.sampled = list(r.counts), set(r.sampled)
        return b


def file_result_item(fr: FileResult, k: int) -> Any:
    """Item ``k`` of one file's (tuple) sink result as the cache keeps it, unpacking only that item; None for no
    result."""
    p = fr.sink_result
    if p.items:
        return unpack_item(p, k)
    got = unpack(p)
    return None if got is None else got[k]
