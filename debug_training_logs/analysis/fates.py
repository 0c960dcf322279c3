"""The causal model's types: each rank's fate, its events (primary or consequence), the accusations between ranks,
and the finding drawn from them. Plain data, no logic (built by :mod:`~debug_training_logs.analysis.causal`, read
by the decision procedure and the verifier alike).

The vocabulary, as an ML-infra engineer reads a failed job:

* A rank's **fate** is how it ended: it finished; it died of something of its own (an OOM, a CUDA error, an
  exception that is not a communication symptom, a signal nobody sent it); it left early without an error; it was
  stopped by its launcher, the watchdog or the scheduler after something else failed; it waited in a collective; it
  was stuck outside the collective the others waited in; or its log is absent or silent about it.
* An **event** is *primary* when it happened to the rank on its own (the list above, plus a detour into another
  collective and a stall with no work pending), a *consequence* when it is the rank's reaction to another rank's
  failure (a timeout waiting for a peer, a closed connection, a watchdog abort, the agent's SIGTERM, a report naming
  another rank). A consequence points at the ranks it names when the line names them.
* An **accusation** is a line in which torch or the trainer names the failing rank (monitoredBarrier, a trainer's
  "non-finite loss on rank(s) [1]", DETAIL fingerprints, flight-recorder non-joiners).
* The **finding** is the earliest primary fate that nothing earlier explains, where the accusations converge, with
  how sure the evidence lets us be (a subset of ranks shows the shape and a suspect; only the whole world convicts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, get_args

from debug_training_logs.analysis.evidence_types import Hit

FateEnd = Literal[
    "finished",
    "crashed",
    "killed",
    "exited_early",
    "stopped",
    "waiting",
    "stuck",
    "absent",
    "unknown",
]
"""How a rank ended: ``finished`` (the run ended normally); ``crashed`` (its own error ended it); ``killed`` (a signal
its launcher did not send: SIGKILL, SIGSEGV...); ``exited_early`` (it left without an error while others went on);
``stopped`` (its launcher, the watchdog or the scheduler ended it after another failure); ``waiting`` (inside a
collective, for a peer); ``stuck`` (alive, outside the collective the others waited in); ``absent`` (no log);
``unknown`` (its log says nothing of its end)."""

PrimaryKind = Literal[
    "oom",
    "cuda_error",
    "exception",
    "nan",
    "own_signal",
    "early_exit",
    "detour",
    "stall",
    "data_error",
    "launch",
    "watchdog_hang",
    "node_lost",
    "stuck_data",
    "stuck_checkpoint",
    "stuck",
    "gone",
]
ConsequenceKind = Literal[
    "peer_timeout",
    "peer_closed",
    "peer_mismatch",
    "watchdog_abort",
    "agent_stop",
    "scheduler_stop",
    "report",
    "link_error",
    "peer_wait",
]
EventKind = PrimaryKind | ConsequenceKind

PRIMARY_KINDS: tuple[str, ...] = get_args(PrimaryKind)
WAITED_ON_PEER: frozenset[str] = frozenset({"peer_timeout", "peer_closed"})
"""The events of a rank that waited for a peer: a collective timed out, or the peer's connection closed."""
REACTED_TO_PEER: frozenset[str] = WAITED_ON_PEER | {"peer_mismatch"}
"""The same, or a mismatch report naming the peer (``TORCH_DISTRIBUTED_DEBUG=DETAIL``): the rank reacted to a peer."""


@dataclass(frozen=True, repr=False, eq=False)
class Process:
    """A worker process known only by its node, local rank and pid (a launcher line with no global rank)."""

    node: str | None
    local_rank: int | None
    pid: int | None
    exit_code: int | None
    gpu: int | None = None
    """The CUDA device it ran on (NCCL's ``host:pid:tid [dev]`` prefix), when that is what the line says."""
    pg_rank: int | None = None
    """Its rank in the process group whose watchdog wrote the line (torch <= 2.2's ``[Rank N]``, no PG named): the
    global rank when the group is the default one, which the line does not say."""

    def words(self) -> str:
        """``local rank 3 on node gpu-7 (pid 1234)`` as a person says it."""
        where = f" on node {self.node}" if self.node else ""
        pid = f" (pid {self.pid})" if self.pid is not None else ""
        if self.local_rank is not None:
            who = f"local rank {self.local_rank}"
        elif self.gpu is not None:
            who = f"the process on GPU {self.gpu}"
        elif self.pg_rank is not None:
            who = f"rank {self.pg_rank} of its process group"
        else:
            who = "a worker process"
        return f"{who}{where}{pid}"


@dataclass(frozen=True, repr=False, eq=False)
class RankEvent:
    """One thing that happened to a rank, with the line that shows it."""

    rank: int | None
    kind: EventKind
    what: str
    """A few words for people: ``CUDA out of memory``, ``timed out waiting for a peer``..."""
    line: Hit
    points_at: frozenset[int] = frozenset()
    """The ranks the line names or waits for (an edge of the causal graph); empty when it names none."""
    when: datetime | None = None
    """When it happened when that differs from the line's time: a stall began at the rank's last progress, not
    when its error was finally printed."""
    process: Process | None = None
    """The process, for a launcher line that names no global rank."""
    later: Hit | None = None
    """A later line of the same event: the error that finally ended a stall."""
    weak: bool = False
    """Inferred from an exit code alone (no line of the rank's own says what happened): a cause only when nothing
    else is."""

    @property
    def primary(self) -> bool:
        return self.kind in PRIMARY_KINDS

    @property
    def earliest(self) -> datetime | None:
        return self.when or self.line.earliest

    @property
    def latest(self) -> datetime | None:
        return self.when or self.line.latest


@dataclass(frozen=True, repr=False, eq=False)
class Accusation:
    """A line in which torch or the trainer names the failing rank(s)."""

    by: int | None
    """The rank that wrote it (None: a launcher's or an unattributed line)."""
    accused: frozenset[int]
    how: str
    """``monitored_barrier``, ``trainer``, ``detail_mismatch``, ``flight_recorder``, ``peer_address``."""
    line: Hit


@dataclass(repr=False, eq=False)
class Fate:
    """One rank's fate and everything that happened to it."""

    rank: int
    end: FateEnd
    why: str
    """The deciding fact in a few words."""
    events: list[RankEvent] = field(default_factory=list)
    """Its events, oldest first."""
    exit_code: int | None = None
    signal: str | None = None
    stopped_by: str | None = None
    """Who ended it when it did not end on its own: ``agent``, ``watchdog``, ``scheduler``."""
    last_progress: Hit | None = None
    waits_in: str | None = None
    """The collective it waited in (``allreduce SeqNum 12 (PG 0)``, ``broadcast at train.py:187``), when known."""
    node: str | None = None

    @property
    def primary(self) -> RankEvent | None:
        """Its earliest primary event (the candidate cause on this rank), None when it only suffered others'."""
        own = [e for e in self.events if e.primary]
        if not own:
            return None
        return min(own, key=lambda e: (e.earliest or datetime.max, e.line.file, e.line.line))

    @property
    def consequences(self) -> list[RankEvent]:
        return [e for e in self.events if not e.primary]


Certainty = Literal["established", "provisional"]


@dataclass(repr=False, eq=False)
class Finding:
    """What the causal model shows: the failure's shape, who caused it, and how sure the evidence lets us be."""

    category: str
    culprits: set[int]
    """Ranks that caused it (empty when the shape blames no rank, or only a subset of ranks was read)."""
    suspects: set[int]
    """Ranks the evidence points at without convicting them (a subset of the world was read)."""
    certainty: Certainty
    """``established`` (every rank was read, or the shape blames no rank), ``provisional`` (a subset: a hidden rank
    may hold an earlier failure)."""
    root: RankEvent | None
    """The triggering event (on a culprit or suspect)."""
    why: str
    """The reasoning in a sentence or two, for the explanation."""
    accusations: list[Accusation] = field(default_factory=list)
    """The accusations that converge on the culprits."""
    processes: list[Process] = field(default_factory=list)
    """A culprit known only as node + local rank + pid (no global rank)."""
    victims: list[RankEvent] = field(default_factory=list)
    """A few consequences on other ranks (the symptoms), for the chain."""
    confidence: str = "high"
    nodes: list[str] = field(default_factory=list)
    """Nodes the finding names when it blames no rank (the hosts whose links failed)."""


@dataclass(repr=False, eq=False)
class CausalModel:
    """Every rank's fate, the accusations between ranks, and the coverage the finding is judged by."""

    fates: dict[int, Fate]
    accusations: list[Accusation]
    processes: list[RankEvent]
    """Events of worker processes known only by node, local rank and pid."""
    world_size: int | None
    missing: set[int]
    seen: set[int]
    job_layout: bool = False
    """The logs are a job's own files (several of them, or a launcher's output), not a single pasted excerpt."""

    @property
    def complete(self) -> bool:
        """Every rank of the world was read: the world size is stated and no rank is missing, or (unstated) the
        job's own files hold ranks from 0 without a gap (nothing suggests another rank). A pasted excerpt of a few
        ranks is never taken for the whole job."""
        if self.world_size is not None:
            return not self.missing and bool(self.seen)
        contiguous = len(self.seen) > 1 and min(self.seen) == 0 and max(self.seen) == len(self.seen) - 1
        return self.job_layout and contiguous
