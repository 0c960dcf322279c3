"""Between ``diagnose`` and the history: record a diagnosis and say what it shares with earlier failures.

:func:`remember` is called once, at the end of :func:`~debug_training_logs.tools.diagnosis_result.build_diagnosis`
when the caller asked for the history (``diagnose`` does by default; ``--no-history`` / ``history=false`` does not).
It turns the diagnosis into a :class:`~debug_training_logs.history.types.JobRecord` (identity, nodes and daemons
implicated, signature), records it, asks the history what this job's nodes, daemons and signature were part of in the
:data:`WINDOW_DAYS` before it, and sets ``diagnosis.history`` (the note is also appended to the summary).

It never raises: a history that cannot be opened, read or written leaves ``history.error`` (and a warning on
stderr), and the diagnosis is returned as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from debug_training_logs.history import queries
from debug_training_logs.history.location import Location, location, redact
from debug_training_logs.history.notes import history_action, history_note
from debug_training_logs.history.record import (
    is_host_name,
    iso_time,
    job_id_from_files,
    signature,
)
from debug_training_logs.history.store import HistoryError, open_store
from debug_training_logs.history.types import HistoryNote, Implicated, JobName, JobRecord, Role
from debug_training_logs.ranges import format_ranges

if TYPE_CHECKING:
    from debug_training_logs.analysis.evidence_types import JobEvidence, KeyEvent
    from debug_training_logs.tools.diagnosis_models import Diagnosis

logger = logging.getLogger(__name__)

WINDOW_DAYS = 14
"""How far back a diagnosis looks for earlier failures sharing its nodes, daemons or signature."""
SUMMARY_CUT = 300


def remember(d: Diagnosis, ev: JobEvidence, chain: Sequence[KeyEvent], *, job_id: str | None = None) -> None:
    """Record ``d`` in the history and set ``d.history`` (see the module doc); nothing when the history is off."""
    try:
        where = location()
    except Exception as exc:  # an unreadable environment must not break the diagnosis either
        d.history = HistoryNote(recorded=False, error=f"the history location cannot be read: {exc}")
        return
    if where.backend == "off":
        return
    try:
        rec = job_record(d, ev, chain, job_id=job_id)
    except Exception as exc:
        logger.warning("history: this diagnosis could not be turned into a record: %s", exc, exc_info=True)
        d.history = HistoryNote(recorded=False, store=where.shown(), error=f"not recorded: {type(exc).__name__}")
        return
    label = rec.name.label
    try:
        _refuse_inside_logs(where, d)
        store = open_store(where)
        assert store is not None
        try:
            store.record(rec)
            seen = queries.seen_before(store, rec, window_days=WINDOW_DAYS)
        finally:
            store.close()
    except Exception as exc:  # HistoryError says what to do; anything else is reported alike (redacted)
        text = str(exc) if isinstance(exc, HistoryError) else redact(f"{type(exc).__name__}: {exc}", where.target)
        logger.warning("history not recorded: %s", text)
        d.history = HistoryNote(recorded=False, job=label, store=where.shown(), error=text)
        return
    note = history_note(seen)
    d.history = HistoryNote(
        recorded=True,
        job=label,
        store=where.shown(),
        seen_before=seen,
        note=note,
        action=history_action(seen),
    )
    if note:
        d.summary += f" [History: {note}]"


def _refuse_inside_logs(where: Location, d: Diagnosis) -> None:
    """A SQLite history inside a log directory would be written there (and read as a log next time): refused."""
    if where.backend != "sqlite":
        return
    target = Path(where.target).expanduser().resolve()
    for d_ in (d.conclusion.logs_dir, d.conclusion.ais_dir):
        if d_ and target.is_relative_to(Path(d_).resolve()):
            raise HistoryError(
                f"The history file {where.target} is inside the log directory {d_}; this tool never writes there. "
                "Point DEBUG_TRAINING_LOGS_HISTORY elsewhere."
            )


def job_record(d: Diagnosis, ev: JobEvidence, chain: Sequence[KeyEvent], *, job_id: str | None = None) -> JobRecord:
    """The history record of a diagnosis (its evidence gives the file names, rank hosts and AIS daemon names)."""
    logs_dir = str(Path(d.conclusion.logs_dir).resolve())
    slurm_id = (job_id or "").strip() or job_id_from_files(f.rel for f in ev.worker.job.inventory.files)
    v = d.verdict
    now = datetime.now(UTC).replace(tzinfo=None).isoformat(timespec="seconds")
    start, end = iso_time(d.job.start_time), iso_time(d.job.end_time)
    sig, event = signature(v.category, _event_text(_causal_root(ev) or primary_event(chain, v.culprit_ranks)))
    return JobRecord(
        key=JobName(slurm_id, d.attempt, logs_dir).key,
        slurm_job_id=slurm_id,
        attempt=d.attempt,
        logs_dir=logs_dir,
        ais_dir=str(Path(d.conclusion.ais_dir).resolve()) if d.conclusion.ais_dir else None,
        job_start=start,
        job_end=end,
        failed_at=end or start or now,
        recorded_at=now,
        category=v.category,
        confidence=v.confidence,
        verified=d.verification.accepted,
        culprit_ranks=format_ranges(v.culprit_ranks),
        suspect_ranks=format_ranges(v.suspect_ranks),
        signature=sig,
        signature_event=event,
        summary=d.summary[:SUMMARY_CUT],
        implicated=tuple(implicated(d, ev, chain)),
    )


def _causal_root(ev: JobEvidence) -> KeyEvent | None:
    """The causal model's own primary event of the finding (the line of the failure that came first), when it cites
    one."""
    from debug_training_logs.analysis.causal import causal_model, decide
    from debug_training_logs.analysis.evidence_triggers import hit_event

    f = decide(causal_model(ev), ev)
    root = f.root if f is not None else None
    if root is None or root.line.line <= 0 or not root.line.text:
        return None
    return hit_event(root.line, root.what)


def primary_event(chain: Sequence[KeyEvent], culprits: Sequence[int]) -> KeyEvent | None:
    """The first primary event of the root-cause chain when the causal model cites none (a job-level shape: a clean
    end, a time limit, dumps alone): an AIS event or one of a culprit rank (with no culprit, the chain's first cited
    event); a computed event or a victim's symptom (a peer timeout) is passed over."""
    cited = [e for e in chain if not e.derived and (e.text or e.event)]
    if culprits:
        own = next((e for e in cited if e.kind == "ais" or set(e.ranks) & set(culprits)), None)
        if own is not None:
            return own
    return cited[0] if cited else None


def _event_text(e: KeyEvent | None) -> str:
    if e is None:
        return ""
    return e.text or e.event


def implicated(d: Diagnosis, ev: JobEvidence, chain: Sequence[KeyEvent]) -> list[Implicated]:
    """The nodes hosting a culprit rank (``culprit``), the suspect nodes and the nodes hosting suspect ranks
    (``suspect``), and the AIS daemons in the chain (``in_chain``). A node known only by an index from a file name
    (``error-<job>-0.out``: ``0``) names no machine and is left out."""
    v = d.verdict
    by_node: dict[str, tuple[Role, set[int]]] = {}
    roles: tuple[tuple[list[int], Role], ...] = ((v.culprit_ranks, "culprit"), (v.suspect_ranks, "suspect"))
    for ranks, role in roles:
        for r in ranks:
            node = ev.worker.node_of_rank(r)
            if node is None or not is_host_name(node):
                continue
            held_role, held = by_node.get(node, (role, set()))
            by_node[node] = (held_role, held | {r})
    for node in v.suspect_nodes:
        if is_host_name(node) and node not in by_node:
            by_node[node] = ("suspect", set())
    out = [Implicated("node", n, role, format_ranges(sorted(rs))) for n, (role, rs) in sorted(by_node.items())]
    names = _daemon_names(ev)
    daemons: list[str] = []
    for e in chain:
        name = names.get(e.daemon, e.daemon) if e.kind == "ais" and e.daemon else None
        if name and name not in daemons:
            daemons.append(name)
    out += [Implicated("daemon", name, "in_chain") for name in daemons]
    return out


def _daemon_names(ev: JobEvidence) -> dict[str, str]:
    """AIS daemon key (``t[hJkL0aBc]``) -> what a person calls it (its host, ``ais-target-2``)."""
    if ev.ais is None:
        return {}
    return {dm.key: dm.hosts[0] if len(dm.hosts) == 1 else dm.key for dm in ev.ais.index.daemons}
