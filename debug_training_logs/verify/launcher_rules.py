"""Verifier rules from the launcher, gloo/DETAIL and flight-recorder facts of the evidence.

* :func:`supports`: what the launcher facts establish for a category whose NCCL-based check cannot apply (a gloo
  job's straggler, a DETAIL or dump mismatch, a rank killed by SIGKILL without a traceback, a job whose agent never
  started its workers). The category rules call it before failing.
"""

from __future__ import annotations

from debug_training_logs.analysis.launcher_decision import OWN_SIGNALS
from debug_training_logs.models import Evidence
from debug_training_logs.ranges import format_ranges
from debug_training_logs.verify.context import RuleContext
from debug_training_logs.verify.models import Check


def _fmt(ranks: set[int]) -> str:
    return format_ranges(ranks) or "none"


def _check(rule: str, status: str, detail: str, evidence: list[Evidence] | None = None, next_step: str = "") -> Check:
    ok = status in ("passed", "not_applicable")
    ev = (evidence or [])[:8]
    return Check(
        rule=rule,
        passed=ok,
        status=status,  # type: ignore[arg-type]
        detail=detail,
        evidence=ev,
        evidence_truncated=max(0, len(evidence or []) - 8),
        next_step="" if ok else next_step,
    )


def supports(ctx: RuleContext) -> tuple[bool, str, list[Evidence]]:
    """Whether the launcher/dump facts establish the conclusion's category with its culprits, why, and the lines."""
    lf = ctx.ev.launcher
    fr = ctx.ev.flight_recorder
    culprits = set(ctx.culprits)
    if lf is None:
        return False, "", []
    named, how = lf.culprits(set(ctx.ev.worker.ranks))
    fr_named, fr_how = fr.culprits if fr is not None else (set(), "none")
    cat = ctx.category
    if cat == "rank_crash":
        sig = {r for r in named if how == "signal" and lf.fates[r].signal in OWN_SIGNALS}
        if culprits and culprits == sig:
            ev = [e for r in sorted(sig) if (e := lf.fates[r].exit_evidence) is not None]
            return True, f"rank(s) {_fmt(sig)} were killed by {lf.fates[min(sig)].signal} (torchrun's table)", ev
        return False, "", []
    ran = ctx.ev.worker.worker_ranks()
    if cat == "address_in_use" and not culprits and not ran:
        ev = [e for a in lf.agents for e in a.listen_failures]
        if ev:
            return True, "no worker started: the agent's store could not listen (port in use)", ev
        return False, "", []
    if cat == "launch_failure" and not culprits and not ran and not lf.fates:
        ev = [e for a in lf.agents for e in a.rendezvous_errors] + [e for a in lf.agents for _h, e in a.unreachable[:1]]
        if ev:
            return True, "no worker started: the agent could not rendezvous with the other node(s)", ev
        return False, "", []
    if cat == "collective_mismatch":
        if how == "mismatch" and culprits == named:
            ev = [e for r, _, e in lf.mismatches if r in culprits] or [e for _, _, e in lf.mismatches[:2]]
            return True, f"DETAIL fingerprints single out rank(s) {_fmt(named)}", ev
        if fr_how == "mismatch" and culprits == fr_named:
            return True, f"the flight-recorder dumps show rank(s) {_fmt(fr_named)} in a different collective", []
        return False, "", []
    if cat in ("nccl_timeout_unattributed", "data_loading_stall"):
        if how == "straggler" and culprits == named:
            ev = [f.comm_error for f in lf.fates.values() if f.comm_error is not None][:4]
            return True, f"every other rank timed out waiting in gloo; rank(s) {_fmt(named)} never did", ev
        if fr_how == "never_joined" and culprits == fr_named:
            return True, f"the flight-recorder dumps show rank(s) {_fmt(fr_named)} never joined the collective", []
    return False, "", []
