"""Classifying one process group of the NCCL table from all its rows (straggler, fabric, root_ahead, mismatch,
mixed, incomplete; see :mod:`~debug_training_logs.analysis.nccl_table`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from debug_training_logs.analysis.inventory_sink import MAX_CREDIBLE_WORLD
from debug_training_logs.analysis.nccl_rows import Majority, Outlier, ProcessGroupResult, Row
from debug_training_logs.ranges import format_ranges

PER_STEP_COLLECTIVES = 3
"""Collectives a NeMo/Lightning DDP step issues on the default PG: PreemptionCallback broadcast + DDP allreduce +
broadcast_buffers. A root ``k`` ops ahead is ``k / 3`` steps ahead."""


def _is_default(pg: str | None, desc: str | None) -> bool:
    return pg == "0" or desc == "default_pg"


def _sig(r: Row) -> tuple[Any, ...]:
    return (r.seq, r.last_enqueued, r.last_completed, r.op_type, r.signal)


def _infer_members(rows: list[Row]) -> tuple[dict[int, int], list[int]]:
    """PG rank -> global rank for PG ranks missing between the logged ones, when the members form an arithmetic
    progression (Megatron's TP/DP/PP groups do); and the PG ranks that stay unresolved."""
    seen = {r.pg_rank: r.rank for r in rows if r.pg_rank is not None}
    if not seen or max(seen) >= MAX_CREDIBLE_WORLD:  # a group no job has: nothing is inferred between its ranks
        return {}, []
    gaps = [k for k in range(max(seen) + 1) if k not in seen]
    if not gaps:
        return {}, []
    pts = sorted(seen.items())
    if len(pts) >= 2:
        (p0, g0), (p1, g1) = pts[0], pts[1]
        stride, rem = divmod(g1 - g0, p1 - p0)
        if rem == 0 and stride != 0 and all(g == g0 + stride * (p - p0) for p, g in pts):
            return {k: g0 + stride * (k - p0) for k in gaps}, []
    return {}, gaps


@dataclass(frozen=True, repr=False, eq=False)
class _Coverage:
    """What the job's coverage allows the classification to conclude."""

    world: int | None
    """World size from evidence about the world (never a sub-communicator), or None."""
    inv_ranks: set[int]
    missing: set[int]
    silent: set[int]
    """Ranks in the logs that logged no NCCL state at all."""
    whole: set[int]
    """Ranks with at least one log file longer than a pasted fragment: their silence can mean something."""
    all_unlabelled: bool
    """No row of the job names its PG (torch <= 2.2, or only PG-less lines in the excerpt)."""

    @property
    def complete(self) -> bool:
        """Every rank of a known world is in the logs: only then can absence or 'everyone' be concluded."""
        return self.world is not None and not self.missing

    def why_not(self) -> str:
        if self.world is None:
            return (
                "no line states the world size (Lightning MEMBER k/N, WORLD_SIZE, SLURM_NTASKS, torchrun "
                "global_world_sizes, the world communicator's nranks), so ranks outside these logs could be members"
            )
        return f"ranks {format_ranges(self.missing)} of the {self.world} are missing from the logs (no file has them)"


def _classify(
    pg: str | None, desc: str | None, rows: list[Row], cov: _Coverage
) -> tuple[ProcessGroupResult, list[Outlier]]:
    unlabelled = pg is None
    # A job whose rows name no PG at all and sit in one collective: that is the default PG (torch <= 2.2 logs it so).
    one_collective = len({(r.seq, r.op_type) for r in rows if r.seq is not None}) <= 1
    is_default = _is_default(pg, desc) or (unlabelled and cov.all_unlabelled and one_collective)
    ranks_here = {r.rank for r in rows}
    counts = Counter(_sig(r) for r in rows)
    major_sig, major_n = max(counts.items(), key=lambda kv: (kv[1], kv[0][4] == "detected"))
    major_rows = [r for r in rows if _sig(r) == major_sig]
    m_seq, m_e, m_c, m_op, m_signal = major_sig
    m_pending = (m_e - m_c) if m_e is not None and m_c is not None else None
    majority = Majority(m_seq, m_op, m_e, m_c, m_signal, format_ranges(r.rank for r in major_rows), major_n)

    # Who should be here but logged nothing for this PG: only where membership is known, never for unlabelled rows.
    absent_pg: list[int] = []
    absent: set[int] = set()
    absent_missing: set[int] = set()
    if is_default and cov.world is not None:  # every rank of the world is a member (no set of range(world))
        absent = {g for g in cov.inv_ranks if g < cov.world} - ranks_here
        absent_missing = cov.missing - ranks_here
    elif not unlabelled and not is_default:
        inferred, absent_pg = _infer_members(rows)
        absent = {g for g in inferred.values() if g in cov.inv_ranks}
        absent_missing = {g for g in inferred.values() if g not in cov.inv_ranks}

    outliers: list[Outlier] = []
    behind: dict[int, list[str]] = defaultdict(list)
    ahead: dict[int, list[str]] = defaultdict(list)
    elsewhere: dict[int, str] = {}
    names = ("seq", "last_enqueued", "last_completed", "op_type", "signal")
    for r in rows:
        s = _sig(r)
        if s == major_sig:
            continue
        differs = {n: [a, b] for n, a, b in zip(names, s, major_sig, strict=True) if a != b}
        how: list[str] = []
        pend = r.pending
        same_work = (
            r.seq is None or m_seq is None or (r.seq == m_seq and (r.op_type == m_op or None in (r.op_type, m_op)))
        )
        if pend == 0 and (m_pending or 0) > 0:
            how.append(f"enqueued == completed ({r.last_enqueued}): never entered the collective the others wait in")
            behind[r.rank].append(how[-1])
        if r.signal != "detected" and m_signal == "detected":
            src = f" from rank {r.dump_signal_from_rank}" if r.dump_signal_from_rank is not None else ""
            how.append(f"{r.signal} the dump signal{src} instead of detecting a timeout of its own")
            behind[r.rank].append(how[-1])
        if r.last_enqueued is not None and m_e is not None and same_work:
            if r.last_enqueued < m_e and not (pend == 0 and (m_pending or 0) > 0):
                how.append(f"behind: last enqueued {r.last_enqueued} < {m_e}")
                behind[r.rank].append(how[-1])
            elif r.last_enqueued > m_e:
                how.append(f"ahead: last enqueued {r.last_enqueued} > {m_e} by {r.last_enqueued - m_e}")
                ahead[r.rank].append(how[-1])
        elif not same_work:
            d = (r.seq or 0) - (m_seq or 0)
            where = f"SeqNum {r.seq} {r.op_type or ''}".strip()
            how.append(f"in a different collective: {where} vs {m_seq} {m_op or ''}".rstrip())
            elsewhere[r.rank] = where
            if r.seq is not None and m_seq is not None and d > 0:
                ahead[r.rank].append(f"ahead: timed out at SeqNum {r.seq} > {m_seq} by {d}")
        outliers.append(Outlier(r.rank, pg, differs, "; ".join(how) or "differs from the majority"))
    absent_usable = {g for g in absent if g in cov.whole} if cov.complete else set()
    for g in sorted(absent_usable):
        behind[g].append("logged no watchdog state for this PG while the others wait in it (its log is present)")

    res = ProcessGroupResult(
        straggler_reasons={str(g): ", ".join(why) for g, why in sorted(behind.items())},
        pg=pg,
        pg_desc=desc,
        is_default_pg=is_default,
        ranks=format_ranges(ranks_here),
        rank_count=len(ranks_here),
        classification="mixed",
        reason="",
        majority=majority,
        absent_ranks=format_ranges(absent | absent_missing),
        absent_pg_ranks=format_ranges(absent_pg),
        missing_ranks=format_ranges(cov.missing),
        pg_ids=sorted({r.pg_id for r in rows if r.pg_id is not None}),
    )
    label = f"PG {pg}" + (f" ({desc})" if desc else "") if pg is not None else "the process group"
    entered = f"SeqNum {m_seq} {m_op or ''}".strip() if m_seq is not None else "no failed work (this PG is idle)"
    state = (
        f"last enqueued {m_e} / completed {m_c}" if m_e is not None else "enqueued/completed not logged by this torch"
    )
    n_members = len(ranks_here | absent | absent_missing) + len(absent_pg)
    few = max(1, n_members // 4)
    root = [r for r in rows if r.rank in ahead and (r.pg_rank == 0 or (r.pg_rank is None and r.rank == 0))]
    positive = {g for g in behind if g not in absent_usable}

    if unlabelled and not is_default:
        res.classification = "incomplete"
        res.suspect_ranks = sorted(positive)
        diff = f"; they are in {len({(r.seq, r.op_type) for r in rows})} different collectives" if elsewhere else ""
        res.reason = (
            f"{len(rows)} row(s) name no process group (the line has no PG prefix and no labelled line of the same "
            f"rank and work says which){diff}: they are compared only among themselves and no rank is called absent "
            "from a PG whose members are unknown."
        )
    elif not cov.complete:
        res.classification = "incomplete"
        res.suspect_ranks = sorted(positive)
        sus = f"; among the ranks seen, {format_ranges(positive)} look(s) behind" if positive else ""
        odd = "; ".join(sorted(set(elsewhere.values())))
        mis = f"; ranks {format_ranges(elsewhere)} are in a different collective ({odd})" if elsewhere else ""
        res.reason = (
            f"{cov.why_not()}: a straggler among them cannot be ruled out, so none is named{sus}{mis}. "
            "Ask for every rank's (every node's) log file."
        )
    elif absent_pg:
        res.classification = "incomplete"
        res.suspect_ranks = sorted(positive)
        res.reason = (
            f"PG rank(s) {format_ranges(absent_pg)} of {label} logged no state and their global ranks cannot be "
            f"inferred from the {len(rows)} member(s) that did ({entered}, {state})."
        )
    elif len(rows) == 1 and not absent_usable:
        r0 = rows[0]
        res.classification = "incomplete"
        res.reason = (
            f"only rank {r0.rank} (PG rank {r0.pg_rank}) logged state for {label} ({entered}, {state}, "
            f"{r0.signal}); its peer(s) logged nothing for this PG and are not named by the logs: one rank alone says "
            "nothing about the others. Compare with the other PGs' tables."
        )
    elif ahead and len(ahead) == 1 and root and not (set(behind) - set(ahead)):
        r0 = root[0]
        k = (r0.last_enqueued - m_e) if r0.last_enqueued is not None and m_e is not None else None
        if k is None and r0.seq is not None and m_seq is not None:
            k = r0.seq - m_seq
        res.classification = "root_ahead"
        res.ahead_ranks = [r0.rank]
        res.ahead_by = k
        res.ahead_steps = round(k / PER_STEP_COLLECTIVES, 2) if k is not None else None
        steps = (
            f" = {res.ahead_steps:g} training step(s) at ~{PER_STEP_COLLECTIVES} collectives per step "
            "(PreemptionCallback broadcast + DDP allreduce + broadcast_buffers)"
            if k is not None
            else ""
        )
        res.reason = (
            f"rank {r0.rank} (PG rank 0, the broadcast root) is {k} op(s) ahead of the other {major_n} "
            f"({r0.last_enqueued if r0.last_enqueued is not None else r0.seq} vs "
            f"{m_e if m_e is not None else m_seq})"
            f"{steps}: the root finished its side of collectives the others never reached."
        )
    elif elsewhere:
        res.classification = "mismatch"
        res.suspect_ranks = sorted(positive)
        res.ahead_ranks = sorted(ahead)
        res.reason = (
            f"ranks of {label} timed out in different collectives: {majority.ranks} at {entered}, "
            + "; ".join(f"rank {g} at {w}" for g, w in sorted(elsewhere.items()))
            + ". The ranks did not issue the same collective sequence (a code-path divergence or a mislabelled PG),"
            " not a fabric hang; look at what the odd rank(s) ran before."
        )
    elif behind and not ahead:
        if len(behind) <= few and len(behind) < n_members:
            res.classification = "straggler"
            res.straggler_ranks = sorted(behind)
            res.reason = "; ".join(f"rank {g}: {', '.join(why)}" for g, why in sorted(behind.items())) + (
                f". The other {major_n} rank(s) ({majority.ranks}) are at {entered}, {state}, signal {m_signal}."
            )
        else:
            res.classification = "mixed"
            res.suspect_ranks = sorted(behind)
            res.reason = f"{len(behind)} of {n_members} ranks differ from the majority: too many to call a straggler."
    elif ahead and behind:
        res.classification = "mixed"
        res.ahead_ranks = sorted(ahead)
        res.suspect_ranks = sorted(behind)
        res.reason = f"ranks ahead ({format_ranges(ahead)}) and behind ({format_ranges(behind)}) the majority."
    elif ahead:
        res.classification = "mixed"
        res.ahead_ranks = sorted(ahead)
        res.reason = f"rank(s) {format_ranges(ahead)} are ahead of the majority ({entered}) but not the root alone."
    else:
        if not is_default and cov.silent:
            res.classification = "incomplete"
            res.reason = (
                f"every rank that logged state for {label} is at {entered} ({state}), but ranks "
                f"{format_ranges(cov.silent)} logged no NCCL state at all and could be members that never entered."
            )
        elif absent or absent_missing:
            res.classification = "incomplete"
            res.reason = (
                f"every rank that logged state for {label} is at {entered} ({state}), but member(s) "
                f"{format_ranges(absent | absent_missing)} have no row and only short log excerpts."
            )
        elif m_signal == "detected" and (m_pending is None or m_pending > 0) and m_seq is not None and major_n >= 2:
            res.classification = "fabric"
            caveat = "" if m_pending is not None else " (this torch version does not log enqueued/completed)"
            res.reason = (
                f"all {major_n} ranks entered {entered} ({state}) and each detected its own timeout{caveat}: no "
                "straggler; the collective itself hung (NCCL/network/GPU fabric)."
            )
        else:
            res.classification = "mixed"
            res.reason = f"all {major_n} ranks report the same state ({entered}, {state}, {m_signal})."
    return res, outliers
