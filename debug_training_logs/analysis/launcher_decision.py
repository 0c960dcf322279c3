"""What the launcher, backend and flight-recorder facts decide on their own, for the decision procedure.

:func:`decide` reads :class:`~debug_training_logs.analysis.launcher.LauncherFacts` and
:class:`~debug_training_logs.analysis.fr_dumps.FlightRecorderFacts` of a :class:`JobEvidence` and returns a
:class:`LauncherCall` (category, culprits, explanation, the lines it rests on) or None when they do not decide.
The decision procedure (:mod:`~debug_training_logs.analysis.diagnosis`) turns a call into its verdict; the verifier
reads the same facts (one definition of who died on its own).

Only for what NCCL's watchdog table does not already decide: a job whose collectives did not time out in NCCL
(gloo CPU jobs, a SIGKILLed rank, a DETAIL mismatch report), or one whose workers never started (the agent's
rendezvous or store failed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from debug_training_logs.analysis.launcher import LauncherFacts, RankFate, mismatch_culprits
from debug_training_logs.ranges import format_ranges

if TYPE_CHECKING:  # the result models import pydantic, which the scan never needs: imported where they are built
    from debug_training_logs.models import Evidence

if TYPE_CHECKING:  # the dumps module is imported where dumps are read
    from debug_training_logs.analysis.fr_dumps import FlightRecorderFacts

OWN_SIGNALS = frozenset({"SIGKILL", "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"})
"""Signals that end a rank on its own (the OOM killer's SIGKILL, a crash in native code). Not SIGTERM (the agent's
teardown, SLURM's cancel), not SIGABRT (NCCL's watchdog aborts the victims of a hang), not SIGINT/SIGHUP."""


@dataclass(repr=False, eq=False)
class LauncherCall:
    """A verdict the launcher/backend/dump facts support: ``how`` says which fact decided."""

    category: str
    culprits: set[int]
    how: str
    explanation: str
    evidence: list[tuple[str, Evidence]] = field(default_factory=list)
    """(what the line shows, the line), cause first."""
    confidence: str = "high"
    nodes: list[str] | None = None
    next_steps: list[str] = field(default_factory=list)
    details: dict[str, object] = field(default_factory=dict)


def _fmt(ranks: set[int]) -> str:
    return format_ranges(ranks) or "none"


def _victims(lf: LauncherFacts, culprits: set[int]) -> list[tuple[str, Evidence]]:
    out: list[tuple[str, Evidence]] = []
    for f in lf.fates.values():
        if f.rank in culprits:
            continue
        if f.comm_error is not None and len(out) < 2:
            out.append((f"rank {f.rank} raises a gloo {f.comm_kind} error (a victim)", f.comm_error))
    torn = sorted(r for r, f in lf.fates.items() if f.torn_down and r not in culprits)
    first_torn = next((f for r, f in lf.fates.items() if r in torn and f.exit_evidence is not None), None)
    if first_torn is not None and first_torn.exit_evidence is not None:
        out.append(
            (f"the agents SIGTERM the rank(s) still running ({_fmt(set(torn))}): exit -15", first_torn.exit_evidence)
        )
    return out


def _fr_note(fr: FlightRecorderFacts | None, culprits: set[int]) -> tuple[str, str | None]:
    """(a sentence on what the dumps say about ``culprits``, None or 'agree'/'disagree')."""
    if fr is None or not fr.dumps:
        return "", None
    named, how = fr.culprits
    if not named:
        return f" The flight-recorder dumps ({len(fr.dumps)} rank(s)) single out no rank.", None
    if named == culprits:
        return (
            f" The flight-recorder dumps agree: rank(s) {_fmt(named)} {how.replace('_', ' ')} "
            f"({len(fr.dumps)} dump(s), format {', '.join(fr.versions) or '?'}).",
            "agree",
        )
    return f" The flight-recorder dumps name rank(s) {_fmt(named)} ({how.replace('_', ' ')}) instead.", "disagree"


def decide(
    lf: LauncherFacts | None,
    fr: FlightRecorderFacts | None,
    known_ranks: set[int],
    *,
    nccl_timed_out: bool,
    slurm_cancelled: bool,
    data_ranks: set[int],
) -> LauncherCall | None:
    """The call the launcher facts (and dumps) support, or None. ``data_ranks``: ranks with data-loading errors."""
    if lf is None or nccl_timed_out:
        return None
    culprits, how = lf.culprits(known_ranks)
    if how == "signal":
        if slurm_cancelled:
            return None
        own = {r for r in culprits if lf.fates[r].signal in OWN_SIGNALS}
        if not own:
            return None
        sig = ", ".join(sorted({lf.fates[r].signal or "?" for r in own}))
        ev: list[tuple[str, Evidence]] = [
            (f"rank {r} is killed by {lf.fates[r].signal} (exit {lf.fates[r].exitcode}): no Python traceback", e)
            for r in sorted(own)
            if (e := lf.fates[r].exit_evidence) is not None
        ]
        note, _ = _fr_note(fr, own)
        oom = " (the signal the kernel OOM killer sends)" if "SIGKILL" in sig else ""
        torn = {r for r, f in lf.fates.items() if f.torn_down and r not in own}
        lost = {r for r, f in lf.fates.items() if f.comm_error is not None and r not in own}
        after = [
            *([f"their agents SIGTERMed rank(s) {_fmt(torn)} (exit -15)"] if torn else []),
            *([f"rank(s) {_fmt(lost)} lost their gloo peer"] if lost else []),
        ]
        return LauncherCall(
            "rank_crash",
            own,
            "signal",
            f"Rank(s) {_fmt(own)} were killed by {sig}{oom}, not by their agent (no traceback, exit "
            f"{', '.join(str(lf.fates[r].exitcode) for r in sorted(own))})."
            + (f" Then {' and '.join(after)}: consequences." if after else "")
            + note,
            ev + _victims(lf, own),
            next_steps=[
                "Check the node's kernel log for the OOM killer (dmesg -T | grep -i 'killed process') and the job's "
                "peak memory (sacct -j <JOBID> --format=MaxRSS,ReqMem)."
            ]
            if "SIGKILL" in sig
            else [],
            details={"signal": sig, "oom_killer_suspected": "SIGKILL" in sig},
        )
    if how == "mismatch" or (how == "undecided" and fr is not None and fr.culprits[1] == "mismatch"):
        return _mismatch(lf, fr, culprits if how == "mismatch" else fr.culprits[0] if fr else set())
    if how == "straggler" or (how == "undecided" and fr is not None and fr.culprits[1] == "never_joined"):
        named = culprits if how == "straggler" else fr.culprits[0] if fr is not None else set()
        return _straggler(lf, fr, named, how, data_ranks)
    return None


def _mismatch(lf: LauncherFacts, fr: FlightRecorderFacts | None, culprits: set[int]) -> LauncherCall:
    ev: list[tuple[str, Evidence]] = []
    for r, m, e in lf.mismatches:
        if r in culprits or len(ev) < 1:
            other = m.second
            what = f"{m.first.op} seq {m.first.seq}" + (
                f" vs rank {other.rank}: {other.op} seq {other.seq}" if other else ""
            )
            ev.append((f"rank {r} reports the mismatch (TORCH_DISTRIBUTED_DEBUG=DETAIL): {what}", e))
        if len(ev) >= 2:
            break
    note, agreement = _fr_note(fr, culprits)
    if lf.mismatches:
        first = lf.mismatches[0][1]
        odd = mismatch_culprits([m for _, m, _ in lf.mismatches])
        ops = {fp.rank: fp.op for _, m, _ in lf.mismatches for fp in (m.first, m.second) if fp is not None}
        expl = (
            f"TORCH_DISTRIBUTED_DEBUG=DETAIL compared the ranks' collectives: rank(s) {_fmt(odd)} ran "
            f"{', '.join(sorted({str(ops.get(r)) for r in odd}))} where the others ran "
            f"{', '.join(sorted({str(v) for r, v in ops.items() if r not in odd}))} (sequence {first.first.seq}). "
            "Every rank raised the mismatch error; the rank whose collective differs is the cause." + note
        )
    else:
        g = next((g for g in (fr.groups if fr else []) if g.mismatches), None)
        mm = g.mismatches[0] if g else None
        expl = (
            "The flight-recorder dumps show the ranks scheduled different collectives at the same sequence number"
            + (
                f" ({mm.field}: rank(s) {_fmt(set(mm.odd))} {', '.join(sorted(set(mm.odd.values())))}, the others "
                f"{mm.majority}, seq {mm.seq}, PG {g.pg if g else '?'})"
                if mm
                else ""
            )
            + ": every rank then waited for peers that were in another collective and timed out."
        )
    return LauncherCall(
        "collective_mismatch",
        culprits,
        "mismatch" if lf.mismatches else "dump_mismatch",
        expl,
        ev + _victims(lf, culprits),
        "high" if lf.mismatches or agreement == "agree" else "medium",
        details={"mismatch_source": "DETAIL" if lf.mismatches else "flight_recorder", "dumps": agreement},
    )


def _straggler(
    lf: LauncherFacts, fr: FlightRecorderFacts | None, named: set[int], how: str, data_ranks: set[int]
) -> LauncherCall | None:
    note, agreement = _fr_note(fr, named)
    if agreement == "disagree" and fr is not None:
        named = fr.culprits[0]
        note = f" The launcher lines pointed elsewhere; the flight-recorder dumps decide: {note.strip()}"
    timed: list[RankFate] = [f for f in lf.fates.values() if f.timed_out]
    if not named:
        return None
    ev: list[tuple[str, Evidence]] = [
        (f"rank {f.rank} times out waiting in the collective (a victim)", f.comm_error)
        for f in timed[:2]
        if f.comm_error is not None
    ]
    torn = [lf.fates[r] for r in sorted(named) if r in lf.fates and lf.fates[r].exit_evidence is not None]
    for f in torn[:1]:
        assert f.exit_evidence is not None
        ev.append((f"rank {f.rank} never timed out: its agent SIGTERMs it (exit -15)", f.exit_evidence))
    category = "data_loading_stall" if named <= data_ranks else "nccl_timeout_unattributed"
    source = "the flight-recorder dumps" if how == "undecided" else "the gloo timeouts"
    expl = (
        f"Rank(s) {_fmt(named)} never entered the collective the others waited in ({source}: ranks "
        f"{_fmt({f.rank for f in timed})} timed out waiting in gloo; rank(s) {_fmt(named)} logged no timeout and were "
        "torn down by their agent)."
        + (
            " Their last lines are data-loading errors."
            if category == "data_loading_stall"
            else " No line of theirs says why (the hang is attributed to the rank, not to a cause)."
        )
        + note
    )
    return LauncherCall(
        category,
        named,
        "straggler" if how == "straggler" else "dump_never_joined",
        expl,
        ev,
        "high" if agreement == "agree" else "medium",
        next_steps=[
            "Dump the stuck rank's Python stack next time (py-spy dump --pid <PID>) and keep the flight recorder on "
            "(TORCH_FR_BUFFER_SIZE) so the dumps show which collective each rank reached."
        ],
        details={"dumps": agreement, "gloo": True},
    )


def agent_failure(lf: LauncherFacts | None, ranks_seen: set[int]) -> LauncherCall | None:
    """No worker ever ran (no rank wrote a line) and an agent says why: its store could not listen (the port is
    taken), or the rendezvous could not be reached / closed / timed out."""
    if lf is None or ranks_seen:
        return None
    listen = [(a, e) for a in lf.agents for e in a.listen_failures]  # (a worker's own store too: mp.spawn's rank 0)
    if listen:
        a, e = listen[0]
        port = e.text
        return LauncherCall(
            "address_in_use",
            set(),
            "port_in_use",
            f"The rendezvous TCPStore (torchrun's agent, or the rank that hosts it) in {a.node or a.file} could not "
            "listen: the port is already in use (EADDRINUSE). No worker ever started training, so no rank is to "
            "blame: another process holds the port (a previous job's agent, a second job on the node).",
            [("the agent's store cannot listen on the rendezvous port", e)],
            nodes=[a.node] if a.node else None,
            next_steps=[
                f"Find the holder of the port on that node (ss -ltnp | grep <port>); {port[:0]}pick a free "
                "--master-port / --rdzv-endpoint port or let torchrun choose one (--rdzv-endpoint host:0)."
            ],
            details={"port": True},
        )
    rdzv = [(a, e) for a in lf.agents for e in a.rendezvous_errors]
    unreachable = [(a, h, e) for a in lf.agents for h, e in a.unreachable]
    if (rdzv or unreachable) and not lf.fates:
        a, e = rdzv[-1] if rdzv else (unreachable[0][0], unreachable[0][2])
        hosts = sorted({h for _a, h, _e in unreachable})
        reach = [(f"the agent cannot reach the store on {h}", ev) for _a, h, ev in unreachable[:1]]
        local = [h for h in hosts if h in _LOCAL_HOSTS]
        why = (
            f"; an agent dialled {local[0]}: the rendezvous endpoint names the local machine, so on every node but "
            "the master the agent looked for the store on itself (a single-node --master-addr reused for several "
            "nodes)"
            if local and len({ag.file for ag in lf.agents if ag.pids or ag.rendezvous_errors or ag.unreachable}) > 1
            else (
                f"; it could not reach {', '.join(hosts)}. The rendezvous host's agent never answered: that node (or "
                "its agent) is the one to look at; the logs of the agent that did start only show it waiting"
                if hosts
                else ""
            )
        )
        return LauncherCall(
            "launch_failure",
            set(),
            "rendezvous",
            f"No worker ever started: the torchrun agent in {a.file} failed to rendezvous ({e.text[:160]}){why}.",
            [*reach, ("the agent gives up on the rendezvous", e)],
            "medium",
            nodes=[h for h in hosts if h not in _LOCAL_HOSTS],
            next_steps=[
                "Check that every node started its torchrun (the rendezvous endpoint's node first) and that the "
                "endpoint host:port is the master's routable address, reachable from the others."
            ],
        )
    return None


_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})
"""Addresses that name the machine itself: an endpoint no other node can reach."""
