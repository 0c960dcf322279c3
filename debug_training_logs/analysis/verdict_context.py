"""What every step of the decision procedure reads, computed once per job: :class:`VerdictContext` (the
evidence, its triggers, the first symptom, when the stuck collective started and the failure's own course)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from debug_training_logs.analysis.evidence_types import JobEvidence, KeyEvent, NcclState, Trigger, WorkerEvidence


@dataclass
class VerdictContext:
    """What every decision step reads (computed once)."""

    ev: JobEvidence
    trig: list[Trigger]
    symptom: KeyEvent | None
    start: datetime | None
    tail: list[KeyEvent]

    @property
    def w(self) -> WorkerEvidence:
        return self.ev.worker

    @property
    def nccl(self) -> NcclState:
        return self.ev.nccl

    def nodes_of(self, ranks: Iterable[int]) -> list[str]:
        return sorted({n for r in ranks if (n := self.w.node_of_rank(r)) is not None})
