"""SLURM's cancel lines (slurmstepd), as far as attempts need them: which cancel puts the job back in the queue.

slurmstepd writes ``*** JOB 4242 ON node01 CANCELLED AT 2026-11-20T10:00:00 DUE TO PREEMPTION ***`` (or ``STEP
4242.0``) into the job's output, prefixed ``slurmstepd: error:`` (``slurmstepd-node01: error:`` on newer releases).
A requeue (``scontrol requeue``, preemption in REQUEUE mode, a node failure with ``--requeue``) runs the batch script
again, and with ``--open-mode=append`` its output lands after that line in the same file: a new attempt, which
:mod:`~debug_training_logs.analysis.attempts` only accepts when the job visibly starts again after it. The reason
text is ``DUE TO <REASON>`` (``DUE to SIGNAL Terminated`` since Slurm 25.05); a plain ``scancel`` before 25.05 has
no reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CANCEL_REGEX = r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT "
"""The cancel line, for the launcher scan (RE2 syntax)."""

_CANCEL = re.compile(
    r"\*\*\* (?P<what>JOB|STEP) (?P<id>\S+) ON (?P<host>\S+) CANCELLED AT (?P<at>\S+)"
    r"(?: DUE (?:TO|to) (?P<reason>.+?))? \*\*\*"
)
SCHEDULER_REASONS = ("TIME LIMIT", "PREEMPTION", "JOB REQUEUE")
"""Reasons the scheduler ends a job on its own account (not a node's or a task's failure); a cancel line without
``DUE TO`` is an operator's ``scancel``."""


def scheduler_ended(line: str) -> bool:
    """True for a slurmstepd cancel line the scheduler wrote for its own reasons (:data:`SCHEDULER_REASONS`, or no
    reason: an operator's scancel), not because a node or a task failed."""
    m = _CANCEL.search(line)
    if m is None:
        return False
    reason = m.group("reason")
    return reason is None or any(reason.startswith(r) for r in SCHEDULER_REASONS)


REQUEUE_REASONS = ("JOB REQUEUE", "PREEMPTION", "NODE FAILURE")
"""Reasons after which SLURM may run the job again (a requeue, preemption in REQUEUE mode, a node failure with
``--requeue``); a time limit, a task failure or a signal end the job."""


@dataclass(frozen=True, repr=False, eq=False)
class SlurmCancel:
    """One slurmstepd cancel line."""

    entity: str
    """``JOB`` (the batch step) or ``STEP``."""
    job_id: str
    host: str
    at: str
    """``CANCELLED AT`` as written (local time, ``%Y-%m-%dT%H:%M:%S`` unless ``SLURM_TIME_FORMAT`` changed it)."""
    reason: str | None
    """The text after ``DUE TO``, e.g. ``PREEMPTION`` or ``NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS``."""

    @property
    def may_requeue(self) -> bool:
        """Whether SLURM may run the job again after this cancel (see :data:`REQUEUE_REASONS`)."""
        return self.reason is not None and self.reason.upper().startswith(REQUEUE_REASONS)

    @property
    def failure(self) -> bool:
        """Whether the attempt it ends failed (a node failure) rather than being put back (requeue, preemption)."""
        return self.reason is not None and self.reason.upper().startswith("NODE FAILURE")


def parse_cancel(text: str) -> SlurmCancel | None:
    """The cancel line in ``text`` (any prefix before it), or None."""
    if "CANCELLED AT" not in text:
        return None
    m = _CANCEL.search(text)
    if m is None:
        return None
    return SlurmCancel(m.group("what"), m.group("id"), m.group("host"), m.group("at"), m.group("reason"))
