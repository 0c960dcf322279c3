"""Flight-recorder dumps of a job: found (:func:`~debug_training_logs.logs.sources.find_dumps`), read safely, and
compared across ranks.

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

from collections.abc import Sequence
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
from debug_training_logs.logs.sources import DumpFile, find_dumps

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
    "read",
]

MAX_DUMP_FILES = 65_536
"""Dump files read at most (one per rank: every rank of a 65,536-rank job); the files past it are reported."""


def gather(logs_dir: str | Path | None, fr_dir: str | Path | None = None) -> FlightRecorderFacts:
    """Find, read (safely) and compare the job's flight-recorder dumps."""
    return read(find_dumps(logs_dir, fr_dir))


def read(files: Sequence[DumpFile]) -> FlightRecorderFacts:
    """Read (safely) and compare the dumps ``files`` (:func:`~debug_training_logs.logs.sources.find_dumps`)."""
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
