"""What reads a :class:`~debug_training_logs.analysis.inventory_types.JobScan`'s per-file results: :class:`PerFile`
(each file's result unpacked on access) and the item readers :func:`result_item` and :func:`result_size`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from debug_training_logs.analysis.inventory_views import _Results
from debug_training_logs.lazy import LazySequence

if TYPE_CHECKING:
    from debug_training_logs.analysis.inventory_types import JobScan

R = TypeVar("R")


class PerFile(LazySequence[R]):
    """Each file's sink result of a scan (or item ``k`` of it, a tuple), unpacked one file at a time on access,
    ``kind(rel)`` where a file's result is not a ``kind`` (its sink returned nothing): a fold walks a job's files
    without holding every file's objects at once."""

    def __init__(self, job: JobScan, kind: Callable[[str], R], k: int | None = None) -> None:
        self.job, self.kind, self.k = job, kind, k

    def __len__(self) -> int:
        return len(self.job.caller_results)

    def _at(self, i: int) -> R:
        got = self.job.caller_results[i] if self.k is None else result_item(self.job, i, self.k)
        return got if isinstance(got, self.kind) else self.kind(self.job.inventory.files[i].rel)  # type: ignore[arg-type]


def result_size(job: JobScan, i: int) -> int:
    """How many items file ``i``'s (tuple) sink result has (0 for no result), without unpacking it."""
    res = job.caller_results
    if isinstance(res, _Results):
        p = res.per_file[i].sink_result
        if p.items:
            return p.count
    r = res[i]
    return 0 if r is None else len(r)


def result_item(job: JobScan, i: int, k: int) -> Any:
    """Item ``k`` of file ``i``'s sink result (a tuple), unpacking only that item when the scan's results are packed."""
    res = job.caller_results
    if isinstance(res, _Results):
        return res.item(i, k)
    r = res[i]
    return None if r is None else r[k]
