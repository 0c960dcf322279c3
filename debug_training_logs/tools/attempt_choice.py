"""Which attempt a tool looks at: the caller's choice, else the first failed one (shared by every tool)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from debug_training_logs.analysis import attempts, launcher, scan_cache
from debug_training_logs.analysis.inventory import scan_consumers
from debug_training_logs.analysis.scan_cache import Consumer, FileResult
from debug_training_logs.tools._cache import cached

EARLY_LAUNCHER_FILES = 256
"""How many files' launcher results :func:`choose` unpacks as they arrive; the others are unpacked after the scan."""


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
        lc = launcher.consumer()
        early: dict[int, launcher.EarlyResult] = {}

        def arrived(j: int, results: dict[str, FileResult]) -> None:
            # the launcher's results unpacked while the scan's workers read the other files (bounded: ~20 KB per
            # 8-rank file)
            lr = results.get(lc.key)
            if lr is not None and len(early) < EARLY_LAUNCHER_FILES:
                early[j] = launcher.early_result(lr)
            if on_file is not None:
                on_file(j, results)

        with scan_cache.together(*with_):
            job = scan_consumers(logs_root, [lc], on_file=arrived)[lc.key]
        facts = launcher.from_job_scan(job, early)
        return attempts.split(logs_root, files=job.log_files(), launcher_facts=facts)

    found = cached("attempts", logs_root, None, split)  # pages reuse one split
    return found, found.choose(attempt)
