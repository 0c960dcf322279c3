"""What the flight-recorder dumps of a job say, as plain data: per process group, the collective it is stuck in and
who it waits for; for the job, the wavefront (which group stalled first) and the ranks the dumps accuse.

Types only, like torch's ``flight_recorder/components/types.py`` beside ``builder.py``: the matching that fills them
lives in :mod:`~debug_training_logs.analysis.fr_match`, finding and reading the files in
:mod:`~debug_training_logs.analysis.fr_dumps`. Nothing here reads a file.

Words used throughout:

* a group's **stuck collective**: the lowest collective sequence number some member scheduled and did not complete;
* **never joined**: a member whose dump has no entry at that sequence number (none in the group at all, or only
  older ones): it never enqueued the collective the others wait in;
* **no dump**: a member without a dump; nothing is known about it, and it may be the culprit (a crashed process
  writes none);
* **waits in**: a rank whose own oldest incomplete collective (or p2p op) is in a group, since that entry's time;
* a non-joiner is **explained** when it already waited in another group's stuck collective before this group
  stalled (it is a consequence); the unexplained ones are the **roots**: ranks the hang starts from.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from debug_training_logs.formats import flight_recorder as fr
from debug_training_logs.ranges import format_ranges

if TYPE_CHECKING:
    from debug_training_logs.models import Coverage

RANKS_CHARS = 120
"""A rank set longer than this as a range string is cut (its count is given)."""


def short_ranges(ranks: Iterable[int], limit: int = RANKS_CHARS) -> str:
    """A range string cut at ``limit`` characters with the count when longer (a strided DP group of 5,000 ranks);
    formats only the first ranks, so it costs the same for any size."""
    ordered = sorted(set(ranks))
    text = format_ranges(ordered[: limit // 2 + 1])
    if len(text) <= limit and len(ordered) <= limit // 2 + 1:
        return text
    if len(text) > limit:
        text = text[:limit].rsplit(",", 1)[0]
    return f"{text},… ({len(ordered)} ranks)"


@dataclass(frozen=True)
class Refused:
    """A dump file not read, and why (hostile opcode, size cap, not a dump, a second dump of the same rank)."""

    file: str
    reason: str


@dataclass(frozen=True)
class Cited:
    """A dump entry an accusation rests on: whose dump, which file, which entry, and what it says."""

    rank: int
    file: str
    index: int
    """1-based position of the entry in the dump's ``entries`` (oldest first): what ``file:line`` cites."""
    text: str
    """One line: ``all_reduce seq 7 in=[[8]] Float scheduled (PG 5 TENSOR_MODEL_PARALLEL_GROUP)``."""
    time_ns: int | None = None
    """The entry's ``time_created_ns``."""


@dataclass
class RankState:
    """One rank's view of one group: last collective scheduled / started / completed (sequence numbers, None when
    the dump does not say), the op of its last scheduled entry, and since when it waits in the group (the creation
    time of its oldest incomplete entry there, ns; None when nothing of its own is incomplete)."""

    rank: int
    last_scheduled: int | None
    last_started: int | None
    last_completed: int | None
    last_op: str | None
    file: str
    waiting_since_ns: int | None = None
    first_incomplete: int | None = None
    """The lowest sequence number this rank scheduled in the group and did not complete."""


@dataclass
class Mismatch:
    """Ranks that scheduled the same collective (``seq``) differently from the majority: ``field`` says what differs
    (op, input_sizes, output_sizes, dtypes); ``odd`` are the ranks that differ (what they ran), ``majority`` what most
    ranks ran ('' when no majority exists, e.g. two ranks disagreeing: then every rank is odd)."""

    seq: int
    field: str
    odd: dict[int, str]
    majority: str


@dataclass
class StuckCollective:
    """The collective a group waits in, as its joiners recorded it (the majority's op, sizes and dtypes)."""

    seq: int
    op: str
    input_sizes: list[list[int]]
    output_sizes: list[list[int]]
    dtypes: list[str]
    state: str
    joined: list[int]
    """Members whose dump has this collective (incomplete or done)."""
    stalled_ns: int | None
    """When the first member entered it (earliest ``time_created_ns`` of the joiners' entries)."""
    frames: list[str] = field(default_factory=list)
    """The Python stack that scheduled it (the first joiner's entry)."""
    cited: Cited | None = None
    """The first joiner's entry for it."""


@dataclass
class GroupFacts:
    """What the dumps say about one process group (its identity: name and members)."""

    pg: str
    desc: str
    ranks: list[int]
    states: dict[int, RankState]
    members_known: bool = True
    """The members come from ``pg_config``; False: inferred from the ranks whose dumps recorded the group (gloo)."""
    stuck: StuckCollective | None = None
    never_joined: list[int] = field(default_factory=list)
    behind: list[int] = field(default_factory=list)
    """Joined the stuck collective, but in an earlier state than the others (scheduled while they started)."""
    ahead: list[int] = field(default_factory=list)
    """Recorded collectives past the stuck one."""
    no_dump: list[int] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    explained: dict[int, str] = field(default_factory=dict)
    """Awaited ranks that already waited elsewhere when this group stalled: rank -> where ('PG 5 (TP) seq 7')."""
    roots: list[int] = field(default_factory=list)
    """Awaited ranks nothing else explains: where the hang starts, as far as this group shows."""
    order: int | None = None
    """Position in the wavefront: 0 for the group that stalled first (None: not stuck)."""
    last_calls: dict[int, list[str]] = field(default_factory=dict)
    """For each never-joined or behind rank: its last recorded call (op, group) and the Python frames of it."""
    cited: dict[int, Cited] = field(default_factory=dict)
    """For each accused rank: the dump entry that shows it (its last entry in the group, or the odd one)."""

    @property
    def awaited(self) -> list[int]:
        """Who the group waits for: never joined, mismatching, without a dump, and (when nobody is missing) behind."""
        odd = {r for m in self.mismatches for r in m.odd}
        base = set(self.never_joined) | odd | set(self.no_dump if self.stuck is not None else [])
        if self.stuck is not None and not base:
            base |= set(self.behind)
        return sorted(base)

    # The names the NCCL table and older callers read.
    @property
    def waiting_seq(self) -> int | None:
        return self.stuck.seq if self.stuck is not None else None

    @property
    def waiting_op(self) -> str | None:
        return self.stuck.op if self.stuck is not None else None

    @property
    def waiting_ranks(self) -> list[int]:
        if self.stuck is None:
            return []
        return sorted(r for r in self.stuck.joined if (s := self.states.get(r)) and s.waiting_since_ns is not None)

    @property
    def stuck_frames(self) -> list[str]:
        return self.stuck.frames if self.stuck is not None else []

    def label(self) -> str:
        """``PG 5 (TENSOR_MODEL_PARALLEL_GROUP, ranks 8-9)``."""
        return f"PG {self.pg} ({self.desc or 'no desc'}, ranks {short_ranges(self.ranks, 60) or '?'})"


@dataclass(frozen=True)
class Accused:
    """The ranks the dumps name for a hang: ``culprits`` when every member of the group they hold up has a dump,
    ``suspects`` otherwise (or when only a cycle or a missing dump points at them). ``how``: ``mismatch`` (a
    different op/size/dtype), ``never_joined``, ``no_dump`` (only ranks without a dump are missing), ``behind``,
    ``all_joined`` (every member entered and none completed: no rank to name), ``none``. ``groups``: the labels of
    the groups whose waiting shows it, stalled first."""

    culprits: frozenset[int]
    suspects: frozenset[int]
    how: str
    groups: tuple[str, ...] = ()


@dataclass
class FlightRecorderFacts:
    """Every dump read for a job, what was refused, and the per-group comparison, stalled-first."""

    dumps: list[fr.Dump]
    refused: list[Refused]
    groups: list[GroupFacts]
    versions: list[str]
    files_found: int
    world: list[int] = field(default_factory=list)
    """Every rank the dumps know of: the union of the groups' members and the ranks that dumped."""
    world_evidence: str = ""
    no_dump: list[int] = field(default_factory=list)
    """Ranks of ``world`` without a dump."""
    accused_ranks: Accused = field(default_factory=lambda: Accused(frozenset(), frozenset(), "none"))
    bytes_read: int = 0

    def accused(self) -> Accused:
        """(culprits, suspects, how): the ranks the dumps name, see :class:`Accused`."""
        return self.accused_ranks

    @property
    def culprits(self) -> tuple[set[int], str]:
        """Ranks the dumps name (culprits and suspects together) and how; empty when they name none."""
        a = self.accused_ranks
        named = set(a.culprits | a.suspects)
        return (named, a.how) if named else (set(), "none")

    @property
    def stuck_groups(self) -> list[GroupFacts]:
        """The groups with a stuck collective or a mismatch, stalled first (roots before the groups they hold up)."""
        return [g for g in self.groups if g.stuck is not None or g.mismatches]

    def contradicts(self, culprits: set[int]) -> str | None:
        """Why the dumps contradict naming ``culprits`` as the cause of a hang, or None.

        A culprit that the dumps show *waiting in* the collective the others are stuck in (it joined) while other
        ranks never joined it, or a mismatch the dumps pin on other ranks, contradicts the claim."""
        named, how = self.culprits
        if not named or not culprits:
            return None
        if culprits & named:
            return None
        return (
            f"the flight-recorder dumps name rank(s) {sorted(named)} ({how.replace('_', ' ')}), not {sorted(culprits)}"
        )


def dump_coverage(facts: FlightRecorderFacts, logs: Coverage) -> Coverage:
    """The coverage the dumps establish: the ranks that dumped against the world their groups list."""
    from debug_training_logs.logs.discovery import FR_DUMP_REASON
    from debug_training_logs.models import Coverage, UnreadableFile

    others = [u for u in logs.unreadable_files if u.reason != FR_DUMP_REASON and not u.reason.startswith("binary")]
    return Coverage(
        files_scanned=len(facts.dumps),
        bytes_scanned=facts.bytes_read,
        ranks_found=format_ranges(d.rank for d in facts.dumps),
        world_size=len(facts.world) or None,
        world_size_evidence=f"flight-recorder dumps, no worker log: {facts.world_evidence}",
        missing_ranks=format_ranges(facts.no_dump),
        unreadable_files=[UnreadableFile(file=x.file, reason=x.reason) for x in facts.refused] + others,
    )
