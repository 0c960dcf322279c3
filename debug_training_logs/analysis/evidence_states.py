"""Per-rank states (:func:`rank_states`: finished / crashed / watchdog_killed / waiting / stuck / torn_down / absent /
unknown, with the deciding line, exit code, signal, the exception that reached the top and the module it came from)
and the facts derived with them, computed once per evidence: :func:`killers` and :func:`job_finished` (the lines
that rule out a clean run), :func:`fabric_evidence`, :func:`counters_known`, :func:`precedes_symptom` (time bounds
first, then the causal order of states), :func:`node_failure_facts`.

When the time bounds cannot order a line against the first symptom, the states can: the last output of a rank that
crashed (or stalled) and never entered the collective the others waited in came before their timeout.
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from debug_training_logs.analysis.evidence_triggers import (
    _EXC_NAME,
    CLOCK_SLACK,
    _matches,
    first_symptom,
    is_consequence,
    is_warning,
    triggers,
)
from debug_training_logs.analysis.evidence_types import (
    Hit,
    JobEvidence,
    NcclRow,
    RankState,
    SilentNode,
    Trigger,
    WorkerEvidence,
    _new_evidence_hit,
    _order_key,
)
from debug_training_logs.analysis.inventory_types import FileInventory
from debug_training_logs.formats.progress import step_number
from debug_training_logs.textcut import cut

if TYPE_CHECKING:  # the AIS and dump modules are imported where those are read: the worker scan's sinks need none
    from debug_training_logs.analysis import hang_facts


KILLER_SIGNALS = ("cuda_oom", "cuda_error", "xid", "slurm_cancel", "slurm_oom", "child_failed", "traceback")


def killers(w: WorkerEvidence, ev: JobEvidence | None = None, *, exceptions: bool = True) -> list[Hit]:
    """Lines that show a process was killed or crashed (any of them rules out a clean run).

    With the job's evidence, an exception counts only when it is a rank's unhandled failure (not inside a warning or
    retry line, no progress of the rank after it), and a traceback alone does not count (a handled, logged one);
    without it, every exception and traceback line counts."""
    hard = KILLER_SIGNALS if ev is None else tuple(s for s in KILLER_SIGNALS if s != "traceback")
    out = [h for s in hard for h in w.hits(s) if ev is None or s != "cuda_oom" or not is_warning(h.text)]
    out += [h for h in w.hits("signal") if any(x in h.text for x in ("SIGKILL", "SIGABRT", "SIGSEGV", "SIGBUS"))]
    out += [h for h in w.hits("srun_error") if _SRUN_BAD_EXIT.search(h.text)]
    if ev is None:
        out += [h for h in w.hits("exception") if not _matches("conn_reset", h.text)]
    elif exceptions:
        out += [t.hit for ts in crash_triggers(ev).values() for t in ts if t.category != "data"]
    return sorted(set(out), key=_order_key)


_SRUN_BAD_EXIT = re.compile(r"Exited with exit code [1-9]|: Killed|: Aborted|Segmentation fault")

TRACEBACK_SPAN_LINES = 400
"""An exception line ends a traceback of its rank when that rank's ``Traceback (most recent call last):`` line is at
most this many lines above it in the same file (frames, chained exceptions)."""


def last_activity(ev: JobEvidence) -> dict[int, Hit]:
    """Per rank, the latest line seen of it: its last hit of any signal, or the last timed line of its own file."""
    cached = ev.cache.get("last_activity")
    if cached is None:
        w = ev.worker
        out: dict[int, Hit] = {}
        cands = [h for per in w.last_by_rank.values() for h in per.values()]
        cands += [h for h in w.file_end.values() if h.rank is not None]
        keys: dict[int, tuple[datetime, str, int]] = {}  # the order key of out[rank]
        for h in cands:
            if h.rank is None:
                continue
            k = _order_key(h)
            if h.rank not in out or keys[h.rank] < k:
                out[h.rank], keys[h.rank] = h, k
        cached = ev.cache["last_activity"] = out
    result: dict[int, Hit] = cached
    return result


def counters_known(ev: JobEvidence) -> bool:
    """True when the NCCL state carries last-enqueued/completed counters (torch 2.3+): only then can a rank inside
    the collective be told from one that never entered it by its own numbers."""
    return any(r.last_enqueued is not None and r.last_completed is not None for r in ev.nccl.rows)


def fabric_evidence(ev: JobEvidence) -> tuple[bool, str]:
    """Whether a fabric hang is positively shown, and why (or why not).

    Shown: the timed-out process groups all have the fabric pattern, no rank lacks NCCL state, the counters are
    known, and either every rank is pending AND was first to dump on its own, or NCCL WARN / IB / Xid errors are
    logged on the hosts involved. Anything less is at most "fabric suspected"."""
    n = ev.nccl
    groups = [g for g in n.groups if g.detected_ranks]
    if not n.timed_out or not groups:
        return False, "no NCCL collective timed out"
    if n.ranks_without_state or any(g.classification != "fabric" for g in groups):
        return False, "not every rank was inside the collective"
    if not counters_known(ev):
        return False, (
            "every rank timed out, but this torch logs no enqueued/completed counters (torch <= 2.2): a rank that "
            "never entered the collective cannot be told from one waiting inside it, so straggler and fabric cannot "
            "be told apart"
        )
    warns = [h for s in ("net_error", "xid") for h in ev.worker.hits(s)]
    if warns:
        return True, f"NCCL/IB/Xid errors are logged ({warns[0].file}:{warns[0].line})"
    members = {r for g in groups for r in g.ranks}
    firsts = {r for g in groups for r in g.signalled_dump_ranks}
    if members and members <= firsts:
        return True, "every rank was inside the collective and its own watchdog fired first (first to dump on each)"
    return False, (
        "every rank waited inside the collective, but neither did every rank's own watchdog fire first nor is any "
        "NCCL WARN / IB / Xid error logged: fabric suspected, not shown"
    )


def _ends_traceback(w: WorkerEvidence, h: Hit) -> bool:
    """True when ``h`` (an exception line) closes a traceback of its rank: the exception reached the top."""
    return any(tb.file == h.file and 0 < h.line - tb.line <= TRACEBACK_SPAN_LINES for tb in w.hits("traceback", h.rank))


WORKING_SIGNALS = ("progress", "memory", "retry", "conn_reset")
"""Signals of a rank at work (training progress, memory reports, requests retried): one of them written by the
rank after an error shows the error did not end it."""
HANDLED_AFTER = timedelta(seconds=60)
"""Training progress logged this long after an error (on any rank) shows the error did not end a rank: synchronous
training cannot go on for a minute while one rank is dead (the next collective would block)."""


def handled(w: WorkerEvidence, t: Trigger) -> bool:
    """True when training went on after ``t``: a later line of the rank at work (:data:`WORKING_SIGNALS`), the
    run's clean end later in the same file or after it, or progress on any rank :data:`HANDLED_AFTER` after it."""
    h = t.hit
    if h.rank is not None:
        for signal in WORKING_SIGNALS:
            own = w.last_by_rank.get(signal, {}).get(h.rank)
            if own is None:
                continue
            # later in the same file, unless the times put it with the error (a traceback on stderr and a step line
            # the logger flushed after it land in one file out of order)
            if own.file == h.file and own.line > h.line and not _close(own, h):
                return True
            if _after(own, h, CLOCK_SLACK):
                return True
    for end in w.hits("clean_end"):
        if (end.file == h.file and end.line > h.line) or _after(end, h, CLOCK_SLACK):
            return True
    if _steps_later_in_file(w, h) >= 2:
        return True
    # some progress line after it (``_after`` of each): the latest-starting one is, when any is
    latest = w.latest_start("progress")
    if latest is not None and h.latest is not None and latest > h.latest + HANDLED_AFTER:
        return True
    # or two steps completed after it: the second needs every rank alive (one more step line may be a rank's that
    # had not yet reached the collective the dead rank left)
    return h.latest is not None and w.steps_after(h.latest + CLOCK_SLACK) >= 2


def _steps_later_in_file(w: WorkerEvidence, h: Hit) -> int:
    """How many distinct training steps the file of ``h`` reports after it (with no time to go by), beyond the last
    step it reported before it: synchronous training completes a second step only with every rank alive, so two show
    the error ended no rank. (Steps the file had reported already are no progress: the nodes' logs concatenated into
    one file repeat them after a node's last line.)"""
    before: int | None = None
    steps: set[int] = set()
    for p in w.hits("progress"):
        if p.file != h.file or (n := step_number(p.text)) is None:
            continue
        if p.line < h.line:
            before = n if before is None else max(before, n)
        elif p.line > h.line:
            steps.add(n)
    return len(steps) if before is None else sum(n > before for n in steps)


def _close(a: Hit, b: Hit) -> bool:
    """Both lines' times are known to lie within :data:`CLOCK_SLACK` of each other."""
    lo_a, hi_a, lo_b, hi_b = a.earliest, a.latest, b.earliest, b.latest
    if lo_a is None or hi_a is None or lo_b is None or hi_b is None:
        return False
    return hi_a <= lo_b + CLOCK_SLACK and hi_b <= lo_a + CLOCK_SLACK


def _after(later: Hit, h: Hit, gap: timedelta) -> bool:
    lo, hi = later.earliest, h.latest
    return lo is not None and hi is not None and lo > hi + gap


def _module_of(t: Trigger) -> str | None:
    if t.category == "data":
        return "the data loader"
    m = _EXC_NAME.search(t.hit.text)
    if m and "." in m.group(1):
        return m.group(1).rsplit(".", 1)[0]
    return None


FATAL_KINDS = ("cuda_oom", "cuda_error", "rank_crash", "data", "watchdog_hang")


def crash_triggers(ev: JobEvidence) -> dict[int, list[Trigger]]:
    """Per rank, its failure candidates that were not handled (no progress of the rank after them), oldest first."""
    out: dict[int, list[Trigger]] = defaultdict(list)
    for t in triggers(ev):
        if t.hit.rank is not None and t.category in FATAL_KINDS and not handled(ev.worker, t):
            out[t.hit.rank].append(t)
    return dict(out)


def job_finished(ev: JobEvidence) -> Hit | None:
    """The clean-end line when every rank finished: a clean-end marker, no NCCL timeout, no error exit and no process
    killer (OOM, CUDA error, SLURM cancellation, fatal signal, srun error exit), and no unhandled exception written
    after the end. Exceptions before it were survived: synchronous training cannot end normally without every rank
    (warnings, retried requests and handled tracebacks do not make a failure)."""
    w = ev.worker
    ends = w.hits("clean_end")
    if not ends or ev.nccl.timed_out or ev.nccl.exited_with_error:
        return None
    lf = ev.launcher
    if lf is not None and any(f.comm_error is not None or f.exitcode not in (None, 0) for f in lf.fates.values()):
        return None  # a rank lost its peers or a worker ended in error: one rank's clean end is not the job's
    if killers(w, ev, exceptions=False):
        return None
    end = ends[-1]
    for ts in crash_triggers(ev).values():
        for t in ts:
            if (t.hit.file == end.file and t.hit.line > end.line) or _after(t.hit, end, CLOCK_SLACK):
                return None
    return end


def rank_states(ev: JobEvidence) -> dict[int, RankState]:
    """Every rank's state (computed once per evidence; see :data:`RANK_STATES`)."""
    cached = ev.cache.get("rank_states")
    if cached is None:
        cached = ev.cache["rank_states"] = _rank_states(ev)
        if ev.hang is not None:
            _hang_states(ev.hang, cached)
    states: dict[int, RankState] = cached
    return states


def _hang_states(hang: hang_facts.HangFacts, states: dict[int, RankState]) -> None:
    """Where the stack dumps saw a rank whose logs say nothing of its end: stuck outside the collective, or waiting
    in it."""
    for group, state in ((hang.stuck, "stuck"), (hang.detours, "stuck"), (hang.waiting, "waiting")):
        for p in group:
            if p.rank is None or p.state.kind == "gone":
                continue
            st = states.get(p.rank)
            if st is None or st.state in ("unknown", "absent"):
                line = Hit("stack_dump", p.file, p.state.line_no, p.state.text, p.rank, None)
                states[p.rank] = RankState(p.rank, state, f"{p.state.words()} (stack dump)", line)


def _rank_states(ev: JobEvidence) -> dict[int, RankState]:
    w, n = ev.worker, ev.nccl
    missing = w.missing_ranks  # each of these is derived anew per access: once here, not once per rank
    timed_out = n.timed_out
    stragglers = n.straggler_ranks
    world = set(w.ranks) | set(missing)
    if w.world_size is not None:
        world |= set(range(w.world_size))
    rows: dict[int, list[NcclRow]] = defaultdict(list)
    for row in n.rows:
        rows[row.rank].append(row)
    fatal = crash_triggers(ev)
    events = ev.launcher_events()
    exits = {e.rank: e for e in events if e.rank is not None and e.kind in ("exit", "signal")}
    stopped = {e.rank: e for e in events if e.rank is not None and e.kind == "sigterm_sent"}
    world |= set(exits)  # a rank its launcher reports the end of (mp.spawn's 'process N terminated') is the job's
    finished = job_finished(ev)
    crashed_files = set()
    out: dict[int, RankState] = {}
    for r in sorted(world):
        mine = rows.get(r, [])
        trig = fatal.get(r, [])
        pending = [x for x in mine if (x.pending or 0) > 0]
        hb = top = None
        if trig:  # (most ranks have no crash trigger)
            hb = next((t for t in trig if t.category == "watchdog_hang"), None)
            top = next(
                (
                    t
                    for t in trig
                    if t.category in ("cuda_oom", "cuda_error")
                    or (_matches("exception", t.hit.text) and _ends_traceback(w, t.hit))
                ),
                None,
            )
        ex = exits.get(r)
        code = ex.exit_code if ex is not None else None
        if r in n.exited_with_error and code is None:
            code = 1
        if r in missing:
            out[r] = RankState(r, "absent", "no log file of this rank was found")
        elif finished is not None:
            out[r] = RankState(r, "finished", "the run ended normally", finished)
        elif hb is not None:
            out[r] = RankState(r, "watchdog_killed", "the NCCL heartbeat monitor killed it", hb.hit, hb, exit_code=code)
            crashed_files.add(hb.hit.file)
        elif pending:
            x = pending[0]
            out[r] = RankState(
                r,
                "waiting",
                f"inside {x.op_type or 'a collective'} SeqNum {x.seq} (PG {x.pg}): enqueued {x.last_enqueued} > "
                f"completed {x.last_completed}",
                _row_hit(x),
            )
        elif top is None and r in stopped:
            peer = _peer_error(w, r)
            out[r] = RankState(
                r,
                "torn_down",
                f"its launcher stopped it (exit {stopped[r].exit_code}) after another worker failed"
                + (f"; its last error was a peer's: {cut(peer.text, 100)}" if peer is not None else ""),
                peer,
                exit_code=stopped[r].exit_code,
                signal=stopped[r].signal,
            )
        elif (
            top is None
            and not trig
            and code
            and (ex is None or ex.kind != "signal")  # (a SIGKILL, a SIGSEGV: no communication error ends a rank so)
            and (peer := _peer_error(w, r)) is not None
        ):
            out[r] = RankState(
                r,
                "torn_down",
                f"exited ({code}) on a communication error after a peer failed: {cut(peer.text, 100)}",
                peer,
                exit_code=code,
            )
        elif (top is not None and not mine) or (code is not None and code != 0 and not pending):
            first = trig[0] if trig else top
            why = (
                f"{first.what} ({'reached the top' if top is not None else 'logged'}), then nothing more"
                if first is not None
                else f"the launcher reports exit code {code}; no exception in its own log"
            )
            out[r] = RankState(
                r,
                "crashed",
                why,
                first.hit if first is not None else None,
                first,
                _module_of(first) if first is not None else None,
                code,
                ex.signal if ex is not None else None,
                top,
            )
            if first is not None:
                crashed_files.add(first.hit.file)
        elif not (trig or mine) and (peer := _peer_error(w, r)) is not None and _ends_traceback(w, peer):
            # no launcher told its exit, but its own traceback did: a peer's failure reached the top and ended it
            out[r] = RankState(
                r, "torn_down", f"ended on a communication error after a peer failed: {cut(peer.text, 100)}", peer
            )
        elif timed_out and (r in n.job_stragglers or (mine and not pending and r in stragglers)):
            x0 = mine[0] if mine else None
            out[r] = RankState(
                r,
                "stuck",
                "alive but not inside the stuck collective (no NCCL work pending / only observed the dump)",
                _row_hit(x0) if x0 is not None else None,
            )
        else:
            out[r] = RankState(r, "unknown", "its log says nothing of how it ended")
    last = last_activity(ev)
    for r, st in out.items():
        st.last = last.get(r)
        if st.state != "unknown" or not timed_out:
            continue
        files = set(w.files_of_rank(r))
        if files & crashed_files or w.hits("signal", r):
            st.state, st.why = "torn_down", "stopped by its launcher after another rank failed (no NCCL state)"
        elif r in n.ranks_without_state:
            st.state, st.why = "stuck", "no NCCL state while the others timed out: it never entered the collective"
    return out


def _peer_error(w: WorkerEvidence, rank: int) -> Hit | None:
    """The rank's last exception when it is a consequence of a peer's failure (gloo/NCCL/store errors)."""
    own = [h for h in w.hits("exception", rank) if not is_warning(h.text)]
    return own[-1] if own and is_consequence(own[-1].text) else None


def _row_hit(x: NcclRow) -> Hit:
    return _new_evidence_hit("nccl", x.file, x.line, x.text, x.rank, x.timeout_time, None, None)  # (once per rank)


def order_by_bounds(h: Hit, t: datetime | None) -> bool | None:
    """True/False when ``h``'s time (or the bounds of an untimed line) is provably before/after ``t`` within
    :data:`CLOCK_SLACK`; None when the bounds overlap ``t``. No ``t`` (nothing to be after): True."""
    if t is None:
        return True
    if h.latest is not None and h.latest <= t + CLOCK_SLACK:
        return True
    if h.earliest is not None and h.earliest > t + CLOCK_SLACK:
        return False
    return None


def precedes_symptom(ev: JobEvidence, h: Hit) -> bool | None:
    """Whether ``h`` happened before the failure's first symptom: True/False when the time bounds decide it, or when
    the causal order does (the line is the last output of a rank that crashed or stalled and never entered the
    collective the others were waiting in: the others could only wait for it after it stopped); None when neither.
    """
    sym = first_symptom(ev)
    by_time = order_by_bounds(h, sym.time if sym is not None else None)
    if by_time is not None:
        return by_time
    if h.rank is not None:
        st = rank_states(ev).get(h.rank)
        if st is not None and (
            st.state in ("crashed", "watchdog_killed") or (st.state == "stuck" and ev.nccl.timed_out)
        ):
            return True
    return None


def rank_state_groups(states: dict[int, RankState]) -> list[tuple[str, list[int], str, Hit | None]]:
    """States grouped: (state, ranks, why of the first rank, its deciding line), in rank order of first appearance."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    first: dict[tuple[str, str], RankState] = {}
    for r in sorted(states):
        st = states[r]
        key = (st.state, st.why if st.state in ("crashed", "watchdog_killed") else "")
        groups[key].append(r)
        first.setdefault(key, st)
    return [(k[0], rs, first[k].why, first[k].line) for k, rs in groups.items()]


SILENT_NODE_GAP = timedelta(seconds=60)
"""A node whose logs end this long before the job was cancelled for NODE FAILURE went silent (it is the one)."""


def node_failure_facts(ev: JobEvidence) -> tuple[Hit | None, list[SilentNode]]:
    """SLURM's ``CANCELLED ... DUE TO NODE FAILURE`` line and the nodes that went silent before it.

    Files are grouped by node (the host slurmstepd names in the file, else the one host of its ranks from the NCCL
    init lines, else the file's node), so a node's per-rank files and its launcher file are judged together: a node
    is silent when none of its files holds the cancellation and each ends :data:`SILENT_NODE_GAP` before it."""
    w = ev.worker
    cancels = [h for h in w.hits("slurm_cancel") if "NODE FAILURE" in h.text]
    if not cancels:
        return None, []
    cancel = cancels[0]
    at = cancel.when
    with_cancel = {h.file for h in cancels}
    groups: dict[str, list[FileInventory]] = defaultdict(list)
    for f in w.job.inventory.files:
        hosts = {w.rank_host.get(r) for r in f.ranks}
        by_rank = next(iter(hosts)) if len(hosts) == 1 else None
        node = w.file_host.get(f.rel) or by_rank or f.node or f.rel
        groups[node].append(f)
    out: list[SilentNode] = []
    for node, files in sorted(groups.items()):
        if any(f.rel in with_cancel for f in files):
            continue
        ends = [e for f in files if (e := w.file_end.get(f.rel)) is not None and e.time is not None]
        if at is None or all(e.time is not None and e.time <= at - SILENT_NODE_GAP for e in ends):
            ranks = {r for f in files for r in f.ranks}
            last = max(ends, key=lambda e: e.time or datetime.min) if ends else None
            out.append(SilentNode(node if node not in {f.rel for f in files} else "", ranks, last))
    return cancel, [s for s in out if s.ranks]
