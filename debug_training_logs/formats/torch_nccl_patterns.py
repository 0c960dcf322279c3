"""The torch ProcessGroupNCCL messages as data: the literal needles that select candidate lines and the regexes
(with their small builders) that :mod:`debug_training_logs.formats.torch_nccl` runs on them."""

from __future__ import annotations

import re
from typing import Final

from debug_training_logs.formats.lazy_re import LazyPattern

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
