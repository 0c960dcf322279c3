"""Rules that check a conclusion against the stacks dumped during a live hang (``py-spy dump`` of the ranks).

A dump is a fact about where each rank was: a culprit the dumps show waiting in the collective with everybody else,
while another rank sits outside it, is a victim; a conclusion that names none of the ranks the dumps show stuck, or
says nothing failed, contradicts them; a category that contradicts the culprit's stack (a data-loading stall for a
rank in ``torch.save``) is rejected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from debug_training_logs.models import Evidence
from debug_training_logs.ranges import format_ranges
from debug_training_logs.verify.context import RuleContext, check
from debug_training_logs.verify.models import Check, CheckStatus

if TYPE_CHECKING:
    from debug_training_logs.analysis.hang_facts import HangFacts, ProcessState

RULE: Final = "stack_dumps"
COMPATIBLE: Final[dict[str, frozenset[str]]] = {
    "data_loading": frozenset({"data_loading_stall", "storage_errors"}),
    "checkpoint": frozenset({"checkpoint_stall"}),
    "sleeping": frozenset({"rank_stuck"}),
    "lock": frozenset({"rank_stuck"}),
    "compute": frozenset({"rank_stuck"}),
    "blocked": frozenset({"rank_stuck", "data_loading_stall", "checkpoint_stall", "storage_errors"}),
    "gone": frozenset({"rank_crash", "node_failure", "cuda_error", "cuda_oom"}),
    "shutdown": frozenset({"early_exit"}),
}
"""The categories a culprit's stack state allows."""


def _check(status: CheckStatus, detail: str, evidence: Sequence[ProcessState] = (), next_step: str = "") -> Check:
    cites = [Evidence(file=p.file, line=p.state.line_no, text=p.state.text) for p in evidence]
    return check(RULE, status, detail, cites, next_step)


def _fmt(ranks: set[int]) -> str:
    return format_ranges(ranks) or "none"


def _left_cleanly(ctx: RuleContext, rank: int) -> bool:
    """The rank's own logs show it leaving without an error (a gone process is then an early exit)."""
    from debug_training_logs.analysis.causal import causal_model

    f = causal_model(ctx.ev).fates.get(rank)
    return f is not None and f.end == "exited_early"


def node_telemetry(ctx: RuleContext) -> Check:
    """A GPU of this job that the driver or nvidia-smi reported broken, tied to a rank, is that rank's failure: a
    conclusion that blames no rank, or only other ranks, contradicts it."""
    hang: HangFacts | None = ctx.ev.hang
    broken = [g for g in (hang.gpu_failures if hang is not None else []) if g.rank is not None]
    if not broken:
        return check("node_telemetry", "not_applicable", "No broken GPU of this job's ranks in the node telemetry.")
    ranks = {g.rank for g in broken if g.rank is not None}
    cites = [Evidence(file=g.file, line=g.line_no, text=g.text) for g in broken]
    named = ctx.culprits | set(ctx.conclusion.suspect_ranks)
    g = broken[0]
    if ctx.category in ("no_failure", "incomplete_evidence", "nccl_timeout_unattributed", "gpu_fabric") or not (
        named & ranks
    ):
        return check(
            "node_telemetry",
            "failed",
            f"Rank {g.rank}'s GPU failed ({g.what}, {g.file}:{g.line_no}, tied by {g.mapped_by}); the conclusion "
            f"({ctx.category}, culprits {_fmt(ctx.culprits)}) does not name it.",
            cites,
            f"Name rank(s) {_fmt(ranks)} (cuda_error).",
        )
    return check(
        "node_telemetry",
        "passed",
        f"The conclusion names rank(s) {_fmt(named & ranks)}, whose GPU failed ({g.what}).",
        cites,
    )


def stack_dumps(ctx: RuleContext) -> Check:
    """The conclusion agrees with the stacks dumped during the hang."""
    hang: HangFacts | None = ctx.ev.hang
    if hang is None or not hang.processes:
        return _check("not_applicable", "No stack dump of the ranks was given.")
    stuck = {p.rank: p for p in hang.stuck if p.rank is not None}
    detours = {p.rank: p for p in hang.detours if p.rank is not None}
    accused = stuck | detours
    named = ctx.culprits | set(ctx.conclusion.suspect_ranks)
    waiting = {p.rank: p for p in hang.waiting if p.rank is not None}
    shown = list(accused.values())
    if accused:
        victims = sorted(r for r in ctx.culprits if r in waiting and r not in accused)
        if victims:
            return _check(
                "failed",
                f"The stacks show rank(s) {_fmt(set(victims))} waiting in {hang.waits_in} with the others, and "
                f"rank(s) {_fmt(set(accused))} outside it: the waiting ranks are victims.",
                [waiting[victims[0]], *shown],
                f"Name rank(s) {_fmt(set(accused))}.",
            )
        if ctx.category in ("no_failure", "incomplete_evidence", "nccl_timeout_unattributed", "gpu_fabric"):
            return _check(
                "failed",
                f"The stacks show rank(s) {_fmt(set(accused))} outside the collective the others wait in "
                f"({hang.waits_in}): {shown[0].words()}.",
                shown,
                f"Conclude that rank(s) {_fmt(set(accused))} hold the job.",
            )
        if not named & set(accused):
            return _check(
                "failed",
                f"The conclusion names none of the ranks the stacks show stuck: {shown[0].words()}.",
                shown,
                f"Name rank(s) {_fmt(set(accused))}.",
            )
        wrong = [
            p
            for r, p in stuck.items()
            if r in ctx.culprits
            and (ok := COMPATIBLE.get(p.state.kind)) is not None
            and ctx.category not in ok
            and not (ctx.category == "early_exit" and _left_cleanly(ctx, r))
        ]
        if wrong:
            p = wrong[0]
            want = " or ".join(sorted(COMPATIBLE[p.state.kind]))
            return _check(
                "failed",
                f"Rank {p.rank}'s stack shows it {p.state.words()}: that is {want}, not {ctx.category}.",
                wrong,
                f"Conclude {want}.",
            )
        if detours and not stuck and ctx.category != "collective_mismatch" and set(detours) & ctx.culprits:
            return _check(
                "failed",
                f"Rank(s) {_fmt(set(detours))} wait in another collective than the others ({hang.waits_in}): a "
                "collective mismatch.",
                list(detours.values()),
                "Conclude collective_mismatch.",
            )
        return _check("passed", f"The stacks agree: {shown[0].words()}.", shown)
    if hang.waiting and ctx.culprits & set(waiting):
        lost = sorted(ctx.culprits & set(waiting))
        return _check(
            "failed",
            f"The stacks show rank(s) {_fmt(set(lost))} waiting in {hang.waits_in} like every other rank dumped: "
            "nothing in them singles a rank out.",
            [waiting[lost[0]]],
            "Name no culprit from the stacks (collect the missing ranks' dumps, or the flight recorder).",
        )
    return _check("passed", "Nothing in the stacks contradicts the conclusion.")


def hang_shows(ctx: RuleContext, kind: str) -> Check | None:
    """What the hang artifacts show of every culprit: its GPU broken (the driver's fatal Xid, nvidia-smi), or its
    process gone when the others were dumped. None when they do not show it for every culprit."""
    hang = ctx.ev.hang
    if hang is None:
        return None
    rule = f"category_specific:{ctx.category}"
    broken = {g.rank: g for g in hang.gpu_failures if g.rank is not None}
    if kind in ("cuda_error", "rank_crash") and ctx.culprits and ctx.culprits <= set(broken):
        g = broken[min(ctx.culprits)]
        return check(rule, "passed", f"Rank {g.rank}'s GPU: {g.what} ({g.file}:{g.line_no}, tied by {g.mapped_by}).")
    gone = {p.rank: p for p in hang.stuck if p.rank is not None and p.state.kind == "gone"}
    if kind == "rank_crash" and ctx.culprits and ctx.culprits <= set(gone):
        p = gone[min(ctx.culprits)]
        return check(rule, "passed", f"Rank {p.rank}'s process was gone when the others were dumped ({p.cite()}).")
    return None


def stack_category(ctx: RuleContext, *states: str) -> Check:
    """A rank stuck in checkpoint I/O or elsewhere is shown by its stack dump (a log line cannot show it)."""
    rule = f"category_specific:{ctx.category}"
    hang = ctx.ev.hang
    shown = [p for p in (hang.stuck if hang is not None else []) if p.rank in ctx.culprits and p.state.kind in states]
    if shown:
        return check(rule, "passed", f"Stack dump: {shown[0].words()} ({shown[0].cite()}).")
    return check(
        rule,
        "failed",
        f"No stack dump shows rank(s) {_fmt(ctx.culprits)} stuck that way ({ctx.category} rests on the stacks).",
        next_step="Collect py-spy dumps of every rank while the job hangs and diagnose with them.",
    )
