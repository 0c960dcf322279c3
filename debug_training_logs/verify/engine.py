"""Run every rule against a conclusion: :func:`verify` gathers the evidence itself; :func:`verify_with_evidence`
uses evidence already gathered (``diagnose`` checks its own verdict without reading the logs again)."""

from __future__ import annotations

from debug_training_logs.analysis.evidence_types import JobEvidence
from debug_training_logs.paths import job_sources
from debug_training_logs.tools.evidence_cache import job_evidence
from debug_training_logs.verify.context import build_context
from debug_training_logs.verify.fr_rules import RULES as DUMP_RULES
from debug_training_logs.verify.models import Check, Conclusion, Verification
from debug_training_logs.verify.rules import RULES


def verify(conclusion: Conclusion) -> Verification:
    """Re-derive the facts from the conclusion's directories and run every rule (paths go through the allowed-roots
    policy)."""
    sources = job_sources(conclusion.logs_dir, conclusion.ais_dir, hang_dir=conclusion.hang_dir)
    ev = job_evidence(sources, attempt=conclusion.attempt, world_size=conclusion.world_size)
    return verify_with_evidence(conclusion, ev)


def verify_with_evidence(conclusion: Conclusion, ev: JobEvidence) -> Verification:
    """Run every rule against ``ev`` (gathered by the caller; cited lines are read back from where it was)."""
    ctx = build_context(conclusion, ev)
    rules = DUMP_RULES if ev.dumps_alone() else RULES  # dumps and no worker log: checked against the dumps
    checks = [rule(ctx) for rule in rules]
    accepted = all(c.passed for c in checks)
    return Verification(
        summary=_summary(conclusion, checks, accepted), accepted=accepted, checks=checks, coverage=ev.coverage
    )


def _summary(c: Conclusion, checks: list[Check], accepted: bool) -> str:
    ranks = ",".join(str(r) for r in c.culprit_ranks) or "none"
    applied = [x for x in checks if x.status != "not_applicable"]
    if accepted:
        return (
            f"ACCEPTED: {c.category} (culprit ranks {ranks}) holds against every rank's logs: "
            f"{len(applied)} rule(s) applied and passed, {len(checks) - len(applied)} did not apply."
        )
    failed = [x for x in checks if not x.passed]
    first = "; ".join(f"{x.rule} ({x.status}): {x.detail}" for x in failed[:2])
    return f"REJECTED: {c.category} (culprit ranks {ranks}) - {len(failed)} rule(s) not satisfied. {first}"
