"""torchrun / torch.distributed.elastic: the launcher's own lines, typed (pure functions over lines, never a file).

What the agent writes, as real torch 2.13 runs show (fixtures/real_torch) and what it means for the user:

* ``failed (exitcode: 1) local_rank: 1 (pid: 20090) of binary: ...`` (ERROR): the agent's monitor saw a worker exit
  non-zero. Negative exit codes are signals (``-9`` SIGKILL, e.g. the kernel OOM killer; ``-6`` SIGABRT).
* ``Sending process 20084 closing signal SIGTERM`` (WARNING): the agent tears down the workers that were still
  alive; every one of them is reported later with ``exitcode : -15 ... (SIGTERM)``. A rank torn down this way
  did **not** fail on its own.
* The ``ChildFailedError`` table: ``Failures:`` and ``Root Cause (first observed failure):`` blocks of entries
  ``[i]:`` with ``time``, ``host``, ``rank : R (local_rank: L)``, ``exitcode : X (pid: P)``, ``error_file`` and
  ``traceback`` (``Signal 9 (SIGKILL) received by PID P`` for a signal, else a pointer to the docs). The "root
  cause" is only the first failure *this agent* observed on *its* node: on another node it is often a victim.
* Restarts (``--max-restarts``): ``Worker group FAILED. 1/1 attempts left; will restart worker group``, then
  ``Stopping worker group``, a new rendezvous (``Rendezvous complete for workers. Result:`` with ``restart_count=N``)
  and ``Starting worker group``; ``--log-dir`` gets one ``attempt_N/`` directory per attempt. The workers see
  ``TORCHELASTIC_RESTART_COUNT``.
* Rendezvous failures: ``RendezvousConnectionError`` / ``RendezvousTimeoutError`` / ``RendezvousClosedError``;
  the store's ``The server socket has failed to listen on any local network address. port: P, ... EADDRINUSE``.
* ``The client socket has timed out after 8000ms while trying to connect to (host, port)`` / ``TCP client failed to
  connect/validate to host h:p``: the store (the rendezvous endpoint) on ``host`` does not answer.
* Success: ``worker group successfully finished`` / ``Local worker group finished (WorkerState.SUCCEEDED)``.

:data:`BENIGN` lists lines healthy jobs write that read like failures (named data, like the grep tiers).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

NEEDLES: Final[tuple[str, ...]] = (
    "failed (exitcode: ",
    "closing signal ",
    "ChildFailedError",
    "(local_rank: ",
    "(local rank: ",  # a table pasted from a rendered page: markdown ate the underscores
    "exitcode  : ",
    "received by PID",
    "attempts left; will restart worker group",
    "Rendezvous complete for workers",
    "restart_count=",
    "Starting worker group",
    "Stopping worker group",
    "worker group successfully finished",
    "WorkerState.SUCCEEDED",
    "Rendezvous",
    "failed to listen on any local network address",
    "while trying to connect to (",
    "failed to connect/validate to host ",
    "clients joined",
)
"""Literals that select candidate lines (named data)."""


# ---------------------------------------------------------------------------------------------------------------------
# Benign lines: what every healthy job logs, named so that no tool reads them as a failure.


@dataclass(frozen=True, repr=False, eq=False)
class Benign:
    """A line a healthy job writes that looks like an error, and why it is not one."""

    name: str
    regex: str
    why: str


BENIGN: Final[tuple[Benign, ...]] = (
    Benign(
        "c10d_ipv6_bind",
        r"\[c10d\] The server socket has failed to bind to \[::\]:\d+ \(errno: 98 - Address already in use\)",
        "the TCPStore tries IPv6 first; when the dual-stack socket is taken it falls back to IPv4 and succeeds "
        "(only a failure when followed by 'failed to listen on any local network address')",
    ),
    Benign(
        "c10d_ipv6_lookup",
        r"\[c10d\] The IPv6 network addresses of \(.*\) cannot be retrieved \(gai error",
        "the host has no IPv6 address; c10d then connects over IPv4",
    ),
    Benign(
        "c10d_ipv6_attempt",
        r"\[c10d(?: - debug)?\] The client socket will attempt to connect to an IPv6 address",
        "connection attempt order (INFO)",
    ),
    Benign(
        "store_peer_closed",
        r"\[c10d - debug\] Remote peer closed the connection\.",
        "a store client disconnected: every worker does this when it exits, cleanly or not (INFO)",
    ),
    Benign(
        "omp_threads_banner",
        r"Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
        "torchrun's start-up banner (WARNING)",
    ),
    Benign(
        "elastic_optional_env",
        r"Environment variable '(?:TORCHELASTIC_ENABLE_FILE_TIMER|TORCHELASTIC_HEALTH_CHECK_PORT)' not found",
        "optional elastic features not enabled (INFO)",
    ),
    Benign("debug_level", r"\[c10d\] The debug level is set to", "TORCH_DISTRIBUTED_DEBUG echo (INFO)"),
    Benign(
        "waiting_other_agents",
        r"Waiting \d+ seconds for other agents to finish",
        "this node finished; the agent waits for the others (INFO)",
    ),
    Benign(
        "numpy_missing",
        r"UserWarning: Failed to initialize NumPy",
        "numpy is absent from the environment; unrelated to distributed training",
    ),
)
"""Lines a healthy job logs that are not failures (RE2/Python syntax, searched anywhere in a line)."""

_BENIGN_RX = [(b, re.compile(b.regex)) for b in BENIGN]


def benign(line: str) -> Benign | None:
    """The :class:`Benign` entry ``line`` matches, else None."""
    for b, rx in _BENIGN_RX:
        if rx.search(line):
            return b
    return None


# ---------------------------------------------------------------------------------------------------------------------
# Single-line events


@dataclass(frozen=True, repr=False)
class WorkerFailed:
    """``failed (exitcode: X) local_rank: L (pid: P)``: the agent saw this local worker exit non-zero first."""

    exitcode: int
    local_rank: int
    pid: int

    @property
    def signal(self) -> str | None:
        return signal_name(self.exitcode)


@dataclass(frozen=True, repr=False)
class SendingSignal:
    """``Sending process P closing signal SIGTERM``: the agent tears down a worker that was still running."""

    pid: int
    signal: str


@dataclass(frozen=True, repr=False)
class RestartDecision:
    """``Worker group FAILED. N/M attempts left; will restart worker group``."""

    attempts_left: int
    max_restarts: int


@dataclass(frozen=True, repr=False)
class RendezvousResult:
    """``Rendezvous complete for workers`` block field ``restart_count=N`` (the attempt number that starts)."""

    restart_count: int


@dataclass(frozen=True, repr=False)
class GroupState:
    """``Starting worker group`` / ``Stopping worker group`` / ``worker group successfully finished``."""

    state: Literal["starting", "stopping", "succeeded", "failed"]


@dataclass(frozen=True, repr=False)
class RendezvousError:
    """A rendezvous failure (``RendezvousConnectionError``, ``RendezvousTimeoutError``, ``RendezvousClosedError``,
    ..., the static rendezvous store's ``DistStoreError: ... 1/2 clients joined``) and its message."""

    kind: str
    message: str


@dataclass(frozen=True, repr=False)
class StoreListenFailed:
    """The TCPStore could not listen (``port``, errno ``name`` such as EADDRINUSE)."""

    port: int
    errno_name: str


@dataclass(frozen=True, repr=False, eq=False)
class StoreUnreachable:
    """A TCPStore client (the agent's rendezvous, or a worker's store) could not reach ``host:port``."""

    host: str
    port: int


LauncherEvent = (
    WorkerFailed
    | SendingSignal
    | RestartDecision
    | RendezvousResult
    | GroupState
    | RendezvousError
    | StoreListenFailed
    | StoreUnreachable
)

_FAILED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)")
_SENDING = re.compile(r"Sending process (?P<pid>\d+) closing signal (?P<sig>SIG[A-Z]+)")
_RESTART = re.compile(r"Worker group FAILED\. (?P<left>\d+)/(?P<max>\d+) attempts left; will restart worker group")
_RESTART_COUNT = re.compile(r"(?:^|\]:?|^\s*[\w.\-]+:)\s*restart_count=(?P<n>\d+)\s*$")
"""The field alone on its line of the agent's result block (after the glog header), not a trainer's own line that
ends in ``restart_count=0``."""
_GROUP = re.compile(
    r"\] (?:\[\w+\] )?(?P<s>Starting worker group|Stopping worker group|worker group successfully finished)"
    r"|(?P<fin>Local worker group finished \(WorkerState\.(?P<state>SUCCEEDED|FAILED)\))"
)
_RDZV_ERR = re.compile(
    r"(?:torch\.distributed\.elastic\.rendezvous\.api\.)?(?P<kind>Rendezvous(?:Connection|Timeout|Closed|State|Graceful"
    r"Exit)?Error)(?::\s*(?P<msg>.*))?$"
)
_CLIENTS = re.compile(
    r"(?P<kind>DistStoreError): (?P<msg>Timed out after \d+ seconds waiting for clients\. \d+/\d+ clients joined)"
)
"""The static rendezvous' store (on the master) gave up waiting for the other nodes' agents."""
_UNREACHABLE = re.compile(
    r"while trying to connect to \((?P<host>[^,()\s]+), (?P<port>\d+)\)"
    r"|failed to connect/validate to host (?P<host2>[^\s:]+):(?P<port2>\d+)"
)
_LISTEN = re.compile(
    r"failed to listen on any local network address\.(?: port: (?P<port>\d+), useIpv6: \w+, code: -?\d+, "
    r"name: (?P<name>E[A-Z]+)|.*?failed to bind to \S+?:(?P<port2>\d+) \(errno: (?P<errno>\d+) - [^)]*\))"
)
"""torch 2.3+ (``port: P, ... name: EADDRINUSE``) and the older wording, whose exception message goes on with
``failed to bind to [::]:P (errno: 98 - Address already in use)``."""
_ERRNO_NAMES = {"98": "EADDRINUSE", "99": "EADDRNOTAVAIL", "13": "EACCES"}


def signal_name(exitcode: int) -> str | None:
    """The signal a negative exit code stands for (``-9`` -> ``SIGKILL``), else None."""
    if exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


def parse_line(line: str) -> LauncherEvent | None:
    """The single-line launcher event in ``line`` (anywhere after any prefix), else None."""
    if m := _FAILED.search(line):
        return WorkerFailed(int(m.group("code")), int(m.group("local")), int(m.group("pid")))
    if m := _SENDING.search(line):
        return SendingSignal(int(m.group("pid")), m.group("sig"))
    if m := _RESTART.search(line):
        return RestartDecision(int(m.group("left")), int(m.group("max")))
    if "restart_count=" in line and (m := _RESTART_COUNT.search(line)):
        return RendezvousResult(int(m.group("n")))
    if m := _GROUP.search(line):
        if m.group("fin"):
            return GroupState("succeeded" if m.group("state") == "SUCCEEDED" else "failed")
        s = m.group("s")
        return GroupState("starting" if s.startswith("Starting") else "stopping" if s.startswith("Stopping") else
                          "succeeded")  # fmt: skip
    if "Rendezvous" in line and "Error" in line and (m := _RDZV_ERR.search(line)):
        return RendezvousError(m.group("kind"), (m.group("msg") or "").strip())
    if "clients joined" in line and (m := _CLIENTS.search(line)):
        return RendezvousError(m.group("kind"), m.group("msg"))
    if (m := _LISTEN.search(line)) and (m.group("port") or m.group("port2")):
        name = m.group("name") or _ERRNO_NAMES.get(m.group("errno"), f"errno {m.group('errno')}")
        return StoreListenFailed(int(m.group("port") or m.group("port2")), name)
    if m := _UNREACHABLE.search(line):
        return StoreUnreachable(m.group("host") or m.group("host2"), int(m.group("port") or m.group("port2")))
    return None


# ---------------------------------------------------------------------------------------------------------------------
# The ChildFailedError table (multi-line)


@dataclass(repr=False)
class ChildFailure:
    """One entry of a ``ChildFailedError`` table: a worker as the agent saw it end.

    ``rank`` is the global rank, ``exitcode`` negative for a signal (``signal`` its name), ``root_cause`` True for
    the entry under "Root Cause (first observed failure)" (first on *this agent's* node only), ``line`` the line
    number of its ``rank`` field (1-based, in the lines given).
    """

    rank: int
    local_rank: int
    exitcode: int | None = None
    pid: int | None = None
    signal: str | None = None
    host: str | None = None
    time: str | None = None
    root_cause: bool = False
    error_file: str | None = None
    traceback: str | None = None
    line: int = 0
    exit_line: int = 0
    """Line number of its ``exitcode`` field."""

    @property
    def torn_down(self) -> bool:
        """Killed by its own agent's SIGTERM (exit code -15): the agent stopped it, it did not fail on its own."""
        return self.exitcode == -15


@dataclass(repr=False)
class ChildFailedTable:
    """One ``ChildFailedError`` summary: the failed entrypoint and its entries in the order printed."""

    entrypoint: str | None
    failures: list[ChildFailure] = field(default_factory=list)
    line: int = 0


_TABLE_START = "ChildFailedError"
_ENTRY_FIELD = re.compile(
    r"^(?P<prefix>.*?)\s\s(?P<key>time|host|rank|exitcode|error[_ ]file|traceback)\s*: ?(?P<v>.*)$"
)
_FAILED_HEADER = re.compile(r"\s*(?P<what>\S(?:.*?\S)?) FAILED\s*$")
"""The entrypoint line after a table's prefix: ``train.py FAILED``."""
_ROOT = "Root Cause (first observed failure)"
_FLAT_ENTRY = re.compile(
    r"\brank\s*:?\s*(?P<rank>\d+) \(local[_ ]rank: (?P<local>\d+)\)\s*exitcode\s*:?\s*(?P<code>-?\d+)"
    r" \(pid: (?P<pid>\d+)\)"
)
"""An entry whose fields a paste ran together on one line (``rank2 (local_rank: 2)exitcode: -9 (pid: 48213)...``)."""
_RANK_FIELD = re.compile(r"(?P<rank>\d+) \(local[_ ]rank: (?P<local>\d+)\)")
_EXIT_FIELD = re.compile(r"(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)(?:\s+\((?P<sig>SIG\w+)\))?")
_SIGNAL_TB = re.compile(r"Signal (?P<num>\d+) \((?P<sig>SIG\w+)\) received by PID (?P<pid>\d+)")
_RULE = re.compile(r"={20,}\s*$")


def _failed_header(text: str, pending: dict[str, int]) -> tuple[str, str] | None:
    """(prefix, entrypoint) when ``text`` is the ``<entrypoint> FAILED`` line of a table whose start line had that
    prefix (stripped; with or without a space after it, ``[default0]:train.py FAILED``), the longest prefix first."""
    for p in sorted(pending, key=len, reverse=True):
        if text.startswith(p) and (m := _FAILED_HEADER.match(text, len(p))):
            return p, m.group("what")
    return None


def parse_child_failed_tables(lines: Iterable[tuple[int, str]]) -> list[ChildFailedTable]:
    """Every ChildFailedError table in ``lines`` (``(line number, text)`` pairs of one file, in order).

    A prefix before the fields (``[default0]:``, an srun label ``1: ``, a host name) is allowed; when two agents'
    tables interleave in one file, each prefix keeps its own table. A table copied from a rendered page (markdown ate
    the underscores: ``local rank``, ``error file``, an entrypoint with spaces) reads the same. Lines holding only a
    table's tail (its entries from a ``rank : R (local_rank: L)`` field on, no header) give a table without
    entrypoint, unless the lines hold a whole table too.
    """
    tables: list[ChildFailedTable] = []
    open_: dict[str, ChildFailedTable] = {}
    in_root: dict[str, bool] = {}
    current: dict[str, ChildFailure | None] = {}
    pending_start: dict[str, int] = {}
    for no, text in lines:
        if _TABLE_START in text and "ChildFailedError:" in text:
            prefix = text[
                : text.index("torch.distributed") if "torch.distributed" in text else text.index(_TABLE_START)
            ]
            pending_start[prefix.strip()] = no
            continue
        if not pending_start and not open_ and "(local" not in text:
            continue  # no table started or open: only a ChildFailedError line (or a tail's entry) can change that
        # " FAILED" in every header line: the prefix test and the regex run on those lines only
        header = _failed_header(text, pending_start) if " FAILED" in text else None
        if header is not None:
            p, what = header
            t = ChildFailedTable(what, line=pending_start.pop(p))
            tables.append(t)
            open_[p], in_root[p], current[p] = t, False, None
            continue
        if _ROOT in text:
            p = text[: text.index(_ROOT)].strip()
            if p in open_:
                in_root[p] = True
            continue
        f = _ENTRY_FIELD.match(text)
        if not f and "rank: " in text and (flat := _FLAT_ENTRY.search(text)) is not None:
            p = text[: flat.start()].strip()
            table = open_.get(p)
            if table is not None:
                code = int(flat.group("code"))
                sig = _SIGNAL_TB.search(text)
                table.failures.append(
                    ChildFailure(
                        int(flat.group("rank")),
                        int(flat.group("local")),
                        code,
                        int(flat.group("pid")),
                        sig.group("sig") if sig else signal_name(code),
                        root_cause=in_root[p],
                        line=no,
                        exit_line=no,
                    )
                )
                current[p] = None
            continue
        if not f:
            if _RULE.search(text):
                p = _RULE.sub("", text).strip()
                if p in open_ and current.get(p) is not None:
                    open_.pop(p)  # the closing rule ends the table
            continue
        p = f.group("prefix").strip()
        table = open_.get(p)
        key, value = f.group("key").replace(" ", "_"), f.group("v").strip()
        if table is None:
            if key != "rank" or not _RANK_FIELD.match(value):
                continue
            # an entry whose table's start is not in the lines (a paste of a table's tail): a table of its own,
            # kept only when the lines hold no whole table (beside one, it is field-like noise)
            table, start = ChildFailedTable(None, line=no), ChildFailure(rank=-1, local_rank=-1, line=no)
            table.failures.append(start)
            tables.append(table)
            open_[p], in_root[p], current[p] = table, False, start
        if key == "time":
            cur = ChildFailure(rank=-1, local_rank=-1, time=value, root_cause=in_root[p], line=no)
            current[p] = cur
            table.failures.append(cur)
            continue
        entry = current.get(p)
        if entry is None:
            continue
        if key == "host":
            entry.host = value
        elif key == "rank" and (r := _RANK_FIELD.match(value)):
            entry.rank, entry.local_rank, entry.line = int(r.group("rank")), int(r.group("local")), no
        elif key == "exitcode" and (e := _EXIT_FIELD.match(value)):
            entry.exitcode, entry.pid, entry.exit_line = int(e.group("code")), int(e.group("pid")), no
            entry.signal = e.group("sig") or signal_name(entry.exitcode)
        elif key == "error_file":
            entry.error_file = None if value == "<N/A>" else value
        elif key == "traceback":
            entry.traceback = value
            if s := _SIGNAL_TB.search(value):
                entry.signal = s.group("sig")
    if any(t.entrypoint is not None for t in tables):  # a whole table: the tails beside it are field-like noise
        tables = [t for t in tables if t.entrypoint is not None]
    for t in tables:
        t.failures = [f for f in t.failures if f.rank >= 0]
    return tables
