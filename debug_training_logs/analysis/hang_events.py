"""The hang artifacts' part of the causal model: each dumped rank's fate and events, and the accusation the stacks
make (the ranks outside the collective their peers wait in).

A stack dump is a fact about a moment: the rank is in data loading, in ``torch.save``, asleep, on a lock, in another
collective, or gone, while the others wait. It is the same kind of evidence as a log line (cited ``file:line``)
and feeds the same model; the node telemetry (an Xid on a rank's GPU) adds that rank's own failure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from debug_training_logs.analysis.evidence_types import Hit
from debug_training_logs.analysis.fates import Accusation, Fate, Process, RankEvent

if TYPE_CHECKING:
    from debug_training_logs.analysis.hang_facts import HangFacts, ProcessState

STATE_KIND: Final = {
    "data_loading": "stuck_data",
    "checkpoint": "stuck_checkpoint",
    "sleeping": "stuck",
    "lock": "stuck",
    "compute": "stuck",
    "blocked": "stuck",
    "gone": "gone",
    "shutdown": "early_exit",
}
"""The primary event a stuck rank's state makes (its category: :data:`~.causal.KIND_CATEGORY`)."""


def stack_hit(p: ProcessState) -> Hit:
    """The dump line that shows ``p``'s state, as a cited line of the causal model."""
    return Hit("stack_dump", p.file, p.state.line_no, p.state.text, p.rank, None)


def hang_events(hang: HangFacts, fates: dict[int, Fate]) -> tuple[list[Accusation], list[RankEvent]]:
    """Add the dumped ranks' states to their fates (a rank seen only in the dumps gets one); return the stacks'
    accusation and the events of stuck processes no line ties to a rank."""
    unranked: list[RankEvent] = []
    for p in hang.waiting:
        if p.rank is None:
            continue
        f = fates.setdefault(p.rank, Fate(p.rank, "waiting", "waiting in a collective (stack dump)"))
        f.waits_in = f.waits_in or f"{p.state.what}" + (f" at {p.state.call_site}" if p.state.call_site else "")
        if f.end in ("unknown", "absent"):
            f.end, f.why = "waiting", f"{p.state.words()} ({p.cite()})"
        if hang.stuck or hang.detours:  # it waits for them: a consequence, shown in the chain
            f.events.append(RankEvent(p.rank, "peer_wait", p.words().split(" ", 2)[-1], stack_hit(p)))
    accused: list[ProcessState] = []
    for p in hang.stuck:
        kind = STATE_KIND[p.state.kind]
        what = p.words().split(" ", 2)[-1] if p.rank is not None else p.state.words()
        if hang.waits_in:
            what += f", while the others wait in {hang.waits_in}"
        event = RankEvent(p.rank, kind, what, stack_hit(p))  # type: ignore[arg-type]
        if p.rank is None:
            process = Process(p.host, None, p.pid, None)
            unranked.append(RankEvent(None, kind, what, stack_hit(p), process=process))  # type: ignore[arg-type]
            continue
        f = fates.setdefault(p.rank, Fate(p.rank, "stuck", ""))
        f.events.append(event)
        if f.end in ("unknown", "absent", "waiting", "stuck"):
            f.end, f.why = ("stuck" if p.state.kind != "gone" else "killed"), f"{p.state.words()} ({p.cite()})"
        accused.append(p)
    for p in hang.detours:
        if p.rank is None:
            continue
        what = f"{p.state.words()}, while the others wait in {hang.waits_in}"
        f = fates.setdefault(p.rank, Fate(p.rank, "waiting", ""))
        f.events.append(RankEvent(p.rank, "detour", what, stack_hit(p)))
        accused.append(p)
    for r, (file, (no, text, words)) in hang.fatal.items():
        # Python's faulthandler wrote the fatal error it died of (a SIGSEGV in an extension): its own death
        f = fates.setdefault(r, Fate(r, "crashed", ""))
        at = Hit("signal", file, no, text, r, None)
        f.events.append(RankEvent(r, "own_signal", f"died of a fatal error: {words}", at))
        if f.end in ("unknown", "absent", "waiting", "stuck"):
            f.end, f.why = "crashed", f"Fatal Python error: {words} ({file}:{no})"
    accs: list[Accusation] = []
    if accused:
        first = accused[0]
        accs.append(
            Accusation(None, frozenset(p.rank for p in accused if p.rank is not None), "stack_dump", stack_hit(first))
        )
    for g in hang.gpu_failures:
        line = Hit("telemetry", g.file, g.line_no, g.text, g.rank, g.time)
        what = f"lost its GPU: {g.what} ({'GPU ' + g.pci if g.pci else 'a GPU'}{' on ' + g.host if g.host else ''})"
        if g.rank is None:
            unranked.append(RankEvent(None, "cuda_error", what, line, process=Process(g.host, None, None, None)))
            continue
        f = fates.setdefault(g.rank, Fate(g.rank, "killed", ""))
        f.events.append(RankEvent(g.rank, "cuda_error", what, line))
    for a in hang.ras:
        line = Hit("telemetry", a.file, a.line_no, a.text, None, None)
        accs.append(Accusation(None, a.ranks, "nccl_ras", line))
    return accs, unranked
