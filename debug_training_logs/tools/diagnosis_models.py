"""The result of ``diagnose`` (its contract, as MCP returns it and ``--json`` prints it): the job's details, the
verdict, the timeline table, the root-cause chain, key files, recommendations, the verification and the rank states.

Types only: :mod:`~debug_training_logs.tools.diagnosis_result` fills them, the printers read them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from debug_training_logs.history.types import HistoryNote
from debug_training_logs.models import Coverage, Model
from debug_training_logs.tools.attempts_view import AttemptSummary
from debug_training_logs.verify import Conclusion, Verification
from debug_training_logs.verify.models import Category

TIMELINE_LIMIT = 40
"""Rows of the timeline table (the chain's events first, then context)."""


class JobDetails(Model):
    """What kind of job it was."""

    framework: str = Field(description="NeMo / Megatron-LM / Lightning / Ray / plain PyTorch, as the logs show.")
    scale: str = Field(description="Ranks and nodes, e.g. '16 ranks on 2 nodes'.")
    world_size: int | None
    nodes: list[str]
    start_time: str | None = Field(description="Earliest time in the logs (worker local clock; zone not written).")
    end_time: str | None = Field(description="Latest time in the logs (worker local clock).")
    data_source: str = Field(description="AIStore / Lhotse / none seen.")
    torch: str = Field(description="Torch version family the watchdog messages imply.")
    logs: str = Field(description="Files and bytes read (worker and AIS).")


class VerdictModel(Model):
    """The root cause (contract)."""

    category: Category
    culprit_ranks: list[int] = Field(description="Global ranks established as the cause of the failure.")
    suspect_nodes: list[str]
    confidence: Literal["high", "medium", "low"]
    explanation: str = Field(description="Why, in a paragraph a person can check against the cited lines.")
    next_steps: list[str] = Field(description="What to fetch or look at next when the evidence cannot decide.")
    missing_ranks: list[int] = Field(default_factory=list, description="Ranks of the world whose logs are missing.")
    suspect_ranks: list[int] = Field(
        default_factory=list, description="Ranks that look behind or silent but are not established culprits."
    )
    blocked: list[str] = Field(
        default_factory=list,
        description="When a stronger verdict was not presented: the verdict and the verifier check that blocked it.",
    )
    provisional: bool = Field(
        default=False,
        description="True when only a subset of the ranks was read: the shape is what the evidence shows, the "
        "ranks it points at are suspect_ranks, and a hidden rank may hold an earlier failure.",
    )
    suspect_processes: list[str] = Field(
        default_factory=list,
        description="A failed worker known only by node, local rank and pid (no line maps it to a global rank).",
    )
    action: str = Field(
        default="",
        description="What to do now, in one line: restart as is, restart without node X, stop and fix (config, "
        "data, code), or collect what is missing.",
    )


class RankStateGroup(Model):
    """Ranks in the same state at the end of the job (one row per state; crashed ranks grouped by cause)."""

    state: str = Field(
        description="finished, crashed, watchdog_killed, waiting (inside a collective), stuck (alive, outside the "
        "stuck collective), torn_down (stopped by the launcher/SLURM after another failure), exited_early (left "
        "without an error while its peers still waited for it), absent (no log), unknown."
    )
    ranks: str = Field(description="Global ranks (range string, e.g. '0-4,6-15').")
    count: int
    why: str = Field(description="The deciding fact for the first rank of the group.")
    source: str | None = Field(default=None, description="file:line of the deciding line, when there is one.")


class TimelineEntry(Model):
    """One row of the timeline table."""

    time_local: str | None = Field(
        description="Worker local clock (ISO 8601, no zone: worker logs do not say it); AIS events converted through "
        "the verified alignment. None when the line has no time (see time_note)."
    )
    time_utc: str | None = Field(description="UTC, when the alignment established the workers' zone.")
    unaligned: bool = Field(description="An AIS event that could not be put on the worker clock (its AIS time shown).")
    clock: Literal["worker", "ais"] = Field(
        default="worker", description="Whose line it is: a worker log's or an AIS daemon log's."
    )
    time_note: str = Field(description="How the time is known: exact, bounded by neighbouring lines, AIS clock.")
    source: str = Field(description="file:line (relative to logs_dir or ais_dir).")
    ranks: str = Field(description="Global ranks involved (range string).")
    event: str
    text: str = Field(description="The cited line (cut at ~300 characters).")


class ChainLink(Model):
    """One step of the root-cause chain, trigger first."""

    step: int
    event: str
    time_local: str | None = Field(description="Worker local clock, when known (see time_note).")
    time_note: str
    source: str
    text: str


class KeyFile(Model):
    file: str
    why: str


class RecommendationModel(Model):
    area: str = Field(description="Storage-side, Client-side, Training config, Operations, Evidence to collect.")
    text: str
    because: str


class Diagnosis(Model):
    """The diagnosis of a failed job (contract), with the verifier's verdict on it."""

    summary: str
    job: JobDetails
    verdict: VerdictModel
    timeline: list[TimelineEntry]
    timeline_truncated: int
    root_cause_chain: list[ChainLink]
    key_files: list[KeyFile]
    recommendations: list[RecommendationModel]
    conclusion: Conclusion = Field(description="The verdict as a conclusion (what verify_conclusion was given).")
    verification: Verification
    coverage: Coverage
    rank_states: list[RankStateGroup] = Field(
        default_factory=list,
        description="Every rank's state at the end of the job, grouped (the facts the category follows from).",
    )
    attempts: list[AttemptSummary] = Field(
        default_factory=list,
        description="The job's attempts when it was restarted (elastic restarts, requeues); empty for one attempt.",
    )
    attempt: int | None = Field(
        default=None, description="The attempt this diagnosis is about (default: the first failed one)."
    )
    html_report_uri: str | None = Field(
        default=None,
        description="With html_report=true: the URI of the HTML report (a text/html resource this server serves; "
        "the result also carries it as a resource link). A person opens it in a browser; do not read it into a "
        "model's context.",
    )
    history: HistoryNote | None = Field(
        default=None,
        description="What the job history says: whether this diagnosis was recorded, and when this job's culprit "
        "node, AIS daemon or failure signature was seen in earlier failures ('third time in 14 days'), with the "
        "action that suggests. Null when the history is off.",
    )


# ---------------------------------------------------------------------------------------------------------------------
# Building the result
