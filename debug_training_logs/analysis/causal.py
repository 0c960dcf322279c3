"""The causal model's finding: the failure's shape, who caused it, and how sure the evidence lets us be.

Read by the decision procedure (:mod:`~debug_training_logs.analysis.diagnosis`) and the verifier alike: the rule
that names a culprit is written once, here, over the model :mod:`~debug_training_logs.analysis.fate_events` gathers.

1. The culprit is where the accusations converge (torch's own ones first: monitoredBarrier, DETAIL fingerprints,
   flight-recorder non-joiners), when the accused rank's own fate does not clear it; otherwise the earliest primary
   event (ties within a few seconds, of one kind, are reported together), a rank's own failure line before a
   failure inferred from what a rank did not do, unless it provably came later.
2. Some shapes blame no rank: every rank failing alike before any step (a launch failure), a DETAIL desync no
   fingerprint singles out, a size-mismatch report (both sides suspect), timeouts nothing explains.
3. Coverage decides how sure the finding is, never whether it is said: with every rank read it is established; with
   a subset it is provisional (the ranks are suspects: a hidden rank may hold an earlier failure); a rank named for
   what it did not do needs a world known to be complete.

Pure and MCP-free.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta

from debug_training_logs.analysis.evidence_states import job_finished
from debug_training_logs.analysis.evidence_triggers import CLOCK_SLACK, data_hits, triggers
from debug_training_logs.analysis.evidence_types import Hit, JobEvidence
from debug_training_logs.analysis.fate_events import (
    INFERRED_KINDS,
    causal_model,
    hit_of,
    primary_of,
)
from debug_training_logs.analysis.fates import (
    WAITED_ON_PEER,
    Accusation,
    CausalModel,
    Certainty,
    Fate,
    Finding,
    RankEvent,
)
from debug_training_logs.analysis.hang_events import stack_hit
from debug_training_logs.analysis.silent_fates import collective_start, step_of
from debug_training_logs.formats import nccl
from debug_training_logs.formats.storage import is_storage_failure
from debug_training_logs.ranges import format_ranges
from debug_training_logs.textcut import cut

TIE_WINDOW = timedelta(seconds=5)
"""Primary events of one kind within this much of the first are reported together (they failed at the same time)."""


def _fmt(ranks: Iterable[int]) -> str:
    return format_ranges(ranks) or "none"


# ---------------------------------------------------------------------------------------------------------------------
# Deciding

KIND_CATEGORY = {
    "oom": "cuda_oom",
    "cuda_error": "cuda_error",
    "exception": "rank_crash",
    "nan": "rank_crash",
    "own_signal": "rank_crash",
    "data_error": "rank_crash",
    "early_exit": "early_exit",
    "detour": "collective_mismatch",
    "launch": "rank_crash",
    "watchdog_hang": "watchdog_hang",
    "node_lost": "node_failure",
    "stuck_data": "data_loading_stall",
    "stuck_checkpoint": "checkpoint_stall",
    "stuck": "rank_stuck",
    "gone": "rank_crash",
}
"""The failure shape a culprit's primary event shows (a stall's depends on where the rank stopped: :func:`_stall`)."""


def category_of(e: RankEvent) -> str:
    """The failure shape of a primary event: :data:`KIND_CATEGORY`, except that an error of the storage service (a
    5xx, retries given up, a read timeout, a missing object) that ended the rank is a storage error."""
    if e.kind in ("exception", "data_error") and is_storage_failure(e.line.text):
        return "storage_errors"
    return KIND_CATEGORY.get(e.kind, "rank_crash")


_KIND_ORDER = {
    k: i
    for i, k in enumerate(
        (
            "oom",
            "cuda_error",
            "own_signal",
            "nan",
            "exception",
            "data_error",
            "watchdog_hang",
            "launch",
            "detour",
            "early_exit",
            "gone",
            "stuck_checkpoint",
            "stuck_data",
            "stuck",
            "stall",
        )
    )
}
"""Among primary events that no time orders, the ones that end a process on the spot come first."""


def decide(model: CausalModel, ev: JobEvidence) -> Finding | None:
    """The finding the causal model supports, or None when no rank's fate shows a failure of its own and no line
    accuses one (the job-level shapes, a fabric hang, an unattributed timeout, are decided elsewhere)."""
    cached = ev.cache.get("finding", False)
    if cached is not False:
        return cached  # type: ignore[no-any-return]
    finding = _decide(model, ev)
    ev.cache["finding"] = finding
    return finding


def converged(model: CausalModel) -> tuple[set[int], list[Accusation]]:
    """The ranks the accusations converge on (named by the most accusing lines), minus any whose own fate clears
    them (it finished normally), and the accusations that name them."""
    # torch's own accusations (monitoredBarrier, DETAIL fingerprints, the flight recorder) outrank a trainer's words
    formal = [a for a in model.accusations if a.how != "trainer"]
    votes: Counter[int] = Counter()
    for a in formal or model.accusations:
        for r in a.accused:
            votes[r] += 1
    if not votes:
        return set(), []
    top = max(votes.values())
    named = {r for r, v in votes.items() if v == top}
    named = {r for r in named if (f := model.fates.get(r)) is None or f.end != "finished"}
    # where an accused rank's own failure is in the logs, the accused ranks its logs show only reacting (a timeout,
    # a lost peer) are its victims, not co-culprits
    own = {r for r in named if (f := model.fates.get(r)) is not None and (p := f.primary) is not None and not p.weak}
    if own:
        named = {r for r in named if r in own or not ((f := model.fates.get(r)) is not None and f.consequences)}
    elif named and all(_lost_a_peer(model.fates.get(r)) for r in named) and _failed_on_own(model, named):
        # the accused ranks lost a peer process themselves, and another rank failed on its own: they never got
        # further because they waited on that one (in a group the accusing lines cannot see)
        return set(), []
    return named, [a for a in (formal or model.accusations) if a.accused & named]


def _lost_a_peer(f: Fate | None) -> bool:
    return f is not None and any(e.kind == "peer_closed" for e in f.events)


def _failed_on_own(model: CausalModel, besides: set[int]) -> bool:
    return any(
        (p := f.primary) is not None and not p.weak and p.kind != "stall"
        for r, f in model.fates.items()
        if r not in besides
    )


def _decide(model: CausalModel, ev: JobEvidence) -> Finding | None:
    firsts = [p for f in model.fates.values() if (p := f.primary) is not None]
    strong = [e for e in firsts if not e.weak]
    reports = [e for f in model.fates.values() for e in f.events if e.kind == "peer_mismatch"]
    if reports and not strong and not any(a.how == "rank_outlier" for a in model.accusations):
        # gloo received a buffer of another size than it expected: the ranks ran different collectives or sizes
        first = min(reports, key=_order)
        parties = {e.rank for e in reports if e.rank is not None}
        fr = ev.flight_recorder
        named = fr.culprits[0] if fr is not None and fr.dumps else set()
        why = (
            f"Rank(s) {_fmt(parties)} received buffers of another size than they expected ({first.line.file}:"
            f"{first.line.line}): the ranks of a group ran different collectives, sizes or dtypes. The report names "
            "no side: the rank that received it and its peer(s) are suspects."
        )
        f = _finish(model, ev, "collective_mismatch", set(), first, why, [])
        f.culprits, f.suspects, f.confidence = set(), parties | named, "low"
        return f
    named, accs = converged(model)
    if named:
        own = sorted((e for e in firsts if e.rank in named and not e.weak), key=_order)
        root = own[0] if own else None
        if any(a.how == "stack_dump" for a in accs) and (root is None or root.kind in ("stall", "early_exit")):
            # the stacks say where the rank is stuck: that, not when its log went quiet, is the failure's shape
            root = next(
                (
                    e
                    for f in model.fates.values()
                    for e in f.events
                    if e.line.signal == "stack_dump" and e.rank in named and e.primary
                ),
                root,
            )
        culprits = set(named)
        if root is None:
            root = _told_by_the_accusation(ev, accs, named)
        if root is not None and root.kind != "stall":
            category = category_of(root)
        elif any(a.how in ("detail_mismatch", "flight_recorder_mismatch", "rank_outlier") for a in accs):
            category = "collective_mismatch"
        elif root is None and (exits := sorted((e for e in firsts if e.rank in named and e.weak), key=_order)):
            # the rank the lines accuse exited with an error code of its own (its launcher says so): a crash, whose
            # words are the accusing line's
            root = exits[0]
            category = category_of(root)
        else:
            category = _stall(ev, culprits)
        why = _accused_why(culprits, accs, root)
        found = _finish(model, ev, category, culprits, root, why, accs)
        if root is not None and root.line.signal == "stack_dump" and root.what.startswith("computing"):
            # on CPU in its own code: a slow step and an endless loop look alike in one dump
            found.confidence = "medium" if found.confidence == "high" else found.confidence
            found.why += " One dump cannot tell a slow step from an endless one: a second dump a minute later tells."
        return found
    lf = ev.launcher
    # DETAIL reported a desync, no fingerprint is the odd one out and no rank failed on its own: the exits that follow
    # (a weak 'exited with code 1') are the report's
    if lf is not None and lf.mismatches and not strong:
        r0, m, e = lf.mismatches[0]
        line = hit_of(e.file, e.line, e.text, r0, ev.worker.year)
        what = f"ranks ran different collectives at sequence {m.first.seq} ({', '.join(m.differs_in) or 'op'})"
        why = (
            f"TORCH_DISTRIBUTED_DEBUG=DETAIL reports that {what} ({e.file}:{e.line}); no rank's fingerprint differs "
            "from a majority, so the reports single out no rank (a data- or rank-dependent branch in code every rank "
            "runs is the usual cause)."
        )
        return _finish(model, ev, "collective_mismatch", set(), RankEvent(r0, "report", what, line), why, [])
    if not strong and not ev.nccl.timed_out and (fabric := _link_failure(model, ev)) is not None:
        return fabric
    pool = strong or [e for e in firsts if e.weak]
    if pool:
        pool.sort(key=_order)
        first = _definitive_first(pool)
        cat = category_of(first) if first.kind in KIND_CATEGORY else None
        group = [e for e in pool if _same_failure(e, first)]
        culprits = {e.rank for e in group if e.rank is not None}
        category = cat if cat is not None else _stall(ev, culprits)
        present = {r for r, f in model.fates.items() if f.end != "absent"}
        if _before_training(model, ev) and first.kind in ("exception", "own_signal") and len(culprits) > 1:
            every = "Every rank" if culprits >= present else "Several ranks"
            why = (
                f"{every} ({_fmt(culprits)}) failed the same way before any training progress: {first.what} "
                f"({first.line.file}:{first.line.line}). The job never started training: a launch or configuration "
                "problem the ranks share, not one rank's fault."
            )
            return _finish(model, ev, "launch_failure", set(), first, why, [])
        at = f" ({first.line.file}:{first.line.line})" if first.line.line else ""
        if first.kind == "stall":
            why = f"Rank(s) {_fmt(culprits)} {first.what}{at}." + _stall_note(ev, culprits, category)
        elif first.kind in INFERRED_KINDS:
            why = f"Rank(s) {_fmt(culprits)} {first.what}{at}."
        else:
            why = f"Rank(s) {_fmt(culprits)} failed first on their own: {first.what}{at}."
        return _finish(model, ev, category, culprits, first, why, [])
    if model.processes:
        first = min(model.processes, key=_order)
        if (
            _before_training(model, ev)
            and len({e.what.split(" failed")[-1] for e in model.processes}) == 1
            and (len(model.processes) > 1 and first.kind == "exception")
        ):
            why = (
                f"The worker processes failed the same way before any training progress ({first.what}, "
                f"{first.line.file}:{first.line.line}): a launch or configuration problem, not one rank's fault."
            )
            return _finish(model, ev, "launch_failure", set(), first, why, [])
        procs = list({q.words(): q for e in model.processes if (q := e.process) is not None}.values())
        category = category_of(first)
        at = f"{first.line.file}:{first.line.line}"
        why = (
            (
                f"{_upper_first(first.process.words())} failed: {first.what} ({at}); no line maps that process to a "
                "global rank."
                if first.process.gpu is not None
                else f"The stacks show {first.process.words()} {first.what} ({at}); no line maps that process to a "
                "global rank."
                if first.line.signal in ("stack_dump", "telemetry")
                else f"The launcher reports {first.what} ({at}); no line maps that process to a global rank."
            )
            if first.process is not None
            else f"A process failed on its own: {first.what} ({at}); no line says which rank wrote it."
        )
        # a process known by its rank in the watchdog's group: the rank to suspect (the global one in the default
        # group, which an old torch's line does not name)
        pg_ranks = {
            q.pg_rank for e in model.processes if e.kind == first.kind and (q := e.process) and q.pg_rank is not None
        }
        if pg_ranks:
            why += (
                f" The watchdog's lines name rank(s) {_fmt(pg_ranks)} of their process group (the global rank(s) "
                "when that group is the default one): suspects."
            )
        f = _finish(model, ev, category, set(), first, why, [])
        f.processes = procs
        f.suspects = set(pg_ranks) if f.certainty == "provisional" else set()
        return f
    return _only_consequences(model, ev) or _hang_in_one_collective(model, ev)


def _all_finished(model: CausalModel) -> bool:
    return bool(model.fates) and all(f.end == "finished" for f in model.fates.values())


def _hang_in_one_collective(model: CausalModel, ev: JobEvidence) -> Finding | None:
    """The stacks show every dumped rank waiting in the same collective and none outside it: a hang no dumped rank
    explains. The ranks the logs know but nobody dumped are where the others' peer may be: suspects."""
    hang = ev.hang
    if hang is None or hang.stuck or hang.detours:
        return None
    # ranks in backward may be computing: only a real wait in a collective (or the rendezvous) shows a hang; and a
    # job whose logs show every rank finishing was merely dumped while it ran
    if not any(p.state.kind != "backward" for p in hang.waiting) or _all_finished(model):
        return None
    dumped = hang.dumped_ranks
    known = set(model.seen) | (set(range(model.world_size)) if model.world_size is not None else set())
    undumped = known - dumped
    p = hang.waiting[0]
    line = stack_hit(p)
    what = f"every dumped rank waits in {hang.waits_in}"
    why = f"The stacks show that {what} ({p.cite()}) and no dumped rank is anywhere else"
    if undumped and dumped:
        why += f"; rank(s) {_fmt(undumped)} were not dumped: the rank they wait for is among them (suspects)."
    elif not dumped:
        why += "; no dump says which rank it is, so no rank is singled out."
    else:
        why += ": a hang that no rank's stack explains (the fabric, or a peer outside these processes)."
    f = _finish(model, ev, "nccl_timeout_unattributed", set(), RankEvent(p.rank, "peer_timeout", what, line), why, [])
    f.culprits, f.suspects = set(), undumped if dumped else set()
    f.confidence = "low"
    return f


def _link_failure(model: CausalModel, ev: JobEvidence) -> Finding | None:
    """NCCL's transport failed on a link (InfiniBand completion errors, failed verbs calls) and no rank failed on its
    own: the fabric, on the nodes that logged it. (A peer that died could leave the same errors on the others: on a
    subset of the ranks the finding stays provisional.)"""
    links = [(h, le) for h in ev.worker.hits("net_error") if (le := nccl.link_error(h.text)) is not None]
    if not links:
        return None
    # NCCL's own line (its host prefix) over the copy a torch error message quotes ('Last error: NET/IB ...')
    h, first = min(links, key=lambda x: (x[1].host is None, x[0].earliest or datetime.max, x[0].file, x[0].line))
    hosts = sorted({le.host for _, le in links if le.host is not None})
    peers = sorted({le.peer for _, le in links if le.peer is not None})
    on = f" on {', '.join(hosts[:6])}" if hosts else ""
    toward = f" toward peer(s) {', '.join(peers[:6])}" if peers else ""
    what = f"NCCL's transport failed ({first.what}){on}"
    why = (
        f"NCCL logged {len(links)} link failure(s){on}{toward} ({h.file}:{h.line}), and no rank failed on its own "
        "before them: the network fabric between the nodes, not a rank (a port down, a cable, an adapter's "
        "configuration). The ranks' NCCL errors are its consequences."
    )
    f = _finish(model, ev, "gpu_fabric", set(), RankEvent(h.rank, "link_error", what, h), why, [])
    f.nodes = hosts
    return f


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def _before_training(model: CausalModel, ev: JobEvidence) -> bool:
    """No rank logged any training progress (no progress line at all, a rank's or one no rank prefix names): the job
    failed before its first step."""
    return all(f.last_progress is None for f in model.fates.values()) and not ev.worker.hits("progress")


def _only_consequences(model: CausalModel, ev: JobEvidence) -> Finding | None:
    """Ranks timed out, lost their peers or were stopped, and no rank's own failure is in the logs: the collective
    hung and nothing says why. The ranks that reacted to nothing (present, no consequence of their own) are what the
    others waited for: suspects."""
    unattributed = ev.nccl.table.unattributed_timeouts
    if unattributed and not ev.nccl.timed_out:  # watchdog timeouts whose lines name no global rank
        u = unattributed[0]
        e = u.evidence
        line = Hit("nccl", e.file, e.line, e.text, None, None)
        what = f"NCCL watchdog timeouts ({u.op_type} SeqNum {u.seq}) on ranks no line names globally"
        why = f"{what} ({e.file}:{e.line}): the collective hung, and nothing in these lines says who caused it."
        f = _finish(model, ev, "nccl_timeout_unattributed", set(), RankEvent(None, "peer_timeout", what, line), why, [])
        f.confidence = "low"
        return f
    if ev.nccl.timed_out or (model.world_size is not None and model.missing):
        # an NCCL hang is the NCCL table's own branch (fabric, root ahead, unattributed); with known ranks missing
        # and every present rank only reacting, the cause is in the missing ranks' logs: incomplete evidence
        return None
    reacted = [f for f in model.fates.values() if any(e.kind in WAITED_ON_PEER for e in f.events)]
    if not reacted:
        return None
    first = min((e for f in reacted for e in f.events if e.kind in WAITED_ON_PEER), key=_order)
    # a peer that went away is not one its agent SIGTERMed (that one was alive): with closed connections only, the
    # ranks their agents stopped are bystanders
    closures_only = not any(e.kind == "peer_timeout" for f in reacted for e in f.events)
    quiet = {
        r
        for r, f in model.fates.items()
        if f.end not in ("absent", "finished")
        and f not in reacted
        and not any(e.kind == "report" for e in f.events)
        and not (closures_only and f.stopped_by is not None)
    }
    suspects = quiet if quiet and len(quiet) < len(reacted) else set()
    why = (
        f"Rank(s) {_fmt(f.rank for f in reacted)} timed out waiting or lost a peer in a collective ({first.what}, "
        f"{first.line.file}:{first.line.line}), and no rank's own failure is in the logs"
        + (f"; rank(s) {_fmt(suspects)} reacted to nothing: the ones the others waited for." if suspects else ".")
    )
    f = _finish(model, ev, "nccl_timeout_unattributed", set(), first, why, [])
    f.culprits, f.suspects = set(), suspects
    f.confidence = "low"
    return f


def _definitive_first(pool: list[RankEvent]) -> RankEvent:
    """The earliest event of ``pool`` (sorted), unless it is inferred and a rank's own failure is not provably later:
    a crash line without a time can still be the first thing that went wrong, and the ranks it stopped look stalled."""
    first = pool[0]
    if first.kind not in INFERRED_KINDS:
        return first
    for e in pool:
        if e.kind in INFERRED_KINDS:
            continue
        later = e.earliest is not None and first.latest is not None and e.earliest > first.latest + CLOCK_SLACK
        if not later:
            return e
    return first


_HOW_WORDS = {
    "monitored_barrier": "torch's monitoredBarrier names it",
    "trainer": "the trainer's own error lines name it",
    "detail_mismatch": "TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprints single it out",
    "stack_dump": "its stack dump, taken while the job hung",
    "nccl_ras": "NCCL RAS reports it behind the others",
}


def _accused_why(culprits: set[int], accs: list[Accusation], root: RankEvent | None) -> str:
    """The reasoning of a finding the accusations decide, in the words of whoever accused."""
    parts = []
    for how in sorted({a.how for a in accs}):
        if how.startswith("flight_recorder"):
            what = how.removeprefix("flight_recorder_").replace("_", " ")
            parts.append(f"the flight-recorder dumps name it ({what})")
        elif how == "rank_outlier":
            first = next(a for a in accs if a.how == how)
            parts.append(
                f"before the size mismatch it alone wrote {cut(first.line.text.strip(), 160)!r} "
                f"({first.line.file}:{first.line.line}) where every other rank wrote otherwise"
            )
        else:
            first = next(a for a in accs if a.how == how)
            parts.append(f"{_HOW_WORDS.get(how, how)} ({first.line.file}:{first.line.line})")
    said = "; ".join(parts)
    if root is None:
        return f"Rank(s) {_fmt(culprits)}: {said}."
    agree = (
        " The flight-recorder dumps agree with its own logs."
        if any(a.how.startswith("flight_recorder") for a in accs)
        else ""
    )
    return f"Rank(s) {_fmt(culprits)} {root.what} ({said}).{agree}"


_TOLD_KINDS = ("nan", "oom", "cuda_error", "data_error")
"""What a line naming a rank can tell of that rank's own state (``nan on rank 3``, ``out of memory on rank 3``); an
exception on such a line is its writer's (``RuntimeError: Rank 2 failed to pass monitoredBarrier``)."""


def _told_by_the_accusation(ev: JobEvidence, accs: list[Accusation], named: set[int]) -> RankEvent | None:
    """The failure read on the very line of a trainer's that names the one rank (``Unexpected result nan on rank
    3``): that rank's own failure, in the words of the line that names it, when no line of the rank's own tells one."""
    if len(named) != 1:
        return None
    lines = {(a.line.file, a.line.line) for a in accs if a.how == "trainer"}
    told = [e for t in triggers(ev) if (t.hit.file, t.hit.line) in lines and (e := primary_of(t)).kind in _TOLD_KINDS]
    if not told:
        return None
    first = min(told, key=_order)
    return replace(first, rank=next(iter(named)), what=f"failed: {first.what}")


def _order(e: RankEvent) -> tuple[datetime, int, str, int]:
    return (e.earliest or datetime.max, _KIND_ORDER.get(e.kind, 99), e.line.file, e.line.line)


def _same_failure(e: RankEvent, first: RankEvent) -> bool:
    if KIND_CATEGORY.get(e.kind, e.kind) != KIND_CATEGORY.get(first.kind, first.kind):
        return False
    t0, t = first.earliest, e.earliest
    if t0 is None or t is None:
        return t0 is None and t is None
    return t <= t0 + TIE_WINDOW


def _stall(ev: JobEvidence, ranks: set[int]) -> str:
    """A stall's shape from where the ranks stopped: storage errors that killed them, data-loading errors, or a
    completed step as their last line (the step loop's work outside any collective is fetching the next batch: a
    data-loading stall by elimination); else the hang is attributed to the ranks, not to a cause."""
    data = data_hits(ev, ranks, None)
    if data:
        died = {r for r in ranks if (ev.nccl.exited_with_error and r in ev.nccl.exited_with_error)}
        return "storage_errors" if died == ranks else "data_loading_stall"
    progress = ev.worker.last_by_rank.get("progress", {})
    if ranks and all(step_of(progress.get(r)) is not None for r in ranks):
        return "data_loading_stall"
    if ranks and _between_collectives(ev, ranks):
        return "data_loading_stall"
    return "nccl_timeout_unattributed"


def _between_collectives(ev: JobEvidence, ranks: set[int]) -> bool:
    """The flight-recorder dumps show the ranks outside any collective: they never joined the one their group waits
    in and wait in no other (their last recorded work is done), the same place a completed step line shows."""
    fr = ev.flight_recorder
    if fr is None or not fr.dumps:
        return False
    groups = fr.stuck_groups
    for r in ranks:
        if not any(r in g.never_joined for g in groups):
            return False
        if any(g.stuck is not None and r in g.stuck.joined and r not in g.never_joined for g in groups):
            return False
    return True


def _stall_note(ev: JobEvidence, ranks: set[int], category: str) -> str:
    if category != "data_loading_stall":
        return " No line of theirs says where they stopped (the hang is attributed to the rank, not to a cause)."
    if data_hits(ev, ranks, None):
        return " Their last lines are data-loading errors."
    return (
        " Their last line is a completed training step: they stopped between steps, outside any collective, where the "
        "training loop fetches its next batch (a data-loading stall by elimination; a stack dump of the rank while it "
        "hangs would show the very call)."
    )


def _finish(
    model: CausalModel,
    ev: JobEvidence,
    category: str,
    culprits: set[int],
    root: RankEvent | None,
    why: str,
    accs: list[Accusation],
) -> Finding:
    victims = [e for f in model.fates.values() if f.rank not in culprits for e in f.consequences[:1] if e is not root]
    victims.sort(key=_order)
    # a rank named for what it did not do (stalled, left, went silent) is only established when the world is known
    # to be complete: a rank of an unstated world may be as silent in a file nobody has
    inferred = root is not None and root.kind in INFERRED_KINDS and not accs
    sure = model.complete and not (inferred and model.world_size is None)
    certainty: Certainty = "established" if sure else "provisional"
    confidence = "high"
    if root is None or root.kind in ("stall", "early_exit") or (root is not None and root.weak):
        confidence = "medium"
    if category in ("nccl_timeout_unattributed",):
        confidence = "medium" if culprits else "low"
    if model.world_size is None and certainty == "established":
        confidence = "medium" if confidence == "high" else confidence
    if root is not None and root.kind in INFERRED_KINDS and accs:
        confidence = "high"  # what the rank did not do, and the lines that name it, agree
    if certainty == "provisional":
        confidence = "low" if confidence != "high" else "medium"
        return Finding(category, set(), culprits, certainty, root, why, accs, [], victims[:3], confidence)
    return Finding(category, culprits, set(), certainty, root, why, accs, [], victims[:3], confidence)


def explained_by_earlier(model: CausalModel, rank: int) -> RankEvent | None:
    """A primary event on another rank that happened before ``rank``'s own (what explains it), when there is one."""
    f = model.fates.get(rank)
    mine = f.primary if f is not None else None
    if mine is None or mine.earliest is None:
        return None
    earlier = [
        p
        for g in model.fates.values()
        if g.rank != rank
        and (p := g.primary) is not None
        and not p.weak
        and p.latest is not None
        and p.latest + CLOCK_SLACK < mine.earliest
        and p.kind not in ("stall",)
    ]
    return min(earlier, key=_order) if earlier else None


__all__ = [
    "INFERRED_KINDS",
    "causal_model",
    "collective_start",
    "converged",
    "decide",
    "explained_by_earlier",
    "job_finished",
]
