"""The :class:`~debug_training_logs.tools.diagnosis_models.Diagnosis` of a job from its gathered evidence: the
verdict the policy presents (:func:`~debug_training_logs.verify.policy.verified_verdict`), its verification, and the
report's pieces (job details, timeline table, chain, key files, recommendations, rank states), recorded in the job
history when asked. Reads no log file beyond what the verifier reads back.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from debug_training_logs.analysis.action import action
from debug_training_logs.analysis.evidence_states import rank_state_groups
from debug_training_logs.analysis.evidence_types import JobEvidence, KeyEvent
from debug_training_logs.analysis.fate_events import shown_states
from debug_training_logs.analysis.file_clocks import clock_notes, moved_words
from debug_training_logs.analysis.verdict_events import timeline_order
from debug_training_logs.formats.timestamps import GUESSED_YEAR, show
from debug_training_logs.ranges import format_ranges
from debug_training_logs.tools.attempts_view import summaries
from debug_training_logs.tools.diagnosis_models import (
    TIMELINE_LIMIT,
    ChainLink,
    Diagnosis,
    JobDetails,
    KeyFile,
    RankStateGroup,
    RecommendationModel,
    TimelineEntry,
    VerdictModel,
)
from debug_training_logs.verify import Verification
from debug_training_logs.verify.policy import verified_verdict

if TYPE_CHECKING:
    from debug_training_logs.analysis.verdict import Verdict


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


def _on_job_clock(timeline: list[KeyEvent], ev: JobEvidence) -> list[tuple[KeyEvent, str | None]]:
    """The timeline with the events of files on another clock (a node's time zone, ``FileInventory.clock_offset``)
    moved onto the job's, in order, each moved one with what its line says; the conclusion and its verification keep
    the times as written."""
    inv = ev.worker.job.inventory
    pairs: list[tuple[KeyEvent, str | None]] = []
    for e in timeline:
        d = inv.clock_offset_of(e.file) if e.kind == "worker" else None
        if not d:
            pairs.append((e, None))
            continue
        said = e.time or e.earliest or e.latest
        note = f"{e.file}'s clock moved {moved_words(d)}"
        pairs.append((e.moved_back(d), note + (f" (the line says {said:%Y-%m-%d %H:%M:%S})" if said else "")))
    if any(moved for _e, moved in pairs):
        pairs.sort(key=lambda p: timeline_order(p[0]))
    return pairs


def _entry(e: KeyEvent, utc_offset: float | None, moved: str | None = None) -> TimelineEntry:
    note = _note(e) + (f"; {moved}" if moved else "")
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
        logs = ("no worker log" if ev.dumps_alone() else logs) + (
            f"; {len(fr.dumps)} flight-recorder dump(s) (format {', '.join(fr.versions) or '?'}), {fr.bytes_read:,} "
            "bytes"
        )
    if ev.hang is not None:
        logs += "; " + ev.hang.describe()
    logs += "".join(f"; {note}" for note in clock_notes(inv))
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


def build_diagnosis(ev: JobEvidence, *, history: bool = False, job_id: str | None = None) -> Diagnosis:
    """Verdict, its verification and the report pieces from gathered evidence (no further scan of the logs).

    diagnose never presents a verdict its own verifier rejects (:func:`~debug_training_logs.verify.policy.
    verified_verdict`); ``verdict.blocked`` says what blocked a stronger one. With ``history``, the diagnosis is
    recorded in the job history and says what it shares with earlier failures."""
    from debug_training_logs.analysis.recommendations import recommend

    v, conclusion, verification = verified_verdict(ev)
    utc_offset = _utc_offset(ev)
    entries = [_entry(e, utc_offset, moved) for e, moved in _on_job_clock(v.timeline, ev)]
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
                "oom_killer" if v.details.get("oom_killer_suspected") else None,
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
            for state, ranks, why, line in rank_state_groups(shown_states(ev))
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
