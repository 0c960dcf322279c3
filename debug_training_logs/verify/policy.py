"""The verdict policy: which verdict ``diagnose`` presents. It never presents a verdict its own verifier rejects; a
rejected verdict gives way to the strongest weaker one that passes (the same shape with its culprits kept as
suspects, the timeout left unattributed, the evidence declared incomplete), and says what blocked the stronger one.

Reads analysis results; nothing in ``analysis`` imports it.
"""

from __future__ import annotations

from datetime import datetime

from debug_training_logs.analysis.evidence_types import JobEvidence, KeyEvent
from debug_training_logs.analysis.fates import WAITED_ON_PEER
from debug_training_logs.analysis.verdict import Verdict
from debug_training_logs.ranges import format_ranges
from debug_training_logs.verify.engine import verify_with_evidence
from debug_training_logs.verify.models import ChainStep, CitedEvent, Conclusion, Verification

# The decision procedure (``analysis.diagnosis``, ``analysis.causal``) is imported when a verdict is asked for, so
# ``diagnose`` can import it while its scan runs (``tools.diagnose._import_answer_modules``).


def _iso(t: datetime | None) -> str | None:
    return t.isoformat(timespec="seconds") if t is not None else None


def to_conclusion(v: Verdict, ev: JobEvidence) -> Conclusion:
    """The verdict as a checkable conclusion: only lines that are the event they stand for are cited (a computed
    event, such as when the stuck collective started, stays in the report's chain but is not cited)."""
    real = [e for e in v.chain if e.file and e.line > 0 and e.text and not e.derived]
    root = real[0] if real else None

    def when(e: KeyEvent) -> str | None:
        return _iso(e.ais_time if e.kind == "ais" else e.time)

    return Conclusion(
        logs_dir=str(ev.logs_root),
        ais_dir=str(ev.ais_root) if ev.ais_root is not None else None,
        category=v.category,  # type: ignore[arg-type]
        culprit_ranks=v.culprit_ranks,
        suspect_nodes=v.suspect_nodes,
        root_cause_event=CitedEvent(file=root.file, line=root.line, text=root.text, time=when(root)) if root else None,
        chain=[ChainStep(event=e.event, file=e.file, line=e.line, time=when(e)) for e in real],
        tz_offset_hours=v.tz_offset_hours,
        rank0_seq_gap=v.rank0_seq_gap,
        missing_ranks=v.missing_ranks,
        suspect_ranks=v.suspect_ranks,
        provisional=bool(v.details.get("provisional")),
        attempt=ev.attempt,
        world_size=ev.given_world_size,
        hang_dir=ev.hang.hang_dir if ev.hang is not None else None,
    )


def _blocked(v: Verdict, verification: Verification) -> str:
    failed = [c for c in verification.checks if not c.passed]
    who = f" (ranks {format_ranges(v.culprit_ranks)})" if v.culprit_ranks else ""
    return f"{v.category}{who}: " + "; ".join(f"{c.rule}: {c.detail}" for c in failed[:2])


def fallbacks(v: Verdict, ev: JobEvidence) -> list[Verdict]:
    """Weaker verdicts to try, strongest first, when the verifier rejects ``v``: the same shape with its culprits
    kept as suspects (provisional), the timeout left unattributed, then the evidence declared incomplete."""
    from debug_training_logs.analysis.causal import causal_model

    out: list[Verdict] = []
    suspects = sorted(set(v.culprit_ranks) | set(v.suspect_ranks))
    missing = sorted(ev.worker.missing_ranks)
    if v.culprit_ranks:
        out.append(_weaker(v, v.category, suspects, missing))
    waited = ev.nccl.timed_out or any(
        e.kind in WAITED_ON_PEER for f in causal_model(ev).fates.values() for e in f.events
    )
    if waited and v.category != "nccl_timeout_unattributed":
        out.append(_weaker(v, "nccl_timeout_unattributed", suspects, missing))
    if v.category != "incomplete_evidence":
        out.append(_weaker(v, "incomplete_evidence", suspects, missing))
    return out


def _weaker(v: Verdict, category: str, suspects: list[int], missing: list[int]) -> Verdict:
    return Verdict(
        category=category,
        culprit_ranks=[],
        suspect_nodes=v.suspect_nodes if category == v.category else [],
        confidence="low",
        explanation=v.explanation,
        root=v.root,
        chain=v.chain,
        timeline=v.timeline,
        key_files=v.key_files,
        next_steps=list(v.next_steps),
        missing_ranks=missing,
        suspect_ranks=suspects,
        details={**v.details, "provisional": True},
    )


def verified_verdict(ev: JobEvidence) -> tuple[Verdict, Conclusion, Verification]:
    """The verdict to present, as a conclusion, with its verification: the evidence's own verdict when the verifier
    accepts it, else the strongest weaker one that passes (:func:`fallbacks`; the most cautious one, shown as not
    verified, when none does), with ``blocked`` saying which stronger verdicts were rejected and why."""
    from debug_training_logs.analysis.diagnosis import conclude

    first = conclude(ev)
    v = first
    conclusion = to_conclusion(v, ev)
    verification = verify_with_evidence(conclusion, ev)
    blocked: list[str] = []
    if not verification.accepted:
        blocked.append(_blocked(v, verification))
        failed = [c for c in verification.checks if not c.passed]
        tried: list[tuple[Verdict, Conclusion, Verification]] = []
        for alt in fallbacks(first, ev):
            alt.explanation = (
                f"The evidence points to {first.category}"
                + (f" (rank(s) {format_ranges(first.culprit_ranks)})" if first.culprit_ranks else "")
                + f" but does not prove it ({'; '.join(f'{c.rule}: {c.detail}' for c in failed[:2])}). "
                + first.explanation
            )
            alt.next_steps = [c.next_step for c in failed if c.next_step] + alt.next_steps
            alt_conclusion = to_conclusion(alt, ev)
            alt_verification = verify_with_evidence(alt_conclusion, ev)
            tried.append((alt, alt_conclusion, alt_verification))
            if alt_verification.accepted:
                break
            blocked.append(_blocked(alt, alt_verification))
        if tried:
            # The strongest weaker verdict that passes; if none does, the most cautious one (never the overclaim),
            # shown as not verified.
            v, conclusion, verification = next(((a, c, x) for a, c, x in tried if x.accepted), tried[-1])
            blocked = [b for b in blocked if not b.startswith(f"{v.category}:")]
    v.blocked = blocked if v is not first else []
    return v, conclusion, verification
