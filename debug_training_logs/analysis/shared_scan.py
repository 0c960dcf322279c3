"""The consumers every tool an agent calls in a row asks of a job scan, declared in one place above them all: the
server scans them together (:func:`~debug_training_logs.logs.scan_cache.set_default_companions`), so the agent's
first call reads the files for every call after it.

Must not be imported by a consumer's own module (it imports them all).
"""

from __future__ import annotations

from debug_training_logs.analysis import attempts, evidence_worker
from debug_training_logs.analysis.alignment import WORKER_PATTERNS, WorkerClockSink
from debug_training_logs.analysis.grep import GrepSink
from debug_training_logs.analysis.grep_patterns import DEFAULT_PATTERNS
from debug_training_logs.analysis.inventory import consumer_for
from debug_training_logs.analysis.nccl_sink import NCCL_PATTERNS, NcclSink
from debug_training_logs.logs.scan_cache import Consumer


def standard_consumers() -> tuple[Consumer, ...]:
    """The consumers of the tools an agent calls in a row (grep's defaults, the NCCL table, the clock anchors, the
    diagnosis evidence, the launcher facts every attempt split reads), as their tools' own scans declare them:
    scanned together, each later call is a cache hit."""
    return (
        consumer_for([g.regex for g in DEFAULT_PATTERNS], GrepSink),
        consumer_for(NCCL_PATTERNS, NcclSink),
        consumer_for(WORKER_PATTERNS, WorkerClockSink),
        evidence_worker.evidence_consumer(),
        attempts.launcher_consumer(),
    )
