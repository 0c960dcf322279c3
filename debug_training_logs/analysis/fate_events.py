"""Gathering the causal model: each rank's fate and events, and the accusations between ranks, from a job's evidence.

Built once per :class:`~debug_training_logs.analysis.evidence.JobEvidence` from what the one scan gathered (the
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
from debug_training_logs.analysis.evidence import (
    CLOCK_SLACK,
    Hit,
    JobEvidence,
    Trigger,
    WorkerEvidence,
    crash_triggers,
    handled,
    is_consequence,
    rank_states,
    trigger_of,
    triggers,
)
from debug_training_logs.analysis.fates import (
    Accusation,
    CausalModel,
    Fate,
    FateEnd,
    Process,
    RankEvent,
)
from debug_training_logs.analysis.inventory import FileInventory
from debug_training_logs.analysis.launcher import LauncherFacts, mismatch_culprits
from debug_training_logs.analysis.launcher_decision import OWN_SIGNALS
from debug_training_logs.formats import accusations, gloo, torchrun
from debug_training_logs.formats.timestamps import parse_wall_time, with_year
from debug_training_logs.ranges import format_ranges

UNRANKED_KINDS = ("oom", "cuda_error", "exception", "nan", "data_error")
"""Failures read on a line no rank is known for (a port taken is the launcher's own branch: no worker started)."""
INFERRED_KINDS = ("stall", "early_exit", "detour", "node_lost")
"""Primary events read from what a rank did not do (it stopped, left, went elsewhere, went silent), not from a line
of its own failure."""
MAX_UNRANKED = 64
"""Failures on lines of no known rank kept in the model (a node's repeated Xid lines need not all be held)."""

_STEP = re.compile(r"(?:\bstep|\biter(?:ation)?|global_step)[\s=:]*(\d+)", re.IGNORECASE)

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
            f.events.append(_primary_of(t))
    if lf is not None:
        _launcher_events(lf, fates, w, {row.rank for row in ev.nccl.rows})
        _detours(lf, fates, year)
    _nccl_events(ev, fates)
    for a in accused_lines:  # an accusation that reached no trigger (a warning, an ERROR log line) is a report too
        f = fates.get(a.by) if a.by is not None else None
        if f is not None and a.by not in a.accused and not any(e.line.line == a.line.line for e in f.events):
            f.events.append(RankEvent(a.by, "report", f"reports rank(s) {_fmt(a.accused)} failed", a.line, a.accused))
    processes = _unmapped_processes(lf, fates, year) if lf is not None else []
    _silent_fates(ev, fates)
    _late_errors(ev, fates)
    _stuck_after_error(fates)
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
    # a failure on a line no rank is known for (a pasted traceback, a node's Xid line): the process, not a rank
    unranked = [
        _primary_of(t)
        for t in triggers(ev)
        if t.hit.rank is None and (t.hit.file, t.hit.line) not in reports and torchrun.benign(t.hit.text) is None
    ]
    processes += [e for e in unranked if e.kind in UNRANKED_KINDS][:MAX_UNRANKED]
    files = w.job.inventory.files
    return CausalModel(
        fates=fates,
        accusations=accs,
        processes=processes,
        world_size=w.world_size,
        missing=set(w.missing_ranks),
        seen=set(w.ranks),
        job_layout=len(files) > 1 or any(f.launcher_lines for f in files),
    )


def _fmt(ranks: Iterable[int]) -> str:
    return format_ranges(ranks) or "none"


def _primary_of(t: Trigger) -> RankEvent:
    kind = {
        "cuda_oom": "oom",
        "cuda_error": "cuda_error",
        "data": "data_error",
        "watchdog_hang": "watchdog_hang",
    }.get(t.category)
    if kind is None:
        kind = "nan" if t.what == "NaN/Inf loss" else "launch" if "address already in use" in t.what else "exception"
    return RankEvent(t.hit.rank, kind, t.what, t.hit)  # type: ignore[arg-type]


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
        own_abort = rf.signal == "SIGABRT" and r not in watched and rf.comm_error is None
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
                f.events.append(_primary_of(t))
        elif not has_primary and rf.comm_error is None and (rf.exitcode or 0) > 0 and rf.exit_evidence is not None:
            e = rf.exit_evidence
            what = f"exited with code {rf.exitcode} (no error of its own in its log)"
            f.events.append(RankEvent(r, "exception", what, hit_of(e.file, e.line, e.text, r, year), weak=True))


def _detours(lf: LauncherFacts, fates: dict[int, Fate], year: int | None) -> None:
    """Ranks that waited in another collective than the others (their tracebacks' collective calls): the odd ones
    out against a strict majority took a detour (a rank-only collective, a barrier entered alone)."""
    # only ranks that timed out waiting: when a peer died, each rank fails in whatever collective it was in (and
    # ranks of different groups run different collectives at the same time), which says nothing of a detour
    calls = {
        r: rf.collective
        for r, rf in lf.fates.items()
        if rf.collective is not None and r in fates and rf.comm_kind == "timeout"
    }
    for r, c in calls.items():
        fates[r].waits_in = fates[r].waits_in or c
    if len(calls) < 2:
        return
    (top, n), *_rest = Counter(calls.values()).most_common()
    if n * 2 <= len(calls):
        return  # no majority to differ from
    for r, c in calls.items():
        rf = lf.fates[r]
        if c == top or rf.comm_error is None:
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


def step_of(h: Hit | None) -> int | None:
    if h is None:
        return None
    m = _STEP.search(h.text)
    return int(m.group(1)) if m else None


def _silent_fates(ev: JobEvidence, fates: dict[int, Fate]) -> None:
    """Give the ranks that left the story silently the primary event their fate implies: a stall (they never entered
    the collective the others waited in) or an early exit (they ended without an error while the others waited)."""
    waited = [f for f in fates.values() if any(e.kind in ("peer_timeout", "peer_closed", "report") for e in f.events)]
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
        quiet = not any(e.kind in ("peer_timeout", "peer_closed", "peer_mismatch", "report") for e in f.events)
        if not quiet:
            continue
        if r in lost:
            line = lost[r]
            f.events.append(
                RankEvent(r, "node_lost", "its whole node went silent at once, no error", line, when=line.time)
            )
            f.end, f.why = "unknown", "its node's log stops with no error and no launcher report: the node died"
            continue
        own_end = finished_clean.get(r)
        # it left: its own end line, or an exit code 0, or its launcher reported its node's failed workers and
        # stopped the ones still running without it among either (it had already exited, cleanly)
        gone = f.exit_code == 0 or (lf is not None and _exited_before_teardown(lf, ev, r))
        left = f.stopped_by is None and f.exit_code in (None, 0) and (own_end is not None or gone)
        files = ev.worker.files_of_rank(r)
        end_line = own_end or f.last_progress or (ev.worker.file_end.get(files[0]) if files else None)
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
            line = f.last_progress or end_line or Hit("state", "", 0, "", r, None)
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


def _late_errors(ev: JobEvidence, fates: dict[int, Fate]) -> None:
    """A rank whose read hung and failed only after the others had begun to wait was stalled from its last
    progress: its error is when the stall ended, not when it began (its primary event is the stall). The others
    began to wait when the stuck collective started, or (no timeout to date it) after their own last progress."""
    known = collective_start(ev, fates)
    for f in fates.values():
        p = f.primary
        last = f.last_progress
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
            continue
        end = max(ends, key=lambda e: e.time or datetime.min)
        if first_reaction is not None and end.time is not None and end.time > first_reaction:
            continue
        for r in ranks:
            out[r] = end
    return out


def _exited_before_teardown(lf: LauncherFacts, ev: JobEvidence, rank: int) -> bool:
    """Its node's launcher reported the workers that failed and SIGTERMed those still running, and this rank is
    among neither: it had exited before, with code 0 (torchrun's table lists every worker that did not)."""
    files = set(ev.worker.files_of_rank(rank))
    tables = [t for rel, t in lf.tables if rel in files]
    if not tables:
        return False
    listed = {f.rank for t in tables for f in t.failures}
    tabled_pids = {f.pid for t in tables for f in t.failures}
    unaccounted = {p for a in lf.agents if a.file in files for p in a.sigterm_pids} - tabled_pids
    # a SIGTERMed worker no table names may be this rank (a table cut off, or another node's agent in one file)
    return bool(listed) and rank not in listed and not unaccounted


def _stuck_after_error(fates: dict[int, Fate]) -> None:
    """A rank whose error did not end it (it stayed alive, outside the collective the others waited in, or nothing
    says it died: no exception reached the top, no exit code) while the others waited stalled on it: a data loader
    that raised and then hung, a read that failed and was never retried."""
    waited = any(e.kind in ("peer_timeout", "peer_closed") for f in fates.values() for e in f.events)
    for f in fates.values():
        p = f.primary
        # (a SIGABRT or SIGTERM ended it from outside: the watchdog's abort, its agent's teardown)
        alive = f.end == "stuck" or (f.end == "unknown" and f.exit_code in (None, -6, -15) and waited)
        if not alive or p is None or p.kind not in ("data_error", "exception"):
            continue
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
        if e.kind in ("peer_timeout", "peer_closed") and e.line.file == p.line.file and e.line.line < p.line.line
    ]
    return bool(waits) and last.line < min(waits)


def _unmapped_processes(lf: LauncherFacts, fates: dict[int, Fate], year: int | None) -> list[RankEvent]:
    """Launcher lines about a worker with no global rank (``failed (exitcode: 1) local_rank: 3 (pid: P)`` with no
    table or rank prefix to map it): the process, in the launcher's words."""
    out: list[RankEvent] = []
    known_pids = {f.pid for t_rel, t in lf.tables for f in t.failures}
    for a in lf.agents:
        for no, wf in a.worker_failed:
            if wf.pid in known_pids or (wf.exitcode is not None and wf.exitcode == -15):
                continue
            code = wf.exitcode
            own = code is not None and (code > 0 or _signal_name(code) in OWN_SIGNALS)
            if not own:
                continue
            g = a.local_to_global.get(wf.local_rank)
            if g is not None and g in fates:  # the file maps its local rank: the event is that rank's
                f = fates[g]
                if not any(e.primary for e in f.events):
                    h = Hit("launcher", a.file, no, f"failed (exitcode: {code}) local_rank: {wf.local_rank}", g, None)
                    sig = _signal_name(code)
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
    return out


def _signal_name(code: int | None) -> str | None:
    return {-9: "SIGKILL", -11: "SIGSEGV", -7: "SIGBUS", -4: "SIGILL", -8: "SIGFPE", -6: "SIGABRT", -15: "SIGTERM"}.get(
        code or 0
    )
