"""The inventory's worker side: the :class:`InventorySink` that collects one file's :class:`FileFacts` (ranks, world
size claims, hosts, versions) from the inventory markers' hits, with the patterns it reads them with."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from debug_training_logs.analysis.inventory_markers import MARKERS, Marker
from debug_training_logs.formats import nccl
from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats.prefixes import LEAD_PREFIXES, strip_ansi
from debug_training_logs.logs.attribution import NCCL_INIT_RANK, RAY_PREFIX, tee_slot
from debug_training_logs.logs.discovery import LogFile

_NCCL_HOST = re.compile("(?P<host>" + nccl.HOST + ")" + nccl.PROCESS + " NCCL ")
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
    local = tee_slot(text)
    if local is not None:
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


def _prefixes_end(text: str) -> int:
    """Where the line's leading task label/Ray prefix/``[rankN]:`` end (0 without them)."""
    m = LEAD_PREFIXES.match(text)
    return m.end() if m is not None else 0
