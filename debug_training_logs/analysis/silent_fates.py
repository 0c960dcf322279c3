"""Fates read from what a rank did not do: it stalled, left early, went silent with its node, or its error came only
after the others had begun to wait for it (the error ended a stall, it did not start one).

Part of gathering the causal model (:mod:`~debug_training_logs.analysis.fate_events`): these run after every rank's
own and launcher events are in, and give the silent ranks the primary event their fate implies. Pure and MCP-free.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from debug_training_logs.analysis.evidence_triggers import CLOCK_SLACK
from debug_training_logs.analysis.evidence_types import Hit, JobEvidence
from debug_training_logs.analysis.fates import REACTED_TO_PEER, WAITED_ON_PEER, Fate, RankEvent
from debug_training_logs.analysis.inventory_types import FileInventory
from debug_training_logs.analysis.launcher import LauncherFacts
from debug_training_logs.formats import gloo, torchrun
from debug_training_logs.formats.progress import step_number


def step_of(h: Hit | None) -> int | None:
    return step_number(h.text) if h is not None else None


def silent_fates(ev: JobEvidence, fates: dict[int, Fate]) -> None:
    """Give the ranks that left the story silently the primary event their fate implies: a stall (they never entered
    the collective the others waited in) or an early exit (they ended without an error while the others waited)."""
    waited = [f for f in fates.values() if any(e.kind in WAITED_ON_PEER or e.kind == "report" for e in f.events)]
    if not waited:
        return
    n = ev.nccl
    lf = ev.launcher
    stalled: set[int] = set()
    if n.timed_out:
        stalled |= n.job_stragglers
    if lf is not None:
        named, how = lf.culprits(set(ev.worker.ranks))
        if how == "straggler":
            stalled |= named
    stalled |= {r for r, f in fates.items() if f.end == "stuck"}
    finished_clean = ev.worker.last_by_rank.get("clean_end", {})
    lost = _lost_nodes(ev, fates, waited) if lf is not None else {}
    for r, f in fates.items():
        if f.end == "absent" or any(e.primary for e in f.events) or f in waited:
            continue
        quiet = not any(e.kind in REACTED_TO_PEER or e.kind == "report" for e in f.events)
        if not quiet:
            continue
        if r in lost:
            line = lost[r]
            f.events.append(
                RankEvent(
                    r,
                    "node_lost",
                    "went silent with its whole node at once (no error, no launcher report)",
                    line,
                    when=line.time,
                )
            )
            f.end, f.why = "unknown", "its node's log stops with no error and no launcher report: the node died"
            continue
        own_end = finished_clean.get(r)
        # it left: its own end line, or an exit code 0, or its launcher reported its node's failed workers and
        # stopped the ones still running without it among either (it had already exited, cleanly)
        gone = f.exit_code == 0 or (lf is not None and _exited_before_teardown(lf, ev, r))
        left = f.stopped_by is None and f.exit_code in (None, 0) and (own_end is not None or gone)
        files = ev.worker.files_of_rank(r)
        # a file's last line is the rank's only in a file of its own (in a shared one it may be any rank's): it may
        # stand for where a rank that left is last seen, not for where a stalled one stopped
        alone = len(files) == 1 and len(ev.worker.ranks_of_file(files[0])) == 1
        file_end = ev.worker.file_end.get(files[0]) if files else None
        end_line = own_end or f.last_progress or file_end
        if left and r not in stalled and end_line is not None:
            line = end_line
            f.events.append(
                RankEvent(
                    r, "early_exit", "left the job without an error while the others waited", line, when=line.earliest
                )
            )
            f.end, f.why = "exited_early", "ended without an error while its peers still waited for it"
            continue
        if r in stalled:
            line = own_end or f.last_progress or (file_end if alone else None) or Hit("state", "", 0, "", r, None)
            f.events.append(
                RankEvent(
                    r,
                    "stall",
                    "never entered the collective the others waited in",
                    line,
                    when=f.last_progress.earliest if f.last_progress is not None else None,
                )
            )
            if f.end in ("unknown", "stopped"):
                f.end, f.why = "stuck", "alive but outside the collective the others waited in (it never timed out)"


_IO_FAILURE = re.compile(
    r"[Tt]imed? ?out|Timeout|ConnectionError|Connection reset|IOError|OSError|BrokenPipe|EOFError|[Rr]ead error"
    r"|No such file|Input/output error|socket|SSL"
)
"""An own error of the kind a hung read ends in (a timeout, a dropped connection, an I/O error)."""


def collective_start(ev: JobEvidence, fates: dict[int, Fate]) -> datetime | None:
    """When the others began to wait: the NCCL table's stuck collective start, else the earliest gloo timeout minus
    how long it waited."""
    start = ev.nccl.collective_start()
    if start is not None:
        return start
    starts = []
    for f in fates.values():
        for e in f.events:
            if e.kind != "peer_timeout" or e.line.earliest is None:
                continue
            g = gloo.parse_line(e.line.text)
            ms = g.timeout_ms if isinstance(g, gloo.GlooError) else None
            if ms is not None:
                starts.append(e.line.earliest - timedelta(milliseconds=ms))
    return min(starts) if starts else None


def late_errors(ev: JobEvidence, fates: dict[int, Fate]) -> None:
    """A rank whose read hung and failed only after the others had begun to wait was stalled from its last
    progress: its error is when the stall ended, not when it began (its primary event is the stall). The others
    began to wait when the stuck collective started, or (no timeout to date it) after their own last progress."""
    known = collective_start(ev, fates)
    for f in fates.values():
        p = f.primary
        last = f.last_progress
        if p is not None and p.kind in ("data_error", "exception") and _timed_out_after_others(f, p, fates):
            f.events.remove(p)
            f.events.append(
                RankEvent(
                    f.rank,
                    "stall",
                    f"stalled: its own wait timed out only after the others had timed out waiting for it ({p.what}, "
                    f"{p.line.file}:{p.line.line})",
                    p.line,
                )
            )
            continue
        if p is None or last is None or last.latest is None or p.earliest is None:
            continue
        start = known
        if start is None:
            others = [g.last_progress.latest for g in fates.values() if g is not f and g.last_progress is not None]
            start = max((t for t in others if t is not None), default=None)
        if start is None:
            continue
        io = p.kind == "data_error" or (p.kind == "exception" and _IO_FAILURE.search(p.line.text) is not None)
        if not io:
            continue
        by_time = p.earliest > start + CLOCK_SLACK and last.latest <= start + CLOCK_SLACK
        if not by_time and not _after_others_waited(f, p, fates):
            continue
        step = step_of(last)
        f.events.remove(p)
        f.events.append(
            RankEvent(
                f.rank,
                "stall",
                f"stopped after its last progress{f' (step {step})' if step is not None else ''}; its read failed "
                f"only later ({p.what}, {p.line.file}:{p.line.line})",
                last,
                when=last.earliest,
                later=p.line,
            )
        )


_OWN_TIMEOUT = re.compile(r"[Tt]imed? ?out|Timeout")


def _timed_out_after_others(f: Fate, p: RankEvent, fates: dict[int, Fate]) -> bool:
    """With no time to go by (no progress line, untimed lines): the rank's own error is a timeout (its read, its
    loader, its socket waited too), and in the file both are written to, other ranks had reported timing out while
    waiting for a peer before it, and nothing else failed before them: it was the one they waited for."""
    if f.last_progress is not None and f.last_progress.latest is not None and p.earliest is not None:
        return False  # timed: _late_errors decides by the times
    if _OWN_TIMEOUT.search(p.line.text) is None:
        return False
    waits = [
        e.line.line
        for g in fates.values()
        if g is not f
        for e in g.events
        if e.kind == "peer_timeout" and e.line.file == p.line.file and e.line.line < p.line.line
    ]
    if not waits:
        return False
    first_wait = min(waits)
    return not any(
        e.primary and e.line.file == p.line.file and e.line.line < first_wait
        for g in fates.values()
        if g is not f
        for e in g.events
    )


def _lost_nodes(ev: JobEvidence, fates: dict[int, Fate], waited: list[Fate]) -> dict[int, Hit]:
    """Ranks of a node that died whole: every rank of one node's files went quiet (no error, no consequence, not
    stopped), its launcher reported nothing (no failed worker, no teardown, no table) while the other nodes' agents
    did, and its log ends before the others reacted. Each rank -> the node's last timed line."""
    lf = ev.launcher
    assert lf is not None
    w = ev.worker
    files = w.job.inventory.files
    reported = {a.file for a in lf.agents if a.worker_failed or a.teardowns} | {rel for rel, _t in lf.tables}
    if not reported:
        return {}
    reporting_nodes = {f.node for f in files if f.rel in reported and f.node is not None}
    first_reaction = min((e.line.earliest for f in waited for e in f.events if e.line.earliest), default=None)
    # a node: its named files together, else one file holding several ranks (a node's combined log); a file of one
    # rank with no node name cannot be told from a silent rank
    by_node: dict[str, list[FileInventory]] = {}
    for f_inv in files:
        key = f_inv.node if f_inv.node is not None else f_inv.rel if len(f_inv.ranks) > 1 else None
        if key is not None:
            by_node.setdefault(key, []).append(f_inv)
    out: dict[int, Hit] = {}
    for node, node_files in by_node.items():
        ranks = {r for f in node_files for r in f.ranks}
        if node in reporting_nodes or any(f.rel in reported for f in node_files) or not ranks:
            continue
        if any(fates[r].events for r in ranks if r in fates):
            continue
        ends = [e for f in node_files if (e := w.file_end.get(f.rel)) is not None and e.time is not None]
        if not ends:
            # no time to compare (its lines carry none): its own launcher's lines are there, and it said nothing of
            # the failure the other nodes' launchers reported: it went down with its workers
            if not any(f.launcher_lines for f in node_files):
                continue
            last = [p for r in ranks if (p := w.last_by_rank.get("progress", {}).get(r)) is not None]
            if not last:
                continue
            ends = [max(last, key=lambda h: (h.file, h.line))]
        end = max(ends, key=lambda e: e.time or datetime.min)
        if first_reaction is not None and end.time is not None and end.time > first_reaction:
            continue
        for r in ranks:
            out[r] = end
    return out


def _exited_before_teardown(lf: LauncherFacts, ev: JobEvidence, rank: int) -> bool:
    """Its node's launcher reported the workers that failed and SIGTERMed those still running, and this rank is
    among neither: it had exited before, with code 0 (torchrun's table lists every worker that did not). Its node's
    table is one in its own file, or one whose ranks lie on both sides of it (torchrun gives a node's workers
    consecutive global ranks)."""
    files = set(ev.worker.files_of_rank(rank))
    # (a file several agents wrote to, sbatch's one slurm-<job>.out, holds other nodes' tables too)
    own = {a.file for a in lf.agents if a.file in files and len(a.pids) <= 1}
    tables = [t for rel, t in lf.tables if rel in own or _node_holds(t, rank)]
    if not tables:
        return False
    listed = {f.rank for t in tables for f in t.failures}
    tabled_pids = {f.pid for t in tables for f in t.failures}
    # a SIGTERMed worker no table names may be this rank (a table cut off): the workers its node's agent stopped
    # (one that stopped a worker a table lists, or the one agent of the rank's own file; another node's agent
    # sharing a file stops only its own node's workers)
    stopped = [pids for a in lf.agents for pids in a.sigterms.values() if pids & tabled_pids or a.file in own]
    unaccounted = set().union(*stopped) - tabled_pids
    return bool(listed) and rank not in listed and not unaccounted


def _node_holds(t: torchrun.ChildFailedTable, rank: int) -> bool:
    """The table's ranks are one node's (one global rank - local rank offset) and lie below and above ``rank``."""
    bases = {f.rank - f.local_rank for f in t.failures}
    ranks = [f.rank for f in t.failures]
    return len(bases) == 1 and min(ranks) < rank < max(ranks)


def stuck_after_error(fates: dict[int, Fate]) -> None:
    """A rank whose error did not end it (it stayed alive, outside the collective the others waited in, or nothing
    says it died: no exception reached the top, no exit code) while the others waited stalled on it: a data loader
    that raised and then hung, a read that failed and was never retried."""
    waited = any(e.kind in WAITED_ON_PEER for f in fates.values() for e in f.events)
    for f in fates.values():
        p = f.primary
        # (a SIGABRT or SIGTERM ended it from outside: the watchdog's abort, its agent's teardown)
        alive = f.end == "stuck" or (f.end in ("unknown", "stopped") and f.exit_code in (None, -6, -15) and waited)
        if not alive or p is None or p.kind not in ("data_error", "exception") or p.weak:
            continue  # (an exit code alone says the rank died: it did not stay alive)
        f.events.remove(p)
        f.events.append(RankEvent(f.rank, "stall", f"stalled after {p.what} (it stayed alive)", p.line, when=p.when))


def _after_others_waited(f: Fate, p: RankEvent, fates: dict[int, Fate]) -> bool:
    """By the order of one file's lines (what was written first): other ranks reported waiting for a peer before
    ``p``, and ``f``'s last progress line came before their reports."""
    last = f.last_progress
    if last is None or last.file != p.line.file:
        return False
    waits = [
        e.line.line
        for g in fates.values()
        if g is not f
        for e in g.events
        if e.kind in WAITED_ON_PEER and e.line.file == p.line.file and e.line.line < p.line.line
    ]
    return bool(waits) and last.line < min(waits)
