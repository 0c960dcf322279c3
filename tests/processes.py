"""This test process's child processes, for tests that a scan's worker processes all end (Linux ``/proc``)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def children() -> set[int]:
    """The pids of this process's children, of every thread (a thread that ends while they are listed had none
    left: its task is gone)."""
    out: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            out |= {int(p) for p in (task / "children").read_text().split()}
    return out
