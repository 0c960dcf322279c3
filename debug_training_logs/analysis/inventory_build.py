"""The job's inventory folded from each file's share (:class:`InventoryFold`): every file's ranks and where they
come from, the world size from evidence about the world only, nodes, versions, start and end."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from datetime import timedelta
from typing import Any, NamedTuple

from debug_training_logs.analysis.file_clocks import clock_offsets, when
from debug_training_logs.analysis.inventory_file_share import _FileShare, _Hosts, _RankSources, _WorldFacts
from debug_training_logs.analysis.inventory_sink import MAX_CREDIBLE_WORLD, FileFacts
from debug_training_logs.analysis.inventory_types import FileInventory, Inventory, TimePoint
from debug_training_logs.formats.timestamps import WallTime
from debug_training_logs.logs.attribution import (
    TASK_STRIDE,
    agreed_offset,
    file_name_node,
    file_name_rank,
    log_dir_local_rank,
)
from debug_training_logs.logs.discovery import LogFile, Skipped


def _ranks_of(src: _RankSources, world_size: int | None) -> tuple[set[int], str]:
    if src.artifact is not None:
        return set(), f"none: {src.artifact} output, not a log"
    found: dict[str, AbstractSet[int]] = {
        "[rankN]: prefixes": src.prefixes,
        "Ray [rank=N] prefixes": src.ray,
        "Lightning GLOBAL_RANK lines": src.lightning,
        "the trainer's own rank statements": src.stated,
    }
    if world_size is not None:
        found["NCCL init 'rank R nranks N' of the world communicator"] = {
            r for r, n in src.nccl_ranks.items() if n == world_size
        }
    if src.srun:  # (kept only when what the lines state of their ranks agrees with them)
        found["launcher task labels (srun --label, mpirun --tag-output)"] = src.srun
    ranks = set().union(*found.values())
    if ranks:
        return ranks, ", ".join(name for name, rs in found.items() if rs)
    name_rank = file_name_rank(src.rel)
    if name_rank is not None:
        return {name_rank}, "file name"
    return set(), "none"


_DIGITS = re.compile(r"\d+")


def _numbered_like_siblings(ranks: dict[str, set[int]], world_size: int | None) -> dict[str, int]:
    """Files that state no rank, named like sibling files up to their last number (``worker_2.txt`` beside
    ``worker_0.txt``, ``worker_1.txt``, ``worker_3.txt``), when the siblings' lines show that number is the rank:
    every sibling that states ranks holds exactly the one its name's number says, two of them at least. The file's
    number is then its rank, unless another file holds that rank or the world is smaller."""
    groups: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    for rel in ranks:
        m = max(_DIGITS.finditer(rel), key=lambda d: d.start(), default=None)  # the name's last number
        if m is not None and len(m.group()) <= 7:
            groups[(rel[: m.start()], rel[m.end() :])].append((rel, int(m.group())))
    held = set().union(*ranks.values()) if ranks else set()
    out: dict[str, int] = {}
    for members in groups.values():
        stating = [(rel, n) for rel, n in members if ranks[rel]]
        if len(stating) < 2 or any(ranks[rel] != {n} for rel, n in stating):
            continue
        numbers = Counter(n for _rel, n in members)
        for rel, n in members:
            if not ranks[rel] and n not in held and numbers[n] == 1 and (world_size is None or n < world_size):
                out[rel] = n
    return out


def _log_dir_ranks(rels: list[str], ranks: dict[str, set[int]]) -> Callable[[str, int, int | None], int | None]:
    """The global rank of a local rank's directory in torchrun's ``--log-dir`` tree: the rank a sibling file of the
    same process states (its stderr's ``[rankN]:``), else the local rank itself when the attempt's directory holds
    every rank of the world (one agent: local ranks are global ranks)."""
    stated: dict[tuple[str, int], set[int]] = defaultdict(set)
    locals_of: dict[str, set[int]] = defaultdict(set)
    for rel in rels:
        d = log_dir_local_rank(rel)
        if d is not None:
            locals_of[d[0]].add(d[1])
            stated[d] |= ranks.get(rel, set())

    def rank(attempt: str, local: int, world: int | None) -> int | None:
        own = stated.get((attempt, local), set())
        if len(own) == 1:
            return next(iter(own))
        whole = world is not None and locals_of[attempt] == set(range(world))
        return local if whole and not own else None

    return rank


_CLAIM_NAMES = {
    "stated": "states world size {n}",
    "launcher": "torchrun global_world_sizes [{n}, ...]",
    "default_pg": "default PG (PG 0) size {n}",
    "slurm": "SLURM task count {n} (the world size only with one task per GPU)",
}


def _world_size(
    facts: Sequence[_WorldFacts], known: dict[str, set[int]], best: tuple[int, str, int, str] | None
) -> tuple[int | None, str]:
    """The world size from evidence about the world only, and which line says so; conflicting evidence is named.

    Sources, most trusted first: Lightning ``MEMBER: m/N``; a line stating ``world_size``/``WORLD_SIZE``, torchrun's
    ``global_world_sizes``, the default PG's ``ProcessGroupNCCL initialization options ... size: N``; SLURM's task
    count; the NCCL communicator whose ``nranks`` is the world's (see :func:`_world_comm`). An NCCL ``nranks`` of any
    other communicator (a 2-rank pipeline pair) says nothing about the world. ``known``: file -> global ranks named
    by non-NCCL sources; a claim at or below a known rank is contradicted and dropped. ``best``: the job's NCCL init
    line with the largest ``nranks`` (nranks, file, line, text; the first file's of equals)."""
    top = max((r for rs in known.values() for r in rs), default=-1)
    claims: list[tuple[int, int, str]] = []  # (priority, n, description)
    for f in facts:
        for n, ln, t in f.world_size_lines:
            if "MEMBER" in t:
                claims.append((0, n, f"{f.rel}:{ln} Lightning 'MEMBER: m/{n}'"))
        for n, kind, ln, _t in f.world_claims:
            claims.append((2 if kind == "slurm" else 1, n, f"{f.rel}:{ln} {_CLAIM_NAMES[kind].format(n=n)}"))
    comm = _world_comm(facts, known, best)
    if comm is not None:
        claims.append((3, comm[0], comm[1]))
    dropped = [c for c in claims if not 0 < c[1] <= MAX_CREDIBLE_WORLD or c[1] <= top]
    claims = [c for c in claims if c not in dropped]
    notes = [f"ignored {d} (contradicted: rank {top} is in the logs)" if 0 < dn <= top else
             f"ignored {d} (not a credible world size)" for _p, dn, d in dropped[:2]]  # fmt: skip
    if not claims:
        why = "unknown: no line states the world size (Lightning MEMBER k/N, WORLD_SIZE, torchrun global_world_sizes, "
        why += "SLURM_NTASKS, the default PG's size or the world communicator's nranks)"
        return None, "; ".join([why, *notes])
    best_p = min(p for p, _n, _d in claims)
    n, desc = max((n, d) for p, n, d in claims if p == best_p)
    others = sorted({f"{d2}" for _p, n2, d2 in claims if n2 != n})
    text = desc
    if others:
        text += f"; CONFLICTING evidence: {'; '.join(others[:3])}" + (
            f" (+{len(others) - 3} more)" if len(others) > 3 else ""
        )
    return n, "; ".join([text, *notes])


def _world_comm(
    facts: Sequence[_WorldFacts], known: dict[str, set[int]], best: tuple[int, str, int, str] | None
) -> tuple[int, str] | None:
    """(N, evidence) when the largest NCCL communicator is the world's. Every process joins the world communicator
    with comm rank = global rank, so in each file whose global ranks other sources name, its comm ranks must be
    exactly those ranks (a sub-communicator's restart at 0 and cover only some processes), and at least two ranks
    must witness it so, unless every comm rank 0..N-1 is logged. Otherwise None: a sub-communicator never sets the
    world size."""
    if best is None or best[0] > MAX_CREDIBLE_WORLD:
        return None
    n = best[0]
    comm_ranks = {r for f in facts for r, k in f.nccl_ranks.items() if k == n and 0 <= r < n}
    witnesses = 0
    witnessed: set[int] = set()
    for f in facts:
        mine = {r for r, k in f.nccl_ranks.items() if k == n}
        glob = known.get(f.rel, set())
        if mine and glob:
            if mine != glob:
                return None
            witnesses += 1
            witnessed |= mine
    where = f"{best[1]}:{best[2]} NCCL init 'nranks {n}'"
    if len(comm_ranks) == n:
        return n, f"{where} (the world communicator: all {n} comm ranks logged)"
    if len(witnessed) >= 2:  # one rank alone cannot tell "rank r of the world" from "rank r of a small sub-comm"
        return n, f"{where} (the world communicator: its comm ranks are the global ranks of {witnesses} file(s))"
    return None


def _earliest_latest(
    ends: Sequence[tuple[TimePoint | None, TimePoint | None]], year_hint: int | None
) -> tuple[TimePoint | None, TimePoint | None]:
    """The earliest of the files' first times and the latest of their last ones (the first file wins a tie)."""
    start: TimePoint | None = None
    end: TimePoint | None = None
    for first, last in ends:
        if first is not None and (start is None or _key(first.time, year_hint) < _key(start.time, year_hint)):
            start = first
        if last is not None and (end is None or _key(last.time, year_hint) > _key(end.time, year_hint)):
            end = last
    return start, end


def _clock_offsets(kept: Sequence[_Kept], year: int | None) -> dict[str, timedelta]:
    spans = {}
    for k in kept:
        first, last = k.ends
        a = when(first.time, year) if first is not None else None
        b = when(last.time, year) if last is not None else None
        if a is not None and b is not None:
            spans[k.file.rel] = (a, b)
    return clock_offsets(spans)


def _key(t: WallTime, year_hint: int | None) -> tuple[int, int, int, int, int, int, int]:
    return (t.year or year_hint or 0, t.month, t.day, t.hour, t.minute, t.second, t.microsecond)


_NONE: frozenset[Any] = frozenset()
"""The empty set the fold keeps for every file's empty sets that only the inventory's build reads."""


class _Kept(NamedTuple):
    """What the inventory keeps of one file's share until the last file is in: the rest goes into the job's totals."""

    file: LogFile
    sources: _RankSources
    world: _WorldFacts
    ends: tuple[TimePoint | None, TimePoint | None]
    last_timed: tuple[int, str, WallTime] | None
    lines: int
    problem: str | None
    light: _Hosts
    local_map: dict[int, int]
    launcher: bool


class InventoryFold:
    """The job's inventory folded one file's share (:class:`_FileShare`) at a time, in any order: each share as its
    file's scan arrives, the files the cache answered for after the scan. What the inventory keeps of a file is taken
    from its share at once; its markers, their first lines, its versions and year go into the job's totals, so no
    file's whole share is held until the last one is read. :meth:`inventory` gives what folding the shares in file
    order gives."""

    def __init__(self, n: int) -> None:
        self._files: list[_Kept | None] = [None] * n
        self._markers: dict[str, int] = {}
        self._first: dict[str, tuple[int, int]] = {}
        """Marker -> (file index, place among that file's markers) of its first mention in file order: the job's
        markers and their examples are listed in that order."""
        self._examples: dict[str, tuple[str, int, str]] = {}
        self._nccl_versions: set[str] = set()
        self._torch_versions: set[str] = set()
        self._best: tuple[int, tuple[int, str, int, str]] | None = None
        """(file index, (nranks, file, line, text)) of the job's NCCL init line with the largest ``nranks``, the first
        file's in file order of equals."""
        self._year: tuple[int, int] | None = None
        """(file index, year) of the first file in file order whose lines state a year."""

    def __contains__(self, j: int) -> bool:
        return self._files[j] is not None

    def add(self, j: int, lf: LogFile, d: _FileShare) -> None:
        """Fold file ``j`` (``lf``) of the job's files from its share ``d``."""
        for place, (name, n) in enumerate(d.markers.items()):
            self._markers[name] = self._markers.get(name, 0) + n
            first = self._first.get(name)
            if first is None or (j, place) < first:
                self._first[name] = (j, place)
                ln, text = d.first_marker_line[name]
                self._examples[name] = (d.world.rel, ln, text)
        self._nccl_versions |= d.nccl_versions
        self._torch_versions |= d.torch_versions
        if d.year is not None and (self._year is None or j < self._year[0]):
            self._year = (j, d.year)
        local = {k: g for k, g in d.local_map.items() if g >= 0}
        launcher = bool(d.markers.get("launcher_line"))
        # (most files have no Ray, Lightning, stated or srun ranks and no failure table: one empty set for all of
        # them instead of six per file, 216 bytes each)
        b = d.world.best_nranks
        if b is not None and (self._best is None or (b[0], -j) > (self._best[1][0], -self._best[0])):
            self._best = (j, (b[0], d.world.rel, b[1], b[2]))
        world = d.world._replace(
            best_nranks=None, world_size_lines=d.world.world_size_lines or (), world_claims=d.world.world_claims or ()
        )
        src, light = d.sources, d.light
        src = src._replace(
            ray=src.ray or _NONE, lightning=src.lightning or _NONE, stated=src.stated or _NONE, srun=src.srun or _NONE
        )
        light = light._replace(
            child_failed_ranks=light.child_failed_ranks or _NONE, launcher_hosts=light.launcher_hosts or _NONE
        )
        self._files[j] = _Kept(
            lf, src, world, (d.first, d.last), d.last_timed, d.lines, d.problem, light, local, launcher
        )

    def inventory(self, facts: Sequence[FileFacts], skipped: list[Skipped]) -> Inventory:
        """The job's inventory, every file folded (``facts`` are only kept, lazily, on the inventory)."""
        kept = [k for k in self._files if k is not None]
        assert len(kept) == len(self._files), "a file's share was not folded"
        order = sorted(self._first, key=self._first.__getitem__)
        year = self._year[1] if self._year is not None else None
        sources = [k.sources for k in kept]
        known = {src.rel: _ranks_of(src, None)[0] for src in sources}
        world_size, ws_evidence = _world_size([k.world for k in kept], known, self._best[1] if self._best else None)
        files: list[FileInventory] = []
        all_ranks: set[int] = set()
        hosts: set[str] = set()
        stated = {s.rel: _ranks_of(s, world_size)[0] for s in sources}
        by_dir = _log_dir_ranks([src.rel for src in sources], stated)
        numbered = _numbered_like_siblings(stated, world_size)
        for k in kept:
            lf, src, f = k.file, k.sources, k.light
            ranks, source = _ranks_of(src, world_size)
            in_tree = log_dir_local_rank(lf.rel) if not ranks else None
            if in_tree is not None and (g := by_dir(*in_tree, world_size)) is not None:
                ranks, source = {g}, "torchrun --log-dir tree"
            elif not ranks and lf.rel in numbered:
                ranks, source = {numbered[lf.rel]}, "file name numbered as its siblings' ranks"
            local = consecutive_locals(k.local_map, world_size)
            if set(local.values()) - ranks:  # a node's local ranks that printed no [rankN]: line of their own
                ranks = ranks | set(local.values())
                source = f"{source}, torchrun --tee local ranks" if source != "none" else "torchrun --tee local ranks"
            if f.child_failed_ranks - ranks:
                # the agent's workers inherit its stdout/stderr: the ranks its ChildFailedError table lists wrote here
                # (a rank that hung and was SIGTERMed may have no [rankN]: line of its own)
                ranks = ranks | f.child_failed_ranks
                source = f"{source}, torchrun failure table" if source != "none" else "torchrun failure table"
            all_ranks |= ranks
            own = f.hosts or f.launcher_hosts
            node = sorted(own)[0] if len(own) == 1 else file_name_node(lf.rel)
            files.append(
                FileInventory(
                    lf.rel,
                    lf.size,
                    lf.compression,
                    ranks,
                    source,
                    node,
                    k.lines,
                    k.problem,
                    k.last_timed,
                    src.prefixes,
                    local,
                    k.launcher,
                    src.artifact,
                )
            )
            hosts |= f.hosts | f.launcher_hosts
        offsets = _clock_offsets(kept, year)
        for fi in files:
            fi.clock_offset = offsets.get(fi.rel)
        start, end = _earliest_latest([k.ends for k in kept if k.file.rel not in offsets], year)
        return Inventory(
            files=files,
            skipped=skipped,
            ranks=all_ranks,
            world_size=world_size,
            world_size_evidence=ws_evidence,
            nodes=sorted(hosts) if hosts else sorted({f.node for f in files if f.node}),
            markers={name: self._markers[name] for name in order},
            marker_examples={name: self._examples[name] for name in order},
            nccl_versions=sorted(self._nccl_versions),
            torch_versions=sorted(self._torch_versions),
            start=start,
            end=end,
            year_hint=year,
            facts=facts,
        )


def consecutive_locals(local_to_global: dict[int, int], world_size: int | None) -> dict[int, int]:
    """A file's torchrun ``--tee`` local -> global ranks, with the local ranks it does not map filled in where the
    ones it maps agree on one offset: torchrun numbers a node's workers consecutively (a worker that printed no
    ``[rankN]:`` line of its own is still local rank L of its node). Without a task label that tells the nodes apart
    (:func:`~debug_training_logs.logs.attribution.local_slot`), two mapped local ranks at least, and only those below
    the highest; behind one (``srun -l torchrun``: one label per node), one mapped local rank gives its node's
    offset, and every node runs as many local ranks as the most the file shows on one node. Never a rank another
    local rank holds, nor one beyond the world."""
    by_task: dict[int, dict[int, int]] = {}
    for slot, g in local_to_global.items():
        by_task.setdefault(slot // TASK_STRIDE, {})[slot % TASK_STRIDE] = g
    out = dict(local_to_global)
    taken = set(local_to_global.values())
    top = max(k for mapped in by_task.values() for k in mapped) if by_task else 0
    for task, mapped in by_task.items():
        off = agreed_offset(mapped, least=2 if task == 0 else 1)
        if off is None:
            continue
        for k in range((top if task else max(mapped)) + 1):
            g = k + off
            if g >= 0 and g not in taken and (world_size is None or g < world_size):
                out.setdefault(task * TASK_STRIDE + k, g)
                taken.add(g)
    return out
