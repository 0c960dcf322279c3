"""The rules on who is named: coverage (every rank read before a culprit is named), straggler consistency (culprits
are the ranks the NCCL table singles out; victims are not the cause), fabric vs straggler, and rank 0 ahead."""

from __future__ import annotations

from debug_training_logs.analysis.causal import INFERRED_KINDS, causal_model
from debug_training_logs.analysis.evidence_states import fabric_evidence
from debug_training_logs.analysis.nccl_classify import PER_STEP_COLLECTIVES
from debug_training_logs.models import Evidence
from debug_training_logs.textcut import cut
from debug_training_logs.verify.context import MAX_EVIDENCE, RuleContext
from debug_training_logs.verify.context import check as _check
from debug_training_logs.verify.fate_rules import shown as launcher_supports
from debug_training_logs.verify.models import Check
from debug_training_logs.verify.rule_helpers import (
    STRAGGLER_CATEGORIES,
    established_conclusion,
    root_stragglers,
    singled_out,
)
from debug_training_logs.verify.rule_helpers import fmt_ranks as _fmt
from debug_training_logs.verify.rule_helpers import row_cite as _row_cite


def _victim_reason(ctx: RuleContext, rank: int) -> str:
    """Why ``rank`` is a victim of the hang, in the words of the NCCL table."""
    nccl = ctx.ev.nccl
    rows = [r for r in nccl.rows if r.rank == rank]
    senders = {g_sender for g in nccl.groups for g_sender in g.dump_signal_senders}
    parts = []
    if rank in senders:
        parts.append("it is the rank whose watchdog set the dump signal the others observed (it timed out first)")
    if any(r.signalled_dump for r in rows):
        parts.append("its own watchdog detected the timeout (first PG on this rank to signal dumping)")
    waiting = [r for r in rows if (r.pending or 0) > 0]
    if waiting:
        r = waiting[0]
        parts.append(
            f"it had pending work in PG {r.pg} (last enqueued {r.last_enqueued} > last completed {r.last_completed}):"
            " it was inside the collective, waiting"
        )
    if not parts:
        parts.append("the NCCL table does not single it out (it neither lacks pending work nor is absent)")
    return "; ".join(parts)


# ---------------------------------------------------------------------------------------------------------------------
# coverage


def coverage(ctx: RuleContext) -> Check:
    """Every expected rank was read (world size known, none missing), or the conclusion says the evidence is
    incomplete and names the missing ranks."""
    w = ctx.ev.worker
    missing = ctx.ev.missing_ranks
    cov = ctx.ev.coverage
    ws_ev = [Evidence(file="(coverage)", line=1, text=cut(cov.world_size_evidence))]
    claimed_missing = set(ctx.conclusion.missing_ranks)
    if claimed_missing and claimed_missing != missing:
        return _check(
            "coverage",
            "failed",
            f"The conclusion says ranks {_fmt(claimed_missing)} are missing; the logs miss {_fmt(missing)}.",
            ws_ev,
            f"Set missing_ranks to {_fmt(missing)}.",
        )
    named = set(ctx.conclusion.culprit_ranks)
    if missing & named:
        return _check(
            "coverage",
            "failed",
            f"Rank(s) {_fmt(missing & named)} are named culprits, but their logs are missing: nothing is "
            "established about them.",
            ws_ev,
            "Put ranks whose logs are missing in missing_ranks (or suspect_ranks), not in culprit_ranks.",
        )
    if ctx.category == "incomplete_evidence":
        if w.world_size is None:
            return _check("coverage", "passed", "The world size is unknown: the evidence is indeed incomplete.")
        if missing:
            if ctx.culprits:
                return _check(
                    "coverage",
                    "failed",
                    f"incomplete_evidence establishes no culprit, but the conclusion names {_fmt(ctx.culprits)}.",
                    ws_ev,
                    "Empty culprit_ranks; name the missing ranks in missing_ranks.",
                )
            return _check(
                "coverage",
                "passed",
                f"Ranks {_fmt(missing)} have no log file: the evidence is incomplete and no culprit is named.",
            )
        established = established_conclusion(ctx)
        if established is None:
            return _check(
                "coverage",
                "passed",
                "Every rank's log is present, but the evidence establishes no conclusion (no crash before the "
                "failure, no straggler with a cause, no desync, no clean end): incomplete.",
            )
        return _check(
            "coverage",
            "failed",
            f"Every rank of the {w.world_size}-rank world was read ({cov.world_size_evidence}) and the evidence "
            f"establishes more: {established}.",
            ws_ev,
            "Name the category the evidence supports (run diagnose).",
        )
    if not ctx.culprits and not w.worker_ranks() and launcher_supports(ctx)[0]:
        return _check(
            "coverage",
            "passed",
            "No worker ever started (no rank wrote a line) and no rank is named: the agents' own lines decide.",
        )
    if not named and ctx.conclusion.provisional:
        return _check(
            "coverage",
            "passed",
            "A provisional conclusion: it names no established culprit from what may be a subset of the ranks "
            f"(ranks seen: {_fmt(w.ranks) or 'none'}; world size {w.world_size or 'unknown'}"
            + (f", missing {_fmt(missing)}" if missing else "")
            + ").",
        )
    model = causal_model(ctx.ev)
    inferred = sorted(
        r
        for r in named
        if (f := model.fates.get(r)) is not None
        and (p := f.primary) is not None
        and p.kind in INFERRED_KINDS
        and not any(r in a.accused for a in model.accusations)
    )
    if w.world_size is None and model.complete and inferred:
        return _check(
            "coverage",
            "failed",
            f"Rank(s) {_fmt(inferred)} are named for what they did not do (they stalled, left or went silent), and no "
            f"line states the world size: a rank of the job whose log is not here could be as silent (ranks seen: "
            f"{_fmt(w.ranks)}).",
            next_step="State the world size (world_size in the conclusion, from the launch command), or name them "
            "as suspect_ranks with provisional: true.",
        )
    if w.world_size is None and model.complete:
        return _check(
            "coverage",
            "passed",
            f"No line states the world size, but the ranks seen (in the logs and the stack dumps) run from 0 to "
            f"{max(model.seen)} without a gap and no line names another rank: every rank appears to be there.",
        )
    if w.world_size is None:
        return _check(
            "coverage",
            "failed",
            f"No line states the world size, so it cannot be shown that every rank was read (ranks seen: "
            f"{_fmt(w.ranks)}). A culprit may not be named from what could be a subset.",
            next_step="Get logs with NCCL_DEBUG=INFO ('nranks N') or the launcher's world size line, or conclude "
            "incomplete_evidence.",
        )
    if missing:
        return _check(
            "coverage",
            "failed",
            f"Ranks {_fmt(missing)} of the {w.world_size}-rank world have no log file: no culprit may be named from "
            f"the {len(w.ranks)} ranks present (the missing ones may hold the straggler).",
            ws_ev,
            f"Fetch the log files of ranks {_fmt(missing)}, or conclude incomplete_evidence naming them.",
        )
    return _check(
        "coverage",
        "passed",
        f"All {w.world_size} ranks were read ({cov.files_scanned} files; world size from {cov.world_size_evidence}).",
    )


# ---------------------------------------------------------------------------------------------------------------------
# straggler consistency


def straggler_consistency(ctx: RuleContext) -> Check:
    """Culprits are exactly the ranks the NCCL table singles out, and no other rank shares their signature; the first
    rank to detect the timeout and the dump-signal sender are victims, never the cause."""
    nccl = ctx.ev.nccl
    if not nccl.timed_out:
        return _check(
            "straggler_consistency",
            "not_applicable",
            "No NCCL watchdog timeout in any rank's log: there is no stuck collective to single a rank out of.",
        )
    roots = root_stragglers(ctx)
    absent = nccl.ranks_without_state
    singled = roots | absent
    if ctx.conclusion.provisional:  # from a subset: the ranks the table can only suspect are what it points at
        singled |= {r for g in nccl.groups for r in g.suspect_ranks}
    culprits = ctx.culprits
    cites = [_row_cite(r) for r in nccl.rows if r.rank in (culprits | roots)][:MAX_EVIDENCE]
    table = (
        f"the table singles out {_fmt(roots)} (no pending work / only observed the dump signal)"
        + (f" and {_fmt(absent)} (no NCCL state at all: absent from the collective)" if absent else "")
        if singled
        else "the table singles out no rank"
    )
    if ctx.category not in STRAGGLER_CATEGORIES | {"nccl_timeout_unattributed"}:
        return _check(
            "straggler_consistency",
            "not_applicable",
            f"Category {ctx.category} names no straggler ({table}); the fabric and rank-0 rules judge it.",
        )
    bad = sorted(culprits - singled)
    if bad:
        reasons = "; ".join(f"rank {r}: {_victim_reason(ctx, r)}" for r in bad[:4])
        return _check(
            "straggler_consistency",
            "failed",
            f"Rank(s) {_fmt(bad)} are named, but {table}. {reasons}. The rank that detects a timeout first, or sends "
            "the dump signal, is a victim waiting for the straggler, not its cause.",
            cites,
            f"Name the rank(s) the table singles out ({_fmt(singled)}), or explain with evidence why they are not "
            "the cause.",
        )
    if ctx.category == "nccl_timeout_unattributed":
        return _check(
            "straggler_consistency",
            "passed",
            f"Unattributed timeout naming {_fmt(culprits)}: within what {table}.",
            cites,
        )
    if not culprits:
        return _check(
            "straggler_consistency",
            "failed",
            f"Category {ctx.category} blames a rank but names none; {table}.",
            cites,
            "Name the culprit rank(s).",
        )
    if culprits & roots or ctx.category == "data_loading_stall":
        shared = sorted(roots - culprits)
        if shared:
            return _check(
                "straggler_consistency",
                "failed",
                f"Rank(s) {_fmt(shared)} share the straggler signature of {_fmt(culprits & roots)} (no collective "
                "in flight) but are not named: with several stragglers, naming one is a guess.",
                cites,
                f"Name every straggler ({_fmt(roots)}) or show what separates them.",
            )
    return _check(
        "straggler_consistency",
        "passed",
        f"Culprit(s) {_fmt(culprits)} match: {table}.",
        cites,
    )


# ---------------------------------------------------------------------------------------------------------------------
# fabric vs straggler


def fabric_vs_straggler(ctx: RuleContext) -> Check:
    """``gpu_fabric`` needs every rank inside the collective and no straggler; a straggler category needs one."""
    nccl = ctx.ev.nccl
    cat = ctx.category
    if cat != "gpu_fabric" and cat not in STRAGGLER_CATEGORIES:
        return _check("fabric_vs_straggler", "not_applicable", f"Category {cat} is neither fabric nor a straggler.")
    if not nccl.timed_out:
        if cat == "gpu_fabric":
            warns = ctx.ev.worker.hits("net_error")
            if warns:
                return _check(
                    "fabric_vs_straggler",
                    "passed",
                    f"No collective timed out, but NCCL reported {len(warns)} transport error line(s).",
                    [h.cite() for h in warns],
                )
            return _check(
                "fabric_vs_straggler",
                "failed",
                "gpu_fabric needs NCCL evidence: no collective timed out and NCCL logged no transport error.",
                next_step="Look for the process killer in the tiered search (grep_all_ranks).",
            )
        return _check(
            "fabric_vs_straggler",
            "not_applicable",
            "No NCCL timeout: whether a rank straggled inside a collective does not arise.",
        )
    singled = singled_out(ctx)
    groups = [g for g in nccl.groups if g.detected_ranks]
    classes = ", ".join(f"PG {g.pg}: {g.classification}" for g in nccl.groups)
    if cat == "gpu_fabric":
        if singled:
            return _check(
                "fabric_vs_straggler",
                "failed",
                f"Rank(s) {_fmt(singled)} were not inside the collective (no pending work, only observed the dump "
                f"signal, or no NCCL state at all): that is a straggler, not a fabric hang ({classes}).",
                [_row_cite(r) for r in nccl.rows if r.rank in singled],
                "Find why those ranks never entered the collective (their last lines, data loading).",
            )
        if not groups or any(g.classification != "fabric" for g in groups):
            return _check(
                "fabric_vs_straggler",
                "failed",
                f"Not every timed-out process group shows the fabric pattern ({classes}): a fabric hang has every "
                "rank inside the collective and every rank's own watchdog firing.",
                next_step="Compare last enqueued/completed across ranks (nccl_state_table).",
            )
        shown, why = fabric_evidence(ctx.ev)
        if not shown:
            return _check(
                "fabric_vs_straggler",
                "failed",
                f"gpu_fabric needs positive evidence: {why}.",
                [_row_cite(r) for r in nccl.rows[:MAX_EVIDENCE]],
                "Conclude nccl_timeout_unattributed (fabric suspected), or find NCCL WARN / IB / Xid errors.",
            )
        return _check(
            "fabric_vs_straggler",
            "passed",
            f"Every rank was inside the collective; no straggler ({classes}); {why}.",
            [_row_cite(r) for r in nccl.rows[:MAX_EVIDENCE]],
        )
    if not singled:
        return _check(
            "fabric_vs_straggler",
            "failed",
            f"Category {cat} needs a rank that stalled or died while others waited, but every rank was inside the "
            f"collective with pending work and detected the timeout itself ({classes}): that is the fabric pattern "
            "(or a mismatch), not a straggler.",
            [_row_cite(r) for r in nccl.rows[:MAX_EVIDENCE]],
            "Look at the fabric (NCCL WARN lines, IB counters) or at a collective mismatch.",
        )
    return _check(
        "fabric_vs_straggler",
        "passed",
        f"The table singles out {_fmt(singled)}: a straggler pattern, consistent with {cat}.",
    )


# ---------------------------------------------------------------------------------------------------------------------
# rank 0 ahead


def rank0_ahead(ctx: RuleContext) -> Check:
    """A claim that rank 0 (the broadcast root) is ahead must match the measured gap in last enqueued work."""
    c = ctx.conclusion
    if c.category != "collective_mismatch" and c.rank0_seq_gap is None:
        return _check("rank0_ahead", "not_applicable", "The conclusion makes no claim about rank 0 being ahead.")
    groups = [g for g in ctx.ev.nccl.groups if g.classification == "root_ahead" and g.root_gap is not None]
    if not groups and c.rank0_seq_gap is None:
        ok, why, ev = launcher_supports(ctx)
        if ok:
            return _check("rank0_ahead", "passed", f"No rank-0 claim; the mismatch itself is shown: {why}.", ev)
    if not groups:
        classes = ", ".join(f"PG {g.pg}: {g.classification}" for g in ctx.ev.nccl.groups) or "no NCCL state"
        return _check(
            "rank0_ahead",
            "failed",
            f"The NCCL table does not show the root rank ahead of the others ({classes}).",
            next_step="Compare last enqueued work of every rank (nccl_state_table).",
        )
    g = groups[0]
    gap = g.root_gap
    assert gap is not None
    rows = [r for r in ctx.ev.nccl.rows if r.pg == g.pg and r.rank == g.root_rank]
    ev = [_row_cite(r) for r in rows]
    if c.rank0_seq_gap is not None and c.rank0_seq_gap != gap:
        return _check(
            "rank0_ahead",
            "failed",
            f"The conclusion says rank {g.root_rank} is {c.rank0_seq_gap} collective(s) ahead; the table measures "
            f"{gap} in PG {g.pg}.",
            ev,
            f"Use the measured gap ({gap}).",
        )
    if ctx.culprits and ctx.culprits != {g.root_rank}:
        return _check(
            "rank0_ahead",
            "failed",
            f"The ahead rank is {g.root_rank}, but the conclusion names {_fmt(ctx.culprits)}.",
            ev,
            f"Name rank {g.root_rank}, or make a different claim.",
        )
    steps = "a whole number of training steps" if gap % PER_STEP_COLLECTIVES == 0 else "not a whole number of steps"
    return _check(
        "rank0_ahead",
        "passed",
        f"Rank {g.root_rank} is {gap} collective(s) ahead in PG {g.pg} ({steps} at {PER_STEP_COLLECTIVES} per-step "
        "collectives).",
        ev,
    )
