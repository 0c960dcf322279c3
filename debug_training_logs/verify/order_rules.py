"""The rules on time and order: causality (the root cause before the stuck collective and the symptoms, the chain
forward in time) and clock (AIS times related to worker times only through a verified alignment)."""

from __future__ import annotations

from datetime import datetime
from itertools import pairwise

from debug_training_logs.analysis.causal import causal_model
from debug_training_logs.analysis.evidence_ais import aligned_for
from debug_training_logs.analysis.evidence_states import rank_states
from debug_training_logs.analysis.evidence_triggers import data_hits
from debug_training_logs.analysis.evidence_types import Hit
from debug_training_logs.models import Evidence
from debug_training_logs.verify.context import SLACK, Cited, RuleContext
from debug_training_logs.verify.context import check as _check
from debug_training_logs.verify.models import Check
from debug_training_logs.verify.rule_helpers import STORAGE_CATEGORIES, STRAGGLER_CATEGORIES, root_stragglers
from debug_training_logs.verify.rule_helpers import alignment_problem as _alignment_problem
from debug_training_logs.verify.rule_helpers import fmt_time as _t


def _bounds(c: Cited) -> tuple[datetime | None, datetime | None]:
    return c.earliest, c.latest


# ---------------------------------------------------------------------------------------------------------------------
# causality


def _derived_root(ctx: RuleContext) -> Cited | None:
    """For a conclusion that cites no root cause: the culprit ranks' earliest error line of the category."""
    want = {
        "cuda_oom": ("cuda_oom",),
        "cuda_error": ("cuda_error",),
        "rank_crash": ("rank_crash",),
        "watchdog_hang": ("watchdog_hang",),
        "storage_errors": ("data",),
        "data_loading_stall": ("data",),
    }.get(ctx.category)
    if want is None:
        return None
    for t in ctx.trig:
        if t.category in want and t.hit.rank in ctx.culprits:
            return _cited_from_hit("derived root cause", t.hit)
    if ctx.category in STORAGE_CATEGORIES:
        hs = data_hits(ctx.ev, ctx.culprits, None)
        if hs:
            return _cited_from_hit("derived root cause", hs[0])
    return None


def _cited_from_hit(role: str, h: Hit) -> Cited:
    c = Cited(role, h.file, h.line, h.text, None, "worker", rank=h.rank)
    c.earliest, c.latest = h.earliest, h.latest
    return c


def causality(ctx: RuleContext) -> Check:
    """The root cause happened before the stuck collective started and before the symptoms; the chain runs forward
    in time; ordering across sources (AIS vs workers) needs a verified clock alignment."""
    root = ctx.root
    derived = False
    if root is None:
        root = _derived_root(ctx)
        derived = root is not None
    if root is None:
        return _check(
            "causality",
            "not_applicable",
            f"No root-cause event is cited and category {ctx.category} implies none on the culprit ranks to order.",
        )
    if not derived and not root.exists:
        return _check(
            "causality",
            "failed",
            f"The root-cause event {root.where} is not in the logs (see citations).",
            next_step="Cite a line that exists.",
        )
    if root.source == "ais" and root.earliest is None and root.latest is None:
        return _check(
            "causality",
            "failed",
            f"The root cause {root.where} is an AIS line, but the AIS clock is not aligned with the workers' "
            f"({_alignment_problem(ctx)}): it cannot be ordered against worker events.",
            [root.cite()],
            "Run align_timezones; relate AIS and worker times only through a verified offset.",
        )
    lo, hi = _bounds(root)
    start, sym = ctx.start, ctx.symptom_time
    ev = [root.cite()]
    if ctx.symptom is not None:
        ev.append(ctx.symptom.cite())
    chain_problem = _chain_order(ctx)
    if chain_problem is not None:
        return _check("causality", "failed", chain_problem[0], chain_problem[1], "Put the chain in time order.")
    if ctx.category not in STRAGGLER_CATEGORIES:
        # No trigger precedes the failure in these categories (the collective itself hung, the time ran out...):
        # the cited first event must simply not come after the first symptom.
        if sym is not None and lo is not None and lo > sym + SLACK:
            return _check(
                "causality",
                "failed",
                f"The first event {root.where} was written at {_t(lo)} or later, after the first symptom at {_t(sym)}.",
                ev,
                "Start the chain with what happened first.",
            )
        return _check(
            "causality",
            "passed",
            f"The chain runs forward in time and its first event {root.where} does not follow the first symptom "
            f"({_t(sym)}).",
            ev,
        )
    limit = start if start is not None else sym
    what = "the stuck collective started" if start is not None else "the first symptom"
    if limit is None:
        return _check(
            "causality",
            "not_applicable",
            f"No stuck collective and no symptom with a time: nothing to order {root.where} against.",
            ev,
        )
    if lo is not None and lo > limit + SLACK:
        return _check(
            "causality",
            "failed",
            f"{'The culprit line' if derived else 'The root cause'} {root.where} was written at {_t(lo)} or later, "
            f"after {what} at {_t(limit)}: it is an effect, not the cause.",
            ev,
            "Look for what happened BEFORE the collective started on the rank(s) that never entered it.",
        )
    if hi is not None and hi <= limit + SLACK:
        return _check(
            "causality",
            "passed",
            f"{root.where} happened by {_t(hi)}, before {what} at {_t(limit)}"
            + (f" and before the first symptom at {_t(sym)}." if sym is not None else "."),
            ev,
        )
    rank = root.rank
    reported = _reported_failure_of(ctx, root) if rank is None else None
    whose_rank = rank if rank is not None else reported
    st = rank_states(ctx.ev).get(whose_rank) if whose_rank is not None else None
    if st is not None and st.state in ("crashed", "watchdog_killed") and (lo is None or lo <= limit + SLACK):
        whose = f"it is output of rank {rank}" if rank is not None else f"it reports rank {reported}'s own failure"
        return _check(
            "causality",
            "passed",
            f"{root.where} has no time of its own (between {_t(lo)} and {_t(hi)}), but {whose}, "
            f"which crashed ({st.why}) and never entered the collective the others waited in: it came before "
            f"{what} at {_t(limit)}.",
            ev,
        )
    if hi is not None and sym is not None and hi <= sym and rank is not None and rank in root_stragglers(ctx):
        return _check(
            "causality",
            "passed",
            f"{root.where} has no time of its own (between {_t(lo)} and {_t(hi)}), but it is a line of rank {rank}, "
            f"which never entered the collective (no pending work when the others timed out): its stall began before "
            f"{what} at {_t(limit)}, and the line precedes the first timeout at {_t(sym)}.",
            ev,
        )
    fate = causal_model(ctx.ev).fates.get(rank) if rank is not None else None
    lost = fate.primary if fate is not None else None
    if lost is not None and lost.kind == "node_lost" and root.file == lost.line.file and root.line == lost.line.line:
        return _check(
            "causality",
            "passed",
            f"{root.where} has no time of its own, but it is the last line of rank {rank}'s node, which went silent "
            "with no error and no reaction to the failure the other nodes reported, its launcher included: it went "
            f"down before they reacted (the first symptom at {_t(sym)}).",
            ev,
        )
    return _check(
        "causality",
        "undecided",
        f"{root.where} cannot be ordered against {what} at {_t(limit)}: it was written between {_t(lo)} and {_t(hi)}.",
        ev,
        "Cite a line with its own time before the collective started, or a line of the rank that never entered it.",
    )


def _reported_failure_of(ctx: RuleContext, root: Cited) -> int | None:
    """The culprit whose own failure the cited line is (its causal-model primary event), when the line names the
    rank in its words rather than being written by it: a launcher's report of a worker's death, whose time is when the
    report was printed, not when the rank died."""
    fates = causal_model(ctx.ev).fates
    found = [
        r
        for r in sorted(ctx.culprits)
        if (f := fates.get(r)) is not None
        and f.primary is not None
        and (f.primary.line.file, f.primary.line.line) == (root.file, root.line)
    ]
    return found[0] if len(found) == 1 else None


def _chain_order(ctx: RuleContext) -> tuple[str, list[Evidence]] | None:
    steps = [s for s in ctx.chain if s.exists]
    for a, b in pairwise(steps):
        if a.earliest is not None and b.latest is not None and b.latest + SLACK < a.earliest:
            return (
                f"The chain runs backwards: {b.role} ({b.where}, by {_t(b.latest)}) happened before {a.role} "
                f"({a.where}, not before {_t(a.earliest)}).",
                [a.cite(), b.cite()],
            )
    return None


# ---------------------------------------------------------------------------------------------------------------------
# clock


def clock(ctx: RuleContext) -> Check:
    """A claim relating AIS times to worker times needs a verified alignment for those daemons, and a claimed offset
    must equal the measured one."""
    ais_cites = [c for c in ctx.cited if c.source == "ais" and c.role != "evidence"]
    worker_cites = [c for c in ctx.cited if c.source == "worker"]
    offset = ctx.conclusion.tz_offset_hours
    relates = offset is not None or (ais_cites and worker_cites)
    if not relates:
        return _check(
            "clock",
            "not_applicable",
            "The conclusion does not relate AIS times to worker times (no AIS line next to worker lines, no offset).",
        )
    ais = ctx.ev.ais
    if ais is None:
        return _check(
            "clock",
            "failed",
            "The conclusion relates AIS and worker times, but no AIS logs were given to check them against.",
            next_step="Pass ais_dir.",
        )
    al = ais.alignment
    if not al.verified or al.offset_hours is None:
        return _check(
            "clock",
            "failed",
            f"AIS and worker times are related without a verified clock alignment ({_alignment_problem(ctx)}). "
            "Worker logs carry no zone; AIS logs are usually UTC: never assume they match.",
            [c.cite() for c in ais_cites],
            "Run align_timezones (AIS header/hourly-marker zone, CANCELLED time vs the moment get.n stops).",
        )
    daemons = sorted({c.daemon or c.file for c in ais_cites})
    unverified = [d for d in daemons if not aligned_for(al, d)]
    if unverified:
        return _check(
            "clock",
            "failed",
            f"The alignment is not verified for daemon(s) {', '.join(unverified)}.",
            [c.cite() for c in ais_cites],
            "Align those daemons' clocks (their files may be in another zone).",
        )
    used = sorted({(m.method, m.offset_hours) for m in al.methods if m.offset_hours is not None})
    methods = "; ".join(f"{m}: {o:+g} h" for m, o in used)
    if offset is not None and abs(offset - al.offset_hours) > 0.01:
        return _check(
            "clock",
            "failed",
            f"The conclusion claims worker - AIS = {offset:+g} h, but the verified alignment measures "
            f"{al.offset_hours:+g} h ({methods}).",
            next_step=f"Use {al.offset_hours:+g} h.",
        )
    return _check(
        "clock",
        "passed",
        f"Worker clock - AIS clock = {al.offset_hours:+g} h, verified ({methods}) for {', '.join(daemons) or 'all'}.",
    )
