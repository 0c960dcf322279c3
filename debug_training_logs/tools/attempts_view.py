"""How tools show a job's attempts (elastic restarts, requeues): one compact model shared by every tool."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from debug_training_logs.analysis.attempts import DEFAULT_YEAR, Attempts
from debug_training_logs.models import Evidence, Model
from debug_training_logs.ranges import format_ranges


class AttemptSummary(Model):
    """One run of the workers."""

    attempt: int = Field(description="0 for the first run; N for the N-th restart (torchrun attempt_N).")
    ranks: str = Field(description="Ranks seen failing or logging in it (range string).")
    start: str | None = Field(description="When it started (worker local clock; '--MM-DDTHH:MM:SS' without a year).")
    end: str | None = Field(description="When it ended (the agent's stop), same clock.")
    outcome: str = Field(
        description="failed, requeued (SLURM put the job back in the queue: requeue or preemption), succeeded or "
        "unknown."
    )
    evidence: list[Evidence] = Field(description="The lines where it ends (agent stops, restarts, success).")


def _t(t: datetime | None) -> str | None:
    if t is None:
        return None
    return t.strftime("--%m-%dT%H:%M:%S") if t.year == DEFAULT_YEAR else t.isoformat(timespec="seconds")


def summaries(att: Attempts | None, limit: int = 20) -> list[AttemptSummary]:
    """The attempts as tools return them (at most ``limit``, the first ones)."""
    if att is None:
        return []
    return [
        AttemptSummary(
            attempt=a.index,
            ranks=format_ranges(a.ranks),
            start=_t(a.start),
            end=_t(a.end),
            outcome=a.outcome,
            evidence=a.evidence[:4],
        )
        for a in att.attempts[:limit]
    ]
