"""The markdown report ``debug-training-logs analyze`` prints: the one an on-call engineer can forward as is."""

from __future__ import annotations

from datetime import datetime

from debug_training_logs.formats.timestamps import show
from debug_training_logs.ranges import format_ranges
from debug_training_logs.tools.diagnosis_models import ChainLink, Diagnosis, RecommendationModel, TimelineEntry

_TITLES = {
    "data_loading_stall": "Data-loading stall on one rank",
    "storage_errors": "Storage errors",
    "gpu_fabric": "GPU/network fabric hang",
    "cuda_oom": "CUDA out of memory",
    "cuda_error": "CUDA error",
    "rank_crash": "A rank crashed",
    "collective_mismatch": "Collective mismatch",
    "early_exit": "A rank left the job early",
    "address_in_use": "Rendezvous port already in use",
    "launch_failure": "The job failed to launch",
    "time_limit": "SLURM time limit",
    "node_failure": "Node failure",
    "watchdog_hang": "NCCL watchdog hang",
    "checkpoint_stall": "A rank stuck in checkpoint I/O",
    "rank_stuck": "A rank stuck outside the collective",
    "no_failure": "No failure",
    "incomplete_evidence": "Evidence incomplete",
    "nccl_timeout_unattributed": "NCCL timeout, cause not attributable",
}
NAMED_STALL_TITLE = "A rank never entered the collective, and its logs do not say why"
"""The title of an unattributed timeout that names its rank(s): the cause, not the rank, is what the logs lack."""


def _title(category: str, named: bool) -> str:
    return NAMED_STALL_TITLE if named and category == "nccl_timeout_unattributed" else _TITLES.get(category, category)


def _cell(text: str | None, limit: int = 160) -> str:
    t = (text or "").replace("|", "\\|").replace("\n", " ").replace("`", "'")
    return t if len(t) <= limit else t[: limit - 1] + "…"


def _when(e: TimelineEntry | ChainLink) -> str:
    if e.time_local:
        return show(datetime.fromisoformat(e.time_local))
    return f"({e.time_note})"


def _attempts_cell(d: Diagnosis) -> str:
    parts = []
    for a in d.attempts:
        mark = "**" if a.attempt == d.attempt else ""
        this = " (this report)" if a.attempt == d.attempt else ""
        parts.append(f"{mark}attempt {a.attempt}{this}{mark}: {a.outcome}, ranks {a.ranks or '?'}, ends {a.end or '?'}")
    return _cell("; ".join(parts), 600)


def _history_lines(d: Diagnosis) -> list[str]:
    h = d.history
    if h is None or not (h.note or h.action or h.error):
        return []
    text = f"not recorded ({h.error})" if h.error else " ".join(x for x in (h.note, h.action) if x)
    return [f"**History:** {_cell(text, 600)}", ""]


def render_report(d: Diagnosis) -> str:
    """The report an on-call engineer can forward as is."""
    v = d.verdict
    who = f" — culprit rank(s) {format_ranges(v.culprit_ranks)}" if v.culprit_ranks else ""
    nodes = f" on {', '.join(v.suspect_nodes)}" if v.suspect_nodes else ""
    status = "ACCEPTED" if d.verification.accepted else "REJECTED"
    out = [
        f"# {_title(v.category, bool(v.culprit_ranks))}{who}{nodes}",
        "",
        f"**Category:** `{v.category}` · **Confidence:** {v.confidence} · **Verification:** {status}",
        "",
        v.explanation,
        "",
        *([f"**Action:** {v.action}", ""] if v.action else []),
        *([f"**Missing ranks:** {format_ranges(v.missing_ranks)}", ""] if v.missing_ranks else []),
        *([f"**Suspect ranks (not established):** {format_ranges(v.suspect_ranks)}", ""] if v.suspect_ranks else []),
        *(
            [
                "**Stronger verdict(s) not presented (the verifier rejected them):**",
                *[f"- {_cell(b, 300)}" for b in v.blocked],
                "",
            ]
            if v.blocked
            else []
        ),
        "**Rank states:** " + ("; ".join(f"{g.state} {g.ranks}" for g in d.rank_states) or "none"),
        "",
        *_history_lines(d),
        "## Job Details",
        "",
        "| | |",
        "|---|---|",
        f"| Framework | {_cell(d.job.framework)} |",
        f"| Scale | {_cell(d.job.scale)}{': ' + _cell(', '.join(d.job.nodes), 200) if d.job.nodes else ''} |",
        f"| Start / end | {d.job.start_time or '?'} → {d.job.end_time or '?'} (worker local time, zone not logged) |",
        f"| Data source | {_cell(d.job.data_source)} |",
        f"| Torch | {_cell(d.job.torch, 200)} |",
        f"| Logs read | {_cell(d.job.logs, 200)} |",
        *([f"| Attempts | {_attempts_cell(d)} |"] if d.attempts else []),
        f"| Coverage | ranks {d.coverage.ranks_found or 'none'} of world size {d.coverage.world_size or 'unknown'}"
        + (f"; **missing {d.coverage.missing_ranks}**" if d.coverage.missing_ranks else "; none missing")
        + " |",
        "",
        "## Timeline Table",
        "",
        "| Time (worker local) | UTC | Source | Ranks | Event |",
        "|---|---|---|---|---|",
    ]
    for e in d.timeline:
        out.append(
            f"| {_cell(_when(e), 80)} | {e.time_utc or ''} | `{_cell(e.source, 90)}` | {_cell(e.ranks, 30)} | "
            f"{_cell(e.event, 200)} |"
        )
    if d.timeline_truncated:
        out.append(f"| … | | | | {d.timeline_truncated} more event(s) (see --json) |")
    out += ["", "## Root Cause Chain", ""]
    if not d.root_cause_chain:
        out.append("(no event: see the explanation and the next steps)")
    for i, c in enumerate(d.root_cause_chain):
        out.append(f"{c.step}. **{_when(c)}** {c.event} — `{c.source}`")
        if i < len(d.root_cause_chain) - 1:
            out.append("   ↓")
    out += ["", "## Key Files", ""]
    out += [f"- `{k.file}` — {k.why}" for k in d.key_files] or ["- (none)"]
    out += ["", "## Recommendations", ""]
    areas: dict[str, list[RecommendationModel]] = {}
    for r in d.recommendations:
        areas.setdefault(r.area, []).append(r)
    for area, recs in areas.items():
        out.append(f"**{area}**")
        out += [f"- {r.text} _(because {r.because})_" for r in recs]
        out.append("")
    if v.next_steps:
        out += ["## Next Steps", ""] + [f"- {s}" for s in v.next_steps] + [""]
    out += ["## Verification", "", d.verification.summary, "", "| Rule | Result | Detail |", "|---|---|---|"]
    mark = {"passed": "✔ passed", "failed": "✘ failed", "undecided": "? undecided", "not_applicable": "– n/a"}
    for check in d.verification.checks:
        out.append(f"| {check.rule} | {mark[check.status]} | {_cell(check.detail, 240)} |")
    return "\n".join(out).rstrip() + "\n"
