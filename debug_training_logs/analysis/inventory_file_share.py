"""What the job's inventory reads of one file, worked out in the scan worker that read it: the file's ranks'
sources, world-size facts, hosts, times and year (:class:`_FileShare`), and the file's scan packed as the cache keeps
it (:func:`_pack_scan`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any, NamedTuple

from debug_training_logs.analysis import hang_files
from debug_training_logs.analysis.inventory_sink import _LINE_OPENING_RANK, MAX_CREDIBLE_WORLD, FileFacts
from debug_training_logs.analysis.inventory_types import TimePoint
from debug_training_logs.formats.prefixes import SHORT_RANK_TAG, strip_ansi
from debug_training_logs.formats.timestamps import WallTime, parse_wall_time
from debug_training_logs.logs.attribution import TASK_LABEL_AT_START, task_of_label
from debug_training_logs.logs.scan_cache import FileResult
from debug_training_logs.logs.scan_types import FileScan
from debug_training_logs.memo import Packed, pack
from debug_training_logs.textcut import cut


def _pack_scan(
    layout: tuple[tuple[int, int], ...], refiners: tuple[Callable[[Any, FileScan], Any] | None, ...], s: FileScan
) -> tuple[Packed, list[FileResult]]:
    """One file's scan as the cache keeps it (run in the worker that scanned it, so only these bytes cross back):
    the file's own facts packed once, and each consumer's share (``layout``: its first pattern id and count), its
    sink's result refined first where the consumer says so (:attr:`Consumer.refine`)."""
    results, facts = s.sink_result if s.sink_result is not None else ([None] * len(layout), None)
    results = [r if r is None or f is None else f(r, s) for r, f in zip(results, refiners, strict=True)]
    facts = facts or FileFacts(rel=s.file.rel)
    base = pack((replace(s, counts=[], sink_result=None, sampled=set()), facts, _file_share(s, facts)))
    shares = [
        FileResult(
            counts=s.counts[off : off + n],
            sink_result=pack(res),
            sampled={i - off for i in s.sampled if off <= i < off + n},
        )
        for (off, n), res in zip(layout, results, strict=True)
    ]
    return base, shares


class _RankSources(NamedTuple):
    """What :func:`_ranks_of` reads of one file, taken from its scan and facts once (the inventory asks twice: before
    and after the world size is known)."""

    rel: str
    prefixes: set[int]
    ray: AbstractSet[int]
    lightning: AbstractSet[int]
    stated: AbstractSet[int]
    nccl_ranks: dict[int, int]
    srun: AbstractSet[int]
    """Launcher task labels (``srun --label``, ``mpirun --tag-output``) of the head and tail, kept when they are the
    ranks (no Ray or Lightning ranks, and every rank a ``[rankN]:`` prefix or the trainer states is among them: one
    task per rank)."""
    artifact: str | None = None
    """What the file is when it is no log but something collected during a hang (a ``py-spy`` dump, a kernel log):
    it holds no rank's log, whatever its name or its lines say."""

    @staticmethod
    def of(scan: FileScan, facts: FileFacts) -> _RankSources:
        artifact = hang_files.kind_of("\n".join(scan.head))
        if artifact is not None:
            return _RankSources(scan.file.rel, set(), set(), set(), set(), {}, set(), artifact)
        prefixes, ray, lightning = set(scan.ranks), set(facts.ray_ranks), set(facts.member_ranks)
        # a trainer's line-opening ``rank3| ...`` / ``rank 3: ...`` and short tag ``[r3]``: read from the head and
        # tail (as a marker their literals, "rank" and "[r", are on every line of a torch log, and the scan would
        # look at every line for them)
        opening = {int(m.group(1)) for ln in scan.head + scan.tail if (m := _LINE_OPENING_RANK.match(ln))}
        opening |= {int(m.group(1)) for ln in scan.head + scan.tail if "[r" in ln and (m := _SHORT_TAG.search(ln))}
        stated = (set(facts.stated_ranks) | {r for r in opening if r <= MAX_CREDIBLE_WORLD}) - prefixes
        srun = set() if ray or lightning else _srun_labels(scan.head + scan.tail)
        if not (prefixes | stated) <= srun:
            srun = set()  # the labels are not the ranks the lines state (one task per node: node ids)
        return _RankSources(scan.file.rel, prefixes, ray, lightning, stated, facts.nccl_ranks, srun)


def _srun_labels(lines: list[str]) -> set[int]:
    tasks: set[int] = set()
    labelled = 0
    for ln in lines:
        m = TASK_LABEL_AT_START.match(strip_ansi(ln))  # (the label, whatever prefix follows it: '5: [rank5]: ...')
        if m is not None:
            tasks.add(task_of_label(m)[0])
            labelled += 1
    return tasks if lines and labelled >= max(3, len(lines) // 2) else set()


_SHORT_TAG = re.compile(SHORT_RANK_TAG)
_RANK_SLASH_WORLD = re.compile(r"[Rr][Aa][Nn][Kk][ =:]?(?P<r>\d{1,7}) ?/ ?(?P<n>\d{1,7})\b")
"""A trainer's ``rank 3/8`` (``rank=3/8``, ``RANK 3 / 8``); of the whole world unless a word says whose
(:data:`_GROUP_WORDS`)."""
_GROUP_WORDS = frozenset(
    {
        "parallel",
        "local",
        "group",
        "node",
        "data",
        "tensor",
        "pipeline",
        "expert",
        "context",
        "dp",
        "tp",
        "pp",
        "ep",
        "cp",
    }
)
"""Words before ``rank`` that make it a group's, a node's or a local rank (``tensor model parallel rank 1/2``)."""
MAX_HEAD_CLAIMS = 2


def _head_world_claims(s: FileScan) -> list[tuple[int, str, int, str]]:
    """World-size claims of the file's head and tail lines that state ``rank R/N``: read there, not as a marker (its
    literal, ``rank``, is on every line of a torch log, and the scan would search every byte for it); a trainer
    states it when it starts."""
    out: list[tuple[int, str, int, str]] = []
    for line_no, ln in s.ends():
        short = _SHORT_TAG.search(ln) if "[r" in ln else None
        if short is not None and short.group(2) is not None and int(short.group(1)) < int(short.group(2)):
            out.append((int(short.group(2)), "stated", line_no, ln[:300]))  # ``[r3/8 l1]``: rank 3 of 8
            if len(out) >= MAX_HEAD_CLAIMS:
                break
            continue
        m = _RANK_SLASH_WORLD.search(ln) if "/" in ln else None
        if m is None or int(m.group("r")) >= int(m.group("n")):
            continue
        before = ln[: m.start()]
        if before[-1:].isalnum() or before[-1:] in ("_", ".", "-"):  # ``local_rank 0/4``, ``dp-rank``
            continue
        words = before.split()
        if words and words[-1].lower() in _GROUP_WORDS:
            continue
        out.append((int(m.group("n")), "stated", line_no, ln[:300]))
        if len(out) >= MAX_HEAD_CLAIMS:
            break
    return out


def _file_times(s: FileScan) -> tuple[TimePoint | None, TimePoint | None]:
    """The file's first timed line of its head and last timed line of its tail."""
    first: TimePoint | None = None
    last: TimePoint | None = None
    for i, ln in enumerate(s.head):
        t = parse_wall_time(ln)
        if t is not None:
            first = TimePoint(t, s.file.rel, i + 1, ln[:300])
            break
    first_tail = s.lines - len(s.tail) + 1
    for j in range(len(s.tail) - 1, -1, -1):
        t = parse_wall_time(s.tail[j])
        if t is not None:
            last = TimePoint(t, s.file.rel, first_tail + j, s.tail[j])
            break
    return first, last


def file_year(scan: FileScan) -> int | None:
    """The year the first dated line of the file's head or tail states (None when none states one); the job's year
    is the first file's that has one."""
    for ln in scan.head + scan.tail:
        t = parse_wall_time(ln)
        if t is not None and t.year is not None:
            return t.year
    return None


class _WorldFacts(NamedTuple):
    """What :func:`_world_size` reads of a file's facts."""

    rel: str
    nccl_ranks: dict[int, int]
    world_size_lines: Sequence[tuple[int, int, str]]
    world_claims: Sequence[tuple[int, str, int, str]]
    best_nranks: tuple[int, int, str] | None
    """The file's NCCL init line with the largest ``nranks`` (nranks, line, text)."""


class _Hosts(NamedTuple):
    """A file's hosts and the ranks of its failure tables."""

    child_failed_ranks: AbstractSet[int]
    hosts: set[str]
    launcher_hosts: AbstractSet[str]


class _FileShare(NamedTuple):
    """What the job's inventory reads of one file, worked out in the worker that scanned it (the third item of the
    file's packed base): the main process unpacks this, not the file's head, tail and facts."""

    sources: _RankSources
    world: _WorldFacts
    light: _Hosts
    first: TimePoint | None
    last: TimePoint | None
    last_timed: tuple[int, str, WallTime] | None
    year: int | None
    markers: dict[str, int]
    first_marker_line: dict[str, tuple[int, str]]
    nccl_versions: set[str]
    torch_versions: set[str]
    lines: int
    problem: str | None
    local_map: dict[int, int]


def _file_share(s: FileScan, f: FileFacts) -> _FileShare:
    first, last = _file_times(s)
    last_timed = None
    if last is not None:  # the whole line for the file's end (cut for citation), 300 characters for the job's
        last_timed = (last.line, cut(last.text), last.time)
        last = replace(last, text=last.text[:300])
    return _FileShare(
        sources=_RankSources.of(s, f),
        world=_WorldFacts(
            f.rel, f.nccl_ranks, f.world_size_lines, [*f.world_claims, *_head_world_claims(s)], f.best_nranks
        ),
        light=_Hosts(f.child_failed_ranks, f.hosts, f.launcher_hosts),
        first=first,
        last=last,
        last_timed=last_timed,
        year=file_year(s),
        markers=f.markers,
        first_marker_line=f.first_marker_line,
        nccl_versions=f.nccl_versions,
        torch_versions=f.torch_versions,
        lines=s.lines,
        problem=s.problem,
        local_map=dict(f.local_map),
    )
