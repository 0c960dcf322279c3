"""The verdict flight-recorder dumps give on their own (dumps and no worker log).

A directory of dumps is evidence enough for a hang's shape: every rank's dump lists the groups it is a member of
(so the world and each group are known), and the stuck collectives show who never joined. What the dumps cannot
say is *why* a rank stopped enqueuing (a data loader, a held GIL, a crash): the category stays
``nccl_timeout_unattributed`` with the rank named, or ``collective_mismatch`` when a rank scheduled a different
op/size/dtype. The ranks are culprits when every member of the group they hold up dumped, suspects otherwise (a
member without a dump may be the cause: a crashed process writes none).

:func:`decide` is the hook the decision procedure calls first (:func:`~debug_training_logs.analysis.diagnosis.
conclude`); :func:`~debug_training_logs.analysis.fr_types.dump_coverage` is the coverage
:attr:`JobEvidence.coverage` reports then; the verifier checks a conclusion against the same facts
(:mod:`~debug_training_logs.verify.fr_rules`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from debug_training_logs.ranges import format_ranges

if TYPE_CHECKING:
    from debug_training_logs.analysis.evidence_types import JobEvidence
    from debug_training_logs.analysis.fr_types import FlightRecorderFacts, GroupFacts

CHAIN_GROUPS = 3
"""Root groups whose stuck collective the chain shows (the rest are in the per-PG table)."""
MISMATCH_STEP = (
    "Find the code path that makes these ranks call a different collective (a branch on rank-local data, an uneven "
    "last batch) from the frames of the odd entries."
)
ALL_JOINED_STEP = (
    "Read the NCCL logs (NCCL_DEBUG=INFO) and the nodes' kernel logs (Xid, link errors) of the group's members."
)
NOTHING_STUCK_STEP = (
    "Add the worker logs (every rank's stderr/stdout), or dump the flight recorder during the hang "
    "(TORCH_NCCL_DUMP_ON_TIMEOUT=1)."
)


@dataclass
class DumpStep:
    """One step of the chain: what it shows, the dump entry it rests on (file, index in ``entries``, its text)."""

    what: str
    file: str
    index: int
    text: str
    ranks: set[int]
    time: datetime | None
    """The entry's ``time_created_ns`` (the rank's wall clock) as naive UTC."""


@dataclass
class DumpFinding:
    """What the dumps establish: category, culprits, suspects, ranks without a dump, and why."""

    category: str
    culprits: list[int]
    suspects: list[int]
    no_dump: list[int]
    confidence: str
    explanation: str
    chain: list[DumpStep] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    details: dict[str, object] = field(default_factory=dict)


def _naive_utc(ns: int | None) -> datetime | None:
    if ns is None or not 0 < ns < 1 << 63:
        return None
    return datetime.fromtimestamp(ns / 1e9, UTC).replace(tzinfo=None)


def _fmt(ranks: list[int] | set[int] | frozenset[int]) -> str:
    return format_ranges(ranks) or "none"


def _stuck_text(g: GroupFacts) -> str:
    s = g.stuck
    if s is None:
        return g.label()
    return f"{s.op} seq {s.seq} (in={s.input_sizes} {','.join(s.dtypes) or '?'}) of {g.label()}"


def _chain(fr: FlightRecorderFacts, roots: list[GroupFacts]) -> list[DumpStep]:
    steps: list[DumpStep] = []
    for g in roots[:CHAIN_GROUPS]:
        s = g.stuck
        for r in g.roots:
            c = g.cited.get(r)
            if c is None:
                continue
            if r in {x for m in g.mismatches for x in m.odd}:
                what = f"rank {r} schedules a different collective in {g.label()}"
            elif r in g.behind:
                what = f"rank {r} has not started {_stuck_text(g)} that the others started"
            else:
                what = f"rank {r}'s last entry in {g.label()}: it never enqueues {_stuck_text(g)}"
            steps.append(DumpStep(what, c.file, c.index, c.text, {r}, _naive_utc(c.time_ns)))
        if s is not None and s.cited is not None:
            waiting = g.waiting_ranks or s.joined
            steps.append(
                DumpStep(
                    f"rank(s) {_fmt(waiting)} wait in {_stuck_text(g)}"
                    + (f" for rank(s) {_fmt(g.roots)}" if g.roots else ""),
                    s.cited.file,
                    s.cited.index,
                    f"{s.cited.text}; stack: {' < '.join(s.frames[:3])}"[:300],
                    set(waiting),
                    _naive_utc(s.stalled_ns),
                )
            )
    return steps


def _last_calls(roots: list[GroupFacts], ranks: frozenset[int]) -> str:
    """' Rank 9's last recorded call: ... from f (file:line) < g (...).' for up to three accused ranks."""
    out: dict[int, str] = {}
    for g in roots:
        for r in sorted(ranks):
            call = g.last_calls.get(r)
            if call and r not in out and len(out) < 3:
                what, frames = call[0].removeprefix("last call: "), call[1:4]
                out[r] = f" Rank {r}'s last recorded call: {what}" + (f", from {' < '.join(frames)}" if frames else "")
    return "".join(f"{x}." for x in out.values())


def finding(fr: FlightRecorderFacts) -> DumpFinding:
    """The verdict of the dumps (see the module docstring)."""
    acc = fr.accused()
    stuck = [g for g in fr.stuck_groups if g.stuck is not None]
    roots = [g for g in fr.stuck_groups if g.roots]
    seen = f"The flight-recorder dumps ({len(fr.dumps)} dump(s) of a {len(fr.world)}-rank world ({fr.world_evidence})"
    seen += f"; rank(s) {_fmt(fr.no_dump)} wrote no dump)" if fr.no_dump else ")"
    later = [g for g in stuck if not g.roots]
    consequence = (
        f" {len(later)} other group(s) stalled behind them: their missing ranks already waited elsewhere "
        f"(e.g. {later[0].label()} misses {_fmt(sorted(later[0].explained))})."
        if later and later[0].explained
        else ""
    )
    steps = [
        f"Read the log of rank(s) {_fmt(acc.culprits | acc.suspects)} around the time their last collective was "
        "enqueued: the dumps show where a rank stopped enqueuing, not why (a data loader, a held GIL, a crash). Next "
        "time dump its Python stack during the hang (py-spy dump --pid <PID>).",
    ]
    if fr.no_dump:
        steps.append(
            f"Find out why rank(s) {_fmt(fr.no_dump)} wrote no dump (a crashed or killed process writes none): their "
            "logs and the node's kernel log (dmesg -T)."
        )
    category, confidence, chain = "nccl_timeout_unattributed", "low", _chain(fr, roots)
    if acc.how == "mismatch":
        g = next(g for g in roots if g.mismatches)
        m = g.mismatches[0]
        odd = "; ".join(f"rank {r}: {v}" for r, v in list(m.odd.items())[:4])
        category, steps = "collective_mismatch", [MISMATCH_STEP, *steps]
        confidence = "high" if acc.culprits else "medium"
        why = (
            f"{seen} show the ranks of {g.label()} scheduling different collectives at seq {m.seq} ({m.field}: {odd}; "
            f"the others {m.majority or 'disagree among themselves'}): the collective can never complete, every "
            f"member waits until its timeout.{consequence}"
        )
    elif acc.culprits or acc.suspects:
        where = f" {_stuck_text(roots[0])} stalled first" if roots else ""
        named = (
            f"rank(s) {_fmt(acc.culprits)} never joined the collective their group waits in and wait in no earlier "
            "one: the hang starts there"
        )
        sus = {
            "no_dump": f"rank(s) {_fmt(acc.suspects)} wrote no dump and their group waits for them",
            "cycle": f"every missing rank waits elsewhere (a cycle); the group that stalled first waits for "
            f"rank(s) {_fmt(acc.suspects)}",
        }.get(acc.how, f"rank(s) {_fmt(acc.suspects)} may be the cause (a member of their group wrote no dump)")
        who = "; ".join(x for x, present in ((named, acc.culprits), (sus, acc.suspects)) if present)
        confidence = "medium" if acc.culprits else "low"
        why = (
            f"{seen} show {len(stuck)} process group(s) stuck;{where}. {who}.{consequence}"
            f"{_last_calls(roots, acc.culprits | acc.suspects)} No worker log was read, so nothing says why (the hang "
            "is attributed to the rank, not to a cause)."
        )
    elif stuck:
        chain, steps = _chain(fr, stuck[:1]), [ALL_JOINED_STEP]
        why = (
            f"{seen} show {len(stuck)} process group(s) stuck, and every member entered the collective each waits in: "
            f"{_stuck_text(stuck[0])} stalled first with all of its members in it and none completing. No rank is "
            "missing: a fabric or GPU fault inside the group, which the dumps cannot name."
        )
    else:
        category, chain, steps = "incomplete_evidence", [], [NOTHING_STUCK_STEP]
        why = (
            f"{seen} show no stuck collective and no mismatch: every recorded collective completed. Without the "
            "worker logs nothing shows a failure."
        )
    details: dict[str, object] = {"decided_by": "flight_recorder", "how": acc.how, "groups": list(acc.groups)}
    return DumpFinding(
        category, sorted(acc.culprits), sorted(acc.suspects), fr.no_dump, confidence, why, chain, steps, details
    )


def decide(ev: JobEvidence) -> DumpFinding | None:
    """The dumps' finding when they are the only evidence (:meth:`JobEvidence.dumps_alone`), else None: the hook
    :func:`~debug_training_logs.analysis.diagnosis.conclude` calls before its other deciders."""
    if not ev.dumps_alone():
        return None
    assert ev.flight_recorder is not None
    return finding(ev.flight_recorder)
