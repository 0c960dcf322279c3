"""Gathering the evidence of a job: :func:`gather_evidence` runs the one scan of the worker logs and the AIS pass,
:func:`evidence_from_scan` builds the :class:`~debug_training_logs.analysis.evidence_types.JobEvidence` from them.

The evidence is built once per job from the shared scan of the worker logs (:func:`evidence_from_scan` takes a
finished :class:`~debug_training_logs.analysis.inventory_types.JobScan` whose per-file results are
:class:`~debug_training_logs.analysis.evidence_sink.EvidenceSink`'s), and it is read by both the decision procedure
(:mod:`debug_training_logs.analysis.diagnosis`) and every verifier rule (:mod:`debug_training_logs.verify`): the two
can never disagree about which rank a line belongs to or when it happened. Its parts: the types
(:mod:`~debug_training_logs.analysis.evidence_types`), the signals
(:mod:`~debug_training_logs.analysis.evidence_signals`), the per-file scan
(:mod:`~debug_training_logs.analysis.evidence_sink`), the worker evidence's fold
(:mod:`~debug_training_logs.analysis.evidence_worker`, :mod:`~debug_training_logs.analysis.evidence_series`), the NCCL
state (:mod:`~debug_training_logs.analysis.evidence_nccl`), the AIS evidence
(:mod:`~debug_training_logs.analysis.evidence_ais`); the derived facts
(:mod:`~debug_training_logs.analysis.evidence_triggers`, :mod:`~debug_training_logs.analysis.evidence_states`).

:func:`gather_evidence` unpacks each file's NCCL lines as its result arrives, while the other files are still being
scanned.

Nothing here imports the verifier or the decision procedure.
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from debug_training_logs import meanwhile, progress
from debug_training_logs.analysis import attempts as attempts_mod
from debug_training_logs.analysis import launcher as launcher_scan
from debug_training_logs.analysis.evidence_ais import ais_own, gather_ais_evidence
from debug_training_logs.analysis.evidence_nccl import EarlyNccl, nccl_state
from debug_training_logs.analysis.evidence_series import STEP_JUMP_FACTOR, memory_creep, series_jumps
from debug_training_logs.analysis.evidence_types import AisOwn, JobEvidence
from debug_training_logs.analysis.evidence_worker import (
    FileItems,
    evidence_consumer,
    file_items,
    scan_worker_logs,
    worker_evidence_from_scan,
)
from debug_training_logs.analysis.inventory import scan_consumers
from debug_training_logs.analysis.inventory_types import JobScan, given_world_size
from debug_training_logs.analysis.inventory_views import file_result_item
from debug_training_logs.analysis.nccl_hits import FileEvents
from debug_training_logs.analysis.nccl_table import FilePrep
from debug_training_logs.logs.scan_cache import Consumer, FileResult
from debug_training_logs.logs.sources import JobSources

if TYPE_CHECKING:  # the AIS and dump modules are imported where those are read: the worker scan's sinks need none
    from debug_training_logs.analysis import fr_dumps


def job_scan_consumers() -> tuple[Consumer, Consumer]:
    """The consumers of :func:`gather_evidence`'s scan of a job: the evidence's and the launcher facts'."""
    return evidence_consumer(), attempts_mod.launcher_consumer()


EARLY_ITEMS_FILES = 256
"""How many files' :data:`FileItems` :func:`gather_evidence` unpacks as they arrive (while the scan's workers read the
others); the rest are unpacked by the fold after the scan. Bounds what is held meanwhile (~55 KB per 8-rank file)."""


def gather_evidence(sources: JobSources, attempt: int | None = None, world_size: int | None = None) -> JobEvidence:
    """The evidence of a job from its files (:func:`~debug_training_logs.logs.sources.find_sources`): one scan of the
    worker logs (the evidence patterns and the launcher's together), the NCCL table, one pass over the AIS logs if
    given, the flight-recorder dumps and the hang artifacts found.

    ``attempt``: which attempt of a restarted job (:mod:`~debug_training_logs.analysis.attempts`) the evidence is
    about; default the first failed one when there are several. An attempt number the logs do not have is a
    :class:`~debug_training_logs.errors.UserInputError`. Only then is there a second pass: the evidence sinks
    aggregate per file as they read, so they must see only that attempt's lines; the launcher facts of the attempt
    are derived from the first pass by line (:func:`~debug_training_logs.analysis.launcher.for_attempt`).

    ``world_size``: the job's world size as the caller knows it (the launch command), for logs that do not state it;
    it replaces what the logs say, and the coverage evidence says both."""
    from debug_training_logs.analysis import fr_dumps  # the dump reader: only for a job scan

    logs_dir, ais_dir = sources.logs, sources.ais
    ec, lc = job_scan_consumers()
    early: dict[int, EarlyNccl] = {}

    items: dict[int, FileItems] = {}
    launch: dict[int, launcher_scan.EarlyResult] = {}

    def arrived(j: int, results: dict[str, FileResult]) -> None:
        # the NCCL table's input, the fold's items and the launcher's results, unpacked while the scan's workers read
        # the other files (the main process waits for them there): nccl_state, the fold and from_job_scan later find
        # them unpacked
        fr = results.get(ec.key)
        fe = file_result_item(fr, 1) if fr is not None else None
        if isinstance(fe, FileEvents):
            early[j] = (fe, FilePrep(fe))
        if fr is not None and len(items) < EARLY_ITEMS_FILES:
            items[j] = file_items(fr)
        lr = results.get(lc.key)
        if lr is not None and len(launch) < EARLY_ITEMS_FILES:  # bounded too (~20 KB per 8-rank file)
            launch[j] = launcher_scan.early_result(lr)

    # the AIS logs' own evidence, read while the worker scan's processes read the worker logs (the main process only
    # waits for them there); read after the scan instead when it fails there or no worker file is read
    ais: list[AisOwn] = []

    def read_ais() -> None:
        assert ais_dir is not None
        with suppress(Exception):  # the same failure is met, and reported, where it is read again
            ais.append(ais_own(ais_dir))

    dumps: list[fr_dumps.FlightRecorderFacts] = []

    def read_dumps() -> None:  # the flight-recorder dumps too (next to the logs or in ``fr_dir``)
        with suppress(Exception):
            dumps.append(fr_dumps.read(sources.dumps))

    with meanwhile.queued(read_ais if ais_dir is not None else None), meanwhile.queued(read_dumps):
        jobs = scan_consumers(logs_dir, [ec, lc], on_file=arrived)
    whole = launcher_scan.from_job_scan(jobs[lc.key], launch)
    split = attempts_mod.split_files(jobs[lc.key].log_files(), whole)
    chosen = split.choose(attempt)
    own = ais[0] if ais else None
    fr = dumps[0] if dumps else fr_dumps.read(sources.dumps)  # read again: the failure is reported here
    if chosen is None:
        ev = evidence_from_scan(
            given_world_size(jobs[ec.key], world_size),
            ais_dir,
            whole,
            fr,
            early_nccl=early,
            ais_own=own,
            early_items=items,
        )
    else:
        early.clear()
        items.clear()
        keep = split.keeper(chosen)
        facts = launcher_scan.for_attempt(jobs[lc.key], keep)
        progress.report(1, 1, f"attempt {chosen} of {split.count}: a second pass keeps only its lines")
        if facts is None:  # more launcher hits in a file than remembered: that attempt's own launcher scan
            facts = attempts_mod.gather_launcher(logs_dir, keep=keep)
        job = given_world_size(scan_worker_logs(logs_dir, keep), world_size)
        ev = evidence_from_scan(job, ais_dir, facts, fr, ais_own=own)
    ev.attempts = split
    ev.attempt = chosen if split.count > 1 else None
    ev.given_world_size = world_size
    from debug_training_logs.analysis import log_stacks  # the stack and telemetry readers: only now
    from debug_training_logs.analysis.hang_facts import of_job

    in_logs = log_stacks.read(jobs[ec.key], ev.worker.hits("stack_header"))
    ev.hang = of_job(jobs[ec.key], sources.hang_roots, sources.hang, in_logs.processes, in_logs.fatal)
    return ev


def evidence_from_scan(
    job: JobScan,
    ais_dir: Path | None,
    launcher_facts: launcher_scan.LauncherFacts,
    fr: fr_dumps.FlightRecorderFacts,
    early_nccl: dict[int, EarlyNccl] | None = None,
    ais_own: AisOwn | None = None,
    early_items: dict[int, FileItems] | None = None,
) -> JobEvidence:
    """The evidence of a job from the shared worker scan (:func:`scan_worker_logs`' result) plus the AIS pass, the
    launcher facts and the flight-recorder dumps' facts. ``early_nccl``: files' NCCL lines already unpacked (see
    :func:`nccl_state`); the dict is emptied once the table is built. ``ais_own``: the AIS logs' own evidence of
    ``ais_dir`` when it was read already (:func:`ais_own`); ``early_items``: files' evidence items already unpacked
    (see :func:`worker_evidence_from_scan`)."""
    worker = worker_evidence_from_scan(job, early_items)
    nccl = nccl_state(worker, early_nccl)
    if early_nccl is not None:
        early_nccl.clear()
    ais = gather_ais_evidence(ais_dir, worker, nccl, ais_own) if ais_dir is not None else None
    return JobEvidence(
        worker=worker,
        nccl=nccl,
        ais=ais,
        step_jumps=series_jumps(worker.step_ms, STEP_JUMP_FACTOR),
        memory_creep=memory_creep(worker.memory_mb),
        launcher=launcher_facts,
        flight_recorder=fr,
    )
