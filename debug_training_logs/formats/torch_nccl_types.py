"""The typed events of torch ProcessGroupNCCL log lines: the c10 header, the PG prefix, the WorkNCCL record, one class
per message (the :data:`Event` union) and :class:`Parsed` (header + event). Filled by
:mod:`debug_training_logs.formats.torch_nccl`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Header:
    """The c10 log prefix of a line."""

    style: str
    """``c10_2.4+`` (time, rank), ``c10_2.2-2.3`` (rank, no time), ``c10_<=2.1`` (neither) or ``glog``."""
    severity: str
    """F, E, W, I or V."""
    month: int | None
    day: int | None
    hms: str | None
    """Wall clock ``HH:MM:SS`` of the writing host (local time, zone not written); None before torch 2.4."""
    global_rank: int | None
    """From ``[rankN]:`` (the global rank), when the header carries it."""
    source: str
    """``ProcessGroupNCCL.cpp:689``: a fingerprint of the torch build, never needed for parsing."""
    raw_time: str | None
    """The time as written (``0521 08:02:12``), without the monotonic fraction."""


@dataclass(frozen=True, slots=True)
class PGPrefix:
    """A process-group log prefix: which PG wrote the message and this rank's place in it (PG-local rank)."""

    style: str
    """``rank`` (``[Rank N]``), ``uid`` (``[PG n Rank N]``), ``name`` (``[PG name (desc) Rank N]``) or ``guid``."""
    pg_id: str | None
    """The PG uid (2.3, 2.5+): a per-process counter, not comparable across ranks when GUIDs are available."""
    pg_name: str | None
    """The PG name/GUID (2.4 name, 2.5+ GUID): the same on every member rank."""
    pg_desc: str | None
    """The PG description (``default_pg``, ``DATA_PARALLEL_GROUP``...), when logged."""
    pg_rank: int
    """This rank's rank inside the PG (PG-local)."""

    @property
    def key(self) -> str | None:
        """The PG identity shared by its members: the GUID/name when logged, else the uid; None for ``[Rank N]``."""
        return self.pg_name if self.pg_name is not None else self.pg_id

    @property
    def label(self) -> str:
        """How the PG is written in results: ``0``, ``0 (default_pg)``, ``<guid> (DATA_PARALLEL_GROUP)``."""
        base = self.key if self.key is not None else "?"
        return f"{base} ({self.pg_desc})" if self.pg_desc else base


@dataclass(frozen=True, slots=True)
class Work:
    """The collective a WorkNCCL message describes."""

    seq: int | None
    """None for torch <= 1.9, whose WorkNCCL has no SeqNum."""
    op_type: str
    numel_in: int | None
    numel_out: int | None
    tensor_shape: str | None
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class WatchdogTimeout:
    """``Watchdog caught collective operation timeout: WorkNCCL(...) ran for N milliseconds before timing out.``"""

    work: Work
    ran_for_ms: int
    work_rank: int | None
    """The ``[Rank N]`` before the message: PG-local and, in 2.4-2.13, possibly stale. Never the global rank."""
    pg: PGPrefix | None
    """The PG prefix when it is PG-style (2.14); None when it is only ``[Rank N]``."""
    wait_path: bool
    """True for torch 2.0's ``Caught collective operation timeout`` from ``wait()``."""


@dataclass(frozen=True, slots=True, repr=False)
class BlockingWaitTimeout:
    """``Work WorkNCCL(...) timed out in blocking wait`` (TORCH_NCCL_BLOCKING_WAIT=1): the main thread timed out."""

    work: Work
    work_rank: int | None
    pg: PGPrefix | None


@dataclass(frozen=True, slots=True)
class StatusLine:
    """The per-PG watchdog state: failed work S, last enqueued E and last completed C (2.3+)."""

    family: str
    """``failure_detected`` (2.6+), ``exception_detected`` (2.4-2.5) or ``timeout_at`` (2.3-2.5)."""
    seq: int
    last_enqueued: int
    last_completed: int
    pg: PGPrefix | None


@dataclass(frozen=True, slots=True)
class DumpSignal:
    """``Received a ... dump signal ... Last enqueued NCCL work: E, last completed NCCL work: C.``"""

    origin: str
    """``local``: this rank's own watchdog raised the signal; ``remote``: another rank's did."""
    from_rank: int | None
    """The global rank that set the TCPStore key (2.4+ remote); None for local or when not written (2.3)."""
    last_enqueued: int
    last_completed: int
    family: str
    pg: PGPrefix | None


@dataclass(frozen=True, slots=True, repr=False)
class DumpObserved:
    """This rank noticed another rank's dump signal in the TCPStore (2.5+ ``Observed flight recorder dump signal``)."""

    family: str
    pg: PGPrefix | None


@dataclass(frozen=True, slots=True)
class FirstToDump:
    """``First PG on this rank to signal dumping.`` (2.7+) / ``First watchdog to set the dump signal.`` (2.4)."""

    family: str
    pg: PGPrefix | None


@dataclass(frozen=True, slots=True, repr=False)
class WatchdogTerminated:
    """``NCCL watchdog thread terminated`` (<=2.2) / ``Process group watchdog thread terminated`` (2.3+)."""

    wording: str
    """``NCCL`` or ``Process group``."""
    embedded: WatchdogTimeout | None
    """The timeout the exception repeats, when it is one (same event as the earlier timeout line)."""
    pg: PGPrefix | None
    headerless: bool
    """True for the ``what():`` copy printed by ``std::terminate`` (no c10 header)."""


@dataclass(frozen=True, slots=True, repr=False, eq=False)
class HeartbeatKill:
    """The heartbeat monitor found the watchdog itself stuck and kills the process."""

    kind: str
    """``stuck`` (``watchdog got stuck for N seconds``), ``heartbeat_timed_out``, ``no_heartbeat``,
    ``monitor_timeout``."""
    seconds: int | None
    pg: PGPrefix | None


@dataclass(frozen=True, slots=True)
class FatalTerminate:
    """``[F…] Terminating the process after attempting to dump debug info, due to …`` (2.5+), then SIGABRT."""

    reason: str
    """``collective timeout or exception`` or ``ProcessGroupNCCL watchdog hang``."""
    pg: PGPrefix | None


@dataclass(frozen=True, slots=True)
class Teardown:
    """``Some NCCL operations have failed or timed out...`` / ``To avoid data inconsistency, we are taking ...``."""

    kind: str
    pg: PGPrefix | None


@dataclass(frozen=True, slots=True, repr=False, eq=False)
class WatchdogExitMessage:
    """torch 2.4: ``ProcessGroupNCCL's watchdog detected an exception from the local rank`` / ``... from rank R``."""

    from_rank: int | None
    """None when the exception was local."""


@dataclass(frozen=True, slots=True, repr=False)
class ChildFailureRank:
    """ChildFailedError table row ``rank      : 3 (local_rank: 3)`` (global rank of a failed worker)."""

    rank: int
    local_rank: int


@dataclass(frozen=True, slots=True, repr=False)
class ChildFailureExit:
    """ChildFailedError table row ``exitcode  : -6 (pid: 12345)`` (2.12+ adds `` (SIGABRT)``)."""

    exitcode: int
    pid: int
    signal: str | None


@dataclass(frozen=True, slots=True, repr=False)
class ChildFailureSignal:
    """ChildFailedError ``traceback : Signal 6 (SIGABRT) received by PID 12345``."""

    signal: str
    pid: int


Event = (
    WatchdogTimeout
    | BlockingWaitTimeout
    | StatusLine
    | DumpSignal
    | DumpObserved
    | FirstToDump
    | WatchdogTerminated
    | HeartbeatKill
    | FatalTerminate
    | Teardown
    | WatchdogExitMessage
    | ChildFailureRank
    | ChildFailureExit
    | ChildFailureSignal
)


@dataclass(frozen=True, slots=True, repr=False)
class Parsed:
    """One parsed line: its header (None when the line has none) and the event."""

    header: Header | None
    global_rank: int | None
    """``[rankN]:`` anywhere in the line (the header's, or the excepthook's on headerless lines)."""
    event: Event
