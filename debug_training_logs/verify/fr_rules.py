"""The rules a conclusion is checked by when flight-recorder dumps are the only evidence (no worker log).

The log rules cannot apply then (no line states a world size, no rank wrote a line); these check the conclusion
against the dumps instead, the same facts :mod:`~debug_training_logs.analysis.fr_verdict` decides from:

* :func:`dump_coverage`: the world is the dumps' (their groups' members); a culprit must have a dump, and every
  member of the group it holds up too (else it is a suspect); ``missing_ranks``, when given, are the ranks without
  a dump;
* :func:`dump_accusation`: the category is the shape the dumps show (a stuck collective for a timeout, a different
  op/size/dtype for a mismatch, nothing else: the dumps show who stopped, not why) and the culprits are the ranks
  they accuse;
* :func:`dump_citations`: every cited dump entry exists (the file is a dump that was read, the entry is in it).
"""

from __future__ import annotations

from debug_training_logs.analysis.fr_types import FlightRecorderFacts
from debug_training_logs.models import Evidence
from debug_training_logs.ranges import format_ranges
from debug_training_logs.verify.context import RuleContext
from debug_training_logs.verify.models import Check

SHAPES = {"nccl_timeout_unattributed", "collective_mismatch", "incomplete_evidence"}
"""The categories dumps alone can establish."""


def _fmt(ranks: set[int] | frozenset[int] | list[int]) -> str:
    return format_ranges(ranks) or "none"


def _check(rule: str, status: str, detail: str, evidence: list[Evidence] | None = None, next_step: str = "") -> Check:
    ok = status in ("passed", "not_applicable")
    return Check(
        rule=rule,
        passed=ok,
        status=status,  # type: ignore[arg-type]
        detail=detail,
        evidence=(evidence or [])[:8],
        evidence_truncated=max(0, len(evidence or []) - 8),
        next_step="" if ok else next_step,
    )


def _facts(ctx: RuleContext) -> FlightRecorderFacts:
    fr = ctx.ev.flight_recorder
    assert fr is not None  # these rules run only when dumps were read (JobEvidence.dumps_alone)
    return fr


def _cite(fr: FlightRecorderFacts, ranks: set[int]) -> list[Evidence]:
    out = []
    for g in fr.stuck_groups:
        for r in sorted(ranks & set(g.cited)):
            c = g.cited[r]
            out.append(Evidence(file=c.file, line=c.index, text=c.text))
    return out


def dump_coverage(ctx: RuleContext) -> Check:
    """Culprits have dumps, and so does every member of the group they hold up; missing ranks are the dumpless."""
    fr = _facts(ctx)
    culprits = set(ctx.culprits)
    dumped = {d.rank for d in fr.dumps}
    claimed = set(ctx.conclusion.missing_ranks)
    if claimed and claimed != set(fr.no_dump):
        return _check(
            "dump_coverage",
            "failed",
            f"The conclusion says ranks {_fmt(claimed)} are missing; the dumps miss {_fmt(fr.no_dump)} of the "
            f"{len(fr.world)}-rank world ({fr.world_evidence}).",
            next_step=f"Set missing_ranks to {_fmt(fr.no_dump)}.",
        )
    if culprits - dumped:
        return _check(
            "dump_coverage",
            "failed",
            f"Rank(s) {_fmt(culprits - dumped)} are named culprits but wrote no dump: nothing is established about "
            "them.",
            next_step="Name ranks without a dump in suspect_ranks (they may be the cause), not in culprit_ranks.",
        )
    unsure = {r for g in fr.stuck_groups if g.no_dump for r in g.roots if r in culprits}
    if unsure:
        return _check(
            "dump_coverage",
            "failed",
            f"Rank(s) {_fmt(unsure)} hold up a group with member(s) that wrote no dump: one of those may be the cause.",
            _cite(fr, unsure),
            "Name them in suspect_ranks, or add the missing dumps.",
        )
    return _check(
        "dump_coverage",
        "passed",
        f"{len(fr.dumps)} dump(s) of the {len(fr.world)}-rank world ({fr.world_evidence}); "
        + (f"rank(s) {_fmt(fr.no_dump)} wrote none" if fr.no_dump else "none missing")
        + ("; the culprits and their groups' members all dumped" if culprits else "")
        + ".",
    )


def dump_accusation(ctx: RuleContext) -> Check:
    """The category is the shape the dumps show and the culprits are the ranks they accuse."""
    fr = _facts(ctx)
    acc = fr.accused()
    culprits = set(ctx.culprits)
    cat = ctx.category
    stuck = [g for g in fr.stuck_groups if g.stuck is not None]
    if cat not in SHAPES:
        return _check(
            "dump_accusation",
            "failed",
            f"With dumps alone, {cat} cannot be checked: the dumps show which collective each rank reached and who "
            "never joined, not why a rank stopped.",
            next_step="Conclude nccl_timeout_unattributed (or collective_mismatch) naming the ranks the dumps accuse, "
            "or add the worker logs.",
        )
    if cat == "incomplete_evidence":
        if culprits:
            return _check(
                "dump_accusation",
                "failed",
                f"incomplete_evidence establishes no culprit, but the conclusion names {_fmt(culprits)}.",
                next_step="Empty culprit_ranks.",
            )
        if acc.culprits:
            return _check(
                "dump_accusation",
                "failed",
                f"The dumps establish more: rank(s) {_fmt(acc.culprits)} never joined the collective their group "
                f"waits in ({acc.groups[0] if acc.groups else 'see the per-PG table'}).",
                _cite(fr, set(acc.culprits)),
                "Name the category the dumps support (run diagnose).",
            )
        return _check("dump_accusation", "passed", "The dumps name no culprit: the evidence is indeed incomplete.")
    if cat == "collective_mismatch" and acc.how != "mismatch":
        return _check(
            "dump_accusation",
            "failed",
            "No group's ranks scheduled different collectives at one sequence number in the dumps.",
            next_step="Look at the per-PG table (nccl --fr-dir) for what the groups wait in.",
        )
    if cat == "nccl_timeout_unattributed" and not stuck:
        return _check(
            "dump_accusation",
            "failed",
            "Every collective the dumps recorded completed: no group is stuck.",
            next_step="Conclude incomplete_evidence, or add the worker logs.",
        )
    why = fr.contradicts(culprits)
    if why is not None or (culprits and not culprits <= set(acc.culprits)):
        return _check(
            "dump_accusation",
            "failed",
            (why or f"the dumps accuse {_fmt(set(acc.culprits))} as culprits, not {_fmt(culprits - acc.culprits)}")
            + ".",
            _cite(fr, set(acc.culprits | acc.suspects)),
            f"Name rank(s) {_fmt(set(acc.culprits))} as culprits"
            + (f" and {_fmt(set(acc.suspects))} as suspects" if acc.suspects else "")
            + ".",
        )
    if acc.culprits and not culprits:
        return _check(
            "dump_accusation",
            "failed",
            f"The dumps establish rank(s) {_fmt(set(acc.culprits))} as where the hang starts; the conclusion names "
            "no culprit.",
            _cite(fr, set(acc.culprits)),
            f"Name rank(s) {_fmt(set(acc.culprits))}.",
        )
    return _check(
        "dump_accusation",
        "passed",
        f"The dumps show {cat} with rank(s) {_fmt(culprits)}"
        + (f" ({acc.how.replace('_', ' ')}, {acc.groups[0]})" if acc.groups else "")
        + ".",
        _cite(fr, culprits),
    )


def dump_citations(ctx: RuleContext) -> Check:
    """Every cited dump entry exists."""
    fr = _facts(ctx)
    sizes = {d.file: d.entries_total for d in fr.dumps}
    cited = ctx.cited
    if not cited:
        return _check("dump_citations", "not_applicable", "Nothing is cited.")
    bad = [c for c in cited if c.file not in sizes or not 1 <= c.line <= sizes[c.file]]
    if bad:
        return _check(
            "dump_citations",
            "failed",
            f"{len(bad)} citation(s) name no entry of a dump that was read: "
            + ", ".join(f"{c.file} entry {c.line}" for c in bad[:4])
            + ".",
            next_step="Cite dump entries as file and entry index (diagnose's chain does).",
        )
    return _check("dump_citations", "passed", f"All {len(cited)} cited dump entries exist.")


RULES = (dump_coverage, dump_accusation, dump_citations)
