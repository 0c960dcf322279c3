"""The flight-recorder part of a tool's answer: the per-PG table of the stuck groups in wavefront order (the group
that stalled first and the ranks it waits for on top), the ranks the dumps accuse, and rows of the ranks a group
waits for beside the NCCL table's log rows.

The table reads like torch's own analyzer (PG, desc, op, sizes, dtype, missing ranks) and adds what it does not say:
which group stalled first, and which missing ranks are already stuck elsewhere. Every list is bounded (a 10,000-rank
job has thousands of groups): rank sets are range strings cut at ``fr_types.RANKS_CHARS``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import ConfigDict, Field

from debug_training_logs.analysis.fr_types import short_ranges
from debug_training_logs.models import Model

if TYPE_CHECKING:
    from debug_training_logs.analysis.fr_types import FlightRecorderFacts, GroupFacts

GROUPS_SHOWN = 12
"""Stuck groups listed (stalled first); the rest are counted."""
REFUSED_SHOWN = 20
EXPLAINED_SHOWN = 3
"""Distinct places a group's missing ranks already wait in, listed per group."""


def utc(ns: int | None) -> str | None:
    """``time_created_ns`` (the rank's wall clock, epoch ns) as ISO 8601 UTC."""
    if ns is None or not 0 < ns < 1 << 63:
        return None
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class FrGroupRow(Model):
    """One process group the dumps show stuck (or mismatched): what it waits in and for whom."""

    model_config = ConfigDict(from_attributes=True)

    order: int | None = Field(description="Wavefront position: 0 = the group that stalled first (roots first).")
    pg: str = Field(description="The group's name (pg_config / process_group[0]).")
    desc: str = Field(description="The group's description (TENSOR_MODEL_PARALLEL_GROUP, default_pg, ...).")
    size: int = Field(description="Members (from pg_config; gloo: the ranks that recorded it).")
    ranks: str = Field(description="Its members (range string).")
    seq: int | None = Field(description="collective_seq_id of the stuck collective.")
    op: str | None = Field(description="Its op (all_reduce, all_to_all, ...).")
    input_sizes: str | None = Field(description="Its input sizes as recorded (one list per tensor).")
    dtype: str | None
    state: str | None = Field(description="The joiners' state: scheduled / started.")
    stalled_at: str | None = Field(description="When its first member entered it (UTC, from time_created_ns).")
    joined: int = Field(description="Members whose dump has the stuck collective.")
    never_joined: str = Field(description="Members with a dump and no entry for it (range string).")
    no_dump: str = Field(description="Members without a dump (range string): nothing known, possibly the cause.")
    behind: str = Field(default="", description="Joined, but scheduled while others started.")
    ahead: str = Field(default="", description="Recorded collectives past the stuck one.")
    mismatch: str | None = Field(default=None, description="Op/size/dtype mismatch: seq, field, odd ranks, majority.")
    waits_for: str = Field(description="The ranks it waits for that nothing else explains (range string).")
    explained: list[str] = Field(
        default_factory=list,
        description="Missing ranks already stuck in another group before this one stalled: 'ranks where they wait'.",
    )
    explained_more: int = Field(default=0, description="More such places, not listed.")
    evidence: list[str] = Field(
        default_factory=list, description="For the ranks it waits for: 'file entry N: what the entry says'."
    )
    last_calls: list[str] = Field(
        default_factory=list, description="For the ranks it waits for: their last recorded call and its frames."
    )


class FlightRecorderSummary(Model):
    """The flight-recorder dumps: read, refused, the per-PG table and the ranks they accuse."""

    dumps: int = Field(description="Dumps read (one per rank).")
    versions: list[str] = Field(description="Dump format versions ('2.10' for torch 2.13/2.14).")
    refused: list[str] = Field(description="'file: reason' for each dump not read (hostile, over the cap, damaged).")
    world_size: int | None = Field(default=None, description="Ranks the dumps know of (their groups' members).")
    world_evidence: str = ""
    no_dump_ranks: str = Field(default="", description="Ranks of that world without a dump (range string).")
    culprit_ranks: list[int] = Field(
        default_factory=list, description="Where the hang starts, every member of their stuck group dumped."
    )
    suspect_ranks: list[int] = Field(
        default_factory=list, description="Where the hang may start (a member's dump is missing, or a cycle)."
    )
    how: str = Field(default="none", description="mismatch, never_joined, behind, no_dump, cycle, all_joined, none.")
    never_joined: list[int] = Field(
        description="Ranks that never joined a stuck collective and wait in no earlier one: the hang's roots."
    )
    waiting_elsewhere: str = Field(
        default="", description="Ranks missing from a stuck collective because they already wait in another group."
    )
    mismatched: list[int] = Field(description="Ranks that scheduled a different op/size/dtype at the same seq.")
    process_groups: list[FrGroupRow] = Field(
        default_factory=list, description="The stuck or mismatched groups, stalled first (roots on top)."
    )
    process_groups_total: int = Field(default=0, description="Stuck or mismatched groups in all.")
    healthy_groups: int = Field(default=0, description="Groups whose recorded collectives all completed.")
    detail: list[str] = Field(description="The table as lines: PG, desc, op, sizes, dtype, who it waits for.")


def _row(g: GroupFacts) -> FrGroupRow:
    s = g.stuck
    mm = g.mismatches[0] if g.mismatches else None
    odd = ", ".join(f"{r}: {v}" for r, v in list(mm.odd.items())[:4]) if mm else ""
    waits = g.roots
    by_where: dict[str, list[int]] = {}
    for r, why in g.explained.items():
        by_where.setdefault(why, []).append(r)
    return FrGroupRow(
        order=g.order,
        pg=g.pg,
        desc=g.desc,
        size=len(g.ranks),
        ranks=short_ranges(g.ranks, 60),
        seq=s.seq if s else None,
        op=s.op if s else None,
        input_sizes=str(s.input_sizes) if s else None,
        dtype=",".join(s.dtypes) if s else None,
        state=s.state if s else None,
        stalled_at=utc(s.stalled_ns) if s else None,
        joined=len(s.joined) if s else 0,
        never_joined=short_ranges(g.never_joined),
        no_dump=short_ranges(g.no_dump),
        behind=short_ranges(g.behind),
        ahead=short_ranges(g.ahead),
        mismatch=f"seq {mm.seq} {mm.field}: rank(s) {odd} vs {mm.majority or 'no majority'}" if mm else None,
        waits_for=short_ranges(waits),
        explained=[f"{short_ranges(rs, 60)} {why}" for why, rs in list(by_where.items())[:EXPLAINED_SHOWN]],
        explained_more=max(0, len(by_where) - EXPLAINED_SHOWN),
        evidence=[f"{c.file} entry {c.index}: {c.text}" for r in waits[:3] if (c := g.cited.get(r))],
        last_calls=[f"rank {r} {' < '.join(g.last_calls[r][:4])}" for r in waits[:2] if r in g.last_calls],
    )


def table_line(row: FrGroupRow) -> str:
    """``#0 PG 5 TENSOR_MODEL_PARALLEL_GROUP (2 ranks 8-9): all_reduce seq 7 in=[[8]] Float scheduled; never joined:
    9; waits for 9``."""
    what = f"{row.op} seq {row.seq} in={row.input_sizes} {row.dtype} {row.state}" if row.op else "no stuck collective"
    parts = [f"#{row.order if row.order is not None else '-'} PG {row.pg} {row.desc} ({row.size} ranks {row.ranks})"]
    parts.append(f": {what}")
    for label, value in (("never joined", row.never_joined), ("no dump", row.no_dump), ("behind", row.behind)):
        if value:
            parts.append(f"; {label}: {value}")
    if row.mismatch:
        parts.append(f"; mismatch {row.mismatch}")
    parts.append(f"; waits for {row.waits_for}" if row.waits_for else "; every missing rank waits elsewhere")
    return "".join(parts)


def summarize(facts: FlightRecorderFacts) -> FlightRecorderSummary:
    """The summary model of ``facts``."""
    acc = facts.accused()
    shown = facts.stuck_groups
    rows = [_row(g) for g in shown[:GROUPS_SHOWN]]
    roots = {r for g in shown for r in g.roots}
    never = {r for g in shown for r in g.never_joined if r in g.roots}
    elsewhere = {r for g in shown for r in g.explained} - roots
    return FlightRecorderSummary(
        dumps=len(facts.dumps),
        versions=facts.versions,
        refused=[f"{x.file}: {x.reason}" for x in facts.refused[:REFUSED_SHOWN]]
        + ([f"… {len(facts.refused) - REFUSED_SHOWN} more"] if len(facts.refused) > REFUSED_SHOWN else []),
        world_size=len(facts.world) or None,
        world_evidence=facts.world_evidence,
        no_dump_ranks=short_ranges(facts.no_dump),
        culprit_ranks=sorted(acc.culprits),
        suspect_ranks=sorted(acc.suspects),
        how=acc.how,
        never_joined=sorted(never),
        waiting_elsewhere=short_ranges(elsewhere),
        mismatched=sorted({r for g in shown for m in g.mismatches for r in m.odd}),
        process_groups=rows,
        process_groups_total=len(shown),
        healthy_groups=len(facts.groups) - len(shown),
        detail=[table_line(r) for r in rows],
    )


def sentence(facts: FlightRecorderFacts) -> str:
    """One sentence for a summary: how many dumps, and where the hang starts."""
    acc = facts.accused()
    n = f"{len(facts.dumps)} of {len(facts.world)} ranks" if facts.world else str(len(facts.dumps))
    first = facts.stuck_groups[0] if facts.stuck_groups else None
    where = ""
    if first is not None and first.stuck is not None:
        where = f" in {first.label()} {first.stuck.op} seq {first.stuck.seq}"
    who = []
    if acc.culprits:
        who.append(f"rank(s) {short_ranges(acc.culprits)} never joined{where}" if acc.how != "mismatch" else
                   f"rank(s) {short_ranges(acc.culprits)} scheduled a different collective{where}")  # fmt: skip
    if acc.suspects:
        who.append(f"suspect(s) {short_ranges(acc.suspects)} ({acc.how.replace('_', ' ')})")
    if not who:
        who.append("no rank singled out" + (f" ({acc.how.replace('_', ' ')}{where})" if first is not None else ""))
    return f" Flight-recorder dumps ({n}): {'; '.join(who)}."
