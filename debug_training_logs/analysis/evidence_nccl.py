"""The NCCL state of a job (:func:`nccl_state`): ``analysis.nccl_table``'s rows and classification, with times as
datetimes, and the NCCL events the decision reads.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from debug_training_logs.analysis.evidence_types import NcclEvent, NcclRow, NcclState, ProcessGroupState, WorkerEvidence
from debug_training_logs.analysis.nccl_hits import FileEvents
from debug_training_logs.analysis.nccl_rows import NcclTable
from debug_training_logs.analysis.nccl_table import WHOLE, FilePrep, build_table
from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats import torch_nccl_types as tnt
from debug_training_logs.ranges import parse_ranges

# ---------------------------------------------------------------------------------------------------------------------
# The NCCL state: analysis.nccl_table's rows and classification, with times as datetimes


def _table_time(text: str | None, year: int) -> datetime | None:
    if not text:
        return None
    if len(text) == 14 and text[2] == "-" and text[5] == " ":  # "MM-DD HH:MM:SS": no line stated the year
        text = f"{year:04d}-{text[:5]}T{text[6:]}"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


EarlyNccl = tuple[FileEvents, FilePrep]
"""One file's NCCL lines unpacked as it arrived, and the table's share of them (``nccl_table.FilePrep``)."""


def nccl_state(worker: WorkerEvidence, early: dict[int, EarlyNccl] | None = None) -> NcclState:
    """The job's NCCL state table (``nccl_table.build_table`` over the evidence scan's NCCL lines); ``early``: files'
    NCCL lines already unpacked and prepared (by index in the scan), the others are unpacked here."""
    # unpacked once for the table's several passes, let go when the state is built
    got = early or {}
    lazy = worker.nccl_files
    pre = [got.get(j) for j in range(len(lazy))]
    files = [p[0] if p is not None else lazy[j] for j, p in enumerate(pre)]
    table = build_table(
        files,
        worker.job.inventory,
        worker.coverage,
        limit=WHOLE,
        prepared=[p[1] if p is not None else None for p in pre],
    )
    year = worker.year
    cited: dict[str, set[int]] = defaultdict(set)  # the lines the rows cite, by file
    for row in table.rows:
        cited[row.file or ""].add(row.line or 0)
    texts: dict[str, dict[int, str]] = {}  # file -> line -> text, of the cited lines
    for fe in files:
        lines = cited.get(fe.rel)
        if lines:
            texts[fe.rel] = {h.line: h.text for h in fe.hits if h.line in lines}
    times: dict[str | None, datetime | None] = {}  # the rows cite a few distinct seconds: each parsed once

    def table_time(text: str | None) -> datetime | None:
        if text not in times:
            times[text] = _table_time(text, year)
        return times[text]

    rows = [
        NcclRow(
            rank=r.rank,
            pg=r.pg if r.pg is not None else "?",
            pg_desc=r.pg_desc,
            seq=r.seq,
            op_type=r.op_type,
            timeout_ms=r.timeout_ms,
            ran_for_ms=r.ran_for_ms,
            last_enqueued=r.last_enqueued,
            last_completed=r.last_completed,
            signal=r.signal,
            signalled_dump=r.signalled_dump,
            dump_signal_from_rank=r.dump_signal_from_rank,
            timeout_time=table_time(r.timeout_time),
            collective_start_time=table_time(r.collective_start_time),
            file=r.file or "",
            line=r.line or 0,
            text=texts.get(r.file or "", {}).get(r.line or 0, ""),
        )
        for r in table.rows
    ]
    groups = []
    by_pg: dict[str, list[NcclRow]] = defaultdict(list)
    for r in rows:
        by_pg[r.pg].append(r)
    for p in table.process_groups:
        key = p.pg if p.pg is not None else "?"
        mine = by_pg.get(key, [])
        root_ahead = p.classification == "root_ahead" and bool(p.ahead_ranks)
        groups.append(
            ProcessGroupState(
                pg=key,
                desc=p.pg_desc,
                classification=p.classification,
                reason=p.reason,
                ranks=parse_ranges(p.ranks),
                straggler_ranks=set(p.straggler_ranks),
                reasons={int(k): v for k, v in p.straggler_reasons.items()},
                detected_ranks={r.rank for r in mine if r.signal == "detected"},
                observed_ranks={r.rank for r in mine if r.signal == "observed"},
                signalled_dump_ranks={r.rank for r in mine if r.signalled_dump},
                dump_signal_senders={r.dump_signal_from_rank for r in mine if r.dump_signal_from_rank is not None},
                suspect_ranks=set(p.suspect_ranks),
                root_rank=p.ahead_ranks[0] if root_ahead else None,
                root_gap=p.ahead_by if root_ahead else None,
            )
        )
    timed_out = any(r.signal == "detected" for r in rows)
    waiting = {r.rank for r in rows if (r.pending or 0) > 0}
    return NcclState(
        table=table,
        rows=rows,
        groups=groups,
        ranks_without_state=parse_ranges(table.ranks_without_nccl_state) if timed_out else set(),
        job_stragglers={r for r in table.straggler_ranks if r not in waiting},
        exited_with_error=_exited_with_error(table),
        other_events=_other_events(worker, files),
    )


_EXIT_CODE = re.compile(r"^exitcode (\d+)$")


def _exited_with_error(table: NcclTable) -> set[int]:
    """Ranks whose ChildFailedError row says ``exitcode N`` with N > 0 (not a signal)."""
    out: set[int] = set()
    for f in table.rank_facts:
        m = _EXIT_CODE.match(f.detail) if f.kind == "exit_signal" else None
        if m and int(m.group(1)) > 0:
            out |= parse_ranges(f.ranks)
    return out


_OTHER_EVENTS_READ = (tnt.HeartbeatKill,)
"""The kinds of :attr:`NcclState.other_events` kept: only the ones something reads (the heartbeat monitor's kill is a
trigger); add a kind here to read it."""


def _other_events(worker: WorkerEvidence, files: Iterable[FileEvents]) -> list[NcclEvent]:
    out = []
    times: dict[tuple[int, int, str], datetime | None] = {}  # the lines of one second share their time
    for fe in files:
        ranks = worker.ranks_of_file(fe.rel)
        single = next(iter(ranks)) if len(ranks) == 1 else None
        for h in fe.hits:
            if not isinstance(h.event, _OTHER_EVENTS_READ):
                continue
            wt = tn.wall_time(h.header)
            when = None
            if wt is not None:
                if wt not in times:
                    month, day, hms = wt
                    times[wt] = _table_time(f"{month:02d}-{day:02d} {hms}", worker.year)
                when = times[wt]
            out.append(NcclEvent(h.rank if h.rank is not None else single, fe.rel, h.line, h.text, when, h.event))
    return out
