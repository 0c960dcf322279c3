"""The NCCL table's neighbouring facts (watchdog terminated, heartbeat kill, exit signals of ChildFailedError
tables ...), the message families (torch versions) its lines show, and a hit as cited evidence."""

from __future__ import annotations

from collections.abc import Iterable

from debug_training_logs.analysis.nccl_hits import Hit
from debug_training_logs.analysis.nccl_row_build import _Ev
from debug_training_logs.analysis.nccl_rows import EvidenceLine
from debug_training_logs.formats import torch_nccl_types as tnt
from debug_training_logs.textcut import TEXT_CUT, cut

_FACT_KINDS = {
    tnt.WatchdogTerminated: "watchdog_terminated",
    tnt.HeartbeatKill: "heartbeat_monitor_kill",
    tnt.FatalTerminate: "terminated_fatal",
    tnt.BlockingWaitTimeout: "blocking_wait_timeout",
    tnt.WatchdogExitMessage: "watchdog_exit_message",
}


def _fact_detail(ev: tnt.Event) -> str:
    if isinstance(ev, tnt.WatchdogTerminated):
        return f"{ev.wording} watchdog thread terminated with exception"
    if isinstance(ev, tnt.HeartbeatKill):
        return f"watchdog got stuck for {ev.seconds} seconds" if ev.seconds is not None else ev.kind
    if isinstance(ev, tnt.FatalTerminate):
        return f"Terminating the process ... due to {ev.reason}"
    if isinstance(ev, tnt.BlockingWaitTimeout):
        return f"{ev.work.op_type} SeqNum {ev.work.seq} timed out in blocking wait"
    if isinstance(ev, tnt.WatchdogExitMessage):
        return "exception from the local rank" if ev.from_rank is None else f"dump signal from rank {ev.from_rank}"
    return type(ev).__name__


def _child_exits(file_evs: list[_Ev]) -> list[tuple[int, str, _Ev]]:
    """(rank, 'SIGABRT (exitcode -6)', evidence) from the ChildFailedError tables of one file (rows in order)."""
    out: list[tuple[int, str, _Ev]] = []
    last_rank: tuple[int, int] | None = None
    for e in file_evs:
        ev = e.ev
        if isinstance(ev, tnt.ChildFailureRank):
            last_rank = (ev.rank, e.hit.line)
        elif isinstance(ev, tnt.ChildFailureExit) and last_rank is not None and e.hit.line == last_rank[1] + 1:
            sig = ev.signal or (_SIGNALS.get(-ev.exitcode) if ev.exitcode < 0 else None)
            detail = f"{sig} (exitcode {ev.exitcode})" if sig else f"exitcode {ev.exitcode}"
            out.append((last_rank[0], detail, e))
            last_rank = None
    return out


_SIGNALS = {6: "SIGABRT", 9: "SIGKILL", 15: "SIGTERM", 11: "SIGSEGV", 7: "SIGBUS", 2: "SIGINT"}


_PG_CARRIERS = (tnt.StatusLine, tnt.DumpSignal, tnt.DumpObserved, tnt.FirstToDump, tnt.WatchdogTerminated)
"""Events whose prefix is the ProcessGroupNCCL one (WorkNCCL's ``[Rank N]`` says nothing about the version)."""


_STATUS_FAMILIES = {
    "failure_detected": "torch 2.6+ 'failure detected by watchdog'",
    "exception_detected": "torch 2.4-2.5 'Exception (either an error or timeout) detected'",
    "timeout_at": "torch 2.3-2.5 'Timeout at NCCL work'",
}
_HEADER_FAMILIES = {
    "c10_2.4+": "c10 header with time (torch 2.4+)",
    "c10_2.2-2.3": "c10 header [rankN]: no time (torch 2.2-2.3)",
    "c10_<=2.1": "c10 header without rank (torch <= 2.1)",
    "glog": "glog-native header",
}
_PREFIX_FAMILIES = {
    "rank": "[Rank N] prefix (torch <= 2.2)",
    "uid": "[PG n Rank N] or [PG name Rank N] prefix",
    "name": "[PG n Rank N] or [PG name (desc) Rank N] prefix (torch 2.3-2.4)",
    "guid": "[PG ID n PG GUID g(desc) Rank N] prefix (torch 2.5+)",
}


def _families(hits: Iterable[Hit]) -> list[str]:
    fams: set[str] = set()
    seen: set[tuple[type, str | None, str | None, str | None]] = set()
    for h in hits:
        ev = h.event
        # what the families below read of a hit; most hits repeat a few of these (one per kind of line per file)
        pgp = getattr(ev, "pg", None)
        key = (
            type(ev),
            getattr(ev, "family", None),
            h.header.style if h.header is not None else None,
            pgp.style if isinstance(pgp, tnt.PGPrefix) else None,
        )
        if key in seen:
            continue
        seen.add(key)
        if isinstance(ev, tnt.StatusLine):
            fams.add(_STATUS_FAMILIES[ev.family])
        elif isinstance(ev, tnt.DumpSignal):
            fams.add(f"torch {ev.family} dump-signal wording")
        if h.header is not None:
            fams.add(_HEADER_FAMILIES[h.header.style])
        pg = getattr(ev, "pg", None) if isinstance(ev, _PG_CARRIERS) else None
        if isinstance(pg, tnt.PGPrefix):
            fams.add(_PREFIX_FAMILIES[pg.style])
    return sorted(fams)


def _ev_evidence(e: _Ev) -> EvidenceLine:
    return EvidenceLine(e.file, e.hit.line, cut(e.hit.text, TEXT_CUT))
