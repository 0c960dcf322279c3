"""This test process's child processes, for tests that a scan's worker processes all end (Linux ``/proc``)."""

from __future__ import annotations

import os
from pathlib import Path


def children() -> set[int]:
    """The pids of this process's children, of every thread."""
    out: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        out |= {int(p) for p in (task / "children").read_text().split()}
    return out
