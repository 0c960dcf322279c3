"""Matching every rank's flight-recorder entries per process group, and ranking the stalls across groups.

What torch's own analyzer (``torch/distributed/flight_recorder/components/builder.py``) does, kept: a group is its
name *and* its members (``split_group`` reuses names), read from each rank's own ``pg_config``; collectives match
across ranks by (group, ``collective_seq_id``); a match compares op, input and output sizes (not for all_to_all,
scatter, gather, whose sizes differ by design) and dtypes; a member without an entry for the collective is missing
from it, a member without a dump is reported as such. What is added, for a hang rather than a desync:

* each group's **stuck collective** (the lowest sequence number some member scheduled and did not complete), its
  joiners, the members that never joined it, those behind (scheduled while others started) or ahead;
* the **wavefront**: a group stalls when its first member enters the stuck collective; a rank missing from a group
  is *explained* when its own oldest incomplete entry elsewhere is older than that stall (it was already stuck
  there); the unexplained missing ranks are the roots, and the groups they hold up come first;
* what the dumps **accuse** (:class:`~debug_training_logs.analysis.fr_types.Accused`).

Completion: an entry is done when its state is ``completed``, when its group's ``pg_status`` (by ``pg_id``, per
dump) says so, or, for gloo (whose entries stay ``scheduled``), when it is ``retired``; and a group's collectives
complete in order on a rank, so everything up to its highest completed sequence number is done (the ops inside a
coalesced group are recorded without events and never leave ``scheduled``: the group's last entry completes them).

Memory stays bounded on any number of ranks: :func:`trim` keeps, per dump and group, only the last
:data:`KEEP_SEQS` collectives and what is still incomplete, and the frames of the entries that may be shown.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Final

from debug_training_logs.analysis.fr_types import (
    Accused,
    Cited,
    GroupFacts,
    Mismatch,
    RankState,
    StuckCollective,
)
from debug_training_logs.formats import flight_recorder as fr
from debug_training_logs.ranges import format_ranges

KEEP_SEQS: Final = 12
"""Collectives kept per dump and group below the first incomplete one (mismatches are looked for among them)."""
KEEP_P2P: Final = 8
FRAMES_SHOWN: Final = 6
SIZE_FREE_OPS: Final = frozenset(
    {"all_to_all", "all_to_all_single", "all_to_all_v_single", "alltoall", "alltoall_base"}
)
"""Ops whose input and output sizes legitimately differ between ranks (torch's analyzer does not compare them)."""
NO_INPUT_CHECK: Final = SIZE_FREE_OPS | {"scatter"}
NO_OUTPUT_CHECK: Final = SIZE_FREE_OPS | {"gather"}
_STATE_RANK: Final = {"scheduled": 0, "started": 1, "completed": 2}


def done(e: fr.Entry, d: fr.Dump) -> bool:
    """Whether ``e`` completed on ``d``'s rank (see the module docstring)."""
    if e.state == "completed":
        return True
    st = d.pg_status.get(str(e.pg_id)) if e.pg_id is not None else None
    if not e.is_p2p and st is not None and st.last_completed is not None and 0 < e.seq <= st.last_completed:
        return True
    return e.retired and e.backend in ("gloo", fr.HOOK_BACKEND)


def completed_upto(coll: list[fr.Entry], d: fr.Dump) -> int:
    """The highest sequence number of a group's collectives ``coll`` that completed on ``d``'s rank (-1: none)."""
    top = max((e.seq for e in coll if done(e, d)), default=-1)
    st = next((d.pg_status[str(e.pg_id)] for e in coll if str(e.pg_id) in d.pg_status), None)
    if st is not None and st.last_completed is not None:
        top = max(top, st.last_completed)
    return top


def trim(d: fr.Dump) -> fr.Dump:
    """``d`` with only what the comparison reads: per group the last :data:`KEEP_SEQS` collectives, everything from
    the first incomplete one on, the last :data:`KEEP_P2P` p2p ops; frames only on incomplete entries and on the
    dump's most recent one (its last call, shown for a rank that never joined)."""
    by_pg: dict[str, list[fr.Entry]] = defaultdict(list)
    for e in d.entries:
        by_pg[e.pg].append(e)
    shown = {d.entries[-1].index} if d.entries else set()
    kept: list[fr.Entry] = []
    for entries in by_pg.values():
        coll = [e for e in entries if not e.is_p2p]
        seqs = sorted({e.seq for e in coll})
        upto = completed_upto(coll, d)
        floor = min([*seqs[-KEEP_SEQS:], upto + 1]) if seqs else 0
        kept += [e for e in coll if e.seq >= floor]
        p2p = [e for e in entries if e.is_p2p][-KEEP_P2P:]
        kept += p2p
        shown |= {e.index for e in coll if e.seq > upto} | {e.index for e in p2p if not done(e, d)}
    kept.sort(key=lambda e: e.index)
    slim = [e if e.index in shown else dataclasses.replace(e, frames=()) for e in kept]
    return dataclasses.replace(d, entries=slim)


# ---------------------------------------------------------------------------------------------------------------------
# Groups


@dataclass
class _Group:
    name: str
    desc: str
    members: tuple[int, ...] | None
    entries: dict[int, list[fr.Entry]] = field(default_factory=dict)
    p2p: dict[int, list[fr.Entry]] = field(default_factory=dict)


def _collect(dumps: list[fr.Dump]) -> list[_Group]:
    """Every group some dump recorded, identified by name and members (each rank's own ``pg_config``)."""
    groups: dict[tuple[str, tuple[int, ...] | None], _Group] = {}
    ordered: dict[int, tuple[int, ...]] = {}  # id of a (shared) member tuple -> sorted, computed once
    for d in dumps:
        for e in d.entries:
            members = d.pg_ranks.get(e.pg)
            if members is not None and id(members) not in ordered:
                ordered[id(members)] = tuple(sorted(members))
            key = (e.pg, ordered[id(members)] if members is not None else None)
            g = groups.get(key)
            if g is None:
                g = groups[key] = _Group(e.pg, e.pg_desc or d.pg_desc.get(e.pg, ""), key[1])
            (g.p2p if e.is_p2p else g.entries).setdefault(d.rank, []).append(e)
    # a rank whose dump lists no members for a group joins the one group of that name whose members are known
    for (name, members), g in list(groups.items()):
        if members is not None:
            continue
        known = [k for k in groups if k[0] == name and k[1] is not None]
        if len(known) == 1:
            target = groups[known[0]]
            for r, es in g.entries.items():
                target.entries.setdefault(r, []).extend(es)
            for r, es in g.p2p.items():
                target.p2p.setdefault(r, []).extend(es)
            del groups[(name, members)]
    return list(groups.values())


def world_of(dumps: list[fr.Dump]) -> tuple[list[int], str]:
    """Every rank of the job as far as the dumps tell, and from what."""
    ranks = {d.rank for d in dumps}
    distinct = {id(m): m for d in dumps for m in d.pg_ranks.values()}  # shared tuples: each group once
    listed = {r for m in distinct.values() for r in m}
    default = next((m for d in dumps for n, m in d.pg_ranks.items() if d.pg_desc.get(n) == "default_pg"), None)
    if default is not None:
        return sorted(set(default) | ranks | listed), f"default_pg's members in the dumps' pg_config ({len(default)})"
    if listed:
        return sorted(listed | ranks), "the union of the groups' members in the dumps' pg_config and the ranks dumped"
    single = {tuple(d.unnamed_pg_ranks) for d in dumps if d.unnamed_pg_ranks is not None}
    if len({e.pg for d in dumps for e in d.entries}) == 1 and len(single) == 1:
        (members,) = single
        return sorted(set(members) | ranks), "the one group's ranks in the dumps' pg_config (gloo)"
    if not ranks:
        return [], "no dump"
    return list(range(max(ranks) + 1)), f"ranks 0-{max(ranks)} (the dumps list no group's members)"


def _members(g: _Group, world: list[int], single_group: bool) -> tuple[list[int], bool]:
    if g.members is not None:
        return sorted(g.members), True
    if g.desc == "default_pg" or single_group:
        return list(world), True
    return sorted(set(g.entries) | set(g.p2p)), False


# ---------------------------------------------------------------------------------------------------------------------
# One group


def _sig(entries: list[fr.Entry], what: str) -> str:
    e = entries[0]
    if what == "op":
        return "+".join(x.op for x in entries)
    if what == "input_sizes":
        return "" if e.op in NO_INPUT_CHECK else str(e.input_sizes)
    if what == "output_sizes":
        return "" if e.op in NO_OUTPUT_CHECK else str(e.output_sizes)
    return f"{','.join(sorted(set(e.input_dtypes)))}->{','.join(sorted(set(e.output_dtypes)))}"


def _mismatch(seq: int, at: dict[int, list[fr.Entry]]) -> Mismatch | None:
    """The first field (op, sizes, dtypes) the ranks' entries at ``seq`` differ in, odd ranks against the majority."""
    for what in ("op", "input_sizes", "output_sizes", "dtypes"):
        sig = {r: _sig(es, what) for r, es in at.items()}
        counts = Counter(sig.values()).most_common()
        if len(counts) < 2:
            continue
        (top, n), (_, n2) = counts[0], counts[1]
        if n == n2:  # no majority (two ranks disagreeing): every rank is odd
            return Mismatch(seq, what, dict(sorted(sig.items())), "")
        return Mismatch(seq, what, {r: s for r, s in sorted(sig.items()) if s != top}, top)
    return None


def _created(e: fr.Entry) -> int:
    """When ``e`` was enqueued (ns); an entry without a time sorts last (it explains nothing)."""
    return e.time_created_ns if e.time_created_ns is not None else 1 << 80


def _frames(e: fr.Entry) -> list[str]:
    return [f"{f.name} ({f.filename}:{f.line})" for f in e.frames[:FRAMES_SHOWN]]


def entry_text(e: fr.Entry, d: fr.Dump) -> str:
    """One line for an entry of ``d``: op, seq, sizes, dtypes, state (completed when it is done, whatever the state
    gloo left), group."""
    dt = ",".join(sorted(set(e.input_dtypes))) or "?"
    seq = f"p2p seq {e.p2p_seq}" if e.is_p2p else f"seq {e.seq}"
    same = [x for x in d.entries if x.pg == e.pg and not x.is_p2p]
    finished = done(e, d) if e.is_p2p else e.seq <= completed_upto(same, d)
    state = "completed" if finished else e.state
    return f"{e.op} {seq} in={e.input_sizes} {dt} {state} (PG {e.pg} {e.pg_desc})".strip()


def _cite(rank: int, d: fr.Dump, e: fr.Entry) -> Cited:
    return Cited(rank, d.file, e.index + 1, entry_text(e, d), e.time_created_ns)


def _group(g: _Group, members: list[int], known: bool, by_rank: dict[int, fr.Dump]) -> GroupFacts:
    facts = GroupFacts(pg=g.name, desc=g.desc, ranks=members, states={}, members_known=known)
    facts.no_dump = [r for r in members if r not in by_rank]
    per_seq: dict[int, dict[int, list[fr.Entry]]] = defaultdict(dict)
    first_incomplete: dict[int, int] = {}
    for r in members:
        d = by_rank.get(r)
        if d is None:
            continue
        coll = sorted(g.entries.get(r, []), key=lambda e: (e.seq, e.index))
        for e in coll:
            per_seq[e.seq].setdefault(r, []).append(e)
        upto = completed_upto(coll, d)
        pending = [e for e in coll if e.seq > upto]
        pending_p2p = [e for e in g.p2p.get(r, []) if not done(e, d)]
        st = next((d.pg_status[str(e.pg_id)] for e in coll if str(e.pg_id) in d.pg_status), None)
        facts.states[r] = RankState(
            rank=r,
            last_scheduled=coll[-1].seq if coll else None,
            last_started=st.last_started if st is not None and st.last_started not in (None, -1) else None,
            last_completed=upto if upto >= 0 else None,
            last_op=coll[-1].op if coll else None,
            file=d.file,
            waiting_since_ns=min((_created(e) for e in pending + pending_p2p), default=None),
            first_incomplete=pending[0].seq if pending else None,
        )
        if pending:
            first_incomplete[r] = pending[0].seq
    mm = next((m for seq in sorted(per_seq) if len(per_seq[seq]) > 1 and (m := _mismatch(seq, per_seq[seq]))), None)
    if mm is not None:
        facts.mismatches = [mm]
        for r in mm.odd:
            e = per_seq[mm.seq][r][0]
            facts.cited[r] = _cite(r, by_rank[r], e)
    if not first_incomplete:
        return facts
    n = min(first_incomplete.values())
    at = per_seq.get(n, {})
    top_op = Counter("+".join(x.op for x in es) for es in at.values()).most_common(1)[0][0] if at else "?"
    rep_rank = next((r for r, es in sorted(at.items()) if "+".join(x.op for x in es) == top_op), None)
    rep = at[rep_rank][0] if rep_rank is not None else None
    states = Counter(es[0].state for es in at.values())
    created = [es[0].time_created_ns for es in at.values() if es[0].time_created_ns]
    first = min(at.values(), key=lambda es: es[0].time_created_ns or 0)[0] if at else None
    facts.stuck = StuckCollective(
        seq=n,
        op=top_op,
        input_sizes=rep.input_sizes if rep else [],
        output_sizes=rep.output_sizes if rep else [],
        dtypes=sorted(set(rep.input_dtypes)) if rep else [],
        state=states.most_common(1)[0][0] if states else "",
        joined=sorted(at),
        stalled_ns=min(created) if created else None,
        frames=_frames(first) if first is not None else [],
    )
    if first is not None:
        r0 = next(r for r, es in at.items() if es[0] is first)
        facts.stuck.cited = _cite(r0, by_rank[r0], first)
    started = any(es[0].state == "started" for es in at.values())
    for r in members:
        s = facts.states.get(r)
        if s is None:
            continue
        if r not in at and (s.last_scheduled is None or s.last_scheduled < n):
            facts.never_joined.append(r)
        elif s.last_scheduled is not None and s.last_scheduled > n:
            facts.ahead.append(r)
        if r in at and started and at[r][0].state == "scheduled":
            facts.behind.append(r)
    for r in facts.never_joined + facts.behind:
        d = by_rank[r]
        mine = g.entries.get(r) or []
        cite = max(mine, key=lambda e: e.index) if mine else (d.entries[-1] if d.entries else None)
        if cite is not None:
            facts.cited[r] = _cite(r, d, cite)
        if d.entries:
            last = d.entries[-1]
            facts.last_calls[r] = [f"last call: {entry_text(last, d)}", *_frames(last)]
    return facts


# ---------------------------------------------------------------------------------------------------------------------
# The job


@dataclass
class Comparison:
    """The per-group facts (stalled first), the job's ranks and what the dumps accuse."""

    groups: list[GroupFacts]
    world: list[int]
    world_evidence: str
    no_dump: list[int]
    accused: Accused


def compare(dumps: list[fr.Dump]) -> Comparison:
    """Match the dumps per group, find each group's stuck collective, rank the stalls and name the roots."""
    by_rank = {d.rank: d for d in dumps}
    world, evidence = world_of(dumps)
    raw = _collect(dumps)
    single = len(raw) == 1
    groups = [_group(g, *_members(g, world, single), by_rank) for g in raw]
    _explain(groups, ProgramOrder(dumps))
    stuck = sorted(
        (g for g in groups if g.stuck is not None),
        key=lambda g: (not g.roots, g.stuck.stalled_ns if g.stuck and g.stuck.stalled_ns else 1 << 80, g.label()),
    )
    for i, g in enumerate(stuck):
        g.order = i
    rest = sorted((g for g in groups if g.stuck is None), key=lambda g: (not g.mismatches, g.label()))
    ordered = stuck + rest
    return Comparison(
        ordered, world, evidence, [r for r in world if r not in by_rank], _accuse(ordered, world, by_rank)
    )


Point = tuple[str, int]
"""A program point: (kind of group, collective sequence number). Groups of one kind (their description: every TP
group, every DP group) run the same collectives in the same order in an SPMD job, so one rank's record order tells
the order of the points on all (a group without a description is a kind of its own)."""


def _kind(pg: str, desc: str) -> str:
    return desc if desc and desc != "undefined" else f"pg {pg}"


class ProgramOrder:
    """Which of two program points a rank reaches first, voted by the ranks whose dumps show it: directly (a rank
    recorded both: record order is enqueue order), else by omission (a rank recorded one and is not yet at the
    other). Answers are cached: a job has few distinct points."""

    def __init__(self, dumps: list[fr.Dump]) -> None:
        self.at: dict[int, dict[Point, int]] = {}
        self.last: dict[int, dict[str, int]] = {}
        for d in dumps:
            at: dict[Point, int] = {}
            last: dict[str, int] = {}
            for e in d.entries:
                if e.is_p2p:
                    continue
                k = _kind(e.pg, e.pg_desc)
                at.setdefault((k, e.seq), e.index)
                last[k] = max(last.get(k, e.seq), e.seq)
            self.at[d.rank], self.last[d.rank] = at, last
        self.memo: dict[tuple[Point, Point], bool | None] = {}

    def before(self, a: Point, b: Point) -> bool | None:
        """Whether point ``a`` comes before ``b`` (None: the dumps do not tell, or disagree evenly)."""
        key = (a, b)
        if key not in self.memo:
            self.memo[key] = self._vote(a, b)
        return self.memo[key]

    def _vote(self, a: Point, b: Point) -> bool | None:
        direct = [0, 0]
        omitted = [0, 0]
        for r, at in self.at.items():
            ia, ib = at.get(a), at.get(b)
            if ia is not None and ib is not None:
                direct[ia < ib] += 1
                if sum(direct) >= 64:
                    break
            elif ib is not None and a[0] in self.last[r] and self.last[r][a[0]] < a[1]:
                omitted[0] += 1  # reached b, not yet a
            elif ia is not None and b[0] in self.last[r] and self.last[r][b[0]] < b[1]:
                omitted[1] += 1
        votes = direct if sum(direct) else omitted
        return None if votes[0] == votes[1] else votes[1] > votes[0]


def _explain(groups: list[GroupFacts], order: ProgramOrder) -> None:
    """Fill each stuck group's ``explained`` and ``roots``: a rank the group waits for is explained when it waits in
    another group at a point that comes before this group's stuck collective (program order; when the dumps do not
    tell, when it started waiting there before this group stalled)."""
    waits: dict[int, list[tuple[int, Point | None, GroupFacts]]] = defaultdict(list)
    for g in groups:
        for r, s in g.states.items():
            if s.waiting_since_ns is None:
                continue
            point = (_kind(g.pg, g.desc), s.first_incomplete) if s.first_incomplete is not None else None
            waits[r].append((s.waiting_since_ns, point, g))
    for g in groups:
        if g.stuck is None:
            g.roots = [r for m in g.mismatches for r in m.odd]
            continue
        odd = {r for m in g.mismatches for r in m.odd}
        here: Point = (_kind(g.pg, g.desc), g.stuck.seq)
        stalled = g.stuck.stalled_ns
        for r in g.awaited:
            if r in odd or r in g.no_dump:
                continue
            for since, point, h in sorted(waits.get(r, []), key=lambda w: w[0]):
                if h is g:
                    continue
                first = order.before(point, here) if point is not None and point[0] != here[0] else None
                if first or (first is None and stalled is not None and since < stalled):
                    where = f"{h.stuck.op} seq {h.stuck.seq}" if h.stuck is not None else "a p2p op"
                    g.explained[r] = f"waits in PG {h.pg} ({h.desc}) {where}"
                    break
        g.roots = [r for r in g.awaited if r not in g.explained]


def _accuse(groups: list[GroupFacts], world: list[int], by_rank: dict[int, fr.Dump]) -> Accused:
    missing_anywhere = any(r not in by_rank for r in world)
    culprits: set[int] = set()
    suspects: set[int] = set()
    kinds: set[str] = set()
    labels: list[str] = []
    for g in groups:
        if not g.roots:
            continue
        labels.append(g.label())
        odd = {r for m in g.mismatches for r in m.odd}
        sure = not g.no_dump and (g.members_known or not missing_anywhere)
        for r in g.roots:
            if r in odd:
                kinds.add("mismatch")
                clear = all(m.majority for m in g.mismatches)
                (culprits if clear and sure else suspects).add(r)
            elif r in g.no_dump:
                kinds.add("no_dump")
                suspects.add(r)
            else:
                kinds.add("never_joined" if r in g.never_joined else "behind")
                (culprits if sure else suspects).add(r)
    if not culprits and not suspects:
        stuck = [g for g in groups if g.stuck is not None]
        waiting = next((g for g in stuck if g.awaited), None)
        no_dump = frozenset(r for r in world if r not in by_rank)
        if waiting is not None and no_dump:
            # the dumped ranks all wait on one another: nothing among them starts the hang, so it starts at the
            # ranks that left no dump (a rank holding the GIL cannot write one; a group's member the gloo records
            # cannot show is one of them)
            return Accused(frozenset(), no_dump, "no_dump", (waiting.label(),))
        if waiting is not None:  # every missing rank waits elsewhere: a cycle; the group that stalled first decides
            return Accused(frozenset(), frozenset(waiting.awaited), "cycle", (waiting.label(),))
        return Accused(frozenset(), frozenset(), "all_joined" if stuck else "none", tuple(g.label() for g in stuck[:1]))
    suspects -= culprits
    how = next(k for k in ("mismatch", "never_joined", "behind", "no_dump") if k in kinds)
    return Accused(frozenset(culprits), frozenset(suspects), how, tuple(labels))


def describe(a: Accused) -> str:
    """A sentence on what the dumps accuse."""
    parts = []
    if a.culprits:
        parts.append(f"culprit(s) {format_ranges(a.culprits)}")
    if a.suspects:
        parts.append(f"suspect(s) {format_ranges(a.suspects)}")
    return f"{' and '.join(parts) or 'no rank'} ({a.how.replace('_', ' ')})"
