"""Small facts the decision procedure reads: the coverage gap and what to fetch, what the present ranks show, the
scheduler's own cancellation, the launcher's call, the root stragglers, consequence and next-step notes, and how
ranks, times and lines are shown."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from debug_training_logs.analysis.causal import causal_model
from debug_training_logs.analysis.evidence_triggers import data_hits
from debug_training_logs.analysis.evidence_types import Hit, NcclState, Trigger
from debug_training_logs.analysis.fates import WAITED_ON_PEER
from debug_training_logs.analysis.launcher_decision import LauncherCall
from debug_training_logs.analysis.launcher_decision import decide as launcher_decide
from debug_training_logs.analysis.nccl_classify import PER_STEP_COLLECTIVES
from debug_training_logs.formats.prefixes import GLOBAL_RANK
from debug_training_logs.formats.slurm import scheduler_ended
from debug_training_logs.formats.timestamps import show

if TYPE_CHECKING:
    from debug_training_logs.analysis.verdict_context import VerdictContext as _Ctx


def coverage_gap(ctx: _Ctx) -> tuple[str, list[str]] | None:
    """Why the logs may be a subset of the job's ranks and what to fetch, or None when every rank was read."""
    w = ctx.w
    if causal_model(ctx.ev).complete:
        return None
    missing = ctx.ev.missing_ranks
    if not w.job.inventory.files:
        why = "No log file was found under the directory (nothing to diagnose)."
        steps = ["Point logs_dir at the directory holding every node's stderr/stdout files (error-<JOBID>-<N>.out)."]
    elif w.world_size is None:
        why = (
            "No line states the world size (NCCL init 'nranks N', Lightning 'MEMBER: m/N', 'world_size=N'), so "
            f"it cannot be shown that every rank's log was read (ranks seen: {fmt_ranks(w.ranks) or 'none'})."
        )
        steps = [
            "Send every node's log (all error-<JOBID>-<N>.out) and state the world size (diagnose --world-size, or "
            "rerun with NCCL_DEBUG=INFO, which logs 'nranks N')."
        ]
    else:
        why = (
            f"Ranks {fmt_ranks(missing)} of the {w.world_size}-rank world have no log file "
            f"({w.job.inventory.world_size_evidence}): they may hold an earlier failure or the real straggler."
        )
        steps = [
            f"Fetch the log files of ranks {fmt_ranks(missing)} (every error-<JOBID>-<N>.out, e.g. scp "
            "<cluster>:/path/to/slurm/logs/error-<JOBID>-*.out ./training_logs/) and run again."
        ]
    return why, steps


def what_present_ranks_show(ctx: _Ctx) -> str:
    parts = []
    behind = root_stragglers(ctx.nccl) or {r for g in ctx.nccl.groups for r in g.suspect_ranks}
    if ctx.nccl.timed_out:
        classes = ", ".join(sorted({g.classification for g in ctx.nccl.groups}))
        seen = f"; among them, rank(s) {fmt_ranks(behind)} never entered the collective" if behind else ""
        parts.append(f"The present ranks show an NCCL timeout ({classes}{seen}).")
    if ctx.trig:
        t = ctx.trig[0]
        parts.append(f"The first error among them: {t.what} on rank {t.hit.rank} ({t.hit.file}:{t.hit.line}).")
    return " ".join(parts)


def same_line(a: Hit, b: Hit) -> bool:
    return a.file == b.file and a.line == b.line


def earliest_per_rank(ts: list[Trigger]) -> list[Trigger]:
    out: dict[int | None, Trigger] = {}
    for t in sorted(ts, key=lambda t: (t.hit.earliest or datetime.max, t.hit.file, t.hit.line)):
        out.setdefault(t.hit.rank, t)
    return list(out.values())


def time_limit_cancel(ctx: _Ctx) -> Hit | None:
    """The scheduler's cancellation of the job for its own reasons (a time limit, a preemption or requeue, an
    operator's scancel): not a node failure, whose own branch decides."""
    cancels = [h for h in ctx.w.hits("slurm_cancel") if scheduler_ended(h.text)]
    return cancels[0] if cancels else None


def consequence_note(ctx: _Ctx, category: str, culprits: set[int]) -> str:
    if category in ("no_failure", "time_limit", "address_in_use", "launch_failure"):
        return ""
    waited = [
        fate.rank
        for fate in causal_model(ctx.ev).fates.values()
        if fate.rank not in culprits
        and any(e.kind in WAITED_ON_PEER or e.kind in ("agent_stop", "watchdog_abort") for e in fate.events)
    ]
    if not waited:
        return ""
    return (
        f" Rank(s) {fmt_ranks(waited)} then timed out waiting, lost their peer or were stopped by their launcher: "
        "consequences, not causes."
    )


def stall_steps(category: str, root: Any) -> list[str]:
    if root is None or getattr(root, "kind", None) != "stall":
        return []
    return [
        "Dump the stuck rank's Python stacks while it hangs (py-spy dump --pid <PID> on its node) and keep the flight "
        "recorder on (TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE) to confirm where it stopped."
    ]


def launcher_call(ctx: _Ctx) -> LauncherCall | None:
    """What the launcher, DETAIL and dump facts alone would say (their explanations and cited lines)."""
    data = {h.rank for h in data_hits(ctx.ev, set(ctx.w.ranks), None) if h.rank is not None}
    return launcher_decide(
        ctx.ev.launcher,
        ctx.ev.flight_recorder,
        set(ctx.w.ranks),
        nccl_timed_out=ctx.nccl.timed_out,
        slurm_cancelled=bool(ctx.w.hits("slurm_cancel")),
        data_ranks=data,
    )


def root_stragglers(nccl: NcclState) -> set[int]:
    """The ranks at the root of the hang (the table's job-level stragglers that waited in no collective)."""
    return nccl.job_stragglers


def gap_note(gap: int | None) -> str:
    if gap is None:
        return ""
    from_steps = gap / PER_STEP_COLLECTIVES
    if gap % PER_STEP_COLLECTIVES == 0:
        return (
            f"The gap equals {int(from_steps)} training step(s) of per-step collectives ({PER_STEP_COLLECTIVES} per "
            "step: PreemptionCallback broadcast, DDP allreduce, broadcast_buffers): rank 0 ran ahead by whole steps."
        )
    return f"The gap is not a whole number of steps ({PER_STEP_COLLECTIVES} per-step collectives each)."


def fmt_ranks(ranks: Iterable[int]) -> str:
    from debug_training_logs.ranges import format_ranges

    return format_ranges(ranks)


_LEAD_RANK = re.compile("^" + GLOBAL_RANK.pattern + r"\s*")
"""torch's ``[rankN]:`` prefix opening a line, and the blanks after it."""


def fmt_time(t: datetime | None) -> str:
    return show(t) if t is not None else "an unknown time"


def short_text(text: str, n: int = 140) -> str:
    text = _LEAD_RANK.sub("", text, count=1)
    return text if len(text) <= n else text[: n - 1] + "…"
