"""What was collected during a live hang, read and tied to ranks: ``py-spy dump`` stacks, NCCL RAS reports,
``nvidia-smi`` and kernel-log captures.

Found by content, wherever they are: inside the logs directory (the scan's inventory marks them so that they are
never taken for a rank's log), in its sibling directories (``hang/``, ``stacks/``, ``py-spy/``...) and in an
explicit ``hang_dir``. Each process dump is tied to a global rank by what really states it: a ``rank`` local
(``--locals``), the command line (``--rank 3``, ``RANK=3``), a log line that names the pid and the rank (the
trainer's own ``rank 3 pid 1234``, torchrun's failure table, NCCL's ``host:pid:tid`` init lines), or a file name a
person wrote (``rank3.txt``). A process no line ties to a rank stays a process (host and pid).

Then the hang's shape, decided the same way on any presentation: the ranks waiting in a collective, the collective
most of them wait in, and the ranks outside it (stuck in data loading, checkpoint I/O, a sleep, a lock, compute, or
gone), or inside another one (a detour). Pure and MCP-free: the causal model reads :class:`HangFacts`.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from debug_training_logs.analysis import hang_files
from debug_training_logs.analysis.hang_links import Links, find_links
from debug_training_logs.analysis.hang_telemetry import GpuFailure, RasAccusation, gpu_failures, ras_accusations
from debug_training_logs.analysis.stack_states import STDLIB, STUCK_KINDS, WAITING_KINDS, StackState, state_of
from debug_training_logs.formats import py_spy
from debug_training_logs.formats.timestamps import with_year
from debug_training_logs.logs.discovery import LogFile
from debug_training_logs.ranges import format_ranges

if TYPE_CHECKING:
    from debug_training_logs.analysis.inventory_types import JobScan

_RANK_LOCALS: Final = ("global_rank", "world_rank", "rank", "RANK", "my_rank", "grank")
_CMD_RANK: Final = re.compile(r"(?:--(?:global[-_])?rank[= ]|(?:^|\s)RANK=)(?P<rank>\d{1,6})\b")
_NAME_RANK: Final = re.compile(r"(?:^|[/_.\-])rank[_\-]?(?P<rank>\d{1,6})(?=[/_.\-]|$)", re.I)
_NAME_PID: Final = re.compile(r"(?:^|[_\-.])(?:pid[_\-]?)?(?P<pid>\d{3,10})(?=\.\w+$|$)")
"""A dump file named for its process (``4711.txt``, ``pyspy-node3-4711.json``): the pid of an error with no header."""
_AGENT: Final = re.compile(
    r"torchrun|torch[./]distributed[./](?:run|launch)\b|elastic/agent|deepspeed/launcher|\bdeepspeed\b"
)
_LAUNCHER_FRAME: Final = re.compile(
    r"torch/multiprocessing/spawn\.py|torch/distributed/elastic/agent/|torch/distributed/launcher/api\.py|"
    r"torch/distributed/run\.py|deepspeed/launcher/|accelerate/commands/launch\.py|lightning/fabric/strategies/launchers/"
)
"""A frame of a launcher waiting for its workers (torchrun's agent, ``mp.spawn``'s parent): not a rank."""


@dataclass(frozen=True, repr=False)
class ProcessState:
    """One dumped worker process: its rank (when something states it), its state and where its dump is."""

    rank: int | None
    pid: int | None
    host: str | None
    state: StackState
    file: str
    """The dump's file, as cited (relative to the logs directory or the hang directory)."""
    mapped_by: str
    """How the rank is known: ``a rank local``, ``its command line``, ``log.txt:12``, ``the file name``, or ``''``."""
    helpers: tuple[StackState, ...] = ()
    """Its child processes' states (DataLoader workers): what it waits on, one level down."""
    progressing: bool = False
    """Dumped more than once with different stacks: it moves."""

    def cite(self) -> str:
        return f"{self.file}:{self.state.line_no}"

    def words(self) -> str:
        who = (
            f"rank {self.rank}"
            if self.rank is not None
            else f"pid {self.pid}" + (f" on {self.host}" if self.host else "")
        )
        deeper = next((h for h in self.helpers if h.kind in STUCK_KINDS), None)
        below = f"; its DataLoader worker is {deeper.words()}" if deeper is not None else ""
        return f"{who} {self.state.words()}{below}"


@dataclass(repr=False)
class HangFacts:
    """The hang artifacts and the shape they show."""

    files: list[hang_files.Artifact] = field(default_factory=list)
    processes: list[ProcessState] = field(default_factory=list)
    """Every worker process dumped (agents and DataLoader workers folded away), in file order."""
    waits_in: str | None = None
    """Where most waiting ranks wait (``all_reduce at train.py:9``)."""
    waiting: list[ProcessState] = field(default_factory=list)
    stuck: list[ProcessState] = field(default_factory=list)
    """Outside any collective while the others wait (data loading, checkpoint, sleep, lock, compute, gone)."""
    detours: list[ProcessState] = field(default_factory=list)
    """In another collective than the one most wait in (and no rank outside every collective)."""
    notes: list[str] = field(default_factory=list)
    telemetry: hang_files.Telemetry = field(default_factory=hang_files.Telemetry)
    links: Links = field(default_factory=Links)
    """What ties pids and GPUs to ranks in the logs."""
    gpu_failures: list[GpuFailure] = field(default_factory=list)
    ras: list[RasAccusation] = field(default_factory=list)
    hang_dir: str | None = None
    """The hang directory the caller gave (a conclusion names it, so that its verification reads it too)."""
    fatal: dict[int, tuple[str, tuple[int, str, str]]] = field(default_factory=dict)
    """Ranks whose stack dump in their log came with a fatal error (faulthandler on a SIGSEGV...): (file, (line,
    text, the error's words))."""

    @property
    def dumped_ranks(self) -> set[int]:
        return {p.rank for p in self.processes if p.rank is not None}

    def describe(self) -> str:
        """``5 hang artifact file(s): 4 py-spy, 1 kernel log; 4 rank processes dumped (ranks 0-3), 1 not tied to a
        rank``: what was read, for the job details."""
        kinds = Counter(a.kind for a in self.files)
        text = (
            f"{len(self.files)} hang artifact file(s): " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
            if self.files
            else "Python stack dumps in the logs"
        )
        if self.processes:
            ranks = format_ranges(self.dumped_ranks) or "none"
            loose = sum(p.rank is None for p in self.processes)
            text += f"; {len(self.processes)} worker process(es) dumped (ranks {ranks})"
            text += f", {loose} not tied to a rank" if loose else ""
        problems = [f"{a.rel}: {a.problem}" for a in self.files if a.problem]
        if problems:
            text += "; " + "; ".join(problems[:3])
        return text

    def state_of(self, rank: int) -> ProcessState | None:
        return next((p for p in self.processes if p.rank == rank), None)


def gather(
    roots: Sequence[tuple[Path, Path]],
    hang_dir: Path | None,
    log_files: Sequence[LogFile] = (),
    file_ranks: dict[str, set[int]] | None = None,
    nodes: Iterable[str] = (),
    inside: Iterable[LogFile] = (),
    file_nodes: dict[str, str | None] | None = None,
    start: datetime | None = None,
    world_size: int | None = None,
) -> HangFacts:
    """The hang artifacts in ``inside`` (the logs directory's files its inventory marked) and in ``roots`` (``hang_dir``
    and the logs directory's siblings: :func:`~debug_training_logs.logs.sources.hang_roots`), tied to the ranks of the
    logs ``log_files`` (``file_ranks``: each log file's ranks, by its relative path)."""
    found = hang_files.find(roots, inside)
    facts = HangFacts(files=found.files, notes=list(found.notes), telemetry=found.telemetry)
    facts.hang_dir = str(hang_dir) if hang_dir is not None else None
    if not found.files:
        return facts
    t = found.telemetry
    pids = {p.pid for _, p in found.dumps if p.pid is not None}
    pids |= {e.pid for _, e in t.gpu_events if e.pid is not None}
    pids |= {q.pid for _, r in t.ras for q in (*r.dead, *r.unresponsive)}
    facts.links = find_links(log_files, file_ranks or {}, file_nodes or {}, pids, gpus=bool(t.gpu_events or t.gpus))
    facts.notes += facts.links.notes
    known_nodes = sorted(set(nodes), key=len, reverse=True)
    facts.processes = _processes(found.dumps, facts.links.pids, known_nodes)
    _shape(facts)
    failures = gpu_failures(t, facts.links, set(nodes), start, facts.notes)
    waiting = {p.rank for p in facts.waiting if p.rank is not None}
    for g in failures:
        if g.rank in waiting:  # alive and waiting with the others when dumped: the GPU did not stop it
            facts.notes.append(
                f"{g.file}:{g.line_no}: {g.what} on rank {g.rank}'s GPU, but its stack shows it "
                "waiting in the collective with the others: not this hang's cause"
            )
    facts.gpu_failures = [g for g in failures if g.rank not in waiting]
    facts.ras = ras_accusations(t, facts.links, world_size)
    return facts


def of_job(
    job: JobScan,
    roots: Sequence[tuple[Path, Path]],
    hang_dir: Path | None,
    log_dumps: Sequence[ProcessState] = (),
    log_fatal: dict[int, tuple[str, tuple[int, str, str]]] | None = None,
) -> HangFacts | None:
    """What was collected during a live hang, in the logs directory (the files its inventory marked), in ``roots``
    (``hang_dir`` and the logs' siblings: :func:`~debug_training_logs.logs.sources.hang_roots`), and the stack dumps
    the ranks wrote into their own logs (``log_dumps``, with the fatal errors some came with:
    :mod:`~debug_training_logs.analysis.log_stacks`); None when there is none."""
    inv = job.inventory
    files = job.log_files() if job.files else []
    artifacts = {fi.rel for fi in inv.files if fi.artifact is not None}
    inside = [lf for lf in files if lf.rel in artifacts]
    logs = [lf for lf in files if lf.rel not in artifacts]
    facts = gather(
        roots,
        hang_dir,
        logs,
        {fi.rel: fi.ranks for fi in inv.files},
        inv.nodes,
        inside,
        {fi.rel: fi.node for fi in inv.files},
        with_year(inv.start.time, inv.year_hint) if inv.start is not None else None,
        inv.world_size,
    )
    if log_dumps:
        dumped = {p.rank for p in facts.processes}  # a rank's own py-spy dump stands over what its log holds
        facts.processes += [p for p in log_dumps if p.rank not in dumped]
        facts.fatal = dict(log_fatal or {})
        _shape(facts)
    return facts if facts.files or facts.processes else None


def _host_of(rel: str, nodes: Sequence[str]) -> str | None:
    return next((n for n in nodes if n and n in rel), None)


def _processes(
    dumps: list[tuple[str, py_spy.ProcessStacks]],
    by_pid: dict[int, tuple[int, str]],
    nodes: Sequence[str],
) -> list[ProcessState]:
    pids = {p.pid for _, p in dumps if p.pid is not None}
    agents = {p.pid for _, p in dumps if p.pid is not None and _is_launcher(p)}
    children: dict[int, list[py_spy.ProcessStacks]] = {}
    for _, p in dumps:
        if p.parent_pid is not None and p.parent_pid in pids and p.parent_pid not in agents:
            children.setdefault(p.parent_pid, []).append(p)
    folded = {c.pid for cs in children.values() for c in cs}
    per_file: Counter[str] = Counter(rel for rel, p in dumps if p.pid not in agents and p.pid not in folded)
    seen: dict[tuple[str | None, int | None], ProcessState] = {}
    named = Counter(rel for rel, _ in dumps)
    dumps = [
        (rel, replace(p, pid=int(m.group("pid"))))
        if p.pid is None and named[rel] == 1 and (m := _NAME_PID.search(os.path.basename(rel))) is not None
        else (rel, p)
        for rel, p in dumps
    ]
    for rel, p in dumps:
        if p.pid in agents or (p.parent_pid is not None and p.parent_pid in pids and p.parent_pid not in agents):
            continue  # the launcher itself, and a rank's DataLoader workers (folded into the rank)
        state = state_of(p)
        rank, how = _rank_of(p, rel, by_pid, per_file[rel] == 1)
        host = _host_of(rel, nodes)
        helpers = tuple(state_of(c) for c in children.get(p.pid or -1, ()))
        key = (host, p.pid) if p.pid is not None else (rel, None)
        prior = seen.get(key)
        # dumped again: the last dump stands (in the first one's place); different stacks mean it moves
        moved = prior is not None and (prior.state.what != state.what or prior.state.call_site != state.call_site)
        progressing = prior is not None and (prior.progressing or moved)
        seen[key] = ProcessState(rank, p.pid, host, state, rel, how, helpers, progressing)
    return list(seen.values())


def _is_launcher(p: py_spy.ProcessStacks) -> bool:
    """torchrun's agent, ``mp.spawn``'s parent, a DeepSpeed launcher: waiting for its workers in launcher code (a
    worker of ``mp.spawn`` has the launcher's ``_wrap`` frame too, far below the training code it runs)."""
    if p.command and _AGENT.search(p.command):
        return True
    t = p.main_thread()
    if t is None:
        return False
    inner = next((f for f in t.frames if not f.native and f.file and not STDLIB.match(f.file)), None)
    return inner is not None and _LAUNCHER_FRAME.search(inner.file or "") is not None


def _rank_of(
    p: py_spy.ProcessStacks, rel: str, by_pid: dict[int, tuple[int, str]], alone_in_file: bool
) -> tuple[int | None, str]:
    t = p.main_thread()
    if t is not None:
        for name in _RANK_LOCALS:
            for f in reversed(t.frames):  # the outermost frame that holds it: the training script's own
                if "torch/" in (f.file or ""):
                    continue
                value = dict(f.locals).get(name)
                if value is not None and value.isdigit():
                    return int(value), "a rank local in its dump"
    if p.command and (m := _CMD_RANK.search(p.command)) is not None:
        return int(m.group("rank")), "its command line"
    if p.pid is not None and p.pid in by_pid:
        rank, where = by_pid[p.pid]
        return rank, where
    if alone_in_file and (m := _NAME_RANK.search(os.path.basename(rel))) is not None:
        return int(m.group("rank")), "the dump's file name"
    return None, ""


def _shape(facts: HangFacts) -> None:
    """Who waits where, and who is outside the collective the others wait in (anew from every process)."""
    facts.waiting, facts.stuck, facts.detours, facts.waits_in = [], [], [], None
    procs = [p for p in facts.processes if not p.progressing]
    waiting = [p for p in procs if p.state.kind in WAITING_KINDS]
    facts.waiting = waiting
    if not waiting:
        return  # nobody waits for anybody: the stacks show no hang
    where = Counter((p.state.kind, p.state.what, p.state.call_site) for p in waiting)
    (kind, what, site), top = where.most_common(1)[0]
    facts.waits_in = f"{what}" + (f" at {site}" if site else "")
    outside = [p for p in procs if p.state.kind in STUCK_KINDS or p.state.kind in ("gone", "shutdown")]
    if outside:
        facts.stuck = outside
        return
    others = [p for p in waiting if (p.state.kind, p.state.what, p.state.call_site) != (kind, what, site)]
    if others and top > len(others) and len(where) > 1:
        facts.detours = others
