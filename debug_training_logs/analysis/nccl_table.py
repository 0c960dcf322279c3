"""The NCCL state table: every rank's watchdog state per process group, and who the straggler is.

One scan of the job (:func:`~debug_training_logs.analysis.inventory.scan_job`) selects candidate lines with the
literal needles of :mod:`debug_training_logs.formats.torch_nccl`; a :class:`NcclSink` in each worker parses only those
lines (re-joining hard-wrapped messages wherever the break fell, re-reading an over-long tqdm line's tail) and sends
back compact events, each cited at the physical line where its record starts. Timeouts repeated inside a
``watchdog thread terminated`` / ``what():`` / ``communicator was aborted`` message count when they are the only
record of a rank's timeout. Here the events become one row per (global rank, process group); a row whose line names
no PG (WorkNCCL before 2.14) joins the PG that a labelled line of the same rank and work names, or stays unlabelled.
Every PG is then classified from ALL its rows:

* ``straggler``: a rank's own lines say it never entered the collective the others wait in (enqueued == completed,
  or it only observed another rank's dump signal), or it logged no state for the PG while its whole log is present
  and every rank of a known world is in the logs;
* ``fabric``: two or more members, every member present, all entered the same collective and each detected its own
  timeout;
* ``root_ahead``: the PG's rank 0 (the broadcast root) is ahead of the others by k ops (compared with the ~3
  collectives a training step issues);
* ``mismatch``: ranks of one PG timed out in different collectives (SeqNum or OpType differ): not a fabric hang;
* ``mixed``: outliers in both directions or too many to call a straggler;
* ``incomplete``: the world size is not stated by evidence about the world, ranks are missing from the logs, members
  cannot be identified, or the rows name no PG: nothing is concluded from a subset (one node's file, a pasted
  excerpt, one rank's log).

SeqNums are compared only within one PG identity (GUID/name, else uid). The global rank comes from ``[rankN]:`` (or
the line's other attribution), never from the PG-local, possibly stale ``[Rank N]``; timeouts no line attributes are
reported per (SeqNum, OpType) with their PG-local ranks. Times are the workers' wall clock as written (no zone); the
year comes from a full date elsewhere in the logs, else the time is shown as ``MM-DD HH:MM:SS``; the nanosecond
fraction is monotonic and ignored.

Must not: open files other than through ``logs/`` (scan and the targeted re-read of wrapped lines), import ``mcp``.

This module holds the entry point (:func:`nccl_state_table`, :func:`build_table`, :class:`FilePrep`) and the job-wide
steps (stragglers, evidence, summary); the parts live in ``nccl_hits`` and ``nccl_sink`` (worker side), ``nccl_rows``
(result types), ``nccl_row_build`` (rows), ``nccl_classify`` (per-PG verdicts) and ``nccl_facts`` (facts, families).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from debug_training_logs.analysis.inventory import LineKeep, consumer_for, lean_inventory, scan_job
from debug_training_logs.analysis.inventory_results import PerFile
from debug_training_logs.analysis.inventory_types import Inventory, given_world_size_evidence, missing_set, missing_text
from debug_training_logs.analysis.nccl_classify import _classify, _Coverage
from debug_training_logs.analysis.nccl_facts import (
    _FACT_KINDS,
    _child_exits,
    _ev_evidence,
    _fact_detail,
    _families,
)
from debug_training_logs.analysis.nccl_hits import FileEvents
from debug_training_logs.analysis.nccl_row_build import (
    _Ev,
    _fill,
    _RowBuild,
    _rows_for_rank,
    _timeout_of,
    _TimeText,
    _work_key,
)
from debug_training_logs.analysis.nccl_rows import (
    EvidenceLine,
    NcclTable,
    Outlier,
    ProcessGroupResult,
    RankFact,
    Row,
    TimeBasis,
    UnattributedTimeout,
)
from debug_training_logs.analysis.nccl_sink import CHILD_FAILURE_EVENTS, NCCL_PATTERNS, NcclSink
from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats import torch_nccl_types as tnt
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.scan_cache import Consumer
from debug_training_logs.ranges import format_ranges, parse_ranges

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Coverage

DEFAULT_LIMIT = 64
"""Rows (and outliers) listed by default: all outlier/straggler rows first, then a sample of majority rows."""
WHOLE = 10**9
"""A limit above any count of rows: the whole table (what ``diagnose`` decides from and the table tool pages;
:func:`limited` of it is the table of a smaller limit)."""

MAX_EVIDENCE = 16


def _add_unattributed(
    acc: dict[tuple[int | None, str], UnattributedTimeout],
    e: _Ev,
    w: tnt.WatchdogTimeout | tnt.BlockingWaitTimeout,
) -> None:
    key = (w.work.seq, w.work.op_type)
    u = acc.get(key)
    if u is None:
        u = acc[key] = UnattributedTimeout(
            w.work.seq, w.work.op_type, w.work.timeout_ms, "", 0, EvidenceLine(e.file, e.hit.line, e.hit.text)
        )
    u.count += 1
    if w.work_rank is not None:
        ranks = parse_ranges(u.pg_local_ranks) | {w.work_rank}
        u.pg_local_ranks = format_ranges(ranks)


FRAGMENT_LINES = 40
"""A file shorter than this is treated as a pasted excerpt: a rank missing from it proves nothing."""


def _whole_log_ranks(inv: Inventory) -> set[int]:
    """Ranks with at least one file that is more than an excerpt (their silence in it can be evidence)."""
    out: set[int] = set()
    for f in inv.files:
        if f.lines >= FRAGMENT_LINES:
            out |= f.ranks
    return out


def _time_basis(inv: Inventory) -> TimeBasis:
    zone = "worker-local wall clock as written (no zone in the lines); UTC not known from worker logs alone"
    if inv.year_hint is None:
        return TimeBasis(
            None,
            False,
            zone,
            "no line states a year: c10 times are shown as written (MM-DD HH:MM:SS), without one",
        )
    where = next(
        (f"{tp.file}:{tp.line}" for tp in (inv.start, inv.end) if tp is not None and tp.time.year == inv.year_hint),
        "a full date in the logs",
    )
    return TimeBasis(inv.year_hint, True, zone, f"year {inv.year_hint} from the full date at {where}")


# ---------------------------------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------------------------------


def table_consumer() -> Consumer:
    """The consumer of the table's scan of a whole job (what :func:`nccl_state_table` scans for without ``keep``)."""
    return consumer_for(NCCL_PATTERNS, NcclSink)


def nccl_state_table(
    logs_dir: str | Path,
    limit: int = DEFAULT_LIMIT,
    files: Sequence[LogFile] | None = None,
    world_size: int | None = None,
    keep: LineKeep | None = None,
    early: Mapping[str, FileEvents] | None = None,
    prepared: Mapping[str, FilePrep] | None = None,
) -> NcclTable:
    """Scan every worker log under ``logs_dir`` once and build the NCCL state table (see the module docstring).

    ``world_size``: the job's world size as the caller knows it (the launch command), for logs that do not state it.
    ``keep``: only those lines (one attempt's, :mod:`~debug_training_logs.analysis.attempts`).
    ``early``: files' sink results (by file ``rel``) already unpacked from this same scan (the tool unpacks them
    while the scan's workers read the other files); the others are unpacked here. ``prepared``: files' :class:`FilePrep`
    (by file ``rel``) made likewise."""
    with lean_inventory():  # the table reads coverage, line counts and the year of the inventory, nothing else
        job = scan_job(logs_dir, NCCL_PATTERNS, NcclSink, files=files, keep=keep)
    per = PerFile(job, FileEvents)
    got = early or {}
    results = [
        fe if (fe := got.get(f.rel)) is not None else per[i] for i, f in enumerate(job.inventory.files[: len(per)])
    ]
    preps = [prepared.get(fe.rel) for fe in results] if prepared else None
    return build_table(results, job.inventory, job.coverage(), limit, world_size=world_size, prepared=preps)


class FilePrep:
    """What the table takes from one file's events before it needs the other files (:func:`build_table` merges these
    in file order): made as each file's result arrives while the scan's workers read the others, or in
    :func:`build_table`. ``single``: the file's one rank when the inventory gives it one (its lines without a rank are
    that rank's), else None."""

    __slots__ = ("builds", "facts", "families", "ranked", "ranked_works", "unranked")

    def __init__(self, fe: FileEvents, single: int | None = None) -> None:
        self.families: set[str] = set(_families(fe.hits))
        """The message families of its lines (:attr:`NcclTable.message_families`)."""
        self.facts: list[tuple[tuple[str, str], int, _Ev]] = []
        """((fact kind, detail), rank, line) in the order the table's facts are collected: the exit signals of its
        ChildFailedError tables (:func:`_child_exits`), then its lines' facts in file order."""
        self.ranked_works: set[tuple[int | None, str, int]] = set()
        """The works of the timeouts its ranked lines report."""
        self.ranked: dict[int, list[_Ev]] = {}
        """Its lines by rank (ranks in order of their first line, lines in file order)."""
        self.unranked: list[_Ev] = []
        """Its lines without a rank (when ``single`` is None), in file order."""
        facts: list[tuple[tuple[str, str], int, _Ev]] = []
        child: list[_Ev] = []
        rel = fe.rel
        for h in fe.hits:
            e = _Ev(rel, h)
            ev = e.ev
            if type(ev) in CHILD_FAILURE_EVENTS:
                child.append(e)
                continue
            rank = h.rank
            w = e.timeout
            if rank is None:
                # (``what():  [PG ID 0 PG GUID 0(default_pg) Rank 7] ...`` is rank 7's, no ``[rank7]:`` before it)
                rank = single if single is not None else tn.default_pg_rank(h.text)
                if rank is None:
                    self.unranked.append(e)
                    continue
            elif w is not None:
                self.ranked_works.add(_work_key(w.work))
            got = self.ranked.get(rank)
            if got is None:
                self.ranked[rank] = [e]
            else:
                got.append(e)
            kind = _FACT_KINDS.get(type(ev))
            if kind is not None and not (type(ev) is tnt.WatchdogTerminated and ev.headerless):
                facts.append(((kind, _fact_detail(ev)), rank, e))
        if child:
            self.facts = [
                (("exit_signal", detail), exit_rank, ev_line) for exit_rank, detail, ev_line in _child_exits(child)
            ]
        self.facts += facts
        self.builds: dict[int, list[_RowBuild]] = {rank: _rows_for_rank(rank, evs) for rank, evs in self.ranked.items()}
        """Per rank of :attr:`ranked`: its rows from this file's lines alone (:func:`_rows_for_rank`), the rank's rows
        when no other file has lines of it; taken (removed) by the table that uses them, which fills them in."""


def build_table(
    results: Sequence[FileEvents],
    inv: Inventory,
    coverage: Coverage,
    limit: int,
    world_size: int | None = None,
    prepared: Sequence[FilePrep | None] | None = None,
) -> NcclTable:
    """The table from the sinks' events and the job inventory (pure; used by the tool and by ``diagnose``).
    ``prepared``: per file of ``results``, its :class:`FilePrep` made with no ``single`` rank as it arrived, or None
    (made here)."""
    if world_size is not None:
        given = given_world_size_evidence(inv, world_size)
        coverage = coverage.model_copy(update={"world_size": world_size, "world_size_evidence": given})
    times = _TimeText(inv.year_hint)
    by_rank: dict[int, list[_Ev]] = defaultdict(list)
    built: dict[int, list[_RowBuild] | None] = {}  # per rank: its rows from its one file's FilePrep, None if several
    unattributed = 0
    unattr: dict[tuple[int | None, str], UnattributedTimeout] = {}
    fact_map: dict[tuple[str, str], list[tuple[int, _Ev]]] = defaultdict(list)
    rank_tags: dict[int, list[str]] = defaultdict(list)
    families: set[str] = set()
    for i, fe in enumerate(results):
        file_ranks = inv.ranks_of_file(fe.rel)
        single = next(iter(file_ranks)) if len(file_ranks) == 1 else None
        prep = prepared[i] if prepared is not None else None
        if prep is None or (single is not None and prep.unranked):
            prep = FilePrep(fe, single)  # (its unranked lines are this single-rank file's rank's)
        families |= prep.families
        for fact, rank, e in prep.facts:
            fact_map[fact].append((rank, e))
        for rank, evs in prep.ranked.items():
            by_rank[rank].extend(evs)
            built[rank] = prep.builds.pop(rank, None) if rank not in built else None
        for e in prep.unranked:
            w = _timeout_of(e)
            if (
                isinstance(e.ev, tnt.WatchdogTerminated)
                and e.ev.headerless
                and (w is None or _work_key(w.work) in prep.ranked_works)
            ):
                continue  # the what(): copy of a timeout a ranked line already reported
            unattributed += 1
            if w is not None:
                _add_unattributed(unattr, e, w)
    for (kind, detail), items in fact_map.items():
        for rank, _ in items:
            tag = kind if kind != "exit_signal" else f"exit: {detail}"
            if tag not in rank_tags[rank]:
                rank_tags[rank].append(tag)

    builds: list[_RowBuild] = []
    for rank in sorted(by_rank):
        got = built.get(rank)
        builds.extend(got if got is not None else _rows_for_rank(rank, by_rank[rank]))
    for b in builds:
        _fill(b, times)
    rows = [b.row for b in builds]
    for r in rows:
        r.facts = list(rank_tags.get(r.rank, []))

    # Ranks the inventory attributed, plus every rank a candidate line of ours carried (srun labels, Ray prefixes).
    inv_ranks = set(inv.ranks) | set(by_rank) | {g for (_k, _d), items in fact_map.items() for g, _ in items}
    world = world_size if world_size is not None else inv.world_size
    missing = missing_set(world, inv_ranks)  # bounded: a stated world size of 10^8 must not cost a set of 10^8
    if inv_ranks != set(inv.ranks) or world_size is not None:
        coverage = coverage.model_copy(
            update={"ranks_found": format_ranges(inv_ranks), "missing_ranks": missing_text(world, inv_ranks)}
        )
    ranks_with_state = {r.rank for r in rows}
    silent = inv_ranks - ranks_with_state - missing
    cov = _Coverage(
        world=world,
        inv_ranks=inv_ranks,
        missing=missing,
        silent=silent,
        whole=_whole_log_ranks(inv),
        all_unlabelled=bool(rows) and all(r.pg is None for r in rows),
    )

    groups: dict[str | None, list[Row]] = defaultdict(list)
    for r in rows:
        groups[r.pg].append(r)
    pg_results: list[ProcessGroupResult] = []
    outliers: list[Outlier] = []
    for key in sorted(groups, key=lambda k: (k != "0", k is None, _natural(k))):
        grows = groups[key]
        desc = next((r.pg_desc for r in grows if r.pg_desc), None)
        res, outs = _classify(key, desc, grows, cov)
        pg_results.append(res)
        outliers.extend(outs)
    folded = sum(fe.deduplicated for fe in results)
    if folded:
        _mark_folded(pg_results, folded)

    stragglers = [] if folded or not cov.complete else _job_stragglers(pg_results, rows, missing)
    first_dump = _first_dump_rank(rows, by_rank)
    for r in rows:  # one meaning for "first to dump": the job's first_dump_rank, on the row(s) where it detected
        r.first_to_dump = first_dump is not None and r.rank == first_dump and r.signal == "detected"
    evidence = _evidence(builds, pg_results, stragglers, first_dump)
    facts = [
        RankFact(
            kind, detail, format_ranges(r for r, _ in items), len({r for r, _ in items}), _ev_evidence(items[0][1])
        )
        for (kind, detail), items in sorted(fact_map.items())
    ]
    summary = _summary(pg_results, rows, stragglers, first_dump, silent, missing, coverage, folded)
    if unattr:
        if not rows:
            summary = summary.replace("(no collective timed out, or the logs stop before it)", "attributed to a rank")
        summary += " " + _unattributed_text(list(unattr.values()))
    unparsed_total = sum(fe.unparsed for fe in results)
    if unparsed_total:
        summary += (
            f" {unparsed_total} watchdog-like line(s) match no wording this tool knows (see unparsed_samples): "
            "read them before trusting the table."
        )
    whole = NcclTable(
        summary=summary,
        coverage=coverage,
        rows=rows,
        rows_total=len(rows),
        rows_truncated=0,
        ranks_without_nccl_state=format_ranges(silent),
        missing_ranks=missing_text(world, inv_ranks),
        process_groups=pg_results,
        outliers=outliers,
        outliers_truncated=0,
        straggler_ranks=stragglers,
        first_dump_rank=first_dump,
        rank_facts=facts,
        evidence=evidence,
        time_basis=_time_basis(inv),
        message_families=sorted(families),
        unattributed_lines=unattributed,
        unattributed_timeouts=sorted(unattr.values(), key=lambda u: (-u.count, u.seq or 0)),
        unparsed_samples=[EvidenceLine(fe.rel, n, t) for fe in results for n, t in fe.unparsed_samples][:MAX_EVIDENCE],
        unparsed_lines=sum(fe.unparsed for fe in results),
        rejoined_messages=sum(fe.rejoined for fe in results),
        deduplicated_lines=folded,
    )
    return limited(whole, limit)


def _mark_folded(pgs: list[ProcessGroupResult], folded: int) -> None:
    """Ray folded watchdog lines of several ranks into one: rows are missing for ranks that did log. No verdict that
    rests on who is absent can stand."""
    note = (
        f"Ray deduplicated {folded} watchdog line(s) ('[repeated Nx across cluster]': lines differing only in numbers, "
        "i.e. in rank and SeqNum, were folded), so ranks that logged state may have no row. Rerun with "
        "RAY_DEDUP_LOGS=0 (or read each worker's own log file) before naming a straggler. "
    )
    for p in pgs:
        if p.classification != "incomplete":
            p.suspect_ranks = sorted(set(p.suspect_ranks) | set(p.straggler_ranks))
            p.straggler_ranks = []
            p.classification = "incomplete"
        p.reason = note + p.reason


def _natural(k: str | None) -> tuple[int, str]:
    if k is None:
        return (0, "")
    return (int(k), "") if k.isdigit() else (1 << 30, k)


def _job_stragglers(pgs: list[ProcessGroupResult], rows: list[Row], missing: set[int]) -> list[int]:
    """Ranks at the root of the hang: stragglers of some PG that never detected a timeout of their own anywhere."""
    if missing or any(p.classification == "incomplete" and p.is_default_pg for p in pgs):
        return []
    cands = {g for p in pgs if p.classification == "straggler" for g in p.straggler_ranks}
    detected = {r.rank for r in rows if r.signal == "detected" and r.seq is not None}
    root = sorted(cands - detected)
    return root if root else sorted(cands)


def _first_dump_rank(rows: list[Row], by_rank: dict[int, list[_Ev]]) -> int | None:
    srcs = Counter(r.dump_signal_from_rank for r in rows if r.dump_signal_from_rank is not None)
    if srcs:
        return srcs.most_common(1)[0][0]
    for evs in by_rank.values():
        for e in evs:
            if isinstance(e.ev, tnt.WatchdogExitMessage) and e.ev.from_rank is not None:
                return e.ev.from_rank
    return None


def _evidence(
    builds: list[_RowBuild], pgs: list[ProcessGroupResult], stragglers: list[int], first: int | None
) -> list[EvidenceLine]:
    out: list[EvidenceLine] = []
    seen: set[tuple[str, int]] = set()

    def add(e: _Ev | None) -> None:
        if e is None or len(out) >= MAX_EVIDENCE:
            return
        k = (e.file, e.hit.line)
        if k not in seen:
            seen.add(k)
            out.append(_ev_evidence(e))

    focus = set(stragglers) | {g for p in pgs for g in p.straggler_ranks + p.ahead_ranks + p.suspect_ranks}
    for b in builds:
        if b.row.rank in focus:
            add(b.observed)
            add(b.dump)
            add(b.status)
            add(b.timeout)
    for p in pgs:  # one majority row per PG
        if p.majority is None:
            continue
        for b in builds:
            if b.row.pg == p.pg and b.row.rank not in focus:
                add(b.status)
                add(b.timeout)
                break
    for b in builds:
        if b.row.rank == first:
            add(b.first)
            add(b.status)
    return out


def limited(table: NcclTable, limit: int) -> NcclTable:
    """``table`` (every row and outlier: built with a ``limit`` above their counts) as :func:`build_table` makes it
    with ``limit``: at most ``limit`` rows (the outliers' and the PGs' named ranks' first) and outliers. The limit
    changes nothing else, so one whole table serves every limit."""
    if len(table.rows) <= limit and len(table.outliers) <= limit:
        return table
    kept, truncated = _limit_rows(table.rows, table.process_groups, table.outliers, limit)
    return replace(
        table,
        rows=kept,
        rows_truncated=truncated,
        outliers=table.outliers[:limit],
        outliers_truncated=max(0, len(table.outliers) - limit),
    )


def _limit_rows(
    rows: list[Row], pgs: list[ProcessGroupResult], outliers: list[Outlier], limit: int
) -> tuple[list[Row], int]:
    if len(rows) <= limit:
        return rows, 0
    keep_keys = {(o.rank, o.pg) for o in outliers}
    for p in pgs:
        for g in p.straggler_ranks + p.ahead_ranks + p.suspect_ranks:
            keep_keys.add((g, p.pg))
    must = [r for r in rows if (r.rank, r.pg) in keep_keys][:limit]
    rest = [r for r in rows if (r.rank, r.pg) not in keep_keys]
    room = limit - len(must)
    sample: list[Row] = []
    if room > 0 and rest:
        per_pg: dict[str | None, list[Row]] = defaultdict(list)
        for r in rest:
            per_pg[r.pg].append(r)
        while len(sample) < room and any(per_pg.values()):
            for k in list(per_pg):
                if per_pg[k] and len(sample) < room:
                    sample.append(per_pg[k].pop(0))
    kept = sorted(must + sample, key=lambda r: (r.pg != "0", _natural(r.pg), r.rank))
    return kept, len(rows) - len(kept)


def _unattributed_text(items: list[UnattributedTimeout]) -> str:
    parts = [
        f"{u.count} in {u.op_type} SeqNum {u.seq if u.seq is not None else '?'} ([Rank {u.pg_local_ranks}], PG-local)"
        for u in sorted(items, key=lambda u: -u.count)[:3]
    ]
    return (
        f"TIMEOUTS WITHOUT A GLOBAL RANK: {sum(u.count for u in items)} watchdog timeout line(s) name no global rank "
        f"(several ranks in one file, no [rankN]: prefix): {'; '.join(parts)}. A collective did time out; split the "
        "output per rank (torchrun --log-dir / --tee, srun --label) to attribute it."
    )


def _pg_label(p: ProcessGroupResult) -> str:
    if p.pg is None:
        return "rows without a PG label"
    return f"PG {p.pg}" + (f" ({p.pg_desc})" if p.pg_desc else "")


def _summary(
    pgs: list[ProcessGroupResult],
    rows: list[Row],
    stragglers: list[int],
    first: int | None,
    silent: set[int],
    missing: set[int],
    coverage: Coverage,
    folded: int = 0,
) -> str:
    if not rows:
        base = "No NCCL watchdog state in these logs (no collective timed out, or the logs stop before it)."
        if missing:
            base += f" Ranks {format_ranges(missing)} are missing from the logs."
        return base
    parts: list[str] = []
    n_ranks = len({r.rank for r in rows})
    parts.append(f"{len(rows)} watchdog-state rows from {n_ranks} ranks in {len(pgs)} process group(s).")
    if missing:
        parts.append(
            f"INCOMPLETE: ranks {format_ranges(missing)} (world size {coverage.world_size}) are missing from every "
            "file; no straggler is named from a subset; ask for every node's log."
        )
    if folded:
        parts.append(
            f"INCOMPLETE: Ray folded {folded} watchdog line(s) ([repeated Nx across cluster]); rows of those ranks are "
            "hidden. Rerun with RAY_DEDUP_LOGS=0 or read the per-worker logs."
        )
    if stragglers:
        detail = []
        for g in stragglers:
            whys = [f"{_pg_label(p)}: {p.straggler_reasons[str(g)]}" for p in pgs if str(g) in p.straggler_reasons]
            detail.append(f"rank {g} ({'; '.join(whys) or 'logged no NCCL watchdog state at all'})")
        parts.append(
            "STRAGGLER: " + "; ".join(detail) + ". It never waited in a collective of its own: it was stuck outside "
            "NCCL (data loading, training loop); look at what it logged just before the others' collectives started."
        )
    shown = pgs if len(pgs) <= 3 else [p for p in pgs if p.is_default_pg]
    for p in shown:
        start = next((r.collective_start_time for r in rows if r.pg == p.pg and r.collective_start_time), None)
        tt = next((r.timeout_time for r in rows if r.pg == p.pg and r.timeout_time), None)
        when = f" Timeout logged at {tt}, collective started ~{start} (worker local time)." if tt else ""
        parts.append(f"{_pg_label(p)} [ranks {p.ranks}]: {p.classification.upper()}: {p.reason}{when}")
    if len(pgs) > 3:
        groups: dict[tuple[str, str], list[ProcessGroupResult]] = defaultdict(list)
        for p in pgs:
            if not p.is_default_pg:
                groups[(p.pg_desc or "PG", p.classification)].append(p)
        agg = []
        for (desc, cls), items in sorted(groups.items()):
            named = sorted({g for p in items for g in p.straggler_ranks})
            extra = f" (absent/behind ranks {format_ranges(named)}, each waiting elsewhere or stuck)" if named else ""
            agg.append(f"{len(items)} {desc} {cls}{extra}")
        parts.append("Other PGs (SeqNums compared only within each PG): " + "; ".join(agg) + ".")
    if first is not None:
        parts.append(f"Rank {first} set the dump signal first: usually a victim that timed out first, not the cause.")
    if silent and not stragglers:
        if coverage.world_size is not None and not missing:
            parts.append(f"Ranks {format_ranges(silent)} appear in the logs but logged no NCCL state: prime suspects.")
        else:
            parts.append(
                f"Ranks {format_ranges(silent)} appear in these files but logged no NCCL state here (suspects only if "
                "their whole logs are here)."
            )
    return " ".join(parts)
