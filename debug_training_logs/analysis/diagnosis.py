"""The decision procedure: the verdict drawn from a job's
:class:`~debug_training_logs.analysis.evidence_types.JobEvidence`.

The original protocol as a deterministic procedure over the evidence model (gathered once by
:mod:`debug_training_logs.analysis.evidence`, which the verifier reads too): coverage first (a culprit is never named
from a subset of ranks), then the earliest process killer, then the NCCL table's classification, then the AIS
correlation; when the evidence cannot decide, it says so and what to fetch.

Nothing here imports the verifier (``verify`` reads analysis, never the other way round).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from debug_training_logs.analysis.causal import causal_model
from debug_training_logs.analysis.causal import decide as causal_decide
from debug_training_logs.analysis.evidence_states import (
    counters_known,
    fabric_evidence,
    job_finished,
    node_failure_facts,
    order_by_bounds,
    rank_states,
)
from debug_training_logs.analysis.evidence_triggers import data_hits, first_symptom, hit_event, refine_times, triggers
from debug_training_logs.analysis.evidence_types import JobEvidence, KeyEvent, Trigger
from debug_training_logs.analysis.fate_events import storage_resets
from debug_training_logs.analysis.launcher_decision import LauncherCall, agent_failure
from debug_training_logs.analysis.verdict import Verdict
from debug_training_logs.analysis.verdict_context import VerdictContext as _Ctx
from debug_training_logs.analysis.verdict_events import ais_chain as _ais_chain
from debug_training_logs.analysis.verdict_events import bound_untimed as _bound_untimed
from debug_training_logs.analysis.verdict_events import dedupe as _dedupe
from debug_training_logs.analysis.verdict_events import failure_course as _tail
from debug_training_logs.analysis.verdict_events import key_files as _key_files
from debug_training_logs.analysis.verdict_events import node_of_hit as _node_of_hit
from debug_training_logs.analysis.verdict_events import offset_if_used as _offset_if_used
from debug_training_logs.analysis.verdict_events import straggler_event as _straggler_event
from debug_training_logs.analysis.verdict_events import timeline_events as _timeline
from debug_training_logs.analysis.verdict_events import timeline_order
from debug_training_logs.analysis.verdict_helpers import consequence_note as _consequence_note
from debug_training_logs.analysis.verdict_helpers import coverage_gap as _coverage_gap
from debug_training_logs.analysis.verdict_helpers import earliest_per_rank as _earliest_per_rank
from debug_training_logs.analysis.verdict_helpers import fmt_ranks as _fmt
from debug_training_logs.analysis.verdict_helpers import fmt_time as _t
from debug_training_logs.analysis.verdict_helpers import gap_note as _gap_note
from debug_training_logs.analysis.verdict_helpers import launcher_call as _launcher_call
from debug_training_logs.analysis.verdict_helpers import root_stragglers as _root_stragglers
from debug_training_logs.analysis.verdict_helpers import same_line as _same_line
from debug_training_logs.analysis.verdict_helpers import short_text as _short
from debug_training_logs.analysis.verdict_helpers import stall_steps as _stall_steps
from debug_training_logs.analysis.verdict_helpers import time_limit_cancel as _time_limit_cancel
from debug_training_logs.analysis.verdict_helpers import what_present_ranks_show as _what_present_ranks_show

# ---------------------------------------------------------------------------------------------------------------------
# Verdict: the protocol as a decision procedure


def conclude(ev: JobEvidence) -> Verdict:
    """The verdict the evidence supports; when it cannot decide, the verdict says so and what to fetch next."""
    symptom = first_symptom(ev)
    ctx = _Ctx(ev, triggers(ev), symptom, ev.nccl.collective_start(), _tail(ev))
    for decide in (_dumps_only, _agent_failure, _node_failure, _clean, _causal, _nccl, _time_limit):
        verdict = decide(ctx)
        if verdict is not None:
            return _finish(ctx, _with_coverage(ctx, verdict))
    return _finish(ctx, _incomplete(ctx) or _undetermined(ctx))


def _verdict(
    category: str,
    culprits: Iterable[int],
    ctx: _Ctx,
    explanation: str,
    chain: list[KeyEvent],
    confidence: str = "high",
    nodes: Iterable[str] | None = None,
    **kw: Any,
) -> Verdict:
    ranks = sorted(set(culprits))
    return Verdict(
        category=category,
        culprit_ranks=ranks,
        suspect_nodes=sorted(set(nodes)) if nodes is not None else ctx.nodes_of(ranks),
        confidence=confidence,
        explanation=explanation,
        root=chain[0] if chain else None,
        chain=chain,
        timeline=[],
        key_files=[],
        next_steps=kw.pop("next_steps", []),
        **kw,
    )


_NO_RANK_CATEGORIES = ("no_failure", "time_limit", "address_in_use", "launch_failure", "incomplete_evidence")
"""Shapes that blame no rank: a subset of the logs shows them as well as the whole."""


def _with_coverage(ctx: _Ctx, v: Verdict) -> Verdict:
    """The verdict as sure as the coverage lets it be: on a subset of the ranks its culprits become suspects (a
    hidden rank may hold an earlier failure), its confidence drops, and it says what to fetch; the shape stays."""
    if v.details.get("dumps_only"):
        return v  # the dumps' own coverage (every group's members) decided culprits and suspects
    if v.category in ("address_in_use", "launch_failure") and not ctx.w.worker_ranks():
        return v  # no worker started: no rank has a log to miss
    gap = _coverage_gap(ctx)
    v.missing_ranks = sorted(ctx.ev.missing_ranks)
    if gap is None and v.details.get("certainty") == "provisional":
        gap = (
            f"No line states the world size: ranks {_fmt(ctx.w.ranks)} were read, and a rank named for what it did not "
            "do (it stalled, left, went silent) may have company in a file that is not here.",
            ["State the world size (diagnose --world-size, the launch command's nodes x GPUs) or rerun with "
             "NCCL_DEBUG=INFO, which logs 'nranks N'."],
        )  # fmt: skip
    if gap is None:
        return v
    why, steps = gap
    v.details["provisional"] = True
    v.next_steps = steps + [s for s in v.next_steps if s not in steps]
    if v.category in _NO_RANK_CATEGORIES and not v.culprit_ranks:
        v.explanation += f" (Coverage: {why})"
        return v
    v.suspect_ranks = sorted(set(v.suspect_ranks) | set(v.culprit_ranks))
    v.culprit_ranks = []
    v.confidence = "low" if v.confidence != "high" else "medium"
    shown = f"rank(s) {_fmt(v.suspect_ranks)}" if v.suspect_ranks else "no rank"
    v.explanation = (
        f"Provisional, from a subset of the ranks: the logs show {v.category} and point at {shown}. {why} "
        + v.explanation
    )
    return v


def _incomplete(ctx: _Ctx) -> Verdict | None:
    """Nothing decided and the logs may be a subset: the evidence is incomplete (what the present ranks show, and
    what to fetch)."""
    gap = _coverage_gap(ctx)
    if gap is None:
        return None
    why, steps = gap
    seen = _what_present_ranks_show(ctx)
    behind = _root_stragglers(ctx.nccl) or {r for g in ctx.nccl.groups for r in g.suspect_ranks}
    return _verdict(
        "incomplete_evidence",
        [],
        ctx,
        f"{why} {seen}".strip(),
        ctx.tail,
        "low",
        nodes=[],
        next_steps=steps,
        missing_ranks=sorted(ctx.ev.missing_ranks),
        suspect_ranks=sorted(behind - ctx.ev.missing_ranks),
    )


def _node_failure(ctx: _Ctx) -> Verdict | None:
    cancel, silent = node_failure_facts(ctx.ev)
    if cancel is None:
        return None
    at = cancel.when
    ranks = {r for n in silent for r in n.ranks}
    nodes = [n.node for n in silent if n.node]
    chain: list[KeyEvent] = []
    for n in silent:
        if n.last is not None:
            chain.append(hit_event(n.last, f"last line from node {n.node or n.last.file}: it goes silent", n.ranks))
    chain += [e for e in ctx.tail if e.file != cancel.file or e.line != cancel.line]
    chain.append(hit_event(cancel, "SLURM cancels the job DUE TO NODE FAILURE", ranks=()))
    if not silent:
        return _verdict(
            "node_failure",
            [],
            ctx,
            "SLURM cancelled the job for a node failure, but every node's log "
            "continues until the cancellation: the failed node cannot be told from the logs.",
            chain,
            "low",
            nodes=[],
            next_steps=[
                "Read the slurmctld log around the cancellation time to see "
                "which node failed (sacct -j <JOBID> --format=NodeList,State)."
            ],
        )
    return _verdict(
        "node_failure",
        ranks,
        ctx,
        f"Node(s) {', '.join(nodes) or _fmt(ranks)} stopped logging without any error (ranks {_fmt(ranks)}) and "
        f"SLURM cancelled the job DUE TO NODE FAILURE at {_t(at)}: the node died; the other ranks' errors are "
        "consequences.",
        chain,
        nodes=nodes,
    )


def _from_call(ctx: _Ctx, call: LauncherCall) -> Verdict:
    chain = [KeyEvent(what, e.file, e.line, e.text, set(call.culprits)) for what, e in call.evidence]
    return _verdict(
        call.category,
        call.culprits,
        ctx,
        call.explanation,
        chain + ctx.tail,
        call.confidence,
        nodes=call.nodes,
        next_steps=call.next_steps,
        details={"decided_by": call.how, **call.details},
    )


def _dumps_only(ctx: _Ctx) -> Verdict | None:
    """Flight-recorder dumps and no worker log: the dumps' own verdict (analysis.fr_verdict.decide)."""
    from debug_training_logs.analysis import fr_verdict

    f = fr_verdict.decide(ctx.ev)
    if f is None:
        return None
    # an entry without a time is derived: nothing reads its "line" back as a log line
    chain = [KeyEvent(s.what, s.file, s.index, s.text, s.ranks, s.time, derived=s.time is None) for s in f.chain]
    return _verdict(
        f.category, f.culprits, ctx, f.explanation, chain, f.confidence, nodes=[], next_steps=f.next_steps,
        suspect_ranks=f.suspects, missing_ranks=f.no_dump, details={**f.details, "dumps_only": True},
    )  # fmt: skip


def _agent_failure(ctx: _Ctx) -> Verdict | None:
    """No worker ever ran and a torchrun agent says why (its store's port taken, the rendezvous unreachable)."""
    call = agent_failure(ctx.ev.launcher, ctx.w.worker_ranks())
    return _from_call(ctx, call) if call is not None else None


def _causal(ctx: _Ctx) -> Verdict | None:
    """The rank(s) whose own failure came first, or on which the accusations converge (analysis.causal): the one
    rule for a culprit, read by the verifier too."""
    ev = ctx.ev
    f = causal_decide(causal_model(ev), ev)
    if f is None:
        return None
    ranks = f.culprits | f.suspects
    root = f.root
    cancel = _time_limit_cancel(ctx)
    if cancel is not None and (root is None or order_by_bounds(root.line, cancel.when) is False):
        return None  # nothing of a rank's own before the scheduler ended the job: its time limit decides
    stall = root is not None and root.kind == "stall" and ctx.nccl.timed_out and not f.accusations
    if stall and ranks == ctx.nccl.job_stragglers:
        return None  # the NCCL table names the same stragglers: its branch tells them (data lines, AIS chain)
    details: dict[str, Any] = {"decided_by": "causal model", "certainty": f.certainty}
    if root is not None and root.kind == "own_signal" and "SIGKILL" in root.what:
        details["oom_killer_suspected"] = True  # (a process no line maps to a rank too: the launcher's words)
    if root is not None and root.kind in _CRASH_KINDS and not f.accusations:
        fates = causal_model(ev).fates
        lines = [p.line for r in ranks if r in fates and (p := fates[r].primary) is not None]
        trig = [t for t in triggers(ev) if t.hit.rank in ranks and any(_same_line(t.hit, h) for h in lines)]
        if trig:
            v = _crash_verdict(ctx, _earliest_per_rank(trig))
            v.category = f.category
            v.confidence = f.confidence
            v.details.update(details)
            return v
    call = _launcher_call(ctx)
    # the launcher's facts tell the same finding (who, and what failed): its words and evidence then tell it
    told = (
        call is not None
        and call.culprits == ranks
        and call.category == f.category
        and (root is None or root.kind not in ("exception", "stall"))
    )
    chain: list[KeyEvent] = []
    if root is not None and root.line.line > 0:
        chain.append(hit_event(root.line, f"rank {root.rank}: {root.what}" if root.rank is not None else root.what))
    if root is not None and root.later is not None:
        chain.append(hit_event(root.later, f"rank {root.rank}: the stalled read finally fails"))
    if told and call is not None:
        chain += [KeyEvent(what, e.file, e.line, e.text, set(call.culprits)) for what, e in call.evidence]
        details.update(call.details)
    for a in f.accusations[:2]:
        if a.line.line > 0 and not (
            root is not None and (a.line.file, a.line.line) == (root.line.file, root.line.line)
        ):
            by = f"rank {a.by}" if a.by is not None else "a line"
            named = f"{by} names rank(s) {_fmt(a.accused)} ({a.how.replace('_', ' ')})"
            chain.append(hit_event(a.line, named, a.accused))
    for e in f.victims:
        chain.append(hit_event(e.line, f"rank {e.rank}: {e.what} (a consequence)"))
    expl = call.explanation if told and call is not None else f.why + _consequence_note(ctx, f.category, ranks)
    if f.processes:
        expl += " The failed process: " + "; ".join(p.words() for p in f.processes[:4]) + "."
        details["processes"] = [p.words() for p in f.processes[:16]]
    return _verdict(
        f.category,
        f.culprits,
        ctx,
        expl,
        chain + ctx.tail,
        f.confidence,
        nodes=ctx.nodes_of(ranks) if ranks else [p.node for p in f.processes if p.node] or f.nodes,
        details=details,
        next_steps=(call.next_steps if told and call is not None else []) + _stall_steps(f.category, root),
        suspect_ranks=sorted(f.suspects),
    )


_CRASH_KINDS = ("oom", "cuda_error", "exception", "nan", "data_error", "watchdog_hang", "launch")


def _crash_verdict(ctx: _Ctx, cands: list[Trigger]) -> Verdict:
    """The verdict of ranks that failed on their own (OOM, CUDA error, exception, hung watchdog), first first."""
    nccl = ctx.nccl
    states = rank_states(ctx.ev)
    cands.sort(key=lambda t: (t.hit.earliest or datetime.max, t.hit.file, t.hit.line))
    first = cands[0]
    group = cands
    ranks = {t.hit.rank for t in group if t.hit.rank is not None}
    category = "rank_crash" if first.category == "data" else first.category
    st0 = states.get(first.hit.rank) if first.hit.rank is not None else None
    module = st0.module if st0 is not None else None
    head = [hit_event(t.hit, f"rank {t.hit.rank}: {t.what}") for t in group[:4]]
    exc = st0.exception if st0 is not None else None
    if exc is not None and exc.hit != first.hit and first.hit.rank is not None:
        head.insert(len(group[:4]), hit_event(exc.hit, f"rank {first.hit.rank}: {exc.what} reaches the top"))
    exits = [h for h in ctx.w.hits("child_failed") if "exitcode: 1" in h.text or "exitcode: 1)" in h.text]
    if exits:
        head.append(hit_event(exits[0], "torchrun sees the worker exit with an error (exitcode 1)", ranks=ranks))
    details: dict[str, Any] = {"trigger": first.what}
    if module is not None:
        details["module"] = module
    creep = [c for c in ctx.ev.memory_creep if c.rank in ranks]
    if category == "cuda_oom" and creep:
        details["memory_creep"] = True
        head.insert(
            0,
            KeyEvent(
                f"rank {creep[0].rank}'s allocated GPU memory keeps growing ({creep[0].text})",
                creep[0].file,
                creep[0].first_line,
                "",
                {creep[0].rank},
                creep[0].first_time,
                derived=True,
            ),
        )
    if first.what == "NaN/Inf loss":
        details["nan"] = True
    if "address already in use" in first.what:
        details["port"] = True
    if "invalid device ordinal" in first.what:
        details["device_ordinal"] = True
    if first.hit.signal == "xid" or "Xid" in first.what:
        details["xid"] = True
    head = [e for e in head if e.text or e.line] + ctx.tail
    who = f"rank {_fmt(ranks)}" if ranks else "a rank"
    after = ""
    if nccl.timed_out:
        after = (
            " The other ranks then waited in the next collective until the NCCL watchdog timed out: the timeouts, "
            "SIGABRTs and ChildFailedError are consequences."
        )
    leak = (
        f" Its allocated GPU memory had grown from {creep[0].baseline:.0f} MB to {creep[0].peak:.0f} MB, report "
        "after report, before it ran out: a leak, not one large batch."
        if details.get("memory_creep")
        else ""
    )
    where = ""
    if module == "the data loader":
        name = exc.what if exc is not None else first.what
        where = f" It is a crash in the data loader ({name} reached the top and the process ended), not a stall."
    elif module is not None:
        where = f" The exception came from {module}."
    expl = f"{who.capitalize()} failed first: {first.what} ({first.hit.file}:{first.hit.line}).{where}{leak}{after}"
    return _verdict(category, ranks, ctx, expl, head, details=details)


def _nccl(ctx: _Ctx) -> Verdict | None:
    nccl = ctx.nccl
    if not nccl.timed_out:
        return None
    stragglers = _root_stragglers(nccl)
    root_ahead = any(g.classification == "root_ahead" for g in nccl.groups)
    if ctx.w.world_size is not None and ctx.ev.missing_ranks and not stragglers and not root_ahead:
        return None  # every present rank only waited: the cause is in the missing ranks' logs (incomplete evidence)
    limit = ctx.symptom.time if ctx.symptom is not None else None
    if stragglers:
        data = refine_times(ctx.w, data_hits(ctx.ev, stragglers, limit)[:8])
        seen_alive = stragglers & {r.rank for r in nccl.rows}
        died = stragglers & nccl.exited_with_error
        reasons = "; ".join(
            f"rank {r}: {g.reasons[r]}" for g in nccl.groups for r in sorted(g.straggler_ranks & stragglers)
        )[:600]
        head: list[KeyEvent] = []
        if data:
            ais_head = _ais_chain(ctx)
            head = ais_head + [hit_event(h, f"rank {h.rank}: {_short(h.text)}") for h in data[:3]]
            category = "storage_errors" if died == stragglers else "data_loading_stall"
            how = "died of the storage error" if category == "storage_errors" else "stuck in data loading"
            head.append(
                _straggler_event(ctx, stragglers, f"rank(s) {_fmt(stragglers)} {how}, never enter the collective")
            )
            ais_note = f" On the storage side: {head[0].event} ({head[0].file}:{head[0].line})." if ais_head else ""
            fate = (
                " and torchrun reports them exiting with an error: the storage error killed them"
                if category == "storage_errors"
                else ""
            )
            expl = (
                f"Rank(s) {_fmt(stragglers)} never entered the collective ({reasons}). Their last lines are "
                f"data-loading errors ({data[0].file}:{data[0].line}){fate}.{ais_note} Every other rank waited in "
                "the collective until the NCCL watchdog timed out: the timeouts on the other ranks are symptoms."
            )
            return _verdict(
                category,
                stragglers,
                ctx,
                expl,
                head + ctx.tail,
                "high" if seen_alive or died else "medium",
                tz_offset_hours=_offset_if_used(ctx, ais_head),
            )
        head = [_straggler_event(ctx, stragglers, f"rank(s) {_fmt(stragglers)} never enter the collective")]
        expl = (
            f"Rank(s) {_fmt(stragglers)} never entered the collective ({reasons}), but no line of theirs says why "
            "(no data-loading error, no exception, no OOM): the hang is attributed to those ranks, not to a cause."
        )
        return _verdict(
            "nccl_timeout_unattributed",
            stragglers,
            ctx,
            expl,
            head + ctx.tail,
            "medium",
            next_steps=[
                "Dump the stuck rank's Python stacks next time (py-spy dump --pid <PID>, or "
                "faulthandler) and enable the flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE)."
            ],
        )
    detected_groups = [g for g in nccl.groups if g.detected_ranks]
    fabric_shown, fabric_why = fabric_evidence(ctx.ev)
    all_inside = (
        bool(detected_groups)
        and all(g.classification == "fabric" for g in detected_groups)
        and not nccl.ranks_without_state
    )
    if all_inside and not fabric_shown:
        old = not counters_known(ctx.ev)
        expl = f"NCCL collectives timed out on every rank, but the cause cannot be attributed: {fabric_why}." + (
            "" if old else " Fabric suspected."
        )
        steps = [
            "Upgrade to torch >= 2.3 (its watchdog logs last enqueued/completed per rank) or enable the flight "
            "recorder (TORCH_NCCL_TRACE_BUFFER_SIZE=2000, TORCH_NCCL_DUMP_ON_TIMEOUT=1), and run with NCCL_DEBUG=INFO."
            if old
            else "Check the fabric on the nodes involved (ibstat, NCCL_DEBUG=INFO for NCCL WARN/NET/IB lines, dmesg "
            "for Xid) and enable the flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE=2000)."
        ]
        details = {"no_counters": True} if old else {"fabric_suspected": True}
        return _verdict("nccl_timeout_unattributed", [], ctx, expl, ctx.tail, "low", next_steps=steps, details=details)
    if all_inside:
        warns = ctx.w.hits("net_error")
        nodes = sorted({n for h in warns if (n := _node_of_hit(ctx, h)) is not None})
        head = [hit_event(h, "NCCL transport error", ranks=()) for h in warns[:2]]
        expl = (
            "Every rank entered the collective (last enqueued > last completed everywhere) and every rank's own "
            "watchdog fired (first to dump on each): no straggler, the collective itself hung - a GPU/network "
            "fabric problem." + (f" NCCL reported transport errors on {', '.join(nodes)}." if nodes else "")
        )
        return _verdict(
            "gpu_fabric",
            [],
            ctx,
            expl,
            [*ctx.tail[:1], *head, *ctx.tail[1:]],
            nodes=nodes,
            confidence="high" if warns else "medium",
        )
    ahead = [g for g in nccl.groups if g.classification == "root_ahead" and g.root_rank is not None]
    if ahead:
        g = ahead[0]
        root = g.root_rank
        assert root is not None
        expl = (
            f"Rank {root} (the broadcast root of PG {g.pg}) is {g.root_gap} collective(s) ahead of the other ranks "
            f"(last enqueued), while every rank is inside a collective: the ranks disagree on which collective "
            f"comes next. {_gap_note(g.root_gap)}"
        )
        rrow = next(r for r in nccl.rows if r.rank == root and r.pg == g.pg)
        head = [
            KeyEvent(
                f"rank {root} is {g.root_gap} collective(s) ahead (SeqNum {rrow.seq})",
                rrow.file,
                rrow.line,
                rrow.text,
                {root},
                rrow.timeout_time,
            )
        ]
        return _verdict(
            "collective_mismatch",
            [root],
            ctx,
            expl,
            ctx.tail[:1] + head + ctx.tail[1:],
            "medium",
            rank0_seq_gap=g.root_gap,
        )
    classes = ", ".join(f"PG {g.pg}: {g.classification}" for g in nccl.groups)
    expl = (
        f"NCCL collectives timed out but the state table does not single out a rank ({classes}): no rank without "
        "pending work, not every rank in the collective, and no earlier error in any rank's log."
    )
    return _verdict(
        "nccl_timeout_unattributed",
        [],
        ctx,
        expl,
        ctx.tail,
        "low",
        next_steps=[
            "Enable the flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE=2000, TORCH_NCCL_DUMP_ON_TIMEOUT=1) and "
            "NCCL_DEBUG=INFO, and compare the dumps of every rank."
        ],
    )


def _time_limit(ctx: _Ctx) -> Verdict | None:
    cancel = _time_limit_cancel(ctx)
    if cancel is None or ctx.nccl.timed_out:
        return None
    reason = re.search(r"DUE TO ([A-Z ]+?) \*\*\*", cancel.text)
    why = reason.group(1) if reason else "an operator's cancel"
    jumps = ctx.ev.step_jumps
    all_ranks = ctx.w.ranks
    slow = {j.rank for j in jumps}
    head: list[KeyEvent] = []
    expl = f"SLURM cancelled the job ({why}) at {_t(cancel.when)}; no rank failed before that."
    details: dict[str, Any] = {}
    if slow and slow != all_ranks:
        j = jumps[0]
        details["throughput_collapse"] = True
        head.append(
            KeyEvent(
                f"step time jumps on rank(s) {_fmt(slow)} ({j.text} ms per step)",
                j.file,
                j.first_line,
                "",
                slow,
                j.first_time,
            )
        )
        expl += (
            f" Throughput collapsed first: the step time of rank(s) {_fmt(slow)} went from {j.baseline:.0f} ms to "
            f"{j.peak:.0f} ms per step (the other ranks did not), so the run could not finish in its allocation."
        )
    elif slow:
        details["throughput_collapse"] = True
        expl += " Every rank's step time jumped together: a job-wide slowdown, not one rank."
    chain = [*head, hit_event(cancel, f"SLURM cancels the job ({why})", ranks=())]
    culprits = slow if slow != all_ranks else set()
    return _verdict("time_limit", culprits, ctx, expl, chain, details=details)


def _clean(ctx: _Ctx) -> Verdict | None:
    """Every rank finished: no_failure, whatever warnings (retried resets, handled exceptions) the run logged."""
    end = job_finished(ctx.ev)
    if end is None:
        return None
    ends = [end]
    resets = storage_resets(ctx.ev)[1]
    expl = "The training loop ended normally and no process killer appears in any rank's log."
    details: dict[str, Any] = {}
    if resets:
        details["resets_retried"] = True
        expl += f" The {resets} connection reset(s) were retried and training went on: keep-alive noise, not a failure."
    return _verdict(
        "no_failure", [], ctx, expl, [hit_event(ends[-1], "training ends normally", ranks=())], details=details
    )


def _undetermined(ctx: _Ctx) -> Verdict:
    expl = (
        "No rank's log shows a failure (no NCCL timeout, crash, OOM, CUDA error or SLURM cancellation) and none shows "
        "the training loop ending normally: the logs end without saying why."
    )
    return _verdict(
        "incomplete_evidence",
        [],
        ctx,
        expl,
        ctx.tail,
        "low",
        nodes=[],
        next_steps=[
            "Check that the files are complete (not cut by a full disk or a copy in progress) and fetch the SLURM "
            "accounting record (sacct -j <JOBID>) and the node's kernel log (dmesg) for the end of the job."
        ],
    )


def _finish(ctx: _Ctx, v: Verdict) -> Verdict:
    v.chain = _dedupe(v.chain)
    _bound_untimed(ctx.w, v.chain)
    # the trigger first (up to the first line it cites), then what followed in time order (lines of several files,
    # some without a time of their own)
    k = next((i for i, e in enumerate(v.chain) if e.file and e.line > 0 and e.text and not e.derived), 0) + 1
    v.chain[k:] = sorted(v.chain[k:], key=lambda e: e.time or e.earliest or e.latest or datetime.max)
    v.root = v.chain[0] if v.chain else None
    v.timeline = _timeline(ctx, v)
    _bound_untimed(ctx.w, v.timeline)
    v.timeline.sort(key=timeline_order)
    v.key_files = _key_files(v)
    v.details.setdefault("resets_retried", bool(storage_resets(ctx.ev)[1]) and not ctx.w.counts.get("retry_exhausted"))
    return v
