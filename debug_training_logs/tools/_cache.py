"""A small per-process cache of analysis results, keyed by the files they were computed from.

Paging and filtering (``offset``, ``ranks``, ``daemon`` ...) call a tool again on the same logs; without a cache each
page would read every file again. The key is the directory and every discovered file's name, size and mtime
(:func:`~debug_training_logs.logs.sources.files_key`), so a changed, added or removed file means a new scan. The
entries share the process's one byte-bounded cache (:data:`~debug_training_logs.memo.MEMO`) with the scan results and
checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TypeVar

from debug_training_logs.logs.sources import files_key
from debug_training_logs.memo import MEMO, estimate

T = TypeVar("T")
TOOL = "tool"
"""The kind of the :data:`~debug_training_logs.memo.MEMO` entries that hold tool results."""
ATTEMPTS = "attempts"
"""The job's attempts (``extra``: None): one split per job, whichever tool made it."""
NCCL_TABLE = "nccl_state_table"
"""The job's whole NCCL state table (``extra``: (world size asked for, attempt chosen))."""

__all__ = ["ATTEMPTS", "NCCL_TABLE", "TOOL", "cached", "cached_under", "files_key", "keep"]


def cached(kind: str, root: Path, extra: Hashable, compute: Callable[[], T], *, archives: bool = False) -> T:
    """``compute()``, or its earlier result for the same ``kind``, ``extra`` arguments and unchanged files
    (``archives``: the analysis reads .tar.gz archives too, so they are part of the key). Kept in the process's one
    cache (:data:`~debug_training_logs.memo.MEMO`) at its estimated size, so a big table may push older entries out;
    not kept within :func:`~debug_training_logs.memo.one_command` (the CLI)."""
    if not MEMO.keep_results:  # one CLI command: no later call would read it
        return compute()
    return cached_under(kind, extra, files_key(root, archives), compute)


def cached_under(kind: str, extra: Hashable, files: Hashable, compute: Callable[[], T]) -> T:
    """:func:`cached` with the files' key worked out by the caller (``files``: :func:`files_key`, or a key of several
    trees' files)."""
    if not MEMO.keep_results:
        return compute()
    key = (TOOL, kind, extra, files)
    got = MEMO.get(key)
    if got is not None:
        return got[0]  # type: ignore[no-any-return]
    value = compute()
    MEMO.put(key, (value,), estimate(value))  # in a 1-tuple: a result that is None is kept too
    return value


def keep(files: Hashable, *results: tuple[str, Hashable, object]) -> None:
    """Keep each (kind, extra, value) of ``results`` as what :func:`cached` would compute for that kind and extra
    over the files whose key is ``files`` (:func:`files_key` of a logs directory now): results one tool worked out on
    its way that another tool asks for (the attempts and the NCCL table that ``diagnose`` builds). Not within
    :func:`~debug_training_logs.memo.one_command`."""
    if not MEMO.keep_results or not results:
        return
    for kind, extra, value in results:
        MEMO.put((TOOL, kind, extra, files), (value,), estimate(value))
