"""The job inventory's result types: :class:`Inventory` (with each file's :class:`FileInventory` and the
:class:`TimePoint` s), the :class:`JobScan` a scan returns, and the missing-rank arithmetic they answer with."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from debug_training_logs.analysis.inventory_sink import FileFacts
from debug_training_logs.analysis.inventory_views import _Files
from debug_training_logs.formats.timestamps import WallTime, iso
from debug_training_logs.logs.discovery import LogFile, Skipped
from debug_training_logs.logs.scan_types import FileScan
from debug_training_logs.ranges import format_ranges

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Coverage


@dataclass(frozen=True, repr=False, eq=False)
class TimePoint:
    """A wall-clock time found in the logs, as written, with where."""

    time: WallTime
    file: str
    line: int
    text: str


@dataclass(repr=False, eq=False)
class FileInventory:
    """Per file: size, compression, which ranks and node it holds."""

    rel: str
    size: int
    compression: str
    ranks: set[int]
    rank_source: str
    node: str | None
    lines: int
    problem: str | None
    last_timed: tuple[int, str, WallTime] | None = None
    """The file's last line with a time, from its tail: (line number, text cut for citation, its time)."""
    line_ranks: set[int] = field(default_factory=set)
    """The global ranks the file's line prefixes name (``[rankN]:``, inline ``[rankN] ``: the scan's collection)."""
    local_ranks: dict[int, int] = field(default_factory=dict)
    """torchrun --tee local rank -> global rank for this file's ``[defaultL]:`` lines (see FileFacts.local_map)."""
    launcher_lines: bool = False
    """A torchrun agent writes here too: an unprefixed line may be the agent's, not the file's one rank's."""
    artifact: str | None = None
    """Not a log: something collected during a hang (``py-spy``, ``kernel log``...; read by the hang analysis)."""
    clock_offset: timedelta | None = None
    """How far the file's clock runs ahead of the job's other files (a time zone; negative: behind), when it is on
    another clock (:mod:`~debug_training_logs.analysis.file_clocks`)."""


@dataclass(repr=False, eq=False)
class Inventory:
    """What the logs say about the job as a whole."""

    files: list[FileInventory]
    skipped: list[Skipped]
    ranks: set[int]
    world_size: int | None
    world_size_evidence: str
    nodes: list[str]
    markers: dict[str, int]
    marker_examples: dict[str, tuple[str, int, str]]
    nccl_versions: list[str]
    torch_versions: list[str]
    start: TimePoint | None
    end: TimePoint | None
    year_hint: int | None
    facts: Sequence[FileFacts]

    _by_rel: dict[str, FileInventory] = field(default_factory=dict, init=False, repr=False)

    @property
    def missing_ranks(self) -> set[int]:
        """Ranks below the world size that no file shows, at most :data:`MISSING_SET_CAP` of them (the lowest):
        ``missing_ranks_text`` and ``missing_count`` are exact whatever the world size."""
        return missing_set(self.world_size, self.ranks)

    @property
    def missing_ranks_text(self) -> str:
        """Every missing rank as a range string, computed from intervals (never one set entry per rank)."""
        return missing_text(self.world_size, self.ranks)

    @property
    def missing_count(self) -> int:
        return missing_count(self.world_size, self.ranks)

    @property
    def ranks_beyond_world(self) -> set[int]:
        """Ranks seen at or above the world size: either the world size or those ranks are wrong."""
        return set() if self.world_size is None else {r for r in self.ranks if r >= self.world_size}

    def ranks_of_file(self, rel: str) -> set[int]:
        f = self.file_named(rel)
        return f.ranks if f is not None else set()

    def clock_offset_of(self, rel: str) -> timedelta | None:
        """How far ``rel``'s clock runs ahead of the job's other files, when it is on another (a time zone)."""
        f = self.file_named(rel)
        return f.clock_offset if f is not None else None

    def file_named(self, rel: str) -> FileInventory | None:
        if len(self._by_rel) != len(self.files):  # an index, built once: callers ask once per file
            self._by_rel = {f.rel: f for f in self.files}
        return self._by_rel.get(rel)


@dataclass(repr=False, eq=False)
class JobScan:
    """One scan of a worker-log directory: the caller's per-file results plus the job inventory."""

    root: Path
    files: Sequence[FileScan]
    """Per file (in discovery order): its lines, ranks, head, tail and this consumer's counts (its sink result is in
    :attr:`caller_results`). A scan's files are unpacked on each access: iterate, do not index the same file over
    and over."""
    caller_results: Sequence[Any]
    """Per file: this consumer's sink result (None where its sink saw nothing to return)."""
    inventory: Inventory

    def log_files(self) -> list[LogFile]:
        """The scanned files, in order (without unpacking their scans)."""
        if isinstance(self.files, _Files):
            return list(self.files.bases.found)
        return [s.file for s in self.files]

    def counts_per_file(self) -> list[tuple[str, list[int]]]:
        """(file's rel path, this consumer's hit counts per pattern) per file, in order, without unpacking the files'
        scans (their heads and tails: ~0.1 ms a file, a walk of ``files`` for these alone cost 13 ms at 128 files)."""
        if isinstance(self.files, _Files):
            return [(lf.rel, list(r.counts)) for lf, r in zip(self.files.bases.found, self.files.per_file, strict=True)]
        return [(s.file.rel, s.counts) for s in self.files]

    def coverage(self) -> Coverage:
        from debug_training_logs.models import Coverage, UnreadableFile

        inv = self.inventory
        unreadable = [UnreadableFile(file=f.rel, reason=f.problem) for f in inv.files if f.problem]
        unreadable += [UnreadableFile(file=s.rel, reason=s.reason) for s in inv.skipped if _worth_reporting(s)]
        return Coverage(
            files_scanned=len(inv.files),
            bytes_scanned=sum(f.size for f in inv.files),
            ranks_found=format_ranges(inv.ranks),
            world_size=inv.world_size,
            world_size_evidence=inv.world_size_evidence + _beyond_world_note(inv),
            missing_ranks=inv.missing_ranks_text,
            unreadable_files=unreadable,
        )


def given_world_size(job: JobScan, world_size: int | None) -> JobScan:
    """``job`` with the world size the caller knows (the launch command: nodes x GPUs) in place of what the logs
    state, for logs that do not state it; the evidence says both. ``job`` itself (shared by the scan cache) is left
    as it is. ``None``: ``job`` unchanged."""
    if world_size is None:
        return job
    inv = job.inventory
    inv = replace(inv, world_size=world_size, world_size_evidence=given_world_size_evidence(inv, world_size))
    return replace(job, inventory=inv)


def given_world_size_evidence(inv: Inventory, world_size: int) -> str:
    """Where a caller-given world size came from, and what the logs say when they disagree."""
    said = f"; the logs say {inv.world_size} ({inv.world_size_evidence})" if inv.world_size != world_size else ""
    return f"given by the caller: {world_size}{said}"


MISSING_SET_CAP = 65_536
"""At most this many missing ranks are materialised as a set (verdicts, rules); the range string is always exact.
A line stating ``world_size=99999999`` must not cost one set entry per rank."""


def _missing_intervals(world_size: int | None, present: set[int]) -> list[tuple[int, int]]:
    """``[lo, hi]`` intervals of ``range(world_size)`` no rank in ``present`` covers, in O(len(present) log)."""
    if world_size is None or world_size <= 0:
        return []
    out: list[tuple[int, int]] = []
    ranks = sorted(present)
    ranks = ranks[bisect_left(ranks, 0) : bisect_left(ranks, world_size)]
    if len(ranks) == world_size:  # (distinct ranks: every one is there, the usual case)
        return out
    nxt = 0
    for r in ranks:
        if r > nxt:
            out.append((nxt, r - 1))
        nxt = r + 1
    if nxt < world_size:
        out.append((nxt, world_size - 1))
    return out


def missing_text(world_size: int | None, present: set[int]) -> str:
    """Missing ranks as a range string (``"8-99999998"``), exact and compact for any world size."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in _missing_intervals(world_size, present))


def missing_count(world_size: int | None, present: set[int]) -> int:
    """How many ranks below ``world_size`` are not in ``present``."""
    return sum(b - a + 1 for a, b in _missing_intervals(world_size, present))


def missing_set(world_size: int | None, present: set[int], cap: int = MISSING_SET_CAP) -> set[int]:
    """The lowest ``cap`` missing ranks as a set (all of them when there are fewer)."""
    out: set[int] = set()
    for a, b in _missing_intervals(world_size, present):
        out.update(range(a, min(b + 1, a + cap - len(out))))
        if len(out) >= cap:
            break
    return out


def _beyond_world_note(inv: Inventory) -> str:
    beyond = inv.ranks_beyond_world
    note = ""
    if beyond:
        note += (
            f"; WARNING: rank(s) {format_ranges(sorted(beyond)[:1000])}"
            f"{' (and more)' if len(beyond) > 1000 else ''} appear in the logs at or above this world size: the "
            "world size or those ranks are wrong"
        )
    count = inv.missing_count
    if count > MISSING_SET_CAP:
        note += (
            f"; {count:,} ranks missing: verdicts name only the lowest {MISSING_SET_CAP:,} of them "
            "(missing_ranks lists them all as ranges)"
        )
    return note


def _worth_reporting(s: Skipped) -> bool:
    return not s.reason.startswith("symlink inside")


def time_text(tp: TimePoint | None, year_hint: int | None) -> str | None:
    """ISO text of a time point (year inferred from ``year_hint`` when the line had none), or None."""
    return iso(tp.time, year_hint) if tp is not None else None
