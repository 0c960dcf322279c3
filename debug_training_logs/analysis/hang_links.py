"""What ties a process or a GPU to a global rank, from the logs' own lines: one pass over the logs (only when hang
artifacts were given) for the lines that name a pid the artifacts know, or a GPU bus id.

- a pid: the trainer's ``rank 3 of 8 started, pid 1234``, a ``[rank3]:`` line naming ``pid=1234``, torchrun's
  failure table (``exitcode: -9 (pid: 1234)`` under ``rank: 3 (local_rank: 3)``), NCCL's ``host:1234:1250 [3] NCCL
  INFO ... rank 3 nranks 8`` init lines;
- a GPU: NCCL's init line ``... rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 3b000 ...`` (``Bus ID``/``busId`` in a
  trainer's own line too), on the host its ``host:pid:tid`` prefix or file says.

Pure apart from reading the given files; bounded by :data:`MAX_LOG_BYTES_SEARCHED`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from debug_training_logs.formats.nccl import PREFIX
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.logs.reader import ReadProblems, iter_chunks

MAX_PIDS_SEARCHED: Final = 4096
"""At most this many pids are looked up in the logs (one pattern)."""
MAX_LOG_BYTES_SEARCHED: Final = 2 << 30
"""The logs read for pid and GPU lines stop after this many bytes (what was found until then stands; a note says so)."""

_PID_LABEL: Final = r"(?:[Pp][Ii][Dd]\)?[ =:#]*|\(pid: |\b[Pp]rocess[ =:]+|:)"
_LINE_RANK: Final = re.compile(
    r"(?:\bglobal[_ ]rank|\brank)\s*[=:]?\s*\[?(?P<rank>\d{1,6})\b|\[rank(?P<prefix>\d{1,6})\]"
    r"|(?:^|[|\[])\s*r(?P<short>\d{1,6})\s*[|\]]",
    re.I,
)
"""``rank 3``, ``global_rank=3``, ``[rank3]``, and a trainer's rank column ``| r3 |`` / ``[r3]``."""
_TABLE_RANK: Final = re.compile(r"^\s*rank\s*:\s*(?P<rank>\d{1,6})\b")
_BUS_ID: Final = re.compile(
    r"\b(?:busId|Bus ?ID|bus_id|busid)\s*[=:]?\s*(?P<bus>[0-9A-Fa-f]{1,8}(?::[0-9A-Fa-f]{2}){0,2}(?:\.[0-7])?)\b"
)
_GPU_NEEDLE: Final = rb"busId|Bus ID|BusID|bus_id|busid"


@dataclass(repr=False)
class Links:
    """pid -> (global rank, the ``file:line`` that ties them); (host, bus id) -> (global rank, ``file:line``)."""

    pids: dict[int, tuple[int, str]] = field(default_factory=dict)
    gpus: dict[tuple[str | None, str], tuple[int, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def gpu_rank(self, host: str | None, pci: str | None) -> tuple[int, str] | None:
        """The rank on GPU ``pci`` of ``host`` (any host when the logs name one GPU of that bus id only)."""
        if pci is None:
            return None
        if (host, pci) in self.gpus:
            return self.gpus[(host, pci)]
        same = [v for (h, p), v in self.gpus.items() if p == pci and (host is None or h is None)]
        return same[0] if len(same) == 1 else None


def nccl_bus_id(value: str) -> str | None:
    """NCCL's ``busId 3b000`` (the bus id's hex digits run together: domain, bus, device, function) or a written
    ``0000:3b:00.0`` as ``0000:3b:00.0``."""
    if ":" in value:
        from debug_training_logs.formats.node_telemetry import normalize_pci

        return normalize_pci(value)
    v = value.lower()
    if len(v) < 4:
        return None
    fn, dev, bus, dom = v[-1], v[-3:-1], v[-5:-3], v[:-5] or "0"
    if int(fn, 16) > 7:
        return None
    return f"{int(dom, 16):04x}:{bus.rjust(2, '0')}:{dev}.{fn}"


def find_links(
    log_files: Sequence[LogFile],
    file_ranks: dict[str, set[int]],
    file_nodes: dict[str, str | None],
    pids: Iterable[int],
    gpus: bool,
) -> Links:
    """Search the logs once for lines naming one of ``pids`` (and, with ``gpus``, a GPU bus id)."""
    out = Links()
    wanted = sorted(set(pids))[:MAX_PIDS_SEARCHED]
    alternatives: list[bytes] = []
    if wanted:
        alternation = "|".join(str(p) for p in wanted)
        alternatives.append(rf"(?:{_PID_LABEL})(?P<pid>{alternation})\b".encode())
    if gpus:
        alternatives.append(_GPU_NEEDLE)
    if not alternatives or not log_files:
        return out
    rx = re.compile(rb"^[^\n]*?(?:" + b"|".join(alternatives) + rb")[^\n]*$", re.M)
    problems = ReadProblems()
    budget = MAX_LOG_BYTES_SEARCHED
    for lf in log_files:
        if budget <= 0:
            out.notes.append(f"pid and GPU lines were looked for in the first {MAX_LOG_BYTES_SEARCHED >> 20} MB only")
            break
        own = file_ranks.get(lf.rel, set())
        line_no, last = 1, 0
        for chunk in iter_chunks(lf, problems):
            budget -= len(chunk)
            last = 0
            for m in rx.finditer(chunk):
                line_no += chunk.count(b"\n", last, m.start())
                last = m.start()
                text = m.group(0).decode("utf-8", "replace")[:2000]
                where = f"{lf.rel}:{line_no}"
                nccl = PREFIX.search(text)
                rank = _rank_in(text, chunk, m.start(), own, nccl)
                if rank is None:
                    continue
                pid = m.groupdict().get("pid")
                if pid is not None:
                    out.pids.setdefault(int(pid), (rank, where))
                elif nccl is not None and int(nccl.group("pid")) in wanted:
                    out.pids.setdefault(int(nccl.group("pid")), (rank, where))
                if gpus and (b := _BUS_ID.search(text)) is not None and (pci := nccl_bus_id(b.group("bus"))):
                    host = nccl.group("host") if nccl is not None else file_nodes.get(lf.rel)
                    out.gpus.setdefault((host, pci), (rank, where))
            line_no += chunk.count(b"\n", last)
    return out


def _rank_in(text: str, chunk: bytes, at: int, own: set[int], nccl: re.Match[str] | None) -> int | None:
    """The global rank a line names: on the line itself (``rank 3 pid 1234``, ``[rank3]:``, NCCL's init line), in
    the torchrun failure table's entry just above it, else the line's file's one rank."""
    m = _LINE_RANK.search(text[nccl.end() :] if nccl else text)
    if m is not None and "local" not in text[max(0, m.start() - 6) : m.start()].lower():
        return int(m.group("rank") or m.group("prefix") or m.group("short"))
    above = chunk[max(0, at - 600) : at].decode("utf-8", "replace").splitlines()[-4:]
    for line in reversed(above):
        if (t := _TABLE_RANK.match(line)) is not None:
            return int(t.group("rank"))
    return next(iter(own)) if len(own) == 1 else None
