"""``verify_conclusion``: accept or reject a root-cause conclusion against every rank's logs (the double-check)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from debug_training_logs.tools.registry import ToolSpec
from debug_training_logs.verify import Conclusion, Verification, verify


def verify_conclusion(
    conclusion: Annotated[
        Conclusion,
        Field(
            description="The conclusion to check: logs_dir, optional ais_dir, category, culprit_ranks (established "
            "culprits only), and optionally missing_ranks, suspect_ranks, suspect_nodes, root_cause_event {file, "
            "line, text, time}, chain [{event, file, line, time}], evidence [{file, line, text}], tz_offset_hours "
            "(worker clock minus AIS clock), rank0_seq_gap, and for a restarted job or logs that do not state the "
            "world size: attempt and world_size (as given to diagnose)."
        ),
    ],
) -> Verification:
    """Check a root-cause conclusion against the logs themselves, deterministically, before presenting it.

    The verifier re-reads every rank's logs (and the AIS logs when ais_dir is given) and never trusts the caller's
    reading; it judges with the same evidence model and per-rank states as diagnose (finished, crashed, killed by
    the watchdog, waiting in a collective, stuck, torn down, absent). A cautious conclusion (nccl_timeout_unattributed,
    incomplete_evidence) is accepted unless the logs establish something it contradicts (a rank that crashed first,
    a stalled rank with its cause, a desync, a clean end). Rules: coverage (every rank read, or the conclusion is
    incomplete_evidence with the missing ranks in missing_ranks, never in culprit_ranks);
    straggler consistency (culprits are exactly the ranks the NCCL table singles out; blaming the first rank to detect
    the timeout or the dump-signal sender is rejected); fabric vs straggler; causality (the root cause precedes the
    stuck collective's start and the symptoms; cross-source ordering needs a verified clock alignment); clock (AIS vs
    worker times only through a verified alignment, and a claimed offset must equal it); noise (resets that succeeded
    on retry are not a root cause); citations (every cited file:line exists and says what is quoted); all daemon
    files (a storage conclusion rests on the daemon file that covers the window, not only the latest); rank-0-ahead
    (the claimed gap matches the measured one); and category-specific evidence (the OOM line on the culprit before
    the timeout, the SLURM time-limit cancel with no earlier failure, a clean end with no process killer, ...).

    A minimal conclusion (logs_dir, category, culprit_ranks) is judged on what the logs show; whatever is cited must
    be real. Do not present a rejected conclusion: fix what the failed checks say (each has a next_step) and verify
    again.
    """
    return verify(conclusion)


_MARK = {"passed": "passed", "failed": "FAILED", "undecided": "UNDECIDED", "not_applicable": "n/a"}


def render_verification(v: Verification) -> str:
    """The verdict and one line per rule (with what to do next for those that did not pass)."""
    lines = [v.summary, ""]
    for c in v.checks:
        lines.append(f"[{_MARK[c.status]:>9}] {c.rule}: {c.detail}")
        if c.next_step:
            lines.append(f"{'':12}next: {c.next_step}")
    return "\n".join(lines)


SPEC = ToolSpec(
    func=verify_conclusion,
    cli_name="verify",
    title="Verify a conclusion",
    positional=("conclusion",),
    render=render_verification,
)
