"""One pass over a worker-log directory that every tool shares: the files, ranks, nodes and world size behind
``coverage``, plus what ``job_overview`` reports (framework, versions, start/end, data source).

Tools that scan for their own patterns call :func:`scan_job` with them: the inventory's patterns ride along in the
same pass, so coverage costs no second read of tens of GB.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from debug_training_logs import meanwhile
from debug_training_logs.analysis import hang_files
from debug_training_logs.analysis.scan_cache import CACHE, Consumer, FileResult, companions, file_key
from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats.timestamps import WallTime, iso, parse_wall_time
from debug_training_logs.lazy import LazySequence
from debug_training_logs.logs.attribution import (
    LOCAL_PREFIX,
    NCCL_INIT_RANK,
    RAY_PREFIX,
    SRUN_LABEL,
    file_name_node,
    file_name_rank,
    log_dir_local_rank,
    strip_ansi,
)
from debug_training_logs.logs.discovery import LogFile, Skipped, discover
from debug_training_logs.logs.scan import StartedScan, start_each
from debug_training_logs.logs.scan_types import FileScan, PatternSpec, Sink, SinkFactory
from debug_training_logs.memo import Packed, pack, unpack, unpack_item
from debug_training_logs.ranges import format_ranges
from debug_training_logs.textcut import cut

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Coverage

RANK_STATEMENTS_PER_FILE = 512
"""Rank-stating lines read per file: enough to meet every rank a node's file holds (each states its rank from its
first lines on), bounded for files where every line does."""
PRESENCE_CAP = 20
"""Hits per file after which a presence-only marker stops being searched: ``(?i:lhotse)`` can match a quarter of all
lines, and a Python call per hit line would dominate the pass. Its count then reads "at least"."""


@dataclass(frozen=True, repr=False, eq=False)
class Marker:
    """A named pattern the inventory looks for, and what a hit means."""

    name: str
    regex: str
    meaning: str
    cap: int | None = PRESENCE_CAP
    """Hits per file delivered (None: every hit, for markers whose every line carries a fact such as a rank)."""
    dense: bool = False
    """Lines that occur once per step per rank (progress, metrics): sampled by the scan, never one call per line
    (see :attr:`~debug_training_logs.logs.scan_types.PatternSpec.dense`)."""


# The inventory's own patterns (named data; order does not matter).
MARKERS: tuple[Marker, ...] = (
    Marker("nccl_init", r"NCCL INFO .*\brank \d+ nranks \d+", "NCCL communicator init: comm rank and size", cap=None),
    Marker("nccl_version", r"NCCL version \d+\.\d+\.\d+", "NCCL library version"),
    Marker(
        "lightning_member",
        r"MEMBER: \d+/\d+",
        "Lightning 'Initializing distributed: GLOBAL_RANK: r, MEMBER: m/N'",
        cap=None,
    ),
    Marker(
        "world_size_kv",
        r"(?:^|[^\w])(?:world_size|world size|World size|World Size|WORLD_SIZE)(?:\s*[=:]\s*| \.+ | (?:of )?)\d+\b"
        r"|(?:^|[(\s,;])world ?[=:] ?\d+\b",
        "a line stating the world size (not torchrun's group_world_size/local_world_size: nodes, ranks per node)",
        cap=None,
    ),
    Marker(
        "world_size_launcher",
        r"global_world_sizes=\[\d+|SLURM_NTASKS=\d+|SLURM_NPROCS=\d+",
        "launcher env: torchrun's global_world_sizes, SLURM's task count",
        cap=None,
    ),
    Marker(
        "default_pg_size",
        r"ProcessGroupNCCL initialization options: .*size: \d+",
        "torch's ProcessGroupNCCL init line (its size is the world size for PG 0 / default_pg)",
        cap=None,
    ),
    Marker("child_failed", r"ChildFailedError|\(local_rank: \d+\)", "torchrun failure table", cap=None),
    Marker(
        "launcher_line",
        r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ torch/distributed/|^(?:INFO|WARNING|ERROR):torch\.distributed\."
        r"|^srun: |^slurmstepd: ",
        "a launcher's own line (torchrun's agent, srun, slurmstepd): the file is (also) a launcher's",
    ),
    Marker(
        "rank_statement",
        r"\[default\d+\]:\[rank\d+\]:|\"rank\": ?\d|\[rank \d|\[rank: \d|\brank[ =:]\d+ of \d"
        r"|\b(?:RANK|global_rank|global rank)[ =:]+\d|\brank=\d+ \||\brank=\d+ [^\n]{0,80}\bworld_size=\d|"
        + tn.DEFAULT_PG_RANK.pattern,
        "a line stating the writer's global rank (a torch prefix, a trainer's format): names the file's ranks and, "
        "beside torchrun's --tee prefix, maps its local ranks to global ones",
        cap=RANK_STATEMENTS_PER_FILE,
    ),
    Marker("nemo", r"\[NeMo [IWEDC] \d{4}-", "NeMo logger line"),
    Marker("megatron", r"Megatron|megatron|MEGATRON", "Megatron-LM named"),
    # Kept apart from "megatron": in one alternation the two literals made the scan plan fall back to a slow path.
    Marker("megatron_iteration", r" iteration +\d+/ *\d+ \|", "Megatron-LM training_log iteration line"),
    Marker(
        "lightning",
        r"pytorch_lightning|lightning\.pytorch|lightning\.fabric|LOCAL_RANK: \d+ - CUDA_VISIBLE",
        "Lightning",
    ),
    Marker("ray", r"\([\w.]*(?:\[rank=\d+\])? ?pid=\d+, ip=", "Ray actor prefix"),
    Marker("lhotse", r"lhotse|Lhotse", "Lhotse data loading"),
    Marker("aistore", r"AIStore|aistore|AISBatchLoader|ais://", "AIStore as data source"),
    Marker(
        "torch_version",
        r"(?:torch|Torch|PyTorch)(?: version|_version|==)[=: ]*v?2\.\d+",
        "a line stating the torch version",
    ),
    Marker("fam_2_3_timeout_at", r"Timeout at NCCL work: \d+", "torch 2.3-2.5 status line"),
    Marker("fam_2_4_exception", r"Exception \(either an error or timeout\) detected by watchdog", "torch 2.4-2.5"),
    Marker("fam_2_6_failure", r" failure detected by watchdog at work sequence id", "torch 2.6+ status line"),
    Marker("fam_pg_guid", r"\[PG ID \d+ PG GUID ", "torch 2.5+ PG prefix"),
    Marker("fam_c10_time", r"\[rank\d+\]:\[[FEWIV]\d{3,4} \d\d:\d\d:\d\d\.\d{9} ", "torch 2.4+ c10 header"),
    Marker("fam_c10_rank", r"\[rank\d+\]:\[[FEWIV] \w+\.cpp:\d+\] ", "torch 2.2-2.3 c10 header"),
    Marker("fam_old_watchdog", r"NCCL watchdog thread terminated with exception", "torch <= 2.2 wording"),
    Marker("slurm", r"slurmstepd: |srun: |\*\*\* (?:STEP|JOB) \d+", "SLURM"),
)

HEAD_LINES = 80
TAIL_LINES = 40

_NCCL_HOST = re.compile(r"(?P<host>[A-Za-z0-9][\w.\-]*):\d+:\d+ \[\d+\] NCCL ")
"""Matched (``.match``) where the line's leading prefixes end (:func:`_prefixes_end`)."""
_CHILD_HOST = re.compile(r"^\s*host\s+: (?P<host>\S+)")
_SRUN_HOST = re.compile(r"srun: error: (?P<host>[\w.\-\[\],]+): task")
_MEMBER = re.compile(r"GLOBAL_RANK: (?P<rank>\d+), MEMBER: (?P<m>\d+)/(?P<n>\d+)")
_WS_KV = re.compile(
    r"(?:^|[^\w])(?:world_size|world size|World size|World Size|WORLD_SIZE)(?:\s*[=:]\s*| \.+ | (?:of )?)(?P<n>\d+)\b"
    r"|(?:^|[(\s,;])world ?[=:] ?(?P<m>\d+)\b"
)
_WS_LAUNCHER = re.compile(r"global_world_sizes=\[(?P<g>\d+)|SLURM_(?:NTASKS|NPROCS)=(?P<s>\d+)")
_PG_INIT_SIZE = re.compile(r"ProcessGroupNCCL initialization options: .*?\bsize: (?P<n>\d+)")
_DEFAULT_PG = re.compile(r"\[PG (?:ID 0 PG GUID 0\b|0 \(default_pg\) |0 )|\(default_pg\)")
MAX_CREDIBLE_WORLD = 1 << 20
"""A stated world size above this is not credible (a hostile or garbled line): it is ignored and said so."""
_CHILD_RANK = re.compile(r"\brank\s*:? ?(?P<rank>\d+) \(local_rank: \d+\)")
"""A failure table's ``rank   : 2 (local_rank: 2)`` (a paste may run it together: ``rank2 (local_rank: 2)``)."""
_NCCL_VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+[\w.+\-]*)")
_TORCH_VERSION = re.compile(r"(?:torch|Torch|PyTorch)(?: version|_version|==)[=: ]*v?(?P<v>2\.\d+(?:\.\d+)?)")

MAX_EXAMPLES = 5


@dataclass(repr=False, eq=False)
class FileFacts:
    """What the inventory learnt about one file inside the worker (picklable, small)."""

    rel: str
    markers: dict[str, int] = field(default_factory=dict)
    first_marker_line: dict[str, tuple[int, str]] = field(default_factory=dict)
    nccl_ranks: dict[int, int] = field(default_factory=dict)  # comm rank -> nranks (largest comm wins)
    ray_ranks: set[int] = field(default_factory=set)
    member_ranks: dict[int, int] = field(default_factory=dict)  # global rank -> world size (Lightning)
    world_size_lines: list[tuple[int, int, str]] = field(default_factory=list)  # (n, line, text)
    world_claims: list[tuple[int, str, int, str]] = field(default_factory=list)  # (n, kind, line, text)
    """World-size statements other than Lightning's: 'stated', 'launcher', 'slurm', 'default_pg' (bounded)."""
    nccl_split_lines: int = 0  # NCCL init lines of split (sub-)communicators
    child_failed_ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    """Hosts the file's own lines run on (NCCL init ``host:pid:tid``, torchrun's failure table ``host :``)."""
    launcher_hosts: set[str] = field(default_factory=set)
    """Hosts ``srun: error: <host>: task N`` lines name: srun prints every failed task's node into the file it
    writes, so the first node's file names the others too; these label a file only when it has no own host."""
    nccl_versions: set[str] = field(default_factory=set)
    torch_versions: set[str] = field(default_factory=set)
    best_nranks: tuple[int, int, str] | None = None  # (nranks, line, text)
    stated_ranks: set[int] = field(default_factory=set)
    """Global ranks the file's lines state of their writer (a trainer's ``"rank": N``, ``rank R of N`` ...)."""
    local_map: dict[int, int] = field(default_factory=dict)
    """torchrun --tee local rank -> global rank, from lines that carry both (``[default1]:[rank4]:``, ``[default1]:
    ... rank 4 of 6``); a local rank seen with two global ranks is dropped (-1)."""


_STATED = re.compile(
    r"\[rank(?P<p>\d+)\]:|\"rank\": ?(?P<j>\d+)\b|\[rank:? (?P<b>\d+)(?:/\d+)?\]|\brank[ =:](?P<o>\d+) of (?P<n>\d+)\b"
    r"|\b(?:RANK|global_rank|global rank)[ =:]+(?P<g>\d+)\b|(?:^|[\s|\]])rank=(?P<q>\d+) \|"
    r"|\brank=(?P<k>\d+) [^\n]{0,80}\bworld_size=\d|" + tn.DEFAULT_PG_RANK.pattern
)


_LINE_OPENING_RANK = re.compile(r"^\s*rank ?(\d{1,7}) ?[|:] ")
"""A trainer's line that opens with its rank (``rank3| loss ...``, ``rank 3: ...``)."""

_RANK_OF_WORLD = re.compile(
    r"\brank[ =:]\d+ of (?P<n>\d+)\b|\[rank \d+/(?P<m>\d+)\]|\brank=\d+ [^\n]{0,80}\bworld_size=(?P<w>\d+)\b"
)
"""A rank stated with the world it belongs to (``rank 3 of 16``, ``[rank 3/16]``): the world size."""


def _rank_statement(f: FileFacts, text: str, line_no: int) -> None:
    """The writer's global rank a line states, and with torchrun's --tee prefix on the line, its local rank's map."""
    m = _STATED.search(text)
    if m is None:
        return
    g = int(next(v for v in m.group("p", "j", "b", "o", "g", "q", "k", "r") if v is not None))
    if g > MAX_CREDIBLE_WORLD:
        return
    f.stated_ranks.add(g)
    w = _RANK_OF_WORLD.search(text)
    if w is not None and len(f.world_claims) < MAX_EXAMPLES:
        f.world_claims.append((int(w.group("n") or w.group("m") or w.group("w")), "stated", line_no, text[:300]))
    lp = LOCAL_PREFIX.match(text)
    if lp is not None:
        local = int(lp.group(1))
        known = f.local_map.get(local)
        f.local_map[local] = g if known is None or known == g else -1


class InventorySink:
    """Collects :class:`FileFacts` from the inventory markers' hits in one file (``markers``: the scan's marker set,
    whose ids the hits carry)."""

    def __init__(self, lf: LogFile, markers: tuple[Marker, ...] = MARKERS) -> None:
        self.facts = FileFacts(rel=lf.rel)
        self.markers = markers

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        f = self.facts
        text = strip_ansi(line)
        for pid in pattern_ids:
            name = self.markers[pid].name
            f.markers[name] = f.markers.get(name, 0) + 1
            if name not in f.first_marker_line:
                f.first_marker_line[name] = (line_no, text[:300])
            if name == "nccl_init":
                m = NCCL_INIT_RANK.search(text)
                if "ncclCommSplit" in text or " parent 0x" in text:
                    f.nccl_split_lines += 1  # a communicator split off another: never the world
                elif m:
                    r, n = int(m.group("rank")), int(m.group("nranks"))
                    if n >= f.nccl_ranks.get(r, 0):
                        f.nccl_ranks[r] = n
                    if f.best_nranks is None or n > f.best_nranks[0]:
                        f.best_nranks = (n, line_no, text[:300])
                h = _NCCL_HOST.match(text, _prefixes_end(text))
                if h:
                    f.hosts.add(h.group("host"))
            elif name == "nccl_version":
                v = _NCCL_VERSION.search(text)
                if v:
                    f.nccl_versions.add(v.group("v"))
            elif name == "lightning_member":
                mm = _MEMBER.search(text)
                if mm:
                    f.member_ranks[int(mm.group("rank"))] = int(mm.group("n"))
                    f.world_size_lines.append((int(mm.group("n")), line_no, text[:300]))
            elif name == "world_size_kv":
                w = _WS_KV.search(text)
                if w and len(f.world_claims) < MAX_EXAMPLES:
                    f.world_claims.append((int(w.group("n") or w.group("m")), "stated", line_no, text[:300]))
            elif name == "world_size_launcher":
                wl = _WS_LAUNCHER.search(text)
                if wl and len(f.world_claims) < MAX_EXAMPLES:
                    kind = "launcher" if wl.group("g") is not None else "slurm"
                    f.world_claims.append((int(wl.group("g") or wl.group("s")), kind, line_no, text[:300]))
            elif name == "default_pg_size":
                pz = _PG_INIT_SIZE.search(text)
                if pz and _DEFAULT_PG.search(text) and len(f.world_claims) < MAX_EXAMPLES:
                    f.world_claims.append((int(pz.group("n")), "default_pg", line_no, text[:300]))
            elif name == "rank_statement":
                _rank_statement(f, text, line_no)
            elif name == "child_failed":
                c = _CHILD_RANK.search(text)
                if c:
                    f.child_failed_ranks.add(int(c.group("rank")))
            elif name == "ray":
                r2 = RAY_PREFIX.search(text)
                if r2 and r2.group("rank") is not None:
                    f.ray_ranks.add(int(r2.group("rank")))
            elif name == "torch_version":
                tv = _TORCH_VERSION.search(text)
                if tv:
                    f.torch_versions.add(tv.group("v"))
        if "host" in text:  # a literal every _CHILD_HOST match holds
            h2 = _CHILD_HOST.search(text)
            if h2:
                f.hosts.add(h2.group("host"))
        if "srun: error: " in text:
            h3 = _SRUN_HOST.search(text)
            if h3:
                f.launcher_hosts.add(h3.group("host"))

    def finish(self) -> FileFacts:
        return self.facts


_LEAD_PREFIXES = re.compile(r"(?:\s*\d+: )?(?:\([^)]*pid=\d+[^)]*\)\s*)?(?:\[rank\d+\]:)?")
"""An srun label, then a Ray prefix, then ``[rankN]:``, each optional (matched at the line's start: what removing each
in turn leaves, in one match)."""


def _prefixes_end(text: str) -> int:
    """Where the line's leading srun label/Ray prefix/``[rankN]:`` end (0 without them)."""
    m = _LEAD_PREFIXES.match(text)
    return m.end() if m is not None else 0


def _after_prefixes(text: str) -> str:
    """The line with a leading ``[rankN]:``/srun label/Ray prefix removed (for anchored host patterns)."""
    return text[_prefixes_end(text) :]


_MAX_ROUTES = 4096
"""Distinct pattern-id sets a composite sink remembers how to split (a file has a few dozen; this bounds memory)."""

_Route = tuple[tuple[int, list[int]], ...]
"""How a composite sink splits one id set: (sink index, its ids) per sink that gets the hit, in call order (the
inventory's first, its index one past the consumers' parts)."""


def _no_bulk(line_nos: list[int], lines: list[str]) -> None:
    raise RuntimeError("a run of bulk lines for a composite sink that named no bulk pattern")


_LAST_ROUTES: tuple[tuple[Any, ...], int, dict[tuple[int, ...], _Route]] | None = None
"""(parts, first marker id, routes) of the latest composite sink: the next file of the same scan (the same ``parts``
object) splits its id sets the same way, so it takes the routes worked out so far (~40 per file, ~3 us each)."""


class _CompositeSink:
    """Routes one file's hits: each consumer's pattern ids (shifted back to its own 0..k-1) to its sink, the
    inventory markers' to an :class:`InventorySink` (one scan, every consumer)."""

    def __init__(
        self,
        lf: LogFile,
        parts: tuple[tuple[SinkFactory | None, int, int], ...],
        markers_at: int,
        markers: tuple[Marker, ...] = MARKERS,
    ) -> None:
        self.parts = [(f(lf) if f is not None else None, off, k) for f, off, k in parts]
        self.markers_at = markers_at
        self.inventory = InventorySink(lf, markers)
        self._hits = [*(s.on_hit if s is not None else None for s, _o, _k in self.parts), self.inventory.on_hit]
        """Each part's sink's ``on_hit`` (None: no sink), then the inventory's (what a route's indexes name)."""
        global _LAST_ROUTES
        last = _LAST_ROUTES  # read once: another thread may replace it
        if last is not None and last[0] is parts and last[1] == markers_at:
            self._routes = last[2]
        else:
            self._routes = {}
            _LAST_ROUTES = (parts, markers_at, self._routes)
        self._bulk: Callable[[list[int], list[str]], None] = _no_bulk
        """The ``on_bulk`` of the consumer's sink :meth:`bulk_id` names."""

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        route = self._routes.get(tuple(pattern_ids))
        if route is None:
            route = self._route(pattern_ids)
            if len(self._routes) < _MAX_ROUTES:
                self._routes[tuple(pattern_ids)] = route
        hits = self._hits
        for k, mine in route:
            hits[k](mine, line_no, line)  # type: ignore[misc]  # (a route names a sink that is there)

    def bulk_id(self) -> int | None:
        """The pattern (of the scan's) whose lines a consumer's sink takes in bulk (:class:`~debug_training_logs.logs.
        scan.Sink`), the first such consumer's; None when no consumer's sink does."""
        for sink, off, k in self.parts:
            ask = getattr(sink, "bulk_id", None)
            local: int | None = ask() if ask is not None else None
            if local is not None and 0 <= local < k:
                self._bulk = sink.on_bulk  # type: ignore[union-attr]  # (a sink naming a bulk pattern takes its lines)
                return off + local
        return None

    def on_bulk(self, line_nos: list[int], lines: list[str]) -> None:
        """A run of lines of :meth:`bulk_id` alone: to its consumer's sink (no other sink has that pattern)."""
        self._bulk(line_nos, lines)

    def _route(self, pattern_ids: list[int]) -> _Route:
        """The route of a hit with these ids (worked out once per id set and scan: the routes are shared)."""
        route: list[tuple[int, list[int]]] = []
        if pattern_ids[-1] >= self.markers_at:
            route.append((len(self.parts), [i - self.markers_at for i in pattern_ids if i >= self.markers_at]))
            if pattern_ids[0] >= self.markers_at:
                return tuple(route)
        for j, (sink, off, k) in enumerate(self.parts):
            if sink is not None:
                mine = [i - off for i in pattern_ids if off <= i < off + k]
                if mine:
                    route.append((j, mine))
        return tuple(route)

    def finish(self) -> tuple[list[Any], FileFacts]:
        return [s.finish() if s is not None else None for s, _o, _k in self.parts], self.inventory.finish()


def _composite_sink(
    parts: tuple[tuple[SinkFactory | None, int, int], ...], markers_at: int, markers: tuple[Marker, ...], lf: LogFile
) -> _CompositeSink:
    return _CompositeSink(lf, parts, markers_at, markers)


LineKeep = Callable[[str, int, str], bool]
"""Keeps a hit line (file, line number, text) or drops it (another attempt's line); must be picklable, and its repr
must say what it keeps (it is part of the consumer's cache key)."""


class _KeptSink:
    """A consumer's sink that sees only the lines ``keep`` admits (one attempt's lines)."""

    def __init__(self, inner: Sink, keep: LineKeep, rel: str) -> None:
        self.inner, self.keep, self.rel = inner, keep, rel

    def on_hit(self, pattern_ids: list[int], line_no: int, line: str) -> None:
        if self.keep(self.rel, line_no, line):
            self.inner.on_hit(pattern_ids, line_no, line)

    def finish(self) -> Any:
        return self.inner.finish()


def kept_sink(keep: LineKeep, inner: SinkFactory, lf: LogFile) -> _KeptSink:
    return _KeptSink(inner(lf), keep, lf.rel)


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


def scan_job(
    logs_dir: str | Path,
    patterns: Sequence[str] = (),
    sink_factory: SinkFactory | None = None,
    *,
    ignore_case: bool = False,
    files: Sequence[LogFile] | None = None,
    dense: Sequence[int] = (),
    keep: LineKeep | None = None,
) -> JobScan:
    """Scan every log file under ``logs_dir`` once for ``patterns`` (ids 0..k-1 for ``sink_factory``) and the
    inventory markers; return per-file results, the caller's sink results (in file order) and the inventory.

    ``dense``: ids of the caller's patterns whose lines occur once per step per rank; the sink receives a bounded
    sample of them (each file's first hits, one per stride, each rank's last ones), see ``PatternSpec.dense``.
    Results are shared through :mod:`~debug_training_logs.analysis.scan_cache` (see :func:`scan_consumers`).
    ``keep``: the sink sees only the lines it admits (one attempt's); counts and the inventory stay the whole job's.
    """
    if keep is not None and sink_factory is not None:
        sink_factory = functools.partial(kept_sink, keep, sink_factory)
    me = consumer_for(patterns, sink_factory, dense=dense, ignore_case=ignore_case)
    return scan_consumers(logs_dir, [me], files=files)[me.key]


def consumer_for(
    patterns: Sequence[str],
    sink_factory: SinkFactory | None,
    *,
    dense: Sequence[int] = (),
    ignore_case: bool = False,
    refine: Callable[[Any, FileScan], Any] | None = None,
) -> Consumer:
    """The :class:`Consumer` that :func:`scan_job` makes of these arguments (for declaring companions); ``refine``:
    see :attr:`Consumer.refine`."""
    return Consumer(_factory_name(sink_factory), tuple(patterns), sink_factory, frozenset(dense), ignore_case, refine)


def _factory_name(f: SinkFactory | None) -> str:
    if f is None:
        return "none"
    if isinstance(f, functools.partial):
        return f"{_factory_name(f.func)}{f.args!r}{sorted(f.keywords.items())!r}"
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"


_BASE = "inventory"
"""Cache key of a file's own facts (lines, ranks, head, tail, problem, inventory markers)."""

COVERAGE_MARKERS: frozenset[str] = frozenset(
    {
        "nccl_init",
        "lightning_member",
        "world_size_kv",
        "world_size_launcher",
        "default_pg_size",
        "child_failed",
        "ray",
        "rank_statement",
    }
)
"""The markers a job's coverage comes from: each file's global ranks (Ray ``[rank=N]`` prefixes, Lightning
``GLOBAL_RANK``, the world communicator's NCCL init lines, the torchrun failure table, the ranks a trainer or the
default PG's prefix states) and the world size with its
evidence. An inventory scanned with only these has the same files, ranks, world size and evidence, missing ranks,
line counts, year hint and start/end as the full one (the rest comes from the scan engine: ``[rankN]:`` prefixes,
each file's head and tail); its ``markers``, ``marker_examples``, ``nodes`` (and each file's ``node``) and versions
are partial."""

_lean: ContextVar[frozenset[str] | None] = ContextVar("lean_inventory", default=None)


@contextmanager
def lean_inventory(markers: frozenset[str] = COVERAGE_MARKERS) -> Iterator[None]:
    """Within the block, a job scan that reads files searches only the inventory ``markers`` (for a tool that reads
    nothing of the inventory but what they give, e.g. the NCCL table reads coverage, line counts and the year): fewer
    literals, fewer candidate lines, fewer hits through Python. A file's full inventory in the scan cache still
    serves; a lean one is cached under its own key, so it never answers a tool that needs the full inventory.

    Not applied while companions are in force (:func:`~debug_training_logs.analysis.scan_cache.companions`: a
    server scans every tool's consumers in its first scan, and the tools after it need the full inventory)."""
    token = _lean.set(markers if not companions() else None)
    try:
        yield
    finally:
        _lean.reset(token)


def _markers_in_force() -> tuple[tuple[Marker, ...], str]:
    """The inventory markers a scan searches now and the cache key of the file facts they give."""
    lean = _lean.get()
    if lean is None:
        return MARKERS, _BASE
    chosen = tuple(m for m in MARKERS if m.name in lean)
    if len(chosen) == len(MARKERS):
        return MARKERS, _BASE
    return chosen, f"{_BASE}[{','.join(m.name for m in chosen)}]"


def scan_consumers(
    logs_dir: str | Path,
    consumers: Sequence[Consumer],
    *,
    files: Sequence[LogFile] | None = None,
    on_file: Callable[[int, dict[str, FileResult]], None] | None = None,
) -> dict[str, JobScan]:
    """One scan of every file under ``logs_dir`` for all ``consumers`` (and the companions in force, see
    :mod:`~debug_training_logs.analysis.scan_cache`), skipping files whose results are all cached; one
    :class:`JobScan` per consumer key, sharing the inventory. ``on_file(j, results)`` is called as each scanned file's
    results arrive (file ``j`` of the scan's files, consumer key -> result), while the other files are still being
    scanned: work on one file's result can start there (files found in the cache are not announced).

    The scan :func:`start_scan` started for the same directory, consumers, companions and inventory markers is the one
    read here (``files`` None); a started one that does not match is given up (its workers killed) first."""
    global _STARTED
    started, _STARTED = _STARTED, None
    if started is not None and (files is not None or started.key != _Scan.key_of(logs_dir, consumers)):
        started.close()
        started = None
    run = started or _Scan(logs_dir, consumers, files)
    try:
        return run.finish(consumers, on_file)
    finally:
        run.close()


def start_scan(logs_dir: str | Path, consumers: Sequence[Consumer]) -> None:
    """Start :func:`scan_consumers`' scan of ``logs_dir`` for ``consumers`` now, its worker processes reading while
    this process does other work first (the CLI: it starts its command's scan before it imports pydantic and builds its
    arguments, :mod:`~debug_training_logs.early_scan`); the command's own :func:`scan_consumers` call then reads it. The
    workers are handed files ahead (:data:`START_AHEAD_BYTES`). Nothing starts where one process would read the files
    (one file, a small job): the call then scans as it always does."""
    global _STARTED
    if _STARTED is not None:
        _STARTED.close()
        _STARTED = None
    run = _Scan(logs_dir, consumers, None, START_AHEAD_BYTES)
    if run.forked:
        _STARTED = run
    else:
        run.close()


def drop_started_scan() -> None:
    """Give up the scan :func:`start_scan` started, if no :func:`scan_consumers` call read it (its workers killed)."""
    global _STARTED
    started, _STARTED = _STARTED, None
    if started is not None:
        started.close()


START_AHEAD_BYTES = 128 << 20
"""Bytes of files each worker of a :func:`start_scan` scan is handed at once: ~0.2 s of reading on one core, about what
the CLI spends on its imports and arguments before its command reads the scan's results and hands out more."""

_STARTED: _Scan | None = None
"""The scan :func:`start_scan` started that no :func:`scan_consumers` call has read yet."""


class _Scan:
    """One job scan of :func:`scan_consumers`: the files, the cache entries it found, and, when some file needs reading,
    its worker processes (forked when it is made: with ``ahead_bytes``, handed that much ahead; see
    :func:`~debug_training_logs.logs.scan.start_each`)."""

    def __init__(
        self, logs_dir: str | Path, consumers: Sequence[Consumer], files: Sequence[LogFile] | None, ahead_bytes: int = 0
    ) -> None:
        if files is None:
            found, skipped = discover(logs_dir)
        else:
            found, skipped = list(files), []
        self.key = _Scan.key_of(logs_dir, consumers)
        self.root: Path = self.key[0]
        self.found, self.skipped = found, skipped
        ignore_case = consumers[0].ignore_case if consumers else False
        wanted: dict[str, Consumer] = {}
        for c in [*consumers, *(c for c in companions() if c.ignore_case == ignore_case)]:
            if c.ignore_case != ignore_case:
                raise ValueError("consumers of one scan share one case mode")
            wanted.setdefault(c.key, c)
        self.fkeys = [file_key(lf) for lf in found]
        markers, self.base_key = _markers_in_force()
        # a file's full facts serve a lean scan too (a superset: the same lines give the same coverage facts)
        self.base_keys = (_BASE,) if self.base_key == _BASE else (_BASE, self.base_key)
        # Every entry this scan reads, held from the moment it is found: the cache is bounded, so this scan's own puts
        # may push out an entry that was there when the files to read were chosen (or one of this scan's own).
        self.held: dict[tuple[int, str], Any] = {}
        self.need = [
            j for j in range(len(found)) if self._missing(j, None) or any(self._missing(j, c) for c in consumers)
        ]
        self.run: list[Consumer] = []
        self.started: StartedScan[tuple[Packed, list[FileResult]]] | None = None
        if not self.need:
            return
        self.run = run = [c for c in wanted.values() if any(self._missing(j, c) for j in self.need)]
        offsets: list[int] = []
        pats: list[str] = []
        dense_flags: list[bool] = []
        for c in run:
            offsets.append(len(pats))
            dense_flags += [i in c.dense for i in range(len(c.patterns))]
            pats += c.patterns
        k = len(pats)
        caps = (None,) * k + tuple(m.cap for m in markers)
        dense_flags += [m.dense for m in markers]
        spec = PatternSpec(
            tuple(pats) + tuple(m.regex for m in markers),
            ignore_case,
            max_hits=caps,
            dense=tuple(dense_flags) if any(dense_flags) else None,
        )
        parts = tuple((c.sink, off, len(c.patterns)) for c, off in zip(run, offsets, strict=True))
        factory = functools.partial(_composite_sink, parts, k, markers)
        layout = tuple((off, len(c.patterns)) for c, off in zip(run, offsets, strict=True))
        packer = functools.partial(_pack_scan, layout, tuple(c.refine for c in run))
        self.started = start_each(
            [found[j] for j in self.need],
            spec,
            factory,
            packer,
            head_lines=HEAD_LINES,
            tail_lines=TAIL_LINES,
            ahead_bytes=ahead_bytes,
        )

    @staticmethod
    def key_of(logs_dir: str | Path, consumers: Sequence[Consumer]) -> tuple[Any, ...]:
        """What a scan of ``logs_dir`` for ``consumers`` reads, as a started one must match: the directory, the
        consumers and the companions in force (by key, in order), and the inventory markers in force."""
        return (
            Path(logs_dir).resolve(),
            tuple(c.key for c in consumers),
            tuple(c.key for c in companions()),
            _markers_in_force()[1],
        )

    @property
    def forked(self) -> bool:
        return self.started is not None and self.started.forked

    def _missing(self, j: int, c: Consumer | None) -> bool:
        key = (j, c.key if c is not None else _BASE)
        if key in self.held:
            return False
        for base in self.base_keys if c is None else (self.base_key,):
            got = CACHE.get(self.fkeys[j], self._ckey(c, self.found[j], base))
            if got is not None:
                self.held[key] = got
                return False
        return True

    def _ckey(self, c: Consumer | None, lf: LogFile, base: str | None = None) -> str:
        return f"{c.key if c is not None else base or self.base_key}|{lf.rel}"

    def finish(
        self, consumers: Sequence[Consumer], on_file: Callable[[int, dict[str, FileResult]], None] | None
    ) -> dict[str, JobScan]:
        """Read the scan's results (caching each) and make the :class:`JobScan` of each of ``consumers``."""
        found, held, run = self.found, self.held, self.run
        shares: dict[int, _FileShare] = {}  # the inventory's share of each file read, unpacked as it arrives
        if self.started is not None:
            for i, (base, results) in self.started.results():
                j = self.need[i]
                held[(j, _BASE)] = base
                CACHE.put(self.fkeys[j], self._ckey(None, found[j]), base, base.nbytes)
                shares[j] = unpack_item(base, 2)  # while the workers read the other files (the inventory's input)
                for c, fr in zip(run, results, strict=True):
                    held[(j, c.key)] = fr
                    CACHE.put(self.fkeys[j], self._ckey(c, found[j]), fr, fr.nbytes)
                if on_file is not None:
                    on_file(j, {c.key: fr for c, fr in zip(run, results, strict=True)})
                meanwhile.run_queued()  # the workers read the other files meanwhile

        def lookup(j: int, c: Consumer | None) -> Any:
            return held[(j, c.key if c is not None else _BASE)]

        bases: list[Packed] = [lookup(j, None) for j in range(len(found))]
        inventory = _inventory_of(found, bases, self.skipped, shares)
        view = _Bases(found, bases)
        out: dict[str, JobScan] = {}
        for c in consumers:
            per_file: list[FileResult] = [lookup(j, c) for j in range(len(found))]
            out[c.key] = JobScan(
                root=self.root, files=_Files(view, per_file), caller_results=_Results(per_file), inventory=inventory
            )
        return out

    def close(self) -> None:
        if self.started is not None:
            self.started.close()


_LAST_INVENTORY: tuple[tuple[Packed, ...], tuple[LogFile, ...], tuple[Skipped, ...], Inventory] | None = None
"""The latest inventory built and what it was built from: a tool that splits attempts first (one scan) and then
scans for its own consumers (a cache hit) asks for the same job's inventory twice in a row."""


def _inventory_of(
    found: Sequence[LogFile], bases: list[Packed], skipped: list[Skipped], early: dict[int, _FileShare] | None = None
) -> Inventory:
    """The job's inventory from each file's packed facts; built again only when the facts are not the very objects
    (``is``) the latest one was built from (cache entries are never changed in place: a changed file is a new entry).
    ``early``: file index -> its share (item 2 of its base) already unpacked."""
    global _LAST_INVENTORY
    last = _LAST_INVENTORY  # read once: another thread may replace it
    if (
        last is not None
        and len(last[0]) == len(bases)
        and all(a is b for a, b in zip(last[0], bases, strict=True))
        and last[1] == tuple(found)
        and last[2] == tuple(skipped)
    ):
        return last[3]
    shares: Sequence[_FileShare] = _Items(bases, 2)
    if early:
        shares = [early[j] if j in early else shares[j] for j in range(len(bases))]
    facts: _Items[FileFacts] = _Items(bases, 1)
    inventory = _build_inventory(found, shares, facts, skipped)
    _LAST_INVENTORY = (tuple(bases), tuple(found), tuple(skipped), inventory)
    return inventory


def _pack_scan(
    layout: tuple[tuple[int, int], ...], refiners: tuple[Callable[[Any, FileScan], Any] | None, ...], s: FileScan
) -> tuple[Packed, list[FileResult]]:
    """One file's scan as the cache keeps it (run in the worker that scanned it, so only these bytes cross back):
    the file's own facts packed once, and each consumer's share (``layout``: its first pattern id and count), its
    sink's result refined first where the consumer says so (:attr:`Consumer.refine`)."""
    global _LAST_YEAR
    results, facts = s.sink_result if s.sink_result is not None else ([None] * len(layout), None)
    try:
        results = [r if r is None or f is None else f(r, s) for r, f in zip(results, refiners, strict=True)]
        facts = facts or FileFacts(rel=s.file.rel)
        base = pack((replace(s, counts=[], sink_result=None, sampled=set()), facts, _file_share(s, facts)))
    finally:
        _LAST_YEAR = None  # (the memo holds the scan and its sink results: not past the file's pack)
    shares = [
        FileResult(
            counts=s.counts[off : off + n],
            sink_result=pack(res),
            sampled={i - off for i in s.sampled if off <= i < off + n},
        )
        for (off, n), res in zip(layout, results, strict=True)
    ]
    return base, shares


class _Bases(LazySequence[FileScan]):
    """Each file's own facts (lines, ranks, head, tail, problem), unpacked on each access: a job's files are read one
    by one and let go, never all held at once."""

    def __init__(self, found: Sequence[LogFile], bases: Sequence[Packed]) -> None:
        self.found, self.bases = found, bases

    def __len__(self) -> int:
        return len(self.bases)

    def _at(self, i: int) -> FileScan:
        b: FileScan = unpack_item(self.bases[i], 0)
        return replace(b, file=self.found[i])


R = TypeVar("R")


class _Items(LazySequence[R]):
    """Item ``k`` of each file's packed scan (1: its :class:`FileFacts`, 2: its :class:`_FileShare`), unpacked on
    access."""

    def __init__(self, bases: Sequence[Packed], k: int) -> None:
        self.bases = bases
        self.k = k

    def __len__(self) -> int:
        return len(self.bases)

    def _at(self, i: int) -> R:
        return unpack_item(self.bases[i], self.k)  # type: ignore[no-any-return]


class _Results(LazySequence[Any]):
    """One consumer's per-file sink results, unpacked on access (the latest one is kept: callers walk
    ``zip(job.files, job.caller_results)``, which asks for each file's result twice in a row)."""

    def __init__(self, per_file: Sequence[FileResult]) -> None:
        self.per_file = per_file
        self._last: tuple[int, Any] = (-1, None)

    def __len__(self) -> int:
        return len(self.per_file)

    def _at(self, i: int) -> Any:
        last = self._last  # read once: another thread may walk the same scan
        if last[0] != i:
            last = self._last = (i, unpack(self.per_file[i].sink_result))
        return last[1]

    def item(self, i: int, k: int) -> Any:
        """Item ``k`` of file ``i``'s (tuple) result, without unpacking the rest of it; None for no result."""
        if i < 0:
            i += len(self)
        last = self._last
        if last[0] == i:
            return None if last[1] is None else last[1][k]
        return file_result_item(self.per_file[i], k)


class _Files(LazySequence[FileScan]):
    """One consumer's view of the job's files: each file's facts with its counts (its sink result is not unpacked
    here: read ``JobScan.caller_results``, or :func:`result_item` for one item of it)."""

    def __init__(self, bases: _Bases, per_file: Sequence[FileResult]) -> None:
        self.bases, self.per_file = bases, per_file

    def __len__(self) -> int:
        return len(self.per_file)

    def _at(self, i: int) -> FileScan:
        r = self.per_file[i]
        b = self.bases[i]
        b.counts, b.sampled = list(r.counts), set(r.sampled)
        return b


class PerFile(LazySequence[R]):
    """Each file's sink result of a scan (or item ``k`` of it, a tuple), unpacked one file at a time on access,
    ``kind(rel)`` where a file's result is not a ``kind`` (its sink returned nothing): a fold walks a job's files
    without holding every file's objects at once."""

    def __init__(self, job: JobScan, kind: Callable[[str], R], k: int | None = None) -> None:
        self.job, self.kind, self.k = job, kind, k

    def __len__(self) -> int:
        return len(self.job.caller_results)

    def _at(self, i: int) -> R:
        got = self.job.caller_results[i] if self.k is None else result_item(self.job, i, self.k)
        return got if isinstance(got, self.kind) else self.kind(self.job.inventory.files[i].rel)  # type: ignore[arg-type]


def file_result_item(fr: FileResult, k: int) -> Any:
    """Item ``k`` of one file's (tuple) sink result as the cache keeps it, unpacking only that item; None for no
    result."""
    p = fr.sink_result
    if p.items:
        return unpack_item(p, k)
    got = unpack(p)
    return None if got is None else got[k]


def result_size(job: JobScan, i: int) -> int:
    """How many items file ``i``'s (tuple) sink result has (0 for no result), without unpacking it."""
    res = job.caller_results
    if isinstance(res, _Results):
        p = res.per_file[i].sink_result
        if p.items:
            return len(p.blobs)
    r = res[i]
    return 0 if r is None else len(r)


def result_item(job: JobScan, i: int, k: int) -> Any:
    """Item ``k`` of file ``i``'s sink result (a tuple), unpacking only that item when the scan's results are packed."""
    res = job.caller_results
    if isinstance(res, _Results):
        return res.item(i, k)
    r = res[i]
    return None if r is None else r[k]


class _RankSources(NamedTuple):
    """What :func:`_ranks_of` reads of one file, taken from its scan and facts once (the inventory asks twice: before
    and after the world size is known)."""

    rel: str
    prefixes: set[int]
    ray: set[int]
    lightning: set[int]
    stated: set[int]
    nccl_ranks: dict[int, int]
    srun: set[int]
    """``srun --label`` task ids of the head and tail, kept when they are the ranks (no Ray or Lightning ranks, and
    every rank a ``[rankN]:`` prefix or the trainer states is among them: one task per rank)."""
    artifact: str | None = None
    """What the file is when it is no log but something collected during a hang (a ``py-spy`` dump, a kernel log):
    it holds no rank's log, whatever its name or its lines say."""

    @staticmethod
    def of(scan: FileScan, facts: FileFacts) -> _RankSources:
        artifact = hang_files.kind_of("\n".join(scan.head))
        if artifact is not None:
            return _RankSources(scan.file.rel, set(), set(), set(), set(), {}, set(), artifact)
        prefixes, ray, lightning = set(scan.ranks), set(facts.ray_ranks), set(facts.member_ranks)
        # a trainer's line-opening ``rank3| ...`` / ``rank 3: ...``: read from the head and tail (as a marker its
        # literal, "rank", is on every line of a torch log, and the scan would search every byte for it)
        opening = {int(m.group(1)) for ln in scan.head + scan.tail if (m := _LINE_OPENING_RANK.match(ln))}
        stated = (set(facts.stated_ranks) | {r for r in opening if r <= MAX_CREDIBLE_WORLD}) - prefixes
        srun = set() if ray or lightning else _srun_labels(scan.head + scan.tail)
        if not (prefixes | stated) <= srun:
            srun = set()  # the labels are not the ranks the lines state (one task per node: node ids)
        return _RankSources(scan.file.rel, prefixes, ray, lightning, stated, facts.nccl_ranks, srun)


def _ranks_of(src: _RankSources, world_size: int | None) -> tuple[set[int], str]:
    if src.artifact is not None:
        return set(), f"none: {src.artifact} output, not a log"
    found: dict[str, set[int]] = {
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
        found["srun --label task ids"] = src.srun
    ranks = set().union(*found.values())
    if ranks:
        return ranks, ", ".join(name for name, rs in found.items() if rs)
    name_rank = file_name_rank(src.rel)
    if name_rank is not None:
        return {name_rank}, "file name"
    return set(), "none"


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


def _srun_labels(lines: list[str]) -> set[int]:
    tasks: set[int] = set()
    labelled = 0
    for ln in lines:
        m = SRUN_LABEL.match(strip_ansi(ln))  # (the label, whatever prefix follows it: '5: [rank5]: ...')
        if m is not None:
            tasks.add(int(m.group("task")))
            labelled += 1
    return tasks if lines and labelled >= max(3, len(lines) // 2) else set()


_CLAIM_NAMES = {
    "stated": "states world size {n}",
    "launcher": "torchrun global_world_sizes [{n}, ...]",
    "default_pg": "default PG (PG 0) size {n}",
    "slurm": "SLURM task count {n} (the world size only with one task per GPU)",
}


def _world_size(facts: Sequence[_WorldFacts], known: dict[str, set[int]]) -> tuple[int | None, str]:
    """The world size from evidence about the world only, and which line says so; conflicting evidence is named.

    Sources, most trusted first: Lightning ``MEMBER: m/N``; a line stating ``world_size``/``WORLD_SIZE``, torchrun's
    ``global_world_sizes``, the default PG's ``ProcessGroupNCCL initialization options ... size: N``; SLURM's task
    count; the NCCL communicator whose ``nranks`` is the world's (see :func:`_world_comm`). An NCCL ``nranks`` of any
    other communicator (a 2-rank pipeline pair) says nothing about the world. ``known``: file -> global ranks named
    by non-NCCL sources; a claim at or below a known rank is contradicted and dropped."""
    top = max((r for rs in known.values() for r in rs), default=-1)
    claims: list[tuple[int, int, str]] = []  # (priority, n, description)
    for f in facts:
        for n, ln, t in f.world_size_lines:
            if "MEMBER" in t:
                claims.append((0, n, f"{f.rel}:{ln} Lightning 'MEMBER: m/{n}'"))
        for n, kind, ln, _t in f.world_claims:
            claims.append((2 if kind == "slurm" else 1, n, f"{f.rel}:{ln} {_CLAIM_NAMES[kind].format(n=n)}"))
    comm = _world_comm(facts, known)
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


def _world_comm(facts: Sequence[_WorldFacts], known: dict[str, set[int]]) -> tuple[int, str] | None:
    """(N, evidence) when the largest NCCL communicator is the world's. Every process joins the world communicator
    with comm rank = global rank, so in each file whose global ranks other sources name, its comm ranks must be
    exactly those ranks (a sub-communicator's restart at 0 and cover only some processes), and at least two ranks
    must witness it so, unless every comm rank 0..N-1 is logged. Otherwise None: a sub-communicator never sets the
    world size."""
    best: tuple[int, str, int, str] | None = None
    for f in facts:
        if f.best_nranks is not None and (best is None or f.best_nranks[0] > best[0]):
            best = (f.best_nranks[0], f.rel, f.best_nranks[1], f.best_nranks[2])
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


def _key(t: WallTime, year_hint: int | None) -> tuple[int, int, int, int, int, int, int]:
    return (t.year or year_hint or 0, t.month, t.day, t.hour, t.minute, t.second, t.microsecond)


def file_year(scan: FileScan) -> int | None:
    """The year the first dated line of the file's head or tail states (None when none states one); the job's year
    is the first file's that has one."""
    global _LAST_YEAR
    last = _LAST_YEAR  # read once: another thread may replace it
    if last is not None and last[0] is scan and last[1] == (len(scan.head), len(scan.tail)):
        return last[2]
    year = None
    for ln in scan.head + scan.tail:
        t = parse_wall_time(ln)
        if t is not None and t.year is not None:
            year = t.year
            break
    _LAST_YEAR = (scan, (len(scan.head), len(scan.tail)), year)
    return year


_LAST_YEAR: tuple[FileScan, tuple[int, int], int | None] | None = None
"""The last scan :func:`file_year` read and its answer: the worker's pack asks twice per file (the evidence digest
and the file's inventory share), and a head of undated launcher lines costs ~0.1 ms to read (:func:`_pack_scan`
forgets it once the file is packed)."""


class _WorldFacts(NamedTuple):
    """What :func:`_world_size` reads of a file's facts."""

    rel: str
    nccl_ranks: dict[int, int]
    world_size_lines: list[tuple[int, int, str]]
    world_claims: list[tuple[int, str, int, str]]
    best_nranks: tuple[int, int, str] | None


class _Hosts(NamedTuple):
    """A file's hosts and the ranks of its failure tables."""

    child_failed_ranks: set[int]
    hosts: set[str]
    launcher_hosts: set[str]


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
        world=_WorldFacts(f.rel, f.nccl_ranks, f.world_size_lines, f.world_claims, f.best_nranks),
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


def _build_inventory(
    found: Sequence[LogFile], shares: Sequence[_FileShare], facts: Sequence[FileFacts], skipped: list[Skipped]
) -> Inventory:
    """The job's inventory from each file's share (:class:`_FileShare`, unpacked once per file; ``facts`` are only
    kept, lazily, on the inventory)."""
    sources: list[_RankSources] = []
    world_facts: list[_WorldFacts] = []
    per_file: list[tuple[LogFile, int, str | None, _Hosts]] = []  # (file, lines, problem, hosts and failures)
    ends: list[tuple[TimePoint | None, TimePoint | None]] = []
    lasts: list[tuple[int, str, WallTime] | None] = []
    markers: dict[str, int] = {}
    examples: dict[str, tuple[str, int, str]] = {}
    nccl_versions: set[str] = set()
    torch_versions: set[str] = set()
    year: int | None = None
    for lf, d in zip(found, shares, strict=True):
        sources.append(d.sources)
        world_facts.append(d.world)
        if year is None:
            year = d.year
        ends.append((d.first, d.last))
        lasts.append(d.last_timed)
        for name, n in d.markers.items():
            markers[name] = markers.get(name, 0) + n
            if name not in examples:
                ln, text = d.first_marker_line[name]
                examples[name] = (d.world.rel, ln, text)
        nccl_versions |= d.nccl_versions
        torch_versions |= d.torch_versions
        per_file.append((lf, d.lines, d.problem, d.light))
    local_maps = [{k: g for k, g in d.local_map.items() if g >= 0} for d in shares]
    known = {src.rel: _ranks_of(src, None)[0] for src in sources}
    world_size, ws_evidence = _world_size(world_facts, known)
    files: list[FileInventory] = []
    all_ranks: set[int] = set()
    hosts: set[str] = set()
    launchers = [bool(d.markers.get("launcher_line")) for d in shares]
    by_dir = _log_dir_ranks([src.rel for src in sources], {s.rel: _ranks_of(s, world_size)[0] for s in sources})
    for (lf, n_lines, problem, f), src, last_timed, local, launcher in zip(
        per_file, sources, lasts, local_maps, launchers, strict=True
    ):
        ranks, source = _ranks_of(src, world_size)
        in_tree = log_dir_local_rank(lf.rel) if not ranks else None
        if in_tree is not None and (g := by_dir(*in_tree, world_size)) is not None:
            ranks, source = {g}, "torchrun --log-dir tree"
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
                n_lines,
                problem,
                last_timed,
                src.prefixes,
                local,
                launcher,
                src.artifact,
            )
        )
        hosts |= f.hosts | f.launcher_hosts
    start, end = _earliest_latest(ends, year)
    return Inventory(
        files=files,
        skipped=skipped,
        ranks=all_ranks,
        world_size=world_size,
        world_size_evidence=ws_evidence,
        nodes=sorted(hosts) if hosts else sorted({f.node for f in files if f.node}),
        markers=markers,
        marker_examples=examples,
        nccl_versions=sorted(nccl_versions),
        torch_versions=sorted(torch_versions),
        start=start,
        end=end,
        year_hint=year,
        facts=facts,
    )


def time_text(tp: TimePoint | None, year_hint: int | None) -> str | None:
    """ISO text of a time point (year inferred from ``year_hint`` when the line had none), or None."""
    return iso(tp.time, year_hint) if tp is not None else None
