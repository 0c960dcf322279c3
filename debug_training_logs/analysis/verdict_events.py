"""The events a verdict shows: the failure's own course (the stuck collective, the first timeout, the teardown,
torchrun, SLURM), a straggler's event, the AIS side of the chain (:data:`AIS_CHAIN_STAGES`), and the chain and
timeline as the verdict is finished (untimed lines bounded, duplicates dropped, context events, key files)."""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING

from debug_training_logs.analysis.evidence_ais import ais_to_worker, aligned_for
from debug_training_logs.analysis.evidence_triggers import AIS_LOOKBACK, CLOCK_SLACK, first_symptom, hit_event
from debug_training_logs.analysis.evidence_types import Hit, JobEvidence, KeyEvent, NcclRow, WorkerEvidence
from debug_training_logs.analysis.fate_events import storage_resets
from debug_training_logs.analysis.read_back import read_lines
from debug_training_logs.analysis.verdict_helpers import fmt_ranks as _fmt
from debug_training_logs.formats import nccl

_NCCL_NODE = re.compile(r"(?:\[[\d\-: ]+\] )?(" + nccl.HOST + ")" + nccl.PROCESS)
"""An NCCL line's host (its prefix, after NCCL 2.26+'s date), matched at the hit's start."""

if TYPE_CHECKING:
    from debug_training_logs.analysis.ais_delta_types import NotableLines
    from debug_training_logs.analysis.verdict import Verdict
    from debug_training_logs.analysis.verdict_context import VerdictContext as _Ctx


AIS_CHAIN_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "target under resource pressure",
        ("disk_critical", "resource_pressure_critical", "memory_pressure", "disk_fault"),
    ),
    (
        "inter-target stream breaks",
        ("shared_dm_broken_pipe", "stream_terminated", "stream_send_error", "shared_dm_rx_failure"),
    ),
    ("batch GET loses objects", ("getbatch_out_of_bounds",)),
    ("batch job aborted, objects dropped, clients cut off", ("shared_dm_xid_not_found", "client_write_failed")),
)
"""The original skill's x-get-batch failure mechanism, as stages of named AIS patterns (``formats.ais``)."""


def failure_course(ev: JobEvidence) -> list[KeyEvent]:
    """The failure's own course: the stuck collective, the first timeout, the teardown, torchrun, SLURM."""
    out: list[KeyEvent] = []
    n = ev.nccl
    row = n.first_timeout()
    if row is not None and row.collective_start_time is not None:
        groups: dict[tuple[str, int | None, str | None], list[NcclRow]] = defaultdict(list)
        for r in n.rows:
            if (r.pending or 0) > 0 and r.seq is not None:
                groups[(r.pg, r.seq, r.op_type)].append(r)
        # rows with no enqueued/completed (torch <= 2.2, timeout lines only) have no group: fall back to the timeouts
        for r in n.rows if not groups else []:
            if r.collective_start_time is not None:
                groups[(r.pg, r.seq, r.op_type)].append(r)
        ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0][0], kv[0][1] or 0))
        (pg, seq, op), rows = ordered[0]
        first = min(rows, key=lambda r: (r.collective_start_time or datetime.max, r.rank))
        others = "; ".join(f"{_fmt(x.rank for x in rs)} in {o} SeqNum {q} (PG {p})" for (p, q, o), rs in ordered[1:4])
        out.append(
            KeyEvent(
                f"{len(rows)} rank(s) enter {op} SeqNum {seq} (PG {pg}) and wait for the others"
                + (f" (also waiting: {others})" if others else ""),
                first.file,
                first.line,
                first.text,
                {r.rank for r in rows},
                first.collective_start_time,
                derived=True,
            )
        )
    sym = first_symptom(ev)
    if sym is not None and row is not None:
        out.append(sym)
    downs = ev.worker.hits("taken_down")
    if downs:
        ranks = set(ev.worker.counts_by_rank.get("taken_down", {}))
        out.append(
            hit_event(downs[0], f"the watchdogs of {len(ranks)} rank(s) take their processes down (SIGABRT)", ranks)
        )
    first_timeout = row.timeout_time if row is not None else None
    for signal, what in (
        ("child_failed", "torchrun reports the failed workers (ChildFailedError)"),
        ("slurm_cancel", "SLURM ends the job step"),
    ):
        hs = ev.worker.hits(signal)
        later = [h for h in hs if first_timeout is None or (h.earliest or datetime.max) >= first_timeout]
        if later or hs:
            out.append(hit_event((later or hs)[0], what, ranks=()))
    # The course of the failure in time order (a crashed node's torchrun exit comes long before the timeouts).
    return sorted(out, key=lambda e: e.sort_time or datetime.max)


def straggler_event(ctx: _Ctx, ranks: set[int], event: str) -> KeyEvent:
    rows = [r for r in ctx.nccl.rows if r.rank in ranks]
    if rows:
        r = rows[0]
        return KeyEvent(event, r.file, r.line, r.text, set(ranks), None, None, ctx.start, derived=True)
    r0 = min(ranks)
    last = ctx.w.last_by_rank.get("progress", {}).get(r0)
    if last is not None:
        return hit_event(last, event, ranks)
    f = ctx.w.files_of_rank(r0)
    return KeyEvent(event, f[0] if f else "", 0, "", set(ranks), None, None, ctx.start, derived=True)


def node_of_hit(ctx: _Ctx, h: Hit) -> str | None:
    m = _NCCL_NODE.match(h.text)
    if m:
        return m.group(1)
    for f in ctx.w.job.inventory.files:
        if f.rel == h.file:
            return f.node
    return None


def ais_chain(ctx: _Ctx) -> list[KeyEvent]:
    """The AIS side of the chain (the x-get-batch failure mechanism, stage by stage: :data:`AIS_CHAIN_STAGES`) from
    the lines of the daemons whose error counters spiked, just before the stuck collective started; on the worker
    clock, so only with a verified alignment."""
    ais = ctx.ev.ais
    if ais is None or ctx.start is None:
        return []
    al = ais.alignment
    spiking = {s.daemon for s in ais.spikes}
    lines = [
        (n, t)
        for n in ais.incident_lines()
        if (not spiking or n.daemon in spiking)
        and aligned_for(al, n.daemon)
        and (t := ais_to_worker(al, n.first)) is not None
        and ctx.start - AIS_LOOKBACK <= t <= ctx.start + CLOCK_SLACK
    ]
    out: list[KeyEvent] = []
    for stage, patterns in AIS_CHAIN_STAGES:
        found = [(n, t) for n, t in lines if n.pattern in patterns]
        if not found:
            continue
        n, t = found[0]
        d = ais.daemon(n.daemon)
        name = d.name if d is not None else n.daemon
        out.append(_notable_event(f"AIS {name}: {stage} ({n.meaning})", n, t))
    return sorted(out, key=lambda e: e.sort_time or datetime.max)


def _notable_event(event: str, n: NotableLines, t: datetime | None) -> KeyEvent:
    """The key event of an AIS daemon's notable-line group: its example line, at ``t`` on the worker clock."""
    return KeyEvent(
        event, n.example.file, n.example.line, n.example.text, set(), t, ais_time=n.first, daemon=n.daemon, kind="ais"
    )


def offset_if_used(ctx: _Ctx, ais_events: list[KeyEvent]) -> float | None:
    ais = ctx.ev.ais
    if ais_events and ais is not None:
        return ais.alignment.offset_hours
    return None


def bound_untimed(w: WorkerEvidence, events: list[KeyEvent]) -> None:
    """Narrow the bounds of worker lines without a time to their file's nearest timed lines (one read per file)."""
    wanted: dict[str, set[int]] = defaultdict(set)
    for e in events:
        if e.kind == "worker" and e.time is None and e.line > 0 and e.text and not e.derived:
            wanted[e.file].add(e.line)
    if not wanted:
        return
    found = read_lines(w.root, wanted, w.year)
    for e in events:
        at = found.get((e.file, e.line))
        if e.kind == "worker" and e.time is None and not e.derived and at is not None and at.text is not None:
            if at.time is not None:  # a line with a time of its own (a launcher's glog header) cited without it
                e.time = at.time
                continue
            if at.after is not None and (e.earliest is None or at.after > e.earliest):
                e.earliest = at.after
            if at.before is not None and (e.latest is None or at.before < e.latest):
                e.latest = at.before


def dedupe(events: list[KeyEvent]) -> list[KeyEvent]:
    seen: set[tuple[str, int, str]] = set()
    out = []
    for e in events:
        key = (e.file, e.line, e.event)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


TIMELINE_CONTEXT = 12
"""Context events (noise, AIS lines, last progress) added to the chain's events in the timeline table."""


def timeline_order(e: KeyEvent) -> tuple[bool, datetime, str, int]:
    """Events on the worker clock in time order; AIS events that could not be aligned after them, on their own clock."""
    return (e.sort_time is None, e.sort_time or e.ais_time or datetime.max, e.file, e.line)


def timeline_events(ctx: _Ctx, v: Verdict) -> list[KeyEvent]:
    events = list(v.chain)
    in_chain = {(e.file, e.line) for e in events}
    w = ctx.w
    resets, count = storage_resets(ctx.ev)
    for h in resets[:1]:
        events.append(hit_event(h, f"first of {count} connection reset(s) (retried)"))
    for r in v.culprit_ranks[:3]:
        last = w.last_by_rank.get("progress", {}).get(r)
        if last is not None:
            events.append(hit_event(last, f"last progress line of rank {r}"))
    ais = ctx.ev.ais
    if ais is not None:
        al = ais.alignment
        for n in ais.incident_lines()[:TIMELINE_CONTEXT]:
            t = ais_to_worker(al, n.first) if aligned_for(al, n.daemon) else None
            events.append(_notable_event(f"AIS {n.daemon}: {n.meaning} (x{n.count})", n, t))
        for s in ais.spikes[:TIMELINE_CONTEXT]:
            t = ais_to_worker(al, s.end) if aligned_for(al, s.daemon) else None
            events.append(
                KeyEvent(
                    f"AIS {s.daemon}: {s.counter} +{s.delta} in the interval ending here",
                    s.evidence.file,
                    s.evidence.line,
                    s.evidence.text,
                    set(),
                    t,
                    ais_time=s.end,
                    daemon=s.daemon,
                    kind="ais",
                )
            )
    return [e for e in events if e in v.chain or (e.file, e.line) not in in_chain]


def key_files(v: Verdict) -> list[tuple[str, str]]:
    out: dict[str, str] = {}
    for e in v.chain:
        if e.file and e.file not in out:
            out[e.file] = e.event
    return list(out.items())
