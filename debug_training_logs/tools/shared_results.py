"""What several tools read of one job, worked out once per process and kept under one key whichever tool made it:
the job's attempts (``job_overview`` and ``diagnose`` split them, the tools that pick an attempt read them) and its
whole NCCL state table (``nccl_state_table`` pages it, ``timeline`` and ``align_timezones`` read its first rows,
``diagnose`` builds it on its way to the verdict)."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

from debug_training_logs.analysis.attempts import Attempts
from debug_training_logs.analysis.evidence_types import JobEvidence
from debug_training_logs.analysis.nccl_rows import NcclTable
from debug_training_logs.analysis.nccl_table import WHOLE, nccl_state_table
from debug_training_logs.tools._cache import ATTEMPTS, NCCL_TABLE, cached, files_key, keep


def whole_table(logs: Path) -> NcclTable:
    """The NCCL state table of every line of ``logs`` (no attempt picked out, the world size the logs state), every
    row; ``nccl_table.limited`` of it is the table of a smaller limit."""
    return cached(NCCL_TABLE, logs, (None, None), lambda: nccl_state_table(logs, limit=WHOLE))


def keep_attempts(logs: Path, split: Attempts) -> None:
    """Keep the attempts of ``logs`` that ``job_overview`` or ``diagnose`` split on their way, for the tools that pick
    an attempt (``tools.attempt_choice``: the same split of the same launcher facts)."""
    keep(files_key(logs), (ATTEMPTS, None, split))


def share(files: Hashable, ev: JobEvidence, world_size: int | None) -> None:
    """Keep what ``diagnose``'s evidence worked out that the other tools read, under the key of the logs' ``files``
    (:func:`~debug_training_logs.tools._cache.files_key`): the job's attempts, and the NCCL table when it is
    :func:`whole_table` (one attempt: no attempt's lines were picked out; no world size given)."""
    if ev.attempts is None:
        return
    results: list[tuple[str, Hashable, object]] = [(ATTEMPTS, None, ev.attempts)]
    if ev.attempts.count <= 1 and world_size is None:
        results.append((NCCL_TABLE, (None, None), ev.nccl.table))
    keep(files, *results)
