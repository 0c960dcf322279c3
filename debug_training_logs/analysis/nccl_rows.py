"""The NCCL state table's result types (plain data; ``tools/nccl_state_table.py`` exposes them as pydantic models
with descriptions): rows, per-PG verdicts, outliers, facts, time basis and the whole :class:`NcclTable`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Coverage


@dataclass(repr=False)
class EvidenceLine:
    """A cited line (``models.Evidence`` in the tool's result)."""

    file: str
    line: int
    text: str


@dataclass(repr=False)
class Row:
    """One (global rank, process group) that logged NCCL watchdog state."""

    rank: int
    pg: str | None
    pg_desc: str | None
    pg_rank: int | None
    seq: int | None = None
    op_type: str | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    timeout_ms: int | None = None
    ran_for_ms: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    pending: int | None = None
    signal: str = "none"
    first_to_dump: bool = False
    """This rank is the job's first_dump_rank (the one whose dump signal the others reacted to) and detected here."""
    signalled_dump: bool = False
    """The rank logged 'First PG on this rank to signal dumping' (2.7+) / 'First watchdog to set the dump signal'
    (2.4) for this PG: its own watchdog raised the dump locally (every rank that timed out says so)."""
    dump_signal_from_rank: int | None = None
    timeout_time: str | None = None
    timeout_time_utc: str | None = None
    timeout_time_year_inferred: bool = False
    collective_start_time: str | None = None
    signal_time: str | None = None
    pg_id: str | None = None
    file: str | None = None
    line: int | None = None
    facts: list[str] = field(default_factory=list)
    stale_rank_label: int | None = None
    """The ``[Rank N]`` WorkNCCL printed when it differs from the PG rank (stale static, torch 2.4-2.13)."""


@dataclass(repr=False)
class Majority:
    """The (seq, enqueued, completed, op, signal) most of a PG's rows share, and which ranks."""

    seq: int | None
    op_type: str | None
    last_enqueued: int | None
    last_completed: int | None
    signal: str
    ranks: str
    count: int


@dataclass(repr=False)
class ProcessGroupResult:
    """One PG's verdict from all its rows (field meanings: ``tools/nccl_state_table.ProcessGroup``)."""

    pg: str | None
    pg_desc: str | None
    is_default_pg: bool
    ranks: str
    rank_count: int
    classification: str
    reason: str
    straggler_ranks: list[int] = field(default_factory=list)
    suspect_ranks: list[int] = field(default_factory=list)
    ahead_ranks: list[int] = field(default_factory=list)
    ahead_by: int | None = None
    ahead_steps: float | None = None
    absent_ranks: str = ""
    absent_pg_ranks: str = ""
    missing_ranks: str = ""
    majority: Majority | None = None
    pg_ids: list[str] = field(default_factory=list)
    straggler_reasons: dict[str, str] = field(default_factory=dict)
    """Per straggler/suspect rank: why, in words."""


@dataclass(repr=False)
class Outlier:
    """A row that differs from its PG's majority: ``differs`` maps field -> [its value, the majority's]."""

    rank: int
    pg: str | None
    differs: dict[str, list[Any]]
    how: str


@dataclass(repr=False)
class RankFact:
    """A neighbouring fact (watchdog terminated, heartbeat kill, exit signal ...) and the ranks that logged it."""

    kind: str
    detail: str
    ranks: str
    count: int
    evidence: EvidenceLine | None


@dataclass(repr=False)
class TimeBasis:
    """How the table's times read: worker-local wall clock, year from full dates elsewhere in the logs."""

    year: int | None
    year_inferred: bool
    zone: str
    year_evidence: str = ""
    """Where the year comes from (a line that writes a full date), or why times are shown without one."""


@dataclass(repr=False)
class UnattributedTimeout:
    """Timeouts whose global rank no line names (<= 2.2 output of several ranks in one file, no ``[rankN]:``)."""

    seq: int | None
    op_type: str
    timeout_ms: int
    pg_local_ranks: str
    """The ``[Rank N]`` values the lines print: PG-local ranks, equal to global ranks only in a single-PG job."""
    count: int
    evidence: EvidenceLine


@dataclass(repr=False)
class NcclTable:
    """The whole result of :func:`nccl_state_table`."""

    summary: str
    coverage: Coverage
    rows: list[Row]
    rows_total: int
    rows_truncated: int
    ranks_without_nccl_state: str
    missing_ranks: str
    process_groups: list[ProcessGroupResult]
    outliers: list[Outlier]
    outliers_truncated: int
    straggler_ranks: list[int]
    first_dump_rank: int | None
    rank_facts: list[RankFact]
    evidence: list[EvidenceLine]
    time_basis: TimeBasis
    message_families: list[str]
    unattributed_lines: int
    unattributed_timeouts: list[UnattributedTimeout]
    unparsed_samples: list[EvidenceLine]
    unparsed_lines: int
    rejoined_messages: int
    deduplicated_lines: int
