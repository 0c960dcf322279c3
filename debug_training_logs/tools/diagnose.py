"""``diagnose``: the whole investigation protocol, deterministically, with the verifier's verdict on its own conclusion.

One evidence pass over the worker logs (inventory, tiered signals, NCCL state) and one over the AIS logs (index,
counter deltas, notable lines, clock alignment) feed both the verdict (:func:`analysis.diagnosis.conclude`) and its
verification (:func:`verify.verify_with_evidence`), so the logs are read once (plus the few cited lines read back).
The result model is :mod:`~debug_training_logs.tools.diagnosis_models`, built by
:mod:`~debug_training_logs.tools.diagnosis_result`; :func:`~debug_training_logs.printers.markdown.render_report` is the
markdown report ``debug-training-logs analyze`` prints.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from debug_training_logs import meanwhile
from debug_training_logs.analysis.evidence_types import JobEvidence
from debug_training_logs.logs.sources import JobSources
from debug_training_logs.models import build_deferred
from debug_training_logs.paths import job_sources
from debug_training_logs.printers.markdown import render_report
from debug_training_logs.tools.diagnosis_models import Diagnosis
from debug_training_logs.tools.diagnosis_result import build_diagnosis
from debug_training_logs.tools.evidence_cache import job_evidence
from debug_training_logs.tools.params import HangDir, WorldSize
from debug_training_logs.tools.registry import ToolSpec


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
        ev = _evidence(job_sources(logs_dir, ais_dir, fr_dir, hang_dir), attempt, world_size)
        return build_diagnosis(ev, history=history, job_id=job_id)
    from debug_training_logs.printers import store

    d, page = diagnose_with_html(
        logs_dir, ais_dir, attempt, fr_dir, world_size, job_id=job_id, history=history, hang_dir=hang_dir
    )
    d.html_report_uri = store.keep(page)
    return d


def _evidence(sources: JobSources, attempt: int | None, world_size: int | None, html: bool = False) -> JobEvidence:
    """The job's evidence (:func:`job_evidence`); the modules only the answer needs (the verdict, recommendations,
    the overview, with ``html`` the HTML printer) are imported and their models built while its scan's workers read
    (:mod:`~debug_training_logs.meanwhile`), not before the scan starts."""
    with meanwhile.queued(_import_html_modules if html else _import_answer_modules):
        return job_evidence(sources, attempt, world_size)


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
    sources = job_sources(logs_dir, ais_dir, fr_dir, hang_dir)
    ev = _evidence(sources, attempt, world_size, html=True)
    from debug_training_logs.printers.html import render_html
    from debug_training_logs.printers.report_data import build_report_data

    d = build_diagnosis(ev, history=history, job_id=job_id)
    source = str(sources.logs) + (f" + {sources.ais}" if sources.ais is not None else "")
    return d, render_html(build_report_data(d, ev), source)


SPEC = ToolSpec(
    func=diagnose,
    cli_name="diagnose",
    title="Diagnose a failed job",
    positional=("logs_dir", "ais_dir"),
    render=render_report,
    mcp_only=("html_report",),
)
