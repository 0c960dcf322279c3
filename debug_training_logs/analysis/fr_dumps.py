"""Flight-recorder dumps of a job: found, read safely, and compared across ranks.

Where dumps are looked for: below ``logs_dir`` (torch writes them wherever ``TORCH_FR_DUMP_TEMP_FILE`` points, often
beside the logs), in the directories next to it (a sibling ``fr/``, ``traces/`` ...), and in an explicit ``fr_dir``
(one directory, or one per node: the walk is recursive). A file is a dump when its name is ``<prefix><rank>`` with a
known default prefix, or when it ends in a rank number and starts like a pickle (``0x80``) or a JSON dump (``{"``):
``_dump_12``, ``nccl_trace_rank_3``, ``rank0.json``. Each is read by
:mod:`~debug_training_logs.formats.flight_recorder` (never the standard unpickler); a refused file is reported
with the reason, never silently dropped. A rank with two dumps (``rank0.pkl`` and ``rank0.json``) is read once: the
one with more entries (on a tie the pickle, which has the stack frames), the other reported.

What the comparison says (:mod:`~debug_training_logs.analysis.fr_match`, types in
:mod:`~debug_training_logs.analysis.fr_types`): per process group the collective it is stuck in, who never joined
it, who has no dump, op/size/dtype mismatches, and across groups which stalled first and which ranks the hang
starts from (:meth:`FlightRecorderFacts.accused`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from debug_training_logs.analysis import fr_match
from debug_training_logs.analysis.fr_types import (
    Accused,
    Cited,
    FlightRecorderFacts,
    GroupFacts,
    Mismatch,
    RankState,
    Refused,
    StuckCollective,
)
from debug_training_logs.formats import flight_recorder as fr
from debug_training_logs.logs.discovery import once_per_walk, regular_files

__all__ = [
    "Accused",
    "Cited",
    "DumpFile",
    "FlightRecorderFacts",
    "GroupFacts",
    "Mismatch",
    "RankState",
    "Refused",
    "StuckCollective",
    "find_dumps",
    "gather",
]

MAX_DUMP_FILES = 65_536
"""Dump files read at most (one per rank: every rank of a 65,536-rank job); the files past it are reported."""
_SIBLING_NAMES = ("fr", "traces", "trace", "flight_recorder", "fr_dumps", "dumps", "nccl_trace")


@dataclass(frozen=True)
class DumpFile:
    """A dump found on disk: its path, the path shown to the user, and the global rank its name carries."""

    path: Path
    shown: str
    rank: int


def _looks_like_dump(path: Path) -> int | None:
    if not fr.named_like_dump(path.name):
        return None
    rank = fr.rank_from_name(path.name)
    if rank is not None:
        return rank
    try:
        with open(path, "rb") as fh:
            head = fh.read(fr.HEAD_BYTES)
    except OSError:
        return None
    return fr.dump_rank(path.name, head)


def _look(root: Path, shown_base: Path, out: dict[Path, DumpFile]) -> None:
    if not root.is_dir():
        return
    for p in regular_files(root):
        if p in out or any(d.startswith(".") for d in p.relative_to(root).parts[:-1]):
            continue
        rank = _looks_like_dump(p)
        if rank is not None:
            try:
                shown = p.relative_to(shown_base).as_posix()
            except ValueError:
                shown = str(p)
            out[p] = DumpFile(p, shown, rank)


def find_dumps(logs_dir: str | Path | None, fr_dir: str | Path | None = None) -> list[DumpFile]:
    """Dump files in ``fr_dir``, below ``logs_dir`` and in its sibling dump directories (each file once; not in a
    hidden directory), from the one walk of each tree (:func:`~debug_training_logs.logs.discovery.regular_files`):
    found once per tool call, whether for a cache key or for reading.

    Paths are shown relative to ``logs_dir`` when below it, else relative to its parent (``../fr/...`` reads as
    ``fr/...``), else absolute."""
    fr_root = Path(fr_dir).resolve() if fr_dir is not None else None
    logs = Path(logs_dir).resolve() if logs_dir is not None else None
    return once_per_walk(("flight-recorder dumps", logs, fr_root), lambda: _find(logs, fr_root))


def _find(logs: Path | None, fr_root: Path | None) -> list[DumpFile]:
    found: dict[Path, DumpFile] = {}
    if fr_root is not None:
        _look(fr_root, fr_root.parent, found)
    if logs is not None:
        _look(logs, logs, found)
        for name in _SIBLING_NAMES:
            sib = logs.parent / name
            if sib.is_dir() and sib != logs:
                _look(sib, logs.parent, found)
    return sorted(found.values(), key=lambda d: (d.rank, d.shown))


def gather(logs_dir: str | Path | None, fr_dir: str | Path | None = None) -> FlightRecorderFacts:
    """Find, read (safely) and compare the job's flight-recorder dumps."""
    files = find_dumps(logs_dir, fr_dir)
    by_rank: dict[int, fr.Dump] = {}
    refused: list[Refused] = []
    interned: dict[tuple[int, ...], tuple[int, ...]] = {}
    size = 0
    for f in files[:MAX_DUMP_FILES]:
        try:
            if f.path.stat().st_size > fr.MAX_DUMP_BYTES:
                raise fr.DumpRefused(f"dump is over the {fr.MAX_DUMP_BYTES}-byte cap")
            data = f.path.read_bytes()
            d = fr_match.trim(fr.parse_dump(data, f.rank, f.shown))
            size += len(data)
        except fr.DumpRefused as e:
            refused.append(Refused(f.shown, str(e)))
            continue
        except OSError as e:
            refused.append(Refused(f.shown, f"cannot read: {e.strerror or e}"))
            continue
        # one tuple per distinct group across dumps (a 10,000-rank world listed once, not once per dump)
        d.pg_ranks = {k: interned.setdefault(v, v) for k, v in d.pg_ranks.items()}
        other = by_rank.get(d.rank)
        if other is not None:
            # the fuller one; on a tie the pickle (JSON dumps carry no stack frames)
            rank_of = {"pickle": 1, "json": 0}
            better = (d.entries_total, rank_of.get(d.fmt, 0)) > (other.entries_total, rank_of.get(other.fmt, 0))
            keep, drop = (d, other) if better else (other, d)
            by_rank[d.rank] = keep
            refused.append(Refused(drop.file, f"a second dump of rank {d.rank} ({keep.file} was read)"))
            continue
        by_rank[d.rank] = d
    if len(files) > MAX_DUMP_FILES:
        rest = files[MAX_DUMP_FILES:]
        refused.append(Refused(rest[0].shown, f"{len(rest)} more dump file(s) not read (over {MAX_DUMP_FILES})"))
    dumps = [by_rank[r] for r in sorted(by_rank)]
    versions = sorted({d.version for d in dumps if d.version})
    c = fr_match.compare(dumps)
    return FlightRecorderFacts(
        dumps, refused, c.groups, versions, len(files), c.world, c.world_evidence, c.no_dump, c.accused, size
    )
