"""The verdict: what the diagnosis concludes and what it rests on (filled by
:func:`~debug_training_logs.analysis.diagnosis.conclude`; read by the verdict policy, the recommendations and the
printers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from debug_training_logs.analysis.evidence_types import KeyEvent


@dataclass
class Verdict:
    """What the diagnosis concludes, with what it rests on."""

    category: str
    culprit_ranks: list[int]
    suspect_nodes: list[str]
    confidence: str
    """``high`` (direct, ordered evidence), ``medium`` (inferred from structure), ``low`` (the logs cannot decide)."""
    explanation: str
    root: KeyEvent | None
    chain: list[KeyEvent]
    timeline: list[KeyEvent]
    key_files: list[tuple[str, str]]
    """(file, why it matters)."""
    next_steps: list[str]
    tz_offset_hours: float | None = None
    rank0_seq_gap: int | None = None
    missing_ranks: list[int] = field(default_factory=list)
    """Ranks of the world whose logs are missing (never culprits: nothing is established about them)."""
    suspect_ranks: list[int] = field(default_factory=list)
    """Ranks that look behind or silent but are not established culprits."""
    blocked: list[str] = field(default_factory=list)
    """When a stronger verdict was not presented: what blocked it (the verifier's failed checks)."""
    details: dict[str, Any] = field(default_factory=dict)
    """Facts the recommendations key on (``memory_creep``, ``nan``, ``port``, ``resets_retried``...)."""
