"""Which attempt a tool looks at: the caller's choice, else the first failed one (shared by every tool)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from debug_training_logs.analysis import attempts, launcher
from debug_training_logs.analysis.inventory import scan_consumers
from debug_training_logs.logs import scan_cache
from debug_training_logs.logs.scan_cache import Consumer, FileResult
from debug_training_logs.tools._cache import ATTEMPTS, cached


def choose(
    logs_root: Path,
    attempt: int | None,
    *with_: Consumer,
    on_file: Callable[[int, dict[str, FileResult]], None] | None = None,
) -> tuple[attempts.Attempts, int | None]:
    """The job's attempts and the one to look at (None when the job had a single attempt and none was asked for).

    The launcher facts the attempts come from are a consumer of the shared job scan; ``with_``: the calling tool's
    own consumers, scanned in the same pass (its own scan right after is then a scan-cache hit: one read of the
    files for a single-attempt job). ``on_file``: as :func:`~debug_training_logs.analysis.inventory.scan_consumers`'
    (each scanned file's results as they arrive, the ``with_`` consumers' among them), when this call scans."""

    def split() -> attempts.Attempts:
        lc = attempts.launcher_consumer()
        with scan_cache.together(*with_):
            job = scan_consumers(logs_root, [lc], on_file=on_file)[lc.key]
        facts = launcher.from_job_scan(job)
        return attempts.split_files(job.log_files(), facts)

    found = cached(ATTEMPTS, logs_root, None, split)  # pages reuse one split
    return found, found.choose(attempt)
