"""The rules of the double-check, one function each: ``rule(ctx) -> Check``.

Every rule re-derives what it needs from :class:`~debug_training_logs.verify.context.RuleContext` (the evidence the
verifier gathered itself and the cited lines as the files have them). A rule that cannot decide says so (status
``undecided``, which rejects the conclusion) or says why it does not apply (``not_applicable``, with the reason):
never a silent pass. Rules never key on fixture names or paths: only on what the lines say.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime
from itertools import pairwise

from debug_training_logs.analysis.alignment import to_ais_clock
from debug_training_logs.analysis.causal import INFERRED_KINDS, causal_model
from debug_training_logs.analysis.evidence_ais import aligned_for
from debug_training_logs.analysis.evidence_states import (
    crash_triggers,
    fabric_evidence,
    job_finished,
    killers,
    node_failure_facts,
    precedes_symptom,
    rank_states,
)
from debug_training_logs.analysis.evidence_triggers import AIS_LOOKBACK, PER_STEP_COLLECTIVES, data_hits, refine_times
from debug_training_logs.analysis.evidence_types import Hit, NcclRow, RankState, Trigger
from debug_training_logs.formats.slurm import scheduler_ended
from debug_training_logs.formats.timestamps import show
from debug_training_logs.models import Evidence
from debug_training_logs.ranges import format_ranges
from debug_training_logs.textcut import cut
from debug_training_logs.verify.context import MAX_EVIDENCE, SLACK, Cited, RuleContext
from debug_training_logs.verify.context import check as _check
from debug_training_logs.verify.fate_rules import rank_fates
from debug_training_logs.verify.fate_rules import shown as launcher_supports
from debug_training_logs.verify.hang_rules import hang_shows, node_telemetry, stack_category, stack_dumps
from debug_training_logs.verify.models import Check, CheckStatus

Rule = Callable[[RuleContext], Check]

STRAGGLER_CATEGORIES = frozenset(
    {
        "data_loading_stall",
        "storage_errors",
        "rank_crash",
        "cuda_oom",
        "cuda_error",
        "watchdog_hang",
        "node_failure",
        "checkpoint_stall",
        "rank_stuck",
    }
)
"""Categories whose culprits failed or stalled while the other ranks waited for them."""
STORAGE_CATEGORIES = frozenset({"data_loading_stall", "storage_errors"})

_RESET = re.compile(
    r"Connection reset by peer|ConnectionResetError|Connection broken|Connection aborted|Connection refused"
    r"|[Bb]roken pipe|Retrying \(Retry\(|Retrying \S+ in [\d.]+ seconds|[Rr]etrying \d+/\d+|[Rr]etry \d+/\d+"
)
"""A connection reset or a retry (what the noise rule looks for in a cited root cause)."""
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_MIN_SUBSTRING = 20
"""A cited text shorter than the line must be at least this long to count as a quote of it."""


# ---------------------------------------------------------------------------------------------------------------------
# Small helpers


def _fmt(ranks: Iterable[int]) -> str:
    return format_ranges(ranks) or "none"


def _t(t: datetime | None) -> str:
    return show(t) if t is not None else "unknown"


def _row_cite(r: NcclRow) -> Evidence:
    return Evidence(file=r.file, line=r.line, text=r.text)


def root_stragglers(ctx: RuleContext) -> set[int]:
    """Ranks the NCCL table singles out at the root of the hang (no pending work / observed only / absent) that
    waited in no collective themselves."""
    return ctx.ev.nccl.job_stragglers


def singled_out(ctx: RuleContext) -> set[int]:
    """Ranks the NCCL table singles out: root stragglers plus ranks with no NCCL state at all (absent)."""
    return root_stragglers(ctx) | ctx.ev.nccl.ranks_without_state


def _victim_reason(ctx: RuleContext, rank: int) -> str:
    """Why ``rank`` is a victim of the hang, in the words of the NCCL table."""
    nccl = ctx.ev.nccl
    rows = [r for r in nccl.rows if r.rank == rank]
    senders = {g_sender for g in nccl.groups for g_sender in g.dump_signal_senders}
    parts = []
    if rank in senders:
        parts.append("it is the rank whose watchdog set the dump signal the others observed (it timed out first)")
    if any(r.first_to_dump for r in rows):
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


def _bounds(c: Cited) -> tuple[datetime | None, datetime | None]:
    return c.earliest, c.latest


def first_crash(ctx: RuleContext) -> Trigger | None:
    """The earliest failure of a rank whose state is crashed / killed by the watchdog, when it is not after the first
    symptom: a culprit plainly visible."""
    states = rank_states(ctx.ev)
    cands = [
        st.crash
        for st in states.values()
        if st.state in ("crashed", "watchdog_killed") and st.crash is not None
        and precedes_symptom(ctx.ev, st.crash.hit)
    ]  # fmt: skip
    return min(cands, key=lambda t: (t.hit.earliest or datetime.max, t.hit.file, t.hit.line)) if cands else None


def established_conclusion(ctx: RuleContext, *, cautious_ok_for_fabric: bool = False) -> str | None:
    """What the evidence establishes beyond a cautious conclusion (a culprit plainly visible, a desync, a stall with
    its cause, a clean end, a SLURM cancellation), in words; None when it establishes nothing more."""
    ev = ctx.ev
    crash = first_crash(ctx)
    if crash is not None:
        return f"rank {crash.hit.rank} failed first: {crash.what} ({crash.hit.file}:{crash.hit.line})"
    ahead = [g for g in ev.nccl.groups if g.classification == "root_ahead" and g.root_gap is not None]
    if ahead:
        g = ahead[0]
        return f"rank {g.root_rank} is {g.root_gap} collective(s) ahead in PG {g.pg} (a desync)"
    roots = root_stragglers(ctx)
    if ev.nccl.timed_out and roots:
        data = [h for h in data_hits(ev, roots, ctx.symptom_time) if not _RESET.search(h.text)]
        if data:
            return f"straggler rank(s) {_fmt(roots)} logged data-loading errors ({data[0].file}:{data[0].line})"
    end = job_finished(ev)
    if end is not None:
        return f"the run ended normally ({end.file}:{end.line})"
    if not cautious_ok_for_fabric:
        if fabric_evidence(ev)[0]:
            return "the fabric pattern is shown (every rank inside the collective, positive fabric evidence)"
        cancels = [h for h in ev.worker.hits("slurm_cancel") if scheduler_ended(h.text) or "NODE FAILURE" in h.text]
        if cancels and not ev.nccl.timed_out:
            return f"SLURM cancelled the job ({cancels[0].file}:{cancels[0].line})"
    return None


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
    st = rank_states(ctx.ev).get(rank) if rank is not None else None
    if st is not None and st.state in ("crashed", "watchdog_killed") and (lo is None or lo <= limit + SLACK):
        return _check(
            "causality",
            "passed",
            f"{root.where} has no time of its own (between {_t(lo)} and {_t(hi)}), but it is output of rank {rank}, "
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


def _alignment_problem(ctx: RuleContext) -> str:
    ais = ctx.ev.ais
    if ais is None:
        return "no AIS logs were given"
    return ais.alignment_problem or "the offset is not verified for this daemon"


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


# ---------------------------------------------------------------------------------------------------------------------
# noise


def _retry_outcome(ctx: RuleContext, rank: int | None, file: str, line: int) -> tuple[str, list[Evidence]]:
    """``exhausted``, ``succeeded`` or ``unknown`` for a request retried on ``rank`` (logged at ``file:line``).

    Succeeded: the rank went on (it later reached the collective, or logged progress), or training went on after it
    (synchronous training cannot progress while one rank is stuck on a request), or the run ended normally.
    """
    w = ctx.ev.worker
    ranks = {rank} if rank is not None else w.ranks_of_file(file)
    for r in ranks:
        for h in w.hits("retry_exhausted", r):
            if h.file != file or h.line >= line:
                return "exhausted", [h.cite()]
    rows = [r for r in ctx.ev.nccl.rows if r.rank in ranks and ((r.pending or 0) > 0 or r.signal == "detected")]
    if rows:
        return "succeeded", [rows[0].cite()]
    ends = w.hits("clean_end")
    if ends and not killers(w):
        return "succeeded", [ends[-1].cite()]
    at = next((h for s in ("conn_reset", "retry") for h in w.hits(s) if (h.file, h.line) == (file, line)), None)
    last_progress = {h.file: h for h in w.hits("progress")}  # the last kept progress line of each file
    refined = refine_times(w, [*([at] if at is not None else []), *last_progress.values()])
    when = refined[0].latest if at is not None else None
    for h in refined[1 if at is not None else 0 :]:
        if (h.file == file and h.line > line) or (when is not None and h.earliest is not None and h.earliest > when):
            return "succeeded", [h.cite()]
    return "unknown", []


def noise(ctx: RuleContext) -> Check:
    """Connection resets and retries that succeeded on retry are keep-alive noise, never a root cause."""
    root = ctx.root
    first = root if root is not None else (ctx.chain[0] if ctx.chain else None)
    if first is not None and first.exists and first.actual is not None and first.actual.text:
        text = first.actual.text
        if _RESET.search(text) and not re.search(r"Max retries exceeded|RetryError|[Rr]etries exhausted", text):
            outcome, ev = _retry_outcome(ctx, first.rank, first.file, first.line)
            if outcome == "succeeded":
                return _check(
                    "noise",
                    "failed",
                    f"The root cause {first.where} is a connection reset/retry, and the request succeeded on retry "
                    f"(the rank kept training afterwards, {ev[0].file}:{ev[0].line}): AIS closes idle keep-alive "
                    "connections and the client's pool retries them. Noise, not a root cause.",
                    [first.cite(), *ev],
                    "Look past the resets: which rank stopped, and what its last lines say.",
                )
            if outcome == "exhausted":
                return _check(
                    "noise",
                    "passed",
                    f"The cited reset {first.where} was retried until the retries ran out ({ev[0].file}:{ev[0].line}).",
                    [first.cite(), *ev],
                )
            fate = causal_model(ctx.ev).fates.get(first.rank) if first.rank is not None else None
            p = fate.primary if fate is not None else None
            if (
                fate is not None
                and fate.end == "crashed"
                and p is not None
                and (p.line.file, p.line.line)
                == (
                    first.file,
                    first.line,
                )
            ):
                return _check(
                    "noise",
                    "passed",
                    f"The cited reset {first.where} was not retried away: it is the exception that reached the top of "
                    f"rank {first.rank}'s traceback and ended it ({fate.why}).",
                    [first.cite()],
                )
            return _check(
                "noise",
                "undecided",
                f"The root cause {first.where} is a connection reset/retry and the logs do not show whether the retry "
                "succeeded (no later progress and no 'Max retries exceeded' on that rank).",
                [first.cite()],
                "Show that the retries failed, or look for another cause.",
            )
    if ctx.category in STORAGE_CATEGORIES:
        real = [h for h in data_hits(ctx.ev, ctx.culprits or ctx.ev.worker.ranks, None) if not _RESET.search(h.text)]
        ais = ctx.ev.ais
        if real:
            return _check(
                "noise",
                "passed",
                f"The storage conclusion rests on data-loading errors that are not retried resets "
                f"({real[0].file}:{real[0].line}).",
                [h.cite() for h in real],
            )
        if ais is not None and (ais.spikes or ais.incident_lines()):
            return _check("noise", "passed", "The storage conclusion rests on AIS error lines and counter spikes.")
        resets = list({(h.file, h.line): h for s in ("conn_reset", "retry") for h in ctx.ev.worker.hits(s)}.values())
        if resets:
            outcome, ev = _retry_outcome(ctx, resets[-1].rank, resets[-1].file, resets[-1].line)
            status: CheckStatus = "failed" if outcome == "succeeded" else "undecided"
            who = f"Rank(s) {_fmt(ctx.culprits)} logged no data-loading error; the" if ctx.culprits else "The"
            return _check(
                "noise",
                status,
                f"{who} only storage-side lines in the logs are {len(resets)} connection reset/retry line(s)"
                + (", and training went on after them: keep-alive noise." if outcome == "succeeded" else "."),
                [h.cite() for h in resets[:4]] + ev,
                "Resets that succeed on retry are not a root cause: look for what actually stopped.",
            )
        ok, why, cites = launcher_supports(ctx)
        if ok:
            return _check("noise", "passed", f"No storage error is cited; the stall itself is shown: {why}", cites)
        return _check(
            "noise",
            "failed",
            "A storage category, but no rank logged a storage or data-loading error and no AIS evidence was given.",
            next_step="Find the data-loading error on the culprit rank, or pass the AIS logs.",
        )
    return _check(
        "noise", "not_applicable", "The conclusion does not rest on connection resets, retries or storage errors."
    )


# ---------------------------------------------------------------------------------------------------------------------
# citations


def _norm(text: str) -> str:
    text = _ANSI.sub("", text).strip()
    for tail in ("…", "..."):
        text = text.removesuffix(tail)
    return " ".join(text.split())


def text_matches(cited: str, actual: str) -> bool:
    """A cited text matches the line when it is the line, a prefix of it (a ~300-char cut), or a long enough quote."""
    a, c = _norm(actual), _norm(cited)
    if not c:
        return True
    return a == c or a.startswith(c) or (len(c) >= _MIN_SUBSTRING and c in a)


def _parse_claimed(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t.replace(tzinfo=None)


def citations(ctx: RuleContext) -> Check:
    """Every cited file:line exists (under logs_dir or ais_dir) and says what the conclusion quotes."""
    if not ctx.cited:
        return _check("citations", "not_applicable", "Nothing is cited; the conclusion is judged on the logs alone.")
    problems: list[str] = []
    ev: list[Evidence] = []
    for c in ctx.cited:
        if c.source is None:
            problems.append(f"{c.role} {c.where}: no such file under logs_dir or ais_dir")
            continue
        if not c.exists:
            problems.append(f"{c.role} {c.where}: the file has no line {c.line} (or it could not be read)")
            continue
        assert c.actual is not None and c.actual.text is not None
        if c.text is not None and not text_matches(c.text, c.actual.text):
            problems.append(f"{c.role} {c.where}: the line says {cut(c.actual.text, 160)!r}, not {cut(c.text, 160)!r}")
            ev.append(c.cite())
            continue
        claimed = _parse_claimed(c.claimed_time)
        own = c.actual.time
        if claimed is not None and own is not None:
            alts = [own] + ([c.earliest] if c.source == "ais" and c.earliest is not None else [])
            if all(abs((claimed - t).total_seconds()) > 1.5 for t in alts):
                problems.append(f"{c.role} {c.where}: claimed time {c.claimed_time}, but the line says {_t(own)}")
                ev.append(c.cite())
    if problems:
        return _check(
            "citations",
            "failed",
            f"{len(problems)} of {len(ctx.cited)} citation(s) do not hold: " + "; ".join(problems[:5]),
            ev,
            "Cite lines as the files have them (path relative to logs_dir/ais_dir, 1-based line number).",
        )
    return _check(
        "citations", "passed", f"All {len(ctx.cited)} citation(s) exist and match.", [c.cite() for c in ctx.cited]
    )


# ---------------------------------------------------------------------------------------------------------------------
# all daemon files


def all_daemon_files(ctx: RuleContext) -> Check:
    """A storage conclusion rests on every file of the daemon that covers the failure window, not only the latest."""
    ais = ctx.ev.ais
    if ctx.category not in STORAGE_CATEGORIES or ais is None:
        return _check(
            "all_daemon_files",
            "not_applicable",
            "Not a storage conclusion with AIS logs: no daemon files to check.",
        )
    al = ais.alignment
    start, sym = ctx.start, ctx.symptom_time
    window = None
    if al.verified and start is not None:
        window = (to_ais_clock(start - AIS_LOOKBACK, al), to_ais_clock(sym or start, al))
    cited_by_daemon: dict[str, set[str]] = {}
    for c in ctx.cited:
        if c.source == "ais" and c.daemon:
            cited_by_daemon.setdefault(c.daemon, set()).add(c.file)
    if window is None:
        if not cited_by_daemon:
            return _check(
                "all_daemon_files",
                "not_applicable",
                "The conclusion cites no AIS line (it rests on the worker logs), and without a verified clock "
                f"alignment ({_alignment_problem(ctx)}) the failure window cannot be placed on the AIS clock to check "
                "which daemon files cover it.",
            )
        return _daemon_files_by_evidence(ctx, cited_by_daemon)
    lo, hi = window
    assert lo is not None and hi is not None
    problems: list[str] = []
    ev: list[Evidence] = []
    daemons = sorted(cited_by_daemon) or sorted(
        {s.daemon for s in ais.spikes} | {n.daemon for n in ais.incident_lines()}
    )
    covered_any = False
    for key in daemons:
        d = ais.daemon(key)
        if d is None:
            continue
        info = list(d.info_files)
        covering = [f for f in info if f.covers(lo, hi)]
        covered_any = covered_any or bool(covering)
        cited = cited_by_daemon.get(key, set())
        latest = info[-1].ref if info else None
        if cited and not any(f.ref in cited for f in d.files if f.covers(lo, hi)):
            problems.append(
                f"{key}: the cited file(s) {', '.join(sorted(cited))} do not cover the window {_t(lo)}-{_t(hi)} "
                f"(AIS clock); {', '.join(f.ref for f in covering) or 'no file'} does"
            )
        elif cited and len(covering) > 1 and cited & {f.ref for f in covering} == {latest}:
            earlier = ", ".join(f.ref for f in covering if f.ref != latest)
            problems.append(
                f"{key}: only the latest file {latest} is cited, but the window {_t(lo)}-{_t(hi)} (AIS clock) starts "
                f"in {earlier}"
            )
        first = info[0] if info else None
        if cited and first is not None and first.kind == "rotated" and first.start is not None and first.start > lo:
            problems.append(
                f"{key}: its earliest file given, {first.ref}, was rotated at {_t(first.start)}, after the window "
                f"starts ({_t(lo)}): the file(s) before it were not provided"
            )
    if problems:
        return _check(
            "all_daemon_files",
            "failed",
            "; ".join(problems[:4]) + ". The latest file may only cover the time after a restart or rotation.",
            ev,
            "Read every file of the daemon (INFO and rotated), especially the one covering the window.",
        )
    if not covered_any and daemons:
        return _check(
            "all_daemon_files",
            "failed",
            f"No file of {', '.join(daemons[:4])} covers the failure window {_t(lo)}-{_t(hi)} (AIS clock).",
            next_step="Fetch the rotated AIS log files (ais log get cluster) that cover the window.",
        )
    return _check(
        "all_daemon_files",
        "passed",
        f"The failure window {_t(lo)}-{_t(hi)} (AIS clock) is covered by the files the evidence comes from "
        f"({', '.join(daemons[:4]) or 'no daemon implicated'}); all files of each daemon were read.",
    )


def _daemon_files_by_evidence(ctx: RuleContext, cited_by_daemon: dict[str, set[str]]) -> Check:
    """Without a window on the AIS clock: a cited daemon whose error evidence lives in a file the conclusion did not
    use, or whose earliest file given is a rotation (its earlier files are missing)."""
    ais = ctx.ev.ais
    assert ais is not None
    problems = []
    status: CheckStatus = "failed"
    for key, cited in cited_by_daemon.items():
        evidence_files = {n.example.file for n in ais.incident_lines() if n.daemon == key}
        evidence_files |= {s.evidence.file for s in ais.spikes if s.daemon == key}
        if evidence_files and not (evidence_files & cited):
            problems.append(f"{key}: its error lines/spikes are in {', '.join(sorted(evidence_files))}, not cited")
        d = ais.daemon(key)
        info = list(d.info_files) if d is not None else []
        if info and info[0].kind == "rotated" and not evidence_files:
            status = "undecided" if not problems else status
            problems.append(
                f"{key}: its earliest file given, {info[0].ref}, starts with a rotation ({_t(info[0].start)}): its "
                "earlier files were not provided, and without a verified alignment it cannot be shown that they "
                "do not hold the failure window"
            )
    if problems:
        return _check(
            "all_daemon_files",
            status,
            "; ".join(problems) + ".",
            next_step="Fetch and read every file of the daemon (ais log get cluster), not only the latest.",
        )
    return _check(
        "all_daemon_files",
        "passed",
        "The cited AIS files hold the daemons' error evidence (the window itself could not be placed: no alignment).",
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


RULES: tuple[Rule, ...] = (
    coverage,
    straggler_consistency,
    fabric_vs_straggler,
    causality,
    clock,
    noise,
    citations,
    all_daemon_files,
    rank0_ahead,
    category_specific,
    rank_fates,
    stack_dumps,
    node_telemetry,
)
"""Every rule, in the order a person would check."""
