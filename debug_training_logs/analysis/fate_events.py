"""Gathering the causal model: each rank's fate and events, and the accusations between ranks, from a job's evidence.

Built once per :class:`~debug_training_logs.analysis.evidence_types.JobEvidence` from what the one scan gathered (the
signals, the NCCL table, the launcher/gloo/DETAIL facts, the flight-recorder dumps). Every rank's events are sorted
into *primary* (it happened to the rank on its own) and *consequence* (a reaction to another rank's failure, with an
edge to the ranks the line names); a line that names another rank as the failing one (an accusation) is a
consequence on its writer, whatever exception carries it. A rank that left the story silently is given the primary
event its fate implies: a *stall* when it never entered the collective the others waited in (dated by its last
progress, not by when its error was finally printed), an *early exit* when it ended without an error while the
others waited, a *detour* when it waited in another collective than the others, a *lost node* when its whole node
went silent. What the events add up to is decided in :mod:`~debug_training_logs.analysis.causal`.

Pure and MCP-free.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta

from debug_training_logs.analysis import fr_dumps
from debug_training_logs.analysis.evidence_states import crash_triggers, handled, rank_states
from debug_training_logs.analysis.evidence_triggers import is_consequence, trigger_of, triggers
from debug_training_logs.analysis.evidence_types import Hit, JobEvidence, RankState, Trigger, WorkerEvidence
from debug_training_logs.analysis.fates import (
    REACTED_TO_PEER,
    Accusation,
    CausalModel,
    Fate,
    FateEnd,
    Process,
    RankEvent,
)
from debug_training_logs.analysis.launcher import AgentFacts, LauncherFacts, mismatch_culprits
from debug_training_logs.analysis.launcher_decision import OWN_SIGNALS
from debug_training_logs.analysis.silent_fates import (
    late_errors,
    silent_fates,
    stuck_after_error,
)
from debug_training_logs.formats import accusations, gloo, nccl, torchrun
from debug_training_logs.formats import torch_nccl as tn
from debug_training_logs.formats.cuda_oom import oom_device
from debug_training_logs.formats.timestamps import parse_wall_time, with_year
from debug_training_logs.logs.attribution import agreed_offset
from debug_training_logs.ranges import format_ranges

UNRANKED_KINDS = ("oom", "cuda_error", "exception", "nan", "data_error")
"""Failures read on a line no rank is known for (a port taken is the launcher's own branch: no worker started)."""
INFERRED_KINDS = ("stall", "early_exit", "detour", "node_lost")
"""Primary events read from what a rank did not do (it stopped, left, went elsewhere, went silent), not from a line
of its own failure."""
MAX_UNRANKED = 64
"""Failures on lines of no known rank kept in the model (a node's repeated Xid lines need not all be held)."""


# ---------------------------------------------------------------------------------------------------------------------
# Building


def causal_model(ev: JobEvidence) -> CausalModel:
    """The job's causal model (built once per evidence; the verdict and the verifier share it)."""
    cached = ev.cache.get("causal")
    if cached is None:
        cached = ev.cache["causal"] = _build(ev)
    model: CausalModel = cached
    return model


def _build(ev: JobEvidence) -> CausalModel:
    w = ev.worker
    states = rank_states(ev)
    lf = ev.launcher
    year = w.year
    fates: dict[int, Fate] = {}
    for r, st in states.items():
        end: FateEnd = {
            "finished": "finished",
            "crashed": "crashed",
            "watchdog_killed": "crashed",
            "waiting": "waiting",
            "stuck": "stuck",
            "torn_down": "stopped",
            "absent": "absent",
        }.get(st.state, "unknown")  # type: ignore[assignment]
        fates[r] = Fate(
            rank=r,
            end=end,
            why=st.why,
            exit_code=st.exit_code,
            signal=st.signal,
            stopped_by="agent" if st.state == "torn_down" else None,
            last_progress=w.last_by_rank.get("progress", {}).get(r),
            node=w.node_of_rank(r),
        )
    accused_lines = _accusation_lines(ev)
    reports = {(a.line.file, a.line.line): a for a in accused_lines}
    for r, trigs in crash_triggers(ev).items():
        f = fates.get(r)
        if f is None:
            continue
        for t in trigs:
            a = reports.get((t.hit.file, t.hit.line))
            if a is not None and r not in a.accused:
                f.events.append(RankEvent(r, "report", f"reports rank(s) {_fmt(a.accused)} failed", t.hit, a.accused))
                continue
            f.events.append(primary_of(t))
    if lf is not None:
        _launcher_events(lf, fates, w, {row.rank for row in ev.nccl.rows})
        _detours(lf, fates, year)
    _nccl_events(ev, fates)
    for a in accused_lines:  # an accusation that reached no trigger (a warning, an ERROR log line) is a report too
        f = fates.get(a.by) if a.by is not None else None
        if f is not None and a.by not in a.accused and not any(e.line.line == a.line.line for e in f.events):
            f.events.append(RankEvent(a.by, "report", f"reports rank(s) {_fmt(a.accused)} failed", a.line, a.accused))
    processes = (
        _unmapped_processes(
            lf,
            fates,
            year,
            watchdog=bool(ev.nccl.rows),
            world=w.world_size,
            file_ranks={fi.rel: fi.line_ranks for fi in w.job.inventory.files},
            file_ranks_all={fi.rel: fi.ranks for fi in w.job.inventory.files},
            pid_ranks=_ranks_by_pid(w),
        )
        if lf is not None
        else []
    )
    hang_accs: list[Accusation] = []
    hang_processes: list[RankEvent] = []
    if ev.hang is not None:  # what was collected during a live hang (its readers are imported only then)
        from debug_training_logs.analysis.hang_events import hang_events

        hang_accs, hang_processes = hang_events(ev.hang, fates)
    processes += hang_processes
    silent_fates(ev, fates)
    late_errors(ev, fates)
    stuck_after_error(fates)
    for f in fates.values():
        if f.end == "finished":  # the run ended normally for it: what it logged before, it survived
            f.events = [e for e in f.events if not e.primary]
    for f in fates.values():
        f.events.sort(key=lambda e: (e.earliest or datetime.max, e.line.file, e.line.line))
    accs = list(accused_lines)
    if lf is not None and lf.mismatches:
        odd = mismatch_culprits([m for _, m, _ in lf.mismatches])
        if odd:
            r0, _m, e = lf.mismatches[0]
            accs.append(Accusation(r0, frozenset(odd), "detail_mismatch", hit_of(e.file, e.line, e.text, r0, year)))
    accs += _rank_outlier(ev, fates)
    fr = ev.flight_recorder
    if fr is not None and fr.dumps:
        named, how = fr.culprits
        _fr_detours(fr, named, fates)
        if named:
            accs.append(
                Accusation(
                    None, frozenset(named), f"flight_recorder_{how}", Hit("fr", "(flight recorder)", 0, how, None, None)
                )
            )
    accs += hang_accs
    # a failure on a line no rank is known for (a pasted traceback, a node's Xid line): the process, not a rank
    unranked = [
        primary_of(t)
        for t in triggers(ev)
        if t.hit.rank is None
        and (t.hit.file, t.hit.line) not in reports
        and torchrun.benign(t.hit.text) is None
        and not handled(w, t)
    ]
    processes += [e for e in unranked if e.kind in UNRANKED_KINDS][:MAX_UNRANKED]
    files = w.job.inventory.files
    return CausalModel(
        fates=fates,
        accusations=accs,
        processes=processes,
        world_size=w.world_size,
        missing=ev.missing_ranks,
        seen=set(w.ranks) | (ev.hang.dumped_ranks if ev.hang is not None else set()),
        job_layout=len(files) > 1 or any(f.launcher_lines for f in files),
    )


def _fmt(ranks: Iterable[int]) -> str:
    return format_ranges(ranks) or "none"


def primary_of(t: Trigger) -> RankEvent:
    kind = {
        "cuda_oom": "oom",
        "cuda_error": "cuda_error",
        "data": "data_error",
        "watchdog_hang": "watchdog_hang",
    }.get(t.category)
    if kind is None:
        kind = "nan" if t.what == "NaN/Inf loss" else "launch" if "address already in use" in t.what else "exception"
    # an NCCL line names its process (host:pid:tid [GPU]) when no rank prefix does
    at = nccl.process_of(t.hit.text) if t.hit.rank is None else None
    process = Process(at[0], None, at[1], None, gpu=at[2]) if at is not None else None
    pg = tn.parse_pg_prefix(t.hit.text) if t.hit.rank is None and at is None else None
    if pg is not None and pg.style == "rank":  # torch <= 2.2's '[Rank N]': the rank in the watchdog's group
        process = Process(None, None, None, None, pg_rank=pg.pg_rank)
    elif process is None and t.hit.rank is None and kind == "oom" and (dev := oom_device(t.hit.text)) is not None:
        process = Process(None, None, None, None, gpu=dev)  # the allocator names the device that ran out
    return RankEvent(t.hit.rank, kind, t.what, t.hit, process=process)  # type: ignore[arg-type]


def hit_of(file: str, line: int, text: str, rank: int | None, year: int | None) -> Hit:
    wt = parse_wall_time(text)
    t = with_year(wt, year) if wt is not None else None
    return Hit("launcher", file, line, text, rank, t)


def _accusation_lines(ev: JobEvidence) -> list[Accusation]:
    w = ev.worker
    out: list[Accusation] = []
    for h in w.hits("accusation"):
        a = accusations.parse_line(h.text)
        if a is None:
            continue
        by = h.rank
        if by is None:
            ranks = w.ranks_of_file(h.file)
            by = next(iter(ranks)) if len(ranks) == 1 else None
        accused = a.ranks
        if (by is not None and accused == {by}) or (a.how == "trainer" and is_consequence(h.text)):
            continue  # a rank naming itself says no more than its own events; a peer's error text names no culprit
        world = w.world_size
        if world is not None and (not accused or max(accused) >= world or len(accused) >= world):
            continue  # names a rank the job does not have, or every rank: not a pointer at one
        out.append(Accusation(by, accused, a.how, h))
    return out


def _launcher_events(lf: LauncherFacts, fates: dict[int, Fate], w: WorkerEvidence, watched: set[int]) -> None:
    """The launcher's and gloo's facts of each rank as events. ``watched``: ranks with NCCL watchdog state (their
    SIGABRT is the watchdog's; elsewhere it is the rank's own abort)."""
    year = w.year
    for r, rf in lf.fates.items():
        f = fates.get(r)
        if f is None:
            continue
        if rf.exitcode is not None and f.exit_code is None:
            f.exit_code, f.signal = rf.exitcode, rf.signal
        # (a rank whose log is missing may have had a watchdog that aborted it: no own abort is shown)
        own_abort = rf.signal == "SIGABRT" and r in w.ranks and r not in watched and rf.comm_error is None
        negative = rf.exitcode is not None and rf.exitcode < 0
        if negative and (rf.signal in OWN_SIGNALS or own_abort) and rf.exit_evidence is not None:
            e = rf.exit_evidence
            f.events.append(
                RankEvent(
                    r,
                    "own_signal",
                    f"killed by {rf.signal} (not by its agent)",
                    hit_of(e.file, e.line, e.text, r, year),
                )
            )
            if f.end not in ("crashed",):
                f.end, f.why = "killed", f"killed by {rf.signal}, a signal its launcher did not send"
        if rf.comm_error is not None:
            e = rf.comm_error
            kind = {"timeout": "peer_timeout", "size_mismatch": "peer_mismatch"}.get(rf.comm_kind or "", "peer_closed")
            what = {
                "peer_timeout": "timed out waiting for a peer in a collective",
                "peer_mismatch": "its peers sent buffers of a different size (a collective mismatch)",
                "peer_closed": "a peer's connection closed (the peer process went away)",
            }[kind]
            f.events.append(RankEvent(r, kind, what, hit_of(e.file, e.line, e.text, r, year)))  # type: ignore[arg-type]
        if rf.torn_down and rf.exit_evidence is not None:
            e = rf.exit_evidence
            f.events.append(
                RankEvent(
                    r,
                    "agent_stop",
                    "its launcher stopped it (SIGTERM) after another worker failed",
                    hit_of(e.file, e.line, e.text, r, year),
                )
            )
            f.stopped_by = "agent"
        has_primary = any(ev.primary for ev in f.events)
        if rf.own_error is not None and not has_primary and rf.comm_error is None:
            e = rf.own_error
            h = hit_of(e.file, e.line, e.text, r, year)
            t = trigger_of("exception", h)
            # the line as the evidence's triggers read it (an OOM is an OOM); a warning, a consequence or an error
            # the rank went on after is not its failure
            if t is not None and not handled(w, t) and not any(_same(x.line, h) for x in f.events):
                f.events.append(primary_of(t))
        elif not has_primary and rf.comm_error is None and (rf.exitcode or 0) > 0 and rf.exit_evidence is not None:
            e = rf.exit_evidence
            what = f"exited with code {rf.exitcode} (its launcher says so; no traceback of its own in its log)"
            f.events.append(RankEvent(r, "exception", what, hit_of(e.file, e.line, e.text, r, year), weak=True))


def _detours(lf: LauncherFacts, fates: dict[int, Fate], year: int | None) -> None:
    """Ranks that waited in another collective than the others (their tracebacks' collective calls): the odd ones
    out against a strict majority took a detour (a rank-only collective, a barrier entered alone), unless another
    rank's traceback shows it in the same call (whatever ended it): then several ranks went on together (a collective
    that completed for some ranks and not for others), and none of them is odd."""
    located = {r: rf.collective for r, rf in lf.fates.items() if rf.collective is not None and r in fates}
    # only ranks that timed out waiting make the majority: when a peer died, each rank fails in whatever collective
    # it was in (and ranks of different groups run different collectives at the same time)
    calls = {r: c for r, c in located.items() if lf.fates[r].comm_kind == "timeout"}
    for r, c in calls.items():
        fates[r].waits_in = fates[r].waits_in or c
    if len(calls) < 2:
        return
    (top, n), *_rest = Counter(calls.values()).most_common()
    if n * 2 <= len(calls):
        return  # no majority to differ from
    for r, c in calls.items():
        rf = lf.fates[r]
        if c == top or rf.comm_error is None or any(c == c2 for r2, c2 in located.items() if r2 != r):
            continue
        e = rf.comm_error
        line = hit_of(e.file, e.line, e.text, r, year)
        g = gloo.parse_line(e.text)
        ms = g.timeout_ms if isinstance(g, gloo.GlooError) else None
        when = line.earliest - timedelta(milliseconds=ms) if line.earliest is not None and ms else None
        fates[r].events.append(
            RankEvent(r, "detour", f"waited in {c} while {n} other rank(s) waited in {top}", line, when=when)
        )


def _same(a: Hit, b: Hit) -> bool:
    return a.file == b.file and a.line == b.line


def _fr_detours(fr: fr_dumps.FlightRecorderFacts, named: set[int], fates: dict[int, Fate]) -> None:
    """A rank the dumps show missing from one group's stuck collective while it waits in another group's own stuck
    collective did not stall: it skipped the first and went on (a desync, such as a code path only it took)."""
    deaths = ("oom", "cuda_error", "exception", "nan", "own_signal", "data_error")
    if any(e.kind in deaths and not e.weak for f in fates.values() for e in f.events):
        return  # a rank died of its own: the others' dumps show where each was when it did, not a detour
    groups = fr.stuck_groups
    for r in sorted(named):
        f = fates.get(r)
        if f is None or any(e.primary for e in f.events):
            continue
        missing_in = [g for g in groups if r in g.never_joined]
        waits_in = [g for g in groups if g.stuck is not None and r in g.stuck.joined and r not in g.never_joined]
        if not missing_in or not waits_in:
            continue
        a, b = missing_in[0], waits_in[0]
        assert a.stuck is not None and b.stuck is not None
        what = (
            f"skipped {a.stuck.op} seq {a.stuck.seq} of PG {a.pg} ({a.desc}) and went on to {b.stuck.op} seq "
            f"{b.stuck.seq} of PG {b.pg} ({b.desc}), where it waits"
        )
        f.events.append(RankEvent(r, "detour", what, Hit("fr", "(flight recorder)", 0, what, r, None)))


def _exception_name(text: str) -> str:
    m = re.search(r"((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))", text)
    return m.group(1) if m else "an exception"


def _nccl_events(ev: JobEvidence, fates: dict[int, Fate]) -> None:
    n = ev.nccl
    for g in n.groups:  # the broadcast root ahead of the others: in another collective than theirs
        if g.classification == "root_ahead" and g.root_rank is not None and g.root_rank in fates:
            row = next((x for x in n.rows if x.rank == g.root_rank and x.pg == g.pg), None)
            if row is not None:
                h = Hit("nccl", row.file, row.line, row.text, row.rank, row.timeout_time)
                what = f"{g.root_gap} collective(s) ahead of the others in PG {g.pg} (SeqNum {row.seq})"
                fates[g.root_rank].events.append(RankEvent(g.root_rank, "detour", what, h))
    for row in n.rows:
        f = fates.get(row.rank)
        if f is None or row.signal != "detected":
            continue
        if (row.pending or 0) > 0 or row.pending is None:
            f.waits_in = f.waits_in or f"{row.op_type or 'a collective'} SeqNum {row.seq} (PG {row.pg})"
            h = Hit("nccl", row.file, row.line, row.text, row.rank, row.timeout_time)
            if not any(e.kind == "peer_timeout" for e in f.events):
                f.events.append(
                    RankEvent(row.rank, "peer_timeout", "its NCCL watchdog timed out waiting in a collective", h)
                )


def _unmapped_processes(
    lf: LauncherFacts,
    fates: dict[int, Fate],
    year: int | None,
    *,
    watchdog: bool,
    world: int | None,
    file_ranks: dict[str, set[int]],
    file_ranks_all: dict[str, set[int]],
    pid_ranks: dict[int, list[int]],
) -> list[RankEvent]:
    """Launcher lines about a worker with no global rank (``failed (exitcode: 1) local_rank: 3 (pid: P)`` with no
    table or rank prefix to map it): the process, in the launcher's words; the rank whose NCCL init line names that
    process when one does (``pid_ranks``: pid -> the ranks whose init line has that pid, one per host that has it;
    several: the one of the agent's file, ``file_ranks_all``: every rank a file holds). ``watchdog``: some rank has
    NCCL watchdog state (a SIGABRT may be its abort of a hang's victim); without any, a SIGABRT is the process's own
    abort."""
    out: list[RankEvent] = []
    known_pids = {f.pid for t_rel, t in lf.tables for f in t.failures}
    for a in lf.agents:
        for no, wf in a.worker_failed:
            if wf.pid in known_pids or (wf.exitcode is not None and wf.exitcode == -15):
                continue
            code = wf.exitcode
            sig = _signal_name(code)
            own = code is not None and (code > 0 or sig in OWN_SIGNALS or (sig == "SIGABRT" and not watchdog))
            if not own:
                continue
            g = a.local_to_global.get(wf.local_rank)
            if g is None:  # the rank whose NCCL init line is the process's: on the agent's node (its file) if two are
                named = pid_ranks.get(wf.pid, [])
                here = [r for r in named if r in file_ranks_all.get(a.file, set())] if len(named) > 1 else named
                g = here[0] if len(here) == 1 else None
            if g is None and (base := _node_offset(a, world, file_ranks.get(a.file, set()))) is not None:
                g = base + wf.local_rank
            if g is not None and g in fates:  # the file maps its local rank: the event is that rank's
                f = fates[g]
                # (an exit after the rank's own reaction to a peer, a timeout or a lost connection, is that reaction's)
                if not any(e.primary or e.kind in REACTED_TO_PEER for e in f.events):
                    h = Hit("launcher", a.file, no, f"failed (exitcode: {code}) local_rank: {wf.local_rank}", g, None)
                    kind = "own_signal" if code is not None and code < 0 else "exception"
                    what = f"killed by {sig} (not by its agent)" if code < 0 else f"exited with code {code}"
                    f.events.append(RankEvent(g, kind, what, h, weak=kind == "exception"))  # type: ignore[arg-type]
                continue
            p = Process(a.node, wf.local_rank, wf.pid, code)
            h = Hit(
                "launcher",
                a.file,
                no,
                f"failed (exitcode: {code}) local_rank: {wf.local_rank} (pid: {wf.pid})",
                None,
                None,
            )
            what = f"{p.words()} failed with exit code {code}" + (
                f" ({_signal_name(code)})" if code is not None and code < 0 else ""
            )
            out.append(
                RankEvent(None, "own_signal" if code is not None and code < 0 else "exception", what, h, process=p)
            )
        for e, wx in a.worker_exits:  # DeepSpeed's launcher names a local rank
            if wx.local_rank is None or wx.exitcode in (0, -15):
                continue
            p = Process(a.node, wx.local_rank, None, wx.exitcode)
            sig = f" ({wx.signal})" if wx.signal else ""
            hx = hit_of(e.file, e.line, e.text, None, year)
            kind = "own_signal" if wx.exitcode < 0 else "exception"
            what = f"{p.words()} exited with code {wx.exitcode}{sig}"
            out.append(RankEvent(None, kind, what, hx, process=p))  # type: ignore[arg-type]
    return out


def _node_offset(a: AgentFacts, world: int | None, ranks_here: set[int]) -> int | None:
    """The global rank of local rank 0 of the one agent of a file, when every local rank the file maps (two at least)
    agrees on it: torchrun numbers a node's workers consecutively. With no map, from the number of worker processes
    the agent stopped (its ``--nproc-per-node``): 0 when they are as many as the job's ``world`` has ranks (its
    workers are the whole world); else the block of that many ranks, from a multiple of it (every node runs as many),
    that holds every global rank the file's lines carry (``ranks_here``), two at least."""
    if len(a.pids) > 1:
        return None
    if a.local_to_global:
        return agreed_offset(a.local_to_global)
    nproc = len(set().union(*a.sigterms.values()) | {wf.pid for _, wf in a.worker_failed})
    if world is not None and nproc == world:
        return 0
    blocks = {r // nproc for r in ranks_here} if nproc >= 2 else set()
    return blocks.pop() * nproc if len(blocks) == 1 and len(ranks_here) >= 2 else None


def _rank_outlier(ev: JobEvidence, fates: dict[int, Fate]) -> list[Accusation]:
    """When gloo received a buffer of another size than it expected (a report that names only the receiver): the one
    rank whose own line, before the failure, differs from what every other rank wrote in its place
    (:mod:`~debug_training_logs.analysis.rank_outliers`), as an accusation of that rank."""
    if not any(e.kind == "peer_mismatch" for f in fates.values() for e in f.events):
        return []
    from debug_training_logs.analysis.rank_outliers import rank_outliers

    before: dict[str, int] = {}
    for f in fates.values():
        for e in f.events:
            before[e.line.file] = min(before.get(e.line.file, e.line.line), e.line.line)
    w = ev.worker
    seen = {r for r, f in fates.items() if f.end != "absent"}
    found = rank_outliers(w.job, seen, before)
    if len({o.rank for o in found}) != 1:
        return []
    o = found[0]
    node = w.node_of_rank(o.rank)
    if node is not None and not any(w.node_of_rank(r) == node for r in seen - {o.rank}):
        return []  # the only rank of its node: what it wrote otherwise may be its node's (its host, its node rank)
    return [Accusation(None, frozenset({o.rank}), "rank_outlier", hit_of(o.file, o.line, o.text, o.rank, w.year))]


def _ranks_by_pid(w: WorkerEvidence) -> dict[int, list[int]]:
    """pid -> the ranks whose NCCL init line names a process of that id (``host:pid:tid [d] NCCL INFO ... rank R
    nranks N``): one, or one per host that has such a process."""
    out: dict[int, list[int]] = {}
    for r, pid in sorted(w.rank_pid.items()):
        out.setdefault(pid, []).append(r)
    return out


def _signal_name(code: int | None) -> str | None:
    return {-9: "SIGKILL", -11: "SIGSEGV", -7: "SIGBUS", -4: "SIGILL", -8: "SIGFPE", -6: "SIGABRT", -15: "SIGTERM"}.get(
        code or 0
    )


def reactions_at(ev: JobEvidence) -> dict[tuple[str, int], RankEvent]:
    """The lines where a rank reacted to a peer (a collective's timeout, lost connection or size mismatch), by
    (file, line): built once per evidence."""
    cached = ev.cache.get("reactions_at")
    if cached is None:
        cached = ev.cache["reactions_at"] = {
            (e.line.file, e.line.line): e
            for f in causal_model(ev).fates.values()
            for e in f.events
            if e.kind in REACTED_TO_PEER
        }
    at: dict[tuple[str, int], RankEvent] = cached
    return at


def storage_resets(ev: JobEvidence) -> tuple[list[Hit], int]:
    """The connection-reset lines that can be a storage client's (keep-alive noise when retried), and their count:
    every reset but those a rank's collective raised (a peer process gone: a consequence in the causal model)."""
    w = ev.worker
    hits = w.hits("conn_reset")
    peers = reactions_at(ev)
    kept = [h for h in hits if (h.file, h.line) not in peers]
    return kept, max(0, w.counts.get("conn_reset", 0) - (len(hits) - len(kept)))


SHOWN_FATES = ("exited_early", "stuck", "crashed")
"""Fates the causal model finds for a rank whose own lines leave its state unknown, shown as its state."""


def shown_states(ev: JobEvidence) -> dict[int, RankState]:
    """Every rank's state as a report shows it: :func:`~debug_training_logs.analysis.evidence_states.rank_states`,
    except where its lines leave a rank ``unknown`` and the causal model found its fate (it left early, stayed
    outside the collective, crashed by its launcher's word): the state the verdict reasons from."""
    states = dict(rank_states(ev))
    for r, f in causal_model(ev).fates.items():
        st, p = states.get(r), f.primary
        if st is None or st.state != "unknown":
            continue
        why = f.why
        shown = f.end if f.end in SHOWN_FATES else None
        if shown is None and p is not None and p.kind not in INFERRED_KINDS:
            shown, why = "crashed", p.what  # a failure of its own its launcher or a line of another rank reports
        if shown is not None:
            states[r] = RankState(r, shown, why, p.line if p is not None and p.line.line > 0 else None)
    return states
