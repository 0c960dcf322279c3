"""PyTorch ProcessGroupNCCL watchdog / flight-recorder messages, torch 2.0-2.14: typed events from single lines.

Pure functions over one line of text (never a file). The scan selects candidate lines with the literal
:data:`NEEDLES`; :func:`parse_line` turns one candidate into a :class:`Parsed` (header + event) or None.

What the parser knows (worker_log_formats.md §0, §1, §7, §8):

* The c10 header is found **anywhere** in the line (Ray/srun/host/collector prefixes, tqdm glue, ANSI colour come
  first). Three styles: 2.4+ ``[rankN]:[E0521 08:02:12.123456789 file.cpp:689] `` (MMDD without zero padding,
  wall-clock seconds, a 9-digit CLOCK_MONOTONIC fraction that must never be used for ordering), 2.2-2.3
  ``[rankN]:[E file.cpp:537] `` and <=2.1 ``[E file.cpp:475] ``; the glog-native form is accepted too.
* Four process-group prefixes: ``[Rank N]`` (<=2.2), ``[PG uid Rank N]`` (2.3), ``[PG name (desc) Rank N]`` (2.4),
  ``[PG ID uid PG GUID guid(desc) Rank N]`` (2.5-2.14; the GUID may be a 40-hex hash, the desc any text).
  A PG's identity across ranks is its GUID/name when logged, else its uid (:attr:`PGPrefix.key`); SeqNums are only
  comparable within one identity.
* ``[Rank N]`` is always a **PG-local** rank and, in the WorkNCCL messages of 2.4-2.13, a stale cached value: it is
  kept as :attr:`WatchdogTimeout.work_rank` for the record and never used as the global rank. The global rank comes
  from ``[rankN]:`` (or the caller's attribution of the line).
* Hard-wrapped messages: :func:`parse_line` returns None for a cut message and :func:`looks_cut` says so; the caller
  joins the neighbouring line(s) and parses the joined text (see :func:`join_wrapped`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from debug_training_logs.formats.lazy_re import LazyPattern
from debug_training_logs.frozen import native_positional as _native_positional
from debug_training_logs.frozen import positional as _positional
from debug_training_logs.logs import fields as _fields

# --------------------------------------------------------------------------------------------------------------------
# Needles: short literal strings that select candidate lines (named data; the scan compiles them into one matcher).
# Several fragments per message on purpose: a hard wrap can split one of them, the others still select the pieces.
# --------------------------------------------------------------------------------------------------------------------

TIMEOUT_NEEDLES: Final = (
    "ollective operation timeout",  # "Watchdog caught collective operation timeout" / 2.0 "Caught collective ..."
    "milliseconds before timing out",  # the timeout line's tail (a wrap may cut the start)
    "timed out in blocking wait",
    "WorkNCCL(",  # any WorkNCCL record: a narrow wrap can cut both phrases above, rarely this one as well
    "Timeout(ms)=",
    "was aborted on rank",  # <= 2.0 Python side: "NCCL communicator was aborted on rank N.  Original reason ..."
)
# Each message holds at least two short needles apart from each other, so that one hard wrap (which may cut any word)
# leaves one of them whole on some piece; the sink then re-reads the neighbouring pieces.
STATUS_NEEDLES: Final = (
    "detected by watchdog at work",  # 2.4-2.5 "Exception (...) detected by watchdog at work: S", 2.6+ "... sequence id"
    "failure detected",  # 2.6+
    "PG status",  # 2.6+
    "Timeout at NCCL work: ",  # 2.3-2.5
    "last completed work: ",  # 2.6+ status tail
    "last enqueued",  # 2.3+ status lines and every dump-signal line
    "NCCL work: ",  # 2.3-2.5 status lines and every dump-signal line
    "last completed NCCL work: ",  # 2.3-2.5 status tail and every dump-signal line's tail
)
SIGNAL_NEEDLES: Final = (
    "dump the debug info",  # every "Received a ... signal ... dump the debug info" (2.3-2.14)
    "dump signal",  # 2.5+ "Observed flight recorder dump signal", 2.4 "detecting the dump signal" / "First watchdog"
    "signal dumping",  # 2.7+ "First PG on this rank to signal dumping."
    "First PG on this rank",  # 2.7+ "... to signal dumping", 2.4 "... detecting the dump signal through tcpstore"
    "First watchdog to set",  # 2.4
    "Observed flight recorder",  # 2.5+
    "via TCPStore",  # 2.5+
    "through tcpstore",  # 2.4
)
TEARDOWN_NEEDLES: Final = (
    "watchdog thread terminated",  # "NCCL watchdog thread terminated" (<= 2.2) / "Process group watchdog ..." (2.3+)
    "Terminating the process after attempting",  # 2.5+ FATAL line
    "dump debug info, due to",  # its tail
    "watchdog got stuck for",  # heartbeat monitor, 2.3+
    "Heartbeat monitor timed out",  # 2.3-2.4
    "detects no heartbeat",  # 2.2
)
EXIT_NEEDLES: Final = (
    " (local_rank: ",  # ChildFailedError "rank      : 3 (local_rank: 3)" (the inventory's literal too: shared)
    "exitcode  : ",  # ChildFailedError "exitcode  : -6 (pid: 12345)"
)
WATCHDOG_LIKE_NEEDLES: Final = (
    "atchdog",  # any other Watchdog/watchdog line: counted as unparsed when it is none of ours (a missed format)
)
NEEDLES: Final[tuple[str, ...]] = (
    TIMEOUT_NEEDLES + STATUS_NEEDLES + SIGNAL_NEEDLES + TEARDOWN_NEEDLES + EXIT_NEEDLES + WATCHDOG_LIKE_NEEDLES
)
"""Every literal that selects a candidate line for :func:`parse_line` (as in ``rg -F -e ... -e ...``)."""

# --------------------------------------------------------------------------------------------------------------------
# Regexes (run only on candidate lines).
# --------------------------------------------------------------------------------------------------------------------

_ANSI = LazyPattern(r"\x1b\[[0-9;?]*[A-Za-z]")


def _ws(pattern: str) -> str:
    r"""``pattern`` with every literal space made optional (``\s*``): a hard-wrapped paste loses or adds the blank
    where it broke a line (``[Rank 0]`` + ``Watchdog`` on the next line, or an indented continuation), so the re-joined
    text may have no space, or several, where the message had one."""
    return pattern.replace(" ", r"\s*")


_HEADER = re.compile(
    r"(?:\[?rank(?P<grank>\d+)\]:)?"  # "[" optional: pastes that cut the line's first character keep "rank7]:[E..."
    r"\[(?P<sev>[FEWIV])(?:(?P<mmdd>\d{3,4})\s*(?P<hms>\d\d:\d\d:\d\d)\.(?P<ns>\d{9})\s*|\s*)"
    r"(?P<src>[\w.\-]+):(?P<srcline>\d+)\]\s*"
)
_HEADER_OPENING = re.compile(r"\[[FEWIV]")
"""What every :data:`_HEADER` match holds: a cheap test first, since a line without it (a C++ frame, a table row)
would otherwise have the header tried at every position."""
_GLOG = re.compile(
    r"(?:^|[\s\]:])(?P<sev>[FEWI])(?P<mmdd>\d{4}) (?P<hms>\d\d:\d\d:\d\d)\.(?P<us>\d{6}) +\d+ "
    r"(?P<src>[\w.\-/]+):(?P<srcline>\d+)\] "
)
_GLOG_SECONDS = re.compile(r":\d\d\.\d{6} ")
"""What every :data:`_GLOG` match holds, found from a literal ``:`` (a fast search): :data:`_GLOG` itself is tried at
every position of a long line without a glog header."""
_GLOBAL_RANK = re.compile(r"\[rank(\d+)\]:")

_PG_PREFIX = LazyPattern(
    _ws(
        r"\[(?:"
        r"PG ID (?P<id>\d+) PG GUID (?P<guid>[^\s(\[\]]+?)(?:\((?P<desc5>.*?)\))? "
        r"|PG (?P<name>[^\s(\[\]]+?)(?: \((?P<desc4>.*?)\))? "
        r"|)"
        r"Rank (?P<rank>\d+)\]"
    )
)

# <= 1.9 prints no SeqNum; <= 2.0 may print TensorShape; 2.1+ NumelIn/NumelOut.
_WORK = r"WorkNCCL\((?P<work>(?:SeqNum=\d+,\s*)?OpType=.*?Timeout\(ms\)=\d+)\)"
_WORK_FIELDS = LazyPattern(
    _ws(
        r"(?:SeqNum=(?P<seq>\d+), )?OpType=(?P<op>[A-Z_]+)"
        r"(?:, NumelIn=(?P<nin>-?\d+), NumelOut=(?P<nout>-?\d+))?"
        r"(?:, TensorShape=\[(?P<shape>[^\]]*)\])?"
        r", Timeout\(ms\)=(?P<timeout>\d+)"
    )
)

_TIMEOUT = LazyPattern(
    _ws(r"(?P<which>Watchdog caught|Caught) collective operation timeout: ")
    + _WORK
    + _ws(r" ran for (?P<ran>\d+) milliseconds before timing out")
)
_BLOCKING = LazyPattern(_ws(r"Work ") + _WORK + _ws(r" timed out in blocking wait"))

_STATUS: Final = (
    # (family, regex): the watchdog's per-PG state when it found the failed work.
    (
        "failure_detected",  # 2.6-2.14 (double space after the prefix, no final period)
        LazyPattern(
            _ws(
                r"failure detected by watchdog at work sequence id: (?P<seq>-?\d+) PG status: "
                r"last enqueued work: (?P<e>-?\d+), last completed work: (?P<c>-?\d+)"
            )
            + r"(?!\d)"
        ),
    ),
    (
        "exception_detected",  # 2.4-2.5
        LazyPattern(
            _ws(
                r"Exception \(either an error or timeout\) detected by watchdog at work: (?P<seq>-?\d+), "
                r"last enqueued NCCL work: (?P<e>-?\d+), last completed NCCL work: (?P<c>-?\d+)\."
            )
        ),
    ),
    (
        "timeout_at",  # 2.3-2.5
        LazyPattern(
            _ws(
                r"Timeout at NCCL work: (?P<seq>-?\d+), "
                r"last enqueued NCCL work: (?P<e>-?\d+), last completed NCCL work: (?P<c>-?\d+)\."
            )
        ),
    ),
)

_EC = r"Last enqueued NCCL work: (?P<e>-?\d+), last completed NCCL work: (?P<c>-?\d+)\."
_DUMP: Final = (
    # (origin, family, regex). origin "local": this rank's own watchdog set the dump signal; "remote": another's did.
    (
        "local",
        "2.3",
        LazyPattern(
            _ws(r"Received a timeout signal from this local rank and will start to dump the debug info\. " + _EC)
        ),
    ),
    (
        "remote",
        "2.3",
        LazyPattern(_ws(r"Received a global timeout from another rank and will start to dump the debug info\. " + _EC)),
    ),
    (
        "local",
        "2.4",
        LazyPattern(_ws(r"Received a dump signal from this local rank and will start to dump the debug info\. " + _EC)),
    ),
    (
        "remote",
        "2.4",
        LazyPattern(
            _ws(r"Received a global dump signal from rank (?P<r>-?\d+), and will start to dump the debug info\. " + _EC)
        ),
    ),
    (
        "local",
        "2.5+",
        LazyPattern(
            _ws(
                r"Received a dump signal due to a collective timeout from this local rank and we will try our best to "
                r"dump the debug info\. " + _EC
            )
        ),
    ),
    (
        "remote",
        "2.5+",
        LazyPattern(
            _ws(
                r"Received a dump signal due to a collective timeout from rank (?P<r>-?\d+) and we will try our best "
                r"to dump the debug info\. " + _EC
            )
        ),
    ),
)


_STATUS_WORD: Final = {"failure_detected": "sequence", "exception_detected": "either", "timeout_at": "Timeout"}
"""A word each :data:`_STATUS` regex holds whole: a line without it skips that regex (every dump-signal line holds
``work``, and was searched for the three status wordings before)."""

_DUMP_WORD: Final = {"2.3": "start", "2.4": "start", "2.5+": "best"}
"""A word each family's :data:`_DUMP` messages hold whole (``will start to dump`` / ``try our best``): lines without it
skip that family's regexes."""


def _literal_ws(text: str) -> LazyPattern:
    return LazyPattern(_ws(re.escape(text).replace("\\ ", " ")))


_OBSERVED: Final = (
    ("2.5+", _literal_ws("Observed flight recorder dump signal from another rank via TCPStore.")),
    ("2.4", _literal_ws("First PG on this rank detecting the dump signal through tcpstore.")),
)
_FIRST: Final = (
    ("2.7+", _literal_ws("First PG on this rank to signal dumping.")),
    ("2.4", _literal_ws("First watchdog to set the dump signal.")),
)
_TERMINATED = LazyPattern(
    _ws(r"(?P<which>NCCL|Process group) watchdog thread terminated with exception: ") + r"(?P<what>.*)"
)
# <= 2.0, Python side (the main thread found the communicator aborted by the watchdog): the timeout repeated.
_ABORTED = LazyPattern(
    _ws(r"NCCL communicator was aborted on rank (?P<r>\d+)\. ")
    + r"\s*"
    + _ws(r"Original reason for failure was: ")
    + r"(?P<what>.*)"
)
_TIMEOUT_OPENINGS: Final = (
    "Watchdogcaughtcollectiveoperationtimeout:WorkNCCL(",
    "Caughtcollectiveoperationtimeout:WorkNCCL(",
    "WorkWorkNCCL(",
)
_LEADING_BRACKETS = LazyPattern(r"^(?:\s*\[[^\]]*\]?)*\s*")


def _cut_timeout(what: str) -> bool:
    """True when a wrapper's exception text is a timeout message cut short (``[Rank 3] Watc``), not another
    exception (``CUDA error: ...``): the wrapper must then be re-joined with the following line(s) first."""
    rest = _LEADING_BRACKETS.sub("", what, count=1).replace(" ", "")
    if not rest:
        return True
    return any(o.startswith(rest) or rest.startswith(o[:14]) for o in _TIMEOUT_OPENINGS)


_STUCK = LazyPattern(_ws(r"ProcessGroupNCCL's watchdog got stuck for (?P<s>\d+) seconds without making progress"))
_HEARTBEAT: Final = (
    ("heartbeat_timed_out", _literal_ws("Heartbeat monitor timed out!")),  # 2.3-2.4
    ("no_heartbeat", _literal_ws("monitoring thread detects no heartbeat and will finally kill the process!")),  # 2.2
    ("monitor_timeout", _literal_ws("NCCL monitor thread timeout.")),  # 2.2
)
_FATAL = LazyPattern(
    _ws(
        r"Terminating the process after attempting to dump debug info, due to "
        r"(?P<why>collective timeout or exception|ProcessGroupNCCL watchdog hang)"
    )
)
_TEARDOWN: Final = (
    ("some_failed", _literal_ws("Some NCCL operations have failed or timed out.")),
    ("take_down", _literal_ws("To avoid data inconsistency, we are taking the entire process down.")),
)
_EXIT_LOCAL = _literal_ws("ProcessGroupNCCL's watchdog detected an exception from the local rank.")
_EXIT_REMOTE = LazyPattern(
    _ws(r"ProcessGroupNCCL's watchdog detected a dump signal from rank (?P<r>-?\d+) and notified")
)
_CHILD_RANK = LazyPattern(r"^\s*rank\s+: (?P<rank>\d+) \(local_rank: (?P<local>\d+)\)")
_CHILD_EXIT = LazyPattern(r"^\s*exitcode\s+: (?P<code>-?\d+) \(pid: (?P<pid>\d+)\)(?:\s+\((?P<sig>SIG\w+)\))?")
_CHILD_SIGNAL = LazyPattern(r"Signal (?P<num>\d+) \((?P<sig>SIG\w+)\) received by PID (?P<pid>\d+)")

# Known lines that mention the watchdog but are no state of ours (frames of the C++ stack, env-var advice ...).
_WATCHDOG_BENIGN: Final = (
    "frame #",
    "Exception raised from",
    "Stack trace of the failed collective",
    "terminated normally",  # INFO at a clean shutdown (TORCH_CPP_LOG_LEVEL=INFO)
    "thread started",
)

# Message starts that, when the full message does not parse, mean the line was cut (hard wrap).
_CUT_STARTS: Final = (
    "ollective operation timeout",
    "Watchdog caught",
    "WorkNCCL(",
    "detected by watchdog at work",
    "Timeout at NCCL work:",
    "Received a ",
    "dump signal",
    "signal dumping",
    "watchdog thread terminated",
    "watchdog got stuck for",
    "Terminating the process after attempting",
    " timed out in blocking wait",
    "was aborted on rank",
)
# Message tails: a line holding one of these without a header may be the second half of a wrapped message.
_CUT_TAILS: Final = (
    "milliseconds before timing out",
    "Timeout(ms)=",
    "last completed work: ",
    "last completed NCCL work: ",
    "last enqueued work: ",
    "last enqueued NCCL work: ",
    "PG status: ",
    "dump the debug info",
)


# --------------------------------------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------------------------
# Functions
# --------------------------------------------------------------------------------------------------------------------


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes."""
    return _ANSI.sub("", text) if "\x1b" in text else text


# (the C constructors where the extension is built: ~0.2 us a record instead of ~1 us; the same objects)
_new_header: Final = _native_positional(Header) or _positional(Header)
_new_parsed: Final = _native_positional(Parsed) or _positional(Parsed)
_new_timeout: Final = _native_positional(WatchdogTimeout) or _positional(WatchdogTimeout)
_new_status: Final = _native_positional(StatusLine) or _positional(StatusLine)
_new_dump: Final = _native_positional(DumpSignal) or _positional(DumpSignal)
_new_first: Final = _native_positional(FirstToDump) or _positional(FirstToDump)
_new_teardown: Final = _native_positional(Teardown) or _positional(Teardown)
_new_fatal: Final = _native_positional(FatalTerminate) or _positional(FatalTerminate)
_new_terminated: Final = _native_positional(WatchdogTerminated) or _positional(WatchdogTerminated)


def find_header(text: str) -> tuple[Header | None, int]:
    """The first c10 (or glog-native) header anywhere in ``text`` and the offset where its message starts."""
    # Most headered lines open with it ("[rankN]:[E..."): a match there is the search's first match too.
    m = _HEADER.match(text) if text.startswith("[rank") else None
    if m is None:
        m = _HEADER.search(text) if _HEADER_OPENING.search(text) is not None else None
    if m is not None:
        grank_text, sev, mmdd, hms, _ns, src, srcline = m.groups()
        grank = int(grank_text) if grank_text is not None else None
        month: int | None
        day: int | None
        if mmdd is not None:
            month, day = divmod(int(mmdd), 100)
            style = "c10_2.4+"
            raw = f"{mmdd} {hms}"
        else:
            month = day = None
            style = "c10_2.2-2.3" if grank is not None else "c10_<=2.1"
            raw = None
        return _new_header(style, sev, month, day, hms, grank, f"{src}:{srcline}", raw), m.end()
    g = _GLOG.search(text) if _GLOG_SECONDS.search(text) is not None else None
    if g is not None:
        month, day = divmod(int(g.group("mmdd")), 100)
        gr = _GLOBAL_RANK.search(text, 0, g.start() + 1)
        return (
            Header(
                style="glog",
                severity=g.group("sev"),
                month=month,
                day=day,
                hms=g.group("hms"),
                global_rank=int(gr.group(1)) if gr else None,
                source=f"{g.group('src')}:{g.group('srcline')}",
                raw_time=f"{g.group('mmdd')} {g.group('hms')}",
            ),
            g.end(),
        )
    return None, 0


_SHARED_MAX = 4096
"""Distinct PG prefixes (and WorkNCCL records) a process keeps to hand out again (see :func:`_pg_from`)."""
_PG_SEEN: dict[str, PGPrefix] = {}
_WORK_SEEN: dict[str, Work | None] = {}


def _pg_from(m: re.Match[str]) -> PGPrefix:
    """The PG prefix ``m`` matched. The same prefix text gives the same object (its groups depend on the matched text
    alone: the regex has no look-around or anchor), so a file's lines share it: a rank writes its PG prefix on every
    line, and one object is pickled once per file result and rebuilt once when unpacked."""
    key = m.group(0)
    got = _PG_SEEN.get(key)
    if got is None:
        got = _pg_build(m)
        if len(_PG_SEEN) >= _SHARED_MAX:
            _PG_SEEN.clear()
        _PG_SEEN[key] = got
    return got


def _pg_build(m: re.Match[str]) -> PGPrefix:
    pg_id, guid, desc5, name, desc4, rank = m.group("id", "guid", "desc5", "name", "desc4", "rank")
    if pg_id is not None:
        return PGPrefix("guid", pg_id, guid, desc5 or None, int(rank))
    if name is not None:
        return PGPrefix("name", None, name, None if desc4 in (None, "", "undefined") else desc4, int(rank))
    return PGPrefix("rank", None, None, None, int(rank))


_BEFORE_SEEN: dict[str, PGPrefix | None] = {}
_UNSEEN: Final = object()
"""What the memos below answer for a text they do not hold (one lookup, safe if another thread empties them)."""
_SPAN_MAX = 256
"""Longest span before a message :func:`pg_prefix_before` keeps an answer for (a PG prefix and some blanks)."""


def pg_prefix_before(text: str, pos: int, start: int = 0) -> PGPrefix | None:
    """The PG prefix that ends right before ``text[pos]`` (only spaces between), searching from ``start``.

    A function of ``text[start:pos]`` alone (:data:`_PG_PREFIX` has no anchor or look-around, and the search stops
    at ``pos``), so the answer is kept per span: a rank writes the same prefix before each of its messages."""
    span = text[start:pos]
    kept = _BEFORE_SEEN.get(span, _UNSEEN)
    if kept is not _UNSEEN:
        return kept  # type: ignore[return-value]
    last: re.Match[str] | None = None
    for m in _PG_PREFIX.finditer(span):
        last = m
    got = None if last is None or span[last.end() :].strip() else _pg_from(last)
    if len(span) <= _SPAN_MAX:
        if len(_BEFORE_SEEN) >= _SHARED_MAX:
            _BEFORE_SEEN.clear()
        _BEFORE_SEEN[span] = got
    return got


_FIRST_SEEN: dict[str, PGPrefix | None] = {}


DEFAULT_PG_RANK: Final = re.compile(
    r"\[PG (?:ID 0 PG GUID 0(?:\(default_pg\))?|0(?: \(default_pg\))?) Rank (?P<r>\d+)\]"
)
"""The default PG's prefix (uid/name 0: created first; ``default_pg``): its rank is the global rank of the process that
wrote the line, whether or not a ``[rankN]:`` precedes it (2.3 ``[PG 0 Rank 5]``, 2.4 ``[PG 0 (default_pg) Rank 5]``,
2.5+ ``[PG ID 0 PG GUID 0(default_pg) Rank 5]``)."""


def default_pg_rank(text: str) -> int | None:
    """The global rank a line's default-PG prefix states (:data:`DEFAULT_PG_RANK`), else None."""
    m = DEFAULT_PG_RANK.search(text) if "[PG " in text else None
    return int(m.group("r")) if m else None


def parse_pg_prefix(text: str) -> PGPrefix | None:
    """The first PG prefix in ``text`` (``[PG ID 0 PG GUID 0(default_pg) Rank 6]`` ...), or None (kept per short
    ``text``, as in :func:`pg_prefix_before`)."""
    kept = _FIRST_SEEN.get(text, _UNSEEN)
    if kept is not _UNSEEN:
        return kept  # type: ignore[return-value]
    m = _PG_PREFIX.search(text)
    got = _pg_from(m) if m else None
    if len(text) <= _SPAN_MAX:
        if len(_FIRST_SEEN) >= _SHARED_MAX:
            _FIRST_SEEN.clear()
        _FIRST_SEEN[text] = got
    return got


def _int(v: str | None) -> int | None:
    return int(v) if v is not None else None


def _work(m: re.Match[str]) -> Work | None:
    """The WorkNCCL record of ``m`` (a function of its text: every rank of a collective shares one object)."""
    text = m.group("work")
    if text in _WORK_SEEN:
        return _WORK_SEEN[text]
    f = _WORK_FIELDS.search(text)
    got = None
    if f is not None:
        seq, op, nin, nout, shape, timeout = f.group("seq", "op", "nin", "nout", "shape", "timeout")
        got = Work(_int(seq), op, _int(nin), _int(nout), shape, int(timeout))
    if len(_WORK_SEEN) >= _SHARED_MAX:
        _WORK_SEEN.clear()
    _WORK_SEEN[text] = got
    return got


_TIMEOUT_SEEN: dict[str, WatchdogTimeout | None] = {}
_TIMEOUT_SEEN_MAX = 256
"""Timeout messages kept by :func:`_timeout_event` (a few ranks' worth: the copies of one come within a file)."""
_TIMEOUT_TEXT_MAX = 1024
"""Longest message text :func:`_timeout_event` keeps an answer for."""


def _timeout_event(text: str, start: int) -> WatchdogTimeout | None:
    """The timeout message in ``text[start:]`` (a function of that text alone: the search starts there and the PG
    prefix is looked for between ``start`` and the message). The watchdog repeats the message word for word in the
    ``watchdog thread terminated`` line and its ``what():`` copy, so the answer is kept for those."""
    rest = text[start:]
    kept = _TIMEOUT_SEEN.get(rest, _UNSEEN)
    if kept is not _UNSEEN:
        return kept  # type: ignore[return-value]
    got = _timeout_search(rest)
    if len(rest) <= _TIMEOUT_TEXT_MAX:
        if len(_TIMEOUT_SEEN) >= _TIMEOUT_SEEN_MAX:
            _TIMEOUT_SEEN.clear()
        _TIMEOUT_SEEN[rest] = got
    return got


def _timeout_search(text: str) -> WatchdogTimeout | None:
    m = _TIMEOUT.search(text)
    if m is None:
        return None
    work = _work(m)
    if work is None:
        return None
    pfx = pg_prefix_before(text, m.start())
    pg = pfx if pfx is not None and pfx.style != "rank" else None
    return _new_timeout(  # WatchdogTimeout(work, ran_for_ms, work_rank, pg, wait_path)
        work,
        int(m.group("ran")),
        pfx.pg_rank if pfx is not None else None,
        pg,
        m.group("which") == "Caught",
    )


def parse_message(text: str, start: int = 0) -> Event | None:
    """The event in ``text[start:]`` (the message part of a line), or None when it is none of ours or is cut.

    The quick ``in`` checks use words without spaces: a re-joined hard wrap may have lost the blank at the break."""
    # The watchdog-terminated wrapper embeds a timeout message: recognise the wrapper first.
    if "terminated" in text:
        t = _TERMINATED.search(text, start)
        if t is not None:
            embedded = _timeout_event(text, t.start("what"))
            if embedded is None and _cut_timeout(t.group("what")):
                return None  # the repeated timeout is cut (hard wrap): join the next line(s) first
            pfx = pg_prefix_before(text, t.start(), start)
            # WatchdogTerminated(wording, embedded, pg, headerless)
            return _new_terminated(t.group("which"), embedded, pfx, "what():" in text[: t.start()])
    if "aborted" in text:
        ab = _ABORTED.search(text, start)
        if ab is not None:
            embedded = _timeout_event(text, ab.start("what"))
            if embedded is None and _cut_timeout(ab.group("what")):
                return None
            return WatchdogTerminated(
                wording="communicator aborted",
                embedded=embedded,
                pg=None,
                headerless=True,
            )
    if "timeout" in text and "WorkNCCL(" in text:  # _TIMEOUT holds "WorkNCCL(" as written (outside _ws)
        ev = _timeout_event(text, start)
        if ev is not None:
            return ev
    if "blocking" in text:
        b = _BLOCKING.search(text, start)
        if b is not None:
            work = _work(b)
            if work is not None:
                pfx = pg_prefix_before(text, b.start(), start)
                return BlockingWaitTimeout(
                    work=work,
                    work_rank=pfx.pg_rank if pfx is not None else None,
                    pg=pfx if pfx is not None and pfx.style != "rank" else None,
                )
    if "work" in text:
        for family, rx in _STATUS:
            if _STATUS_WORD[family] not in text:
                continue
            s = rx.search(text, start)
            if s is not None:
                seq, e, c = s.group("seq", "e", "c")
                # StatusLine(family, seq, last_enqueued, last_completed, pg)
                return _new_status(family, int(seq), int(e), int(c), _status_prefix(text, s.start(), start))
    if "Received" in text:
        for origin, family, rx in _DUMP:
            if _DUMP_WORD[family] not in text:
                continue
            d = rx.search(text, start)
            if d is not None:
                return _new_dump(  # DumpSignal(origin, from_rank, last_enqueued, last_completed, family, pg)
                    origin,
                    _int(d.groupdict().get("r")),
                    int(d.group("e")),
                    int(d.group("c")),
                    family,
                    pg_prefix_before(text, d.start(), start),
                )
    if "signal" in text:
        for family, orx in _OBSERVED:
            o = orx.search(text, start)
            if o is not None:
                return DumpObserved(family=family, pg=pg_prefix_before(text, o.start(), start))
        for family, frx in _FIRST:
            f1 = frx.search(text, start)
            if f1 is not None:
                return _new_first(family, pg_prefix_before(text, f1.start(), start))  # FirstToDump(family, pg)
    if "stuck" in text:
        st = _STUCK.search(text, start)
        if st is not None:
            return HeartbeatKill("stuck", int(st.group("s")), pg_prefix_before(text, st.start(), start))
    if "eartbeat" in text or "monitor" in text:
        for kind, hrx in _HEARTBEAT:
            h = hrx.search(text, start)
            if h is not None:
                return HeartbeatKill(kind, None, pg_prefix_before(text, h.start(), start))
    if "Terminating" in text:
        f = _FATAL.search(text, start)
        if f is not None:
            # FatalTerminate(reason, pg)
            return _new_fatal(" ".join(f.group("why").split()), parse_pg_prefix(text[start : f.start()]))
    if "NCCL" in text or "inconsistency" in text:
        for kind, trx in _TEARDOWN:
            td = trx.search(text, start)
            if td is not None:
                return _new_teardown(kind, pg_prefix_before(text, td.start(), start))  # Teardown(kind, pg)
    if "detected" in text:
        if _EXIT_LOCAL.search(text, start):
            return WatchdogExitMessage(from_rank=None)
        x = _EXIT_REMOTE.search(text, start)
        if x is not None:
            return WatchdogExitMessage(from_rank=int(x.group("r")))
    return _child_failure(text[start:])


def _status_prefix(text: str, pos: int, start: int) -> PGPrefix | None:
    # 2.6+ writes " failure detected ..." after the prefix and its space: allow the extra blank.
    return pg_prefix_before(text, pos, start)


def _child_failure(text: str) -> Event | None:
    if "(local_rank: " in text:
        r = _CHILD_RANK.search(text)
        if r is not None:
            return ChildFailureRank(rank=int(r.group("rank")), local_rank=int(r.group("local")))
    if "exitcode" in text:
        x = _CHILD_EXIT.search(text)
        if x is not None:
            return ChildFailureExit(exitcode=int(x.group("code")), pid=int(x.group("pid")), signal=x.group("sig"))
    s = _CHILD_SIGNAL.search(text)
    if s is not None:
        return ChildFailureSignal(signal=s.group("sig"), pid=int(s.group("pid")))
    return None


_ABSURD_NUMBER = LazyPattern(r"\d{40,}")
"""A digit run no field of ours can hold (SeqNums, counts and ranks fit in 64 bits: at most 20 digits). Python's
``int()`` refuses more than 4,300 digits, and big ones cost quadratic time, so such runs never reach a number group."""


_ZERO_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_FORTY_DIGITS = b"0" * 40


def _text(line: str) -> str:
    """A line as the parsers read it: ANSI colour removed, absurdly long digit runs replaced by ``#``.

    An ASCII line (nearly all) is checked for such a run with a byte table instead of the regex (``\\d`` is then
    ``[0-9]``, so "40 zeros in a row once every digit is 0" is the same test, at memory speed)."""
    text = strip_ansi(line)
    if text.isascii() and (len(text) < 40 or _FORTY_DIGITS not in text.encode("ascii").translate(_ZERO_DIGITS)):
        return text
    return _ABSURD_NUMBER.sub("#", text)


def parse_line(line: str) -> Parsed | None:
    """Parse one candidate line (any prefixes, ANSI colour, tqdm glue); None when it holds none of our messages.

    A line cut by a hard wrap also gives None: check :func:`looks_cut` and parse the joined text instead.
    """
    if _NATIVE_LINE is not None:
        got = _NATIVE_LINE(line, _NATIVE_CTX)
        if got is not None:
            return got
    return parse_line_py(line)


def parse_line_py(line: str) -> Parsed | None:
    """:func:`parse_line` in Python alone (the reference the compiled fast path is tested against)."""
    text = _text(line)
    if "\r" in text:  # tqdm redraws: the message is after the last carriage return that precedes it
        text = _after_last_cr(text)
    header, start = find_header(text)
    ev = parse_message(text, start)
    if ev is None:
        return None
    if header is not None and header.style == "c10_2.2-2.3":
        ev = _as_uid(ev)
    grank = header.global_rank if header is not None else None
    if grank is None:
        g = _GLOBAL_RANK.search(text)
        grank = int(g.group(1)) if g else None
    return _new_parsed(header, grank, ev)


def _native_line() -> Callable[[str, tuple[object, ...]], Parsed | None] | None:
    mod = _fields.native()
    return getattr(mod, "nccl_line", None) if mod is not None else None


_NATIVE_LINE: Final = _native_line()
"""``_fields.nccl_line``: :func:`parse_line` for a canonical torch 2.4+ line (``[rankN]:`` + c10 header + PG prefix +
one of the frequent messages), at ~1/5 of the Python cost; None for any other line (then the Python parser answers).
None when the extension is not built or ``DEBUG_TRAINING_LOGS_NO_NATIVE`` is set."""


def _native_ctx() -> tuple[object, ...]:
    """What ``nccl_line`` builds its answer with: the positional constructors (the C ones of ``_frozen`` when built)
    and the memos the Python path shares (so a line shares its PG prefix and WorkNCCL objects whichever path read it).
    """
    classes: tuple[type, ...] = (Header, Parsed, WatchdogTimeout, StatusLine, DumpSignal, FirstToDump, Teardown)
    classes += (FatalTerminate, WatchdogTerminated, DumpObserved, PGPrefix, Work)
    made: tuple[object, ...] = tuple(
        _native_positional(cls) or _positional(cls) for cls in (*classes, ChildFailureRank, ChildFailureExit)
    )
    return (*made[:-2], _PG_SEEN, _WORK_SEEN, _TIMEOUT_SEEN, *made[-2:])


_NATIVE_CTX: Final = _native_ctx() if _NATIVE_LINE is not None else ()


def _as_uid(ev: Event) -> Event:
    """torch 2.3 prints ``[PG <uid> Rank N]``, which reads like 2.4's ``[PG <name> Rank N]``: the header style
    (no time: 2.2-2.3) says it is a uid (a per-process counter, not a cross-rank name)."""
    pg = getattr(ev, "pg", None)
    if isinstance(pg, PGPrefix) and pg.style == "name":
        return replace(ev, pg=PGPrefix("uid", pg.pg_name, None, pg.pg_desc, pg.pg_rank))  # type: ignore[arg-type]
    return ev


def _after_last_cr(text: str) -> str:
    h = _HEADER.search(text)
    cut = text.rfind("\r", 0, h.start()) if h is not None else text.rfind("\r")
    return text[cut + 1 :] if cut >= 0 else text


def looks_cut(line: str) -> str | None:
    """Why ``line`` looks like part of a hard-wrapped message (``head`` or ``tail``), else None.

    ``head``: a message of ours starts here but does not end (join the following line(s)).
    ``tail``: the line carries the end of one of our messages without its start (join the preceding line).
    Call only for a candidate line :func:`parse_line` returned None for.
    """
    text = _text(line)
    if any(s in text for s in _CUT_STARTS):
        return "head"
    if any(s in text for s in _CUT_TAILS):
        return "tail"
    header, _ = find_header(text)
    if header is not None and (parse_pg_prefix(text) is not None or text.rstrip().endswith("]")):
        return "head"  # a header and a PG prefix, then the text is cut before any needle
    return None


def maybe_cut_number(line: str, p: Parsed) -> bool:
    """True when ``line`` parsed but may end inside a number a hard wrap cut: torch 2.6+ status lines end with the
    last completed SeqNum and no period, so ``... last completed work: 46`` + ``117`` parses as 46. Suspect it when
    the line ends with that number and it has fewer digits than the last enqueued one (C is normally E or E-1)."""
    ev = p.event
    if not isinstance(ev, StatusLine) or ev.family != "failure_detected":
        return False
    tail = strip_ansi(line).rstrip()
    return tail.endswith(str(ev.last_completed)) and len(str(ev.last_completed)) < len(str(ev.last_enqueued))


def is_benign(line: str) -> bool:
    """A candidate line that is known noise: a C++ stack frame naming the watchdog, env-var advice."""
    return any(b in line for b in _WATCHDOG_BENIGN)


def is_watchdog_like(line: str) -> bool:
    """A candidate line that talks about the NCCL watchdog but is none of our messages (a format we do not know),
    as opposed to known noise (C++ stack frames, env-var advice) or another program's 'watchdog'."""
    text = _text(line)
    if any(b in text for b in _WATCHDOG_BENIGN):
        return False
    return "NCCL" in text or "WorkNCCL" in text or find_header(text)[0] is not None


# Prefixes a collector, launcher or log viewer puts before a record. "Strong" ones are written once per physical
# line by a program (a wrapped continuation never has one); a bare time or indentation may begin a wrapped piece.
_STRONG_PREFIX = re.compile(
    r"^(?:"
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+"  # docker / collector timestamps
    r"|\[\d{4}-\d\d-\d\d[^\]]{0,40}\]\s*"  # [2024-01-05 10:22:33,123]
    r"|\[\d+\]\s+"  # log viewer line numbers: [51207]
    r"|(?:P\d+ )?\d+: "  # srun --label
    r"|\([^()]{0,200}?pid=\d+[^()]{0,100}\)\s*"  # Ray actor prefix
    r"|\S+ \[(?:stderr|stdout)\]\s*"  # milabench
    r"|\[[\w.\-]+:\d+\]:\s*"  # torchrun --tee [host:local_rank]:
    r"|\[default\d+\]:\s*"  # torchrun/accelerate [default3]:
    r")"
)
_WEAK_PREFIX = re.compile(r"^(?:\s+|\d\d:\d\d:\d\d(?:\.\d+)?\s+)")
# A line that ends inside a record opener (a wrap cut "[rank1" | "2]:[E521 ..." or "[E ProcessGroupN" | "CCL.cpp...").
_OPENER_CUT = LazyPattern(
    r"^(?:\[rank\d+\]:)?\[(?:r(?:a(?:n(?:k(?:\d+(?:\](?::)?)?)?)?)?)?)?$"
    r"|^(?:\[rank\d+\]:)?\[[FEWIV](?:\d{0,4}(?: [\d:.]*)?)?(?: ?[\w.\-]*(?::\d*)?)?$"
    r"|^\([A-Za-z_][\w.]*(?:\[(?:r(?:a(?:n(?:k(?:=\d*)?)?)?)?)?)?$"  # a Ray actor prefix cut before its rank
)
# What a record (a log line of its own, not a wrapped piece) starts with once the prefixes are gone.
_RECORD_STARTS: Final = (
    "terminate called",
    "what():",
    "Exception raised from",
    "frame #",
    "Traceback",
    'File "',
    "[NeMo ",
    "srun:",
    "slurmstepd:",
    "Epoch ",
    "WARNING:",
    "ERROR:",
    "INFO:",
    "RuntimeError",
    "torch.",
)
_NCCL_LIB_LINE = re.compile(r"^[A-Za-z0-9][\w.\-]*:\d+:\d+ \[\d+\]")


def strip_leading_prefixes(text: str) -> tuple[str, bool]:
    """``text`` without the collector/launcher prefixes before its record (at most 6), and whether a strong one (a
    launcher's or collector's, written once per physical line) was among them."""
    strong = False
    for _ in range(6):
        m = _STRONG_PREFIX.match(text)
        if m is not None and m.group(0):
            strong = True
        else:
            m = _WEAK_PREFIX.match(text)
            if m is None or not m.group(0):
                break
        text = text[m.end() :]
    return text, strong


def starts_new_record(line: str) -> bool:
    """True when ``line`` begins a log record of its own (so it cannot be a wrapped continuation).

    Strict on purpose: a wrapped piece may begin with ``[PG ID ...`` or ``[Rank 3]`` (the break fell before it), so
    a bare ``[`` is not a record start; a c10/glog header, ``[rankN]:``, a launcher prefix, a known record opening or a
    line that ends inside such an opener is."""
    if line.startswith("[rank") and _GLOBAL_RANK.match(line) is not None:
        return True  # what :func:`_starts_new_record` says of such a line, without removing prefixes first
    return _starts_new_record(line)


def _starts_new_record(line: str) -> bool:
    text = strip_ansi(line)
    if not text.strip():
        return True
    rest, strong = strip_leading_prefixes(text)
    if strong or not rest:
        return True
    if _GLOBAL_RANK.match(rest) or _HEADER.match(rest) or _GLOG.match(rest) or _NCCL_LIB_LINE.match(rest):
        return True
    return rest.startswith(_RECORD_STARTS) or _OPENER_CUT.match(rest.rstrip()) is not None


def join_wrapped(parts: list[str]) -> str:
    """Re-join the pieces of a hard-wrapped line: line breaks removed and a continuation's indentation dropped (a
    paste often indents it). Whether a blank stood at the break cannot be known; the message regexes accept both."""
    if not parts:
        return ""
    head = parts[0].rstrip("\r\n")
    return head + "".join(p.rstrip("\r\n").lstrip() for p in parts[1:])


def wall_time(header: Header | None) -> tuple[int, int, str] | None:
    """``(month, day, "HH:MM:SS")`` of a header, for ordering by wall clock only (never the monotonic fraction)."""
    if header is None or header.month is None or header.day is None or header.hms is None:
        return None
    return header.month, header.day, header.hms
