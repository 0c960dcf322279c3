"""What identifies a job across analyses, and what identifies its failure across jobs.

* **Identity** (:class:`~debug_training_logs.history.types.JobName`): the SLURM job id and the attempt when the job
  id is known (given by the caller, as the SLURM epilog does with ``$SLURM_JOB_ID``, or named alike by every log
  file: ``error-<JOBID>-<N>.out``, ``slurm-<JOBID>.out``, ``train.<JOBID>.<host>.err``), else the resolved logs
  directory and the attempt. Analysing a job again (the same copy, another copy of its logs, with AIS logs added)
  updates its one record.
* **Signature** (:func:`signature`): the category plus the normalised first primary event (its line with numbers,
  times, ranks, PIDs, addresses, paths and host names masked, as ``grep_all_ranks`` templates lines), hashed to a
  short id: two jobs that failed the same way on different ranks, nodes, steps or days share it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import PurePath

from debug_training_logs.analysis.templates import template_of

_ID_TOKEN = re.compile(r"^\d{3,}$")
"""A job id in a file name: a run of 3+ digits between separators (a node or task index is shorter)."""
_SEPARATORS = re.compile(r"[-_.]")
_HOST_INDEX = re.compile(r"^\d+$")


def job_id_from_files(names: Iterable[str]) -> str | None:
    """The SLURM job id every log file name agrees on, or None.

    Per file (its base name), the 3+-digit tokens between ``-``, ``_`` and ``.``; the id is the one token that
    every file having such tokens shares (``error-48213-0.out`` and ``error-48213-1.out``: 48213). Files without a
    long number (``stderr.log``, ``rank-3.log``) do not vote; files of two jobs mixed give None."""
    common: set[str] | None = None
    for name in names:
        tokens = {t for t in _SEPARATORS.split(PurePath(name).name) if _ID_TOKEN.match(t)}
        if not tokens:
            continue
        common = tokens if common is None else common & tokens
        if not common:
            return None
    if not common or len(common) != 1:
        return None
    return next(iter(common)).lstrip("0") or "0"


def signature(category: str, event: str) -> tuple[str, str]:
    """(short id, normalised event) of a failure: the category and the event's template."""
    normalised = template_of(event) if event.strip() else "(no event)"
    digest = hashlib.sha256(f"{category}\n{normalised}".encode()).hexdigest()[:12]
    return f"{category}:{digest}", normalised


def is_host_name(name: str) -> bool:
    """Whether ``name`` names a machine (a node index taken from a file name, ``0``, does not: node 0 of one job is
    not node 0 of another)."""
    return bool(name.strip()) and not _HOST_INDEX.match(name.strip())


def iso_time(text: str | None) -> str | None:
    """``text`` as ``YYYY-MM-DDTHH:MM:SS`` when it is an ISO 8601 time with a date (a time without a year is None)."""
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t.replace(tzinfo=None).isoformat(timespec="seconds")
