"""What a conclusion is and what the verifier answers (contract): :class:`Conclusion`, :class:`Check`,
:class:`Verification`.

Plain pydantic definitions, no logic: the rules are listed in :mod:`debug_training_logs.verify.rules`.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field

from debug_training_logs.models import Coverage, Evidence, Model

Category = Literal[
    "data_loading_stall",
    "storage_errors",
    "gpu_fabric",
    "cuda_oom",
    "cuda_error",
    "rank_crash",
    "collective_mismatch",
    "early_exit",
    "time_limit",
    "node_failure",
    "watchdog_hang",
    "checkpoint_stall",
    "rank_stuck",
    "address_in_use",
    "launch_failure",
    "no_failure",
    "incomplete_evidence",
    "nccl_timeout_unattributed",
]
CATEGORIES: tuple[str, ...] = get_args(Category)

CheckStatus = Literal["passed", "failed", "undecided", "not_applicable"]


class CitedEvent(Model):
    """A log line the conclusion rests on (its time, when given, is only the caller's reading: it is re-derived)."""

    file: str = Field(description="Path relative to logs_dir (worker logs) or ais_dir (AIS daemon logs).")
    line: int = Field(ge=1, description="1-based line number in the (decompressed) file.")
    text: str = Field(description="The line as cited (a ~300-character cut is fine).")
    time: str | None = Field(default=None, description="When it happened, as the caller read it (ISO 8601).")


class ChainStep(Model):
    """One link of the causal chain, trigger first."""

    event: str = Field(description="What happened, in a few words.")
    file: str = Field(description="Path relative to logs_dir or ais_dir.")
    line: int = Field(ge=1, description="1-based line number.")
    time: str | None = Field(default=None, description="When, as the caller read it (ISO 8601).")


class Conclusion(Model):
    """A claim about why a job failed, to be checked against the logs (contract)."""

    logs_dir: str = Field(description="Directory with every rank's worker logs.")
    ais_dir: str | None = Field(default=None, description="Directory with the AIStore daemon logs, when used.")
    hang_dir: str | None = Field(
        default=None,
        description="Directory of what was collected during a live hang (py-spy dumps, NCCL RAS, nvidia-smi, dmesg), "
        "when it is not in or next to logs_dir: the conclusion is checked against those stacks too.",
    )
    category: Category = Field(description="The root-cause category.")
    culprit_ranks: list[int] = Field(
        default_factory=list,
        description="Global ranks established as the cause (the straggler, the rank that crashed first...). Only "
        "established culprits: ranks whose logs are missing go in missing_ranks, ranks that only look suspicious in "
        "suspect_ranks.",
    )
    missing_ranks: list[int] = Field(
        default_factory=list,
        description="Ranks of the world whose logs are missing (for incomplete_evidence: all of them).",
    )
    suspect_ranks: list[int] = Field(
        default_factory=list,
        description="Ranks that look behind or silent but are not established culprits (not checked as culprits).",
    )
    suspect_nodes: list[str] = Field(default_factory=list, description="Nodes (host names) suspected.")
    provisional: bool = Field(
        default=False,
        description="True when the conclusion rests on a subset of the ranks (a paste, one node's file, missing "
        "ranks): its suspect_ranks are then checked as the ranks it points at, and no culprit is established.",
    )
    root_cause_event: CitedEvent | None = Field(default=None, description="The triggering log line.")
    chain: list[ChainStep] = Field(default_factory=list, description="Trigger to final crash, in order.")
    evidence: list[Evidence] = Field(default_factory=list, description="Other cited lines.")
    tz_offset_hours: float | None = Field(
        default=None, description="Worker clock minus AIS clock in hours, when the conclusion relates the two."
    )
    rank0_seq_gap: int | None = Field(
        default=None,
        description="For a claim that rank 0 is ahead: by how many collectives (last enqueued) it is ahead.",
    )
    attempt: int | None = Field(
        default=None,
        ge=0,
        description="For a restarted job: the attempt the conclusion is about (0 = the first run), as diagnose's "
        "attempt; default the first failed one.",
    )
    world_size: int | None = Field(
        default=None,
        ge=1,
        le=1 << 20,
        description="The job's world size when the logs do not state it (from the launch command: nodes x GPUs), "
        "as given to diagnose; it replaces what the logs say.",
    )


class Check(Model):
    """The outcome of one rule."""

    rule: str = Field(description="The rule's name.")
    passed: bool = Field(description="True when the rule holds or does not apply (see status).")
    status: CheckStatus = Field(
        description="passed; failed (the logs contradict the conclusion); undecided (the logs cannot prove it: "
        "counts as failed); not_applicable (the rule has nothing to check here, and detail says why)."
    )
    detail: str = Field(description="What was checked and what the logs show.")
    evidence: list[Evidence] = Field(default_factory=list, description="The lines the rule used (bounded).")
    evidence_truncated: int = Field(default=0, description="Lines used but not listed.")
    next_step: str = Field(default="", description="When not passed: what to look at or fetch next.")


class Verification(Model):
    """Accepted or rejected, one entry per rule."""

    summary: str = Field(description="Accepted or rejected, and the first reasons.")
    accepted: bool = Field(description="True when every check passed or did not apply.")
    checks: list[Check]
    coverage: Coverage
