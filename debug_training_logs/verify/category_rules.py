"""The category-specific rule: each category's own evidence (the OOM/CUDA error/exception on the culprit before the
symptom, the SLURM cancel with no earlier failure, a clean end with no process killer, ...), one check per category."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from debug_training_logs.analysis.causal import causal_model
from debug_training_logs.analysis.evidence_states import (
    crash_triggers,
    fabric_evidence,
    job_finished,
    killers,
    node_failure_facts,
    precedes_symptom,
    rank_states,
)
from debug_training_logs.analysis.evidence_triggers import data_hits
from debug_training_logs.analysis.evidence_types import Hit, RankState
from debug_training_logs.formats.slurm import scheduler_ended
from debug_training_logs.textcut import cut
from debug_training_logs.verify.context import MAX_EVIDENCE, SLACK, RuleContext
from debug_training_logs.verify.context import check as _check
from debug_training_logs.verify.fate_rules import shown as launcher_supports
from debug_training_logs.verify.hang_rules import hang_shows, stack_category
from debug_training_logs.verify.models import Check
from debug_training_logs.verify.rule_helpers import RESET as _RESET
from debug_training_logs.verify.rule_helpers import established_conclusion, first_crash, root_stragglers
from debug_training_logs.verify.rule_helpers import fmt_ranks as _fmt
from debug_training_logs.verify.rule_helpers import fmt_time as _t
from debug_training_logs.verify.rule_helpers import row_cite as _row_cite

# ---------------------------------------------------------------------------------------------------------------------
# category-specific


def _needs_line_on_culprits(ctx: RuleContext, kind: str, what: str) -> Check:
    """Every culprit crashed (its state), of a failure of ``kind`` that did not come after the first symptom, and no
    other rank plainly failed before it. ``rank_crash`` takes any crash (a crash is a crash whatever raised it)."""
    rule = f"category_specific:{ctx.category}"
    if not ctx.culprits or ctx.conclusion.provisional:
        # a process no line maps to a rank (an NCCL line's host:pid [GPU], an old torch's PG rank): the causal
        # model's finding, suspects at most
        ok, why, ev = launcher_supports(ctx)
        if ok:
            return _check(rule, "passed", f"No rank is established: {why}.", ev)
    if not ctx.culprits:
        return _check(
            rule,
            "failed",
            f"{ctx.category} needs the rank(s) with the {what}; none is named.",
            next_step="Name the culprit ranks.",
        )
    if (shown := hang_shows(ctx, kind)) is not None:
        return shown
    states = rank_states(ctx.ev)
    fatal = crash_triggers(ctx.ev)
    kinds = {"rank_crash", "data", "cuda_oom", "cuda_error"} if kind == "rank_crash" else {kind}
    found: dict[int, Hit] = {}
    for r in sorted(ctx.culprits):
        t = next((t for t in fatal.get(r, []) if t.category in kinds), None)
        if t is not None:
            found[r] = t.hit
    exit_only = [r for r in ctx.culprits if r not in found and kind == "rank_crash" and _state(states, r) == "crashed"]
    missing = sorted(r for r in ctx.culprits if r not in found and r not in exit_only)
    if missing:
        others = sorted(r for r, ts in fatal.items() if any(t.category in kinds for t in ts))
        return _check(
            rule,
            "failed",
            f"No {what} on rank(s) {_fmt(missing)}" + (f"; it is on rank(s) {_fmt(others)}." if others else "."),
            [t.hit.cite() for r in others[:MAX_EVIDENCE] for t in fatal[r][:1]],
            f"Name the rank(s) whose log has the {what}.",
        )
    alive = sorted(r for r in ctx.culprits if _state(states, r) not in ("crashed", "watchdog_killed"))
    if alive:
        r = alive[0]
        st = states.get(r)
        return _check(
            rule,
            "failed",
            f"Rank(s) {_fmt(alive)} did not die of it: rank {r} is {st.state if st else 'unknown'} "
            f"({st.why if st else 'no state'}). An error a rank survived (handled, or logged while it went on "
            "waiting) is not its failure.",
            [found[x].cite() for x in alive if x in found],
            "Name the rank(s) that crashed.",
        )
    order = {r: precedes_symptom(ctx.ev, h) for r, h in found.items()}
    late = sorted(r for r, o in order.items() if o is False)
    if late:
        return _check(
            rule,
            "failed",
            f"The {what} on rank(s) {_fmt(late)} came after the first symptom at {_t(ctx.symptom_time)}: a "
            "consequence.",
            [found[r].cite() for r in late],
            "Find what failed first.",
        )
    first_all = first_crash(ctx)
    if found and first_all is not None and first_all.hit.rank not in ctx.culprits:
        earliest = min(found.values(), key=lambda h: h.earliest or datetime.max)
        e0 = first_all.hit.latest
        if e0 is not None and earliest.earliest is not None and e0 + SLACK < earliest.earliest:
            return _check(
                rule,
                "failed",
                f"Rank {first_all.hit.rank} failed first ({first_all.what}, {first_all.hit.file}:"
                f"{first_all.hit.line}), before rank(s) {_fmt(ctx.culprits)}.",
                [first_all.hit.cite(), earliest.cite()],
                f"Name rank {first_all.hit.rank}.",
            )
    undecided = sorted(r for r, o in order.items() if o is None)
    if undecided:
        return _check(
            rule,
            "undecided",
            f"The {what} is on rank(s) {_fmt(ctx.culprits)} (rank(s) {_fmt(undecided)}: the line cannot be ordered "
            "against the first symptom, and the rank's state does not order it).",
            [found[r].cite() for r in undecided],
            "Cite a line with a time.",
        )
    note = f"; rank(s) {_fmt(exit_only)} exited with an error code, no exception in their log" if exit_only else ""
    return _check(
        rule,
        "passed",
        f"The {what} is on rank(s) {_fmt(sorted(found))}, which crashed, before the first symptom "
        f"({_t(ctx.symptom_time)}){note}.",
        [found[r].cite() for r in sorted(found)],
    )


def _state(states: dict[int, RankState], r: int) -> str:
    st = states.get(r)
    return st.state if st is not None else "unknown"


def _cat_time_limit(ctx: RuleContext) -> Check:
    rule = "category_specific:time_limit"
    w = ctx.ev.worker
    cancels = [h for h in w.hits("slurm_cancel") if scheduler_ended(h.text)]
    if not cancels:
        return _check(
            rule,
            "failed",
            "No 'CANCELLED ... DUE TO TIME LIMIT' (or preemption, requeue, an operator's scancel) line in any rank's "
            "log.",
            next_step="Find the process killer (grep_all_ranks tier 1).",
        )
    at = cancels[0].when
    crash = first_crash(ctx)  # a rank that died before the cancellation (handled errors do not count)
    earlier = [crash] if crash is not None and (at is None or (crash.hit.earliest or at) < at) else []
    row = ctx.ev.nccl.first_timeout()
    if row is not None and row.timeout_time is not None and (at is None or row.timeout_time < at):
        return _check(
            rule,
            "failed",
            f"An NCCL timeout (rank {row.rank}, {row.file}:{row.line}) came before the "
            "time limit: the job had already failed.",
            [_row_cite(row), cancels[0].cite()],
            "Diagnose the NCCL timeout.",
        )
    if earlier:
        t = earlier[0]
        return _check(
            rule,
            "failed",
            f"An earlier failure: {t.what} on rank {t.hit.rank} ({t.hit.file}:"
            f"{t.hit.line}) before the cancellation at {_t(at)}.",
            [t.hit.cite(), cancels[0].cite()],
            "Diagnose that failure first.",
        )
    slow = {j.rank for j in ctx.ev.step_jumps}
    if ctx.culprits and not ctx.culprits <= slow:
        return _check(
            rule,
            "failed",
            f"Rank(s) {_fmt(ctx.culprits - slow)} are named, but their step time did not "
            f"jump (slow ranks: {_fmt(slow)}).",
            [cancels[0].cite()],
            "Name the slow ranks, or none.",
        )
    return _check(
        rule,
        "passed",
        f"SLURM cancelled the job at {_t(at)} ({cut(cancels[0].text, 120)!r}) and nothing failed before.",
        [cancels[0].cite()],
    )


def _cat_no_failure(ctx: RuleContext) -> Check:
    """Every rank finished: a clean end, no NCCL timeout, no process killer, no exception that ended a rank
    (warnings, retried resets and handled exceptions do not count)."""
    rule = "category_specific:no_failure"
    w = ctx.ev.worker
    end = job_finished(ctx.ev)
    if end is None:
        found = killers(w, ctx.ev)
        if found:
            k = found[0]
            return _check(
                rule,
                "failed",
                f"A process killer appears: {cut(k.text, 160)!r} ({k.file}:{k.line}).",
                [h.cite() for h in found],
                "Diagnose the failure.",
            )
        if ctx.ev.nccl.timed_out:
            return _check(rule, "failed", "An NCCL collective timed out.", next_step="Diagnose the timeout.")
        if ctx.ev.nccl.exited_with_error:
            return _check(
                rule,
                "failed",
                f"Rank(s) {_fmt(ctx.ev.nccl.exited_with_error)} exited with an error code.",
                next_step="Diagnose the failure.",
            )
        return _check(
            rule,
            "undecided",
            "No process killer, but no line shows the training loop ending normally.",
            next_step="Check that the logs are complete.",
        )
    if ctx.culprits:
        return _check(
            rule,
            "failed",
            f"no_failure names no culprit, but the conclusion names {_fmt(ctx.culprits)}.",
            next_step="Empty culprit_ranks.",
        )
    return _check(
        rule,
        "passed",
        f"The training loop ended normally ({end.file}:{end.line}), no rank crashed and no process killer appears "
        "in any rank's log (warnings and retried requests do not count).",
        [end.cite()],
    )


def _cat_node_failure(ctx: RuleContext) -> Check:
    rule = "category_specific:node_failure"
    cancel, silent = node_failure_facts(ctx.ev)
    if cancel is None:
        ok, why, ev = launcher_supports(ctx)
        if ok:
            return _check(rule, "passed", f"{why[:1].upper()}{why[1:]}.", ev)
        return _check(
            rule,
            "failed",
            "No 'CANCELLED ... DUE TO NODE FAILURE' line in any log.",
            next_step="Check sacct / slurmctld for the node state.",
        )
    quiet = {r for n in silent for r in n.ranks}
    names = ", ".join(n.node for n in silent if n.node) or _fmt(quiet)
    bad = sorted(ctx.culprits - quiet)
    if bad:
        return _check(
            rule,
            "failed",
            f"Rank(s) {_fmt(bad)} kept logging until the cancellation: their node did not fail"
            + (f" (silent: {names})." if silent else "."),
            [cancel.cite()],
            "Name the ranks of the node that went silent.",
        )
    if not ctx.culprits and quiet:
        return _check(
            rule,
            "failed",
            f"SLURM reports a node failure and node(s) {names} (ranks {_fmt(quiet)}) went silent before it; the "
            "conclusion names no rank.",
            [cancel.cite(), *[n.last.cite() for n in silent if n.last is not None]],
            f"Name ranks {_fmt(quiet)}.",
        )
    if not ctx.culprits:
        return _check(
            rule,
            "passed",
            "SLURM cancelled the job for a node failure and no node's logs went silent before it: the failed node "
            "cannot be told from the logs, and the conclusion names none (cautious).",
            [cancel.cite()],
        )
    return _check(
        rule,
        "passed",
        f"SLURM cancelled the job DUE TO NODE FAILURE and rank(s) {_fmt(ctx.culprits)} went silent before it.",
        [cancel.cite()],
    )


def _cat_rank_crash(ctx: RuleContext) -> Check:
    rule = "category_specific:rank_crash"
    fates = causal_model(ctx.ev).fates
    stalled = [r for r in sorted(ctx.culprits) if (f := fates.get(r)) and (p := f.primary) and p.kind == "stall"]
    if ctx.culprits and len(stalled) == len(ctx.culprits):
        p0 = fates[stalled[0]].primary
        assert p0 is not None
        return _check(
            rule,
            "failed",
            f"Rank(s) {_fmt(stalled)} stalled before the others began to wait: {p0.what}. Its error came only after "
            "(when the stalled read gave up): a stall, not a crash.",
            [p0.line.cite()] + ([p0.later.cite()] if p0.later is not None else []),
            "Conclude data_loading_stall for the rank.",
        )
    check = _needs_line_on_culprits(ctx, "rank_crash", "Python exception")
    if check.status != "passed":
        ok, why, ev = launcher_supports(ctx)
        if ok:
            return _check(rule, "passed", f"No Python exception is needed: {why}.", ev)
        return check
    w = ctx.ev.worker
    root_lines = [h for h in w.hits("exception") if "ChildFailedError" in h.text]
    return _check(
        rule,
        "passed",
        check.detail
        + (
            " (torchrun's ChildFailedError 'Root Cause' is not used: the rank's own traceback is)" if root_lines else ""
        ),
        check.evidence,
    )


def _cat_storage(ctx: RuleContext) -> Check:
    rule = f"category_specific:{ctx.category}"
    culprits = ctx.culprits
    hits = [h for h in data_hits(ctx.ev, culprits, ctx.symptom_time) if not _RESET.search(h.text)]
    if ctx.category == "data_loading_stall":
        states = rank_states(ctx.ev)
        dead = sorted(r for r in culprits if _state(states, r) in ("crashed", "watchdog_killed"))
        if dead and launcher_supports(ctx)[0]:
            dead = []  # it stalled first; the error that killed it came only after the others had begun to wait
        if dead:
            st = states[dead[0]]
            return _check(
                rule,
                "failed",
                f"Rank(s) {_fmt(dead)} crashed ({st.why}): a crash, not a stall (a stalled rank stays alive).",
                [st.line.cite()] if st.line is not None else [],
                "Conclude rank_crash (crash in the data loader).",
            )
        roots = root_stragglers(ctx)
        if ctx.ev.nccl.timed_out and not culprits <= roots:
            return _check(
                rule,
                "failed",
                f"A data-loading stall leaves the rank alive but outside the collective; "
                f"rank(s) {_fmt(culprits - roots)} are not such stragglers (stragglers: {_fmt(roots)}).",
                next_step="Name the straggler(s).",
            )
    if hits:
        return _check(
            rule,
            "passed",
            f"Data-loading error(s) on rank(s) {_fmt({h.rank for h in hits if h.rank is not None})} "
            f"({hits[0].file}:{hits[0].line}).",
            [h.cite() for h in hits],
        )
    ais = ctx.ev.ais
    if ais is not None and ais.spikes:
        return _check(
            rule,
            "undecided",
            "AIS error counters spiked, but no culprit rank logged a data-loading error: "
            "the link between the storage errors and the rank is not shown.",
            [s.evidence for s in ais.spikes],
            "Find the culprit rank's data-loading lines.",
        )
    ok, why, cites = launcher_supports(ctx)
    if ok and ctx.category == "data_loading_stall":
        return _check(rule, "passed", f"No data-loading error is logged, but the stall is shown: {why}", cites)
    return _check(
        rule,
        "failed",
        f"No data-loading or storage error on rank(s) {_fmt(culprits)} before the first symptom.",
        next_step="Look at what the rank was doing when it stopped.",
    )


def _cat_unattributed(ctx: RuleContext) -> Check:
    """A cautious conclusion: accepted unless the evidence establishes something it contradicts (a culprit plainly
    visible, a stall with its cause, a desync)."""
    rule = "category_specific:nccl_timeout_unattributed"
    nccl = ctx.ev.nccl
    if not nccl.timed_out:
        ok, why, ev = launcher_supports(ctx)
        if ok:
            return _check(rule, "passed", f"A gloo collective timed out and nothing says why: {why}.", ev)
        return _check(rule, "failed", "No NCCL collective timed out.", next_step="Find the process killer.")
    established = established_conclusion(ctx, cautious_ok_for_fabric=True)
    if established is not None:
        return _check(
            rule,
            "failed",
            f"The timeout is attributable: {established}.",
            next_step="Conclude what the evidence establishes (run diagnose).",
        )
    shown, why = fabric_evidence(ctx.ev)
    note = f" ({why})" if not shown and "counters" in why else ""
    return _check(
        rule,
        "passed",
        "NCCL timed out and nothing in the logs attributes it (no rank crashed before it, no straggler with a "
        f"data-loading cause, no desync){note}.",
    )


def _cat_watchdog(ctx: RuleContext) -> Check:
    return _needs_line_on_culprits(ctx, "watchdog_hang", "watchdog heartbeat kill")


def _cat_fabric(ctx: RuleContext) -> Check:
    rule = "category_specific:gpu_fabric"
    if ctx.culprits:
        warned = {h.rank for h in ctx.ev.worker.hits("net_error") if h.rank is not None}
        if not ctx.culprits <= warned:
            return _check(
                rule,
                "failed",
                f"A fabric hang involves every rank; nothing singles out rank(s) {_fmt(ctx.culprits - warned)}.",
                next_step="Name suspect nodes instead of ranks.",
            )
    return _check(
        rule,
        "passed",
        "No culprit rank is singled out (fabric: the collective itself failed); "
        "fabric_vs_straggler checks the pattern.",
    )


def _cat_launch(ctx: RuleContext) -> Check:
    """The job never started training (no worker wrote a line) and the launcher says why: its store's port taken,
    the rendezvous unreachable or timed out."""
    rule = f"category_specific:{ctx.category}"
    ok, why, ev = launcher_supports(ctx)
    if ok:
        return _check(rule, "passed", f"{why}.", ev)
    return _check(
        rule,
        "failed",
        f"{ctx.category} needs a job whose workers never started and a launcher line saying why; "
        + (f"rank(s) {_fmt(ran)} wrote lines." if (ran := ctx.ev.worker.worker_ranks()) else "none was found."),
        next_step="Find the launcher's error (EADDRINUSE, RendezvousTimeoutError) or diagnose the failure.",
    )


_CATEGORY_RULES: dict[str, Callable[[RuleContext], Check]] = {
    "address_in_use": _cat_launch,
    "launch_failure": _cat_launch,
    "cuda_oom": lambda ctx: _needs_line_on_culprits(ctx, "cuda_oom", "CUDA out-of-memory line"),
    "cuda_error": lambda ctx: _needs_line_on_culprits(ctx, "cuda_error", "CUDA error / Xid line"),
    "rank_crash": _cat_rank_crash,
    "time_limit": _cat_time_limit,
    "no_failure": _cat_no_failure,
    "node_failure": _cat_node_failure,
    "watchdog_hang": _cat_watchdog,
    "data_loading_stall": _cat_storage,
    "storage_errors": _cat_storage,
    "nccl_timeout_unattributed": _cat_unattributed,
    "gpu_fabric": _cat_fabric,
    "early_exit": lambda ctx: _cat_early_exit(ctx),
    "checkpoint_stall": lambda ctx: stack_category(ctx, "checkpoint"),
    "rank_stuck": lambda ctx: stack_category(ctx, "sleeping", "lock", "compute", "blocked"),
}


def _cat_early_exit(ctx: RuleContext) -> Check:
    """A rank that left early left without an error: one its own lines or its launcher show crashed or killed did
    not."""
    from debug_training_logs.analysis.causal import causal_model

    rule = f"category_specific:{ctx.category}"
    fates = causal_model(ctx.ev).fates
    died = [f for r in sorted(ctx.culprits) if (f := fates.get(r)) is not None and f.end in ("crashed", "killed")]
    if died:
        f = died[0]
        return _check(
            rule,
            "failed",
            f"Rank {f.rank} did not leave quietly: it {f.end} ({f.why}).",
            [f.primary.line.cite()] if f.primary is not None and f.primary.line.line > 0 else [],
            "Conclude what ended it (rank_crash, cuda_error, ...).",
        )
    return _check(rule, "not_applicable", "early_exit is judged by the rank_fates rule.")


def category_specific(ctx: RuleContext) -> Check:
    """The category's own evidence: the OOM/CUDA error/exception on the culprit before the symptom, the SLURM cancel
    with no earlier failure, a clean end with no process killer, and so on."""
    fn = _CATEGORY_RULES.get(ctx.category)
    if fn is None:
        other = {
            "collective_mismatch": "rank0_ahead",
            "incomplete_evidence": "coverage",
        }.get(ctx.category, "rank_fates")
        return _check(
            f"category_specific:{ctx.category}",
            "not_applicable",
            f"{ctx.category} is judged by the {other} rule.",
        )
    return fn(ctx)
