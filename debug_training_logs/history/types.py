"""The history's plain data: what one diagnosis records (:class:`JobRecord`) and what the queries answer.

The record is a frozen dataclass (what the store writes); the answers are result models (``Model``) because the
``job_history`` tool and the ``diagnose`` result carry them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from debug_training_logs.models import Model

Kind = Literal["node", "daemon"]
"""What was implicated: a worker node (host) or an AIStore daemon."""
Role = Literal["culprit", "suspect", "in_chain"]
"""How: it hosts a culprit rank; it is a suspect (a suspect node, or it hosts suspect ranks); an AIS daemon whose
lines are in the root-cause chain."""

NO_FAILURE = "no_failure"
"""The category of a job that did not fail: recorded, never counted as a failure."""


@dataclass(frozen=True, repr=False)
class Implicated:
    """One node or daemon a diagnosis implicated."""

    kind: Kind
    name: str
    role: Role
    ranks: str = ""
    """The job's culprit/suspect ranks on that node (range string); empty for a daemon."""


@dataclass(frozen=True)
class JobName:
    """How the history knows a job: its SLURM job id when known, else its (resolved) logs directory; and the attempt."""

    slurm_job_id: str | None
    attempt: int | None
    logs_dir: str

    @property
    def key(self) -> str:
        """The job's identity in the history (see :mod:`~debug_training_logs.history.record`)."""
        base = f"slurm:{self.slurm_job_id}" if self.slurm_job_id else f"dir:{self.logs_dir}"
        return base if self.attempt is None else f"{base}#attempt={self.attempt}"

    @property
    def label(self) -> str:
        """How a job is named in answers: ``4817303``, ``4817310 attempt 1``, else its logs directory."""
        base = self.slurm_job_id or self.logs_dir
        return base if self.attempt is None else f"{base} attempt {self.attempt}"


@dataclass(frozen=True, repr=False)
class JobRecord:
    """What one diagnosis records. ``key`` is the job's identity: recording the same key again updates the record."""

    key: str
    slurm_job_id: str | None
    attempt: int | None
    logs_dir: str
    ais_dir: str | None
    job_start: str | None
    """Earliest time in the logs (worker local clock, ISO 8601 when a year is known)."""
    job_end: str | None
    failed_at: str
    """Where the job sits in time (``YYYY-MM-DDTHH:MM:SS``): its end in the logs, else its start, else when it was
    recorded (UTC). Orders the history and places it in periods and windows."""
    recorded_at: str
    """When this diagnosis was recorded (UTC, ISO 8601)."""
    category: str
    confidence: str
    verified: bool
    culprit_ranks: str
    suspect_ranks: str
    signature: str
    """A short stable id of (category, normalised first primary event): equal signatures are the same failure."""
    signature_event: str
    """The normalised first primary event (numbers, times, ranks, hosts, paths masked)."""
    summary: str
    implicated: tuple[Implicated, ...] = ()

    @property
    def name(self) -> JobName:
        return JobName(self.slurm_job_id, self.attempt, self.logs_dir)


class JobRef(Model):
    """One recorded job, as the answers list it."""

    job: str = Field(description="SLURM job id (with the attempt when the job was restarted), else its logs directory.")
    failed_at: str = Field(description="When it failed (its last log time, worker clock; else when it was recorded).")
    category: str
    role: str | None = Field(default=None, description="How the node/daemon asked about was implicated in it.")
    culprit_ranks: str = Field(default="", description="Its culprit ranks (range string).")
    logs_dir: str = Field(default="", description="Its logs directory (in a node's, daemon's or signature's job list).")


class Offender(Model):
    """A node or AIS daemon implicated in several of the recent failures."""

    kind: Kind
    name: str
    failures: int = Field(description="How many of the recent failures it was implicated in.")
    of_last: int = Field(description="Out of this many recent failures (the window asked for).")
    as_culprit: int = Field(description="Of those, how many had a culprit rank on it.")
    categories: dict[str, int] = Field(description="Failures per category.")
    first_seen: str
    last_seen: str
    jobs: list[JobRef] = Field(description="Its latest failures, newest first (job_history(node=...) lists all).")
    jobs_truncated: int = 0


class RecurringSignature(Model):
    """A failure signature seen in several of the recent failures."""

    signature: str = Field(description="Stable id of (category, normalised first primary event).")
    category: str
    event: str = Field(description="The normalised first primary event (variable parts masked).")
    failures: int
    first_seen: str
    last_seen: str
    nodes: list[str] = Field(
        description="Nodes and daemons implicated in its latest (up to 50) failures, most often first."
    )
    jobs: list[JobRef] = Field(description="Its latest failures, newest first (job_history(signature=...): all).")
    jobs_truncated: int = 0


class CategoryCount(Model):
    """The failures of one period, per category."""

    period: str = Field(description="2026-W21 (ISO week), 2026-05-21 (day) or 2026-05 (month).")
    failures: int
    categories: dict[str, int] = Field(description="Failures per category in the period, most first.")


class SeenBefore(Model):
    """One thing of this job that earlier failures share (a node, a daemon, or the signature)."""

    what: Literal["node", "daemon", "signature"]
    name: str = Field(description="The node, the daemon, or the signature's normalised event.")
    role: str | None = Field(default=None, description="How it is implicated in this job.")
    earlier: int = Field(description="Earlier failures within the window that share it.")
    window_days: int
    jobs: list[JobRef] = Field(description="Those earlier failures, newest first (at most a few).")


class HistoryNote(Model):
    """What the history says about this job (``diagnose``): recorded or not, and what earlier failures it shares."""

    recorded: bool = Field(description="Whether this diagnosis was recorded (re-analysing a job updates its record).")
    job: str | None = Field(default=None, description="The job's identity in the history.")
    store: str | None = Field(default=None, description="Where the history is (a path, or a DSN without password).")
    seen_before: list[SeenBefore] = Field(default_factory=list)
    note: str | None = Field(
        default=None,
        description="One sentence: this job's node or signature was seen before ('third time in 14 days').",
    )
    action: str | None = Field(
        default=None, description="What the history suggests doing (restart without node X ...)."
    )
    error: str | None = Field(
        default=None, description="Why the history could not be read or written (the diagnosis itself is unaffected)."
    )
