"""The evidence of a job, kept per process: ``diagnose`` and ``verify_conclusion`` (and a verification after each
revision of a conclusion) judge the same gathered evidence instead of rebuilding it from the scan cache each call.

The key is everything the evidence is read from: the worker logs' files, the AIS logs' files (archives included),
the flight-recorder dumps found in or next to the logs, and the attempt and world size asked for; a changed, added or
removed file means new evidence. The CLI (one command per process) keeps nothing.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

from debug_training_logs.analysis.evidence import gather_evidence
from debug_training_logs.analysis.evidence_types import JobEvidence
from debug_training_logs.memo import MEMO
from debug_training_logs.tools._cache import cached, files_key
from debug_training_logs.tools.shared_results import share


def _dumps_key(logs_root: Path, fr_root: Path | None) -> tuple[Hashable, ...]:
    from debug_training_logs.analysis import fr_dumps

    out: list[Hashable] = []
    for d in fr_dumps.find_dumps(logs_root, fr_root):
        try:
            st = d.path.stat()
            out.append((str(d.path), st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((str(d.path), -1, -1))
    return tuple(out)


def job_evidence(
    logs_root: Path,
    ais_root: Path | None = None,
    fr_root: Path | None = None,
    attempt: int | None = None,
    world_size: int | None = None,
    hang_root: Path | None = None,
) -> JobEvidence:
    """:func:`~debug_training_logs.analysis.evidence.gather_evidence`, or the evidence an earlier call of this
    process gathered from the same unchanged files with the same arguments (the evidence is never changed by its
    readers, apart from the derived results it caches for them)."""
    if not MEMO.keep_results:  # one command (the CLI): nothing is kept, so no key is needed (it walks the files)
        return gather_evidence(logs_root, ais_root, fr_root, attempt, world_size, hang_root)
    extra = (
        _hang_key(logs_root, hang_root),
        files_key(ais_root, archives=True) if ais_root is not None else None,
        _dumps_key(logs_root, fr_root),
        attempt,
        world_size,
    )

    def gathered() -> JobEvidence:
        ev = gather_evidence(logs_root, ais_root, fr_root, attempt, world_size, hang_root)
        share(logs_root, ev, world_size)
        return ev

    return cached("evidence", logs_root, extra, gathered)


def _hang_key(logs_root: Path, hang_root: Path | None) -> tuple[Hashable, ...]:
    """The files of the hang directory and of the logs' hang-artifact siblings (the logs' own are in their key)."""
    from debug_training_logs.analysis.hang_files import SIBLING_NAMES

    dirs = [hang_root] if hang_root is not None else []
    dirs += [s for n in SIBLING_NAMES if (s := logs_root.parent / n).is_dir() and s != logs_root]
    return tuple(files_key(d) for d in dirs)
