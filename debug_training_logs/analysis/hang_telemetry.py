"""Node telemetry and NCCL RAS reports tied to the job's ranks: which GPU failed under which rank, and which ranks
RAS says the others are waiting for.

- A GPU failure counts when the driver says the GPU is broken (a fatal Xid: fallen off the bus, uncorrectable ECC,
  NVLink, GSP; ``nvidia-smi`` that cannot reach the GPU), on a node of this job (when the logs name their nodes) and
  not before the job started. It is tied to a rank by the Xid's ``pid=`` (a dumped or logged process), else by the
  GPU's bus id in NCCL's init lines; otherwise it stays on its node. Application Xids (13, 31, 43: the program's own
  fault surfaced by the driver) and informational ones (63, 92: a page retired) are notes, not causes.
- RAS: the ranks of the job's largest communicator that have not launched the collective their peers have, or that
  RAS could not reach (missing), are what the others wait for; a dead process is gone.

Pure and MCP-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from debug_training_logs.analysis.hang_files import Telemetry
from debug_training_logs.analysis.hang_links import Links

BEFORE_START: Final = timedelta(minutes=10)
"""An Xid this much before the job's first log line is an earlier incident, not this job's."""


@dataclass(frozen=True, repr=False)
class GpuFailure:
    """A GPU the driver or ``nvidia-smi`` reported broken, and the rank on it when something ties them."""

    rank: int | None
    host: str | None
    pci: str | None
    what: str
    file: str
    line_no: int
    text: str
    time: datetime | None
    mapped_by: str


@dataclass(frozen=True, repr=False)
class RasAccusation:
    ranks: frozenset[int]
    what: str
    file: str
    line_no: int
    text: str


def gpu_failures(
    t: Telemetry, links: Links, nodes: set[str], start: datetime | None, notes: list[str]
) -> list[GpuFailure]:
    """The job's broken GPUs (see the module docstring), oldest first."""
    out: list[GpuFailure] = []
    for rel, e in t.gpu_events:
        if e.severity != "fatal":
            continue
        if nodes and e.host is not None and e.host not in nodes:
            notes.append(f"{rel}:{e.line_no}: {e.what} on {e.host}, not a node of this job's logs")
            continue
        if start is not None and e.time is not None and e.time < start - BEFORE_START:
            notes.append(f"{rel}:{e.line_no}: {e.what} at {e.time:%Y-%m-%d %H:%M:%S}, before the job started")
            continue
        rank, how = None, ""
        if e.pid is not None and e.pid in links.pids:
            rank, where = links.pids[e.pid]
            how = f"its pid {e.pid} ({where})"
        elif (g := links.gpu_rank(e.host, e.pci)) is not None:
            rank, how = g[0], f"the GPU's bus id {e.pci} ({g[1]})"
        out.append(GpuFailure(rank, e.host, e.pci, e.what, rel, e.line_no, e.text, e.time, how))
    for rel, s in t.gpus:
        if s.ecc_uncorrected or s.remap_pending:
            # counters since the driver loaded and a remap waiting for the next reset: the GPU's history, not when
            notes.append(
                f"{rel}:{s.line_no}: GPU {s.pci} has uncorrectable ECC errors or a pending row remap (counted "
                "since the driver loaded: not dated, so not taken for this hang's cause)"
            )
        if not s.lost or (nodes and s.host is not None and s.host not in nodes):
            continue
        what = "GPU lost (nvidia-smi cannot reach it)"
        hit = links.gpu_rank(s.host, s.pci)
        rank, how = (hit[0], f"the GPU's bus id {s.pci} ({hit[1]})") if hit else (None, "")
        out.append(GpuFailure(rank, s.host, s.pci, what, rel, s.line_no, "", None, how))
    out.sort(key=lambda f: (f.time or datetime.max, f.file, f.line_no))
    return _one_per_gpu(out)


def _one_per_gpu(failures: list[GpuFailure]) -> list[GpuFailure]:
    """One failure per GPU: the driver's Xid, which says what broke (``79: GPU has fallen off the bus``), over the
    lines around it (the PCIe AER report that came with it, the repeated "fallen off the bus"); the others are
    mentioned."""
    by_gpu: dict[tuple[str | None, str | None, int | None], list[GpuFailure]] = {}
    for f in failures:
        by_gpu.setdefault((f.host, f.pci, f.rank if f.pci is None else None), []).append(f)
    out = []
    for group in by_gpu.values():
        lead = next((f for f in group if f.what.startswith("Xid")), group[0])
        others = sorted({f.what for f in group if f is not lead and f.what not in lead.what})
        what = lead.what + (f" (with: {'; '.join(others[:2])})" if others else "")
        out.append(
            GpuFailure(
                lead.rank if lead.rank is not None else next((f.rank for f in group if f.rank is not None), None),
                lead.host,
                lead.pci,
                what,
                lead.file,
                lead.line_no,
                lead.text,
                lead.time,
                lead.mapped_by or next((f.mapped_by for f in group if f.mapped_by), ""),
            )
        )
    out.sort(key=lambda f: (f.time or datetime.max, f.file, f.line_no))
    return out


def ras_accusations(t: Telemetry, links: Links, world_size: int | None) -> list[RasAccusation]:
    """Per RAS report: the ranks of its largest communicator (the world's, when its size is the world size) that
    lag the others' collective count or are missing, and the ranks of dead processes."""
    out: list[RasAccusation] = []
    for rel, r in t.ras:
        if not r.communicators:
            continue
        largest = max((c.nranks or 0) for c in r.communicators)
        if world_size is not None and largest != world_size:
            continue  # its ranks are a subgroup's, not global ranks
        world = {c.hash for c in r.communicators if (c.nranks or 0) == largest}
        lagging = {rank for h, ranks in r.lagging().items() if h in world for rank in ranks}
        comm = next(c for c in r.communicators if c.hash in world)
        if lagging:
            out.append(
                RasAccusation(
                    frozenset(lagging),
                    "have not launched the collective their peers have (NCCL RAS)",
                    rel,
                    comm.line_no,
                    _line(t, rel, comm.line_no),
                )
            )
        missing = r.missing()
        if missing:
            out.append(
                RasAccusation(
                    frozenset(missing),
                    "are missing from NCCL RAS's report (unreachable)",
                    rel,
                    comm.line_no,
                    _line(t, rel, comm.line_no),
                )
            )
        dead = {links.pids[p.pid][0] for p in r.dead if p.pid in links.pids}
        if dead:
            first = r.dead[0]
            out.append(
                RasAccusation(frozenset(dead), "are dead (NCCL RAS)", rel, first.line_no, _line(t, rel, first.line_no))
            )
    return out


def _line(t: Telemetry, rel: str, line_no: int) -> str:
    lines = t.ras_lines.get(rel, [])
    return lines[line_no - 1] if 0 < line_no <= len(lines) else ""
