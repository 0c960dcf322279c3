"""``diagnose``: the whole investigation protocol, deterministically, with the verifier's verdict on its own conclusion.

One evidence pass over the worker logs (inventory, tiered signals, NCCL state) and one over the AIS logs (index,
counter deltas, notable lines, clock alignment) feed both the verdict (:func:`analysis.diagnosis.conclude`) and its
verification (:func:`verify.verify_with_evidence`), so the logs are read once (plus the few cited lines read back).
The result model lives here; :func:`render_report` is the markdown report ``debug-training-logs analyze`` prints.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from debug_training_logs import meanwhile
from debug_training_logs.analysis.action import action
from debug_training_logs.analysis.evidence import (
    JobEvidence,
    KeyEvent,
    rank_state_groups,
    rank_states,
)
from debug_training_logs.formats.timestamps import GUESSED_YEAR, show
from debug_training_logs.history.types import HistoryNote
from debug_training_logs.models import Coverage, Model, build_deferred
from debug_training_logs.paths import input_dir
from debug_training_logs.ranges import format_ranges
from debug_training_logs.tools.attempts_view import AttemptSummary, summaries
from debug_training_logs.tools.evidence_cache import job_evidence
from debug_training_logs.tools.params import HangDir, WorldSize
from debug_training_logs.tools.registry import ToolSpec
from debug_training_logs.verify import Conclusion, Verification, verify_with_evidence
from debug_training_logs.verify.models import Category, ChainStep, CitedEvent

if TYPE_CHECKING:
    from debug_training_logs.analysis.diagnosis import Verdict

TIMELINE_LIMIT = 40
"""Rows of the timeline table (the chain's events first, then context)."""


class JobDetails(Model):
    """What kind of job it was."""

    framework: str = Field(description="NeMo / Megatron-LM / Lightning / Ray / plain PyTorch, as the logs show.")
    scale: str = Field(description="Ranks and nodes, e.g. '16 ranks on 2 nodes'.")
    world_size: int | None
    nodes: list[str]
    start_time: str | None = Field(description="Earliest time in the logs (worker local clock; zone not written).")
    end_time: str | None = Field(description="Latest time in the logs (worker local clock).")
    data_source: str = Field(description="AIStore / Lhotse / none seen.")
    torch: str = Field(description="Torch version family the watchdog messages imply.")
    logs: str = Field(description="Files and bytes read (worker and AIS).")


class VerdictModel(Model):
    """The root cause (contract)."""

    category: Category
    culprit_ranks: list[int] = Field(description="Global ranks established as the cause of the failure.")
    suspect_nodes: list[str]
    confidence: Literal["high", "medium", "low"]
    explanation: str = Field(description="Why, in a paragraph a person can check against the cited lines.")
    next_steps: list[str] = Field(description="What to fetch or look at next when the evidence cannot decide.")
    missing_ranks: list[int] = Field(default_factory=list, description="Ranks of the world whose logs are missing.")
    suspect_ranks: list[int] = Field(
        default_factory=list, description="Ranks that look behind or silent but are not established culprits."
    )
    blocked: list[str] = Field(
        default_factory=list,
        description="When a stronger verdict was not presented: the verdict and the verifier check that blocked it.",
    )
    provisional: bool = Field(
        default=False,
        description="True when only a subset of the ranks was read: the shape is what the evidence shows, the "
        "ranks it points at are suspect_ranks, and a hidden rank may hold an earlier failure.",
    )
    suspect_processes: list[str] = Field(
        default_factory=list,
        description="A failed worker known only by node, local rank and pid (no line maps it to a global rank).",
    )
    action: str = Field(
        default="",
        description="What to do now, in one line: restart as is, restart without node X, stop and fix (config, "
        "data, code), or collect what is missing.",
    )


class RankStateGroup(Model):
    """Ranks in the same state at the end of the job (one row per state; crashed ranks grouped by cause)."""

    state: str = Field(
        description="finished, crashed, watchdog_killed, waiting (inside a collective), stuck (alive, outside the "
        "stuck collective), torn_down (stopped by the launcher/SLURM after another failure), absent (no log), unknown."
    )
    ranks: str = Field(description="Global ranks (range string, e.g. '0-4,6-15').")
    count: int
    why: str = Field(description="The deciding fact for the first rank of the group.")
    source: str | None = Field(default=None, description="file:line of the deciding line, when there is one.")


class TimelineEntry(Model):
    """One row of the timeline table."""

    time_local: str | None = Field(
        description="Worker local clock (ISO 8601, no zone: worker logs do not say it); AIS events converted through "
        "the verified alignment. None when the line has no time (see time_note)."
    )
    time_utc: str | None = Field(description="UTC, when the alignment established the workers' zone.")
    unaligned: bool = Field(description="An AIS event that could not be put on the worker clock (its AIS time shown).")
    clock: Literal["worker", "ais"] = Field(
        default="worker", description="Whose line it is: a worker log's or an AIS daemon log's."
    )
    time_note: str = Field(description="How the time is known: exact, bounded by neighbouring lines, AIS clock.")
    source: str = Field(description="file:line (relative to logs_dir or ais_dir).")
    ranks: str = Field(description="Global ranks involved (range string).")
    event: str
    text: str = Field(description="The cited line (cut at ~300 characters).")


class ChainLink(Model):
    """One step of the root-cause chain, trigger first."""

    step: int
    event: str
    time_local: str | None = Field(description="Worker local clock, when known (see time_note).")
    time_note: str
    source: str
    text: str


class KeyFile(Model):
    file: str
    why: str


class RecommendationModel(Model):
    area: str = Field(description="Storage-side, Client-side, Training config, Operations, Evidence to collect.")
    text: str
    because: str


class Diagnosis(Model):
    """The diagnosis of a failed job (contract), with the verifier's verdict on it."""

    summary: str
    job: JobDetails
    verdict: VerdictModel
    timeline: list[TimelineEntry]
    timeline_truncated: int
    root_cause_chain: list[ChainLink]
    key_files: list[KeyFile]
    recommendations: list[RecommendationModel]
    conclusion: Conclusion = Field(description="The verdict as a conclusion (what verify_conclusion was given).")
    verification: Verification
    coverage: Coverage
    rank_states: list[RankStateGroup] = Field(
        default_factory=list,
        description="Every rank's state at the end of the job, grouped (the facts the category follows from).",
    )
    attempts: list[AttemptSummary] = Field(
        default_factory=list,
        description="The job's attempts when it was restarted (elastic restarts, requeues); empty for one attempt.",
    )
    attempt: int | None = Field(
        default=None, description="The attempt this diagnosis is about (default: the first failed one)."
    )
    html_report_uri: str | None = Field(
        default=None,
        description="With html_report=true: the URI of the HTML report (a text/html resource this server serves; "
        "the result also carries it as a resource link). A person opens it in a browser; do not read it into a "
        "model's context.",
    )
    history: HistoryNote | None = Field(
        default=None,
        description="What the job history says: whether this diagnosis was recorded, and when this job's culprit "
        "node, AIS daemon or failure signature was seen in earlier failures ('third time in 14 days'), with the "
        "action that suggests. Null when the history is off.",
    )


# ---------------------------------------------------------------------------------------------------------------------
# Building the result


def _iso(t: datetime | None) -> str | None:
    return t.isoformat(timespec="seconds") if t is not None else None


def _utc_offset(ev: JobEvidence) -> float | None:
    """Hours the worker clock is ahead of UTC, when a verified alignment ties it to AIS clocks that are in UTC."""
    ais = ev.ais
    if ais is None or ais.alignment is None or not ais.alignment.verified or ais.alignment.offset_hours is None:
        return None
    return ais.alignment.offset_hours if (ais.index.zone or "").upper() == "UTC" else None


def _shown(t: datetime | None) -> str:
    return show(t, sep="T") if t is not None else "?"


def _note(e: KeyEvent) -> str:
    if e.time is not None:
        if e.derived:
            note = "computed: the watchdog's timeout time minus how long the collective ran"
        else:
            note = "aligned from the AIS clock" if e.kind == "ais" else "exact (second resolution)"
        if e.time.year == GUESSED_YEAR:
            note += f"; no log line states a year ({GUESSED_YEAR} stands in for it in time_local)"
        return note
    if e.kind == "ais":
        return f"AIS clock {_shown(e.ais_time)} (not aligned with the workers)"
    if e.derived and e.latest is not None:
        return f"before {_shown(e.latest)} (it never reached the collective that started then)"
    if e.derived:
        return "computed from the rank's series of reports"
    if e.earliest or e.latest:
        return f"no time on the line: between {_shown(e.earliest)} and {_shown(e.latest)}"
    return "no time on the line"


def _entry(e: KeyEvent, utc_offset: float | None) -> TimelineEntry:
    note = _note(e)
    if e.time is not None:
        utc = e.time - timedelta(hours=utc_offset) if utc_offset is not None else None
        return TimelineEntry(
            time_local=_iso(e.time),
            time_utc=f"{_iso(utc)}Z" if utc is not None else None,
            unaligned=False,
            clock="ais" if e.kind == "ais" else "worker",
            time_note=note,
            source=f"{e.file}:{e.line}",
            ranks=format_ranges(e.ranks),
            event=e.event,
            text=e.text,
        )
    return TimelineEntry(
        time_local=None,
        time_utc=None,
        unaligned=e.kind == "ais",
        clock="ais" if e.kind == "ais" else "worker",
        time_note=note,
        source=f"{e.file}:{e.line}",
        ranks=format_ranges(e.ranks),
        event=e.event,
        text=e.text,
    )


def to_conclusion(v: Verdict, logs_dir: str, ais_dir: str | None, ev: JobEvidence | None = None) -> Conclusion:
    """The verdict as a checkable conclusion: only lines that are the event they stand for are cited (a computed
    event, such as when the stuck collective started, stays in the report's chain but is not cited)."""
    real = [e for e in v.chain if e.file and e.line > 0 and e.text and not e.derived]
    root = real[0] if real else None

    def when(e: KeyEvent) -> str | None:
        return _iso(e.ais_time if e.kind == "ais" else e.time)

    return Conclusion(
        logs_dir=logs_dir,
        ais_dir=ais_dir,
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
        attempt=ev.attempt if ev is not None else None,
        world_size=ev.given_world_size if ev is not None else None,
        hang_dir=ev.hang.hang_dir if ev is not None and ev.hang is not None else None,
    )


def _job(ev: JobEvidence) -> JobDetails:
    from debug_training_logs.tools.job_overview import build_overview

    inv = ev.worker.job.inventory
    cov = ev.coverage
    ov = build_overview(inv, cov, limit=1)
    nodes = sorted(set(ev.worker.rank_host.values())) or ov.nodes
    ws = cov.world_size
    scale = f"{ws if ws is not None else 'unknown number of'} ranks on {len(nodes) or 'unknown'} node(s)"
    if ws and nodes and ws % len(nodes) == 0:
        scale += f" ({ws // len(nodes)} per node)"
    logs = f"{cov.files_scanned} worker log file(s), {cov.bytes_scanned:,} bytes"
    fr = ev.flight_recorder
    if fr is not None and fr.dumps:
        from debug_training_logs.analysis.fr_verdict import dumps_alone

        logs = ("no worker log" if dumps_alone(ev) else logs) + (
            f"; {len(fr.dumps)} flight-recorder dump(s) (format {', '.join(fr.versions) or '?'}), {fr.bytes_read:,} "
            "bytes"
        )
    if ev.hang is not None:
        logs += "; " + ev.hang.describe()
    if ev.ais is not None:
        idx = ev.ais.index
        logs += f"; {idx.files_scanned} AIS log file(s) from {len(idx.daemons)} daemon(s), {idx.bytes_scanned:,} bytes"
    return JobDetails(
        framework="/".join(h.name for h in ov.framework),
        scale=scale,
        world_size=ws,
        nodes=nodes,
        start_time=ov.job_start.time if ov.job_start else None,
        end_time=ov.job_end.time if ov.job_end else None,
        data_source=", ".join(h.name for h in ov.data_sources) or "none seen (local files?)",
        torch="; ".join(h.name for h in ov.torch_version_hints) or "unknown",
        logs=logs,
    )


def _attempt_note(ev: JobEvidence) -> str:
    att = ev.attempts
    if att is None or att.count < 2 or ev.attempt is None:
        return ""
    each = "; ".join(f"attempt {a.index}: {a.outcome}" for a in att.attempts[:6])
    return f" [This is attempt {ev.attempt} of {att.count} ({each}); pass attempt=N for another.]"


def _summary(v: Verdict, verification: Verification) -> str:
    who = f" (rank(s) {format_ranges(v.culprit_ranks)})" if v.culprit_ranks else ""
    if not who and v.suspect_ranks:
        who = f" (suspect rank(s) {format_ranges(v.suspect_ranks)}, provisional)"
    state = "verified" if verification.accepted else "NOT verified"
    return f"{v.category}{who}, confidence {v.confidence}, {state}: {v.explanation}"


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
        e.kind in ("peer_timeout", "peer_closed") for f in causal_model(ev).fates.values() for e in f.events
    )
    if waited and v.category != "nccl_timeout_unattributed":
        out.append(_weaker(v, "nccl_timeout_unattributed", suspects, missing))
    if v.category != "incomplete_evidence":
        out.append(_weaker(v, "incomplete_evidence", suspects, missing))
    return out


def _weaker(v: Verdict, category: str, suspects: list[int], missing: list[int]) -> Verdict:
    from debug_training_logs.analysis.diagnosis import Verdict

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


def build_diagnosis(
    ev: JobEvidence, logs_root: Path, ais_root: Path | None, *, history: bool = False, job_id: str | None = None
) -> Diagnosis:
    """Verdict, its verification and the report pieces from gathered evidence (no further scan of the logs).

    diagnose never presents a verdict its own verifier rejects: when it does, the strongest weaker verdict that
    passes is presented (:func:`fallbacks`) and ``verdict.blocked`` says what blocked the stronger one. With
    ``history``, the diagnosis is recorded in the job history and says what it shares with earlier failures."""
    from debug_training_logs.analysis.diagnosis import conclude
    from debug_training_logs.analysis.recommendations import recommend

    logs_dir, ais_dir = str(logs_root), (str(ais_root) if ais_root is not None else None)
    first = conclude(ev)
    v = first
    conclusion = to_conclusion(v, logs_dir, ais_dir, ev)
    verification = verify_with_evidence(conclusion, ev, logs_root, ais_root)
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
            alt_conclusion = to_conclusion(alt, logs_dir, ais_dir, ev)
            alt_verification = verify_with_evidence(alt_conclusion, ev, logs_root, ais_root)
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
    utc_offset = _utc_offset(ev)
    entries = [_entry(e, utc_offset) for e in v.timeline]
    d = Diagnosis(
        summary=_summary(v, verification) + _attempt_note(ev),
        job=_job(ev),
        verdict=VerdictModel(
            category=v.category,  # type: ignore[arg-type]
            culprit_ranks=v.culprit_ranks,
            suspect_nodes=v.suspect_nodes,
            confidence=v.confidence,  # type: ignore[arg-type]
            explanation=v.explanation,
            next_steps=v.next_steps,
            missing_ranks=v.missing_ranks,
            suspect_ranks=v.suspect_ranks,
            blocked=v.blocked,
            provisional=bool(v.details.get("provisional")),
            suspect_processes=list(v.details.get("processes", [])),
            action=action(
                v.category,
                v.culprit_ranks,
                v.suspect_ranks,
                v.suspect_nodes,
                bool(v.details.get("provisional")),
                v.missing_ranks,
            ),
        ),
        timeline=entries[:TIMELINE_LIMIT],
        timeline_truncated=max(0, len(entries) - TIMELINE_LIMIT),
        root_cause_chain=[
            ChainLink(
                step=i,
                event=e.event,
                time_local=_iso(e.time),
                time_note=_note(e),
                source=f"{e.file}:{e.line}",
                text=e.text,
            )
            for i, e in enumerate(v.chain, start=1)
        ],
        key_files=[KeyFile(file=f, why=why) for f, why in v.key_files],
        recommendations=[
            RecommendationModel(area=r.area_title, text=r.text, because=r.because) for r in recommend(v, ev)
        ],
        conclusion=conclusion,
        verification=verification,
        coverage=ev.coverage,
        rank_states=[
            RankStateGroup(
                state=state,
                ranks=format_ranges(ranks),
                count=len(ranks),
                why=why,
                source=f"{line.file}:{line.line}" if line is not None and line.line > 0 else None,
            )
            for state, ranks, why, line in rank_state_groups(rank_states(ev))
        ],
        attempts=summaries(ev.attempts) if ev.attempts is not None and ev.attempts.count > 1 else [],
        attempt=ev.attempt,
    )
    if history:
        from debug_training_logs.tools.diagnosis_history import remember

        remember(d, ev, v.chain, job_id=job_id)
        if d.history is not None and d.history.action:  # a node or a failure that keeps coming back
            d.verdict.action = f"{d.history.action} {d.verdict.action}"
    return d


def diagnose(
    logs_dir: Annotated[str, Field(description="Directory with every rank's worker logs (searched recursively).")],
    ais_dir: Annotated[
        str | None, Field(description="Directory with the AIStore daemon logs (plain, rotated or .tar.gz), if any.")
    ] = None,
    attempt: Annotated[
        int | None,
        Field(
            ge=0,
            description="Which attempt of a restarted job to diagnose (0 = the first run); default: the first "
            "failed one. The result lists every attempt.",
        ),
    ] = None,
    fr_dir: Annotated[
        str | None,
        Field(
            description="Directory of flight-recorder dumps when they are not in or next to logs_dir (read with a "
            "restricted unpickler: plain data only)."
        ),
    ] = None,
    world_size: WorldSize = None,
    hang_dir: HangDir = None,
    html_report: Annotated[
        bool,
        Field(
            description="Also make the HTML report for a person (per-rank state grid by node, timeline, AIS counter "
            "plots, step time/memory, verification) and return a link to it (html_report_uri); it is kept in the "
            "server's memory, nothing is written to disk."
        ),
    ] = False,
    job_id: Annotated[
        str | None,
        Field(
            description="The SLURM job id when the log file names do not carry it (the epilog passes $SLURM_JOB_ID); "
            "it names the job in the history."
        ),
    ] = None,
    history: Annotated[
        bool,
        Field(
            description="Record this diagnosis in the job history (re-analysing a job updates its record) and say "
            "whether its culprit node, AIS daemon or failure signature was seen in earlier failures; false leaves "
            "the history untouched."
        ),
    ] = True,
) -> Diagnosis:
    """Find the root cause of a failed distributed training job, the whole protocol deterministically: job overview,
    tiered search of every rank's log, the NCCL state table (who never entered the collective), AIS counter deltas
    and clock alignment when AIS logs are given, the timeline, the causal chain and the verdict; then the verdict is
    run through verify_conclusion and the result says whether it was accepted.

    Returns job details, the verdict (category, culprit ranks, suspect nodes, confidence, explanation), the timeline
    table, the numbered root-cause chain, key files, recommendations (storage side, client side, training config,
    evidence to collect) and the verification. When the evidence cannot decide (missing ranks, a timeout nothing
    attributes), the verdict says so (incomplete_evidence / nccl_timeout_unattributed) and what to fetch next.
    Each diagnosis is recorded in the job history (job_history); its history field says whether this job's culprit
    node, AIS daemon or failure signature failed before.
    """
    if not html_report:
        logs_root = input_dir(logs_dir)
        ais_root = input_dir(ais_dir, "AIS logs directory") if ais_dir else None
        fr_root = input_dir(fr_dir, "flight-recorder directory") if fr_dir else None
        hang_root = input_dir(hang_dir, "hang directory") if hang_dir else None
        ev = _evidence(logs_root, ais_root, fr_root, attempt, world_size, hang_root=hang_root)
        return build_diagnosis(ev, logs_root, ais_root, history=history, job_id=job_id)
    from debug_training_logs.printers import store

    d, page = diagnose_with_html(
        logs_dir, ais_dir, attempt, fr_dir, world_size, job_id=job_id, history=history, hang_dir=hang_dir
    )
    d.html_report_uri = store.keep(page)
    return d


def _evidence(
    logs_root: Path,
    ais_root: Path | None,
    fr_root: Path | None,
    attempt: int | None,
    world_size: int | None,
    html: bool = False,
    hang_root: Path | None = None,
) -> JobEvidence:
    """The job's evidence (:func:`job_evidence`); the modules only the answer needs (the verdict, recommendations,
    the overview, with ``html`` the HTML printer) are imported and their models built while its scan's workers read
    (:mod:`~debug_training_logs.meanwhile`), not before the scan starts."""
    with meanwhile.queued(_import_html_modules if html else _import_answer_modules):
        return job_evidence(logs_root, ais_root, fr_root, attempt, world_size, hang_root)


def _import_answer_modules() -> None:
    import debug_training_logs.analysis.diagnosis
    import debug_training_logs.analysis.recommendations
    import debug_training_logs.tools.job_overview  # noqa: F401

    build_deferred()


def _import_html_modules() -> None:
    _import_answer_modules()
    import debug_training_logs.printers.html
    import debug_training_logs.printers.report_data  # noqa: F401

    build_deferred()


def diagnose_with_html(
    logs_dir: str,
    ais_dir: str | None = None,
    attempt: int | None = None,
    fr_dir: str | None = None,
    world_size: int | None = None,
    *,
    job_id: str | None = None,
    history: bool = True,
    hang_dir: str | None = None,
) -> tuple[Diagnosis, str]:
    """:func:`diagnose` plus the HTML report of the same evidence (one scan for both)."""
    logs_root = input_dir(logs_dir)
    ais_root = input_dir(ais_dir, "AIS logs directory") if ais_dir else None
    fr_root = input_dir(fr_dir, "flight-recorder directory") if fr_dir else None
    hang_root = input_dir(hang_dir, "hang directory") if hang_dir else None
    ev = _evidence(logs_root, ais_root, fr_root, attempt, world_size, html=True, hang_root=hang_root)
    from debug_training_logs.printers.html import render_html
    from debug_training_logs.printers.report_data import build_report_data

    d = build_diagnosis(ev, logs_root, ais_root, history=history, job_id=job_id)
    source = str(logs_root) + (f" + {ais_root}" if ais_root is not None else "")
    return d, render_html(build_report_data(d, ev), source)


# ---------------------------------------------------------------------------------------------------------------------
# The markdown report (``debug-training-logs analyze``)

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
        f"# {_TITLES.get(v.category, v.category)}{who}{nodes}",
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


SPEC = ToolSpec(
    func=diagnose,
    cli_name="diagnose",
    title="Diagnose a failed job",
    positional=("logs_dir", "ais_dir"),
    render=render_report,
    mcp_only=("html_report",),
)
