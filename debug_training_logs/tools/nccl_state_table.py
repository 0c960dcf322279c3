"""``nccl_state_table``: every rank's NCCL watchdog state per process group, and who the straggler is.

Drill-down instead of a dump (the classification always uses every row): by default the answer lists each PG's
majority as one row (``process_groups[].majority``), every deviating rank (``outliers``, grouped in
``outlier_groups``) and the full rows of the deviating ranks only. Every row is reachable by paging (``offset``/
``limit`` over the rows in PG order, then rank order; ``next_offset`` says where the next page starts) or by
naming ranks (``ranks="5,11"``).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import ConfigDict, Field

from debug_training_logs import meanwhile
from debug_training_logs.analysis import attempts
from debug_training_logs.analysis import nccl_table as analysis
from debug_training_logs.analysis.inventory import lean_inventory
from debug_training_logs.analysis.nccl_hits import FileEvents
from debug_training_logs.analysis.nccl_rows import NcclTable
from debug_training_logs.errors import UserInputError
from debug_training_logs.logs.scan_cache import FileResult
from debug_training_logs.memo import unpack
from debug_training_logs.models import Coverage, Evidence, Model
from debug_training_logs.paths import input_dir
from debug_training_logs.ranges import format_ranges, parse_ranges
from debug_training_logs.tools._cache import NCCL_TABLE, cached
from debug_training_logs.tools.attempt_choice import choose
from debug_training_logs.tools.attempts_view import AttemptSummary, summaries
from debug_training_logs.tools.budget import Cut
from debug_training_logs.tools.fr_view import FlightRecorderSummary
from debug_training_logs.tools.params import WorldSize
from debug_training_logs.tools.registry import ToolSpec

if TYPE_CHECKING:  # read where the dumps are read (while the scan runs): the scan needs none of it
    from debug_training_logs.analysis import fr_dumps


class _Model(Model):
    model_config = ConfigDict(from_attributes=True)


class _Evidence(Evidence):
    model_config = ConfigDict(from_attributes=True)


class NcclRow(_Model):
    """One (global rank, process group) that logged NCCL watchdog state."""

    rank: int = Field(description="Global rank (from [rankN]:, a Ray/srun prefix; never the PG-local [Rank N]).")
    pg: str | None = Field(
        description="The process group as logged: PG GUID/name (torch 2.4+), else its uid (2.3); null when the "
        "torch version names no PG (<= 2.2). SeqNums are only comparable within one pg."
    )
    pg_desc: str | None = Field(description="PG description (default_pg, DATA_PARALLEL_GROUP, ...) when logged.")
    pg_rank: int | None = Field(description="This rank's rank inside the PG (from the PG prefix).")
    pg_id: str | None = Field(description="The per-process PG uid printed as 'PG ID n' (2.5+) or 'PG n' (2.3).")
    seq: int | None = Field(description="SeqNum of the work that timed out on this rank (null: none timed out here).")
    op_type: str | None = Field(description="OpType of that work: ALLREDUCE, BROADCAST, _ALLGATHER_BASE, RECV ...")
    numel_in: int | None = Field(description="NumelIn of the work (elements), when logged (torch 2.1+).")
    numel_out: int | None = Field(description="NumelOut of the work (elements), when logged (torch 2.1+).")
    timeout_ms: int | None = Field(description="The work's Timeout(ms).")
    ran_for_ms: int | None = Field(description="How long the work had run when the watchdog caught it (ms).")
    last_enqueued: int | None = Field(description="Last SeqNum this rank's CPU enqueued in this PG.")
    last_completed: int | None = Field(description="Last SeqNum whose GPU completion this rank observed in this PG.")
    pending: int | None = Field(
        description="last_enqueued - last_completed: 0 means NO work in flight (the rank never entered the "
        "collective the others wait in: the straggler signature); >0 means it is waiting inside NCCL."
    )
    signal: str = Field(
        description="detected: this rank's own watchdog caught the timeout; observed: it only reacted to another "
        "rank's dump signal; none: neither logged."
    )
    first_to_dump: bool = Field(
        description="This rank is the job's first_dump_rank (whose dump signal the others reacted to) and detected "
        "the timeout here: usually a victim that timed out first, not the cause."
    )
    signalled_dump: bool = Field(
        description="Logged 'First PG on this rank to signal dumping' (2.7+) / 'First watchdog to set the dump signal' "
        "(2.4): this rank's own watchdog raised the dump (every rank that timed out logs it)."
    )
    dump_signal_from_rank: int | None = Field(
        description="R of 'dump signal ... from rank R': the global rank that set the TCPStore key first (usually a "
        "victim that timed out first, not the cause)."
    )
    timeout_time: str | None = Field(
        description="When the watchdog logged the timeout, worker-local time (no zone in the lines): ISO 8601 with "
        "the year another line of the job states (timeout_time_year_inferred, time_basis.year_evidence), or "
        "'MM-DD HH:MM:SS' exactly as the c10 header wrote it when no line states a year; null before torch 2.4 (no "
        "time in the header)."
    )
    timeout_time_utc: str | None = Field(
        description="timeout_time in UTC when the workers' offset is known, else null."
    )
    timeout_time_year_inferred: bool = Field(description="True when the year is not in the line but inferred.")
    collective_start_time: str | None = Field(
        description="When the hung collective started: timeout_time - ran_for_ms (timeout_ms when ran_for is not "
        "logged), rounded to the second, in the same form as timeout_time; ran_for is used because it stays right "
        "when the watchdog itself was late."
    )
    signal_time: str | None = Field(description="When the rank logged the dump signal (worker-local, year inferred).")
    file: str | None = Field(description="File of the line cited for this row (status line, else timeout, else dump).")
    line: int | None = Field(description="1-based line number of that line.")
    facts: list[str] = Field(
        description="Neighbouring facts for this rank: watchdog_terminated, heartbeat_monitor_kill, terminated_fatal, "
        "blocking_wait_timeout, watchdog_exit_message, 'exit: SIGABRT (exitcode -6)'."
    )
    stale_rank_label: int | None = Field(
        description="The [Rank N] WorkNCCL printed when it differs from pg_rank (a stale cached value, torch "
        "2.4-2.13); shown so it is not mistaken for a rank."
    )
    source: str = Field(
        default="log",
        description="Where the row comes from: 'log' (watchdog lines) or 'dump' (a flight-recorder dump: seq is "
        "the collective the group waits in, or this rank's last scheduled one; file is the dump).",
    )


class Majority(_Model):
    """The state most of a PG's ranks share."""

    seq: int | None
    op_type: str | None
    last_enqueued: int | None
    last_completed: int | None
    signal: str
    ranks: str = Field(description="Ranks in the majority (range string).")
    count: int


class ProcessGroup(_Model):
    """One process group, classified from ALL its rows."""

    pg: str | None
    pg_desc: str | None
    is_default_pg: bool = Field(description="The world/default PG (GUID 0 / default_pg): every rank is a member.")
    ranks: str = Field(description="Ranks that logged state for this PG (range string).")
    rank_count: int
    classification: str = Field(
        description="straggler (named only from a rank's own lines, or its absence while every rank of a known world "
        "is in the logs) | fabric (every member, 2 or more, entered and detected, coverage complete) | root_ahead (PG "
        "rank 0 ahead by ahead_by ops) | mismatch (ranks timed out in different collectives: SeqNum/OpType differ) | "
        "mixed | incomplete (world size unknown, ranks missing, members unidentified or rows without a PG label: "
        "nothing is concluded from a subset)."
    )
    reason: str = Field(description="The classification in words, with the numbers it rests on.")
    straggler_ranks: list[int] = Field(description="Global ranks that stalled this PG (only for 'straggler').")
    straggler_reasons: dict[str, str] = Field(description="Global rank (as text) -> why it is a straggler or suspect.")
    suspect_ranks: list[int] = Field(
        description="For incomplete/mixed: ranks that look behind among those seen (NOT a conclusion)."
    )
    ahead_ranks: list[int]
    ahead_by: int | None = Field(description="For root_ahead: how many ops rank 0 is ahead.")
    ahead_steps: float | None = Field(description="ahead_by / 3 collectives per NeMo/DDP training step.")
    absent_ranks: str = Field(description="Members that logged no state for this PG (inferred for sub-PGs).")
    absent_pg_ranks: str = Field(description="PG ranks that logged nothing and could not be mapped to a global rank.")
    missing_ranks: str = Field(description="Ranks missing from every file that could be members.")
    majority: Majority | None
    pg_ids: list[str] = Field(description="PG uids seen for this PG ('PG ID n').")


class Outlier(_Model):
    """A row that differs from its PG's majority."""

    rank: int
    pg: str | None
    differs: dict[str, list[Any]] = Field(description="field -> [this rank's value, majority value].")
    how: str = Field(description="What the difference means.")


class OutlierGroup(_Model):
    """Deviating rows that differ from their PG's majority in the same way: one entry, with their ranks."""

    pg: str | None
    ranks: str = Field(description="Global ranks of the group (range string).")
    count: int
    fields: list[str] = Field(description="The fields that differ from the majority.")
    how: str = Field(description="What the difference means (as for each outlier).")
    example: Outlier = Field(description="The group's first outlier in full (values of this rank vs the majority).")


class RankFact(_Model):
    """A neighbouring fact and the ranks that logged it."""

    kind: str = Field(
        description="watchdog_terminated, heartbeat_monitor_kill ('watchdog got stuck for N seconds'), "
        "terminated_fatal, blocking_wait_timeout, watchdog_exit_message, exit_signal (ChildFailedError)."
    )
    detail: str
    ranks: str = Field(description="Range string.")
    count: int
    evidence: _Evidence | None = Field(description="The first such line.")


class TimeBasis(_Model):
    """How to read the times."""

    year: int | None = Field(description="The year used for MMDD timestamps (from full dates elsewhere in the logs).")
    year_inferred: bool
    zone: str
    year_evidence: str = Field(description="Which line the year comes from, or why times are shown without one.")


class UnattributedTimeout(_Model):
    """Timeouts no line attributes to a global rank (torch <= 2.2 output of several ranks in one file)."""

    seq: int | None
    op_type: str
    timeout_ms: int
    pg_local_ranks: str = Field(
        description="The [Rank N] the lines print (range string): PG-local, the global rank only in a single-PG job."
    )
    count: int
    evidence: _Evidence


class NcclStateTable(_Model):
    """Every rank's NCCL watchdog state per process group, the per-PG classification and the straggler."""

    summary: str = Field(description="What a person would say after reading the table.")
    coverage: Coverage
    straggler_ranks: list[int] = Field(
        description="Job-level: ranks at the root of the hang (stragglers that never timed out themselves); empty "
        "when ranks are missing or no straggler pattern holds."
    )
    ranks_without_nccl_state: str = Field(
        description="Ranks in the logs that logged NO watchdog state (range string): prime suspects, not noise."
    )
    missing_ranks: str = Field(description="Ranks expected by the world size but absent from every file.")
    process_groups: list[ProcessGroup]
    rows: list[NcclRow] = Field(
        description="Rows per (rank, PG): all outlier/straggler rows first, then a sample of majority rows up to "
        "`limit` (the classification always uses ALL rows)."
    )
    rows_total: int
    rows_truncated: int = Field(description="Rows not listed (by the view, `ranks`, `offset`/`limit` or the budget).")
    rows_view: str = Field(
        default="deviating",
        description="deviating: `rows` are the deviating ranks' rows (outliers, stragglers, suspects, ahead ranks), "
        "the rest is each PG's majority; page: `rows` is a page of every row (PG order, then rank) from `rows_offset`.",
    )
    rows_offset: int = Field(default=0, description="Index of the first listed row in the paging order.")
    rows_matching: int = Field(default=0, description="Rows in the view (after the `ranks` filter) before paging.")
    next_offset: int | None = Field(
        default=None, description="`offset` of the next page (null: this page reaches the end of the view)."
    )
    outliers: list[Outlier] = Field(
        description="Rows whose (seq, enqueued, completed, op, signal) differ from the PG majority."
    )
    outliers_truncated: int
    outlier_groups: list[OutlierGroup] = Field(
        default_factory=list,
        description="Outliers that differ from their PG's majority in the same way, grouped with rank ranges and "
        "counts (every outlier counts, also those `limit` or the budget left out of `outliers`; single ones are only "
        "in `outliers`).",
    )
    first_dump_rank: int | None = Field(description="The rank whose dump signal others reacted to.")
    rank_facts: list[RankFact]
    evidence: list[_Evidence] = Field(description="Cited lines: stragglers' state, a majority row, the first to dump.")
    time_basis: TimeBasis
    message_families: list[str] = Field(description="Header/prefix/status wordings seen (which torch versions).")
    unattributed_lines: int = Field(description="Watchdog lines with no rank prefix in files holding several ranks.")
    unattributed_timeouts: list[UnattributedTimeout] = Field(
        description="Timeouts among those lines, per (SeqNum, OpType): they happened, but whose they are is unknown."
    )
    unparsed_samples: list[_Evidence] = Field(
        description="A sample of the unparsed watchdog-like lines (file:line): a wording this tool does not know."
    )
    unparsed_lines: int = Field(description="Candidate lines with a needle but no complete message (cut logs).")
    rejoined_messages: int = Field(description="Hard-wrapped or over-long messages re-joined from neighbouring lines.")
    deduplicated_lines: int = Field(
        description="Watchdog lines Ray folded away ('[repeated Nx across cluster]'); when > 0 every PG is "
        "incomplete: rerun with RAY_DEDUP_LOGS=0."
    )
    flight_recorder: FlightRecorderSummary | None = Field(
        default=None, description="What the flight-recorder dumps found in/next to logs_dir (or fr_dir) say."
    )
    attempts: list[AttemptSummary] = Field(
        default_factory=list, description="The job's attempts when it was restarted; empty for one attempt."
    )
    attempt: int | None = Field(
        default=None, description="The attempt whose lines the table is built from (default: the first failed one)."
    )


def nccl_state_table(
    logs_dir: Annotated[
        str, Field(description="Directory with every node's worker stderr/stdout logs (searched recursively).")
    ],
    limit: Annotated[
        int,
        Field(ge=1, le=100000, description="At most this many rows and outliers listed (classification uses all)."),
    ] = analysis.DEFAULT_LIMIT,
    fr_dir: Annotated[
        str | None,
        Field(
            description="Directory of flight-recorder dumps (<prefix><rank>, pickle or JSON) when they are not in or "
            "next to logs_dir; dumps are read with a restricted unpickler (plain data only)."
        ),
    ] = None,
    attempt: Annotated[
        int | None,
        Field(ge=0, description="For a restarted job: which attempt's lines to read (default: the first failed one)."),
    ] = None,
    world_size: WorldSize = None,
    offset: Annotated[
        int | None,
        Field(
            ge=0,
            description="Page through EVERY row (PG order, then rank) from this index, `limit` rows at a time "
            "(`next_offset` gives the next page). Omit it for the default view: the deviating ranks' rows only.",
        ),
    ] = None,
    ranks: Annotated[
        str | None,
        Field(description="Only rows of these global ranks, as a range string ('5', '0-7,64'); pages like offset."),
    ] = None,
) -> NcclStateTable:
    """For an NCCL timeout: ALL ranks' watchdog state, one row per (global rank, process group): SeqNum, OpType,
    Numel, timeout and ran-for, last enqueued / last completed work and pending, whether the rank detected the
    timeout itself or only observed another rank's dump signal, first-to-dump, the timeout time and when the
    collective started. Each PG is classified: straggler (rank(s) with enqueued == completed, observed instead of
    detected, or absent while the others wait), fabric (everyone entered and timed out: no straggler), root_ahead
    (rank 0 ahead by k ops ~ k/3 steps), mismatch (ranks in different collectives), mixed, or incomplete (world size
    unknown or ranks missing, e.g. one node's file or a pasted excerpt: no straggler is named from a subset).

    Every torch wording 1.x-2.14 is read (three header styles, four PG-prefix styles, PG-local and stale [Rank N]
    ignored for identity, timeouts repeated inside 'watchdog thread terminated' / what() / 'communicator was
    aborted', hard-wrapped lines re-joined wherever they break, gzip/zstd). Call it after job_overview whenever a
    watchdog timeout appears; check `ranks_without_nccl_state`, `missing_ranks`, `unattributed_timeouts` and
    `unparsed_samples` before trusting a straggler.

    The answer lists each PG's majority as one row and every deviating rank; the other rows are reached with
    `ranks` (those ranks' rows) or `offset`/`limit` (every row, page by page).
    """
    root = input_dir(logs_dir)
    wanted = _parse_ranks(ranks)
    table, split, chosen, dumps = _table(root, attempt, world_size, fr_dir)
    result = _page(table, offset, wanted, limit)
    if split.count > 1:
        result.attempts, result.attempt = summaries(split), chosen
        result.summary += (
            f" (attempt {chosen} of {split.count}; pass attempt=N for another)"
            if chosen is not None
            else f" (the logs show {split.count} attempts and none is known to have failed: this table reads them "
            "all together; pass attempt=N for one attempt's lines)"
        )
    facts = dumps[0] if dumps else _dumps(root, fr_dir)
    if facts.files_found:
        add_dump_rows(result, facts, limit, wanted, first_page=not offset)
    return result


def _table(
    root: Path, attempt: int | None, world_size: int | None, fr_dir: str | None
) -> tuple[NcclTable, attempts.Attempts, int | None, list[fr_dumps.FlightRecorderFacts]]:
    """The whole table of the chosen attempt (kept per files, attempt and world size), the attempts, the chosen one,
    and the flight-recorder dumps read while the scan's workers read the logs (empty when that failed)."""
    # one pass for the attempts and the table; of the inventory, the table reads only what coverage comes from
    dumps: list[fr_dumps.FlightRecorderFacts] = []

    def read_dumps() -> None:  # while the scan's workers read the logs; after it if it fails there or no scan runs
        with suppress(Exception):
            dumps.append(_dumps(root, fr_dir))

    with lean_inventory(), meanwhile.queued(read_dumps):
        mine = analysis.table_consumer()
        early: dict[str, FileEvents] = {}
        prepared: dict[str, analysis.FilePrep] = {}

        def arrived(_j: int, results: dict[str, FileResult]) -> None:
            # the table's input, unpacked while the scan's workers read the other files (the main process waits for
            # them there); only the whole job's lines: an attempt's table has a sink of its own
            fr = results.get(mine.key)
            fe = unpack(fr.sink_result) if fr is not None else None
            if isinstance(fe, FileEvents):
                early[fe.rel] = fe
                prepared[fe.rel] = analysis.FilePrep(fe)

        split, chosen = choose(root, attempt, mine, on_file=arrived)
        keep = split.keeper(chosen) if chosen is not None else None
        # Pages and rank filters of the same logs reuse one scan (the table is computed from every row either way).
        table = cached(
            NCCL_TABLE,
            root,
            (world_size, chosen),
            lambda: analysis.nccl_state_table(
                root,
                limit=analysis.WHOLE,
                world_size=world_size,
                keep=keep,
                early=early if keep is None else None,
                prepared=prepared if keep is None else None,
            ),
        )
        early.clear()
        prepared.clear()
    return table, split, chosen, dumps


def _page(table: NcclTable, offset: int | None, wanted: set[int] | None, limit: int) -> NcclStateTable:
    """The rows asked for: the deviating ranks' rows by default, else every row of ``wanted`` (or all) from
    ``offset``, ``limit`` at a time."""
    order = {p.pg: i for i, p in enumerate(table.process_groups)}
    rows = sorted(table.rows, key=lambda r: (order.get(r.pg, len(order)), r.rank))
    if offset is None and wanted is None:
        deviating = _deviating_keys(table)
        view, start = [r for r in rows if (r.rank, r.pg) in deviating], 0
    else:
        view, start = [r for r in rows if wanted is None or r.rank in wanted], offset or 0
    page = view[start : start + limit]
    end = start + len(page)
    paged = dataclasses.replace(
        table, rows=page, rows_truncated=table.rows_total - len(page), outliers=table.outliers[:limit]
    )
    result = NcclStateTable.model_validate(paged)
    result = result.model_copy(
        update={
            "rows_view": "deviating" if offset is None and wanted is None else "page",
            "rows_offset": start,
            "rows_matching": len(view),
            "next_offset": end if end < len(view) else None,
            "outliers_truncated": max(0, len(table.outliers) - limit),
            "outlier_groups": _outlier_groups(result.outliers if len(table.outliers) <= limit else table.outliers),
        }
    )
    return result


def _dumps(root: Path, fr_dir: str | None) -> fr_dumps.FlightRecorderFacts:
    from debug_training_logs.analysis import fr_dumps

    return fr_dumps.gather(root, input_dir(fr_dir, "flight-recorder directory") if fr_dir else None)


def add_dump_rows(
    table: NcclStateTable,
    facts: fr_dumps.FlightRecorderFacts,
    limit: int,
    wanted: set[int] | None = None,
    first_page: bool = True,
) -> None:
    """The dumps' per-PG table and summary, and rows (``source='dump'``, on the first page, only ``wanted`` ranks
    when given) of the ranks each stuck group waits for, stalled-first, beside the log rows. With no NCCL line in the
    logs, the dumps' culprits are the straggler ranks."""
    from debug_training_logs.tools.fr_view import sentence, summarize

    rows: list[NcclRow] = []
    for g in facts.stuck_groups:
        for r in g.awaited:
            st = g.states.get(r)
            why = (
                g.explained.get(r)
                or ("no dump" if r in g.no_dump else "")
                or ("mismatch" if any(r in m.odd for m in g.mismatches) else "")
                or "never joined the collective the others wait in"
            )
            seq = st.last_scheduled if st is not None else None
            done = st.last_completed if st is not None else None
            rows.append(
                NcclRow(
                    rank=r, pg=g.pg, pg_desc=g.desc or None, pg_rank=None, pg_id=None, seq=seq,
                    op_type=st.last_op if st is not None else None, numel_in=None, numel_out=None, timeout_ms=None,
                    ran_for_ms=None, last_enqueued=seq, last_completed=done,
                    pending=seq - done if seq is not None and done is not None else None, signal="none",
                    first_to_dump=False, dump_signal_from_rank=None, timeout_time=None, timeout_time_utc=None,
                    timeout_time_year_inferred=False, collective_start_time=None, signal_time=None,
                    file=st.file if st is not None else "", line=None, facts=[why], stale_rank_label=None,
                    signalled_dump=False, source="dump",
                )
            )  # fmt: skip
    rows = [r for r in rows if first_page and (wanted is None or r.rank in wanted)]
    room = max(0, limit - len(table.rows))
    table.rows.extend(rows[:room])
    table.rows_total += len(rows)
    table.rows_truncated += len(rows) - min(len(rows), room)
    table.flight_recorder = summarize(facts)
    acc = facts.accused()
    if not table.process_groups and not table.straggler_ranks and acc.culprits:
        table.straggler_ranks = sorted(acc.culprits)
    if facts.dumps:
        table.summary += sentence(facts)


def _parse_ranks(text: str | None) -> set[int] | None:
    if text is None or not text.strip():
        return None
    try:
        return parse_ranges(text)
    except ValueError as exc:
        raise UserInputError(f"ranks={text!r} is not a range string: write ranks like '5', '0-7' or '0-7,64'.") from exc


def _deviating_keys(table: NcclTable) -> set[tuple[int, str | None]]:
    """(rank, PG) of every row that differs from its PG's majority or that the classification names."""
    keys = {(o.rank, o.pg) for o in table.outliers}
    for p in table.process_groups:
        keys.update((g, p.pg) for g in p.straggler_ranks + p.ahead_ranks + p.suspect_ranks)
    return keys


def _outlier_groups(outliers: list[Any]) -> list[OutlierGroup]:
    groups: dict[tuple[str | None, str, tuple[str, ...]], list[Any]] = defaultdict(list)
    for o in outliers:
        groups[(o.pg, o.how, tuple(sorted(o.differs)))].append(o)
    return [
        OutlierGroup(
            pg=pg,
            ranks=format_ranges(o.rank for o in members),
            count=len(members),
            fields=list(fields),
            how=how,
            example=Outlier.model_validate(members[0]),
        )
        for (pg, how, fields), members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0].rank))
        if len(members) > 1
    ]


def _follow_up(cut: Cut) -> tuple[dict[str, Any], str] | None:
    """The call that shows rows or outliers the budget left out: their ranks, or the next page."""
    args = dict(cut.arguments)  # a max_tokens the caller chose stays: the page size was fitted to it
    if cut.field == "rows" and cut.result.get("rows_view") == "page":
        nxt = {**args, "offset": int(cut.result.get("rows_offset", 0)) + cut.shown, "limit": max(1, cut.shown)}
        return (
            nxt,
            f"{cut.total - cut.shown} more rows on this page: page on with offset={nxt['offset']}, "
            f"limit={nxt['limit']}.",
        )
    if cut.field in ("rows", "outliers"):
        omitted = format_ranges(int(item["rank"]) for item in cut.omitted_items)
        nxt = {**args, "ranks": omitted, "offset": 0, "limit": max(1, cut.shown)}
        what = "deviating rows" if cut.field == "rows" else "outliers (their rows)"
        return (
            nxt,
            f"{cut.total - cut.shown} more {what}: ranks {omitted}; call with ranks='{omitted}' "
            "(paged by offset/limit).",
        )
    return None


def _amend(data: dict[str, Any], cut: Cut) -> None:
    """A page the budget shortened ends earlier: the next page starts after its last listed row."""
    if cut.field == "rows" and data.get("rows_view") == "page":
        data["next_offset"] = int(data.get("rows_offset", 0)) + cut.shown


SPEC = ToolSpec(
    func=nccl_state_table,
    cli_name="nccl",
    title="NCCL state table",
    positional=("logs_dir",),
    follow_up=_follow_up,
    amend=_amend,
)
