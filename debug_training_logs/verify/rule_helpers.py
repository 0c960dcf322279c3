"""What several rules of the double-check share: the category families, the connection-reset pattern, how ranks,
times and NCCL rows are shown, the ranks the NCCL table singles out, the first crash and what the evidence
establishes beyond a cautious conclusion."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from debug_training_logs.analysis.evidence_states import fabric_evidence, job_finished, precedes_symptom, rank_states
from debug_training_logs.analysis.evidence_triggers import data_hits
from debug_training_logs.analysis.evidence_types import NcclRow, Trigger
from debug_training_logs.formats.slurm import scheduler_ended
from debug_training_logs.formats.timestamps import show
from debug_training_logs.models import Evidence
from debug_training_logs.ranges import format_ranges
from debug_training_logs.verify.context import RuleContext

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

RESET = re.compile(
    r"Connection reset by peer|ConnectionResetError|Connection broken|Connection aborted|Connection refused"
    r"|[Bb]roken pipe|Retrying \(Retry\(|Retrying \S+ in [\d.]+ seconds|[Rr]etrying \d+/\d+|[Rr]etry \d+/\d+"
)
"""A connection reset or a retry (what the noise rule looks for in a cited root cause)."""


# ---------------------------------------------------------------------------------------------------------------------
# Small helpers


def fmt_ranks(ranks: Iterable[int]) -> str:
    return format_ranges(ranks) or "none"


def fmt_time(t: datetime | None) -> str:
    return show(t) if t is not None else "unknown"


def row_cite(r: NcclRow) -> Evidence:
    return Evidence(file=r.file, line=r.line, text=r.text)


def root_stragglers(ctx: RuleContext) -> set[int]:
    """Ranks the NCCL table singles out at the root of the hang (no pending work / observed only / absent) that
    waited in no collective themselves."""
    return ctx.ev.nccl.job_stragglers


def singled_out(ctx: RuleContext) -> set[int]:
    """Ranks the NCCL table singles out: root stragglers plus ranks with no NCCL state at all (absent)."""
    return root_stragglers(ctx) | ctx.ev.nccl.ranks_without_state


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
        data = [h for h in data_hits(ev, roots, ctx.symptom_time) if not RESET.search(h.text)]
        if data:
            return f"straggler rank(s) {fmt_ranks(roots)} logged data-loading errors ({data[0].file}:{data[0].line})"
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


def alignment_problem(ctx: RuleContext) -> str:
    ais = ctx.ev.ais
    if ais is None:
        return "no AIS logs were given"
    return ais.alignment_problem or "the offset is not verified for this daemon"
