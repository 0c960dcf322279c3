"""A small per-process cache of analysis results, keyed by the files they were computed from.

Paging and filtering (``offset``, ``ranks``, ``daemon`` ...) call a tool again on the same logs; without a cache each
page would read every file again. The key is the directory and every discovered file's name, size and mtime, so a
changed, added or removed file means a new scan. Only the last few results are kept (one entry is one table).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

from debug_training_logs.logs.discovery import discover

T = TypeVar("T")
MAX_ENTRIES = 4

_lock = threading.Lock()
_entries: OrderedDict[Hashable, Any] = OrderedDict()


def files_key(root: Path, archives: bool = False) -> tuple[Hashable, ...]:
    """What a result over ``root`` depends on: every file's relative path, size and mtime (and the skipped ones)."""
    found, skipped = discover(root, include_archives=archives)
    stamps = []
    for f in found:
        try:
            stamps.append((f.rel, f.size, f.path.stat().st_mtime_ns))
        except OSError:
            stamps.append((f.rel, f.size, -1))
    return (str(root), tuple(stamps), tuple((s.rel, s.reason) for s in skipped))


def cached(kind: str, root: Path, extra: Hashable, compute: Callable[[], T], *, archives: bool = False) -> T:
    """``compute()``, or its earlier result for the same ``kind``, ``extra`` arguments and unchanged files
    (``archives``: the analysis reads .tar.gz archives too, so they are part of the key)."""
    key = (kind, extra, files_key(root, archives))
    with _lock:
        if key in _entries:
            _entries.move_to_end(key)
            return _entries[key]  # type: ignore[no-any-return]
    value = compute()
    with _lock:
        _entries[key] = value
        while len(_entries) > MAX_ENTRIES:
            _entries.popitem(last=False)
    return value
