"""The evidence of a job, kept per process: ``diagnose`` and ``verify_conclusion`` (and a verification after each
revision of a conclusion) judge the same gathered evidence instead of rebuilding it from the scan cache each call.

The key is everything the evidence is read from (:meth:`~debug_training_logs.logs.sources.JobSources.key`): the
worker logs' files, the AIS logs' files (archives included), the flight-recorder dumps found in or next to the logs,
the hang artifacts' files, and the attempt and world size asked for; a changed, added or removed file means new
evidence. The CLI (one command per process) keeps nothing.
"""

from __future__ import annotations

from debug_training_logs.analysis.evidence import gather_evidence
from debug_training_logs.analysis.evidence_types import JobEvidence
from debug_training_logs.logs.sources import JobSources
from debug_training_logs.memo import MEMO
from debug_training_logs.tools._cache import cached_under
from debug_training_logs.tools.shared_results import share


def job_evidence(sources: JobSources, attempt: int | None = None, world_size: int | None = None) -> JobEvidence:
    """:func:`~debug_training_logs.analysis.evidence.gather_evidence`, or the evidence an earlier call of this
    process gathered from the same unchanged files with the same arguments (the evidence is never changed by its
    readers, apart from the derived results it caches for them)."""
    if not MEMO.keep_results:  # one command (the CLI): nothing is kept, so no key is needed (it stats every file)
        return gather_evidence(sources, attempt, world_size)

    def gathered() -> JobEvidence:
        ev = gather_evidence(sources, attempt, world_size)
        share(sources.logs_key(), ev, world_size)
        return ev

    return cached_under("evidence", (attempt, world_size), sources.key(), gathered)
