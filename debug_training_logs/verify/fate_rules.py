"""Verifier rules from the causal model (:mod:`~debug_training_logs.analysis.causal`): the rule that names a
culprit is the one the diagnosis used, read here to reject what the logs contradict.

* :func:`rank_fates`: a culprit must have failed on its own (a primary event) or be the rank the logs accuse; its own
  fate must not clear it (it finished, or it only suffered others' failures: a timeout waiting for a peer, a closed
  connection, its agent's SIGTERM, a report naming another rank); no other rank's own failure may come plainly
  before it; the accusations must not name other ranks; a claim that nothing failed must not stand beside failure
  lines; the flight-recorder dumps must not contradict it.
* :func:`shown`: whether the model shows the conclusion's category with its ranks (what a category rule needs when
  its own lines, NCCL's table or a data-loading error, do not apply: a gloo job's detour, a stall by elimination).
"""

from __future__ import annotations

from debug_training_logs.analysis.causal import causal_model, converged, decide, explained_by_earlier
from debug_training_logs.analysis.evidence_types import Hit
from debug_training_logs.models import Evidence
from debug_training_logs.ranges import format_ranges
from debug_training_logs.verify.context import RuleContext
from debug_training_logs.verify.launcher_rules import supports as launcher_supports
from debug_training_logs.verify.models import Check

RULE = "rank_fates"


def _fmt(ranks: set[int] | frozenset[int]) -> str:
    return format_ranges(ranks) or "none"


def _cite(h: Hit) -> Evidence | None:
    return h.cite() if h.line > 0 and h.file and not h.file.startswith("(") else None


def _check(status: str, detail: str, evidence: list[Evidence | None] | None = None, next_step: str = "") -> Check:
    ok = status in ("passed", "not_applicable")
    ev = [e for e in (evidence or []) if e is not None]
    return Check(
        rule=RULE,
        passed=ok,
        status=status,  # type: ignore[arg-type]
        detail=detail,
        evidence=ev[:8],
        evidence_truncated=max(0, len(ev) - 8),
        next_step="" if ok else next_step,
    )


def rank_fates(ctx: RuleContext) -> Check:
    """Every culprit failed on its own or is the rank the logs accuse, nothing of another rank's own came plainly
    before it, and no failure is denied (see the module docstring)."""
    ev = ctx.ev
    model = causal_model(ev)
    finding = decide(model, ev)
    culprits = ctx.culprits
    fr = ev.flight_recorder
    # (dumps whose named ranks the causal model explains, waiting on a rank that failed on its own, deny nothing)
    if fr is not None and fr.dumps and culprits and converged(model)[0] & fr.culprits[0]:
        why = fr.contradicts(culprits)
        if why is not None:
            return _check(
                "failed",
                f"Contradicted by the flight-recorder dumps: {why}.",
                next_step="Name the rank(s) the dumps single out, or show why the dumps are wrong.",
            )
    if ctx.category in ("no_failure", "incomplete_evidence") and finding is not None:
        root = finding.root
        who = finding.culprits | finding.suspects
        return _check(
            "failed",
            f"The logs show a failure: {finding.category}"
            + (f" on rank(s) {_fmt(who)}" if who else "")
            + (f" ({root.what}, {root.line.file}:{root.line.line})" if root is not None and root.line.line else "")
            + ".",
            [_cite(root.line)] if root is not None else [],
            f"Conclude what the evidence shows ({finding.category}), provisional if ranks are missing.",
        )
    if not culprits:
        return _check("not_applicable", "No culprit rank is named: nothing to check against the ranks' fates.")
    if finding is not None and finding.category == "launch_failure" and not finding.culprits:
        return _check(
            "failed",
            f"The ranks failed the same way before any training progress ({finding.why}); naming rank(s) "
            f"{_fmt(culprits)} blames one rank for a problem they share.",
            [_cite(finding.root.line)] if finding.root is not None else [],
            "Conclude launch_failure with no culprit rank.",
        )
    strong = {
        g.rank: p
        for g in model.fates.values()
        if (p := g.primary) is not None and not p.weak and g.rank not in culprits
    }
    weak_only = [r for r in sorted(culprits) if (f := model.fates.get(r)) and (p := f.primary) and p.weak]
    if weak_only and strong and len(weak_only) == len(culprits):
        r0, p0 = next(iter(sorted(strong.items())))
        return _check(
            "failed",
            f"Rank(s) {_fmt(set(weak_only))} only exited with an error code (nothing of their own in their logs), "
            f"while rank {r0} failed on its own: {p0.what} ({p0.line.file}:{p0.line.line}).",
            [_cite(p0.line)],
            f"Name rank {r0}.",
        )
    named, accs = converged(model)
    if named and not culprits & named:
        a = accs[0]
        return _check(
            "failed",
            f"The logs name rank(s) {_fmt(named)} as the failing one(s) ({a.how.replace('_', ' ')}, "
            f"{a.line.file}:{a.line.line}); the conclusion names {_fmt(culprits)}.",
            [_cite(x.line) for x in accs],
            f"Name rank(s) {_fmt(named)}, or show why the accusation is wrong.",
        )
    for r in sorted(culprits):
        fate = model.fates.get(r)
        if fate is None or fate.end == "absent":
            continue  # the coverage rule judges ranks without a log
        if fate.end == "finished":
            return _check(
                "failed",
                f"Rank {r} finished normally ({fate.why}).",
                [_cite(fate.last_progress)] if fate.last_progress is not None else [],
                "Name a rank that failed.",
            )
        if fate.primary is None and r not in named:
            victim = fate.consequences[0] if fate.consequences else None
            if victim is not None and not (victim.kind == "peer_mismatch" and ctx.category == "collective_mismatch"):
                # (a rank that received another collective's buffers is a party to the mismatch, not its victim)
                points = f", pointing at rank(s) {_fmt(victim.points_at)}" if victim.points_at else ""
                return _check(
                    "failed",
                    f"Rank {r} did not fail on its own: its logs show only a consequence ({victim.what}{points}, "
                    f"{victim.line.file}:{victim.line.line}).",
                    [_cite(victim.line)],
                    "Name the rank whose own failure the others reacted to.",
                )
            if (
                finding is not None
                and (finding.culprits or finding.suspects)
                and r not in (finding.culprits | finding.suspects)
            ):
                return _check(
                    "failed",
                    f"Nothing in rank {r}'s logs shows a failure of its own; rank(s) "
                    f"{_fmt(finding.culprits | finding.suspects)} failed ({finding.why})",
                    [_cite(finding.root.line)] if finding.root is not None else [],
                    f"Name rank(s) {_fmt(finding.culprits | finding.suspects)}.",
                )
        earlier = explained_by_earlier(model, r)
        if earlier is not None and earlier.rank not in culprits:
            return _check(
                "failed",
                f"Rank {earlier.rank} failed on its own before rank {r} ({earlier.what}, "
                f"{earlier.line.file}:{earlier.line.line}): rank {r}'s failure comes after it.",
                [_cite(earlier.line)],
                f"Name rank {earlier.rank}.",
            )
    return _check(
        "passed",
        f"Rank(s) {_fmt(culprits)} failed on their own or are the ones the logs accuse, and no other rank's own "
        "failure came plainly before them.",
        [_cite(p.line) for r in sorted(culprits) if (f := model.fates.get(r)) and (p := f.primary)],
    )


def shown(ctx: RuleContext) -> tuple[bool, str, list[Evidence]]:
    """Whether the causal model shows the conclusion's category with its named ranks (culprits, else suspects), why,
    and the lines; else what the launcher/dump facts alone establish (:func:`launcher_supports`)."""
    finding = decide(causal_model(ctx.ev), ctx.ev)
    ranks = ctx.culprits or set(ctx.conclusion.suspect_ranks)
    if finding is not None and finding.category == ctx.category and ranks == finding.culprits | finding.suspects:
        root = finding.root
        cites = [c for c in ([_cite(root.line)] if root is not None else []) if c is not None]
        return True, f"the ranks' fates show it: {finding.why}", cites
    return launcher_supports(ctx)
